"""Entries and their file format (``<root>/v1/entries/ab/<key>.kce``).

File layout (all integers big-endian)::

    magic        8 bytes   b"KCACHE\\x00E"
    version      u16       FORMAT_VERSION (a larger one -> NewerFormat, file left untouched)
    flags        u16       0
    header_len   u32       <= MAX_HEADER
    body_len     u64       <= MAX_BODY
    header_sum  16 bytes   BLAKE2b-128 of the header (so headers can be listed without the body)
    header       msgpack   map: key, components, kernel, signature, arch, compile_seconds,
                           created, sizes, meta, and (entries written since 2026-12)
                           sums: artifact name -> SHA-256 of its bytes
    body         msgpack   map: artifact name (str) -> bytes
    checksum    32 bytes   BLAKE2b-256 of everything above

The magic, version field and trailing checksum form an envelope kept by every future version,
so a newer file is recognised (NewerFormat) only when its checksum is intact.

A cache hit (:func:`decode` with ``whole=False``) of an entry with ``sums`` checks every byte
it hands out without the trailing checksum: the header against its own sum, each artifact
against its SHA-256 (three times faster than BLAKE2b here: 17 against 48 us for a 20 KB entry
on the H200 machine's Python), the layout against the lengths and sizes. Whatever fails, or
an entry without ``sums``, is judged by the whole check, so the verdict and its wording are
the whole check's; only a file whose trailing 32 bytes alone are damaged is served by a hit
(its contents are intact) and reported by ``kcache verify``. ``sums`` is an added header
field: kcache versions that do not know it read these entries as before.

Invariants: the file size is exactly PREFIX + header_len + body_len + 32; every length is
checked against that size and the bounds before anything is allocated; msgpack is decoded with
``raw=False``, strict map keys, no ext types (so no Timestamp or custom objects) and length
limits. Nothing decoded is ever executed or imported: artifacts are returned as inert bytes.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import struct
import time
from typing import Any

import msgpack

from ..errors import CorruptEntry, NewerFormat

MAGIC = b"KCACHE\x00E"
FORMAT_VERSION = 1
_PREFIX = struct.Struct(">8sHHIQ16s")
PREFIX_SIZE = _PREFIX.size
SUM_SIZE = 32
MAX_HEADER = 16 << 20  # bytes
MAX_BODY = 4 << 30  # bytes; a cubin is rarely above a few MiB
MAX_FILE = PREFIX_SIZE + MAX_HEADER + MAX_BODY + SUM_SIZE

# Header fields lifted from Entry.meta (the rest of meta is kept as is inside "meta").
_META_FIELDS = {"kernel": str, "signature": str, "arch": str, "compile_seconds": (int, float)}


@dataclasses.dataclass
class Entry:
    """A cache entry: named artifacts and metadata.

    ``artifacts``: artifact name -> bytes, e.g. ``{"cubin": b"...", "ptx": b"...", "ltoir": b"..."}``.
    ``meta``: msgpack-encodable dict; ``kernel`` ("module:qualname"), ``signature``, ``arch``
    ("sm_90a") and ``compile_seconds`` (float, seconds) are also copied into the header.
    """

    artifacts: dict[str, bytes]
    meta: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.artifacts, dict):
            raise TypeError(f"Entry.artifacts must be a dict of name -> bytes, not {type(self.artifacts).__name__}")
        arts = {}
        for name, data in self.artifacts.items():
            if not isinstance(name, str):
                raise TypeError(f"Entry artifact name {name!r} is not a str")
            if isinstance(data, (bytearray, memoryview)):
                data = bytes(data)
            if not isinstance(data, bytes):
                raise TypeError(f"Entry artifact {name!r} must be bytes, not {type(data).__name__}")
            arts[name] = data
        self.artifacts = arts
        if self.meta is None:
            self.meta = {}
        if not isinstance(self.meta, dict):
            raise TypeError(f"Entry.meta must be a dict, not {type(self.meta).__name__}")

    @classmethod
    def _decoded(cls, artifacts: dict, meta: dict) -> "Entry":
        """An Entry of what :func:`decode` checked already (a dict of str -> bytes, a dict):
        the checks and copy of ``__post_init__`` are not made again on a hit."""
        entry = cls.__new__(cls)
        entry.artifacts, entry.meta = artifacts, meta
        return entry


#: Kinds of entry (``kcache ls --kind``): numba-cuda kernels (kcache.dispatcher) and cuda.core
#: programs (kcache.programs, whose key components name ``"producer": "program"``).
KINDS = ("kernel", "program")


def entry_kind(components: Any) -> str:
    """``"program"`` for an entry whose key ``components`` name the producer ``program``
    (kcache.programs), else ``"kernel"``."""
    return ("program" if isinstance(components, dict) and components.get("producer") == "program"
            else "kernel")


#: Decoding limits (the trust rules, docs/security.md): a header or meta this deep, with this
#: many container elements in all, or a string/bin this long, is corrupt. Real headers hold a
#: few hundred elements, nested 4-5 deep; the limits bound the memory a hostile header can
#: cost to a constant (about 20 MiB) whatever its size.
MAX_DEPTH = 32
MAX_ITEMS = 1 << 17  # elements of every array and map of one header, together
MAX_ARTIFACTS = 64  # artifacts in one body
MAX_NAME = 4096  # characters of kernel, arch, an artifact name
MAX_SIGNATURE = 1 << 16  # characters of a signature
MAX_CREATED = 1e11  # unix seconds (year 5138): anything later is not a time kcache wrote
MAX_SECONDS = 1e9  # compile_seconds: 31 years


class _Budget:
    """Counts the elements of every container msgpack builds and stops the decode past
    MAX_ITEMS (the hooks run as each container is completed, so one container of at most
    ``max_array_len`` elements is the most ever built beyond the budget)."""

    __slots__ = ("left",)

    def __init__(self, items: int):
        self.left = items

    def take(self, container):
        self.left -= len(container) + 1
        if self.left < 0:
            raise _OverBudget()
        return container


class _OverBudget(Exception):
    pass


def _no_ext(code: int, data: bytes):
    # max_ext_len=0 still lets a zero-length ext through: refuse every ext type here.
    raise ValueError(f"ext type {code} is not allowed")


_SMALL = 64 << 10  # bytes: data this short holds too few containers to need counting


def _unpack(data, *, items: int = MAX_ITEMS, max_len: int | None = None) -> Any:
    """msgpack decode of untrusted bytes: str map keys, no ext types, every length bounded
    by the input (and ``max_len``), at most ``items`` container elements in all (counted only
    for data above 64 KiB: each element takes a byte, so shorter data cannot exceed it)."""
    lim = len(data) if max_len is None else min(len(data), max_len)
    if len(data) <= min(_SMALL, items):
        return msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True,
                               max_str_len=len(data), max_bin_len=len(data), max_array_len=lim,
                               max_map_len=lim, max_ext_len=0, ext_hook=_no_ext)
    budget = _Budget(items)
    return msgpack.unpackb(
        data,
        raw=False,
        strict_map_key=True,
        use_list=True,
        max_str_len=len(data),
        max_bin_len=len(data),
        max_array_len=lim,
        max_map_len=lim,
        max_ext_len=0,  # no ext types at all (no Timestamp, no custom objects)
        ext_hook=_no_ext,
        list_hook=budget.take,
        object_hook=budget.take,
    )


def _decode_error(what: str, exc: Exception) -> CorruptEntry:
    if isinstance(exc, _OverBudget):
        return CorruptEntry(f"{what} has more than {MAX_ITEMS} elements", "limits")
    if isinstance(exc, msgpack.StackError):
        return CorruptEntry(f"{what} nested too deep", "limits")
    return CorruptEntry(f"{what} undecodable: {type(exc).__name__}",
                        "header_undecodable" if what == "header" else "artifacts")


def check_plain(value: Any, where: str) -> None:
    """Walk a decoded header value: nesting at most MAX_DEPTH, map keys str, floats finite.
    Raises CorruptEntry naming ``where``. The recursion stops at MAX_DEPTH: a deep value never
    exhausts the stack (msgpack itself stops at 1024 levels)."""
    _walk(value, where, 1)


def _walk(item: Any, where: str, depth: int) -> None:
    # Exact types (msgpack builds only these): the hot path of every listing and hit.
    kind = type(item)
    if kind is float:
        if not math.isfinite(item):
            raise CorruptEntry(f"header field {where!r} holds a non-finite number", "header")
        return
    if kind is not dict and kind is not list:
        return
    if depth > MAX_DEPTH:
        raise CorruptEntry(f"header field {where!r} nested deeper than {MAX_DEPTH}", "limits")
    if kind is dict:
        for key in item:
            if type(key) is not str:
                raise CorruptEntry(f"header field {where!r} has a map key that is not text", "header")
        values = item.values()
    else:
        values = item
    for value in values:
        vkind = type(value)
        if vkind is dict or vkind is list:
            _walk(value, where, depth + 1)
        elif vkind is float and not math.isfinite(value):
            raise CorruptEntry(f"header field {where!r} holds a non-finite number", "header")


def encode(key: str, entry: Entry, components: dict | None = None, created: float | None = None) -> bytes:
    """Serialize ``entry`` under ``key`` to the file format above. TypeError if meta or
    components are not msgpack-encodable."""
    meta = entry.meta
    header = {
        "key": key,
        "components": components or {},
        "created": float(created if created is not None else time.time()),
        "sizes": {k: len(v) for k, v in entry.artifacts.items()},
        "meta": meta,
    }
    for field, typ in _META_FIELDS.items():
        val = meta.get(field)
        header[field] = val if isinstance(val, typ) and not isinstance(val, bool) else None
    # What a hit checks instead of the whole file's checksum (see the module docstring).
    header["sums"] = {k: hashlib.sha256(v).digest() for k, v in entry.artifacts.items()}
    try:
        hbytes = msgpack.packb(header, use_bin_type=True, strict_types=False)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"entry meta/components for key {key} are not msgpack-encodable: {exc}") from None
    try:  # never write what the verification path would refuse to read
        check_header(_unpack(hbytes), key)
    except CorruptEntry as exc:
        raise ValueError(f"entry for key {key} cannot be stored: {exc}") from None
    except Exception as exc:  # over the decoding limits
        raise ValueError(f"entry for key {key} cannot be stored: {_decode_error('header', exc)}") from None
    body = msgpack.packb(entry.artifacts, use_bin_type=True)
    if len(hbytes) > MAX_HEADER or len(body) > MAX_BODY:
        raise ValueError(f"entry {key} too large: header {len(hbytes)} / body {len(body)} bytes")
    prefix = _PREFIX.pack(MAGIC, FORMAT_VERSION, 0, len(hbytes), len(body),
                          hashlib.blake2b(hbytes, digest_size=16).digest())
    h = hashlib.blake2b(digest_size=SUM_SIZE)
    for part in (prefix, hbytes, body):
        h.update(part)
    return b"".join((prefix, hbytes, body, h.digest()))


def parse_prefix(prefix: bytes, file_size: int) -> tuple[int, int, bytes]:
    """Check the fixed prefix against the file size; return (header_len, body_len, header_sum).

    Raises NewerFormat for a newer version, CorruptEntry (with its ``code``) for anything
    else wrong. Needs only the first PREFIX_SIZE bytes: a file is judged by its prefix before
    the rest is read."""
    if len(prefix) < PREFIX_SIZE or file_size < PREFIX_SIZE:
        raise CorruptEntry(f"truncated: {file_size} bytes", "truncated")
    magic, version, flags, hlen, blen, hsum = _PREFIX.unpack_from(prefix)
    if magic != MAGIC:
        raise CorruptEntry("bad magic", "bad_magic")
    if version > FORMAT_VERSION:
        raise NewerFormat(f"entry format version {version} is newer than this kcache's {FORMAT_VERSION}")
    if version != FORMAT_VERSION:
        raise CorruptEntry(f"unknown format version {version}", "version")
    if flags != 0:  # version 1 defines no flag: a set one is damage or a forgery
        raise CorruptEntry(f"unknown flags {flags:#06x}", "version")
    if hlen > MAX_HEADER or blen > MAX_BODY:
        raise CorruptEntry(f"absurd lengths: header {hlen}, body {blen}", "lengths")
    expected = PREFIX_SIZE + hlen + blen + SUM_SIZE
    if file_size < expected:  # one wording per problem, whichever check meets it (docs/cli.md)
        raise CorruptEntry(f"truncated: {file_size} of {expected} bytes", "truncated")
    if file_size != expected:
        raise CorruptEntry(f"size mismatch: lengths say {expected}, file has {file_size}",
                           "size_mismatch")
    return hlen, blen, hsum


def check_head(head: bytes, file_size: int) -> None:
    """What can be judged from an entry file's first PREFIX_SIZE bytes and its size, before
    reading the rest (a 4 GiB file with a bad magic is never read): CorruptEntry for a bad
    magic, a short file or lengths that disagree with the size. A version other than this
    one is left for :func:`decode`, which checks the checksum first (a flipped bit in the
    version field is corruption, not a newer format)."""
    if len(head) >= len(MAGIC) + 2 and head[:len(MAGIC)] == MAGIC:
        version = int.from_bytes(head[len(MAGIC):len(MAGIC) + 2], "big")
        if version != FORMAT_VERSION:
            return
    parse_prefix(head, file_size)


_TEXT_FIELDS = (("kernel", MAX_NAME), ("arch", MAX_NAME), ("signature", MAX_SIGNATURE),
                ("sigspec", MAX_SIGNATURE))


def _check_text(h: dict, field: str, limit: int) -> None:
    val = h.get(field)
    if val is not None and (not isinstance(val, str) or len(val) > limit):
        raise CorruptEntry(f"header field {field!r} has wrong type", "header")


def _check_number(h: dict, field: str, high: float) -> None:
    val = h.get(field)
    if val is None:
        return
    if not isinstance(val, (int, float)) or isinstance(val, bool) or not 0 <= val <= high:
        raise CorruptEntry(f"header field {field!r} is out of range (0 .. {high:g})", "header")


def check_header(h: Any, key: str) -> dict:
    """Validate a decoded header against the schema: types and ranges of every field, map
    keys text, floats finite, nesting bounded. CorruptEntry naming the first bad field."""
    if not isinstance(h, dict):
        raise CorruptEntry("header is not a map", "header")
    if h.get("key") != key:
        raise CorruptEntry(f"header key {h.get('key')!r:.80} does not match file name", "header")
    for field, typ in (("components", dict), ("meta", dict), ("sizes", dict)):
        if not isinstance(h.get(field), typ):
            raise CorruptEntry(f"header field {field!r} has wrong type", "header")
    if h.get("created") is None:
        raise CorruptEntry("header field 'created' has wrong type", "header")
    _check_number(h, "created", MAX_CREATED)
    sums = h.get("sums")
    if sums is not None and not _sums_ok(sums):
        raise CorruptEntry("header field 'sums' has wrong type", "header")
    for where in (h, h["meta"]):  # meta holds the same fields (they are copied from it)
        # Every hit checks these: the usual case (text of a sane length, or absent) in one
        # pass, the wording of a problem from the helpers.
        for field, limit in _TEXT_FIELDS:
            val = where.get(field)
            if val is not None and (type(val) is not str or len(val) > limit):
                _check_text(where, field, limit)
        if where.get("compile_seconds") is not None:
            _check_number(where, "compile_seconds", MAX_SECONDS)
    for name, size in h["sizes"].items():
        if (not isinstance(name, str) or len(name) > MAX_NAME or not isinstance(size, int)
                or isinstance(size, bool) or not 0 <= size <= MAX_BODY):
            raise CorruptEntry("header field 'sizes' has wrong type", "header")
    if len(h["sizes"]) > MAX_ARTIFACTS:
        raise CorruptEntry(f"more than {MAX_ARTIFACTS} artifacts", "limits")
    for field in ("components", "meta"):
        check_plain(h[field], field)
    return h


def _sums_ok(sums) -> bool:
    """``sums`` is a map of at most MAX_ARTIFACTS names (text) to SHA-256 digests (32 bytes)."""
    return (type(sums) is dict and len(sums) <= MAX_ARTIFACTS
            and all(type(k) is str and len(k) <= MAX_NAME and type(v) is bytes and len(v) == 32
                    for k, v in sums.items()))


def _header(hbytes, key: str) -> dict:
    """Unpack and check header bytes (their integrity already established)."""
    try:
        h = _unpack(hbytes)
    except Exception as exc:  # msgpack raises several types for bad input
        raise _decode_error("header", exc) from None
    return check_header(h, key)


def decode_header(data, key: str, file_size: int) -> dict:
    """Decode and check the header from the first bytes of an entry file (at least
    PREFIX_SIZE + header_len of them), without the body: its own BLAKE2b-128 is checked."""
    hlen, _blen, hsum = parse_prefix(bytes(data[:PREFIX_SIZE]), file_size)
    hbytes = memoryview(data)[PREFIX_SIZE:PREFIX_SIZE + hlen]
    if len(hbytes) != hlen or hashlib.blake2b(hbytes, digest_size=16).digest() != hsum:
        raise CorruptEntry("header checksum mismatch", "header_checksum")
    return _header(hbytes, key)


def decode(data: bytes, key: str, *, whole: bool = True,
           intact: bool = False) -> tuple[dict, Entry]:
    """Fully check an entry file's bytes; return (header, Entry). Peak memory: the artifacts
    (at most ``len(data)``) plus a constant; nothing is sliced off ``data`` by copy.
    ``whole=False`` (a cache hit): an entry with per-artifact sums is checked by them instead
    of the trailing checksum (module docstring); the verdict on anything else is the whole
    check's. ``intact``: the caller compared every byte with a digest it trusts
    (kcache.tiers.Blob.intact): no checksum of the entry's own is computed; format, bounds and
    schema are checked as ever.

    Raises NewerFormat or CorruptEntry (with the reason and its ``code``)."""
    if not whole and not intact:
        try:
            found = _decode_by_sums(data, key)
        except Exception:  # judged, and worded, by the whole check below
            found = None
        if found is not None:
            return found
    size = len(data)
    if size > MAX_FILE:
        raise CorruptEntry(f"file too large: {size} bytes", "too_large")
    view = memoryview(data)
    head = bytes(view[:PREFIX_SIZE])
    if size < PREFIX_SIZE + SUM_SIZE or head[:len(MAGIC)] != MAGIC:
        check_head(head, size)  # raises: truncated, bad magic
        raise CorruptEntry(f"truncated: {size} bytes", "truncated")
    # The envelope (magic, version, ..., trailing BLAKE2b-256 of all before it) is the same in
    # every format version, so the checksum is checked before the version: a flipped bit in
    # the version field is corruption, not a "newer format".
    if not intact and hashlib.blake2b(view[:-SUM_SIZE],
                                      digest_size=SUM_SIZE).digest() != view[-SUM_SIZE:]:
        check_head(head, size)  # a short file is "truncated", whatever its checksum says
        raise CorruptEntry("checksum mismatch", "checksum")
    hlen, blen, hsum = parse_prefix(head, size)
    hbytes = view[PREFIX_SIZE:PREFIX_SIZE + hlen]
    # The header's own sum must agree too (a listing trusts it alone): a file whose parts
    # disagree is corrupt, whatever its trailing checksum says.
    if not intact and hashlib.blake2b(hbytes, digest_size=16).digest() != hsum:
        raise CorruptEntry("header checksum mismatch", "header_checksum")
    h = _header(hbytes, key)
    try:
        arts = _unpack(view[PREFIX_SIZE + hlen:PREFIX_SIZE + hlen + blen], max_len=MAX_ARTIFACTS)
    except Exception as exc:
        raise _decode_error("artifacts", exc) from None
    if not isinstance(arts, dict) or not all(isinstance(k, str) and isinstance(v, bytes) for k, v in arts.items()):
        raise CorruptEntry("artifacts are not a map of name -> bytes", "artifacts")
    if {k: len(v) for k, v in arts.items()} != h["sizes"]:
        raise CorruptEntry("artifact sizes disagree with the header", "artifacts")
    return h, Entry._decoded(arts, h["meta"])


def _decode_by_sums(data, key: str) -> tuple[dict, Entry] | None:
    """(header, Entry) when ``data`` is a well-formed entry of ``key`` in this format whose
    header matches its sum and whose artifacts match the header's SHA-256 sums; None for an
    entry without sums. Raises (anything) for whatever else: the caller then runs the whole
    check, which says what is wrong."""
    size = len(data)
    if size > MAX_FILE or size < PREFIX_SIZE + SUM_SIZE:
        return None
    view = memoryview(data)
    hlen, blen, hsum = parse_prefix(bytes(view[:PREFIX_SIZE]), size)
    hbytes = view[PREFIX_SIZE:PREFIX_SIZE + hlen]
    if hashlib.blake2b(hbytes, digest_size=16).digest() != hsum:
        return None
    h = _header(hbytes, key)
    sums = h.get("sums")
    if sums is None:
        return None
    arts = _unpack(view[PREFIX_SIZE + hlen:PREFIX_SIZE + hlen + blen], max_len=MAX_ARTIFACTS)
    if type(arts) is not dict or arts.keys() != sums.keys():
        return None
    sha256 = hashlib.sha256
    for name, data_ in arts.items():
        if type(data_) is not bytes or sha256(data_).digest() != sums[name]:
            return None
    if {k: len(v) for k, v in arts.items()} != h["sizes"]:
        return None
    return h, Entry._decoded(arts, h["meta"])


def envelope_sum_holds(fd: int, size: int) -> bool:
    """True when the trailing checksum of the open entry file ``fd`` (``size`` bytes, from
    its ``fstat``) matches the bytes before it: the one check of an entry's envelope that
    every format version shares (:func:`decode` checks it before the version). Read in
    chunks, so memory stays bounded whatever the file's size. Raises OSError."""
    if size < PREFIX_SIZE + SUM_SIZE:
        return False
    h = hashlib.blake2b(digest_size=SUM_SIZE)
    left = size - SUM_SIZE
    while left:
        chunk = os.read(fd, min(left, _CHUNK))
        if not chunk:
            return False  # shorter than its fstat said
        h.update(chunk)
        left -= len(chunk)
    tail = os.read(fd, SUM_SIZE)
    return len(tail) == SUM_SIZE and h.digest() == tail


_CHUNK = 1 << 20  # bytes read at a time by envelope_sum_holds


def decode_verified(data, key: str) -> tuple[dict, Entry]:
    """(header, Entry) of entry bytes that :func:`decode` accepted before as ``key``'s, byte
    for byte (kcache.verified): unpacked afresh (so no caller shares the objects another got),
    with the same decoding limits, but neither checksummed nor schema-checked again: the same
    bytes pass the same way."""
    view = memoryview(data)
    _magic, _version, _flags, hlen, blen, _hsum = _PREFIX.unpack_from(view)
    h = _unpack(view[PREFIX_SIZE:PREFIX_SIZE + hlen])
    arts = _unpack(view[PREFIX_SIZE + hlen:PREFIX_SIZE + hlen + blen], max_len=MAX_ARTIFACTS)
    if key != h.get("key"):  # cannot happen for bytes decode() accepted as key's: a cheap guard
        raise CorruptEntry(f"header key {h.get('key')!r:.80} does not match file name", "header")
    return h, Entry(arts, h["meta"])


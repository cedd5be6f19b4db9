"""Entries and their file format (``<root>/v1/entries/ab/<key>.kce``).

File layout (all integers big-endian)::

    magic        8 bytes   b"KCACHE\\x00E"
    version      u16       FORMAT_VERSION (a larger one -> NewerFormat, file left untouched)
    flags        u16       0
    header_len   u32       <= MAX_HEADER
    body_len     u64       <= MAX_BODY
    header_sum  16 bytes   BLAKE2b-128 of the header (so headers can be listed without the body)
    header       msgpack   map: key, components, kernel, signature, arch, compile_seconds,
                           created, sizes, meta
    body         msgpack   map: artifact name (str) -> bytes
    checksum    32 bytes   BLAKE2b-256 of everything above

The magic, version field and trailing checksum form an envelope kept by every future version,
so a newer file is recognised (NewerFormat) only when its checksum is intact.

Invariants: the file size is exactly PREFIX + header_len + body_len + 32; every length is
checked against that size and the bounds before anything is allocated; msgpack is decoded with
``raw=False``, strict map keys, no ext types (so no Timestamp or custom objects) and length
limits. Nothing decoded is ever executed or imported: artifacts are returned as inert bytes.
"""
from __future__ import annotations

import dataclasses
import hashlib
import struct
import time
from pathlib import Path
from typing import Any

import msgpack

from .errors import CorruptEntry, NewerFormat

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


@dataclasses.dataclass
class EntryInfo:
    """Header of one entry (no payloads). Sizes in bytes, times in unix seconds.

    ``last_used`` is the file's mtime (a hit touches it); ``hits`` is the per-entry hit count
    from the stats shards (0 when unknown); ``readonly`` is True for entries of a read-only root.
    ``problem`` is None for a readable entry; for one whose header cannot be read (listed only
    by ``Store.entries(include_broken=True)`` / ``Store.find(..., include_broken=True)``) it
    says why, e.g. "truncated: 0 bytes", "bad magic", "not a regular file", "newer format:
    ..."; then ``created`` is the file's mtime, kernel/signature/arch/compile_seconds are None
    and components/sizes/meta are empty.
    """

    key: str
    path: Path
    root: Path
    readonly: bool
    file_size: int
    created: float
    last_used: float
    kernel: str | None
    signature: str | None
    arch: str | None
    compile_seconds: float | None
    components: dict
    sizes: dict
    meta: dict
    hits: int = 0
    problem: str | None = None


def _unpack(data: bytes) -> Any:
    lim = len(data)
    return msgpack.unpackb(
        data,
        raw=False,
        strict_map_key=True,
        use_list=True,
        max_str_len=lim,
        max_bin_len=lim,
        max_array_len=lim,
        max_map_len=lim,
        max_ext_len=0,  # no ext types at all (no Timestamp, no custom objects)
    )


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
    try:
        hbytes = msgpack.packb(header, use_bin_type=True, strict_types=False)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"entry meta/components for key {key} are not msgpack-encodable: {exc}") from None
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
    """Check the fixed prefix; return (header_len, body_len, header_sum).

    Raises NewerFormat for a newer version, CorruptEntry for anything else wrong."""
    if len(prefix) < PREFIX_SIZE:
        raise CorruptEntry(f"truncated: {file_size} bytes")
    magic, version, _flags, hlen, blen, hsum = _PREFIX.unpack_from(prefix)
    if magic != MAGIC:
        raise CorruptEntry("bad magic")
    if version > FORMAT_VERSION:
        raise NewerFormat(f"entry format version {version} is newer than this kcache's {FORMAT_VERSION}")
    if version != FORMAT_VERSION:
        raise CorruptEntry(f"unknown format version {version}")
    if hlen > MAX_HEADER or blen > MAX_BODY:
        raise CorruptEntry(f"absurd lengths: header {hlen}, body {blen}")
    expected = PREFIX_SIZE + hlen + blen + SUM_SIZE
    if file_size < expected:  # one wording per problem, whichever check meets it (docs/cli.md)
        raise CorruptEntry(f"truncated: {file_size} of {expected} bytes")
    if file_size != expected:
        raise CorruptEntry(f"size mismatch: lengths say {expected}, file has {file_size}")
    return hlen, blen, hsum


def check_header(h: Any, key: str) -> dict:
    """Validate a decoded header's types; CorruptEntry naming the first bad field."""
    if not isinstance(h, dict):
        raise CorruptEntry("header is not a map")
    if h.get("key") != key:
        raise CorruptEntry(f"header key {h.get('key')!r:.80} does not match file name")
    for field, typ in (("components", dict), ("meta", dict), ("sizes", dict), ("created", (int, float))):
        if not isinstance(h.get(field), typ) or isinstance(h.get(field), bool):
            raise CorruptEntry(f"header field {field!r} has wrong type")
    for field, typ in _META_FIELDS.items():
        val = h.get(field)
        if val is not None and (not isinstance(val, typ) or isinstance(val, bool)):
            raise CorruptEntry(f"header field {field!r} has wrong type")
    for name, size in h["sizes"].items():
        if not isinstance(name, str) or not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise CorruptEntry("header field 'sizes' has wrong type")
    return h


def decode_header(data: bytes, key: str, file_size: int) -> dict:
    """Decode and check the header from the first bytes of an entry file (at least
    PREFIX_SIZE + header_len of them)."""
    hlen, _blen, hsum = parse_prefix(data[:PREFIX_SIZE], file_size)
    hbytes = data[PREFIX_SIZE:PREFIX_SIZE + hlen]
    if len(hbytes) != hlen or hashlib.blake2b(hbytes, digest_size=16).digest() != hsum:
        raise CorruptEntry("header checksum mismatch")
    try:
        h = _unpack(hbytes)
    except Exception as exc:  # msgpack raises several types for bad input
        raise CorruptEntry(f"header undecodable: {type(exc).__name__}") from None
    return check_header(h, key)


def decode(data: bytes, key: str) -> tuple[dict, Entry]:
    """Fully check an entry file's bytes; return (header, Entry).

    Raises NewerFormat or CorruptEntry (with the reason)."""
    size = len(data)
    if size > MAX_FILE:
        raise CorruptEntry(f"file too large: {size} bytes")
    if size < PREFIX_SIZE + SUM_SIZE or data[:len(MAGIC)] != MAGIC:
        raise CorruptEntry(f"truncated: {size} bytes" if size < PREFIX_SIZE + SUM_SIZE else "bad magic")
    # The envelope (magic, version, ..., trailing BLAKE2b-256 of all before it) is the same in
    # every format version, so the checksum is checked before the version: a flipped bit in
    # the version field is corruption, not a "newer format".
    if hashlib.blake2b(memoryview(data)[:-SUM_SIZE], digest_size=SUM_SIZE).digest() != data[-SUM_SIZE:]:
        raise CorruptEntry("checksum mismatch")
    hlen, blen, _ = parse_prefix(data[:PREFIX_SIZE], size)
    h = decode_header(data, key, size)
    try:
        arts = _unpack(data[PREFIX_SIZE + hlen:PREFIX_SIZE + hlen + blen])
    except Exception as exc:
        raise CorruptEntry(f"artifacts undecodable: {type(exc).__name__}") from None
    if not isinstance(arts, dict) or not all(isinstance(k, str) and isinstance(v, bytes) for k, v in arts.items()):
        raise CorruptEntry("artifacts are not a map of name -> bytes")
    if {k: len(v) for k, v in arts.items()} != h["sizes"]:
        raise CorruptEntry("artifact sizes disagree with the header")
    return h, Entry(arts, h["meta"])

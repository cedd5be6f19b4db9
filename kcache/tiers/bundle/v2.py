"""Bundles: many entries in one file, for container builds (``kcache export`` / ``import``).

A bundle (format version 2, docs/containers.md "Bundle format") is an envelope whose
signature sits outside what it carries, so that it is checked before anything is parsed:

* a fixed prefix, ``struct ">8sHBI"``: magic ``KCACHEBN``, version 2, flags (1: signed,
  2: zstd), the header's length;
* the header: a msgpack map (at most 64 KiB) ``{"format", "version", "created",
  "entry_format", "entries", "plain_bytes"}``;
* the payload: a stream of records, each a msgpack map ``{"key", "size", "blake2b" (32
  bytes), "kernel", "signature", "arch", "toolchain", "created"}`` followed by the entry
  file's ``size`` bytes; zstd-compressed as one frame when flag 2 is set;
* the trailer, 32 bytes over everything before it: HMAC-SHA256 with the secret when
  signed, else BLAKE2b-256 (a checksum: a truncated or altered file is refused whole).

Read side, :class:`BundleTier`: one more tier (kcache.tier), read-only. With a secret the
file is streamed through the HMAC (into a private copy, so it cannot change afterwards)
before its header is read; a bundle that cannot be checked first (unsigned, or version 1
with its signature inside the tar) is refused. Every stage is bounded by the file's size
(docs/security.md, "What a bundle can cost"). Each entry must match its record's digest and
then crosses the store's verification path like bytes from any tier (``Store.copy_in``).
Version-1 bundles (tar) stay importable without a secret: :mod:`kcache.tiers.bundle.v1`.
What both readers share (the index, bounded reads, inflation): :mod:`kcache.tiers.bundle.common`.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import struct
import time
from pathlib import Path
from typing import Callable, Iterator

import msgpack

from ...entry.format import FORMAT_VERSION
from ...errors import CorruptEntry
from ...keys import KEY_RE
from ..tier import Blob, TierError
from .common import (_CHUNK, _KIND, _ZSTD_HINT,  # noqa: F401 (names of this module)
                     BUNDLE_FORMAT, BUNDLE_VERSION,  # noqa: F401
                     INFLATE_RATIO, INFLATE_SLACK, MAGIC, MAX_BUNDLE, MAX_ENTRIES, MAX_HEADER,
                     MSGPACK_TYPES as _MSGPACK_TYPES, SIGNED, TAG_SIZE, UNPACK_ERRORS as _UNPACK_ERRORS,
                     ZSTD, BundleError, Contents, ExportReport, Region, Tee as _Tee, check_export,
                     check_target, have_zstd, inflate, inflate_cap, open_bundle_file, pread_exact, scratch, tag_hash as _tag_hash,
                     unpack_why as _unpack_why, written_beside)
from .v1 import open_v1
from . import v3

PREFIX = struct.Struct(">8sHBI")  # magic, version, flags, header length
MAX_RECORD_HEAD = 4 << 10  # bytes of one record's msgpack map


def digest(data: bytes) -> str:
    """The digest recorded for an entry's bytes: BLAKE2b-256, hex."""
    return hashlib.blake2b(data, digest_size=32).hexdigest()


# --- writing ----------------------------------------------------------------------------------


def write_bundle(out: Path, items: list[tuple[dict, bytes]], *, secret: bytes | None = None,
                 compress: bool | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 version: int = BUNDLE_VERSION) -> ExportReport:
    """Write the bundle ``out`` (format ``version`` 2, the default, or 3:
    :func:`kcache.tiers.bundle.v3.write_v3`, read in place as a layer) from ``items``:
    (record, verified entry bytes) pairs; a record holds ``key`` and optionally ``kernel``,
    ``signature``, ``arch``, ``toolchain``, ``created``.

    ``compress``: zstd when True, none when False, zstd if installed when None. ``secret``:
    sign the whole file (HMAC-SHA256, bytes; the caller checks its length).
    ``progress(done, total)`` is called per entry written. Written to a temp file beside
    ``out`` and renamed, so ``out`` is whole or untouched. Raises OSError, BundleError (zstd
    asked for but not installed, more than MAX_ENTRIES entries, ``out`` exists and is not a
    regular file once symlinks are followed: a device or FIFO is never replaced); ValueError
    for another ``version``."""
    if version == v3.VERSION:
        return v3.write_v3(out, items, secret=secret, compress=compress, progress=progress)
    if version != BUNDLE_VERSION:
        raise ValueError(f"bundle format version {version!r}: accepted 2 or {v3.VERSION}")
    out = Path(out)
    compress = check_export(out, len(items), compress)
    heads = [msgpack.packb(_record(rec, data)) for rec, data in items]
    plain = sum(len(h) + len(d) for h, (_r, d) in zip(heads, items))
    header = msgpack.packb({"format": BUNDLE_FORMAT, "version": BUNDLE_VERSION,
                            "created": time.time(), "entry_format": FORMAT_VERSION,
                            "entries": len(items), "plain_bytes": plain})
    flags = (SIGNED if secret is not None else 0) | (ZSTD if compress else 0)
    with written_beside(out) as raw:
        tee = _Tee(raw, _tag_hash(secret))
        tee.write(PREFIX.pack(MAGIC, BUNDLE_VERSION, flags, len(header)) + header)
        _write_records(tee, heads, items, compress, plain, progress)
        raw.write(tee.mac.digest())
    return ExportReport(out, len(items), sum(len(d) for _r, d in items), out.stat().st_size,
                        compress, secret is not None)


def _record(rec: dict, data: bytes) -> dict:
    fields = ("key", "kernel", "signature", "arch", "toolchain", "created")
    return dict({f: rec.get(f) for f in fields}, size=len(data),
                blake2b=hashlib.blake2b(data, digest_size=32).digest())


def _write_records(tee, heads, items, compress: bool, plain: int, progress) -> None:
    if compress:
        import zstandard
        # the frame declares its size: a reader tells a cut stream from a whole one
        with zstandard.ZstdCompressor(level=10).stream_writer(tee, size=plain, closefd=False) as z:
            _write_pairs(z, heads, items, progress)
    else:
        _write_pairs(tee, heads, items, progress)


def _write_pairs(sink, heads, items, progress) -> None:
    for i, (head, (_rec, data)) in enumerate(zip(heads, items), 1):
        sink.write(head)
        sink.write(data)
        if progress is not None:
            progress(i, len(items))


# --- reading: the file ------------------------------------------------------------------------


def open_contents(path: Path, secret: bytes | None) -> Contents:
    """Open, check and index the bundle file ``path`` (any version). Raises BundleError
    naming the file and what was wrong."""
    fd, st = open_bundle_file(path)
    return read_contents(path, fd, st.st_size, secret)


def read_contents(path: Path, fd: int, size: int, secret: bytes | None, *,
                  memory: bool = False) -> Contents:
    """Check and index the bundle open as ``fd`` (``size`` bytes, any version); the
    descriptor is closed with the Contents (``owned``), also when this raises. ``memory``:
    what is decompressed or copied is kept in memory (a layer), never on a disk. Raises
    BundleError naming the file and what was wrong."""
    try:
        head = pread_exact(fd, PREFIX.size, 0)
        if v3.is_v3(head):
            found = _open_v3(path, fd, size, secret)
        elif head.startswith(MAGIC):
            found = _open_v2(path, fd, size, head, secret, memory)
        else:
            found = open_v1(path, fd, size, head, secret, memory)
    except OSError as exc:
        os.close(fd)
        raise BundleError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except BaseException:
        os.close(fd)
        raise
    if fd not in found.owned:
        found.owned.append(fd)  # closed with the tier
    return found


# --- reading: version 2 -----------------------------------------------------------------------


def _open_v3(path: Path, fd: int, size: int, secret: bytes | None) -> Contents:
    index = v3.open_index(path, fd, size, secret)
    found = Contents(fd, index=index.entries, refused=index.refused, signed=index.signed,
                     checked=index.checked, version=v3.VERSION, v3=index)
    found.records = [{"key": k, "size": e[2], "sha256": e[3].hex()} for k, e in index.entries.items()]
    return found


def _open_v2(path: Path, fd: int, size: int, head: bytes, secret: bytes | None,
             memory: bool = False) -> Contents:
    if len(head) < PREFIX.size:
        raise BundleError(f"{path} is truncated: {size} bytes, shorter than a bundle's prefix")
    _magic, version, flags, header_len = PREFIX.unpack(head)
    if version != BUNDLE_VERSION or flags & ~(SIGNED | ZSTD):
        raise BundleError(f"{path}: bundle version {version} (flags {flags}) is not one this "
                          f"kcache reads ({BUNDLE_VERSION}): made by a newer kcache")
    found = Contents(fd, signed=bool(flags & SIGNED), memory=memory)
    if secret is not None and not found.signed:
        raise BundleError(f"{path} is not signed, and a secret is set: refused (export it "
                          "with the same KCACHE_SECRET or --secret-file)")
    body = size - TAG_SIZE  # bytes the trailer covers
    if header_len > MAX_HEADER or body < PREFIX.size + header_len:
        raise BundleError(f"{path} is truncated or damaged: its header ({header_len} bytes) "
                          f"does not fit its {size} bytes (accepted: at most {MAX_HEADER} "
                          "bytes)")
    if secret is not None:
        found.fd = _verified_copy(path, fd, body, secret, memory)
        found.owned.append(found.fd)
        found.checked = True
    elif not found.signed:
        _check_trailer(path, fd, body, None, None)
    try:
        _read_v2(path, found, header_len, body, compressed=bool(flags & ZSTD))
    except BaseException:
        for owned in found.owned:
            os.close(owned)
        raise
    return found


def _check_trailer(path: Path, fd: int, body: int, secret: bytes | None, copy) -> None:
    """Stream bytes ``[0, body)`` of ``fd`` through the trailer's hash (and into ``copy``);
    BundleError unless the trailer matches."""
    mac, offset = _tag_hash(secret), 0
    while offset < body:
        chunk = os.pread(fd, min(_CHUNK, body - offset), offset)
        if not chunk:
            raise BundleError(f"{path} shrank while it was read: refused")
        mac.update(chunk)
        if copy is not None:
            copy.write(chunk)
        offset += len(chunk)
    if not hmac.compare_digest(mac.digest(), pread_exact(fd, TAG_SIZE, body)):
        if secret is not None:
            raise BundleError(f"{path} has a wrong signature for this secret: refused (tampered, "
                              "truncated, or signed with another secret)")
        raise BundleError(f"{path} is damaged: its checksum does not match (truncated or "
                          "altered): refused")


def _verified_copy(path: Path, fd: int, body: int, secret: bytes, memory: bool = False) -> int:
    """A private copy of the bundle's first ``body`` bytes, made while checking their HMAC:
    what is parsed next is what was checked, whatever happens to the file meanwhile."""
    copy = scratch(memory)
    try:
        _check_trailer(path, fd, body, secret, copy)
        copy.flush()
        return os.dup(copy.fileno())
    finally:
        copy.close()


_HEADER_LIMITS = dict(max_str_len=1024, max_bin_len=1024, max_array_len=64, max_map_len=64,
                      max_ext_len=0)
_RECORD_LIMITS = dict(max_buffer_size=MAX_RECORD_HEAD, max_str_len=1024, max_bin_len=64,
                      max_array_len=64, max_map_len=32, max_ext_len=0)


def _read_v2(path: Path, found: Contents, header_len: int, body: int, *, compressed: bool) -> None:
    try:
        header = msgpack.unpackb(pread_exact(found.fd, header_len, PREFIX.size), **_HEADER_LIMITS)
    except _UNPACK_ERRORS as exc:
        raise BundleError(f"{path}: its header is not a msgpack map ({_unpack_why(exc)}): "
                          "refused") from None
    if not isinstance(header, dict):
        raise BundleError(f"{path}: its header is not a msgpack map (it is "
                          f"{_MSGPACK_TYPES.get(type(header), 'another value')}): refused")
    if (header.get("format") != BUNDLE_FORMAT
            or header.get("version") != BUNDLE_VERSION
            or not isinstance(header.get("plain_bytes"), int) or header["plain_bytes"] < 0):
        raise BundleError(f"{path}: its header is not a kcache bundle header")
    start, plain = PREFIX.size + header_len, header["plain_bytes"]
    if compressed:
        cap = inflate_cap(body - start)
        if plain > cap:
            raise BundleError(f"{path} says it decompresses to {plain} bytes, more than "
                              f"{cap} (at most {INFLATE_RATIO} x its size + "
                              f"{INFLATE_SLACK >> 20} MiB): refused")
        tmp, got = inflate(path, Region(found.fd, start, body - start), plain, found.memory)
        found.owned.append(os.dup(tmp.fileno()))
        tmp.close()
        found.fd, start, length = found.owned[-1], 0, got
    else:
        length = body - start
    if length != plain:
        raise BundleError(f"{path} is truncated or damaged: {length} bytes of records, its "
                          f"header says {plain}")
    scan_records(path, found, start, length)


def scan_records(path: Path, found: Contents, start: int, length: int) -> None:
    """Index the records in bytes ``[start, start + length)`` of ``found.fd``. A record whose
    key or digest is wrong is refused (named); a record that cannot be delimited ends the
    scan (the entries before it stay usable); more than MAX_ENTRIES records: BundleError."""
    pos, end, n = start, start + length, 0
    while pos < end:
        n += 1
        if n > MAX_ENTRIES:
            raise BundleError(f"{path} holds more than {MAX_ENTRIES} records: refused")
        unpacker = msgpack.Unpacker(**_RECORD_LIMITS)
        unpacker.feed(pread_exact(found.fd, min(MAX_RECORD_HEAD, end - pos), pos))
        try:
            rec = unpacker.unpack()
        except msgpack.OutOfData:
            found.refused[f"record {n}"] = (f"incomplete, or its description is over "
                                            f"{MAX_RECORD_HEAD} bytes: it and any after it refused")
            return
        except _UNPACK_ERRORS as exc:
            found.refused[f"record {n}"] = (f"not a msgpack record ({_unpack_why(exc)}): it and "
                                            "any after it refused")
            return
        size = rec.get("size") if isinstance(rec, dict) else None
        data_at = pos + unpacker.tell()
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= end - data_at:
            found.refused[f"record {n}"] = (f"declares {size!r} bytes, more than the bundle "
                                            "holds: it and any after it refused")
            return
        _add_record(found, n, rec, data_at, size)
        pos = data_at + size


def _add_record(found: Contents, n: int, rec: dict, offset: int, size: int) -> None:
    key, blake = rec.get("key"), rec.get("blake2b")
    if not isinstance(key, str) or not KEY_RE.fullmatch(key):
        found.refused[f"record {n}"] = "its key is not a kcache key (8-128 lowercase hex digits)"
    elif not isinstance(blake, bytes) or len(blake) != 32:
        found.refused[key] = "its BLAKE2b digest is not 32 bytes"
    else:
        found.add(key, offset, size, blake)


# --- the tier ---------------------------------------------------------------------------------


class BundleTier:
    """A bundle opened as a read-only tier. ``secret``: required signature key (bytes) or
    None; ``max_entry_size``: the largest entry accepted (bytes). Raises BundleError when
    the bundle cannot be used at all (it names the file). Records that are not usable
    entries are in ``refused`` ({key or "record N": reason}); members never read (version
    1) in ``notes``; ``problems`` is both. ``signed``: the bundle carries a signature;
    ``checked``: it was checked with ``secret``."""

    kind = "bundle"
    writable = False
    backfill = False

    def __init__(self, path: Path, *, secret: bytes | None = None, max_entry_size: int):
        self.path = Path(path)
        self.name = str(path)
        self.max_entry_size = max_entry_size
        self._c = open_contents(self.path, secret)
        self.signed, self.checked, self.version = self._c.signed, self._c.checked, self._c.version
        self.refused, self.notes = self._c.refused, self._c.notes

    @property
    def problems(self) -> dict[str, str]:
        """Refused records and notes together ({name: reason})."""
        return {**self._c.notes, **self._c.refused}

    def records(self) -> list[dict]:
        """The bundle's entry records: ``{"key", "size", "blake2b"}`` (hex)."""
        return list(self._c.records)

    def keys(self) -> Iterator[str]:
        """Keys of the entries the bundle holds (refused records excluded)."""
        yield from list(self._c.index)

    def read(self, key: str, limit: int) -> Blob | None:
        """The entry bytes of ``key`` (None when absent). Raises CorruptEntry when the entry
        is larger than ``limit`` or its bytes differ from its record's digest."""
        found = self._c.index.get(key)
        if found is None:
            return None
        limit = min(limit, self.max_entry_size)
        if self._c.v3 is not None:  # a frame of its own, checked against the index's SHA-256
            try:
                return Blob(v3.read_entry(self._c.v3, key, limit))
            except OSError as exc:
                raise TierError("io", f"{self.path}: cannot read {key}: {exc}") from None
        offset, size, blake = found
        if size > limit:
            raise CorruptEntry(f"file too large: {size} bytes (limit {limit})", "too_large")
        try:
            data = pread_exact(self._c.fd, size, offset)
        except OSError as exc:
            raise TierError("io", f"{self.path}: cannot read {key}: {exc}") from None
        if len(data) != size:
            raise CorruptEntry(f"truncated: {len(data)} of {size} bytes", "truncated")
        if not hmac.compare_digest(hashlib.blake2b(data, digest_size=32).digest(), blake):
            raise CorruptEntry("differs from the bundle's manifest", "checksum")
        return Blob(data)

    def write(self, key: str, data: bytes) -> None:
        raise TierError("unavailable", f"{self.path} is a bundle: read-only")

    def remove(self, key: str) -> bool:
        raise TierError("unavailable", f"{self.path} is a bundle: read-only")

    def close(self) -> None:
        c, self._c = getattr(self, "_c", None), None
        if c is None:
            return
        for fd in {c.fd, *c.owned}:
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

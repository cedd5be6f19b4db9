"""Bundle format version 3: one file read in place, an entry at a time (a read-only layer).

Layout (docs/containers.md "Bundle format"; integers big-endian)::

    prefix   struct ">8sHBIQ": magic KCACHEBN, version 3, flags (1: signed, 2: zstd frames),
             the header's length, the index's length
    header   msgpack map (at most 64 KiB): {"format", "version", "created", "entry_format",
             "entries", "plain_bytes", "frame_bytes", "digest": "sha256"}
    index    msgpack array (at most MAX_INDEX bytes) of maps, one per entry: {"key",
             "offset", "length" (its frame: where, after the tag, and how many bytes),
             "size" (the entry file's bytes), "sha256" (32 bytes: of the entry file),
             "zstd" (the frame is compressed), "kernel", "signature", "arch", "toolchain",
             "created"}
    tag      32 bytes over prefix + header + index: HMAC-SHA256 with the secret when signed,
             else BLAKE2b-256 (a checksum)
    frames   each entry's bytes on their own: a zstd frame declaring its size, or stored

A reader finds and checks everything but the frames with two positioned reads (the prefix,
then header + index + tag), parses what it checked (never the file again), and reads a frame
only when its entry is asked for, bounded by the size the index states and checked against
the index's digest. SHA-256, not BLAKE2b: a hit already checks an entry's artifacts by
SHA-256 (kcache.entry.format), twice as fast as BLAKE2b on machines with SHA extensions, and
a layer's hit must cost no more than the cache root's. Version 2 (one stream, read whole):
:mod:`kcache.tiers.bundle.v2`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import struct
import threading
import time
from pathlib import Path
from typing import Callable

import msgpack

from ...entry.format import FORMAT_VERSION
from ...errors import CorruptEntry
from ...keys import KEY_RE
from .common import (_ZSTD_HINT, BUNDLE_FORMAT, MAGIC, MAX_ENTRIES, MAX_HEADER, MAX_WINDOW,
                     MSGPACK_TYPES, SIGNED, TAG_SIZE, UNPACK_ERRORS, ZSTD, BundleError,
                     ExportReport, check_export, inflate_cap, pread_exact,
                     tag_hash, unpack_why, written_beside)

VERSION = 3
PREFIX = struct.Struct(">8sHBIQ")  # magic, version, flags, header length, index length
MAX_INDEX = 64 << 20  # bytes: 100,000 records of ~300 bytes, with room for long names
DIGEST = "sha256"
_HEADER_LIMITS = dict(max_str_len=1024, max_bin_len=1024, max_array_len=64, max_map_len=64,
                      max_ext_len=0)
_INDEX_LIMITS = dict(max_str_len=1024, max_bin_len=64, max_array_len=MAX_ENTRIES,
                     max_map_len=32, max_ext_len=0)
_FIELDS = ("key", "kernel", "signature", "arch", "toolchain", "created")


def entry_digest(data) -> bytes:
    """The digest the index records for an entry file's bytes: SHA-256 (32 bytes)."""
    return hashlib.sha256(data).digest()


# --- writing ----------------------------------------------------------------------------------


def write_v3(out: Path, items: list[tuple[dict, bytes]], *, secret: bytes | None = None,
             compress: bool | None = None,
             progress: Callable[[int, int], None] | None = None) -> ExportReport:
    """Write the bundle ``out`` (format version 3) from ``items``: (record, verified entry
    bytes) pairs, as :func:`kcache.tiers.bundle.v2.write_bundle` takes them (same arguments,
    same errors). Each entry is a frame of its own: zstd-compressed when ``compress`` (and
    smaller so, and within what a reader inflates: :func:`inflate_cap`), else stored.
    Written to a temp file beside ``out`` and renamed."""
    out = Path(out)
    compress = check_export(out, len(items), compress)
    frames, records = _frames(items, compress, progress)
    index = msgpack.packb(records)
    if len(index) > MAX_INDEX:
        raise BundleError(f"the index of {len(items)} entries is {len(index)} bytes, more than a "
                          f"bundle's ({MAX_INDEX}): export them in parts (--kernel, --cc)")
    header = msgpack.packb({"format": BUNDLE_FORMAT, "version": VERSION, "created": time.time(),
                            "entry_format": FORMAT_VERSION, "entries": len(items),
                            "plain_bytes": sum(len(d) for _r, d in items),
                            "frame_bytes": sum(len(f) for f in frames), "digest": DIGEST})
    flags = (SIGNED if secret is not None else 0) | (ZSTD if compress else 0)
    head = PREFIX.pack(MAGIC, VERSION, flags, len(header), len(index)) + header + index
    mac = tag_hash(secret)
    mac.update(head)
    with written_beside(out) as raw:
        raw.write(head + mac.digest())
        for frame in frames:
            raw.write(frame)
    return ExportReport(out, len(items), sum(len(d) for _r, d in items), out.stat().st_size,
                        compress, secret is not None, VERSION)


def _frames(items, compress: bool, progress) -> tuple[list[bytes], list[dict]]:
    """Each entry's frame and index record, offsets counted from the first frame."""
    cctx = None
    if compress:
        import zstandard
        cctx = zstandard.ZstdCompressor(level=10)  # declares each frame's size
    frames, records, offset = [], [], 0
    for i, (rec, data) in enumerate(items, 1):
        frame = cctx.compress(data) if cctx is not None else data
        # stored when compression gains nothing, or more than a reader accepts of a frame
        # (inflate_cap: a frame inflating beyond it is refused as a zstd bomb)
        packed = cctx is not None and len(frame) < len(data) <= inflate_cap(len(frame))
        frame = frame if packed else data
        records.append(dict({f: rec.get(f) for f in _FIELDS}, offset=offset, length=len(frame),
                            size=len(data), sha256=entry_digest(data), zstd=packed))
        frames.append(frame)
        offset += len(frame)
        if progress is not None:
            progress(i, len(items))
    return frames, records


# --- reading ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Index:
    """A version-3 bundle open for reading: ``fd`` (its descriptor, the caller's), ``size``
    (bytes, from the fstat it was opened with), ``entries`` {key: (offset in the file,
    frame length, entry size, SHA-256, zstd)}, ``refused`` {key or "record N": why},
    ``header``, ``signed``, ``checked`` (the signature was checked with a secret)."""

    path: Path
    fd: int
    size: int
    entries: dict = dataclasses.field(default_factory=dict)
    refused: dict = dataclasses.field(default_factory=dict)
    header: dict = dataclasses.field(default_factory=dict)
    signed: bool = False
    checked: bool = False

    @property
    def plain_bytes(self) -> int:
        """The entries' sizes summed (bytes)."""
        return sum(e[2] for e in self.entries.values())


def is_v3(head: bytes) -> bool:
    """True when ``head`` (a file's first bytes, at least 10) starts a version-3 bundle."""
    return head[:len(MAGIC)] == MAGIC and head[len(MAGIC):len(MAGIC) + 2] == VERSION.to_bytes(2, "big")


def open_index(path: Path, fd: int, size: int, secret: bytes | None) -> Index:
    """Check and parse the prefix, header and index of the version-3 bundle open as ``fd``
    (``size`` bytes): two positioned reads, then only the bytes read. Raises BundleError
    naming the file (truncated, damaged, wrong or missing signature, over a bound); records
    that are not usable entries are in ``refused``."""
    head = pread_exact(fd, PREFIX.size, 0)
    if len(head) < PREFIX.size:
        raise BundleError(f"{path} is truncated: {size} bytes, shorter than a bundle's prefix")
    _magic, version, flags, hlen, ilen = PREFIX.unpack(head)
    if version != VERSION or flags & ~(SIGNED | ZSTD):
        raise BundleError(f"{path}: bundle version {version} (flags {flags}) is not one this "
                          f"kcache reads (1, 2, {VERSION}): made by a newer kcache")
    found = Index(path, fd, size, signed=bool(flags & SIGNED))
    if secret is not None and not found.signed:
        raise BundleError(f"{path} is not signed, and a secret is set: refused (export it "
                          "with the same KCACHE_SECRET or --secret-file)")
    if hlen > MAX_HEADER or ilen > MAX_INDEX or PREFIX.size + hlen + ilen + TAG_SIZE > size:
        raise BundleError(f"{path} is truncated or damaged: its header ({hlen} bytes) and "
                          f"index ({ilen} bytes) do not fit its {size} bytes (accepted: at "
                          f"most {MAX_HEADER} and {MAX_INDEX} bytes, inside the file)")
    body = pread_exact(fd, hlen + ilen + TAG_SIZE, PREFIX.size)
    if len(body) != hlen + ilen + TAG_SIZE:
        raise BundleError(f"{path} shrank while it was read: refused")
    view = memoryview(body)
    if secret is not None or not found.signed:  # a signed bundle needs the secret to be checked
        mac = tag_hash(secret)
        mac.update(head)
        mac.update(view[:hlen + ilen])
        if not hmac.compare_digest(mac.digest(), body[hlen + ilen:]):
            if secret is not None:
                raise BundleError(f"{path} has a wrong signature for this secret: refused "
                                  "(tampered, truncated, or signed with another secret)")
            raise BundleError(f"{path} is damaged: its checksum does not match (truncated or "
                              "altered): refused")
        found.checked = secret is not None
    found.header = _header(path, view[:hlen])
    frames_at = PREFIX.size + hlen + ilen + TAG_SIZE
    _records(path, found, view[hlen:hlen + ilen], frames_at, size - frames_at)
    return found


def _header(path: Path, raw) -> dict:
    try:
        header = msgpack.unpackb(raw, **_HEADER_LIMITS)
    except UNPACK_ERRORS as exc:
        raise BundleError(f"{path}: its header is not a msgpack map ({unpack_why(exc)}): "
                          "refused") from None
    if not isinstance(header, dict):
        raise BundleError(f"{path}: its header is not a msgpack map (it is "
                          f"{MSGPACK_TYPES.get(type(header), 'another value')}): refused")
    if (header.get("format") != BUNDLE_FORMAT or header.get("version") != VERSION
            or header.get("digest", DIGEST) != DIGEST):
        raise BundleError(f"{path}: its header is not a kcache bundle header (version {VERSION}, "
                          f"{DIGEST} digests)")
    return header


def _records(path: Path, found: Index, raw, frames_at: int, frames_len: int) -> None:
    """Index the records one at a time (only what serving needs is kept: a hostile index
    never holds its objects at once). A record that is not an entry's is refused (named);
    an index that is not an array of at most MAX_ENTRIES records: BundleError."""
    unpacker = msgpack.Unpacker(max_buffer_size=max(len(raw), 1), **_INDEX_LIMITS)
    unpacker.feed(raw)
    try:
        n = unpacker.read_array_header()
    except (msgpack.OutOfData, *UNPACK_ERRORS) as exc:
        raise BundleError(f"{path}: its index is not a msgpack array ({unpack_why(exc)}): "
                          "refused") from None
    if n > MAX_ENTRIES:
        raise BundleError(f"{path} holds more than {MAX_ENTRIES} records: refused")
    for i in range(1, n + 1):
        try:
            rec = unpacker.unpack()
        except msgpack.OutOfData:
            found.refused[f"record {i}"] = "incomplete: it and any after it refused"
            return
        except UNPACK_ERRORS as exc:
            found.refused[f"record {i}"] = (f"not a msgpack record ({unpack_why(exc)}): it and "
                                            "any after it refused")
            return
        why = _record_problem(rec, frames_len)
        key = rec.get("key") if why is None or not why.startswith("its key") else None
        if why is not None:
            found.refused[key or f"record {i}"] = why
        elif key in found.entries or key in found.refused:
            found.entries.pop(key, None)
            found.refused[key] = "appears twice: the bundle is refused for this key"
        else:
            found.entries[key] = (frames_at + rec["offset"], rec["length"], rec["size"],
                                  rec["sha256"], rec["zstd"])


def _uint(value) -> bool:
    return type(value) is int and value >= 0


def _record_problem(rec, frames_len: int) -> str | None:
    """Why ``rec`` is not a usable entry record, or None."""
    if not isinstance(rec, dict):
        return "its key is not a kcache key (the record is not a map)"
    key = rec.get("key")
    if not isinstance(key, str) or not KEY_RE.fullmatch(key):
        return "its key is not a kcache key (8-128 lowercase hex digits)"
    offset, length, size = rec.get("offset"), rec.get("length"), rec.get("size")
    if not (_uint(offset) and _uint(length) and _uint(size)) or offset + length > frames_len:
        return "its frame is not inside the bundle"
    digest = rec.get("sha256")
    if not isinstance(digest, bytes) or len(digest) != 32:
        return "its SHA-256 digest is not 32 bytes"
    if type(rec.get("zstd")) is not bool or (not rec["zstd"] and length != size):
        return "its frame's length and size disagree"
    # A frame is read whole before it is inflated: one longer than its entry (a writer keeps
    # a zstd frame only when it is shorter) would be a read that the entry size limit, which
    # bounds ``size``, does not bound (a sparse 1 TiB frame for a 100-byte entry).
    if length > size:
        return f"its frame ({length} bytes) is longer than its entry ({size} bytes)"
    if size > inflate_cap(length):  # as _inflate refuses it; listings never add it up
        return f"its size ({size} bytes) is more than its frame can hold"
    return None


class Shrunk(CorruptEntry):
    """A frame read short: the file was truncated after it was opened."""


_local = threading.local()  # one zstd decompressor per thread (a context is not shareable)


def read_entry(found: Index, key: str, limit: int, *, check: bool = True) -> bytes | None:
    """The entry file of ``key`` (None when the bundle has no such entry), read by one
    ``os.pread`` of its frame and decompressed, bounded by the size the index states.
    ``check``: compare it with the index's digest. Raises CorruptEntry (``too_large`` over
    ``limit`` bytes, ``checksum`` for a frame that is not what the index says), Shrunk for a
    short read, OSError."""
    rec = found.entries.get(key)
    if rec is None:
        return None
    offset, length, size, digest, packed = rec
    if size > limit:
        raise CorruptEntry(f"file too large: {size} bytes (limit {limit})", "too_large")
    raw = pread_exact(found.fd, length, offset)
    if len(raw) != length:
        raise Shrunk(f"truncated: {len(raw)} of {length} bytes of its frame", "truncated")
    data = _inflate(raw, size) if packed else raw
    if check and not hmac.compare_digest(entry_digest(data), digest):
        raise CorruptEntry("differs from the bundle's index (its SHA-256)", "checksum")
    return data


def _inflate(frame: bytes, size: int) -> bytes:
    """One zstd frame of ``size`` bytes, never more (a frame declaring another size, a
    window over MAX_WINDOW, more output than ``size``: CorruptEntry)."""
    dctx = getattr(_local, "dctx", None)
    if dctx is None:
        try:
            import zstandard
        except ImportError:
            raise CorruptEntry(f"its frame is zstd-compressed; reading it needs {_ZSTD_HINT}",
                               "checksum") from None
        dctx = _local.dctx = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW)
        _local.error = zstandard.ZstdError
        _local.declared = zstandard.frame_content_size
    try:
        declared = _local.declared(frame)
        if declared not in (-1, size) or size > inflate_cap(len(frame)):
            raise CorruptEntry(f"its frame declares {declared} bytes, the index {size}", "checksum")
        data = dctx.decompress(frame, max_output_size=size)
    except _local.error as exc:
        raise CorruptEntry(f"its zstd frame cannot be read ({exc})", "checksum") from None
    if len(data) != size:
        raise CorruptEntry(f"its frame holds {len(data)} bytes, the index says {size}", "checksum")
    return data

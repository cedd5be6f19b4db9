"""Entry files written byte by byte: every field of the format (kcache/entry.py docstring)
can be set to anything, and the header and trailing checksums made valid or not.

Deliberately independent of ``kcache.entry.encode`` (only the constants are shared), so a
hostile file is exactly what its kind says, whatever the encoder would refuse to write.
"""
from __future__ import annotations

import hashlib
import struct
import time

import msgpack

from kcache.entry.format import MAGIC, FORMAT_VERSION

PREFIX = struct.Struct(">8sHHIQ16s")


def pack(value) -> bytes:
    """msgpack bytes of a plain value (bin type for bytes)."""
    return msgpack.packb(value, use_bin_type=True)


def raw_map(items: list[tuple[object, bytes]]) -> bytes:
    """msgpack bytes of a map whose values are given already encoded (so any value, even an
    invalid or enormous one, can be placed under a key)."""
    n = len(items)
    head = bytes([0x80 | n]) if n < 16 else b"\xde" + n.to_bytes(2, "big")
    return head + b"".join(pack(k) + v for k, v in items)


def header_fields(key: str, **over: bytes) -> list[tuple[str, bytes]]:
    """The fields of a valid header for ``key`` (as ``kcache.entry.encode`` writes them for
    :data:`ARTIFACTS` and :data:`META`), as (name, encoded value) pairs; ``over`` replaces a
    field by an *encoded* msgpack value (any bytes)."""
    artifacts, meta = ARTIFACTS, META
    fields = {
        "key": pack(key),
        "components": pack({"kernel": "pkg.mod:hostile"}),
        "created": pack(float(time.time())),
        "sizes": pack({k: len(v) for k, v in artifacts.items()}),
        "meta": pack(meta),
        "kernel": pack(meta.get("kernel")),
        "signature": pack(meta.get("signature")),
        "arch": pack(meta.get("arch")),
        "compile_seconds": pack(meta.get("compile_seconds")),
    }
    fields.update(over)
    return list(fields.items())


ARTIFACTS = {"cubin": b"\x7fELF" + bytes(200), "ptx": b".version 8.5\n.target sm_90\n"}
META = {"kernel": "pkg.mod:hostile", "signature": "(float32[::1],)", "arch": "sm_90",
        "compile_seconds": 0.25}


def entry_file(key: str, *, header: bytes | None = None, body: bytes | None = None,
               magic: bytes = MAGIC, version: int = FORMAT_VERSION, flags: int = 0,
               header_len: int | None = None, body_len: int | None = None,
               header_sum: bytes | None = None, checksum: bool = True, **header_over) -> bytes:
    """The bytes of an entry file. ``header``/``body``: raw msgpack (default: a valid header
    for ``key`` with ``header_over`` applied (encoded values), and the default artifacts);
    the lengths, header sum and trailing checksum are computed unless given; ``checksum``
    False writes 32 bytes that are not the checksum."""
    if header is None:
        header = raw_map(header_fields(key, **header_over))
    if body is None:
        body = pack(ARTIFACTS)
    prefix = PREFIX.pack(magic, version, flags,
                         len(header) if header_len is None else header_len,
                         len(body) if body_len is None else body_len,
                         header_sum if header_sum is not None
                         else hashlib.blake2b(header, digest_size=16).digest())
    data = prefix + header + body
    digest = hashlib.blake2b(data, digest_size=32).digest()
    return data + (digest if checksum else bytes(b ^ 0x5A for b in digest))

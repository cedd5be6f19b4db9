"""What both bundle readers share (version 2, kcache.tiers.bundle.v2; version 1,
kcache.tiers.bundle.v1): the index of what a bundle holds (:class:`Contents`), bounded reads
of a descriptor and zstd inflation under a cap."""
from __future__ import annotations

import dataclasses
import io
import os
import tempfile
from pathlib import Path

from ...errors import KcacheError

BUNDLE_FORMAT = "kcache-bundle"
BUNDLE_VERSION = 2
MAX_ENTRIES = 100_000  # records in one bundle: its index stays under ~50 MB
MAX_INFLATED = 16 << 30  # bytes a bundle may decompress to, whatever its size
INFLATE_RATIO = 32  # ... and at most this x its size + INFLATE_SLACK
INFLATE_SLACK = 16 << 20  # bytes
MAX_WINDOW = 8 << 20  # bytes: zstd's window (level 10 uses 4 MiB); a larger one is refused
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_CHUNK = 1 << 20  # bytes read at once
_ZSTD_HINT = ("the zstandard package, a dependency of kcache (`pip install zstandard` "
              "in an older install)")


class BundleError(KcacheError):
    """A bundle cannot be used at all (not a bundle, damaged, missing or wrong signature,
    over a bound); the message names the file and says what is wrong."""


def inflate_cap(stored: int) -> int:
    """The most bytes ``stored`` compressed bytes may decompress to (INFLATE_RATIO x + slack,
    at most MAX_INFLATED)."""
    return min(MAX_INFLATED, stored * INFLATE_RATIO + INFLATE_SLACK)


class Region(io.RawIOBase):
    """Bytes ``[start, start + length)`` of descriptor ``fd`` as a readable file (``pread``:
    no shared position). The descriptor stays the caller's."""

    def __init__(self, fd: int, start: int, length: int):
        super().__init__()
        self.fd, self.pos, self.end = fd, start, start + length

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = os.pread(self.fd, min(len(buffer), self.end - self.pos), self.pos)
        buffer[:len(data)] = data
        self.pos += len(data)
        return len(data)


def pread_exact(fd: int, n: int, offset: int) -> bytes:
    """``n`` bytes of ``fd`` at ``offset`` (fewer only at the end of the file)."""
    parts, got = [], 0
    while got < n:
        part = os.pread(fd, n - got, offset + got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def inflate(path: Path, source, cap: int):
    """Decompress the zstd stream ``source`` (a readable file) into an anonymous temp file;
    returns (that file, its size in bytes). Raises BundleError beyond ``cap`` bytes, for a
    window over MAX_WINDOW, or for a stream zstd cannot read."""
    try:
        import zstandard
    except ImportError:
        raise BundleError(f"{path} is zstd-compressed; reading it needs {_ZSTD_HINT}") from None
    plain = tempfile.TemporaryFile()
    try:
        reader = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW).stream_reader(
            source, read_size=1 << 16, closefd=False)
        copied = 0
        with reader:
            while chunk := reader.read(_CHUNK):
                copied += len(chunk)
                if copied > cap:
                    raise BundleError(f"{path} decompresses to more than {cap} bytes (accepted: "
                                      f"at most {INFLATE_RATIO} x its size + "
                                      f"{INFLATE_SLACK >> 20} MiB): refused")
                plain.write(chunk)
        plain.flush()
    except zstandard.ZstdError as exc:
        plain.close()
        raise BundleError(f"{path} is damaged: its zstd stream cannot be read ({exc})") from None
    except BaseException:
        plain.close()
        raise
    return plain, copied


@dataclasses.dataclass
class Contents:
    """What a bundle reader found: ``fd`` (descriptor the entries are read from; ``owned``
    are closed with the tier), ``index`` {key: (offset, size, BLAKE2b-256 bytes)},
    ``records`` [{"key", "size", "blake2b"}], ``refused`` {key or record: reason} (records
    that are not entries: refused, counted), ``notes`` {member: reason} (never read),
    ``signed``, ``checked`` (the signature was checked), ``version``."""

    fd: int
    owned: list = dataclasses.field(default_factory=list)
    index: dict = dataclasses.field(default_factory=dict)
    records: list = dataclasses.field(default_factory=list)
    refused: dict = dataclasses.field(default_factory=dict)
    notes: dict = dataclasses.field(default_factory=dict)
    signed: bool = False
    checked: bool = False
    version: int = BUNDLE_VERSION

    def add(self, key: str, offset: int, size: int, blake: bytes) -> None:
        """Index one entry; a key seen twice is refused (neither copy is read)."""
        if key in self.index or key in self.refused:
            self.index.pop(key, None)
            self.refused[key] = "appears twice: the bundle is refused for this key"
            return
        self.index[key] = (offset, size, blake)
        self.records.append({"key": key, "size": size, "blake2b": blake.hex()})

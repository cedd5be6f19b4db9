"""What the bundle readers and writers share (version 3, kcache.tiers.bundle.v3; version 2,
kcache.tiers.bundle.v2; version 1, kcache.tiers.bundle.v1): the index of what a bundle holds
(:class:`Contents`), bounded reads of a descriptor, zstd inflation under a cap, the envelope's
magic, flags and tag, msgpack's limits in words, and what a writer reports."""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import io
import os
import stat
import tempfile
from pathlib import Path

import msgpack

from ...disk import fsio
from ...errors import CorruptEntry, KcacheError

BUNDLE_FORMAT = "kcache-bundle"
BUNDLE_VERSION = 2
MAX_ENTRIES = 100_000  # records in one bundle: its index stays under ~50 MB
MAX_INFLATED = 16 << 30  # bytes a bundle may decompress to, whatever its size
INFLATE_RATIO = 32  # ... and at most this x its size + INFLATE_SLACK
INFLATE_SLACK = 16 << 20  # bytes
MAX_WINDOW = 8 << 20  # bytes: zstd's window (level 10 uses 4 MiB); a larger one is refused
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_CHUNK = 1 << 20  # bytes read at once
MAGIC = b"KCACHEBN"  # versions 2 and 3 (version 1 is a tar)
SIGNED, ZSTD = 1, 2  # flags of the prefix
TAG_SIZE = 32  # bytes of the tag (HMAC-SHA256 or BLAKE2b-256)
MAX_HEADER = 64 << 10  # bytes
MAX_BUNDLE = 1 << 40  # bytes of a bundle file
_ZSTD_HINT = ("the zstandard package, a dependency of kcache (`pip install zstandard` "
              "in an older install)")


class BundleError(KcacheError):
    """A bundle cannot be used at all (not a bundle, damaged, missing or wrong signature,
    over a bound); the message names the file and says what is wrong."""


def have_zstd() -> bool:
    """True when the ``zstandard`` package is installed (bundles are then compressed)."""
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return False
    return True


def tag_hash(secret: bytes | None):
    """The tag's hash: HMAC-SHA256 with ``secret``, or BLAKE2b-256 without one."""
    if secret is not None:
        return hmac.new(secret, digestmod=hashlib.sha256)
    return hashlib.blake2b(digest_size=TAG_SIZE)


def scratch(memory: bool):
    """A read-write temp file: in memory (``memfd_create``, never on a disk) when ``memory``
    and the platform has it (a bundle named as a layer), else an anonymous temp file."""
    if memory and hasattr(os, "memfd_create"):
        return os.fdopen(os.memfd_create("kcache-bundle", getattr(os, "MFD_CLOEXEC", 0)), "w+b")
    return tempfile.TemporaryFile()


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


def open_bundle_file(path: Path, trust: "fsio.Trust | None" = None) -> tuple[int, os.stat_result]:
    """(descriptor, fstat) of the bundle file ``path``: a regular file (never a FIFO, a device,
    a folder, nor a symlink), of an owner ``trust`` accepts when given. Raises BundleError
    naming the file and what is accepted."""
    try:
        return fsio.open_regular(path, MAX_BUNDLE, trust=trust)
    except CorruptEntry as exc:
        what = {"not_regular": "is not a regular file (a folder, FIFO, socket or device)",
                "symlink": "is a symlink that changed while it was opened",
                "too_large": f"is larger than a bundle may be ({MAX_BUNDLE} bytes)",
                "owner": f"is not trusted: {exc}"}
        raise BundleError(f"{path} {what.get(exc.code, str(exc))}; accepted: a bundle file "
                          "written by kcache export") from None
    except FileNotFoundError:
        raise BundleError(f"{path}: no such file") from None
    except OSError as exc:
        raise BundleError(f"{path}: cannot open it ({exc.strerror or exc})") from None


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


def inflate(path: Path, source, cap: int, memory: bool = False):
    """Decompress the zstd stream ``source`` (a readable file) into an anonymous temp file
    (:func:`scratch`: in memory with ``memory``); returns (that file, its size in bytes).
    Raises BundleError beyond ``cap`` bytes, for a window over MAX_WINDOW, or for a stream
    zstd cannot read."""
    try:
        import zstandard
    except ImportError:
        raise BundleError(f"{path} is zstd-compressed; reading it needs {_ZSTD_HINT}") from None
    plain = scratch(memory)
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
class ExportReport:
    """What a bundle writer wrote: ``path``, ``entries`` (count), ``entry_bytes`` (sum of
    the entries' sizes), ``bundle_bytes`` (the file's size), ``compressed``, ``signed``,
    ``version`` (the bundle format version written)."""

    path: Path
    entries: int
    entry_bytes: int
    bundle_bytes: int
    compressed: bool
    signed: bool
    version: int = BUNDLE_VERSION


class Tee:
    """A writable file that also feeds what is written to a hash."""

    def __init__(self, raw, mac):
        self.raw, self.mac = raw, mac

    def write(self, data) -> int:
        self.mac.update(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


def check_target(out: Path) -> None:
    """Raise BundleError unless ``out`` is absent or a regular file (symlinks followed): a
    rename over ``/dev/null`` as root would replace the device with a file."""
    try:
        mode = os.stat(out).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise BundleError(f"{out} is {_KIND.get(stat.S_IFMT(mode), 'not a regular file')}: left as "
                          "it is, nothing written (accepted: a new file, or a regular file to "
                          "replace)")


@contextlib.contextmanager
def written_beside(out: Path):
    """Yield a binary file open on a temp file beside ``out``; when the block ends, fsync it
    and rename it onto ``out`` (checked again first: the rename follows the writing). On any
    error the temp file is removed and ``out`` is untouched."""
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw:
            yield raw
            raw.flush()
            os.fsync(raw.fileno())
        check_target(out)
        os.replace(tmp, out)
    except BaseException:
        fsio.unlink_quietly(tmp)
        raise


def check_export(out, count: int, compress: bool | None) -> bool:
    """What every writer checks first: ``out`` (:func:`check_target`), ``count`` entries at
    most :data:`MAX_ENTRIES`, zstd there when asked for. Returns whether to compress
    (``None``: when zstd is installed). Raises BundleError."""
    check_target(Path(out))
    compress = have_zstd() if compress is None else compress
    if compress and not have_zstd():
        raise BundleError(f"zstd compression needs {_ZSTD_HINT}")
    if count > MAX_ENTRIES:
        raise BundleError(f"{count} entries are more than one bundle holds ({MAX_ENTRIES}): "
                          "export them in parts (--kernel, --cc)")
    return compress


_KIND = {stat.S_IFDIR: "a folder", stat.S_IFCHR: "a character device",
         stat.S_IFBLK: "a block device", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}
UNPACK_ERRORS = (ValueError, TypeError, msgpack.UnpackException)
MSGPACK_TYPES = {int: "an integer", float: "a float", str: "a string", bytes: "a binary string",
                 list: "an array", bool: "a boolean", type(None): "nil"}


def unpack_why(exc: Exception) -> str:
    """What msgpack found wrong, in words (its FormatError and StackError say nothing)."""
    if isinstance(exc, msgpack.StackError):
        return "nested too deeply"
    if isinstance(exc, msgpack.FormatError):
        return "bytes that are not msgpack"
    if isinstance(exc, msgpack.ExtraData):
        return "more than one msgpack value"
    return str(exc) or type(exc).__name__


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
    memory: bool = False  # scratch files in memory (a layer), never on a disk
    v3: object = None  # a version-3 bundle's kcache.tiers.bundle.v3.Index (entries read by it)

    def add(self, key: str, offset: int, size: int, blake: bytes) -> None:
        """Index one entry; a key seen twice is refused (neither copy is read)."""
        if key in self.index or key in self.refused:
            self.index.pop(key, None)
            self.refused[key] = "appears twice: the bundle is refused for this key"
            return
        self.index[key] = (offset, size, blake)
        self.records.append({"key": key, "size": size, "blake2b": blake.hex()})

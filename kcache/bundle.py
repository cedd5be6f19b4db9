"""Bundles: many entries in one file, for container builds (``kcache export`` / ``import``).

A bundle is a tar file (zstd-compressed when the ``zstandard`` package is installed) holding

* ``manifest.json``: ``{"format": "kcache-bundle", "version": 1, "created", "entry_format",
  "entries": [{"key", "kernel", "signature", "arch", "size", "blake2b", "toolchain"}]}``;
* ``manifest.hmac``: HMAC-SHA256 (hex) of ``manifest.json``'s bytes, when exported with a
  secret: the manifest carries each entry's BLAKE2b-256, so it covers every entry too;
* ``entries/<key>.kce``: the entry files, byte for byte.

Read side, :class:`BundleTier`: one more tier (kcache.tier), read-only. Nothing in a bundle
is trusted: no member is extracted by name, only regular members named exactly
``entries/<key>.kce`` are read, as bytes, bounded by the entry size cap; each must match its
manifest digest and then crosses the store's verification path like bytes from any tier
(``Store.copy_in``). With a secret, a bundle without a valid signature is refused whole.
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import io
import json
import os
import re
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Iterator

from . import fsio
from .entry import FORMAT_VERSION
from .errors import CorruptEntry, KcacheError
from .tier import Blob, TierError

BUNDLE_FORMAT = "kcache-bundle"
BUNDLE_VERSION = 1
MANIFEST = "manifest.json"
SIGNATURE = "manifest.hmac"
_ENTRY_RE = re.compile(r"entries/([0-9a-f]{8,128})\.kce")
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_MANIFEST = 64 << 20  # bytes: ~300,000 entries
MAX_BUNDLE = 1 << 40  # bytes a bundle may hold once decompressed
_INFLATE_RATIO = 64  # a zstd bundle may not decompress to more than this x its size (+ slack)


class BundleError(KcacheError):
    """A bundle cannot be used at all (not a bundle, bad manifest, missing or wrong
    signature); the message says what is wrong."""


def have_zstd() -> bool:
    """True when the ``zstandard`` package is installed (bundles are then compressed)."""
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return False
    return True


def sign(secret: bytes, manifest: bytes) -> str:
    """HMAC-SHA256 of the manifest's bytes, hex."""
    return hmac.new(secret, manifest, hashlib.sha256).hexdigest()


def digest(data: bytes) -> str:
    """The digest a manifest records for an entry's bytes: BLAKE2b-256, hex."""
    return hashlib.blake2b(data, digest_size=32).hexdigest()


# --- writing ----------------------------------------------------------------------------------


@dataclasses.dataclass
class ExportReport:
    """What ``write_bundle`` wrote: ``path``, ``entries`` (count), ``entry_bytes`` (sum of
    the entries' sizes), ``bundle_bytes`` (the file's size), ``compressed``, ``signed``."""

    path: Path
    entries: int
    entry_bytes: int
    bundle_bytes: int
    compressed: bool
    signed: bool


def write_bundle(out: Path, items: list[tuple[dict, bytes]], *, secret: bytes | None = None,
                 compress: bool | None = None) -> ExportReport:
    """Write the bundle ``out`` from ``items``: (manifest record, verified entry bytes) pairs.

    ``compress``: zstd when True, plain tar when False, zstd if installed when None.
    ``secret``: sign the manifest (HMAC-SHA256). Written to a temp file beside ``out`` and
    renamed, so ``out`` is whole or untouched. Raises OSError, BundleError (zstd asked for
    but not installed)."""
    out = Path(out)
    compress = have_zstd() if compress is None else compress
    if compress and not have_zstd():
        raise BundleError("zstd compression needs the zstandard package (pip install 'kcache-cuda[zstd]')")
    records = [dict(rec, size=len(data), blake2b=digest(data)) for rec, data in items]
    manifest = json.dumps({"format": BUNDLE_FORMAT, "version": BUNDLE_VERSION,
                           "created": time.time(), "entry_format": FORMAT_VERSION,
                           "entries": records}, indent=1, sort_keys=True).encode()
    members = [(MANIFEST, manifest)]
    if secret is not None:
        members.append((SIGNATURE, sign(secret, manifest).encode()))
    members += [(f"entries/{rec['key']}.kce", data) for rec, (_r, data) in zip(records, items)]
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw:
            if compress:
                import zstandard
                with zstandard.ZstdCompressor(level=10).stream_writer(raw, closefd=False) as z:
                    _write_tar(z, members)
            else:
                _write_tar(raw, members)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, out)
    except BaseException:
        fsio.unlink_quietly(tmp)
        raise
    return ExportReport(out, len(records), sum(r["size"] for r in records),
                        out.stat().st_size, compress, secret is not None)


def _write_tar(fileobj, members) -> None:
    with tarfile.open(fileobj=fileobj, mode="w|", format=tarfile.USTAR_FORMAT) as tar:
        now = int(time.time())
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), now, 0o644
            tar.addfile(info, io.BytesIO(data))


# --- reading ----------------------------------------------------------------------------------


class BundleTier:
    """A bundle opened as a read-only tier. ``secret``: required signature key (bytes) or
    None; ``max_entry_size``: the largest entry accepted (bytes). Raises BundleError when
    the bundle cannot be used at all, OSError when it cannot be read. Entries it cannot
    read are listed in ``problems`` ({key or member name: reason})."""

    kind = "bundle"
    writable = False
    backfill = False

    def __init__(self, path: Path, *, secret: bytes | None = None, max_entry_size: int):
        self.path = Path(path)
        self.name = str(path)
        self.max_entry_size = max_entry_size
        self.problems: dict[str, str] = {}
        self.signed = False
        self._file = self._open(self.path)
        try:
            self._tar = tarfile.open(fileobj=self._file, mode="r:")
            members = self._tar.getmembers()
        except (tarfile.TarError, EOFError, ValueError) as exc:
            self.close()
            raise BundleError(f"{path} is not a kcache bundle (not a readable tar: {exc})") from None
        self._index = self._index_members(members)
        self.manifest = self._manifest(members, secret)

    # -- opening -----------------------------------------------------------------------------
    def _open(self, path: Path):
        """The bundle as a seekable plain tar file object: the file itself, or a temp file
        holding it decompressed (zstd), bounded by MAX_BUNDLE and _INFLATE_RATIO."""
        fd, st = fsio.open_regular(path, MAX_BUNDLE)  # never a FIFO or device
        raw = os.fdopen(fd, "rb")
        if raw.read(4) != _ZSTD_MAGIC:
            raw.seek(0)
            return raw
        raw.seek(0)
        try:
            import zstandard
        except ImportError:
            raw.close()
            raise BundleError(f"{path} is zstd-compressed; reading it needs the zstandard "
                              "package (pip install 'kcache-cuda[zstd]')") from None
        cap = min(MAX_BUNDLE, st.st_size * _INFLATE_RATIO + (64 << 20))
        plain = tempfile.TemporaryFile()
        try:
            with raw, zstandard.ZstdDecompressor().stream_reader(raw) as z:
                copied = 0
                while chunk := z.read(1 << 20):
                    copied += len(chunk)
                    if copied > cap:
                        raise BundleError(f"{path} decompresses to more than {cap} bytes")
                    plain.write(chunk)
        except zstandard.ZstdError as exc:
            plain.close()
            raise BundleError(f"{path} is not a kcache bundle (zstd: {exc})") from None
        except BaseException:
            plain.close()
            raise
        plain.seek(0)
        return plain

    def _index_members(self, members) -> dict[str, tarfile.TarInfo]:
        """key -> member for regular members named ``entries/<key>.kce``; every other member
        (links, devices, other names, duplicates) is never read."""
        index: dict[str, tarfile.TarInfo] = {}
        for m in members:
            found = _ENTRY_RE.fullmatch(m.name)
            if m.name in (MANIFEST, SIGNATURE) and m.isreg():
                continue
            if found is None:
                self.problems[m.name[:200]] = "not an entry of a bundle: never read"
            elif not m.isreg():
                self.problems[found.group(1)] = "not a regular member (link or device): never read"
            elif found.group(1) in index:
                self.problems[found.group(1)] = "appears twice: the bundle is refused for this key"
                index[found.group(1)] = None
            else:
                index[found.group(1)] = m
        return {k: m for k, m in index.items() if m is not None}

    def _member_bytes(self, members, name: str, limit: int) -> bytes | None:
        found = [m for m in members if m.name == name]
        if not found:
            return None
        if len(found) > 1 or not found[0].isreg() or found[0].size > limit:
            raise BundleError(f"{self.path}: {name} is not a single regular member of at most "
                              f"{limit} bytes")
        return self._tar.extractfile(found[0]).read(limit + 1)

    def _manifest(self, members, secret: bytes | None) -> dict:
        raw = self._member_bytes(members, MANIFEST, MAX_MANIFEST)
        if raw is None:
            raise BundleError(f"{self.path} is not a kcache bundle (no {MANIFEST})")
        tag = self._member_bytes(members, SIGNATURE, 256)
        self.signed = tag is not None
        if secret is not None:
            if tag is None:
                raise BundleError(f"{self.path} is not signed, and a secret is set: refused "
                                  "(export it with the same KCACHE_SECRET or --secret-file)")
            if not hmac.compare_digest(tag.strip(), sign(secret, raw).encode()):
                raise BundleError(f"{self.path} has a wrong signature for this secret: refused "
                                  "(tampered, or signed with another secret)")
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise BundleError(f"{self.path}: {MANIFEST} is not JSON ({exc})") from None
        if (not isinstance(doc, dict) or doc.get("format") != BUNDLE_FORMAT
                or not isinstance(doc.get("entries"), list)):
            raise BundleError(f"{self.path}: {MANIFEST} is not a kcache bundle manifest")
        if doc.get("version") != BUNDLE_VERSION:
            raise BundleError(f"{self.path}: bundle version {doc.get('version')!r} is not "
                              f"{BUNDLE_VERSION} (made by another kcache version)")
        self._records = {}
        for rec in doc["entries"]:
            if (isinstance(rec, dict) and isinstance(rec.get("key"), str)
                    and isinstance(rec.get("blake2b"), str)):
                self._records[rec["key"]] = rec
        return doc

    # -- the tier protocol -----------------------------------------------------------------------
    def records(self) -> list[dict]:
        """The manifest's entry records (key, kernel, signature, arch, size, toolchain)."""
        return list(self._records.values())

    def keys(self) -> Iterator[str]:
        """Keys both listed in the manifest and present as entry members; a listed key with
        no member is recorded in ``problems``."""
        for key in self._records:
            if key in self._index:
                yield key
            else:
                self.problems.setdefault(key, "listed in the manifest but not in the bundle")

    def read(self, key: str, limit: int) -> Blob | None:
        """The entry bytes of ``key`` (None when absent). Raises CorruptEntry when the member
        is larger than ``limit`` or its bytes differ from the manifest's digest."""
        member = self._index.get(key)
        if member is None or key not in self._records:
            return None
        limit = min(limit, self.max_entry_size)
        if member.size > limit:
            raise CorruptEntry(f"file too large: {member.size} bytes (limit {limit})", "too_large")
        try:
            data = self._tar.extractfile(member).read(member.size)
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise TierError("io", f"{self.path}: cannot read {member.name}: {exc}") from None
        if len(data) != member.size:
            raise CorruptEntry(f"truncated: {len(data)} of {member.size} bytes", "truncated")
        if not hmac.compare_digest(digest(data), self._records[key]["blake2b"]):
            raise CorruptEntry("differs from the bundle's manifest", "checksum")
        return Blob(data)

    def write(self, key: str, data: bytes) -> None:
        raise TierError("unavailable", f"{self.path} is a bundle: read-only")

    def remove(self, key: str) -> bool:
        raise TierError("unavailable", f"{self.path} is a bundle: read-only")

    def close(self) -> None:
        for f in (getattr(self, "_tar", None), getattr(self, "_file", None)):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

"""Reading version-1 bundles (kcache 0.1's tar format), under bounds, without a secret.

A version-1 bundle is a tar (zstd-compressed or not) holding ``manifest.json`` (``{"format":
"kcache-bundle", "version": 1, "entries": [{"key", "blake2b" (hex), ...}]}``),
``manifest.hmac`` when signed, and ``entries/<key>.kce``. Its signature is a tar member, so
it can only be checked after the tar has been parsed: with a secret set such a bundle is
refused (export it again). Without one it is read under bounds, each checked before the
next stage sees the bytes: decompression (:func:`kcache.bundle.inflate_cap`), the tar's
headers walked before ``tarfile`` reads them (extended pax/GNU headers of at most
MAX_EXTENDED bytes: CPython's tarfile spends memory quadratic in a hostile pax header,
CVE-2024-6232; sizes inside the file; at most MAX_MEMBERS members; an end-of-archive mark),
and the manifest (MAX_MANIFEST bytes, nesting and object count bounded).
"""
from __future__ import annotations

import json
import os
import re
import tarfile
from pathlib import Path

from .bundle import (_ZSTD_MAGIC, BUNDLE_FORMAT, MAX_ENTRIES, BundleError, Contents, Region,
                     inflate, inflate_cap, pread_exact)

VERSION = 1
MANIFEST = "manifest.json"
SIGNATURE = "manifest.hmac"
MAX_EXTENDED = 1024  # bytes of a pax or GNU long-name header (kcache wrote none: USTAR)
MAX_MEMBERS = MAX_ENTRIES + 2  # entries, the manifest and its signature
MAX_MANIFEST = 4 << 20  # bytes: ~10,000 records; its JSON objects cost ~20 x its size
MAX_CONTAINERS = 4 * MAX_ENTRIES  # JSON objects and arrays in a manifest (one or two a record)
_ENTRY_RE = re.compile(r"entries/([0-9a-f]{8,128})\.kce")
_HEX = re.compile(r"[0-9a-f]{64}")
_BLOCK = 512
_EXTENDED = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)


def open_v1(path: Path, fd: int, size: int, head: bytes, secret: bytes | None) -> Contents:
    """Index the version-1 bundle open as ``fd`` (``size`` bytes, starting with ``head``).
    Raises BundleError: a secret is set, not a tar, over a bound."""
    zstd = head.startswith(_ZSTD_MAGIC)
    if not zstd and pread_exact(fd, 5, 257) != b"ustar":
        raise BundleError(f"{path} is not a kcache bundle (neither a version-{VERSION} tar nor "
                          "a version-2 bundle)")
    if secret is not None:
        raise BundleError(f"{path} is a version-1 bundle, whose signature can only be checked "
                          "after its tar is parsed; a secret is set: refused (export it again "
                          "with this kcache)")
    found = Contents(fd, version=VERSION)
    try:
        if zstd:
            tmp, size = inflate(path, Region(fd, 0, size), inflate_cap(size))
            found.fd = os.dup(tmp.fileno())
            found.owned.append(found.fd)
            tmp.close()
        _walk_headers(path, found.fd, size)
        _index_tar(path, found)
    except BaseException:
        for owned in found.owned:
            os.close(owned)
        raise
    return found


def _walk_headers(path: Path, fd: int, size: int) -> None:
    """Walk the tar's 512-byte headers as tarfile will, refusing what would cost it more than
    the file's size: an extended header over MAX_EXTENDED bytes, a member declaring more
    bytes than the file holds, more than MAX_MEMBERS members, no end-of-archive mark."""
    pos, members = 0, 0
    while True:
        block = pread_exact(fd, _BLOCK, pos)
        if len(block) < _BLOCK:
            raise BundleError(f"{path} is truncated: its tar ends at byte {pos} without the "
                              "end-of-archive mark")
        if block == bytes(_BLOCK):
            return
        members += 1
        if members > MAX_MEMBERS:
            raise BundleError(f"{path} has more than {MAX_MEMBERS} tar members: refused")
        name = block[:100].split(b"\0", 1)[0].decode("utf-8", "replace")[:100]
        kind = block[156:157]
        try:
            declared = tarfile.nti(block[124:136])
        except tarfile.InvalidHeaderError:
            raise BundleError(f"{path} is not a readable tar: the header of member {name!r} "
                              f"(byte {pos}) has no valid size") from None
        if kind in _EXTENDED and declared > MAX_EXTENDED:
            raise BundleError(f"{path}: member {name!r} (byte {pos}) is an extended header of "
                              f"{declared} bytes (accepted: at most {MAX_EXTENDED}): refused")
        data = kind in _EXTENDED or kind in tarfile.REGULAR_TYPES or kind not in tarfile.SUPPORTED_TYPES
        if data and not 0 <= declared <= size - pos - _BLOCK:
            raise BundleError(f"{path}: member {name!r} (byte {pos}) declares {declared} bytes, "
                              f"more than the {size}-byte tar holds: refused")
        pos += _BLOCK + (-(-declared // _BLOCK) * _BLOCK if data else 0)


def _index_tar(path: Path, found: Contents) -> None:
    with os.fdopen(os.dup(found.fd), "rb") as raw:
        raw.seek(0)  # a dup shares the offset, which writing the temp file moved
        try:
            with tarfile.open(fileobj=raw, mode="r:") as tar:
                members = tar.getmembers()
                manifest = _member_bytes(path, tar, members, MANIFEST, MAX_MANIFEST)
                found.signed = _member_bytes(path, tar, members, SIGNATURE, 256) is not None
        except (tarfile.TarError, EOFError, ValueError, OSError) as exc:
            raise BundleError(f"{path} is not a readable tar ({exc})") from None
    if manifest is None:
        raise BundleError(f"{path} is not a kcache bundle (no {MANIFEST})")
    digests = _manifest(path, manifest)
    entries = {}
    for m in members:
        got = _ENTRY_RE.fullmatch(m.name)
        if m.name in (MANIFEST, SIGNATURE) and m.isreg():
            continue
        if got is None:
            found.notes[m.name[:200]] = "not an entry of a bundle: never read"
        elif not m.isreg():
            found.refused[got.group(1)] = "not a regular member (link or device): never read"
        else:
            entries.setdefault(got.group(1), []).append(m)
    for key, blake in digests.items():
        if key in found.refused and isinstance(blake, bytes):
            continue
        if not isinstance(blake, bytes):
            found.refused[key] = blake  # why its record is unusable
        elif key not in entries:
            found.refused[key] = "listed in the manifest but not in the bundle"
        else:
            for m in entries[key]:
                found.add(key, m.offset_data, m.size, blake)
    for key in [k for k in found.refused if k not in digests]:  # not listed: never read, a note
        found.notes[key] = found.refused.pop(key)


def _member_bytes(path: Path, tar, members, name: str, limit: int) -> bytes | None:
    found = [m for m in members if m.name == name]
    if not found:
        return None
    if len(found) > 1 or not found[0].isreg() or found[0].size > limit:
        raise BundleError(f"{path}: {name} is not a single regular member of at most "
                          f"{limit} bytes")
    return tar.extractfile(found[0]).read(limit + 1)


def _manifest(path: Path, raw: bytes) -> dict:
    """{key: BLAKE2b bytes, or the reason its record is unusable} from the manifest's bytes."""
    if raw.count(b"{") + raw.count(b"[") > MAX_CONTAINERS:
        raise BundleError(f"{path}: {MANIFEST} holds more than {MAX_CONTAINERS} JSON objects "
                          "and arrays: refused")
    try:
        doc = json.loads(raw)
    except RecursionError:
        raise BundleError(f"{path}: {MANIFEST} is nested too deeply: refused") from None
    except ValueError as exc:
        raise BundleError(f"{path}: {MANIFEST} is not JSON ({exc})") from None
    if (not isinstance(doc, dict) or doc.get("format") != BUNDLE_FORMAT
            or not isinstance(doc.get("entries"), list)):
        raise BundleError(f"{path}: {MANIFEST} is not a kcache bundle manifest")
    if doc.get("version") != VERSION:
        raise BundleError(f"{path}: bundle version {doc.get('version')!r} is not "
                          f"{VERSION} (made by another kcache version)")
    digests: dict = {}
    for i, rec in enumerate(doc["entries"], 1):
        key = rec.get("key") if isinstance(rec, dict) else None
        if not isinstance(key, str) or not _ENTRY_RE.fullmatch(f"entries/{key}.kce"):
            digests[f"record {i}"] = "its key is not a kcache key (8-128 lowercase hex digits)"
            continue
        blake = rec.get("blake2b")
        digests[key] = (bytes.fromhex(blake) if isinstance(blake, str) and _HEX.fullmatch(blake)
                        else "its blake2b digest in the manifest is not 64 hex digits")
    return digests

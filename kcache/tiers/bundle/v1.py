"""Reading version-1 bundles (kcache 0.1's tar format), under bounds, without a secret.

A version-1 bundle is a tar (zstd-compressed or not) holding ``manifest.json`` (``{"format":
"kcache-bundle", "version": 1, "entries": [{"key", "blake2b" (hex), ...}]}``),
``manifest.hmac`` when signed, and ``entries/<key>.kce``. Its signature is a tar member, so
it can only be checked after the tar has been parsed: with a secret set such a bundle is
refused (export it again). Without one it is read under bounds, each checked before the
next stage sees the bytes: decompression (:func:`kcache.bundle.inflate_cap`), the tar's
512-byte headers, each parsed alone by ``tarfile.TarInfo.frombuf`` (only the USTAR member
types kcache wrote or refuses one by one: a pax, Solaris, GNU long-name or sparse header is
refused whole, since CPython's tarfile spends memory quadratic in a hostile pax header,
CVE-2024-6232, and such headers move where the next header starts; sizes inside the file; at
most MAX_MEMBERS members; an end-of-archive mark), and the manifest (MAX_MANIFEST bytes,
nesting and object count bounded). ``tarfile.TarFile``, which would follow those headers,
never reads the file.
"""
from __future__ import annotations

import json
import os
import re
import tarfile
from pathlib import Path
from typing import Iterator

from .common import (ZSTD_MAGIC, BUNDLE_FORMAT, MAX_ENTRIES, BundleError, Contents, Region,
                     inflate, inflate_cap, pread_exact)

VERSION = 1
MANIFEST = "manifest.json"
SIGNATURE = "manifest.hmac"
MAX_MEMBERS = MAX_ENTRIES + 2  # entries, the manifest and its signature
MAX_MANIFEST = 4 << 20  # bytes: ~10,000 records; its JSON objects cost ~20 x its size
MAX_CONTAINERS = 4 * MAX_ENTRIES  # JSON objects and arrays in a manifest (one or two a record)
MAX_NOTES = 1000  # members never read named one by one; the others are counted
_ENTRY_RE = re.compile(r"entries/([0-9a-f]{8,128})\.kce")
_HEX = re.compile(r"[0-9a-f]{64}")
_BLOCK = 512
#: Member types whose header tarfile reads in constant work, looking at no other block: what
#: kcache 0.1 wrote (regular files, USTAR) and the kinds refused one by one (never read).
_PLAIN = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE, tarfile.LNKTYPE, tarfile.SYMTYPE,
          tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.DIRTYPE, tarfile.FIFOTYPE)
_KINDS = {tarfile.XHDTYPE: "a pax extended header", tarfile.XGLTYPE: "a pax global header",
          tarfile.SOLARIS_XHDTYPE: "a Solaris extended header",
          tarfile.GNUTYPE_LONGNAME: "a GNU long-name header",
          tarfile.GNUTYPE_LONGLINK: "a GNU long-link header",
          tarfile.GNUTYPE_SPARSE: "a GNU sparse file"}


def open_v1(path: Path, fd: int, size: int, head: bytes, secret: bytes | None,
            memory: bool = False) -> Contents:
    """Index the version-1 bundle open as ``fd`` (``size`` bytes, starting with ``head``);
    ``memory``: decompressed into memory, never onto a disk (a layer). Raises BundleError: a secret is set, not a tar, over a bound."""
    zstd = head.startswith(ZSTD_MAGIC)
    if not zstd and pread_exact(fd, 5, 257) != b"ustar":
        raise BundleError(f"{path} is not a kcache bundle (neither a version-{VERSION} tar nor "
                          "a version-2 or version-3 bundle)")
    if secret is not None:
        raise BundleError(f"{path} is a version-1 bundle, whose signature can only be checked "
                          "after its tar is parsed; a secret is set: refused (export it again "
                          "with this kcache)")
    found = Contents(fd, version=VERSION, memory=memory)
    try:
        if zstd:
            tmp, size = inflate(path, Region(fd, 0, size), inflate_cap(size), memory)
            found.fd = os.dup(tmp.fileno())
            found.owned.append(found.fd)
            tmp.close()
        _index_tar(path, found, _members(path, found.fd, size))
    except BaseException:
        for owned in found.owned:
            os.close(owned)
        raise
    return found


def _members(path: Path, fd: int, size: int) -> Iterator[tarfile.TarInfo]:
    """The tar's members, one at a time, each header parsed alone by
    ``tarfile.TarInfo.frombuf`` and its data located as tarfile's ``_proc_builtin`` does
    (``offset_data``). Refused: a damaged header, a member type not in _PLAIN (a pax, Solaris
    or GNU header makes tarfile read more than its block and may move the next header), a
    member declaring more bytes than the file holds, more than MAX_MEMBERS members, no
    end-of-archive mark."""
    pos = 0
    for _ in range(MAX_MEMBERS + 1):
        block = pread_exact(fd, _BLOCK, pos)
        if len(block) < _BLOCK:
            raise BundleError(f"{path} is truncated: its tar ends at byte {pos} without the "
                              "end-of-archive mark")
        if block == bytes(_BLOCK):
            return
        try:
            info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
        except tarfile.HeaderError as exc:
            raise BundleError(f"{path} is not a readable tar: the header at byte {pos} is "
                              f"damaged ({exc})") from None
        name = info.name[:100]
        if info.type not in _PLAIN:
            what = _KINDS.get(info.type, f"of tar type {info.type!r}")
            raise BundleError(f"{path}: member {name!r} (byte {pos}) is {what}, which kcache "
                              "never writes (accepted: USTAR files, links, folders): refused")
        data = info.isreg()  # of these types, only files are followed by data blocks
        if data and not 0 <= info.size <= size - pos - _BLOCK:
            raise BundleError(f"{path}: member {name!r} (byte {pos}) declares {info.size} "
                              f"bytes, more than the {size}-byte tar holds: refused")
        info.offset, info.offset_data = pos, pos + _BLOCK
        yield info
        pos += _BLOCK + (-(-info.size // _BLOCK) * _BLOCK if data else 0)
    raise BundleError(f"{path} has more than {MAX_MEMBERS} tar members: refused")


def _index_tar(path: Path, found: Contents, members: Iterator[tarfile.TarInfo]) -> None:
    """Index the members as they come, keeping only what an entry needs (a member's names
    can be 2 KB of text: 100,000 of them held at once cost ~200 MB)."""
    entries: dict = {}
    over = 0  # members never read beyond the first MAX_NOTES named
    own: dict = {MANIFEST: [], SIGNATURE: []}  # (regular, offset, size) of each
    for m in members:
        got = _ENTRY_RE.fullmatch(m.name)
        if m.name in own:
            own[m.name].append((m.isreg(), m.offset_data, m.size))
        elif got is None:
            over += _note(found.notes, m.name, "not an entry of a bundle: never read")
        elif not m.isreg():
            found.refused[got.group(1)] = "not a regular member (link or device): never read"
        else:
            entries.setdefault(got.group(1), []).append((m.offset_data, m.size))
    manifest = _member_bytes(path, found.fd, own[MANIFEST], MANIFEST, MAX_MANIFEST)
    found.signed = _member_bytes(path, found.fd, own[SIGNATURE], SIGNATURE, 256) is not None
    if manifest is None:
        raise BundleError(f"{path} is not a kcache bundle (no {MANIFEST})")
    digests = _manifest(path, manifest)
    for key, blake in digests.items():
        if key in found.refused and isinstance(blake, bytes):
            continue
        if not isinstance(blake, bytes):
            found.refused[key] = blake  # why its record is unusable
        elif key not in entries:
            found.refused[key] = "listed in the manifest but not in the bundle"
        else:
            for offset, size in entries[key]:
                found.add(key, offset, size, blake)
    for key in [k for k in found.refused if k not in digests]:  # not listed: never read, a note
        over += _note(found.notes, key, found.refused.pop(key))
    if over:
        found.notes[f"{over} more members"] = f"never read either (the first {MAX_NOTES} are named)"


def _note(notes: dict, name: str, why: str) -> int:
    """Note a member never read, by name, unless MAX_NOTES are already: 1 then, else 0."""
    if len(notes) >= MAX_NOTES:
        return 1
    notes[name[:200]] = why
    return 0


def _member_bytes(path: Path, fd: int, found: list, name: str, limit: int) -> bytes | None:
    if not found:
        return None
    if len(found) > 1 or not found[0][0] or found[0][2] > limit:
        raise BundleError(f"{path}: {name} is not a single regular member of at most "
                          f"{limit} bytes")
    return pread_exact(fd, found[0][2], found[0][1])  # inside the file: checked


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

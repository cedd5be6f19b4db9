"""On-disk layout of a cache root (bucket ``v1``): every path inside a root is made here.

::

    <root>/CACHEDIR.TAG
    <root>/config.json
    <root>/v1/entries/ab/<key>.kce      one file per entry, sharded by the first 2 hex digits
    <root>/v1/entries/ab/.<key>.kce.<random>.tmp   an entry being written
    <root>/v1/locks/ab/<key>.lock       per-key locks; <root>/v1/locks/evict.lock
    <root>/v1/stats/<0-f>.msgpack       counter shards (+ .hits.msgpack, .lock)
    <root>/v1/quarantine/<key>.<ns>.<pid>.<random>.kce   entries that failed a check
    <root>/v1/toolchain.msgpack         toolchain versions per environment (kcache.toolchain.memoized)
    <root>/v1/code/<32 hex>.msgpack     code analyses of one source file (fingerprint.remembered)

Scans never follow a symlink: shard folders are opened ``O_DIRECTORY | O_NOFOLLOW`` and listed
through their descriptor, so a symlinked shard is skipped (warned once), never listed.
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
import stat
import time
from pathlib import Path
from typing import Iterator

from .fsio import open_dir
from .paths import RootDirs
from ..keys import KEY_RE
from ..warn import warn_once

BUCKET = "v1"
#: Folders of a root, relative to it ("/"-separated), as kcache.paths.RootDirs names them.
ENTRIES = f"{BUCKET}/entries"
LOCKS = f"{BUCKET}/locks"
STATS = f"{BUCKET}/stats"
QUARANTINE = f"{BUCKET}/quarantine"
CODE = f"{BUCKET}/code"
SUFFIX = ".kce"
LOCK_SUFFIX = ".lock"
_SHARD_RE = re.compile(r"[0-9a-f]{2}")
#: Quarantined file names, ``<key>.<unix ns>.<pid>.<8 hex>.kce`` (never two alike).
QUARANTINE_RE = re.compile(r"([0-9a-f]{8,128})\.\d+\.\d+\.[0-9a-f]{8}\.kce")


CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by kcache (GPU kernel cache).\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)


class Layout:
    """Paths of one cache root. No other module computes a path inside a root."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.bucket = self.root / BUCKET
        self.entries = self.bucket / "entries"
        self.locks = self.bucket / "locks"
        self.stats = self.bucket / "stats"
        self.quarantine = self.bucket / "quarantine"
        self.tag = self.root / "CACHEDIR.TAG"
        self.config = self.root / "config.json"
        self.toolchain_memo = self.bucket / "toolchain.msgpack"
        self.code = self.bucket / "code"
        self.evict_lock = self.locks / "evict.lock"

    def entry(self, key: str) -> Path:
        return self.entries / key[:2] / entry_name(key)

    def lock(self, key: str) -> Path:
        return self.locks / key[:2] / f"{key}{LOCK_SUFFIX}"

    def stats_files(self, shard: int) -> tuple[Path, Path, Path]:
        """(counters, per-entry hits, lock) of counter shard ``shard`` (0-15)."""
        x = format(shard, "x")
        return self.stats / f"{x}.msgpack", self.stats / f"{x}.hits.msgpack", self.stats / f"{x}.lock"

    def shard_dirs(self, first: str | None = None, dirs=None) -> Iterator[str]:
        """Names of the entry shard folders (2 lowercase hex digits; only those starting with
        ``first`` if given) that are real folders. Anything else in ``entries/`` is not
        kcache's; a symlinked shard is skipped with one warning. ``dirs``: the root's
        kcache.paths.RootDirs (default: a fresh one)."""
        for name, st in folder_listing(dirs or RootDirs(self.root), ENTRIES):
            if not _SHARD_RE.fullmatch(name) or (first is not None and not name.startswith(first)):
                continue
            if stat.S_ISLNK(st.st_mode):
                warn_symlink(self.entries / name)
            elif stat.S_ISDIR(st.st_mode):
                yield name


def entry_name(key: str) -> str:
    return f"{key}{SUFFIX}"


def code_memo_name(source_file: str, tag: str) -> str:
    """The file in :data:`CODE` of the code analyses of ``source_file`` (a code object's
    ``co_filename``) valid for ``tag``: a digest of both, so no name a program gives reaches
    the disk, and processes of two tags (two Pythons sharing a root) keep a file each."""
    data = f"{tag}\0{source_file}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).hexdigest() + ".msgpack"


#: A file of :data:`CODE` (what ``kcache clear`` removes there).
CODE_MEMO_RE = re.compile(r"[0-9a-f]{32}\.msgpack")


def quarantine_name(key: str) -> str:
    """A quarantine file name for ``key`` that no other move (this process or another, this
    nanosecond or another) can take."""
    return f"{key}.{time.time_ns()}.{os.getpid()}.{secrets.token_hex(4)}{SUFFIX}"


def entry_key(shard: str, name: str) -> str | None:
    """The key of file ``name`` in shard folder ``shard``, or None when it is not an entry's
    name (``<key>.kce``, key as made by make_key, first two digits = the shard): such a stray
    file was not written by kcache and is never read, counted, moved or deleted."""
    if not name.endswith(SUFFIX):
        return None
    key = name[: -len(SUFFIX)]
    return key if KEY_RE.fullmatch(key) and key.startswith(shard) else None


def warn_symlink(path: Path) -> None:
    """One warning per process for a symlink where kcache expects one of its folders."""
    warn_once(f"symlink:{path}", f"kcache: {path} is a symlink, not a folder of the cache; "
              "skipped (kcache never follows a symlink out of its root)")


def listing(d, dir_fd: int | None = None) -> list[tuple[str, os.stat_result]]:
    """``(name, lstat)`` of every file in folder ``d`` (opened without following a symlink in
    its last component; relative to ``dir_fd`` when given), each ``lstat`` taken through the
    folder's descriptor while it is open; [] when it cannot be listed (gone, not a folder, a
    symlink, no permission): a scan skips what it cannot see."""
    try:
        fd = open_dir(d, dir_fd)
    except OSError:
        return []
    out = []
    try:
        for name in os.listdir(fd):
            try:
                out.append((name, os.stat(name, dir_fd=fd, follow_symlinks=False)))
            except OSError:
                continue  # removed meanwhile
    except OSError:
        return []
    finally:
        os.close(fd)
    return out


def folder_listing(dirs: RootDirs, rel: str, name: str | None = None) -> list[tuple[str, os.stat_result]]:
    """:func:`listing` of folder ``rel`` of a root (or of its subfolder ``name``), reached
    through ``dirs`` (kcache.paths: no symlink on the way is followed); [] when it cannot
    be listed."""
    try:
        fd = dirs.folder(rel)
    except OSError:
        return []
    return listing(name if name is not None else ".", fd)


def scan(layout: Layout, first: str | None = None, *, regular_only: bool = True,
         dirs: RootDirs | None = None) -> Iterator[tuple[str, Path, os.stat_result]]:
    """(key, path, lstat) of every entry file, listed through descriptors (no payload read,
    no symlink followed; ``dirs``: the root's kcache.paths.RootDirs, default a fresh one).

    Only names that are entry names (:func:`entry_key`) are listed; with ``regular_only``
    (default) only regular files, else also e.g. a folder, FIFO or symlink named like an
    entry (reported by clear, verify and ``entries(include_broken=True)``)."""
    dirs = dirs or RootDirs(layout.root)
    for shard in list(layout.shard_dirs(first, dirs)):
        for name, st in folder_listing(dirs, ENTRIES, shard):
            key = entry_key(shard, name)
            if key is None or (regular_only and not stat.S_ISREG(st.st_mode)):
                continue
            yield key, layout.entries / shard / name, st

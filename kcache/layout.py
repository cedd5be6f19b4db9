"""On-disk layout of a cache root (bucket ``v1``); see docs/store.md.

::

    <root>/CACHEDIR.TAG
    <root>/config.json
    <root>/v1/entries/ab/<key>.kce      one file per entry, sharded by the first 2 hex digits
    <root>/v1/entries/ab/.<key>.*.tmp   temp files being written (swept by prune after an hour)
    <root>/v1/locks/ab/<key>.lock       per-key locks; <root>/v1/locks/evict.lock
    <root>/v1/stats/<0-f>.msgpack       counter shards (+ .hits.msgpack, .lock)
    <root>/v1/quarantine/               entries that failed a check
    <root>/v1/toolchain.msgpack         toolchain versions per environment (kcache.toolchain.memoized)
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Iterator

from .keys import KEY_RE

BUCKET = "v1"
SUFFIX = ".kce"
TMP_SUFFIX = ".tmp"
_SHARD_RE = re.compile(r"[0-9a-f]{2}")
CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by kcache (GPU kernel cache).\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)


class Layout:
    """Paths of one cache root."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.bucket = self.root / BUCKET
        self.entries = self.bucket / "entries"
        self.locks = self.bucket / "locks"
        self.stats = self.bucket / "stats"
        self.quarantine = self.bucket / "quarantine"
        self.tag = self.root / "CACHEDIR.TAG"

    def entry(self, key: str) -> Path:
        return self.entries / key[:2] / f"{key}{SUFFIX}"

    def shard_dirs(self, first: str | None = None) -> Iterator[Path]:
        """Existing entry shard directories, named by 2 lowercase hex digits (only those
        starting with ``first`` if given). Anything else in ``entries/`` is not kcache's."""
        try:
            names = sorted(os.listdir(self.entries))
        except OSError:
            return
        for name in names:
            if _SHARD_RE.fullmatch(name) and (first is None or name.startswith(first)):
                yield self.entries / name


def entry_key(shard: str, name: str) -> str | None:
    """The key of file ``name`` in shard directory ``shard``, or None when it is not an
    entry's name (``<key>.kce``, key as made by make_key, first two digits = the shard): such a
    stray file was not written by kcache and is never read, counted, moved or deleted."""
    if not name.endswith(SUFFIX):
        return None
    key = name[: -len(SUFFIX)]
    return key if KEY_RE.fullmatch(key) and key.startswith(shard) else None


def scan(layout: Layout, first: str | None = None, *,
         regular_only: bool = True) -> Iterator[tuple[str, Path, os.stat_result]]:
    """(key, path, stat) of every entry file, via os.scandir (no payload read).

    Only names that are entry names (:func:`entry_key`) are listed; with ``regular_only``
    (default) only regular files, else also e.g. a directory named like an entry (reported
    by clear, verify and ``entries(include_broken=True)``)."""
    for d in layout.shard_dirs(first):
        for de in _listing(d):
            key = entry_key(d.name, de.name)
            if key is None:
                continue
            try:
                st = de.stat()
            except OSError:
                continue  # removed meanwhile
            if regular_only and not stat.S_ISREG(st.st_mode):
                continue
            yield key, Path(de.path), st


def _listing(d: Path) -> list:
    """The ``os.DirEntry`` objects of folder ``d``; [] when it cannot be listed (gone, not a
    folder, no permission): a scan skips what it cannot see."""
    try:
        with os.scandir(d) as it:
            return list(it)
    except OSError:
        return []


def temp_files(layout: Layout) -> Iterator[tuple[Path, os.stat_result]]:
    """Temp files (``*.tmp``) in entry shards, stats dir and the root."""
    dirs = list(layout.shard_dirs()) + [layout.stats, layout.root]
    for d in dirs:
        for de in _listing(d):
            if de.name.endswith(TMP_SUFFIX) and de.name.startswith("."):
                try:
                    yield Path(de.path), de.stat()
                except OSError:
                    continue

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
from pathlib import Path
from typing import Iterator

BUCKET = "v1"
SUFFIX = ".kce"
TMP_SUFFIX = ".tmp"
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
        """Existing entry shard directories (only those starting with ``first`` if given)."""
        try:
            names = sorted(os.listdir(self.entries))
        except OSError:
            return
        for name in names:
            if len(name) == 2 and (first is None or name.startswith(first)):
                yield self.entries / name


def scan(layout: Layout, first: str | None = None) -> Iterator[tuple[str, Path, os.stat_result]]:
    """(key, path, stat) of every entry file, via os.scandir (no payload read)."""
    for d in layout.shard_dirs(first):
        try:
            it = os.scandir(d)
        except OSError:
            continue
        with it:
            for de in it:
                name = de.name
                if not name.endswith(SUFFIX) or name.startswith("."):
                    continue
                try:
                    st = de.stat()
                except OSError:
                    continue  # removed meanwhile
                yield name[: -len(SUFFIX)], Path(de.path), st


def temp_files(layout: Layout) -> Iterator[tuple[Path, os.stat_result]]:
    """Temp files (``*.tmp``) in entry shards, stats dir and the root."""
    dirs = list(layout.shard_dirs()) + [layout.stats, layout.root]
    for d in dirs:
        try:
            it = os.scandir(d)
        except OSError:
            continue
        with it:
            for de in it:
                if de.name.endswith(TMP_SUFFIX) and de.name.startswith("."):
                    try:
                        yield Path(de.path), de.stat()
                    except OSError:
                        continue

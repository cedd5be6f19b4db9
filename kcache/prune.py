"""Planning of prune/eviction and the reports of prune and verify.

Policy: first every entry matching ``older_than`` (last use = mtime) or ``where(EntryInfo)``;
then, over what is left, least recently used first until the rest fits in ``max_size``.
Temp files (``.*.tmp``) older than an hour are leftovers of killed writers and are swept.
"""
from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Callable

from .entry import EntryInfo
from .errors import CorruptEntry, NewerFormat
from .layout import Layout, scan, temp_files

TEMP_MAX_AGE = 3600.0  # seconds; a writer never takes that long between create and replace


@dataclasses.dataclass
class PruneReport:
    """What prune removed (or would remove, with ``dry_run``). Sizes in bytes."""

    dry_run: bool = False
    removed: list[EntryInfo] = dataclasses.field(default_factory=list)
    bytes_freed: int = 0
    entries_left: int = 0
    bytes_left: int = 0
    temp_files: int = 0
    lock_files: int = 0  # lock files of absent entries swept


@dataclasses.dataclass
class VerifyReport:
    """Outcome of a full check: ``corrupt`` lists (path, reason); ``newer`` lists entries of a
    newer format (left alone); ``quarantined`` counts files moved with ``fix=True``."""

    checked: int = 0
    ok: int = 0
    corrupt: list[tuple[Path, str]] = dataclasses.field(default_factory=list)
    newer: list[Path] = dataclasses.field(default_factory=list)
    quarantined: int = 0


@dataclasses.dataclass
class Plan:
    remove: list  # (key, path, stat)
    infos: dict  # key -> EntryInfo, when headers were read
    kept: int
    kept_bytes: int


def plan_prune(store, layout: Layout, max_size: int | None, older_than: float | None,
               where: Callable[[EntryInfo], bool] | None, hits: dict) -> Plan:
    """Decide which entries of ``layout`` to remove (see module docstring)."""
    now = time.time()
    files = sorted(scan(layout), key=lambda t: t[2].st_mtime)  # LRU first
    remove, keep, infos = [], [], {}
    for key, path, st in files:
        doomed = older_than is not None and st.st_mtime < now - older_than
        if not doomed and where is not None:
            try:
                info = store._info(key, path, layout, False, hits)
            except (OSError, CorruptEntry, NewerFormat):
                keep.append((key, path, st))  # verify handles broken files
                continue
            infos[key] = info
            doomed = bool(where(info))
        (remove if doomed else keep).append((key, path, st))
    total = sum(st.st_size for _k, _p, st in keep)
    if max_size is not None:
        i = 0
        while total > max_size and i < len(keep):
            remove.append(keep[i])
            total -= keep[i][2].st_size
            i += 1
        keep = keep[i:]
    return Plan(remove, infos, len(keep), total)


def sweep_temp(layout: Layout, max_age: float = TEMP_MAX_AGE, dry_run: bool = False) -> int:
    """Remove temp files older than ``max_age`` seconds; returns how many (would be) removed."""
    cutoff = time.time() - max_age
    n = 0
    for path, st in list(temp_files(layout)):
        if st.st_mtime <= cutoff:
            if not dry_run:
                try:
                    os.unlink(path)
                except OSError:
                    continue
            n += 1
    return n


def sweep_locks(layout: Layout, hold, max_age: float = TEMP_MAX_AGE) -> int:
    """Remove lock files of keys that have no entry, unused for ``max_age`` seconds.

    Each is unlinked while its lock is held (``hold(key)`` -> context manager yielding True
    when held, non-blocking), so no current holder loses it. (A process that opened the file in
    the microseconds before the unlink could still lock the orphan inode: at worst one
    duplicate compile; totals are then fixed by recount.) Lock files are never modified, so
    their mtime is their creation time."""
    cutoff = time.time() - max_age
    n = 0
    try:
        shards = sorted(d for d in os.listdir(layout.locks) if len(d) == 2)
    except OSError:
        return 0
    for shard in shards:
        try:
            it = list(os.scandir(layout.locks / shard))
        except OSError:
            continue
        for de in it:
            if not de.name.endswith(".lock"):
                continue
            key = de.name[:-5]
            try:
                if de.stat().st_mtime > cutoff or layout.entry(key).exists():
                    continue
                with hold(key) as held:
                    if held and not layout.entry(key).exists():
                        os.unlink(de.path)
                        n += 1
            except OSError:
                continue
    return n

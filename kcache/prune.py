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
from .keys import KEY_RE
from .layout import Layout, scan, temp_files

TEMP_MAX_AGE = 3600.0  # seconds; a writer never takes that long between create and replace


# Why an entry was left in place by clear/prune/remove_many (NotRemoved.reason starts so).
BUSY = "busy (locked by another process)"
NOT_REGULAR = "not a regular file"
NEWER = "written by a newer kcache format version (never deleted)"


@dataclasses.dataclass
class NotRemoved:
    """An entry that clear/prune/remove_many meant to remove but left in place.

    ``reason``: :data:`BUSY` (its lock is held by another process; after a lock timeout the
    text adds how long it waited), :data:`NOT_REGULAR` (e.g. a directory named like an entry),
    :data:`NEWER`, "no such entry", or the OS error, e.g. "Read-only file system (EROFS)"."""

    key: str
    path: Path
    reason: str


class RemoveReport(int):
    """Outcome of ``Store.clear()`` / ``Store.remove_many()``.

    Its int value is the number of entries removed (so ``n = store.clear()`` keeps working);
    ``removed``: their keys; ``bytes_freed``: their file sizes summed (bytes); ``failed``: a
    :class:`NotRemoved` per entry left in place, with the reason."""

    removed: list[str]
    bytes_freed: int
    failed: list[NotRemoved]

    def __new__(cls, removed: list[str], bytes_freed: int, failed: list[NotRemoved]):
        self = super().__new__(cls, len(removed))
        self.removed, self.bytes_freed, self.failed = removed, bytes_freed, failed
        return self

    def __str__(self) -> str:  # "removed {n} entries" prints the count
        return str(int(self))

    def __repr__(self) -> str:
        return f"RemoveReport(removed={len(self.removed)}, bytes_freed={self.bytes_freed}, failed={self.failed!r})"


@dataclasses.dataclass
class PruneReport:
    """What prune removed (or would remove, with ``dry_run``). Sizes in bytes.

    ``removed`` holds every entry removed, including broken ones (``EntryInfo.problem`` set),
    so ``bytes_freed`` is exactly the sum of their ``file_size``. ``failed``: a
    :class:`NotRemoved` per entry chosen but left in place (busy, newer format, OS error); with
    ``dry_run``, the newer-format entries that a real prune would refuse to delete."""

    dry_run: bool = False
    removed: list[EntryInfo] = dataclasses.field(default_factory=list)
    bytes_freed: int = 0
    entries_left: int = 0
    bytes_left: int = 0
    temp_files: int = 0
    lock_files: int = 0  # lock files of absent entries swept
    failed: list[NotRemoved] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class VerifyReport:
    """Outcome of a full check: ``corrupt`` lists (path, reason); ``newer`` lists entries of a
    newer format (left alone); ``quarantined`` counts files actually moved with ``fix=True``;
    ``not_quarantined`` lists (path, why it was left in place) for defective entries of the
    writable root that ``fix=True`` could not move (e.g. read-only root, busy lock)."""

    checked: int = 0
    ok: int = 0
    corrupt: list[tuple[Path, str]] = dataclasses.field(default_factory=list)
    newer: list[Path] = dataclasses.field(default_factory=list)
    quarantined: int = 0
    not_quarantined: list[tuple[Path, str]] = dataclasses.field(default_factory=list)


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
            key = de.name[:-5]
            if not de.name.endswith(".lock") or not KEY_RE.fullmatch(key) or not key.startswith(shard):
                continue  # not a lock file kcache made: leave it
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

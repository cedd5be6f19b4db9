"""Maintenance of the writable local tier: clear, prune, verify, recount and eviction.

Every operation works on the writable root only (read-only layers and remote tiers are never
changed), removes each entry under its key lock, goes on past an entry it cannot remove and
reports why (kcache.prune reports), and updates the totals for exactly the files removed.

Policy (prune and eviction share one selection, :func:`lru_order`): first every entry
matching ``older_than`` (last use = mtime, recorded at every hit) or ``where(EntryInfo)``;
then, over what is left, least recently used first (ties: oldest creation first) until the
rest fits in the size cap; files larger than ``max_entry_size`` (never served) go first.
Temp files of killed writers older than an hour are swept by both, and counted; prune also
removes quarantined files older than ``quarantine_age`` and, given ``older_than``, files of
remembered code analyses not used for that long (the next process that needs one
analyses again: a little time, never another key).

The store hands these operations one :class:`Housekeeping`: its writable root, locks,
counters and the few store operations they need, nothing of the store's internals.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import stat
import time
from typing import TYPE_CHECKING, Callable

from ..errors import CorruptEntry, LockTimeout, NewerFormat
from ..keys import KEY_RE
from ..tiers.local import GONE, NEWER, NOT_REGULAR, os_reason
from ..disk.fsio import lstat_at
from ..disk.layout import LOCK_SUFFIX, LOCKS, folder_listing
from ..disk.locks import BUSY as LOCK_BUSY, STALE, try_global
from ..warn import warn_once
from .reports import (BUSY, TEMP_MAX_AGE, NotRemoved, PruneReport, RemoveReport, VerifyReport)
from .stats import SHARDS, shard_of

if TYPE_CHECKING:
    from ..disk.locks import KeyLocks
    from ..tiers.local import LocalTier
    from .stats import StatsBook

@dataclasses.dataclass(frozen=True)
class Housekeeping:
    """What the store hands maintenance (``Store`` builds one per operation).

    ``local``: the writable root (kcache.localtier.LocalTier); ``tiers``: the trusted local
    tiers in read order (verify reads them all); ``locks``: per-key locks
    (kcache.locks.KeyLocks); ``stats``: counters and totals (kcache.stats.StatsBook);
    ``max_entry_size`` (bytes), ``quarantine_age`` and ``lock_timeout`` (seconds).
    Callables: ``writable()`` -> bool, the root may be written now; ``ensure_root()`` ->
    bool, create the root (False when it cannot be used); ``count(key, now=False,
    **counters)``; ``info(key, path, tier, hits)`` -> EntryInfo from the header (raises
    OSError, CorruptEntry, NewerFormat); ``info_or_broken(key, path, tier, st, hits)`` ->
    EntryInfo (``problem`` set when unreadable) or None when gone; ``verify_bytes(key,
    data)`` -> (header, Entry), the verification path; ``quarantine(key, reason, st)`` ->
    None when moved, GONE, or why it was left."""

    local: "LocalTier"
    tiers: tuple
    locks: "KeyLocks"
    stats: "StatsBook"
    max_entry_size: int
    quarantine_age: float
    lock_timeout: float
    writable: Callable[[], bool]
    ensure_root: Callable[[], bool]
    count: Callable[..., None]
    info: Callable
    info_or_broken: Callable
    verify_bytes: Callable
    quarantine: Callable


EVICT_TARGET = 0.9  # a put crossing max_size evicts down to this fraction of it
DELTA_BATCH = 64  # removals of clear/prune/evict/remove_many between writes of the totals


def lru_order(files: list, max_entry_size: int | None = None) -> list:
    """``(key, path, lstat)`` items least recently used first: by mtime (the last use, to the
    nanosecond), ties by ctime (when the file was published). Files larger than
    ``max_entry_size`` (bytes) come first, whatever their mtime: they are refused unread, so
    they are no entry, and a 4 GiB one planted in the root must not push every real entry
    out before it."""
    big = max_entry_size if max_entry_size is not None else float("inf")
    return sorted(files, key=lambda t: (t[2].st_size <= big, t[2].st_mtime_ns, t[2].st_ctime_ns))


def select_lru(files: list, max_size: int | None) -> tuple[list, list]:
    """Split ``files`` (in :func:`lru_order`) into (removed, kept): least recently used
    first, until what is kept holds at most ``max_size`` bytes (None: keep all)."""
    total = sum(st.st_size for _k, _p, st in files)
    i = 0
    if max_size is not None:
        while total > max_size and i < len(files):
            total -= files[i][2].st_size
            i += 1
    return files[:i], files[i:]


class Removals:
    """Removes entries under their key locks and writes the totals every DELTA_BATCH
    removals, so a process killed mid-clear/prune leaves them off by at most one batch."""

    def __init__(self, house: Housekeeping, counter: str | None = None):
        self.house = house
        self.counter = counter  # e.g. "evictions", added per removal
        self.deltas: dict[int, list[int]] = {}

    def remove(self, key: str, *, blocking: bool = True) -> int | str | None:
        """Freed bytes, None when already gone, or why the entry was left."""
        house = self.house
        try:
            with house.locks.hold(key, blocking=blocking, if_stopped="leaving that entry in place") as held:
                if held is False:  # busy; None: no usable lock file (warned), go on alone
                    return BUSY
                if held == STALE:  # its holder is stopped: it may be writing that very entry
                    return f"{BUSY}; its holder shows no heartbeat (stopped?)"
                result = house.local.unlink(key)
        except LockTimeout:
            return f"{BUSY}; gave up after KCACHE_LOCK_TIMEOUT={house.lock_timeout:g} s"
        if isinstance(result, int):
            house.stats.forget(key)
            d = self.deltas.setdefault(shard_of(key), [0, 0, 0])
            d[0] -= 1
            d[1] -= result
            d[2] += 1
            if sum(c for _n, _b, c in self.deltas.values()) >= DELTA_BATCH:
                self.write()
        return result

    def write(self) -> None:
        """Write the gathered totals (and the counter) and start a new batch."""
        while self.deltas:
            shard, (n, b, c) = self.deltas.popitem()
            extra = {self.counter: c} if self.counter else {}
            self.house.stats.add(shard, now=True, entries=n, bytes=b, **extra)


def clear(house: Housekeeping) -> RemoveReport:
    """Every entry of the writable root (see ``Store.clear``)."""
    removed, freed, failed = [], 0, []
    batch = Removals(house)
    house.local.dirs.check()  # a folder swapped since the store opened is not entered
    try:
        for key, path, _st in list(house.local.scan(regular_only=False)):
            result = batch.remove(key)
            if isinstance(result, int):
                removed.append(key)
                freed += result
            elif result is not None:
                failed.append(NotRemoved(key, path, result))
    finally:
        batch.write()
    sweep_temp(house)  # only old ones: a fresh temp file belongs to a running put
    memos = house.local.remove_code_memos()  # what keys remembered (kcache.dispatcher)
    return RemoveReport(removed, freed, failed, code_memos=memos)


def remove_many(house: Housekeeping, keys: list[str]) -> RemoveReport:
    """Remove ``keys`` (checked keys) from the writable root (see ``Store.remove_many``)."""
    removed, freed, failed = [], 0, []
    batch = Removals(house)
    try:
        for key in dict.fromkeys(keys):
            path = house.local.layout.entry(key)
            result = batch.remove(key) if house.local.entry_stat(key) is not None else None
            if isinstance(result, int):
                removed.append(key)
                freed += result
            else:
                failed.append(NotRemoved(key, path, result or "no such entry"))
    finally:
        batch.write()
    return RemoveReport(removed, freed, failed)


def sweep_temp(house: Housekeeping, *, dry_run: bool = False) -> int:
    """Remove kcache's own temp files older than an hour (this user's only); count them."""
    n, _size = house.local.sweep_temp(TEMP_MAX_AGE, dry_run=dry_run)
    if n and not dry_run:
        house.count(None, now=True, temp_swept=n)
    return n


def evict(house: Housekeeping, target: int) -> None:
    """Remove least-recently-used entries until the root holds <= ``target`` bytes (kcache's
    old temp files are swept first: they take room too; and old lock files of absent entries,
    or a root kept under its cap by eviction alone grew one file per key it ever stored).
    Keys being written are skipped. Totals that count more than the pass finds on disk are
    lowered first (:func:`lower_drift`)."""
    house.local.dirs.check()
    sweep_temp(house)
    sweep_locks(house)
    counted = [house.stats.shard_totals(s) for s in range(SHARDS)]  # before the scan: see lower_drift
    files = lru_order(list(house.local.scan()), house.max_entry_size)
    lower_drift(house, files, counted)
    chosen, _kept = select_lru(files, target)
    batch = Removals(house, "evictions")
    try:
        for key, _path, _st in chosen:
            batch.remove(key, blocking=False)
    finally:
        batch.write()


def warn_over_cap(newest: int, max_size: int) -> None:
    """Said once, for an entry of ``newest`` bytes just put, when it is more than
    EVICT_TARGET of ``max_size``: the first eviction after it is stored removes it (at once,
    when it crossed the cap), so every run compiles its kernel again."""
    if newest <= max_size * EVICT_TARGET:
        return
    warn_once("entry-over-cap", f"kcache: an entry of {newest} bytes is larger than the "
              f"cache's size cap keeps (max_size {max_size} bytes, evicted down to "
              f"{EVICT_TARGET:.0%} of it): the next eviction removes it, so its kernel "
              "compiles again in every process; raise max_size (KCACHE_MAX_SIZE, kcache "
              "config set max_size)")


def evict_over_cap(house: Housekeeping, max_size: int, file_mode: int) -> None:
    """A put crossed ``max_size`` (bytes): evict down to EVICT_TARGET of it, under the global
    eviction lock (kcache.disk.locks.try_global). Another process evicting: nothing to do; a
    stopped holder or an unusable lock file: evict without it, warned once."""
    layout, locks = house.local.layout, house.locks
    lock = try_global(layout.evict_lock, file_mode, locks.ready_folder, house.local.dirs)
    if lock == LOCK_BUSY:
        if not locks.stopped_holder(layout.evict_lock):
            return  # another process is evicting
        # ... or was, and is stopped: its lock would hold every eviction off for good
        warn_once("evict-stale", f"kcache: the process holding {layout.evict_lock} shows "
                  f"no heartbeat for {locks.waiting_stale():g} s (stopped?); evicting "
                  "without it (KCACHE_LOCK_STALE)")
        lock = None
    elif isinstance(lock, OSError):
        # The size cap holds without the global lock (removals take each key's lock);
        # two processes may then evict at once, a little more than needed.
        warn_once("evict-lock", f"kcache: cannot use {layout.evict_lock} "
                  f"({lock.strerror or lock}); evicting without it")
        lock = None
    try:
        with locks.beating(layout.evict_lock) if lock is not None else contextlib.nullcontext():
            evict(house, int(max_size * EVICT_TARGET))
    finally:
        if lock is not None:
            lock.release()


def lower_drift(house: Housekeeping, files: list, counted: list) -> None:
    """Lower each shard's totals by what ``counted`` (read before the scan) holds beyond the
    ``files`` the scan found (``(key, path, lstat)``): writers killed between a removal and
    its count (a bulk removal writes every DELTA_BATCH) leave totals above what is on disk,
    and a put then ran an eviction pass each time. Never raises them (files copied in behind
    the store's back wait for ``recount``), never lowers them below what the scan found.
    Written as a change under the shard's lock, not a value: a put counted meanwhile is kept;
    one published during the scan at worst leaves the total a little high."""
    found = [[0, 0] for _ in range(SHARDS)]
    for key, _path, st in files:
        f = found[shard_of(key)]
        f[0] += 1
        f[1] += st.st_size
    for shard, ((n, b), (fn, fb)) in enumerate(zip(counted, found)):
        if n > fn or b > fb:
            house.stats.lower_totals(shard, max(0, n - fn), max(0, b - fb), (fn, fb))


@dataclasses.dataclass
class _Plan:
    remove: list  # (key, path, lstat)
    infos: dict  # key -> EntryInfo, when headers were read
    kept: int
    kept_bytes: int


def _plan(house: Housekeeping, max_size, older_than, where, hits) -> _Plan:
    now = time.time()
    remove, keep, infos = [], [], {}
    for key, path, st in lru_order(list(house.local.scan()), house.max_entry_size):
        doomed = older_than is not None and st.st_mtime < now - older_than
        if not doomed and where is not None:
            try:
                info = house.info(key, path, house.local, hits)
            except (OSError, CorruptEntry, NewerFormat):
                keep.append((key, path, st))  # verify handles broken files
                continue
            infos[key] = info
            doomed = bool(where(info))
        (remove if doomed else keep).append((key, path, st))
    extra, keep = select_lru(keep, max_size)
    return _Plan(remove + extra, infos, len(keep), sum(st.st_size for _k, _p, st in keep))


def prune(house: Housekeeping, cap: int, age: float | None, where, dry_run: bool) -> PruneReport:
    """See ``Store.prune`` (arguments already parsed: bytes, seconds)."""
    house.local.dirs.check()  # a folder swapped since the store opened is not entered
    hits = house.stats.hits()  # each removed entry is reported with its real hit count
    plan = _plan(house, cap, age, where, hits)
    report = PruneReport(dry_run=dry_run, entries_left=plan.kept, bytes_left=plan.kept_bytes)
    report.temp_files = sweep_temp(house, dry_run=dry_run or not house.writable())
    if not dry_run and house.writable():
        report.lock_files = sweep_locks(house)
        report.quarantine_files = house.local.sweep_quarantine(house.quarantine_age)[0]
    if age is not None and (dry_run or house.writable()):
        report.code_memos = house.local.sweep_code_memos(age, dry_run=dry_run)
    batch = Removals(house, "evictions")
    try:
        for key, path, st in plan.remove:
            info = plan.infos.get(key) or house.info_or_broken(key, path, house.local, st, hits)
            if dry_run:
                result = NEWER if house.local.is_newer(key) else st.st_size
            else:
                result = batch.remove(key)
            if isinstance(result, int):
                if info is not None:
                    report.removed.append(dataclasses.replace(info, file_size=result))
                report.bytes_freed += result
            elif result is not None:  # None: removed meanwhile by someone else
                report.failed.append(NotRemoved(key, path, result))
                report.entries_left += 1
                report.bytes_left += st.st_size
    finally:
        if not dry_run:
            batch.write()
    return report


def sweep_locks(house: Housekeeping, max_age: float = TEMP_MAX_AGE) -> int:
    """Remove lock files of keys that have no entry, unused for ``max_age`` seconds.

    Each is unlinked while its lock is held (non-blocking), so no current holder loses it. (A
    process that opened the file in the microseconds before the unlink could still lock the
    orphan inode: at worst one duplicate compile.) A lock file's mtime is its creation time or
    the last heartbeat of a compile that held it (kcache.locks). Symlinked lock folders are
    never entered."""
    cutoff = time.time() - max_age
    n = 0
    dirs = house.local.dirs
    dirs.check(LOCKS)
    for name, st in folder_listing(dirs, LOCKS):
        if len(name) != 2 or not stat.S_ISDIR(st.st_mode):
            continue
        for lock_name, lst in folder_listing(dirs, LOCKS, name):
            key = lock_name[: -len(LOCK_SUFFIX)]
            if (not lock_name.endswith(LOCK_SUFFIX) or not KEY_RE.fullmatch(key)
                    or not key.startswith(name) or not stat.S_ISREG(lst.st_mode)):
                continue  # not a lock file kcache made: leave it
            if (lst.st_mtime > cutoff or house.local.entry_stat(key) is not None
                    or house.locks.held_here(key)):
                continue  # recent, in use, or this thread's own (its hold would be reentrant)
            with house.locks.hold(key, blocking=False) as held:
                if not held or house.local.entry_stat(key) is not None:
                    continue
                try:
                    fd = dirs.folder(f"{LOCKS}/{name}")
                    if lstat_at(lock_name, fd).st_ino == lst.st_ino:
                        os.unlink(lock_name, dir_fd=fd)
                        n += 1
                except OSError:
                    pass
    return n


def verify(house: Housekeeping, fix: bool, progress: Callable[[int, int], None] | None) -> VerifyReport:
    """See ``Store.verify``. Every file crosses the same checks as a ``get``."""
    files = [(tier, key, path, st) for tier in house.tiers
             for key, path, st in tier.scan(regular_only=False)]
    report = VerifyReport()
    for i, (tier, key, path, st) in enumerate(files, 1):
        try:
            if not stat.S_ISREG(st.st_mode):
                exc = CorruptEntry(NOT_REGULAR, "not_regular")
                exc.stat = st
                raise exc
            blob = tier.read(key, house.max_entry_size, fresh=True)
            if blob is not None:
                house.verify_bytes(key, blob.data)
                report.ok += 1
        except NewerFormat:
            report.newer.append(path)
        except (CorruptEntry, OSError) as exc:
            reason = str(exc) if isinstance(exc, CorruptEntry) else f"unreadable: {os_reason(exc)}"
            report.corrupt.append((path, reason))
            if fix and tier is house.local and isinstance(exc, CorruptEntry):
                why = house.quarantine(key, reason, getattr(exc, "stat", None) or st)
                if why is None:
                    report.quarantined += 1
                elif why != GONE:
                    report.not_quarantined.append((path, why))
        report.checked += 1
        if progress is not None:
            progress(i, len(files))
    # No recount here: quarantining already adjusted the totals, and a recount races with
    # live writers (a put between the scan and the write of the totals would be lost).
    return report


def recount(house: Housekeeping) -> None:
    """Rebuild the totals from a scan of the writable root (see ``Store.recount``)."""
    per: dict[int, list[int]] = {s: [0, 0] for s in range(SHARDS)}
    for key, _path, st in house.local.scan():
        t = per[shard_of(key)]
        t[0] += 1
        t[1] += st.st_size
    if house.ensure_root():
        for s, (n, b) in per.items():
            house.stats.set_totals(s, n, b)

"""Persistent counters, sharded: ``<root>/v1/stats/<0-f>.msgpack`` (+ ``<0-f>.lock``).

Each shard is a small msgpack map updated under its own filelock by read-modify-write and
``os.replace``, so concurrent processes never lose an increment and ``stats()`` reads 16 small
files instead of scanning the cache. A key's counters go to shard ``key[0]``; counters without
a key (``record``) go to shard ``pid % 16``.

Per-entry hit counts live next to them in ``<0-f>.hits.msgpack`` (key -> hits), under the
same shard lock, so that ``stats()`` stays O(1) in the number of entries.

Hot-path counters (hits, misses, seconds_saved, compiles, compile_seconds) are
accumulated in memory and flushed at most once a second, at ``flush()`` and at exit
(atexit, and multiprocessing's exit finalizers in its child processes). Totals
(entries, bytes) and puts/evictions/corrupt are written at once (``now=True``), so the size
used for eviction is exact for files the store itself wrote; totals are clamped at 0
(``_clamp_totals``). If the root cannot be written (read-only, full disk) writing stops for
this process with one warning, and the in-memory counters go on (``read`` includes them).
A fault of one shard (its file, hits file or lock is a folder, a symlink, ...) keeps only that
shard in memory; a stats folder that is not a real folder keeps all of them in memory; puts
are never affected. Every number read is checked: anything but a finite int/float counts as 0,
so a hostile shard can neither crash nor poison the counters (no NaN, no infinity). Shards are
read through :func:`kcache.fsio.read_regular` (never a FIFO, symlink or oversized file).
Batched counters reach the disk without a later update: a background thread
(:class:`_Flusher`), started by the first batched count and ending when no more come, writes
them FLUSH_INTERVAL after it; a book holding counts is kept until they are written (a Store
dropped right after a hit loses none).
"""
from __future__ import annotations

import atexit
import collections
import errno
import math
import os
import sys
import _thread
import threading
import time
import weakref
from pathlib import Path
from typing import Callable

import msgpack

from ..disk import fsio
from ..errors import CorruptEntry
from ..disk.layout import STATS
from ..disk.paths import RootDirs
from ..warn import warn_once

COUNTERS = ("hits", "misses", "compiles", "puts", "evictions", "corrupt", "lock_waits",
            "lock_timeouts", "bytes_written", "compile_seconds", "seconds_saved",
            "write_errors_no_space", "write_errors_permission", "write_errors_other",
            "temp_swept", "remote_hits", "remote_misses", "remote_bad", "remote_puts",
            "remote_put_errors", "remote_errors_timeout", "remote_errors_refused",
            "remote_errors_auth", "remote_errors_bad_value", "remote_errors_io",
            "remote_errors_unavailable", "remote_wait_seconds", "lock_stale", "artifacts_refused")
TOTALS = ("entries", "bytes")
FLOAT_COUNTERS = {"compile_seconds", "seconds_saved", "remote_wait_seconds"}
FLUSH_INTERVAL = 1.0  # seconds
# Seconds a write waits for its shard's lock: a running writer holds it for milliseconds, a
# stopped one (SIGSTOP, a debugger, a frozen container) for good, and every put counts.
# Past it the counts stay in memory (written by a later write), and until one succeeds the
# shard's lock is only tried, never waited for.
SHARD_LOCK_WAIT = 2.0
SHARDS = 16
_MAX_SHARD_FILE = 64 << 20  # bytes; a hits file of ~1M keys
_MAX_SHARD_ITEMS = 1 << 20  # items of one shard's map (per-entry hits: entries of the shard)


def shard_of(key: str) -> int:
    """Shard index of a key: its first hex digit."""
    return int(key[0], 16)


#: errno values meaning the whole root cannot be written (not one shard's fault).
ROOT_ERRNOS = {errno.EROFS, errno.ENOSPC, errno.EDQUOT}


def _load(dirs, path: Path) -> dict:
    """A shard file's map ({} when missing, unreadable, not a regular file or not a flat map
    of text to numbers: a broken shard restarts at zero; recount() rebuilds the totals).
    Decoding refuses arrays, nested maps and ext types, so its memory is bounded by the file.
    Read through the stats folder's descriptor (``dirs``: the root's kcache.paths.RootDirs):
    never through a symlinked stats folder or bucket."""
    try:
        data, _st = fsio.read_regular(path.name, _MAX_SHARD_FILE, dir_fd=dirs.folder(STATS))
    except (OSError, CorruptEntry):
        return {}
    maps = []

    def one_map(m):
        maps.append(1)
        if len(maps) > 1:
            raise ValueError("nested map")
        return m

    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True, max_array_len=0,
                              max_ext_len=0, max_str_len=len(data), max_bin_len=0,
                              max_map_len=min(len(data), _MAX_SHARD_ITEMS), object_hook=one_map)
    except Exception:
        return {}
    return obj if isinstance(obj, dict) else {}


#: The largest counter value accepted from a shard file: no count, size or number of seconds
#: kcache writes comes near it, and the sum of the 16 shards' (what `stats --json` prints)
#: stays a 64-bit integer, below 2**62, as does adding to it (msgpack's integers).
MAX_COUNT = 1 << 58


def _num(v) -> float:
    """A counter value as read: an int or float in 0 .. MAX_COUNT, else 0 (NaN, infinity,
    1e308 or a negative number in a hostile shard neither crash nor poison the sums)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return 0
    return v if 0 <= v <= MAX_COUNT else 0  # NaN fails the comparison


def _clamp_totals(counters: dict) -> None:
    """Totals are never below 0. A removal subtracts the size it saw, so removing a file that
    was never counted (copied in behind the store's back, a garbage file named like an entry)
    would drive a shard negative. Counted files alone never do (a removal follows the put that
    counted it), so clamping keeps exact totals exact and makes removals of uncounted files
    land on the truth instead of below it."""
    for name in TOTALS:
        value = counters.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            counters[name] = 0


class StatsBook:
    """The counters of one cache root (``layout``, a kcache.layout.Layout). ``ensure()`` ->
    bool: the root exists and may be written; ``ready(folder)`` creates the stats folder and
    raises OSError unless it is a real folder; ``on_error(exc)`` is called once when the root
    itself cannot be written (:data:`ROOT_ERRNOS`); ``dirs``: the root's RootDirs (every
    file is reached through the stats folder's descriptor)."""

    def __init__(self, layout, file_mode: int, ensure: Callable[[], bool],
                 on_error: Callable[[OSError], None], on_missing: Callable[[], None] = lambda: None,
                 ready: Callable[[Path], None] = lambda folder: None, dirs: RootDirs | None = None):
        self.layout = layout
        self.dirs = dirs or RootDirs(layout.root)
        self.dir = layout.stats
        self.file_mode = file_mode
        self._ensure = ensure
        self._on_error = on_error
        self._on_missing = on_missing
        self._ready_folder = ready
        self._folder_ok = False
        self.enabled = True
        self.disk = True  # False: the root's counter files are neither read nor written
        self._broken: set[int] = set()  # shards kept in memory (their files are unusable)
        self._stalled: set[int] = set()  # shards whose lock was held past SHARD_LOCK_WAIT
        self._flush_requested = False  # this book is in the flusher's queue
        # Two locks, always taken in this order: _io (one writer of this book's files at a
        # time) and _mutex (the in-memory counts, held for dict updates only), so a count is
        # never kept waiting by the writer's file work.
        self._io = threading.RLock()
        self._mutex = threading.RLock()
        self._pending: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
        self._pending_hits: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
        self._forget: dict[int, set] = collections.defaultdict(set)
        self._last_flush = time.monotonic()
        #: called first by every flush: what else is written with the counters (LocalTier's)
        self.on_flush: Callable[[], None] = lambda: None
        _BOOKS.add(self)
        _ready_lock_import()

    # -- updates ---------------------------------------------------------------
    def add(self, shard: int, now: bool = False, hit_key: str | None = None, **counters) -> None:
        """Add ``counters`` to ``shard``; write at once when ``now``, else batch. ``hit_key``
        also bumps that entry's hit count."""
        with self._mutex:
            _register_child_flush()
            for name, value in counters.items():
                if isinstance(value, float) and not math.isfinite(value):
                    raise ValueError(f"counter {name}={value!r} is not a finite number")
            pend = self._pending[shard]
            for name, value in counters.items():
                if value:
                    pend[name] += value
            if hit_key is not None:
                self._pending_hits[shard][hit_key] += 1
            if not now:
                _HELD.add(self)
                # Batched counts are written by the background writer, never in the count's
                # own call: a flush writes up to 16 shards (and the entries' uses), 5-10 ms
                # that used to land in whichever kernel lookup came a second after the last.
                self._flush_later()
                if self._flush_requested or time.monotonic() - self._last_flush <= FLUSH_INTERVAL:
                    return
        if now:
            self._write(shard)
        else:
            self.flush()  # no writer thread to be had: written here, as before

    def add_hit(self, key: str, seconds_saved: float) -> None:
        """Count one hit of ``key`` (``hits``, ``seconds_saved`` in seconds, the entry's own
        hit count), batched: :meth:`add` for the one count every cache hit makes, without
        its general handling of any set of counters."""
        if not (0.0 <= seconds_saved <= MAX_COUNT):  # NaN, infinity, negative: not a saving
            seconds_saved = 0.0
        shard = int(key[0], 16)
        with self._mutex:
            if _child_flush_pid != _getpid():
                _register_child_flush()
            _HELD.add(self)
            pend = self._pending[shard]
            pend["hits"] += 1
            if seconds_saved:
                pend["seconds_saved"] += seconds_saved
            self._pending_hits[shard][key] += 1
            if self._flush_requested:
                return
            self._flush_later()
            if self._flush_requested or time.monotonic() - self._last_flush <= FLUSH_INTERVAL:
                return
        self.flush()  # no writer thread to be had: written here, as add() does

    def _flush_later(self) -> None:
        """Make batched counters reach the disk within FLUSH_INTERVAL even if nothing else is
        counted (a listing printed after a process's launches shows them)."""
        if not self._flush_requested and self.enabled:
            self._flush_requested = _FLUSHER.request(self)

    def _timed_flush(self) -> None:
        with self._mutex:
            self._flush_requested = False
        try:
            self.flush()
        except Exception:  # a background flush must never raise into a thread
            pass

    def forget(self, key: str) -> None:
        """Drop ``key``'s per-entry hit count at the next write (entry removed)."""
        with self._mutex:
            s = shard_of(key)
            self._forget[s].add(key)
            self._pending_hits[s].pop(key, None)
            _HELD.add(self)

    def flush(self) -> None:
        """Write every shard with pending counts (and, first, what ``on_flush`` writes)."""
        self.on_flush()
        with self._io:
            with self._mutex:
                self._last_flush = time.monotonic()
                _HELD.discard(self)  # what is due is written now (a count from here holds it)
                due = [s for s in range(SHARDS)
                       if self._pending.get(s) or self._pending_hits.get(s) or self._forget.get(s)]
            for shard in due:
                self._write(shard)

    def _folder_ready(self) -> bool:
        """The stats folder exists and is a real folder (checked once per process); if it
        cannot be, every shard stays in memory, with one warning; puts go on."""
        if self._folder_ok:
            return True
        try:
            self._ready_folder(self.dir)
        except OSError as exc:
            if exc.errno in ROOT_ERRNOS:
                self.enabled = False
                self._on_error(exc)
            elif not isinstance(exc, FileNotFoundError):
                self.enabled = False
                warn_once("stats", f"kcache: cannot keep statistics in {self.dir} "
                          f"({exc.strerror or exc}); counting in memory only")
            return False
        self._folder_ok = True
        return True

    def _write(self, shard: int, mutate: Callable[[dict, dict], bool] | None = None) -> bool:
        """Merge pending counts of ``shard`` into its files (under its lock). ``mutate(counters,
        hits)`` may change them further; returns True if written."""
        with self._io:
            return self._write_held(shard, mutate)

    def _write_held(self, shard: int, mutate) -> bool:
        if not self.enabled or shard in self._broken or not self._ensure() or not self._folder_ready():
            return False
        # Imported before the counts are taken out: an import that fails (at exit, see
        # flush_all) leaves them pending, so stats() and the exit warning still count them.
        import filelock  # imported on the first write: reading counters takes no lock
        cpath, hpath, lpath = self.layout.stats_files(shard)
        with self._mutex:
            pend = self._pending.pop(shard, None) or collections.Counter()
            phits = self._pending_hits.pop(shard, None) or collections.Counter()
            forget = self._forget.pop(shard, None) or set()
        self.dirs.check(STATS)  # a stats folder or bucket swapped meanwhile is never written
        try:
            # /proc/self/fd/N/NAME: the lock inside the stats folder's descriptor (no swap followed)
            lock = filelock.FileLock(self.dirs.path(STATS, lpath.name), mode=self.file_mode,
                                     is_singleton=True)
            with lock.acquire(timeout=0 if shard in self._stalled else SHARD_LOCK_WAIT):
                self._stalled.discard(shard)
                counters = _load(self.dirs, cpath)
                for name, value in pend.items():
                    counters[name] = _num(counters.get(name, 0)) + value
                hits = None
                if phits or forget or mutate:
                    hits = _load(self.dirs, hpath)
                    for k, n in phits.items():
                        hits[k] = _num(hits.get(k, 0)) + n
                    for k in forget:
                        hits.pop(k, None)
                if mutate:
                    mutate(counters, hits)
                _clamp_totals(counters)
                self._replace(cpath, counters)
                if hits is not None:
                    self._replace(hpath, hits)
            return True
        except OSError as exc:
            with self._mutex:  # kept in memory (stats() reports them), the book with them
                _HELD.add(self)
                self._pending[shard].update(pend)
                self._pending_hits[shard].update(phits)
                self._forget[shard] |= forget
            if isinstance(exc, filelock.Timeout):  # held by a stopped process? written later
                self._stalled.add(shard)
                with self._mutex:
                    self._flush_later()  # the background writer tries again (without waiting)
                warn_once("stats-stalled", f"kcache: statistics shard {cpath} stayed locked for "
                          f"{SHARD_LOCK_WAIT:g} s (by a stopped process?); its counts are kept in "
                          "memory and written once it is free")
            elif isinstance(exc, FileNotFoundError):
                self._folder_ok = False
                self._on_missing()  # directory deleted under us: recreated on the next write
            elif exc.errno in ROOT_ERRNOS:
                self.enabled = False
                self._on_error(exc)
            else:  # this shard's files or lock are unusable: only this shard stays in memory
                self._broken.add(shard)
                warn_once("stats-shard", f"kcache: cannot write statistics shard "
                          f"{cpath} ({exc.strerror or exc}); its counts stay in memory")
            return False

    def _replace(self, path: Path, obj: dict) -> None:
        # No fsync: counters are advisory (recount() rebuilds the totals) and a shard is
        # rewritten on every put, so an fsync here would double the cost of a put.
        fsio.publish(self.dirs.folder(STATS), path.name, msgpack.packb(obj, use_bin_type=True),
                     self.file_mode, fsync=False)

    def reset(self, keep_totals: bool = True) -> bool:
        """Zero every counter (and per-entry hits); totals kept unless ``keep_totals`` is False.
        Returns True when every shard was written (False: some could not be, e.g. read-only)."""
        def zero(counters: dict, hits: dict) -> None:
            for name in list(counters):
                if not (keep_totals and name in TOTALS):
                    del counters[name]
            hits.clear()

        with self._io:
            with self._mutex:
                self._pending.clear()
                self._pending_hits.clear()
            return all([self._write(shard, zero) for shard in range(SHARDS)])

    def lower_totals(self, shard: int, entries: int, nbytes: int, floor: tuple[int, int]) -> None:
        """Lower ``shard``'s totals by ``entries`` and ``nbytes``, never below ``floor``
        ((entries, bytes) an eviction's scan found there) and never raising them: two
        evictions lowering the same drift lower it once."""
        def lower(counters: dict, hits: dict) -> None:
            for name, by, least in (("entries", entries, floor[0]), ("bytes", nbytes, floor[1])):
                now = _num(counters.get(name, 0))
                if now > least:
                    counters[name] = max(now - by, least)
        self._write(shard, lower)

    def set_totals(self, shard: int, entries: int, nbytes: int) -> None:
        """Overwrite ``shard``'s totals (recount)."""
        def put(counters: dict, hits: dict) -> None:
            counters["entries"], counters["bytes"] = entries, nbytes
        self._write(shard, put)

    # -- reads -----------------------------------------------------------------
    def _load(self, path: Path) -> dict:
        """A shard file's map, or {} when this root's files are not to be read at all (an
        untrusted or disabled root: ``disk`` is False; only this process's counts exist)."""
        return _load(self.dirs, path) if self.disk else {}

    def read(self) -> dict:
        """Sum of every shard on disk plus this process's unwritten counts."""
        out = {name: 0 for name in COUNTERS + TOTALS}
        with self._mutex:
            for shard in range(SHARDS):
                one = {name: _num(value) for name, value in
                       self._load(self.layout.stats_files(shard)[0]).items() if name in out}
                for name, value in self._pending.get(shard, {}).items():
                    one[name] = one.get(name, 0) + value
                _clamp_totals(one)
                for name, value in one.items():
                    out[name] += value
        for name in FLOAT_COUNTERS:
            out[name] = float(out[name])
        return out

    def shard_totals(self, shard: int) -> tuple[int, int]:
        """(entries, bytes) of ``shard`` as written plus this process's unwritten changes
        (kept in memory while the shard cannot be written, so the size cap still holds for
        what this process stored), never below 0 (see :func:`_clamp_totals`)."""
        c = self._load(self.layout.stats_files(shard)[0])
        with self._mutex:
            pend = self._pending.get(shard) or {}
            n = _num(c.get("entries", 0)) + pend.get("entries", 0)
            b = _num(c.get("bytes", 0)) + pend.get("bytes", 0)
        return max(0, int(n)), max(0, int(b))

    def hits(self, key: str | None = None) -> dict[str, int]:
        """Per-entry hits (key -> hits), unwritten ones too; ``key`` (or a prefix): its shard's."""
        out: dict[str, int] = collections.Counter()
        with self._mutex:
            for shard in range(SHARDS) if key is None else (shard_of(key),):
                for k, n in self._load(self.layout.stats_files(shard)[1]).items():
                    out[k] += int(_num(n))
                for k, n in self._pending_hits.get(shard, {}).items():
                    out[k] += n
        return out

    def _after_fork(self) -> None:
        # the parent's unwritten counts belong to the parent; its writer thread is not ours
        self._mutex = threading.RLock()
        self._io = threading.RLock()
        self._flush_requested = False
        self._pending.clear()
        self._pending_hits.clear()
        self._forget.clear()


_BOOKS: "weakref.WeakSet[StatsBook]" = weakref.WeakSet()
_HELD: set = set()  # books with counts not written yet, kept until they are


class _Flusher:
    """The background writer of batched counters: a thread that lets FLUSH_INTERVAL pass,
    flushes every book that asked (``request``) meanwhile, and ends when none asked again (a
    program that forks later keeps no thread). The first count waits on a bare lock the thread
    releases as it runs (``Timer.start``'s wait took 0.2-0.5 ms), so the thread's first take of
    the interpreter lock is paid there, not in a later lookup (docs/bench-dispatch.md)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._due: list = []  # weak references to the books that asked
        self._running = False  # a writer thread of this process is alive
        self._pid = os.getpid()

    def request(self, book: "StatsBook") -> bool:
        """Have ``book`` flushed within FLUSH_INTERVAL; False when no writer thread can be
        started (the caller writes itself)."""
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the parent's thread is not here
                self._pid, self._running = os.getpid(), False
            self._due.append(weakref.ref(book))
            if self._running:
                return True
            self._running = True
        try:
            started = _thread.allocate_lock()  # released by the thread as it runs (docstring)
            started.acquire()
            _thread.start_new_thread(self._run, (started,))
            return started.acquire()
        except RuntimeError:  # no thread to be had: the next count or exit writes them
            with self._lock:
                self._running = False
                self._due.clear()
            return False

    def _run(self, started) -> None:
        try:
            started.release()
            while True:
                time.sleep(FLUSH_INTERVAL)  # let counts batch up
                with self._lock:
                    due, self._due = self._due, []
                for ref in due:
                    book = ref()
                    if book is not None:
                        book._timed_flush()
                with self._lock:
                    if not self._due:
                        self._running = False
                        return
        except BaseException:  # never let a background flush raise into a thread
            with self._lock:
                self._running = False

    @property
    def running(self) -> bool:
        """A writer thread of this process is alive (tests)."""
        return self._running and self._pid == os.getpid()

    def after_fork(self) -> None:
        # the parent's thread does not exist here: a new one starts on the next request
        self._lock = threading.Lock()
        self._due = []
        self._running = False
        self._pid = os.getpid()


_FLUSHER = _Flusher()


def flush_all() -> None:
    """Flush every live StatsBook (run at exit). A book that cannot be written is said, once
    (its counts die with the process), never raised: interpreter shutdown must not fail."""
    for book in list({*_BOOKS, *_HELD}):
        try:
            book.flush()
        except Exception as exc:
            _lost_at_exit(book, exc)


def _ready_lock_import() -> None:
    """filelock is imported on a process's first write, which for a process that only hits is
    its exit flush. filelock 3.x imports concurrent.futures.thread, whose threading exit hook
    cannot be registered once the interpreter's shutdown has begun ("can't register atexit
    after shutdown"), and the process's counts would be lost. That module, imported now (about
    a millisecond, once per process; numba and asyncio load its package already), leaves
    filelock importable at exit without paying for filelock itself on a hit."""
    if "filelock" not in sys.modules:
        import concurrent.futures.thread  # noqa: F401


def _lost_at_exit(book: "StatsBook", exc: Exception) -> None:
    """Say which counts of ``book`` the exit flush could not write (counters tell the truth:
    a silent loss reads as "no hits"). The usual cause is an import at exit: a module that
    registers a threading exit hook (filelock 3.32 imports concurrent.futures.thread) cannot
    be imported once the interpreter shuts down (see _ready_lock_import)."""
    try:
        lost = collections.Counter()
        for pend in book._pending.values():
            lost.update(pend)
        hits = sum(sum(c.values()) for c in book._pending_hits.values())
        if not lost and not hits:
            return
        what = ", ".join(f"{k}={v:g}" for k, v in sorted(lost.items()))
        warn_once("stats-exit", f"kcache: the counters of this process ({what}) could not be "
                  f"written to {book.dir} at exit ({type(exc).__name__}: {exc}); they are lost")
    except Exception:  # never fail interpreter shutdown
        pass


def _after_fork_in_child() -> None:
    _forget_unfinished_imports()
    _FLUSHER.after_fork()
    for book in list(_BOOKS):
        book._after_fork()


def _forget_unfinished_imports() -> None:
    """In a child forked while another thread of the parent was importing modules (the
    flusher's first write imports filelock, and with it standard modules, in the
    background): those imports never finish here, and their import locks belong to a thread
    the child does not have, so the child's first import of any of them would wait forever.
    Every module lock held by another thread is forgotten, and the unfinished modules it
    guarded with it: the next import starts afresh. Modules fully imported are kept (a
    program's filelock classes stay the same). Waiting for the import before the fork is no
    way out: filelock's own fork handler holds the import back meanwhile."""
    try:
        import importlib._bootstrap as bootstrap

        me = _thread.get_ident()
        locks = getattr(bootstrap, "_module_locks", {})
        for name, ref in list(locks.items()):
            lock = ref()
            owner = getattr(lock, "owner", None)  # 0 (3.11) or None (3.12+) when free
            if lock is None or not owner or owner == me:
                continue
            locks.pop(name, None)
            module = sys.modules.get(name)
            if getattr(getattr(module, "__spec__", None), "_initializing", False):
                sys.modules.pop(name, None)
    except Exception:  # never fail a fork
        pass


_child_flush_pid = 0
_getpid = os.getpid


def _register_child_flush() -> None:
    """multiprocessing children leave through os._exit, skipping atexit: flush from
    multiprocessing's own exit finalizers instead (registered once per child process)."""
    global _child_flush_pid
    if _child_flush_pid == os.getpid():
        return
    _child_flush_pid = os.getpid()
    mp = sys.modules.get("multiprocessing")
    if mp is not None and mp.parent_process() is not None:
        import multiprocessing.util

        multiprocessing.util.Finalize(None, flush_all, exitpriority=100)


atexit.register(flush_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

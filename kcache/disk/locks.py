"""Per-key locks (``<root>/v1/locks/ab/<key>.lock``) built on :mod:`filelock`.

Lock folders are checked before a lock file is made in them: a symlinked (or otherwise
unusable) lock folder turns locking off for the keys of that shard, with one warning, and
never creates a file outside the root. filelock takes paths only, so a lock file is named
``/proc/self/fd/N/<key>.lock``, N being the descriptor of its lock folder reached from the
root's descriptor (kcache.paths): the name resolves inside that folder whatever a group
member renamed or swapped on the path meanwhile, and filelock opens it ``O_NOFOLLOW``.

Readers never lock. Writers of one key (put, remove, evict, quarantine) and single-flight
compiles hold that key's lock, so the store's totals stay exact under concurrency. FileLock
instances are process-wide singletons per path and reentrant, so a put inside
``get_or_create``'s lock does not deadlock. flock-based locks die with their process: a
killed compiler never leaves a stale lock behind.

A stopped one does (SIGSTOP, a debugger's breakpoint, a frozen container): its flock stays.
So every holder (a compile, a put, an import, a removal, eviction) renews a heartbeat, the
lock file's mtime, every :data:`BEAT` s from one thread of the process (:class:`_Heartbeats`),
whatever its own KCACHE_LOCK_STALE: a live holder looks alive to every waiter. A waiter that
sees the mtime unchanged for its ``stale`` seconds (KCACHE_LOCK_STALE, at least
:data:`MIN_STALE`) stops waiting: it is told :data:`STALE`, counted in ``lock_stale``, warned
once, and goes on without the lock (a compile compiles and publishes, a put publishes: the
rename is atomic) or leaves that key (a removal). A running holder, however slow, keeps its
waiters waiting up to the lock timeout. (The heartbeat is a Python thread: a step that held
the GIL for longer than ``stale`` would look stopped, at worst costing one duplicate compile,
never a wrong entry.)
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from ..errors import LockTimeout
from .layout import Layout
from .paths import RootDirs
from ..warn import warn_once

#: What ``KeyLocks.hold(..., flight=True)`` yields when the holder's heartbeat stopped.
STALE = "stale"
_POLL = 0.25  # seconds between a waiter's looks at the holder's heartbeat (at most)
#: Seconds between a holder's heartbeats: fixed, so that it never depends on the holder's own
#: KCACHE_LOCK_STALE (0 there once meant no heartbeat, and a waiter passed a live compile).
BEAT = 0.25
#: The shortest stale period a waiter uses (seconds; a shorter KCACHE_LOCK_STALE counts as
#: this): four heartbeats, so a waiter never takes a live holder for a stopped one.
MIN_STALE = 1.0
# Work while waiting (see KeyLocks.hold) starts after this many seconds of waiting: a holder
# about to publish is waited for without it (its entry is then a hit the work would delay).
WORK_GRACE = 0.1
# ... and only where it cannot take the wait past a short lock timeout or stale period (in
# seconds; the defaults are 600 and 30): the work (a compiler's set-up) cannot be cut short.
WORK_ROOM = 5.0


def _filelock(dirs: RootDirs, path: Path, mode: int):
    """The filelock of lock file ``path`` (a file of the root's lock folders), named through
    its folder's descriptor (:meth:`RootDirs.path`). Raises OSError for an unusable folder."""
    import filelock  # imported on first lock: a listing or a hit takes no lock
    folder = path.parent.relative_to(dirs.root).as_posix()
    return filelock.FileLock(dirs.path(folder, path.name), mode=mode, is_singleton=True)


def _timeout_error():
    import filelock
    return filelock.Timeout


class KeyLocks:
    """Per-key file locks of the root of ``layout``.

    ``count(name, n)`` is called for ``lock_waits`` / ``lock_timeouts`` / ``lock_stale``;
    ``stale``: seconds without a heartbeat after which a compile's holder is passed (0: never);
    ``on_error(exc)`` for
    a lock folder that cannot be used (then the lock degrades to a no-op);
    ``ensure_folder(path)`` creates a folder of the root and raises OSError unless it is a
    real folder (``LocalTier.ensure_folder``)."""

    def __init__(self, layout: Layout, timeout: float, file_mode: int,
                 count: Callable[..., None], on_error: Callable[[OSError], None],
                 ensure_folder: Callable[[Path], None], dirs: RootDirs | None = None,
                 stale: float = 0.0):
        self.layout = layout
        self.dirs = dirs or RootDirs(layout.root)
        self.dir = layout.locks
        self.timeout = timeout
        self.stale = stale
        self._passed = threading.local()  # .paths: locks this thread found stale and passed
        self._busy_seen: dict[Path, tuple] = {}  # stopped_holder: path -> (heartbeat, first seen)
        self.file_mode = file_mode
        self._count = count
        self._on_error = on_error
        self._ensure_folder = ensure_folder
        self._ready: set[Path] = set()  # lock folders checked in this process

    def path(self, key: str) -> Path:
        return self.layout.lock(key)

    def held_here(self, key: str) -> bool:
        """Whether this thread holds ``key``'s lock. Its holds are reentrant (another thread's
        or process's are busy to it): a sweep of lock files must ask, or this thread, holding
        a key without an entry (``Store.lock``) before its first heartbeat, would find its own
        lock free, and unlink the file under itself (then another process takes the key)."""
        try:
            return _filelock(self.dirs, self.path(key), self.file_mode).is_locked
        except OSError:
            return False

    @contextlib.contextmanager
    def hold(self, key: str, timeout: float | None = None, *, key_for_stats: str | None = None,
             blocking: bool = True, flight: bool = False,
             while_waiting: Callable[[], None] | None = None,
             if_stopped: str | None = "publishing here without it") -> Iterator[bool | str | None]:
        """Hold ``key``'s lock. Yields True when held; False when, with ``blocking=False``,
        another process holds it; None when the lock file cannot be used (a lock folder that
        is not writable, a symlink, ...: a no-op lock, warned once; callers go on as if
        alone, so a broken lock folder never stops a put or an eviction). Raises LockTimeout
        after ``timeout`` seconds (default: the store's lock_timeout).

        While held, the heartbeat runs (every holder's, :class:`_Heartbeats`). While waiting,
        a holder whose heartbeat has not moved for ``stale`` seconds is passed: yields
        :data:`STALE` (counted, warned once saying what this holder does instead:
        ``if_stopped``, e.g. "publishing here without it"; a compile's is "compiling here
        without it"), and until the block ends this thread's other holds of the same lock
        (the put of what it compiled) go on without it, as for a no-op lock. The caller then
        goes on without the lock, or leaves the key alone (a removal). ``if_stopped=None``:
        never pass a holder (``Store.lock``: the caller's own critical section).
        ``while_waiting()``: called once when another process still holds the lock after a
        short wait (0.1 s), before this one waits on (work the wait hides); whatever it raises
        is ignored. Not called when the timeout or, for a flight, the stale period is under
        5 s (the work cannot be cut short)."""
        path = self.path(key)
        lock = self._make(path)
        if lock is None:
            yield None
            return
        if not flight and path in self._passing():
            blocking = False  # the holder is stopped: never wait for it again
        # The timeout's source, named by the LockTimeout message: the caller's or the setting.
        setting = "the timeout argument" if timeout is not None else "KCACHE_LOCK_TIMEOUT"
        timeout = self.timeout if timeout is None else timeout
        skey = key_for_stats or key
        stale = self.waiting_stale() if flight or if_stopped is not None else 0.0
        acquired = self._acquire(lock, path, timeout, blocking, skey, stale, while_waiting, setting)
        if acquired == STALE:
            yield from self._passing_block(path, skey, "compiling here without it" if flight else if_stopped)
            return
        if not acquired:
            yield None if acquired is False and path in self._passing() else acquired
            return
        beat = self._beat(path)
        try:
            yield True
        finally:
            if beat is not None:
                HEARTBEATS.discard(beat)
            lock.release()

    def waiting_stale(self) -> float:
        """Seconds without a heartbeat after which this process passes a holder: the
        KCACHE_LOCK_STALE setting, at least :data:`MIN_STALE`; 0 (never) when it is 0."""
        return max(self.stale, MIN_STALE) if self.stale > 0 else 0.0

    @contextlib.contextmanager
    def beating(self, path: Path) -> Iterator[None]:
        """Renew the heartbeat of lock file ``path`` (a lock this process holds, e.g.
        ``evict.lock``) until the block ends."""
        beat = self._beat(path)
        try:
            yield
        finally:
            if beat is not None:
                HEARTBEATS.discard(beat)

    def stopped_holder(self, path: Path) -> bool:
        """Whether the holder of lock file ``path``, found busy by a non-blocking try, has
        shown no heartbeat for :meth:`waiting_stale` seconds, judged over this process's
        successive calls (its own clock, from the first call that saw this heartbeat)."""
        stale = self.waiting_stale()
        if stale <= 0:
            return False
        try:
            beat = _beat_of(self._through_folder(path))
        except OSError:
            return False
        now = time.monotonic()
        seen = self._busy_seen.get(path)
        if seen is None or seen[0] != beat:
            self._busy_seen[path] = (beat, now)
            return False
        return now - seen[1] >= stale

    def _through_folder(self, path: Path) -> str:
        """Lock file ``path`` named through its folder's descriptor (:meth:`RootDirs.path`),
        so a heartbeat or a look at one never reaches outside the root after a swap."""
        folder = path.parent.relative_to(self.dirs.root).as_posix()
        return self.dirs.path(folder, path.name)

    def _beat(self, path: Path) -> str | None:
        """Start renewing ``path``'s heartbeat; the name to hand HEARTBEATS.discard (None when
        the folder went away meanwhile: no heartbeat, waiters time out)."""
        try:
            name = self._through_folder(path)
        except OSError:
            return None
        HEARTBEATS.add(name)
        return name

    def _passing(self) -> set:
        paths = getattr(self._passed, "paths", None)
        if paths is None:
            paths = self._passed.paths = set()
        return paths

    def _passing_block(self, path: Path, skey: str, doing: str):
        self._count(skey, now=True, lock_stale=1)
        warn_once(f"lock-stale:{doing}", f"kcache: the process holding lock file {path} shows no "
                  f"heartbeat for {self.waiting_stale():g} s (stopped: SIGSTOP, a debugger, a frozen "
                  f"container?); {doing} (KCACHE_LOCK_STALE)")
        passing = self._passing()
        passing.add(path)
        try:
            yield STALE
        finally:
            passing.discard(path)

    def _make(self, path: Path):
        try:
            self.ready_folder(path.parent)
            folder = self.dirs.folder(path.parent.relative_to(self.dirs.root).as_posix())
            if stat.S_ISLNK(_lstat_or_none(path.name, folder)):  # filelock would refuse it too
                raise OSError(errno.ELOOP, "a symlink where a lock file belongs", str(path))
            return _filelock(self.dirs, path, self.file_mode)
        except OSError as exc:
            self._on_error(exc)
            return None

    def ready_folder(self, folder: Path) -> None:
        """Create and check ``folder`` (a lock folder) once per process, and its descriptor
        at every use (cheap: a few ``fstatat``). Raises OSError."""
        if folder in self._ready:
            if not self.dirs.check(folder.relative_to(self.dirs.root).as_posix()):
                return
            self._ready.discard(folder)
        self._ensure_folder(self.dir)
        if folder != self.dir:
            self._ensure_folder(folder)
        self._ready.add(folder)

    def _acquire(self, lock, path: Path, timeout: float, blocking: bool, skey: str,
                 stale: float = 0.0, while_waiting=None,
                 setting: str = "KCACHE_LOCK_TIMEOUT") -> bool | str | None:
        """True when acquired, False when busy (``blocking=False``), None when unusable,
        :data:`STALE` when (``stale`` > 0) the holder's heartbeat stood still that long.
        ``while_waiting()``: see :meth:`hold` (its time counts against ``timeout``)."""
        try:
            lock.acquire(timeout=0)
            return True
        except _timeout_error():
            if not blocking:
                return False
        except OSError as exc:
            self._on_error(exc)
            return None
        self._count(skey, now=True, lock_waits=1)  # rare; written at once so waiters are visible
        start = time.monotonic()
        try:
            if while_waiting is not None and _room_for_work(timeout, stale):
                try:
                    lock.acquire(timeout=WORK_GRACE)
                    return True
                except _timeout_error():
                    run_while_waiting(while_waiting)
            left = max(0.0, timeout - (time.monotonic() - start))
            if stale > 0 and stale < left:
                return _wait_watching(lock, self._through_folder(path), left, stale)
            lock.acquire(timeout=left)
            return True
        except _timeout_error():
            self._count(skey, now=True, lock_timeouts=1)
            raise LockTimeout(
                f"timed out after {time.monotonic() - start:.1f} s waiting for lock file {path} "
                f"(held by another process, probably compiling the same kernel); "
                f"raise {setting} (seconds, now {timeout:g}) or check that process"
            ) from None
        except OSError as exc:
            self._on_error(exc)
            return None


def _room_for_work(timeout: float, stale: float) -> bool:
    return timeout >= WORK_ROOM and (stale <= 0 or stale >= WORK_ROOM)


def run_while_waiting(work: Callable[[], None]) -> None:
    """``work()``, done instead of sleeping while another process or machine compiles (a
    key's lock, a Redis lease): what it raises is ignored, never a reason for the wait (or
    the call) to fail."""
    try:
        work()
    except Exception:
        pass


BUSY = "busy"


def try_global(path: Path, mode: int, ready: Callable[[Path], None], dirs: RootDirs):
    """Non-blocking try of a global lock (eviction): the held lock, :data:`BUSY` when another
    process holds it, or the OSError that makes it unusable (a folder named like the lock,
    a symlinked lock folder, ...): the caller then goes on without it, warned."""
    try:
        ready(path.parent)
        lock = _filelock(dirs, path, mode)
        lock.acquire(timeout=0)
        return lock
    except _timeout_error():
        return BUSY
    except OSError as exc:
        return exc




def _lstat_or_none(name: str, dir_fd: int) -> int:
    """The ``st_mode`` of ``name`` in folder ``dir_fd`` (not following a symlink); 0 when
    absent."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return 0


def _beat_of(path: str) -> tuple | None:
    """What a heartbeat changes: the lock file's mtime (and inode, should it be replaced)."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_ino


def _wait_watching(lock, path: str, timeout: float, stale: float) -> bool | str:
    """Wait for ``lock`` up to ``timeout`` s, looking at the holder's heartbeat between tries:
    :data:`STALE` once it has not moved for ``stale`` s (measured on this process's clock
    from when the wait began, so clocks of other machines and an old mtime never count).
    Raises filelock.Timeout."""
    start = time.monotonic()
    moved, seen = start, _beat_of(path)
    step = min(_POLL, stale / 4)
    while True:
        left = timeout - (time.monotonic() - start)
        if left <= 0:
            raise _timeout_error()(str(path))
        try:
            lock.acquire(timeout=min(step, left))
            return True
        except _timeout_error():
            pass
        now, beat = time.monotonic(), _beat_of(path)
        if beat != seen:
            moved, seen = now, beat
        elif now - moved >= stale:
            return STALE


class _Heartbeats:
    """Renews the mtime of every lock file this process holds, every :data:`BEAT` s, from one
    daemon thread (started by the first hold, ended when none is left): a thread per hold
    would cost every put and every removal of an eviction a thread's start. As kcache.remote's
    lease renewer does for a Redis lease. A stopped process stops renewing. ``os.utime(...,
    None)``: the time is now, which any writer of the file may set (a shared root's files
    belong to several users); never through a symlink. A beat just after a release touches a
    lock no longer held: harmless (the next holder is alive, or looks so one beat longer)."""

    def __init__(self):
        self._reset()

    def _reset(self) -> None:
        self._mutex = threading.Lock()
        self._held: dict[str, int] = {}  # lock file name -> holds (reentrant)
        self._thread: threading.Thread | None = None

    def add(self, name: str) -> None:
        with self._mutex:
            self._held[name] = self._held.get(name, 0) + 1
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="kcache-lock-heartbeat", daemon=True)
                try:
                    thread.start()
                except RuntimeError:  # no thread to be had: no heartbeat (at worst a waiter
                    return            # passes this holder: one duplicate compile); tried again next hold
                self._thread = thread

    def discard(self, name: str) -> None:
        with self._mutex:
            left = self._held.get(name, 0) - 1
            if left > 0:
                self._held[name] = left
            else:
                self._held.pop(name, None)

    def _run(self) -> None:
        tick = threading.Event()  # never set: a timer between beats, not synchronisation
        while True:
            tick.wait(BEAT)
            with self._mutex:
                names = list(self._held)
                if not names:
                    self._thread = None
                    return
            for name in names:
                try:
                    os.utime(name, None, follow_symlinks=False)
                except OSError:  # the lock folder went away or turned unwritable: waiters time out
                    pass


HEARTBEATS = _Heartbeats()
if hasattr(os, "register_at_fork"):
    # a forked child holds none of its parent's locks (nor has its heartbeat thread)
    os.register_at_fork(after_in_child=HEARTBEATS._reset)

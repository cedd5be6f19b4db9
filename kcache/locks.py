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
So a compile's holder (``hold(..., flight=True)``) renews a heartbeat, the lock file's mtime,
from a thread every ``stale / 4`` s (at least once a second), and a waiter that sees the mtime
unchanged for ``stale`` seconds (KCACHE_LOCK_STALE) stops waiting: it is told
:data:`STALE`, counted in ``lock_stale``, warned once, and compiles on its own. A running
holder, however slow, keeps its waiters waiting up to the lock timeout. (The heartbeat is a
Python thread: a compile step that held the GIL for longer than ``stale`` would look stopped,
at worst costing one duplicate compile, never a wrong entry.)
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

from .errors import LockTimeout
from .layout import Layout
from .paths import RootDirs
from .warn import warn_once

#: What ``KeyLocks.hold(..., flight=True)`` yields when the holder's heartbeat stopped.
STALE = "stale"
_POLL = 0.25  # seconds between a waiter's looks at the holder's heartbeat (at most)
_BEAT = 1.0  # seconds between a holder's heartbeats (at most)
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
        self.file_mode = file_mode
        self._count = count
        self._on_error = on_error
        self._ensure_folder = ensure_folder
        self._ready: set[Path] = set()  # lock folders checked in this process

    def path(self, key: str) -> Path:
        return self.layout.lock(key)

    @contextlib.contextmanager
    def hold(self, key: str, timeout: float | None = None, *, key_for_stats: str | None = None,
             blocking: bool = True, flight: bool = False,
             while_waiting: Callable[[], None] | None = None) -> Iterator[bool | str | None]:
        """Hold ``key``'s lock. Yields True when held; False when, with ``blocking=False``,
        another process holds it; None when the lock file cannot be used (a lock folder that
        is not writable, a symlink, ...: a no-op lock, warned once; callers go on as if
        alone, so a broken lock folder never stops a put or an eviction). Raises LockTimeout
        after ``timeout`` seconds (default: the store's lock_timeout).

        ``flight=True`` (a compile): while held, the heartbeat runs; while waiting, a holder
        whose heartbeat has not moved for ``stale`` seconds is passed: yields :data:`STALE`
        (counted, warned once), and until the block ends this thread's other holds of the
        same lock (the put of what it compiled) go on without it, as for a no-op lock.
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
        acquired = self._acquire(lock, path, timeout, blocking, skey, self.stale if flight else 0.0,
                                 while_waiting, setting)
        if acquired == STALE:
            yield from self._passing_block(path, skey)
            return
        if not acquired:
            yield None if acquired is False and path in self._passing() else acquired
            return
        beat = self._heartbeat(path) if flight else None
        try:
            yield True
        finally:
            if beat is not None:
                beat.stop()
            lock.release()

    def _through_folder(self, path: Path) -> str:
        """Lock file ``path`` named through its folder's descriptor (:meth:`RootDirs.path`),
        so a heartbeat or a look at one never reaches outside the root after a swap."""
        folder = path.parent.relative_to(self.dirs.root).as_posix()
        return self.dirs.path(folder, path.name)

    def _heartbeat(self, path: Path):
        try:
            return _Heartbeat(self._through_folder(path), self.stale)
        except OSError:  # the folder went away meanwhile: no heartbeat (waiters time out)
            return None

    def _passing(self) -> set:
        paths = getattr(self._passed, "paths", None)
        if paths is None:
            paths = self._passed.paths = set()
        return paths

    def _passing_block(self, path: Path, skey: str):
        self._count(skey, now=True, lock_stale=1)
        warn_once("lock-stale", f"kcache: the process holding lock file {path} shows no "
                  f"heartbeat for {self.stale:g} s (stopped: SIGSTOP, a debugger, a frozen "
                  f"container?); compiling here without it (KCACHE_LOCK_STALE)")
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


class _Heartbeat:
    """Renews a held lock file's mtime every ``stale / 4`` s (at most every second, so that a
    waiter with a shorter KCACHE_LOCK_STALE than this process's sees it too) from a daemon
    thread, until stopped; as kcache.remote's lease renewer does for a Redis lease. A stopped
    process stops renewing. ``os.utime(..., None)``: the time is now, which any writer of
    the file may set (a shared root's files belong to several users); never through a
    symlink."""

    def __init__(self, path: str, stale: float):
        self._stop = threading.Event()
        if stale <= 0:
            self._thread = None
            return
        self._thread = threading.Thread(target=self._run, args=(path, min(stale / 4, _BEAT)),
                                        name="kcache-lock-heartbeat", daemon=True)
        self._thread.start()

    def _run(self, path: str, period: float) -> None:
        while not self._stop.wait(period):
            try:
                os.utime(path, None, follow_symlinks=False)
            except OSError:  # the lock folder went away or turned unwritable: waiters time out
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

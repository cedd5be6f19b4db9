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
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from pathlib import Path
from typing import Callable, Iterator

from .errors import LockTimeout
from .layout import Layout
from .paths import RootDirs


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

    ``count(name, n)`` is called for ``lock_waits`` / ``lock_timeouts``; ``on_error(exc)`` for
    a lock folder that cannot be used (then the lock degrades to a no-op);
    ``ensure_folder(path)`` creates a folder of the root and raises OSError unless it is a
    real folder (``LocalTier.ensure_folder``)."""

    def __init__(self, layout: Layout, timeout: float, file_mode: int,
                 count: Callable[..., None], on_error: Callable[[OSError], None],
                 ensure_folder: Callable[[Path], None], dirs: RootDirs | None = None):
        self.layout = layout
        self.dirs = dirs or RootDirs(layout.root)
        self.dir = layout.locks
        self.timeout = timeout
        self.file_mode = file_mode
        self._count = count
        self._on_error = on_error
        self._ensure_folder = ensure_folder
        self._ready: set[Path] = set()  # lock folders checked in this process

    def path(self, key: str) -> Path:
        return self.layout.lock(key)

    @contextlib.contextmanager
    def hold(self, key: str, timeout: float | None = None, *, key_for_stats: str | None = None,
             blocking: bool = True) -> Iterator[bool | None]:
        """Hold ``key``'s lock. Yields True when held; False when, with ``blocking=False``,
        another process holds it; None when the lock file cannot be used (a lock folder that
        is not writable, a symlink, ...: a no-op lock, warned once; callers go on as if
        alone, so a broken lock folder never stops a put or an eviction). Raises LockTimeout
        after ``timeout`` seconds (default: the store's lock_timeout)."""
        path = self.path(key)
        lock = self._make(path)
        if lock is None:
            yield None
            return
        timeout = self.timeout if timeout is None else timeout
        acquired = self._acquire(lock, path, timeout, blocking, key_for_stats or key)
        if not acquired:
            yield acquired
            return
        try:
            yield True
        finally:
            lock.release()

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

    def _acquire(self, lock, path: Path, timeout: float, blocking: bool, skey: str) -> bool | None:
        """True when acquired, False when busy (``blocking=False``), None when unusable."""
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
            lock.acquire(timeout=timeout)
            return True
        except _timeout_error():
            self._count(skey, now=True, lock_timeouts=1)
            raise LockTimeout(
                f"timed out after {time.monotonic() - start:.1f} s waiting for lock file {path} "
                f"(held by another process, probably compiling the same kernel); "
                f"raise KCACHE_LOCK_TIMEOUT (seconds, now {timeout:g}) or check that process"
            ) from None
        except OSError as exc:
            self._on_error(exc)
            return None


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

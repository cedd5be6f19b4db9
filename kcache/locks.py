"""Per-key locks (``<root>/v1/locks/ab/<key>.lock``) built on :mod:`filelock`.

Lock folders are checked before a lock file is made in them: a symlinked (or otherwise
unusable) lock folder turns locking off for the keys of that shard, with one warning, and
never creates a file outside the root.

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
import time
from pathlib import Path
from typing import Callable, Iterator

from .errors import LockTimeout
from .layout import Layout


def _filelock(path: Path, mode: int):
    import filelock  # imported on first lock: a listing or a hit takes no lock
    return filelock.FileLock(str(path), mode=mode, is_singleton=True)


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
                 ensure_folder: Callable[[Path], None]):
        self.layout = layout
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
            if os.path.islink(path):  # never create or truncate a file through it
                raise OSError(errno.ELOOP, "a symlink where a lock file belongs", str(path))
            return _filelock(path, self.file_mode)
        except OSError as exc:
            self._on_error(exc)
            return None

    def ready_folder(self, folder: Path) -> None:
        """Create and check ``folder`` (a lock folder) once per process. Raises OSError."""
        if folder in self._ready:
            return
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


def try_global(path: Path, mode: int, ready: Callable[[Path], None]):
    """Non-blocking try of a global lock (eviction): the held lock, :data:`BUSY` when another
    process holds it, or the OSError that makes it unusable (a folder named like the lock,
    a symlinked lock folder, ...): the caller then goes on without it, warned."""
    try:
        ready(path.parent)
        lock = _filelock(path, mode)
        lock.acquire(timeout=0)
        return lock
    except _timeout_error():
        return BUSY
    except OSError as exc:
        return exc



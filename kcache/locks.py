"""Per-key locks (``<root>/v1/locks/ab/<key>.lock``) built on :mod:`filelock`.

Readers never lock. Writers of one key (put, remove, evict, quarantine) and single-flight
compiles hold that key's lock, so the store's totals stay exact under concurrency. FileLock
instances are process-wide singletons per path and reentrant, so a put inside
``get_or_create``'s lock does not deadlock. flock-based locks die with their process: a
killed compiler never leaves a stale lock behind.
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Callable, Iterator

import filelock

from .errors import LockTimeout


def _filelock(path: Path, mode: int) -> filelock.FileLock:
    return filelock.FileLock(str(path), mode=mode, is_singleton=True)


class KeyLocks:
    """Per-key file locks under ``locks_dir``.

    ``count(name, n)`` is called for ``lock_waits`` / ``lock_timeouts``; ``on_error(exc)`` for
    a lock directory that cannot be written (then the lock degrades to a no-op)."""

    def __init__(self, locks_dir: Path, timeout: float, file_mode: int,
                 count: Callable[..., None], on_error: Callable[[OSError], None]):
        self.dir = locks_dir
        self.timeout = timeout
        self.file_mode = file_mode
        self._count = count
        self._on_error = on_error

    def path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.lock"

    @contextlib.contextmanager
    def hold(self, key: str, timeout: float | None = None, *, key_for_stats: str | None = None,
             blocking: bool = True) -> Iterator[bool]:
        """Hold ``key``'s lock. Yields True when held, False when the lock could not be taken
        because the directory is not writable (no-op lock) or, with ``blocking=False``,
        another process holds it. Raises LockTimeout after ``timeout`` seconds (default: the
        store's lock_timeout)."""
        path = self.path(key)
        lock = self._make(path)
        if lock is None:
            yield False
            return
        timeout = self.timeout if timeout is None else timeout
        acquired = self._acquire(lock, path, timeout, blocking, key_for_stats or key)
        if not acquired:
            yield False
            return
        try:
            yield True
        finally:
            lock.release()

    def _make(self, path: Path) -> filelock.FileLock | None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return _filelock(path, self.file_mode)
        except OSError as exc:
            self._on_error(exc)
            return None

    def _acquire(self, lock, path: Path, timeout: float, blocking: bool, skey: str) -> bool:
        try:
            lock.acquire(timeout=0)
            return True
        except filelock.Timeout:
            if not blocking:
                return False
        except OSError as exc:
            self._on_error(exc)
            return False
        self._count(skey, now=True, lock_waits=1)  # rare; written at once so waiters are visible
        start = time.monotonic()
        try:
            lock.acquire(timeout=timeout)
            return True
        except filelock.Timeout:
            self._count(skey, now=True, lock_timeouts=1)
            raise LockTimeout(
                f"timed out after {time.monotonic() - start:.1f} s waiting for lock file {path} "
                f"(held by another process, probably compiling the same kernel); "
                f"raise KCACHE_LOCK_TIMEOUT (seconds, now {timeout:g}) or check that process"
            ) from None
        except OSError as exc:
            self._on_error(exc)
            return False


def try_global(path: Path, mode: int) -> filelock.FileLock | None:
    """Non-blocking try of a global lock (eviction): the held lock, or None if busy/unwritable."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = _filelock(path, mode)
        lock.acquire(timeout=0)
        return lock
    except (filelock.Timeout, OSError):
        return None



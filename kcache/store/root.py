"""The writable root of a store: whether it can be written, why not, and making its folders.

A part of :class:`kcache.Store`, made with what it uses: the local tier of the root, an
``in_use()`` check (the store is not disabled and the root passed the trust check) and the
counters. A root that proves read-only, missing, full or untrusted stops the writes of this
process (``writable`` False, ``write_problem`` says why), warned once; the program goes on
uncached. A failure that is one key's alone (a folder named like the entry, ...) stops only
that put.
"""
from __future__ import annotations

import errno
from pathlib import Path
from typing import Callable

from ..tiers.local import LocalTier, os_reason, probe_writable
from ..warn import warn_once
from .stats import ROOT_ERRNOS

_PERMISSION_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS}
_NO_SPACE_ERRNOS = {errno.ENOSPC, errno.EDQUOT}


class WritableRoot:
    """The writable root's state. ``local``: its LocalTier; ``in_use()``: True while the
    store uses the root; ``count(key, now=False, **counters)``: the store's counters."""

    def __init__(self, local: LocalTier, *, in_use: Callable[[], bool], count):
        self.local = local
        self.root = local.root
        self.layout = local.layout
        self._in_use = in_use
        self._count = count
        self.writable = True  # False once a write failed or check_writable() found a problem
        self.write_problem: str | None = None  # why writable is False
        self.write_exc: OSError | None = None
        self.ready = False  # the root's folders were made (and still are, as far as we know)

    def fail(self, exc: OSError) -> None:
        """The writable root proved read-only/missing/full: stop writing, warn once. The text
        suits a program compiling kernels and a maintenance command alike."""
        self.mark_unwritable(os_reason(exc), exc)
        warn_once("unwritable", f"kcache: cannot write to the cache at {self.root}: {self.write_problem}; "
                  "this process writes nothing more there (new kernels still compile, uncached). "
                  "Point KCACHE_DIR at a writable directory with free space, or set KCACHE_DISABLE=1.")

    def mark_unwritable(self, reason: str, exc: OSError | None = None) -> None:
        self.writable = False
        self.write_problem = reason
        self.write_exc = exc

    def layout_gone(self) -> None:
        self.ready = False  # e.g. the root was deleted while we run: recreate on next write

    def lock_error(self, exc: OSError) -> None:
        if not self.writable:
            return  # already warned that the root cannot be written
        if exc.errno in ROOT_ERRNOS | {errno.EACCES, errno.EPERM} and self.check_writable():
            self.fail(exc)  # the whole root is unwritable, not only its lock folder: say so
            return
        warn_once("locks", f"kcache: cannot use lock files under {self.layout.locks} "
                  f"({exc.strerror or exc}); continuing without locks (concurrent processes "
                  "may compile the same kernel twice)")

    def put_failed(self, key: str, exc: OSError) -> None:
        """A put of ``key`` failed: count it by cause; stop writing only when the root itself
        cannot be written (a folder named like the entry, an EXDEV or ELOOP, ... is that key's
        fault alone: later puts of other keys go on)."""
        cause = _cause(exc)
        if isinstance(exc, FileNotFoundError):
            self.ready = False  # the layout was deleted under us: recreate it next time
        elif exc.errno in ROOT_ERRNOS or (exc.errno in _PERMISSION_ERRNOS
                                          and probe_writable(self.root) is not None):
            self.fail(exc)  # first: the count below then stays in memory, unwritten
        else:
            warn_once("put-failed", f"kcache: cannot store entry {self.layout.entry(key)} "
                      f"({os_reason(exc)}); that kernel runs uncached, the others are stored")
        self._count(key, now=True, **{cause: 1})

    def refused_cause(self) -> str:
        """The counter of a put refused because the root cannot be written: the cause of the
        error that stopped the writes (a full disk is no permission problem), else
        ``write_errors_permission`` (read-only, untrusted: found by a probe)."""
        return "write_errors_permission" if self.write_exc is None else _cause(self.write_exc)

    def check_writable(self) -> str | None:
        """Why the writable root cannot be written (str), or None if it can; works before any
        write and writes nothing that stays. Raises nothing.

        The probe is :func:`probe_writable` (a temp file created and deleted in the deepest
        existing folder of ``root/v1/entries``; for a missing root, a temp directory in its
        nearest existing ancestor), so a root under a file ("... is a file, not a directory
        (ENOTDIR)"), under /proc, on a read-only mount (EROFS), without permission (EACCES)
        or on a full file system (ENOSPC) is found even as root user. An untrusted root
        says why ("not trusted: ..."). A problem found sets ``writable`` False and
        ``write_problem`` (no warning: the caller asked). Also returns the reason of an
        earlier write failure of this Store."""
        if self.write_problem is not None:
            return self.write_problem
        problem = probe_writable(self.root)
        if problem is not None:
            self.mark_unwritable(problem)
        return problem

    def ensure(self) -> bool:
        """Create root (0700, or 02770 when shared), CACHEDIR.TAG, ``v1`` and ``v1/entries``;
        False if the root cannot be written or is not used (KCACHE_DISABLE, untrusted)."""
        if self.ready and self.writable:
            return True
        if not self._in_use() or not self.writable:
            return False
        try:
            self.local.ensure_entries()
        except OSError as exc:
            ours = {str(self.layout.bucket), str(self.layout.entries)}
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and str(exc.filename) in ours:
                self.mark_unwritable(f"not trusted: {exc.filename} is not a folder of the cache")
                warn_once("unwritable", f"kcache: the cache at {self.root} is not used: "
                          f"{exc.filename} is a symlink or a file, not a folder")
            else:
                self.fail(exc)
            return False
        self.ready = True
        return True

    def ready_folder(self, folder: Path) -> None:
        """Create and check a folder of the bucket (locks, stats, quarantine). OSError."""
        if not self.ensure():
            raise OSError(errno.EROFS, self.write_problem or "the cache root is not used", str(folder))
        self.local.ensure_folder(folder)


def _cause(exc: OSError) -> str:
    """The write_errors_* counter of a failed write."""
    return ("write_errors_no_space" if exc.errno in _NO_SPACE_ERRNOS else
            "write_errors_permission" if exc.errno in _PERMISSION_ERRNOS else
            "write_errors_other")

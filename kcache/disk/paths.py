"""Path resolution below a cache root: the one module that turns "a folder of the root" into
a descriptor (docs/security.md, "Paths below the root").

A member of a shared root's group can rename any folder below it and put a symlink in its
place at any moment, so a folder is never reached by its path string. The root is opened
once (following a symlink: the root itself may be one, it is the user's setting); every
folder below it is opened from its parent's descriptor one component at a time with
``O_DIRECTORY | O_NOFOLLOW`` (:func:`kcache.fsio.open_dir`), and the final operation on a
file names it relative to its folder's descriptor (``dir_fd=``). A folder swapped for a
symlink mid-run then leads nowhere: the walk fails with ELOOP (a miss, a skipped entry, an
unusable lock or stats shard), never an operation outside the root.

Descriptors of the folders used are kept for the life of the :class:`RootDirs` (a hit costs
no walk). A descriptor keeps naming the folder it was opened on, wherever that folder is
moved: a swap is noticed by :meth:`RootDirs.check`, which compares each kept descriptor's
identity with the entry its path names now, through the parent's descriptor. Writers and
maintenance check before they start; readers check after a miss (the folder may have been
deleted and recreated by another process).
"""
from __future__ import annotations

import os
import sys
import weakref
from pathlib import Path

from . import fsio

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC  # the root may be a symlink: followed
#: /proc/self/fd/N is a magic link to the folder descriptor N holds, so a name after it is
#: resolved inside that folder whatever path reaches it now (Linux).
_PROC_FD = "/proc/self/fd" if sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd") else None


def _ident(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _close_all(fds: dict, retired: list) -> None:
    for fd in [*fds.values(), *retired]:
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()
    retired.clear()


class RootDirs:
    """Descriptors of the folders of cache root ``root``, each reached from the root's
    descriptor without following a symlink.

    Folders are named relative to the root with "/" (``""`` is the root, ``"v1/entries/ab"``
    a shard). ``dir_mode``: permission bits of folders it creates. Descriptors returned by
    :meth:`folder` are borrowed (the caller never closes them); they stay open until the
    RootDirs is collected (a descriptor dropped by :meth:`check` is kept open too, since
    another thread may be using it)."""

    def __init__(self, root: Path, dir_mode: int = 0o700):
        self.root = Path(root)
        self.dir_mode = dir_mode
        self._fds: dict[str, int] = {}
        self._retired: list[int] = []
        weakref.finalize(self, _close_all, self._fds, self._retired)

    def folder(self, rel: str = "", *, create: bool = False) -> int:
        """Borrowed descriptor of folder ``rel``; with ``create``, missing folders on the way
        are made (modes exact). Raises OSError: ELOOP for a symlink on the way (never
        followed), ENOTDIR for a file, ENOENT when absent."""
        fd = self._fds.get(rel)
        if fd is not None:
            return fd
        try:
            if rel:
                parent, _, name = rel.rpartition("/")
                fd = self._child(self.folder(parent, create=create), name, create)
            else:
                fd = self._open_root(create)
        except OSError as exc:
            if exc.filename is None or not os.path.isabs(os.fsdecode(exc.filename)):
                # for messages (os.path: a miss of the cache's read path passes here)
                exc.filename = os.path.join(self.root, rel) if rel else str(self.root)
            raise
        kept = self._fds.setdefault(rel, fd)  # another thread may have opened it meanwhile
        if kept != fd:
            os.close(fd)
        return kept

    def open(self, rel: str, name: str, *, create: bool = False) -> int:
        """A new descriptor (the caller closes it) of folder ``name`` in folder ``rel``."""
        return self._child(self.folder(rel, create=create), name, create)

    def _child(self, parent_fd: int, name: str, create: bool) -> int:
        try:
            return fsio.open_dir(name, parent_fd)
        except FileNotFoundError:
            if not create:
                raise
        fsio.make_dir(name, self.dir_mode, parent_fd)
        return fsio.open_dir(name, parent_fd)

    def _open_root(self, create: bool) -> int:
        try:
            return os.open(self.root, _ROOT_FLAGS)
        except FileNotFoundError:
            if not create:
                raise
        try:
            self.root.mkdir(parents=True, mode=self.dir_mode)
            made = True
        except FileExistsError:
            made = False
        fd = os.open(self.root, _ROOT_FLAGS)
        if made:
            os.fchmod(fd, self.dir_mode)  # mkdir's mode is masked by the umask
        return fd

    def path(self, rel: str, name: str) -> str:
        """A path string naming ``name`` inside folder ``rel`` for a library that takes paths
        only (filelock, the toolchain memo): ``/proc/self/fd/N/NAME`` on Linux, where N is
        the folder's descriptor, so no symlink on the way is followed. Raises OSError as
        :meth:`folder` does."""
        fd = self.folder(rel)
        if _PROC_FD is None:  # not Linux: the plain path (checked when the folder was opened)
            return os.path.join(self.root, rel, name)
        return f"{_PROC_FD}/{fd}/{name}"

    def check(self, rel: str | None = None) -> bool:
        """Drop kept descriptors that no longer name what their path names (a folder renamed,
        replaced by a symlink, deleted, recreated): ``rel`` and the folders above it, or
        every kept one when None; a dropped folder's descendants go too. Returns True when
        something was dropped (the next :meth:`folder` walks again). Raises nothing."""
        # No lock (a fork while another thread held one would hang the child): each dict
        # operation is atomic, and a descriptor popped twice is retired once.
        if rel is None:
            names = sorted(list(self._fds), key=lambda r: (r.count("/"), len(r)))
        else:
            parts = rel.split("/") if rel else []
            names = [""] + ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        stale = [r for r in names if r in self._fds and not self._same(r)]
        if not stale:
            return False
        for r in list(self._fds):
            if any(r == s or not s or r.startswith(s + "/") for s in stale):
                fd = self._fds.pop(r, None)
                if fd is not None:
                    self._retired.append(fd)
        return True

    def _same(self, rel: str) -> bool:
        """True when kept descriptor ``rel`` is still the folder its path names."""
        try:
            fd = self._fds.get(rel)
            if fd is None:
                return True  # dropped meanwhile by another thread
            held = _ident(os.fstat(fd))
            if not rel:
                return held == _ident(os.stat(self.root))
            parent, _, name = rel.rpartition("/")
            parent_fd = self._fds.get(parent)
            if parent_fd is None:
                return False
            return held == _ident(fsio.lstat_at(name, parent_fd))
        except OSError:
            return False

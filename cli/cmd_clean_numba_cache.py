"""``kcache clean-numba-cache DIR... [--dry-run]``: find numba's own cache files under the
DIRs (what numba-cuda's ``cache=True`` wrote beside a project's sources before kcache served
its kernels) and remove them.

Only regular files named as numba names them are touched: ``<module>.<qualname>-<line>.py<XY>``
then ``.nbi`` (the index), ``.<n>.nbc`` (the data) or ``.lcs`` (numba-cuda's marker of a
launch-config-sensitive kernel); numba.cuda.core.caching (``_CacheImpl.get_filename_base``,
``IndexDataCacheFile``) and numba.cuda.dispatcher (``CUDACache``) write them, in
``__pycache__`` beside the sources or under ``NUMBA_CACHE_DIR``. numba's CPU ``cache=True``
functions use the same names and are found too (numba compiles them again on their next
call). The walk never follows a symbolic link (each folder opened with ``O_NOFOLLOW``
relative to its parent's descriptor: a folder swapped for a link meanwhile is not entered),
is a loop (any depth) holding one folder's descriptor at a time (any ``ulimit -n``), a link
named like a cache file is left,
and nothing else is removed: no folder, no ``.pyc``. Exit status: 0; 1 a file could not be
removed or a folder could not be read (each named); 2 a DIR that is missing, not a folder or
a symbolic link (one line, nothing removed).
"""
from __future__ import annotations

import errno
import fnmatch
import os
import re
import stat

from kcache.cli.args import nonblank_arg, want_json, want_wide
from kcache.cli.errors import Problem, UsageError
from kcache.cli.fmt import human_size, plural
from kcache.cli.output import Column, message, print_json, print_table
from kcache.cli.text import clip

#: numba's cache file names (module docstring): "kernels.axpy-7.py311.nbi",
#: "kernels.axpy-7.py311.0.nbc", "kernels.axpy-7.py311.lcs" (a free-threaded build: py313t).
NAME = re.compile(r"(?P<function>[^/]+)-[^/-]*\.py\d{2,3}[a-z]*\.(?:nbi|\d+\.nbc|lcs)")
COLUMNS = (Column("Path", shrink=20), Column("Size", right=True))


def register(sub):
    """Add the ``clean-numba-cache`` subparser to ``sub`` and return it."""
    p = sub.add_parser(
        "clean-numba-cache", help="remove numba's own cache files (*.nbi, *.nbc)",
        description="Find the files numba's own cache wrote under each DIR (__pycache__/"
                    "*.nbi, *.nbc and *.lcs, named as numba names them: numba-cuda's "
                    "cache=True, and numba's CPU cache=True too), list them with their sizes "
                    "and remove them. Symbolic links are never followed; nothing else is "
                    "removed.")
    p.add_argument("dirs", nargs="+", metavar="DIR",
                   help="a folder to search (e.g. a project's sources, or NUMBA_CACHE_DIR)")
    p.add_argument("--function", action="append", metavar="GLOB", default=[],
                   type=nonblank_arg("--function"),
                   help="only the files of functions whose MODULE.QUALNAME (the name's "
                        "start, e.g. kernels.axpy) matches GLOB, e.g. 'kernels.*' "
                        "(repeatable): keeps numba's CPU caches of other modules")
    p.add_argument("--dry-run", "-n", action="store_true",
                   help="list what would be removed; remove nothing")
    return p


def run(args) -> int:
    """List and (unless --dry-run) remove numba's cache files under ``args.dirs``.

    JSON: ``{"dirs": [path...], "dry_run", "files": [{"path", "size"}], "count", "bytes",
    "not_removed": [{"path", "reason"}], "unreadable": [{"path", "reason"}]}``; ``files``
    are those removed (with --dry-run: those that would be). Exit 1 when ``not_removed`` or
    ``unreadable`` is not empty."""
    tops = [_checked_dir(text) for text in args.dirs]
    found, failed, unreadable, seen = [], [], [], set()
    for top in tops:
        _clean(top, args, found, failed, unreadable, seen)
    total = sum(size for _path, size in found)
    if want_json(args):
        print_json({"dirs": tops, "dry_run": bool(args.dry_run),
                    "files": [{"path": p, "size": s} for p, s in found],
                    "count": len(found), "bytes": total,
                    "not_removed": [{"path": p, "reason": r} for p, r in failed],
                    "unreadable": [{"path": p, "reason": r} for p, r in unreadable]})
    else:
        print_table(COLUMNS, found, names=("path", "size"), wide=want_wide(args),
                    human=lambda f: (f[0], human_size(f[1])), plain=lambda f: f)
        _summary(args, found, total)
    problems = [f"cannot remove {p}: {r}" for p, r in failed]
    problems += [f"cannot read {p}: {r}" for p, r in unreadable]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise Problem(problems[0] + more)
    return 0


def _checked_dir(text: str) -> str:
    """``text`` as an absolute path (not resolved) of a folder that is not a symbolic link;
    UsageError with one line otherwise."""
    shown = clip(text)
    if not text.strip():
        raise UsageError("clean-numba-cache: an empty DIR (accepted: a folder)")
    path = os.path.abspath(text)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise UsageError(f"clean-numba-cache: {shown} does not exist (accepted: a folder)") from None
    except OSError as exc:
        raise UsageError(f"clean-numba-cache: cannot read {shown}: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UsageError(f"clean-numba-cache: {shown} is a symbolic link, never followed; "
                         "give the folder it points to")
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"clean-numba-cache: {shown} is not a folder (accepted: a folder)")
    return path


def _clean(top: str, args, found: list, failed: list, unreadable: list, seen: set) -> None:
    """Walk ``top`` (:func:`_folders`); note each cache file (``found``: (path, size)) of the
    ``--function`` GLOBs (all without one) and remove it unless ``--dry-run``. A file met
    twice (DIRs that nest) is noted once."""
    start = len(found)
    for folder, dirfd, files in _folders(top, unreadable):
        for name in files:
            match = NAME.fullmatch(name)
            if match is None or not _wanted(match["function"], args.function):
                continue
            try:
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                continue  # a link or other special file named like one: not numba's
            seen.add((st.st_dev, st.st_ino))
            path = os.path.join(folder, name)
            if not args.dry_run:
                try:
                    os.unlink(name, dir_fd=dirfd)  # the name in this folder: never a target
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    failed.append((path, exc.strerror or str(exc)))
                    continue
            found.append((path, st.st_size))
    found[start:] = sorted(found[start:])


#: A folder opened for the walk: never through a link (O_NOFOLLOW on the last component,
#: always opened relative to its parent's descriptor or as the checked DIR).
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _folders(top: str, unreadable: list):
    """Each folder under ``top`` (``top`` first, depth first) as ``(path, fd, names)``:
    ``names`` of its entries that are not folders, ``fd`` open while the caller handles them.

    Not ``os.fwalk``: that recurses (a RecursionError past ~1000 levels) and holds one
    descriptor per level (EMFILE under a low ``ulimit -n``, mid-removal). Here the walk is a
    loop over an explicit stack of (path, name, (st_dev, st_ino), subfolders left) and holds
    one folder's descriptor (two while moving): down through ``name`` relative to the
    parent's descriptor, back up through ``..``; each folder opened is checked to be the
    one listed (its st_dev, st_ino), else it is opened again from ``top`` name by name. A
    folder that cannot be read is noted in ``unreadable`` (path, reason) once and skipped; one
    gone, or swapped for a link or a file, meanwhile is skipped silently."""
    try:
        fd = os.open(top, _DIR_FLAGS)
    except OSError as exc:
        unreadable.append((top, exc.strerror or str(exc)))
        return
    stack: list[tuple[str, str, tuple, list]] = []
    path, name = top, ""
    try:
        while fd is not None:
            try:
                files, subdirs = _listing(fd)
            except OSError as exc:
                unreadable.append((path, exc.strerror or str(exc)))
                files, subdirs = [], []
            if files:
                yield path, fd, files
            stack.append((path, name, _ident(os.fstat(fd)), sorted(subdirs, reverse=True)))
            fd, path, name = _next_folder(fd, stack, top, unreadable)
    finally:
        if fd is not None:
            os.close(fd)


def _next_folder(fd: int, stack: list, top: str, unreadable: list):
    """From the folder of ``fd`` (``stack[-1]``'s), to the next folder to list: ``(fd, path,
    name)`` of it, ``fd`` closed; ``(None, None, None)`` when the walk is over."""
    while True:
        parent_path, _name, _ident_, subdirs = stack[-1]
        if subdirs:
            name = subdirs.pop()
            path = os.path.join(parent_path, name)
            try:
                child = _open_child(fd, name)
            except OSError as exc:
                unreadable.append((path, exc.strerror or str(exc)))
                continue
            if child is not None:
                os.close(fd)
                return child, path, name
            continue
        stack.pop()
        fd = _up(fd, stack, top)
        if fd is None:
            return None, None, None


def _listing(fd: int) -> tuple[list, list]:
    """(names of the entries that are not folders, names of the folders) in ``fd``'s folder;
    a link, to a folder or not, is not a folder. Raises OSError when it cannot be read."""
    files, subdirs = [], []
    with os.scandir(fd) as entries:  # on a duplicate of fd, closed with the iterator
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            (subdirs if is_dir else files).append(entry.name)
    return files, subdirs


def _open_child(fd: int, name: str) -> int | None:
    """The descriptor of folder ``name`` in ``fd``'s folder, opened without following a
    link; None when it is gone, or is no longer a folder of its own (a link, a file, or
    swapped between the check and the open). Raises OSError when it cannot be read."""
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            return None
        child = os.open(name, _DIR_FLAGS, dir_fd=fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link now: O_NOFOLLOW refused it
            return None
        raise
    if _ident(os.fstat(child)) != _ident(st):
        os.close(child)
        return None
    return child


def _up(fd: int, stack: list, top: str) -> int | None:
    """``fd`` closed and the descriptor of ``stack[-1]``'s folder (its parent) instead,
    through ``..`` when that is still the parent, else opened again from ``top`` name by
    name: the folders below the first one gone are dropped from ``stack``. None when
    ``stack`` is empty or ``top`` itself is gone."""
    if not stack:
        os.close(fd)
        return None
    try:
        parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
    except OSError:
        parent = None
    os.close(fd)
    if parent is not None and _ident(os.fstat(parent)) == stack[-1][2]:
        return parent
    if parent is not None:
        os.close(parent)
    return _reopen(stack, top)


def _reopen(stack: list, top: str) -> int | None:
    """The folder of the deepest frame of ``stack`` still reachable from ``top`` through
    the same folders (a folder moved meanwhile); frames below it are dropped."""
    try:
        fd = os.open(top, _DIR_FLAGS)
    except OSError:
        stack.clear()
        return None
    if _ident(os.fstat(fd)) != stack[0][2]:
        os.close(fd)
        stack.clear()
        return None
    for depth in range(1, len(stack)):
        try:
            child = _open_child(fd, stack[depth][1])
        except OSError:
            child = None
        if child is None or _ident(os.fstat(child)) != stack[depth][2]:
            if child is not None:
                os.close(child)
            del stack[depth:]
            return fd
        os.close(fd)
        fd = child
    return fd


def _ident(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _wanted(function: str, globs: list) -> bool:
    return not globs or any(fnmatch.fnmatchcase(function, g) for g in globs)


def _summary(args, found: list, total: int) -> None:
    where = ", ".join(args.dirs)  # as given (message() escapes and bounds the line)
    files = plural(len(found), "numba cache file")
    if not found:
        message(f"kcache: no numba cache files under {where}")
    elif args.dry_run:
        message(f"kcache: would remove {files} ({human_size(total)}) under {where}; nothing "
                "removed (--dry-run)")
    else:
        message(f"kcache: removed {files} ({human_size(total)}) under {where}")

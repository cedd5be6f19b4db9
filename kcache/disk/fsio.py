"""Safe file access inside a cache root: the file-system half of the trust boundary.

A cache root is a source of bytes that become GPU code, so (docs/security.md):

* only regular files are read, never through a symlink: ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO
  cannot block the open), then ``fstat`` must say "regular file" and name a trusted owner;
  the size is checked before anything is read, and no read goes past the caller's limit;
* folders inside the root are opened with ``O_DIRECTORY | O_NOFOLLOW`` and files are named
  relative to those descriptors (``dir_fd``), so a symlinked shard, lock, stats or quarantine
  folder is never followed out of the root;
* files are created ``O_EXCL | O_NOFOLLOW`` under kcache's own temp-name pattern
  (:data:`TEMP_RE`) and published with ``rename`` inside the same folder;
* a root or layer owned by another user, or writable by others, is not trusted
  (:class:`Trust`).
"""
from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from functools import lru_cache

from ..errors import CorruptEntry

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC


#: Names of kcache's own temp files: "." + the target's name + "." + random part + ".tmp". The
#: random part is 16 hex digits (8 lowercase letters/digits/underscores from older versions,
#: which used ``tempfile.mkstemp``). Nothing else is ever swept as a temp file.
TEMP_RE = re.compile(r"\.(?:[0-9a-f]{8,128}\.kce|[0-9a-f](?:\.hits)?\.msgpack|config\.json(?:\.bad)?"
                     r"|CACHEDIR\.TAG|toolchain\.msgpack|probe)\.(?:[0-9a-f]{16}|[a-z0-9_]{8})\.tmp")
TMP_SUFFIX = ".tmp"


def temp_name(target: str) -> str:
    """A fresh temp-file name for publishing ``target`` (a bare file name) beside it."""
    return f".{target}.{secrets.token_hex(8)}{TMP_SUFFIX}"


def open_dir(name, dir_fd: int | None = None) -> int:
    """Descriptor of folder ``name`` (relative to ``dir_fd`` when given), never through a
    symlink in its last component. Raises OSError: ELOOP for a symlink, ENOTDIR for a file,
    ENOENT when absent."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except NotADirectoryError:
        # Linux answers ENOTDIR, not ELOOP, to O_DIRECTORY | O_NOFOLLOW on a symlink; say ELOOP
        # so that callers tell a symlinked folder (skipped, warned) from a file.
        try:
            link = stat.S_ISLNK(lstat_at(name, dir_fd).st_mode)
        except OSError:
            link = False
        if link:
            raise OSError(errno.ELOOP, "a symlink, never followed", os.fspath(name)) from None
        raise


def open_regular(name, limit: int, *, dir_fd: int | None = None,
                 trust: "Trust | None" = None, check_stat=None) -> tuple[int, os.stat_result]:
    """Open regular file ``name`` (relative to ``dir_fd``) for reading: (descriptor, fstat).
    The caller closes the descriptor.

    Never through a symlink, never blocking (a FIFO is refused, not waited on): raises
    CorruptEntry (``code`` symlink, not_regular, owner, too_large; ``.stat`` set when known)
    for a file that must not be read, FileNotFoundError when absent, OSError for others.
    ``limit``: the largest size accepted, bytes; ``trust``: its owner must be one
    :meth:`Trust.file_ok` accepts; ``check_stat(st)`` runs on the ``fstat`` result first."""
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            bad = CorruptEntry("a symlink, never followed", "symlink")
        elif exc.errno in (errno.ENXIO, errno.EOPNOTSUPP):  # a socket
            bad = CorruptEntry("not a regular file", "not_regular")
        else:
            raise
        try:  # its identity (never opened): a layer counts and warns about it once, not per get
            bad.stat = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            bad.stat = None
        raise bad from None
    st = None
    try:
        st = os.fstat(fd)
        if check_stat is not None:
            check_stat(st)
        if not stat.S_ISREG(st.st_mode):
            raise CorruptEntry("not a regular file", "not_regular")
        if trust is not None and not trust.file_ok(st):
            raise CorruptEntry(trust.file_problem(st), "owner")
        if st.st_size > limit:
            raise CorruptEntry(f"file too large: {st.st_size} bytes (limit {limit})", "too_large")
    except BaseException as exc:
        os.close(fd)
        if isinstance(exc, CorruptEntry):
            exc.stat = st  # the identity of the bad file, for quarantine
        raise
    return fd, st


def read_regular(name, limit: int, *, dir_fd: int | None = None, trust: "Trust | None" = None,
                 head: int = 0, check_head=None, check_stat=None) -> tuple[bytes, os.stat_result]:
    """The bytes of regular file ``name`` (relative to ``dir_fd``) and its ``fstat``, opened
    by :func:`open_regular` (same arguments and errors). ``check_head(first_bytes, size)``
    runs on the first ``head`` bytes before the rest is read, and may raise (CorruptEntry:
    the file is judged by its prefix, a 4 GiB file with a bad magic is never read). A file
    that shrinks while read is "truncated"; one that grows is cut at its ``fstat`` size."""
    fd, st = open_regular(name, limit, dir_fd=dir_fd, trust=trust, check_stat=check_stat)
    try:
        return read_checked(fd, st, head, check_head), st
    finally:
        os.close(fd)


_WHOLE = 1 << 20  # bytes: a file this small is read in one call, then judged by its head


def read_checked(fd: int, st: os.stat_result, head: int = 0, check_head=None) -> bytes:
    """The ``st.st_size`` bytes of open regular file ``fd``; ``check_head(first_bytes,
    size)`` judges the first ``head`` bytes before more than 1 MiB is read. Raises what
    ``check_head`` raises, and CorruptEntry (``.stat`` set) for a file that shrank."""
    try:
        if st.st_size <= _WHOLE or not head:
            data = read_upto(fd, st.st_size)
            if check_head is not None:
                check_head(data[:head], st.st_size)
        else:  # a large file: judged by its head first, then read into one buffer (no copy)
            first = read_upto(fd, head)
            if check_head is not None:
                check_head(first, st.st_size)
            buf = bytearray(st.st_size)
            buf[:len(first)] = first
            got = len(first) + _read_into(fd, memoryview(buf)[len(first):])
            data = buf if got == st.st_size else bytes(buf[:got])
        if len(data) < st.st_size:
            raise CorruptEntry(f"truncated: {len(data)} of {st.st_size} bytes", "truncated")
        return data
    except CorruptEntry as exc:
        exc.stat = st
        raise


def read_head(name, n: int, *, dir_fd: int | None = None) -> bytes | None:
    """The first ``n`` bytes of regular file ``name`` (never through a symlink, never
    blocking on a FIFO); None when it is absent, not a regular file or unreadable."""
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        return read_upto(fd, n) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_into(fd: int, view: memoryview) -> int:
    """Fill ``view`` from ``fd``; the bytes read (fewer only at end of file)."""
    done = 0
    while done < len(view):
        n = os.readv(fd, [view[done:]])
        if not n:
            break
        done += n
    return done


def read_upto(fd: int, n: int) -> bytes:
    """At most ``n`` bytes from ``fd`` (fewer only at end of file)."""
    chunks, want = [], n
    while want > 0:
        chunk = os.read(fd, want)
        if not chunk:
            break
        chunks.append(chunk)
        want -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def write_all(fd: int, data: bytes, *, fsync: bool) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less than asked), then
    ``fsync`` it when asked. Raises OSError."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    if fsync:
        os.fsync(fd)


def write_new(dir_fd: int, target: str, data: bytes, mode: int, *, fsync: bool = True) -> str:
    """Write ``data`` to a new temp file beside ``target`` in folder ``dir_fd`` (created
    ``O_EXCL | O_NOFOLLOW``, permission bits exactly ``mode``); returns the temp name. The
    caller renames it (:func:`publish`). Raises OSError; no temp file is left behind."""
    tmp = temp_name(target)
    fd = os.open(tmp, _CREATE_FLAGS, mode, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)  # the umask must not narrow shared mode's group bits
        write_all(fd, data, fsync=fsync)
    except BaseException:
        os.close(fd)
        unlink_quietly(tmp, dir_fd)
        raise
    os.close(fd)
    return tmp


def publish(dir_fd: int, target: str, data: bytes, mode: int, *, fsync: bool = True) -> None:
    """Replace ``target`` in folder ``dir_fd`` by a file holding ``data``, atomically: readers
    see the old file or the new one. Raises OSError (e.g. EISDIR when ``target`` is a folder);
    no temp file is left behind."""
    tmp = write_new(dir_fd, target, data, mode, fsync=fsync)
    try:
        os.rename(tmp, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        unlink_quietly(tmp, dir_fd)
        raise


def write_atomic(path, data: bytes, *, mode: int = 0o600, fsync: bool = True) -> None:
    """Replace the file at ``path`` (a path outside a root's descriptor walk: config.json, the
    toolchain memo) by one holding ``data``, atomically, through :func:`publish` in its
    folder. ``mode``: permission bits. Raises OSError; no temp file is left behind."""
    parent, name = os.path.split(os.fspath(path))
    dir_fd = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    try:
        publish(dir_fd, name, data, mode, fsync=fsync)
    finally:
        os.close(dir_fd)


def unlink_quietly(name, dir_fd: int | None = None) -> None:
    """Remove ``name`` if it can be removed; never raises."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def lstat_at(name, dir_fd: int | None = None) -> os.stat_result:
    """``lstat`` of ``name`` relative to ``dir_fd`` (a symlink is described, not followed)."""
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)


def make_dir(name, mode: int, dir_fd: int | None = None) -> bool:
    """Create folder ``name`` with exactly ``mode`` (setgid kept in shared mode); True if
    created, False if something already has that name. Raises OSError."""
    try:
        os.mkdir(name, mode, dir_fd=dir_fd)
    except FileExistsError:
        return False
    fd = open_dir(name, dir_fd)
    try:
        os.fchmod(fd, mode)  # mkdir's mode is narrowed by the umask
    finally:
        os.close(fd)
    return True


# --- trust --------------------------------------------------------------------------------


class Trust:
    """Who may own what kcache reads (docs/security.md, "Ownership").

    Private mode: folders and files owned by this user or by root (uid 0); a folder must not
    be writable by others, nor by its group unless that group is this user's private group
    (a group of the user's own name with no other members, the default on many Linux
    systems). Shared mode (``KCACHE_SHARED``): also owned by another user when the folder's
    group is one of this process's groups; group-writable folders allowed. Never: writable
    by others (except the sticky-bit case is still refused: a cache is not a /tmp)."""

    def __init__(self, shared: bool = False):
        self.shared = shared
        self.uid = os.geteuid()
        self.groups = set(os.getgroups()) | {os.getegid()}

    def folder_problem(self, st: os.stat_result, what: str) -> str | None:
        """Why a folder with ``lstat``/``stat`` result ``st`` is not trusted, or None."""
        if not stat.S_ISDIR(st.st_mode):
            return f"{what} is not a folder"
        if st.st_mode & stat.S_IWOTH:
            return f"{what} is writable by every user (mode {stat.S_IMODE(st.st_mode):o})"
        if st.st_uid not in (self.uid, 0) and not (self.shared and st.st_gid in self.groups):
            owner = _user_name(st.st_uid)
            hint = " (set KCACHE_SHARED=1 for a cache shared by a group)" if not self.shared else ""
            return f"{what} is owned by another user ({owner}){hint}"
        if (st.st_mode & stat.S_IWGRP and not self.shared
                and not _private_group(st.st_gid, self.uid)):
            return (f"{what} is writable by its group {_group_name(st.st_gid)} (mode "
                    f"{stat.S_IMODE(st.st_mode):o}; set KCACHE_SHARED=1 to share a cache "
                    "with that group, or chmod g-w)")
        return None

    def file_ok(self, st: os.stat_result) -> bool:
        """True when a file with ``fstat`` result ``st`` may be read as an entry: a trusted
        owner (as for folders), and not writable by others (nor by its group, outside shared
        mode, unless that group is the user's private group): anyone could have changed it."""
        if st.st_mode & stat.S_IWOTH:
            return False
        if (st.st_mode & stat.S_IWGRP and not self.shared
                and not _private_group(st.st_gid, self.uid)):
            return False
        if st.st_uid in (self.uid, 0):
            return True
        return self.shared and st.st_gid in self.groups

    def file_problem(self, st: os.stat_result) -> str:
        """Why :meth:`file_ok` refuses a file (for messages)."""
        mode = stat.S_IMODE(st.st_mode)
        if st.st_mode & stat.S_IWOTH:
            return f"writable by every user (mode {mode:o})"
        if (st.st_mode & stat.S_IWGRP and not self.shared
                and not _private_group(st.st_gid, self.uid)):
            return (f"writable by its group {_group_name(st.st_gid)} (mode {mode:o}; set "
                    "KCACHE_SHARED=1 to share a cache with that group, or chmod g-w)")
        return f"owned by another user ({_user_name(st.st_uid)})"


@lru_cache(maxsize=64)
def _private_group(gid: int, uid: int) -> bool:
    """True for a user-private group: named as the user, with no other members."""
    import grp  # user and group names: only for shared mode's check and messages
    import pwd
    try:
        group = grp.getgrgid(gid)
        user = pwd.getpwuid(uid)
    except KeyError:
        return False
    return group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}


def _user_name(uid: int) -> str:
    import pwd
    try:
        return f"{pwd.getpwuid(uid).pw_name}, uid {uid}"
    except KeyError:
        return f"uid {uid}"


def _group_name(gid: int) -> str:
    import grp
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid {gid}"

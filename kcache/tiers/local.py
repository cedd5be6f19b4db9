"""The local directory tier: a cache root (writable) or a read-only layer.

Implements :class:`kcache.tier.Tier` over the layout of :mod:`kcache.layout`, through the safe
primitives of :mod:`kcache.fsio`: entry files are opened ``O_NOFOLLOW | O_NONBLOCK`` inside
their shard folder's descriptor, must be regular files of a trusted owner no larger than the
caller's limit, and are judged by their first bytes before the rest is read. A local file
that must not be used raises :class:`~kcache.errors.CorruptEntry` (with ``.stat``, its
identity) rather than ``TierError``: the store quarantines it.

Beyond the protocol, the writable root offers what only a local folder can: publishing with
the old size returned (for the totals), removal that reports why a file was left, touch (the
LRU clock), quarantine, scans and sweeps of kcache's own temp and quarantine files.
"""
from __future__ import annotations

import errno
import os
import stat
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

from ..disk import fsio
from ..entry.format import (FORMAT_VERSION, MAGIC, MAX_FILE, PREFIX_SIZE, check_head, decode_header,
                            envelope_sum_holds, parse_prefix)
from ..errors import CorruptEntry
from ..disk.layout import (BUCKET, CACHEDIR_TAG, CODE, CODE_MEMO_RE, ENTRIES, LOCKS, QUARANTINE,
                           STATS, Layout, entry_key, entry_name, folder_listing, quarantine_name,
                           QUARANTINE_RE, scan, warn_symlink)
from ..disk.paths import RootDirs
from .tier import Blob
from ..warn import warn_once


GONE = "gone"
# Why clear/prune/remove_many left an entry file in place (``NotRemoved.reason`` starts so;
# kcache.store.reports), and how old a temp file must be to be swept.
TEMP_MAX_AGE = 3600.0  # seconds; a writer never takes that long between create and replace
BUSY = "busy (locked by another process)"
NOT_REGULAR = "not a regular file"
NEWER = "written by a newer kcache format version (never deleted)"
_HEADER_READ = 8192  # bytes read at once for a header: real headers are a few KiB  # quarantine: the file vanished or was replaced meanwhile (nothing to do)


class KnownBad(CorruptEntry):
    """A file this tier already found bad (same identity): not read, not counted again."""


class LocalTier:
    """A cache root or read-only layer at ``root``.

    ``writable``: False for a read-only layer (never written, touched or quarantined);
    ``trust``: :class:`kcache.fsio.Trust`; ``file_mode``/``dir_mode``: permission bits of
    what it creates (0600/0700, or 0660/02770 in shared mode)."""

    backfill = False  # a layer is as fast as the root itself: a hit there is not copied

    def __init__(self, root: Path, *, writable: bool, trust: fsio.Trust,
                 file_mode: int = 0o600, dir_mode: int = 0o700):
        self.layout = Layout(root)
        self.root = self.layout.root
        self.name = str(root)
        self.kind = "local" if writable else "layer"
        self.writable = writable
        self.trust = trust
        self.file_mode = file_mode
        self.dir_mode = dir_mode
        self._bad: set[tuple] = set()  # identities of files found bad (layers: never re-read)
        self.dirs = RootDirs(self.root, dir_mode)  # every folder below the root, by descriptor
        self._touch_ok = writable
        # key -> when it was last read: a hit writes nothing (its use is recorded in memory and
        # written with the counters, flush_touches), so a hit is one open and one read
        self._touched: dict[str, float] = {}
        self._touched_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LocalTier({self.name!r}, {self.kind})"

    # -- trust ---------------------------------------------------------------------------------
    def trust_problem(self) -> str | None:
        """Why this root (or layer) must not be used, or None. Checks the root (following a
        symlink: the root may be one), then ``v1`` and ``v1/entries`` without following,
        each only if it exists: ownership and write permission (:class:`kcache.fsio.Trust`)."""
        checks = (("", f"the cache folder {self.root}"), (BUCKET, f"{self.layout.bucket}"),
                  (ENTRIES, f"{self.layout.entries}"))
        for rel, what in checks:
            try:
                if rel:
                    parent, _, name = rel.rpartition("/")
                    st = fsio.lstat_at(name, self.dirs.folder(parent))
                else:
                    st = os.stat(self.root)
            except (FileNotFoundError, NotADirectoryError):
                return None  # created by us, with our modes, when first written
            except OSError as exc:
                return f"{what} cannot be examined: {exc.strerror or exc}"
            if stat.S_ISLNK(st.st_mode):
                return f"{what} is a symlink (kcache never follows a symlink out of its root)"
            problem = self.trust.folder_problem(st, what)
            if problem:
                return problem
        return None

    # -- the tier protocol ---------------------------------------------------------------------
    def read(self, key: str, limit: int, *, touch: bool = False, fresh: bool = False,
             recheck: bool = True) -> Blob | None:
        """The entry file of ``key`` (None when absent). ``touch``: record the use (the LRU
        clock: the file's mtime is set to the time of the read by :meth:`flush_touches`, which
        the store runs with its counters, at most a second later, and before any eviction or
        prune; a failure is warned once and stops touching). ``recheck=False``: a miss is not
        looked for again through the folders walked afresh (:meth:`_open_entry`), for a read
        that is followed, on a miss, by one that does. Raises CorruptEntry (``.stat`` set) for
        a file that must not be used, KnownBad for one already found bad (unless ``fresh``:
        verify reads every file again to say what is wrong with it), OSError when
        unreadable."""
        try:
            fd, st = self._open_entry(key, limit, None if fresh else self._check_known, recheck)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            data = fsio.read_checked(fd, st, PREFIX_SIZE, check_head)
        finally:
            os.close(fd)
        if touch and self._touch_ok:
            with self._touched_lock:
                self._touched[key] = time.time()
        return Blob(data, identity(st), st.st_mtime)

    def _open_entry(self, key: str, limit: int, check_stat=None,
                    recheck: bool = True) -> tuple[int, os.stat_result]:
        """:func:`kcache.fsio.open_regular` of ``key``'s entry file through its shard
        folder's descriptor. A miss (FileNotFoundError) checks the folders' descriptors
        (:meth:`RootDirs.check`: another process may have deleted and recreated them) and
        tries once more, unless not ``recheck``; a symlinked folder on the way is a miss
        (warned once)."""
        rel = f"{ENTRIES}/{key[:2]}"
        try:
            return fsio.open_regular(f"{key}.kce", limit, dir_fd=self.dirs.folder(rel),
                                     trust=self.trust, check_stat=check_stat)
        except (FileNotFoundError, NotADirectoryError):
            # The check costs a stat of each folder on the way: more than the miss itself,
            # and paid by every hit from a read-only layer behind an empty root.
            if not recheck or not self.dirs.check(rel):
                raise
        except OSError as exc:
            self._symlinked_shard(key, exc)
        try:  # once more, through descriptors walked again
            return fsio.open_regular(f"{key}.kce", limit, dir_fd=self.dirs.folder(rel),
                                     trust=self.trust, check_stat=check_stat)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            self._symlinked_shard(key, exc)

    def _symlinked_shard(self, key: str, exc: OSError):
        """Re-raise ``exc``; a symlinked folder on the way (ELOOP) as a miss, warned once."""
        if exc.errno != errno.ELOOP or isinstance(exc, CorruptEntry):
            raise exc
        warn_symlink(self.layout.entries / key[:2])
        raise FileNotFoundError(errno.ENOENT, "a symlink, never followed",
                                str(self.layout.entry(key))) from None

    def flush_touches(self) -> None:
        """Write the uses :meth:`read` recorded: each entry's mtime (and atime) set to the time
        of its last read, through its shard folder's descriptor, never following a symlink.
        An entry removed or replaced meanwhile is skipped or touched as it is now (either way
        it was just used). A failure is warned once and stops touching."""
        with self._touched_lock:
            touched, self._touched = self._touched, {}
        for key, when in touched.items():
            if not self._touch_ok:
                return
            try:
                os.utime(f"{key}.kce", (when, when), dir_fd=self.dirs.folder(f"{ENTRIES}/{key[:2]}"),
                         follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                continue  # removed meanwhile: nothing to record
            except OSError as exc:
                self._touch_ok = False
                warn_once("touch", f"kcache: cannot record use of cache entries in {self.root} "
                          f"({exc}); LRU eviction will be approximate")

    def read_header(self, key: str, limit: int) -> tuple[dict, os.stat_result]:
        """The checked header of ``key``'s entry and the file's fstat, reading the prefix and
        header only (never the body; one read for a header under 8 KiB). Raises
        FileNotFoundError, CorruptEntry, NewerFormat, OSError."""
        fd, st = self._open_entry(key, limit)
        try:
            head = fsio.read_upto(fd, min(st.st_size, _HEADER_READ))
            hlen, _blen, _sum = parse_prefix(head[:PREFIX_SIZE], st.st_size)
            if PREFIX_SIZE + hlen > len(head):
                head += fsio.read_upto(fd, PREFIX_SIZE + hlen - len(head))
            return decode_header(head, key, st.st_size), st
        finally:
            os.close(fd)

    def _check_known(self, st: os.stat_result) -> None:
        if self._bad and identity(st) in self._bad:
            raise KnownBad("already found bad", "invalid")

    def mark_bad(self, ident: tuple | None) -> None:
        """Remember a bad file (by identity) so it is not read again while unchanged."""
        if ident is not None:
            self._bad.add(ident)

    def write(self, key: str, data: bytes) -> None:
        self.publish(key, data)

    def remove(self, key: str) -> bool:
        return isinstance(self.unlink(key), int)

    def keys(self) -> Iterator[str]:
        return (key for key, _path, _st in scan(self.layout))

    def close(self) -> None:
        pass

    # -- the writable root -----------------------------------------------------------------------
    def publish(self, key: str, data: bytes) -> int | None:
        """Atomically publish ``data`` as ``key``'s entry; returns the size of the regular file
        it replaced (None if there was none). Raises OSError: EISDIR/ENOTDIR/ELOOP when a
        folder, FIFO or symlink has the entry's name (a fault of that key only)."""
        shard_fd = self._shard_fd(key[:2], create=True)
        name = entry_name(key)
        try:
            old = fsio.lstat_at(name, shard_fd)
        except FileNotFoundError:
            old = None
        if old is not None and not stat.S_ISREG(old.st_mode):
            raise OSError(errno.EISDIR if stat.S_ISDIR(old.st_mode) else errno.EEXIST,
                          f"{NOT_REGULAR} has the entry's name", str(self.layout.entry(key)))
        fsio.publish(shard_fd, name, data, self.file_mode)
        return old.st_size if old is not None else None

    def _shard_fd(self, shard: str, *, create: bool = False) -> int:
        """Borrowed descriptor (kept by :attr:`dirs`, never closed by the caller) of entry
        shard folder ``shard``, checked first (a writer never writes through a folder that
        was swapped), created when asked. OSError (ELOOP for a symlinked shard: never
        followed)."""
        rel = f"{ENTRIES}/{shard}"
        self.dirs.check(rel)
        try:
            try:
                return self.dirs.folder(rel, create=create)
            except FileNotFoundError:
                if not create:
                    raise
                self.ensure_entries()
                return self.dirs.folder(rel, create=True)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                warn_symlink(self.layout.entries / shard)
            raise

    def ensure_entries(self) -> None:
        """Create the root, ``v1`` and ``v1/entries`` (modes exact), the CACHEDIR.TAG, and
        check them; also the locks, stats and quarantine folders where that works. Raises
        OSError; a symlink among the first three is ELOOP."""
        self.dirs.check()  # a folder deleted or swapped meanwhile is walked to again
        self.dirs.folder(ENTRIES, create=True)  # ELOOP/ENOTDIR when not a real folder
        for rel in (LOCKS, STATS, QUARANTINE):
            try:  # each feature checks its folder when it uses it: a fault there is its own
                self.dirs.folder(rel, create=True)
            except OSError:
                pass
        root_fd = self.dirs.folder("")
        try:
            fsio.lstat_at(self.layout.tag.name, root_fd)
        except FileNotFoundError:
            try:
                fsio.publish(root_fd, self.layout.tag.name, CACHEDIR_TAG.encode(), self.file_mode,
                             fsync=False)
            except OSError:
                pass  # only a hint for backup tools
        except OSError:
            pass

    def ensure_folder(self, path: Path) -> None:
        """Create a folder of the bucket (locks, stats, quarantine, or a lock shard below
        locks) if absent and check that it is a real folder, through :attr:`dirs`. Raises
        OSError (ELOOP for a symlink, ENOTDIR for a file)."""
        rel = Path(path).relative_to(self.root).as_posix()
        self.dirs.check(rel)
        try:
            try:
                self.dirs.folder(rel, create=True)
            except FileNotFoundError:
                self.ensure_entries()
                self.dirs.folder(rel, create=True)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                warn_symlink(Path(path))
            raise

    def entry_stat(self, key: str) -> os.stat_result | None:
        """``lstat`` of ``key``'s entry path (None when absent or unreachable)."""
        try:
            return fsio.lstat_at(entry_name(key), self.dirs.folder(f"{ENTRIES}/{key[:2]}"))
        except OSError:
            return None

    def unlink(self, key: str) -> int | str | None:
        """Remove ``key``'s entry file: its size (bytes); None when absent; else why it was
        left (:data:`NOT_REGULAR`, :data:`NEWER`, or the OS error text). The caller holds
        the key's lock. Never removes through a symlinked shard."""
        try:
            shard_fd = self._shard_fd(key[:2])
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            return os_reason(exc)
        name = entry_name(key)
        try:
            st = fsio.lstat_at(name, shard_fd)
            if not stat.S_ISREG(st.st_mode):
                return NOT_REGULAR  # never counted in the totals; verify(fix=True) moves it
            if _is_newer(name, shard_fd):
                return NEWER
            os.unlink(name, dir_fd=shard_fd)
            return st.st_size
        except FileNotFoundError:
            return None
        except OSError as exc:
            return os_reason(exc)

    def newer_files(self, first: str | None = None) -> list[tuple[str, Path]]:
        """(key, path) of every entry file (keys starting with ``first`` if given) written by
        a newer kcache format: its version field says newer and its checksum holds (a flipped
        version bit is corruption, not a newer format). Reads the first 10 bytes of each
        entry file through its shard's descriptor; only a newer one is read whole."""
        found = []
        for shard in self.layout.shard_dirs(first[:2] if first and len(first) >= 2 else None,
                                            self.dirs):
            try:
                shard_fd = self.dirs.folder(f"{ENTRIES}/{shard}")
                names = os.listdir(shard_fd)
            except OSError:
                continue
            for name in names:
                key = entry_key(shard, name)
                if (key is not None and (first is None or key.startswith(first))
                        and _is_newer(name, shard_fd) and self._newer_whole(name, shard_fd)):
                    found.append((key, self.layout.entries / shard / name))
        return found

    def _newer_whole(self, name: str, shard_fd: int) -> bool:
        """True when ``name``, whose first bytes say a newer format version, has a whole
        envelope (its trailing checksum holds, as :func:`kcache.entry.decode` requires before
        it says "newer"): such a file is a newer kcache's, never judged or deleted here. Read
        in chunks (a multi-GiB file costs time, not memory)."""
        try:
            fd, st = fsio.open_regular(name, MAX_FILE, dir_fd=shard_fd)
        except (OSError, CorruptEntry):
            return False
        try:
            return envelope_sum_holds(fd, st.st_size)
        except OSError:
            return False
        finally:
            os.close(fd)

    def is_newer(self, key: str) -> bool:
        """True when ``key``'s entry file says a newer format version (never deleted)."""
        try:
            shard_fd = self._shard_fd(key[:2])
        except OSError:
            return False
        return _is_newer(entry_name(key), shard_fd)

    def quarantine(self, key: str, st: os.stat_result | None) -> str | None:
        """Move ``key``'s entry file (whatever it is: file, folder, FIFO, symlink) into
        ``v1/quarantine/`` under a name no other move takes. ``st``: the identity it was found
        bad with (a file replaced meanwhile is left). Returns None when moved, :data:`GONE`
        when it vanished or was replaced, else why it was left. The caller holds the lock."""
        try:
            self.ensure_folder(self.layout.quarantine)
            shard_fd = self._shard_fd(key[:2])
        except OSError as exc:
            return f"cannot use {self.layout.quarantine}: {os_reason(exc)}"
        try:
            name = entry_name(key)
            now = fsio.lstat_at(name, shard_fd)
            if st is not None and (now.st_ino, now.st_size) != (st.st_ino, st.st_size):
                return GONE  # replaced meanwhile by a good entry
            q_fd = self.dirs.folder(QUARANTINE)
            os.rename(name, quarantine_name(key), src_dir_fd=shard_fd, dst_dir_fd=q_fd)
            return None
        except FileNotFoundError:
            return GONE
        except OSError as exc:
            return f"cannot move it: {os_reason(exc)}"

    # -- scans and sweeps ------------------------------------------------------------------------
    def entry_path(self, key: str) -> Path:
        """The path of ``key``'s entry file (what messages and listings name)."""
        return self.layout.entry(key)

    def scan(self, first: str | None = None, *, regular_only: bool = True):
        """(key, path, lstat) of every entry file (see :func:`kcache.layout.scan`)."""
        return scan(self.layout, first, regular_only=regular_only, dirs=self.dirs)

    def temp_files(self) -> Iterator[tuple[Path, str, os.stat_result]]:
        """kcache's own temp files (:data:`kcache.fsio.TEMP_RE`) owned by this user, in the
        entry shards, the stats folder and the root: (folder, name, lstat), each listed
        through :attr:`dirs`."""
        folders = [f"{ENTRIES}/{s}" for s in self.layout.shard_dirs(dirs=self.dirs)]
        for rel in folders + [STATS, BUCKET, ""]:
            for name, st in folder_listing(self.dirs, rel):
                if (fsio.TEMP_RE.fullmatch(name) and stat.S_ISREG(st.st_mode)
                        and st.st_uid == self.trust.uid):
                    yield self.root / rel, name, st

    def sweep_temp(self, max_age: float, *, dry_run: bool = False) -> tuple[int, int]:
        """Remove kcache's temp files older than ``max_age`` seconds (leftovers of killed
        writers: no writer takes that long); returns (files, bytes) removed (or that would
        be, with ``dry_run``)."""
        return self._sweep(self.temp_files(), max_age, dry_run)

    def quarantined(self) -> Iterator[tuple[Path, str, os.stat_result]]:
        """Files in ``v1/quarantine/`` named as kcache names them, owned by this user (or
        its group in shared mode): (folder, name, lstat)."""
        for name, st in folder_listing(self.dirs, QUARANTINE):
            if QUARANTINE_RE.fullmatch(name) and (st.st_uid == self.trust.uid or self.trust.file_ok(st)):
                yield self.layout.quarantine, name, st

    def code_memos(self) -> Iterator[tuple[Path, str, os.stat_result]]:
        """Files in ``v1/code/`` (the code analyses kcache.dispatcher remembers for keys)
        named as kcache names them, owned by this user (or its group in shared mode): (folder,
        name, lstat)."""
        for name, st in folder_listing(self.dirs, CODE):
            if CODE_MEMO_RE.fullmatch(name) and stat.S_ISREG(st.st_mode) and \
                    (st.st_uid == self.trust.uid or self.trust.file_ok(st)):
                yield self.layout.code, name, st

    def remove_code_memos(self) -> tuple[int, int]:
        """Remove every file of :meth:`code_memos`; (files, bytes)."""
        return self._sweep(self.code_memos(), -1.0, False)

    def sweep_code_memos(self, max_age: float, *, dry_run: bool = False) -> tuple[int, int]:
        """Remove files of :meth:`code_memos` not rewritten for ``max_age`` seconds (a memo is
        rewritten only when a process made analyses it lacked: an old one is unused, or
        complete); (files, bytes) removed, or that would be with ``dry_run``."""
        return self._sweep(self.code_memos(), max_age, dry_run)

    def sweep_quarantine(self, max_age: float, *, dry_run: bool = False) -> tuple[int, int]:
        """Remove quarantined files older than ``max_age`` seconds; (files, bytes)."""
        return self._sweep(self.quarantined(), max_age, dry_run)

    def _sweep(self, found, max_age: float, dry_run: bool) -> tuple[int, int]:
        cutoff = time.time() - max_age
        n = size = 0
        by_folder: dict[str, list] = {}
        for folder, name, st in found:
            if st.st_mtime <= cutoff:
                rel = "" if folder == self.root else folder.relative_to(self.root).as_posix()
                by_folder.setdefault(rel, []).append((name, st))
        for rel, items in by_folder.items():
            try:
                fd = self.dirs.folder(rel)
            except OSError:
                continue
            for name, st in items:
                if not dry_run:
                    try:
                        now = fsio.lstat_at(name, fd)
                        if now.st_ino != st.st_ino or not stat.S_ISREG(now.st_mode):
                            continue
                        os.unlink(name, dir_fd=fd)
                    except OSError:
                        continue
                n += 1
                size += st.st_size
        return n, size


def files_and_bytes(found) -> tuple[int, int]:
    """(files, bytes) of ``(folder, name, lstat)`` items, as :meth:`LocalTier.quarantined`
    and :meth:`LocalTier.code_memos` list them."""
    n = size = 0
    for _folder, _name, st in found:
        n += 1
        size += st.st_size
    return n, size


def identity(st: os.stat_result | None) -> tuple | None:
    """What identifies a file's content for the negative cache and quarantine."""
    if st is None:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def os_reason(exc: OSError) -> str:
    """An OSError as short text: "Read-only file system (EROFS)"."""
    name = errno.errorcode.get(exc.errno or 0)
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text


def _is_newer(name: str, dir_fd: int) -> bool:
    """True if the file's envelope says a newer format version (checksum not verified: a
    corrupt version field is left for verify to quarantine)."""
    head = fsio.read_head(name, len(MAGIC) + 2, dir_fd=dir_fd)
    return (head is not None and head[:len(MAGIC)] == MAGIC and len(head) == len(MAGIC) + 2
            and int.from_bytes(head[len(MAGIC):], "big") > FORMAT_VERSION)


def probe_writable(root: str | os.PathLike) -> str | None:
    """Why nothing can be created in the cache root ``root``, or None if it can; writes
    nothing that stays. Used by :meth:`Store.check_writable` and ``kcache dir`` (which has no
    Store while a setting is bad).

    Probes the deepest existing folder of ``root/v1/entries``, ``root/v1``, ``root`` by
    creating and deleting a temp file (``.probe.*.tmp``, the name prune sweeps); for a root
    that does not exist yet, its nearest existing ancestor by creating and removing a temp
    directory (as creating the root would). A real write, because permission bits and
    ``os.access`` do not tell for the root user or on a read-only mount. Reasons returned
    (str): "<folder> is a file, not a directory (ENOTDIR)" (a root under a file),
    "Read-only file system (EROFS)", "Permission denied (EACCES)", "cannot create folders in
    <ancestor>: ..." (e.g. under /proc), "No space left on device (ENOSPC)" (no free block;
    ``os.statvfs``), "<folder>: <reason>" when a folder cannot be examined. Raises nothing."""
    root = Path(root)
    layout = Layout(root)
    inner = (layout.entries, layout.bucket)  # deepest first
    dirs = RootDirs(root)  # the probe file is made through descriptors (kcache.paths)
    rels = {layout.entries: ENTRIES, layout.bucket: BUCKET, root: ""}
    for d in (*inner, root, *root.parents):
        try:
            st = os.lstat(d) if d in inner else os.stat(d)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            return f"{d}: {os_reason(exc)}"
        if stat.S_ISLNK(st.st_mode):
            return f"{d} is a symlink, not a folder of the cache (ELOOP)"
        if not stat.S_ISDIR(st.st_mode):
            return f"{d} is a file, not a directory (ENOTDIR)"
        ours = d in rels
        try:
            if ours:
                fd = dirs.folder(rels[d])
                fsio.unlink_quietly(fsio.write_new(fd, "probe", b"", 0o600, fsync=False), fd)
                vfs = os.fstatvfs(fd)
            else:  # root missing: could it be created here?
                os.rmdir(tempfile.mkdtemp(dir=d, prefix=".kcache-probe."))
                vfs = os.statvfs(d)
        except OSError as exc:
            return os_reason(exc) if ours else f"cannot create folders in {d}: {os_reason(exc)}"
        free = vfs.f_bfree if os.geteuid() == 0 else vfs.f_bavail  # root may use reserved blocks
        if vfs.f_blocks and not free:
            return f"{os.strerror(errno.ENOSPC)} (ENOSPC)"
        return None
    return None  # not reached: "/" exists

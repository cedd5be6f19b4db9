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
import time
from pathlib import Path
from typing import Iterator

from . import fsio
from .entry import FORMAT_VERSION, MAGIC, PREFIX_SIZE, check_head, decode_header, parse_prefix
from .errors import CorruptEntry
from .layout import (CACHEDIR_TAG, QUARANTINE_RE, Layout, entry_key, entry_name, listing,
                     quarantine_name, scan, warn_symlink)
from .tier import Blob
from .warn import warn_once

from .prune import NEWER, NOT_REGULAR  # why removal left a file in place

GONE = "gone"
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
        self._entries = str(self.layout.entries)  # hot path: string paths, no pathlib
        self._shards_ok: set[str] = set()
        self._touch_ok = writable

    def __repr__(self) -> str:
        return f"LocalTier({self.name!r}, {self.kind})"

    # -- trust ---------------------------------------------------------------------------------
    def trust_problem(self) -> str | None:
        """Why this root (or layer) must not be used, or None. Checks the root (following a
        symlink: the root may be one), then ``v1`` and ``v1/entries`` without following,
        each only if it exists: ownership and write permission (:class:`kcache.fsio.Trust`)."""
        checks = ((self.root, True, f"the cache folder {self.root}"),
                  (self.layout.bucket, False, f"{self.layout.bucket}"),
                  (self.layout.entries, False, f"{self.layout.entries}"))
        for path, follow, what in checks:
            try:
                st = os.stat(path) if follow else os.lstat(path)
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
    def read(self, key: str, limit: int, *, touch: bool = False, fresh: bool = False) -> Blob | None:
        """The entry file of ``key`` (None when absent). ``touch``: record the use (the LRU
        clock: mtime set to now through the open descriptor; a failure is warned once and
        stops touching). Raises CorruptEntry (``.stat`` set) for a file that must not be
        used, KnownBad for one already found bad (unless ``fresh``: verify reads every file
        again to say what is wrong with it), OSError when unreadable."""
        shard = key[:2]
        if shard not in self._shards_ok and not self._shard_ok(shard):
            return None
        try:
            fd, st = fsio.open_regular(f"{self._entries}/{shard}/{key}.kce", limit, trust=self.trust,
                                       check_stat=None if fresh else self._check_known)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            data = fsio.read_checked(fd, st, PREFIX_SIZE, check_head)
            if touch and self._touch_ok:
                self._touch_fd(fd)
        finally:
            os.close(fd)
        return Blob(data, identity(st), st.st_mtime)

    def _shard_ok(self, shard: str) -> bool:
        """True when shard folder ``shard`` is a real folder (remembered for the process: a
        folder of a trusted root changes only by its owner's hand); a symlinked one is
        warned about and never read through; an absent one is a miss."""
        path = f"{self._entries}/{shard}"
        try:
            st = os.lstat(path)
        except OSError:
            return False
        if stat.S_ISLNK(st.st_mode):
            warn_symlink(Path(path))
            return False
        if stat.S_ISDIR(st.st_mode):
            self._shards_ok.add(shard)
            return True
        return False

    def _touch_fd(self, fd: int) -> None:
        try:
            os.utime(fd)
        except OSError as exc:
            self._touch_ok = False
            warn_once("touch", f"kcache: cannot record use of cache entries in {self.root} "
                      f"({exc}); LRU eviction will be approximate")

    def read_header(self, key: str, limit: int) -> tuple[dict, os.stat_result]:
        """The checked header of ``key``'s entry and the file's fstat, reading the prefix and
        header only (never the body; one read for a header under 8 KiB). Raises
        FileNotFoundError, CorruptEntry, NewerFormat, OSError."""
        shard = key[:2]
        if shard not in self._shards_ok and not self._shard_ok(shard):
            raise FileNotFoundError(errno.ENOENT, "no such entry", str(self.layout.entry(key)))
        fd, st = fsio.open_regular(f"{self._entries}/{shard}/{key}.kce", limit, trust=self.trust)
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
        try:
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
        finally:
            os.close(shard_fd)

    def _shard_fd(self, shard: str, *, create: bool = False) -> int:
        """Descriptor of entry shard folder ``shard``, created when asked. OSError (ELOOP for
        a symlinked shard: never followed)."""
        if create:
            try:
                fsio.make_dir(self.layout.entries / shard, self.dir_mode)
            except FileNotFoundError:
                self.ensure_entries()
                fsio.make_dir(self.layout.entries / shard, self.dir_mode)
        try:
            return fsio.open_dir(self.layout.entries / shard)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                warn_symlink(self.layout.entries / shard)
            raise

    def ensure_entries(self) -> None:
        """Create the root, ``v1`` and ``v1/entries`` (modes exact), the CACHEDIR.TAG, and
        check them; also the locks, stats and quarantine folders where that works. Raises
        OSError; a symlink among the first three is ELOOP."""
        root = self.root
        if not root.exists():
            root.mkdir(parents=True, exist_ok=True, mode=self.dir_mode)
            os.chmod(root, self.dir_mode)  # mkdir's mode is masked by the umask
        for d in (self.layout.bucket, self.layout.entries):
            fsio.make_dir(d, self.dir_mode)
            os.close(fsio.open_dir(d))  # ELOOP/ENOTDIR when not a real folder
        for d in (self.layout.locks, self.layout.stats, self.layout.quarantine):
            try:  # each feature checks its folder when it uses it: a fault there is its own
                fsio.make_dir(d, self.dir_mode)
            except OSError:
                pass
        if not os.path.lexists(self.layout.tag):
            try:
                root_fd = fsio.open_dir(root)
            except OSError:
                return
            try:
                fsio.publish(root_fd, self.layout.tag.name, CACHEDIR_TAG.encode(), self.file_mode,
                             fsync=False)
            except OSError:
                pass  # only a hint for backup tools
            finally:
                os.close(root_fd)

    def ensure_folder(self, path: Path) -> None:
        """Create a folder of the bucket (locks, stats, quarantine) if absent and check that it
        is a real folder. Raises OSError (ELOOP for a symlink, ENOTDIR for a file)."""
        try:
            fsio.make_dir(path, self.dir_mode)
        except FileNotFoundError:
            self.ensure_entries()
            fsio.make_dir(path, self.dir_mode)
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            warn_symlink(path)
            raise OSError(errno.ELOOP, "a symlink, never followed", str(path))
        if not stat.S_ISDIR(st.st_mode):
            raise OSError(errno.ENOTDIR, "not a folder", str(path))

    def entry_stat(self, key: str) -> os.stat_result | None:
        """``lstat`` of ``key``'s entry path (None when absent)."""
        try:
            return os.lstat(self.layout.entry(key))
        except (FileNotFoundError, NotADirectoryError):
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
        finally:
            os.close(shard_fd)

    def newer_files(self, first: str | None = None) -> list[tuple[str, Path]]:
        """(key, path) of every entry file (keys starting with ``first`` if given) written by
        a newer kcache format: its version field says newer and its checksum holds (a flipped
        version bit is corruption, not a newer format). Reads the first 10 bytes of each
        entry file through its shard's descriptor; only a newer one is read whole."""
        found = []
        for shard in self.layout.shard_dirs(first[:2] if first and len(first) >= 2 else None):
            try:
                shard_fd = fsio.open_dir(self.layout.entries / shard)
            except OSError:
                continue
            try:
                for name in os.listdir(shard_fd):
                    key = entry_key(shard, name)
                    if (key is not None and (first is None or key.startswith(first))
                            and _is_newer(name, shard_fd) and self._newer_whole(key, name, shard_fd)):
                        found.append((key, self.layout.entries / shard / name))
            finally:
                os.close(shard_fd)
        return found

    def _newer_whole(self, key: str, name: str, shard_fd: int) -> bool:
        from .entry import MAX_FILE, decode
        from .errors import NewerFormat
        try:
            data, _st = fsio.read_regular(name, MAX_FILE, dir_fd=shard_fd)
            decode(data, key)
        except NewerFormat:
            return True
        except (OSError, CorruptEntry):
            return False
        return False

    def is_newer(self, key: str) -> bool:
        """True when ``key``'s entry file says a newer format version (never deleted)."""
        try:
            shard_fd = self._shard_fd(key[:2])
        except OSError:
            return False
        try:
            return _is_newer(entry_name(key), shard_fd)
        finally:
            os.close(shard_fd)

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
        q_fd = None
        try:
            name = entry_name(key)
            now = fsio.lstat_at(name, shard_fd)
            if st is not None and (now.st_ino, now.st_size) != (st.st_ino, st.st_size):
                return GONE  # replaced meanwhile by a good entry
            q_fd = fsio.open_dir(self.layout.quarantine)
            os.rename(name, quarantine_name(key), src_dir_fd=shard_fd, dst_dir_fd=q_fd)
            return None
        except FileNotFoundError:
            return GONE
        except OSError as exc:
            return f"cannot move it: {os_reason(exc)}"
        finally:
            os.close(shard_fd)
            if q_fd is not None:
                os.close(q_fd)

    # -- scans and sweeps ------------------------------------------------------------------------
    def scan(self, first: str | None = None, *, regular_only: bool = True):
        """(key, path, lstat) of every entry file (see :func:`kcache.layout.scan`)."""
        return scan(self.layout, first, regular_only=regular_only)

    def temp_files(self) -> Iterator[tuple[Path, str, os.stat_result]]:
        """kcache's own temp files (:data:`kcache.fsio.TEMP_RE`) owned by this user, in the
        entry shards, the stats folder and the root: (folder, name, lstat)."""
        folders = [self.layout.entries / s for s in self.layout.shard_dirs()]
        for folder in folders + [self.layout.stats, self.layout.bucket, self.root]:
            for name, st in listing(folder):
                if (fsio.TEMP_RE.fullmatch(name) and stat.S_ISREG(st.st_mode)
                        and st.st_uid == self.trust.uid):
                    yield folder, name, st

    def sweep_temp(self, max_age: float, *, dry_run: bool = False) -> tuple[int, int]:
        """Remove kcache's temp files older than ``max_age`` seconds (leftovers of killed
        writers: no writer takes that long); returns (files, bytes) removed (or that would
        be, with ``dry_run``)."""
        return self._sweep(self.temp_files(), max_age, dry_run)

    def quarantined(self) -> Iterator[tuple[Path, str, os.stat_result]]:
        """Files in ``v1/quarantine/`` named as kcache names them, owned by this user (or
        its group in shared mode): (folder, name, lstat)."""
        folder = self.layout.quarantine
        for name, st in listing(folder):
            if QUARANTINE_RE.fullmatch(name) and (st.st_uid == self.trust.uid or self.trust.file_ok(st)):
                yield folder, name, st

    def sweep_quarantine(self, max_age: float, *, dry_run: bool = False) -> tuple[int, int]:
        """Remove quarantined files older than ``max_age`` seconds; (files, bytes)."""
        return self._sweep(self.quarantined(), max_age, dry_run)

    @staticmethod
    def _sweep(found, max_age: float, dry_run: bool) -> tuple[int, int]:
        cutoff = time.time() - max_age
        n = size = 0
        by_folder: dict[Path, list] = {}
        for folder, name, st in found:
            if st.st_mtime <= cutoff:
                by_folder.setdefault(folder, []).append((name, st))
        for folder, items in by_folder.items():
            try:
                fd = fsio.open_dir(folder)
            except OSError:
                continue
            try:
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
            finally:
                os.close(fd)
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

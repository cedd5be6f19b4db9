"""The store: content-addressed entries on disk, shared safely by many processes.

Invariants (see docs/store.md):

* An entry file is published whole: written to a temp file in its own shard directory,
  fsync'ed, then ``os.replace``'d. Readers open the file once and read that inode, so a
  concurrent replace or unlink never gives them a torn entry. Readers take no lock.
* put/remove/evict/quarantine of a key hold that key's lock and update the totals (entries,
  bytes) from what they saw under it, so totals equal the files the store wrote (files copied
  in behind its back are counted by ``recount()`` only); totals never go below 0.
* Any defect in an entry makes it a miss; the file goes to ``v1/quarantine/`` (never deleted),
  ``corrupt`` +1, warned once. A newer-format entry is reported and left alone.
* A read-only, missing or full root never raises into the caller: gets keep working, puts,
  touches and stats writes become no-ops after one warning.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from . import atomic
from . import entry as fmt
from .config import Settings, resolve
from .entry import Entry, EntryInfo
from .errors import CorruptEntry, KcacheError, LockTimeout, NewerFormat
from .keys import check_key
from .layout import CACHEDIR_TAG, Layout, scan
from .locks import KeyLocks, try_global
from .prune import (BUSY, NEWER, NOT_REGULAR, NotRemoved, PruneReport, RemoveReport, VerifyReport,
                    plan_prune, sweep_locks, sweep_temp)
from .stats import COUNTERS, SHARDS, StatsBook, shard_of
from .warn import warn_once

EVICT_TARGET = 0.9  # a put crossing max_size evicts down to this fraction of it
DELTA_BATCH = 64  # removals of clear/prune/evict/remove_many between writes of the totals
_TOTALS_TTL = 1.0  # seconds an estimate of other shards' totals is trusted by put
TOUCH_RESOLUTION = 60.0  # seconds; LRU needs no finer clock than this
_GONE = "gone"  # _quarantine: the file vanished or was replaced meanwhile (nothing to do)
_ROOT_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR}


def os_reason(exc: OSError) -> str:
    """An OSError as short text: "Read-only file system (EROFS)"."""
    name = errno.errorcode.get(exc.errno or 0)
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text


@dataclasses.dataclass
class Stats:
    """Persistent counters of a cache root. Times in seconds, sizes in bytes."""

    hits: int = 0
    misses: int = 0
    compiles: int = 0
    puts: int = 0
    evictions: int = 0
    corrupt: int = 0
    lock_waits: int = 0
    lock_timeouts: int = 0
    bytes_written: int = 0
    compile_seconds: float = 0.0
    seconds_saved: float = 0.0
    entries: int = 0
    bytes: int = 0
    max_size: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __getitem__(self, name: str) -> Any:
        return getattr(self, name)


class Store:
    """A kernel cache rooted at ``root`` (see kcache.config.resolve for defaults).

    ``readonly_roots``: extra roots consulted after ``root`` and never written;
    ``max_size``: size cap in bytes (or size text); ``lock_timeout``: seconds. Raises
    ConfigError for bad settings. Nothing else in the store raises for a broken cache."""

    def __init__(self, root=None, *, readonly_roots=None, max_size=None, lock_timeout=None):
        self.settings: Settings = resolve(root, max_size, readonly_roots, lock_timeout)
        self.root: Path = self.settings.root
        self.readonly_roots: tuple[Path, ...] = self.settings.readonly_roots
        self.max_size: int = self.settings.max_size
        self.lock_timeout: float = self.settings.lock_timeout
        self.disabled: bool = self.settings.disabled
        self.writable: bool = True  # False once a write failed or check_writable() found a problem
        self.write_problem: str | None = None  # why writable is False
        self._write_exc: OSError | None = None
        self._touch_ok = True
        self._ready = False
        shared = self.settings.shared
        self._dir_mode = 0o2770 if shared else 0o700
        self._file_mode = 0o660 if shared else 0o600
        self._layout = Layout(self.root)
        self._ro_layouts = tuple(Layout(r) for r in self.readonly_roots)
        self._stats = StatsBook(self._layout.stats, self._file_mode, self._ensure_root, self._fail,
                                self._layout_gone)
        self._locks = KeyLocks(self._layout.locks, self.lock_timeout, self._file_mode,
                               self._count, self._lock_error)
        self._totals: dict[int, tuple[int, int]] = {}
        self._totals_at = 0.0
        self._ro_corrupt_seen: set[tuple[str, int]] = set()

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r}, readonly_roots={[str(r) for r in self.readonly_roots]}, max_size={self.max_size})"

    # -- failure handling -------------------------------------------------------
    def _fail(self, exc: OSError) -> None:
        """The writable root proved read-only/missing/full: stop writing, warn once. The text
        suits a program compiling kernels and a maintenance command alike."""
        self._mark_unwritable(os_reason(exc), exc)
        warn_once("unwritable", f"kcache: cannot write to the cache at {self.root}: {self.write_problem}; "
                  "this process writes nothing more there (new kernels still compile, uncached). "
                  "Point KCACHE_DIR at a writable directory with free space, or set KCACHE_DISABLE=1.")

    def _mark_unwritable(self, reason: str, exc: OSError | None = None) -> None:
        self.writable = False
        self.write_problem = reason
        self._write_exc = exc

    def _layout_gone(self) -> None:
        self._ready = False  # e.g. the root was deleted while we run: recreate on next write

    def _lock_error(self, exc: OSError) -> None:
        if not self.writable:
            return  # already warned that the root cannot be written
        if (exc.errno in _ROOT_ERRNOS or isinstance(exc, NotADirectoryError)) and self.check_writable():
            self._fail(exc)  # the whole root is unwritable, not only its lock folder: say so
            return
        warn_once("locks", f"kcache: cannot create lock files under {self._layout.locks} ({exc}); "
                  "continuing without locks (concurrent processes may compile the same kernel twice)")

    def check_writable(self) -> str | None:
        """Why the writable root cannot be written (str), or None if it can; works before any
        write and writes nothing that stays. Raises nothing.

        The probe is :func:`probe_writable` (a temp file created and deleted in the deepest
        existing folder of ``root/v1/entries``; for a missing root, a temp directory in its
        nearest existing ancestor), so a root under a file ("... is a file, not a directory
        (ENOTDIR)"), under /proc, on a read-only mount (EROFS), without permission (EACCES)
        or on a full file system (ENOSPC) is found even as root user. A problem found sets
        ``writable`` False and ``write_problem`` (no warning: the caller asked). Also returns
        the reason of an earlier write failure of this Store."""
        if self.write_problem is not None:
            return self.write_problem
        problem = probe_writable(self.root)
        if problem is not None:
            self._mark_unwritable(problem)
        return problem

    def _ensure_root(self) -> bool:
        """Create root (0700, or 02770 when shared), CACHEDIR.TAG and the bucket; False if the
        root cannot be written, or when the store is disabled (KCACHE_DISABLE: nothing on disk
        is touched, not even counters)."""
        if self.disabled:
            return False
        if self._ready:
            return True
        if not self.writable:
            return False
        try:
            created = not self.root.exists()
            self.root.mkdir(parents=True, exist_ok=True, mode=self._dir_mode)
            if created:
                os.chmod(self.root, self._dir_mode)  # mkdir's mode is masked by the umask
            for d in (self._layout.bucket, self._layout.entries, self._layout.locks,
                      self._layout.stats, self._layout.quarantine):
                self._mkdir(d)
            if not self._layout.tag.exists():
                self._write_atomic(self._layout.tag, CACHEDIR_TAG.encode())
        except OSError as exc:
            self._fail(exc)
            return False
        self._ready = True
        return True

    def _mkdir(self, d: Path) -> None:
        try:
            os.mkdir(d, self._dir_mode)
        except FileExistsError:
            return
        os.chmod(d, self._dir_mode)

    def _write_atomic(self, path: Path, data: bytes) -> None:
        atomic.write_atomic(path, data, mode=self._file_mode)

    def _write_temp(self, path: Path, data: bytes) -> str:
        return atomic.write_temp(path, data, mode=self._file_mode)

    def _count(self, key: str | None, now: bool = False, hit_key: str | None = None, **counters) -> None:
        shard = shard_of(key) if key else os.getpid() % SHARDS
        self._stats.add(shard, now=now, hit_key=hit_key, **counters)

    # -- reading ------------------------------------------------------------------
    def _layouts(self, readonly: bool = True) -> Iterator[tuple[Layout, bool]]:
        yield self._layout, False
        if readonly:
            for lay in self._ro_layouts:
                yield lay, True

    @staticmethod
    def _read_file(path: Path, touch: Callable[[int, os.stat_result], None] | None = None,
                   check: Callable[[bytes], Any] | None = None) -> tuple[bytes, os.stat_result, Any]:
        """Read the whole file through one descriptor, so a concurrent replace or unlink never
        mixes two files. ``check(data)`` runs while the descriptor is open and, if it
        succeeds, ``touch(fd, stat)`` (one path lookup per hit, not two). FileNotFoundError if
        absent; CorruptEntry if larger than any valid entry (checked before allocating)."""
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if st.st_size > fmt.MAX_FILE:
                raise CorruptEntry(f"file too large: {st.st_size} bytes")
            chunks, want = [], st.st_size + 1  # +1: notice a file that grew
            while want > 0:
                chunk = os.read(fd, want)
                if not chunk:
                    break
                chunks.append(chunk)
                want -= len(chunk)
            data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            try:
                result = check(data) if check is not None else None
            except CorruptEntry as exc:
                exc.stat = st  # the identity of the bad file, for a race-free quarantine
                raise
            if touch is not None:
                touch(fd, st)
            return data, st, result
        finally:
            os.close(fd)

    def _lookup(self, key: str, quarantine: bool = True, touch: bool = False) -> tuple[dict, Entry, Layout, bool, Path] | None:
        """First valid entry for ``key`` across the roots, quarantining defects on the way;
        ``touch`` records the use of a hit in the writable root."""
        for lay, ro in self._layouts():
            path = lay.entry(key)
            st = None
            try:
                data, st, (header, ent) = self._read_file(
                    path, self._touch if touch and not ro else None, lambda d: fmt.decode(d, key))
                return header, ent, lay, ro, path
            except (FileNotFoundError, NotADirectoryError):
                continue
            except NewerFormat as exc:
                warn_once("newer", f"kcache: {path} was written by a newer kcache ({exc}); left untouched, treated as a miss")
            except CorruptEntry as exc:
                if quarantine:
                    self._quarantine(key, path, ro, str(exc), getattr(exc, "stat", None) or st)
            except OSError as exc:  # unreadable (permissions, I/O error): a miss
                warn_once("unreadable", f"kcache: cannot read {path} ({exc}); treated as a miss")
        return None

    def _quarantine(self, key: str, path: Path, ro: bool, reason: str, st: os.stat_result | None) -> str | None:
        """Move a defective entry to quarantine (writable root only), count it, warn once
        (saying truthfully whether it was moved). Returns None when moved, ``_GONE`` when the
        file vanished or was replaced meanwhile, else why it was left in place."""
        why = self._move_to_quarantine(key, path, ro, st)
        if why is None:
            fate = f"moved to {self._layout.quarantine}"
        elif why == _GONE:
            fate = "already replaced or removed"
        else:
            fate = f"left in place: {why}"
        warn_once("corrupt", f"kcache: corrupt cache entry {path} ({reason}); treated as a miss, {fate}")
        return why

    def _move_to_quarantine(self, key: str, path: Path, ro: bool, st: os.stat_result | None) -> str | None:
        if ro or self.disabled:
            ident = (str(path), st.st_ino if st else 0)
            if ident not in self._ro_corrupt_seen:
                self._ro_corrupt_seen.add(ident)
                self._count(key, now=True, corrupt=1)
            return "read-only layer" if ro else "kcache is disabled (KCACHE_DISABLE)"
        if not self.writable or not self._ensure_root():
            return f"cache root not writable: {self.write_problem}"
        with self._locks.hold(key, blocking=False) as held:
            if not held and self.write_problem is None:
                return BUSY  # another process is writing this key; it will replace the file
            try:
                now = os.stat(path)
            except FileNotFoundError:
                return _GONE
            if st is not None and (now.st_ino, now.st_size) != (st.st_ino, st.st_size):
                return _GONE  # replaced meanwhile by a good entry
            dest = self._layout.quarantine / f"{key}.{int(time.time())}.{os.getpid()}{path.suffix}"
            try:
                os.replace(path, dest)
            except FileNotFoundError:
                return _GONE
            except OSError as exc:
                self._fail(exc)
                return f"cannot move it: {os_reason(exc)}"
            self._stats.forget(key)
            regular = stat.S_ISREG(now.st_mode)
            self._count(key, now=True, corrupt=1, entries=-1 if regular else 0,
                        bytes=-now.st_size if regular else 0)
        return None

    def get(self, key: str) -> Entry | None:
        """The entry for ``key`` (writable root first, then read-only roots) or None.

        Counts a hit (and adds the header's ``compile_seconds`` to ``seconds_saved``) or a
        miss; touches the entry's mtime on a hit in the writable root (no lock). Any defect is
        a miss (quarantined, counted, warned once). Returns None when KCACHE_DISABLE is set."""
        if self.disabled:
            return None
        check_key(key)
        found = self._lookup(key, touch=True)
        if found is None:
            self._count(key, misses=1)
            return None
        return self._hit(key, found)

    def _hit(self, key: str, found) -> Entry:
        header = found[0]
        self._count(key, hit_key=key, hits=1, seconds_saved=header.get("compile_seconds") or 0.0)
        return found[1]

    def _touch(self, fd: int, st: os.stat_result) -> None:
        """Record a use (the LRU clock): set mtime to now, unless it is already recent
        (TOUCH_RESOLUTION), which spares a metadata write per hit of a hot kernel."""
        if not (self._touch_ok and self.writable) or st.st_mtime > time.time() - TOUCH_RESOLUTION:
            return
        try:
            os.utime(fd)
        except OSError as exc:
            self._touch_ok = False
            warn_once("touch", f"kcache: cannot record use of cache entries in {self.root} ({exc}); "
                      "LRU eviction will be approximate")

    def load(self, key: str) -> Entry:
        """Full read and check of ``key`` (no counters, no touch, no quarantine).

        Raises KeyError if no root has it, CorruptEntry or NewerFormat for a bad file."""
        check_key(key)
        error: Exception | None = None
        for lay, _ro in self._layouts():
            path = lay.entry(key)
            try:
                data, _st, _ = self._read_file(path)
            except FileNotFoundError:
                continue
            try:
                return fmt.decode(data, key)[1]
            except (CorruptEntry, NewerFormat) as exc:
                error = error or type(exc)(f"{path}: {exc}")
        if error is not None:
            raise error
        raise KeyError(key)

    def _info(self, key: str, path: Path, lay: Layout, ro: bool, hits: dict | None = None) -> EntryInfo:
        """EntryInfo from the file's header only (OSError, CorruptEntry, NewerFormat)."""
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            prefix = f.read(fmt.PREFIX_SIZE)
            hlen, _b, _s = fmt.parse_prefix(prefix, st.st_size)
            h = fmt.decode_header(prefix + f.read(hlen), key, st.st_size)
        return EntryInfo(
            key=key, path=path, root=lay.root, readonly=ro, file_size=st.st_size,
            created=float(h["created"]), last_used=st.st_mtime, kernel=h.get("kernel"),
            signature=h.get("signature"), arch=h.get("arch"), compile_seconds=h.get("compile_seconds"),
            components=h["components"], sizes=h["sizes"], meta=h["meta"],
            hits=int((hits or {}).get(key, 0)) if not ro else 0)

    def _info_or_broken(self, key: str, path: Path, lay: Layout, ro: bool, st: os.stat_result,
                        hits: dict | None = None) -> EntryInfo | None:
        """EntryInfo of the file, or one with ``problem`` set when its header cannot be read;
        None if it vanished meanwhile."""
        try:
            if not stat.S_ISREG(st.st_mode):
                problem = NOT_REGULAR
            else:
                return self._info(key, path, lay, ro, hits)
        except FileNotFoundError:
            return None
        except NewerFormat as exc:
            problem = f"newer format: {exc}"
        except CorruptEntry as exc:
            problem = str(exc)
        except OSError as exc:
            problem = f"unreadable: {os_reason(exc)}"
        return EntryInfo(
            key=key, path=path, root=lay.root, readonly=ro, file_size=st.st_size,
            created=st.st_mtime, last_used=st.st_mtime, kernel=None, signature=None, arch=None,
            compile_seconds=None, components={}, sizes={}, meta={}, hits=0, problem=problem)

    def header(self, key: str) -> EntryInfo | None:
        """Header of ``key``'s entry (first root that has a readable one), without payloads."""
        check_key(key)
        for lay, ro in self._layouts():
            try:
                return self._info(key, lay.entry(key), lay, ro, self._stats.hits())
            except (OSError, CorruptEntry, NewerFormat):
                continue
        return None

    def entries(self, *, readonly: bool = True, include_broken: bool = False) -> Iterator[EntryInfo]:
        """Headers of every entry (writable root, then read-only roots if ``readonly``).

        Files whose header cannot be read (truncated, zero-length, garbage, unreadable, not a
        regular file, newer format) are skipped, or with ``include_broken`` listed as an
        EntryInfo whose ``problem`` says why (so they can be shown and removed). Files whose
        names are not entry names are never listed."""
        hits = self._stats.hits()
        for lay, ro in self._layouts(readonly):
            for key, path, st in scan(lay, regular_only=not include_broken):
                info = self._info_or_broken(key, path, lay, ro, st, hits)
                if info is not None and (include_broken or info.problem is None):
                    yield info

    def find(self, prefix: str, *, include_broken: bool = False) -> list[EntryInfo]:
        """Entries whose key starts with ``prefix`` (hex digits), across all roots;
        ``include_broken`` as for :meth:`entries`. ValueError for a prefix that is not hex."""
        prefix = prefix.lower()
        if prefix and not all(c in "0123456789abcdef" for c in prefix):
            raise ValueError(f"bad key prefix {prefix!r}: expected hex digits")
        hits = self._stats.hits()
        out = []
        for lay, ro in self._layouts():
            for key, path, st in scan(lay, prefix[:2] if len(prefix) >= 2 else (prefix or None),
                                      regular_only=not include_broken):
                if key.startswith(prefix):
                    info = self._info_or_broken(key, path, lay, ro, st, hits)
                    if info is not None and (include_broken or info.problem is None):
                        out.append(info)
        return out

    # -- writing ------------------------------------------------------------------
    def lock(self, key: str, timeout: float | None = None):
        """Context manager holding ``key``'s lock (filelock; reentrant in one process).

        ``timeout`` in seconds (default lock_timeout / KCACHE_LOCK_TIMEOUT); raises LockTimeout
        naming the lock file. On a root where lock files cannot be created it is a no-op."""
        check_key(key)
        if self.disabled:
            return contextlib.nullcontext(False)  # KCACHE_DISABLE: touch nothing on disk
        self._ensure_root()
        return self._locks.hold(key, timeout)

    def put(self, key: str, entry: Entry, *, components: dict | None = None) -> bool:
        """Publish ``entry`` under ``key`` atomically; True if written.

        False (never an exception) if the store is disabled or the root is read-only, missing
        or full. May evict least-recently-used entries when the total crosses max_size.
        TypeError if the entry's meta or ``components`` are not msgpack-encodable."""
        check_key(key)
        if not isinstance(entry, Entry):
            raise TypeError(f"put() needs a kcache.Entry, not {type(entry).__name__}")
        if self.disabled or not self.writable:
            return False
        data = fmt.encode(key, entry, components)
        if not self._ensure_root():
            return False
        path = self._layout.entry(key)
        tmp = None
        try:
            self._mkdir(path.parent)
            tmp = self._write_temp(path, data)
            with self._locks.hold(key):
                old = _size_or_none(path)
                os.replace(tmp, path)
                tmp = None
                self._count(key, now=True, puts=1, bytes_written=len(data),
                            entries=0 if old is not None else 1, bytes=len(data) - (old or 0))
                self._note_totals(key)
        except OSError as exc:
            if tmp is not None:
                atomic.unlink_quietly(tmp)
            if isinstance(exc, FileNotFoundError):
                self._ready = False  # the layout was deleted under us: recreate it next time
            else:
                self._fail(exc)
            return False
        self._maybe_evict()
        return True

    def get_or_create(self, key: str, create: Callable[[], Entry], *,
                      components: dict | None = None, count: bool = True) -> tuple[Entry, bool]:
        """Single flight: the cached entry, or ``create()``'s, built by one process only.

        Looks up ``key``; on a miss takes its lock, looks again (another process may have
        created it meanwhile), else calls ``create()`` (-> Entry) and puts the result. Returns
        ``(entry, was_hit)``; counts exactly one hit or one miss, or neither with
        ``count=False`` (an existence check, e.g. ``compile_for``: not a use). Compiles are not counted here:
        the caller records them (``record(compiles=1, compile_seconds=...)``). Raises
        LockTimeout, or whatever ``create`` raises."""
        check_key(key)
        if self.disabled:
            return create(), False
        found = self._lookup(key, touch=count)
        if found is not None:
            return (self._hit(key, found) if count else found[1]), True
        with self.lock(key):
            found = self._lookup(key, touch=count)
            if found is not None:
                return (self._hit(key, found) if count else found[1]), True
            if count:
                self._count(key, misses=1)
            ent = create()
            self.put(key, ent, components=components)
            return ent, False

    def record(self, **counters: float) -> None:
        """Add to persistent counters, e.g. ``record(compiles=1, compile_seconds=0.8)``.
        Names: see Stats (not the totals entries/bytes). TypeError for an unknown name."""
        for name, value in counters.items():
            if name not in COUNTERS:
                raise TypeError(f"record(): unknown counter {name!r}; accepted: {', '.join(COUNTERS)}")
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise TypeError(f"record(): {name}={value!r} is not a number")
        self._count(None, **counters)

    def remove(self, key: str) -> bool:
        """Remove ``key``'s entry from the writable root; True if a file was removed. (For why
        an entry was left, e.g. busy, use :meth:`remove_many`.)"""
        check_key(key)
        path = self._layout.entry(key)
        if not os.path.lexists(path):
            return False
        return isinstance(self._remove(key, path, deltas=None), int)

    def remove_many(self, keys) -> RemoveReport:
        """Remove the entries of ``keys`` (an iterable of keys) from the writable root, each
        under its key lock (waiting up to lock_timeout). Never stops at a failing entry:
        returns a RemoveReport (int: how many removed; ``bytes_freed``; ``failed``: a
        NotRemoved per key left, with the reason, "no such entry" for one absent from the
        writable root). Totals are updated for exactly the files removed. ValueError for a bad
        key (before anything is removed)."""
        keys = [check_key(k) for k in keys]
        removed, freed, failed = [], 0, []
        deltas: dict = {}
        try:
            for key in dict.fromkeys(keys):
                path = self._layout.entry(key)
                result = self._remove_batched(key, path, deltas, None) if os.path.lexists(path) else None
                if isinstance(result, int):
                    removed.append(key)
                    freed += result
                else:
                    failed.append(NotRemoved(key, path, result or "no such entry"))
        finally:
            self._apply_deltas(deltas, None)
        return RemoveReport(removed, freed, failed)

    def _remove(self, key: str, path: Path, blocking: bool = True, deltas: dict | None = None) -> int | str | None:
        """Unlink under the key lock. Returns the freed size (bytes), None if the file was
        already gone, or why it was left (a NotRemoved reason). Never raises OSError or
        LockTimeout: a failing entry says so and the caller goes on. Totals go to ``deltas``
        (shard -> [entries, bytes, count]) when given, else are written at once."""
        try:
            with self._locks.hold(key, blocking=blocking) as held:
                if not held and not blocking:
                    return BUSY
                st = os.stat(path)
                if not stat.S_ISREG(st.st_mode):
                    return NOT_REGULAR  # never counted in the totals; verify(fix=True) moves it
                if _newer_format(path):
                    return NEWER
                os.unlink(path)
        except FileNotFoundError:
            return None
        except LockTimeout:
            return f"{BUSY}; gave up after KCACHE_LOCK_TIMEOUT={self.lock_timeout:g} s"
        except OSError as exc:
            return os_reason(exc)
        self._stats.forget(key)
        if deltas is not None:
            d = deltas.setdefault(shard_of(key), [0, 0, 0])
            d[0] -= 1
            d[1] -= st.st_size
            d[2] += 1
        else:
            self._count(key, now=True, entries=-1, bytes=-st.st_size)
        return st.st_size

    def _remove_batched(self, key: str, path: Path, deltas: dict, counter: str | None,
                        blocking: bool = True) -> int | str | None:
        """:meth:`_remove` for bulk removals: totals gathered in ``deltas`` and written every
        DELTA_BATCH removals, so a process killed mid-clear/prune leaves the totals off by at
        most the removals of the batch in flight (not by every entry removed so far)."""
        result = self._remove(key, path, blocking=blocking, deltas=deltas)
        if sum(c for _n, _b, c in deltas.values()) >= DELTA_BATCH:
            self._apply_deltas(deltas, counter)
        return result

    def _apply_deltas(self, deltas: dict, counter: str | None) -> None:
        """Write the gathered totals (and ``counter``, e.g. evictions) and empty ``deltas``."""
        while deltas:
            shard, (n, b, c) = deltas.popitem()
            extra = {counter: c} if counter else {}
            self._stats.add(shard, now=True, entries=n, bytes=b, **extra)

    def clear(self) -> RemoveReport:
        """Remove every entry of the writable root (read-only roots untouched).

        Returns a RemoveReport: an int (how many were removed, as before) with ``bytes_freed``
        and ``failed`` (a NotRemoved per entry left in place: busy lock, not a regular file,
        newer format, OS error such as EROFS). Goes on past failing entries; totals are
        updated for exactly the files removed. Files whose names are not entry names are
        never touched. Old temp files are swept."""
        removed, freed, failed = [], 0, []
        deltas: dict = {}
        try:
            for key, path, _st in list(scan(self._layout, regular_only=False)):
                result = self._remove_batched(key, path, deltas, None)
                if isinstance(result, int):
                    removed.append(key)
                    freed += result
                elif result is not None:
                    failed.append(NotRemoved(key, path, result))
        finally:
            self._apply_deltas(deltas, None)
        sweep_temp(self._layout)  # only old ones: a fresh temp file belongs to a running put
        return RemoveReport(removed, freed, failed)

    # -- eviction / maintenance ---------------------------------------------------------
    def _note_totals(self, key: str) -> None:
        s = shard_of(key)
        self._totals[s] = self._stats.shard_totals(s)

    def _maybe_evict(self) -> None:
        now = time.monotonic()
        if now - self._totals_at > _TOTALS_TTL or len(self._totals) < SHARDS:
            self._totals = {s: self._stats.shard_totals(s) for s in range(SHARDS)}
            self._totals_at = now
        if sum(b for _n, b in self._totals.values()) <= self.max_size:
            return
        lock = try_global(self._layout.locks / "evict.lock", self._file_mode)
        if lock is None:
            return  # another process is evicting
        try:
            self._evict(int(self.max_size * EVICT_TARGET))
        finally:
            lock.release()
            self._totals_at = 0.0

    def _evict(self, target: int) -> None:
        """Remove least-recently-used entries until the root holds <= ``target`` bytes."""
        files = sorted(scan(self._layout), key=lambda t: t[2].st_mtime)
        total = sum(st.st_size for _k, _p, st in files)
        deltas: dict = {}
        try:
            for key, path, st in files:
                if total <= target:
                    break
                if isinstance(self._remove_batched(key, path, deltas, "evictions", blocking=False), int):
                    total -= st.st_size
        finally:
            self._apply_deltas(deltas, "evictions")

    def prune(self, max_size=None, older_than=None, where=None, dry_run: bool = False) -> PruneReport:
        """Remove entries of the writable root (read-only roots are never touched).

        ``older_than`` (seconds, or duration text): entries not used for that long;
        ``where(EntryInfo) -> bool``: True = remove (headers are read only when given);
        ``max_size`` (bytes or size text; default the store's max_size): then remove least
        recently used entries until the rest fits. Temp files older than an hour, and lock
        files of absent entries unused for an hour, are swept.
        ``dry_run`` reports without removing. Removals count as ``evictions``."""
        from .config import parse_duration, parse_size
        cap = self.max_size if max_size is None else parse_size(max_size, "max_size")
        age = None if older_than is None else parse_duration(older_than, "older_than")
        hits = self._stats.hits() if where is not None else {}
        plan = plan_prune(self, self._layout, cap, age, where, hits)
        report = PruneReport(dry_run=dry_run, entries_left=plan.kept, bytes_left=plan.kept_bytes)
        report.temp_files = sweep_temp(self._layout, dry_run=dry_run or not self.writable)
        if not dry_run and self.writable:
            report.lock_files = sweep_locks(self._layout, lambda k: self._locks.hold(k, blocking=False))
        deltas: dict = {}
        try:
            for key, path, st in plan.remove:
                info = plan.infos.get(key) or self._info_or_broken(key, path, self._layout, False, st)
                if dry_run:
                    result = NEWER if _newer_format(path) else st.st_size
                else:
                    result = self._remove_batched(key, path, deltas, "evictions")
                if isinstance(result, int):
                    if info is not None:
                        report.removed.append(dataclasses.replace(info, file_size=result))
                    report.bytes_freed += result
                elif result is not None:  # None: removed meanwhile by someone else
                    report.failed.append(NotRemoved(key, path, result))
                    report.entries_left += 1
                    report.bytes_left += st.st_size
        finally:
            if not dry_run:
                self._apply_deltas(deltas, "evictions")
        return report

    def verify(self, fix: bool = False, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
        """Fully check every entry of every root. ``fix``: quarantine defective entries of the
        writable root (``quarantined`` counts those actually moved, ``not_quarantined`` says
        why others were left; each move subtracts the file from the totals). The totals are
        never recounted here (see :meth:`recount`). ``progress(done, total)`` is called per
        entry. A file named like an entry but not a regular file (e.g. a directory) is corrupt."""
        files = [(lay, ro, key, path, st) for lay, ro in self._layouts()
                 for key, path, st in scan(lay, regular_only=False)]
        report = VerifyReport()
        for i, (lay, ro, key, path, st) in enumerate(files, 1):
            try:
                if not stat.S_ISREG(st.st_mode):
                    raise CorruptEntry(NOT_REGULAR)
                data, st, _ = self._read_file(path)
                fmt.decode(data, key)
                report.ok += 1
            except FileNotFoundError:
                pass
            except NewerFormat:
                report.newer.append(path)
            except (CorruptEntry, OSError) as exc:
                reason = str(exc) if isinstance(exc, CorruptEntry) else f"unreadable: {os_reason(exc)}"
                report.corrupt.append((path, reason))
                if fix and not ro and isinstance(exc, CorruptEntry):
                    why = self._quarantine(key, path, False, reason, getattr(exc, "stat", None) or st)
                    if why is None:
                        report.quarantined += 1
                    elif why != _GONE:
                        report.not_quarantined.append((path, why))
            report.checked += 1
            if progress is not None:
                progress(i, len(files))
        # No recount here: quarantining already adjusted the totals, and a recount races with
        # live writers (a put between the scan and the write of the totals would be lost).
        return report

    # -- counters ------------------------------------------------------------------
    def stats(self) -> Stats:
        """Persistent counters summed over the 16 shards (plus this process's unwritten ones)."""
        if self.writable and self._layout.stats.is_dir():
            self._stats.flush()
        s = Stats(**{k: v for k, v in self._stats.read().items() if k in Stats.__dataclass_fields__})
        for name in ("hits", "misses", "compiles", "puts", "evictions", "corrupt", "lock_waits",
                     "lock_timeouts", "bytes_written", "entries", "bytes"):
            setattr(s, name, int(getattr(s, name)))
        s.max_size = self.max_size
        return s

    def flush(self) -> None:
        """Write counters accumulated in memory (also done every second and at exit)."""
        self._stats.flush()

    def zero_stats(self) -> None:
        """Zero every counter and per-entry hit count; totals (entries, bytes) are kept.

        Raises OSError (naming the stats folder and the reason, e.g. EROFS, ENOTDIR) when
        the counters could not be written, KcacheError when the store is disabled."""
        if self.disabled:
            raise KcacheError("kcache is disabled (KCACHE_DISABLE): the statistics were not zeroed")
        if not self._stats.reset(keep_totals=True):
            exc = self._write_exc
            raise OSError(exc.errno if exc else errno.EIO,
                          f"the statistics were not zeroed: {self.write_problem or 'cannot write'}",
                          str(self._layout.stats))

    def recount(self) -> Stats:
        """Rebuild the totals (entries, bytes) from a scan of the writable root; returns stats().

        The step to take after files were copied into the cache (seeding it from a warmed
        one), changed or removed behind the store's back, or after a process was killed in
        a bulk removal: the store counts only what it writes and removes, so until then such
        files are missing from the totals and the size cap sees too few bytes. Exact only when
        no other process writes meanwhile (a put between the scan and the write is lost from
        the totals), so never run implicitly."""
        per: dict[int, list[int]] = {s: [0, 0] for s in range(SHARDS)}
        for key, _path, st in scan(self._layout):
            t = per[shard_of(key)]
            t[0] += 1
            t[1] += st.st_size
        if self._ensure_root():
            for s, (n, b) in per.items():
                self._stats.set_totals(s, n, b)
        return self.stats()


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
    for d in (*inner, root, *root.parents):
        try:
            st = os.stat(d)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            return f"{d}: {os_reason(exc)}"
        if not stat.S_ISDIR(st.st_mode):
            return f"{d} is a file, not a directory (ENOTDIR)"
        ours = d == root or d in inner
        try:
            if ours:
                fd, tmp = tempfile.mkstemp(dir=d, prefix=".probe.", suffix=".tmp")
                os.close(fd)
                os.unlink(tmp)
            else:  # root missing: could it be created here?
                os.rmdir(tempfile.mkdtemp(dir=d, prefix=".kcache-probe."))
        except OSError as exc:
            return os_reason(exc) if ours else f"cannot create folders in {d}: {os_reason(exc)}"
        try:
            vfs = os.statvfs(d)
        except OSError:
            return None
        free = vfs.f_bfree if os.geteuid() == 0 else vfs.f_bavail  # root may use reserved blocks
        if vfs.f_blocks and not free:
            return f"{os.strerror(errno.ENOSPC)} (ENOSPC)"
        return None
    return None  # not reached: "/" exists


def _newer_format(path: Path) -> bool:
    """True if the file's envelope says a newer format version (checksum not verified: a
    corrupt version field is left for verify to quarantine)."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(fmt.MAGIC) + 2)
    except OSError:
        return False
    return (head[:len(fmt.MAGIC)] == fmt.MAGIC and len(head) == len(fmt.MAGIC) + 2
            and int.from_bytes(head[len(fmt.MAGIC):], "big") > fmt.FORMAT_VERSION)


def _size_or_none(path: Path) -> int | None:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None



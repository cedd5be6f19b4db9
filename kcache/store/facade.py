"""The store's facade: settings and tiers, get/put, single flight, counting, the eviction
trigger. Its parts are made with what they use (docs/design.md, "kcache/store/"): the read
path (kcache.store.reading: tiers in order, verify, quarantine), the remote policy
(kcache.store.remote), the writable root (kcache.store.root), listings, counters
(kcache.store.stats) and maintenance (kcache.store.maintenance, through Housekeeping).

Invariants (see docs/store.md, docs/security.md):

* An entry file is published whole (temp file in its shard, fsync, rename). Readers open it
  once and read that inode, so a concurrent replace or unlink never gives a torn entry.
  Readers take no lock.
* put/remove/evict/quarantine of a key hold that key's lock and update the totals from what
  they saw under it; totals never go below 0.
* Any defect in an entry makes it a miss; the file goes to ``v1/quarantine/`` (never
  deleted there; pruned after ``quarantine_age``), ``corrupt`` +1, warned once. A newer-format
  entry is reported and left alone.
* A fault in one entry or auxiliary file affects that entry or feature only; a read-only,
  missing, full or untrusted root never raises into the caller: gets keep working where they
  can, puts return False, counters stay in memory, each problem warned once.
"""
from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from pathlib import Path
from typing import Callable

from ..disk import fsio
from ..entry import artifacts, format as fmt
from ..config.settings import Settings, resolve
from ..config.values import parse_duration, parse_size
from ..entry.format import Entry
from ..errors import CorruptEntry, KcacheError
from ..keys import check_key
from ..disk.layout import Layout
from .layers import make_layer
from .listing import Listing
from ..tiers.local import LocalTier, files_and_bytes, os_reason, probe_writable  # noqa: F401 (os_reason: API)
from .remote import RemotePolicy
from .stats import COUNTERS, SHARDS, StatsBook, shard_of
from ..text import cut
from .reading import Reader, verify_bytes
from .root import WritableRoot
from .transfer import Transfer
from ..warn import warn_once

# Maintenance (clear, prune, verify, eviction) and the reports are imported when first used:
# they bring the lock library and the reports' dataclasses, which a process that only reads
# entries never needs (tests/test_lazy_imports.py).
def _maintenance():
    from . import maintenance
    return maintenance


_TOTALS_TTL = 1.0  # seconds an estimate of other shards' totals is trusted by put


class Store:
    """A kernel cache rooted at ``root`` (see kcache.config.resolve for defaults).

    ``readonly_dirs`` (also ``readonly_roots``, its earlier name): extra roots consulted
    after ``root`` and never written (read-only layers, KCACHE_READONLY_DIRS);
    ``max_size``: size cap in bytes (or size text); ``lock_timeout``: seconds. Raises
    ConfigError for bad settings, TypeError when both names of the layers are given. Nothing
    else in the store raises for a broken, hostile, read-only, full or untrusted cache."""

    def __init__(self, root=None, *, readonly_roots=None, max_size=None, lock_timeout=None,
                 readonly_dirs=None):
        if readonly_dirs is not None:
            if readonly_roots is not None:
                raise TypeError("Store() takes readonly_dirs or readonly_roots (the same setting), not both")
            readonly_roots = readonly_dirs
        self.settings: Settings = resolve(root, max_size, readonly_roots, lock_timeout)
        self.root: Path = self.settings.root
        self.readonly_roots: tuple[Path, ...] = self.settings.readonly_roots
        self.max_size: int = self.settings.max_size
        self.lock_timeout: float = self.settings.lock_timeout
        shared = self.settings.shared
        self._dir_mode = 0o2770 if shared else 0o700
        self._file_mode = 0o660 if shared else 0o600
        self._trust = fsio.Trust(shared)
        self.local = LocalTier(self.root, writable=True, trust=self._trust,
                               file_mode=self._file_mode, dir_mode=self._dir_mode)
        self.layout = self.local.layout
        self._root = WritableRoot(self.local, count=self._count,
                                  in_use=lambda: not self.disabled and self.local in self._tiers)
        self.layers = tuple(make_layer(r, self._trust, self.settings.max_entry_size)
                            for r in self.readonly_roots)  # folders, or bundle files
        self.untrusted: dict[str, str] = {}  # tier name -> why it is not used
        self._stats = StatsBook(self.layout, self._file_mode, self._root.ensure, self._root.fail,
                                self._root.layout_gone, self._root.ready_folder, self.local.dirs)
        self._listing = Listing(self._local_tiers, self._stats, self.settings.max_entry_size)
        self._key_locks, self._key_locks_made = None, threading.Lock()  # KeyLocks: first _locks
        self._stats.on_flush = self.local.flush_touches  # a hit's use is written with its count
        self._totals, self._totals_at = {}, 0.0  # shard -> (entries, bytes); when read (s)
        self._remote_policy = RemotePolicy(
            self.settings, disabled=lambda: self.disabled, count=self._count,
            verify=self.verify_bytes, publish=self._publish, entries=self.entries,
            entry_bytes=self.entry_bytes)
        self._reader = Reader(
            local=self.local, tiers=self._local_tiers, remote=self._remote_policy, root=self._root,
            locks=lambda: self._locks, stats=self._stats, count=self._count,
            disabled=lambda: self.disabled, max_entry_size=self.settings.max_entry_size)
        self._transfer = Transfer(
            policy=self._remote_policy, verify=self.verify_bytes, entry_bytes=self.entry_bytes,
            publish=self._publish, count=self._count, write_problem=lambda: self.write_problem,
            max_entry_size=self.settings.max_entry_size)
        self._disabled = False
        self.disabled = self.settings.disabled  # builds the tiers read

    def __repr__(self) -> str:
        return (f"Store({str(self.root)!r}, readonly_roots={[str(r) for r in self.readonly_roots]}, "
                f"max_size={self.max_size})")

    @property
    def _locks(self):
        """The per-key locks (kcache.locks.KeyLocks), made on first use: only writes, compiles
        and maintenance lock, so a process served from the cache never imports kcache.locks."""
        locks = self._key_locks
        if locks is None:
            with self._key_locks_made:  # one KeyLocks per store, whichever thread comes first
                if self._key_locks is None:
                    from ..disk.locks import KeyLocks
                    self._key_locks = KeyLocks(
                        self.layout, self.lock_timeout, self._file_mode, self._count,
                        self._root.lock_error, self._root.ready_folder, self.local.dirs,
                        stale=self.settings.lock_stale)
                locks = self._key_locks
        return locks

    @property
    def _layout(self) -> Layout:  # the name before the tiers
        return self.layout

    @property
    def readonly_dirs(self) -> tuple[Path, ...]:
        """The read-only layers' roots (the setting's name; ``readonly_roots`` is the same)."""
        return self.readonly_roots

    # -- which tiers are used ------------------------------------------------------------------
    @property
    def disabled(self) -> bool:
        """True under KCACHE_DISABLE: nothing on disk is read or written, not even counters.
        The CLI sets it False for maintenance asked for explicitly."""
        return self._disabled

    @disabled.setter
    def disabled(self, value: bool) -> None:
        self._disabled = bool(value)
        self._tiers = () if self._disabled else self._trusted_tiers()
        # counters of a disabled or untrusted root are neither read nor written
        self._stats.disk = self.local in self._tiers

    def _trusted_tiers(self) -> tuple:
        """The tiers that pass the trust check, in read order; each one that does not is
        warned once and left out (the program runs uncached for it)."""
        tiers = []
        for tier in (self.local, *self.layers):
            problem = tier.trust_problem()
            if problem is None:
                tiers.append(tier)
                continue
            self.untrusted[tier.name] = problem
            what = "cache root" if tier.writable else "read-only layer"
            warn_once(f"untrusted:{tier.name}", f"kcache: the {what} {tier.name} is not trusted "
                      f"and not used: {problem}")
            if tier.writable:
                self._root.mark_unwritable(f"not trusted: {problem}")
        return tuple(tiers)

    @property
    def trusted(self) -> bool:
        """True when the writable root passed the trust check (it is then used)."""
        return self.local.name not in self.untrusted

    def _local_tiers(self) -> tuple:
        """The local tiers in use (the root and layers that are trusted), in read order."""
        return self._tiers  # only local tiers: the remote one is read through _remote_policy

    # -- the read path (kcache.store.reading) --------------------------------------------------
    @staticmethod
    def verify_bytes(key: str, data: bytes, *, hit: bool = False) -> tuple[dict, Entry]:
        """The one check every value from any tier crosses before use (reading.verify_bytes):
        returns (header, Entry); raises CorruptEntry (with ``code``) or NewerFormat."""
        return verify_bytes(key, data, hit=hit)

    def load(self, key: str, root=None) -> Entry:
        """Full read and check of ``key`` (``root``: only that root's or layer's copy; no
        counters, touch or quarantine); raises KeyError, CorruptEntry or NewerFormat."""
        return self._reader.load(key, root)

    def entry_bytes(self, key: str) -> bytes | None:
        """The verified bytes of ``key``'s entry from the first local tier holding a valid
        one (None if none does): for export and push. No counters, no touch."""
        return self._reader.entry_bytes(key)

    # -- listings (kcache.store.listing) -------------------------------------------------------
    def header(self, key: str):
        """Header of ``key``'s entry (an EntryInfo, first root that has a readable one) or None,
        without payloads."""
        return self._listing.header(key)

    def entries(self, *, readonly: bool = True, include_broken: bool = False):
        """EntryInfo of every entry (:meth:`kcache.store.listing.Listing.entries`)."""
        return self._listing.entries(readonly=readonly, include_broken=include_broken)

    def find(self, prefix: str, *, include_broken: bool = False) -> list:
        """Entries whose key starts with ``prefix`` (:meth:`kcache.store.listing.Listing.find`)."""
        return self._listing.find(prefix, include_broken=include_broken)

    # -- the remote tier (kcache.store.remote) -------------------------------------------------
    @property
    def remote(self):
        """The remote tier, opened on first use (:attr:`.remote.RemotePolicy.remote`), or None."""
        return self._remote_policy.remote

    def remote_served(self, key: str) -> bool:
        """Whether the remote tier served ``key`` in this process; never opens it."""
        return self._remote_policy.served(key)

    def require_remote(self):
        """The remote tier for a command that asked for it (RemotePolicy.require_remote)."""
        return self._remote_policy.require_remote()

    @property
    def remote_settings(self):
        """The remote tier's settings (no secret is shown) or None."""
        return self._remote_policy.remote_settings

    def push(self, keys=None, progress: Callable[[int, int], None] | None = None) -> "CopyReport":
        """Publish local entries to the writable remote tier (:meth:`.remote.RemotePolicy.push`)."""
        return self._remote_policy.push(keys, progress)

    # -- the writable root (kcache.store.root) ------------------------------------------------
    @property
    def writable(self) -> bool:
        """False once a write failed or :meth:`check_writable` found a problem."""
        return self._root.writable

    @writable.setter
    def writable(self, value: bool) -> None:
        self._root.writable = value

    @property
    def write_problem(self) -> str | None:
        """Why :attr:`writable` is False (None while it is True)."""
        return self._root.write_problem

    def check_writable(self) -> str | None:
        """Why the writable root cannot be written (str), or None if it can; writes nothing
        that stays and raises nothing (:meth:`kcache.store.root.WritableRoot.check_writable`:
        the probe, :func:`probe_writable`). A problem found sets ``writable`` False and
        ``write_problem`` (no warning: the caller asked)."""
        return self._root.check_writable()

    def _count(self, key: str | None, now: bool = False, hit_key: str | None = None, **counters) -> None:
        shard = shard_of(key) if key else os.getpid() % SHARDS
        self._stats.add(shard, now=now, hit_key=hit_key, **counters)

    # -- reading -----------------------------------------------------------------------------------
    def get(self, key: str) -> Entry | None:
        """The entry for ``key`` (writable root first, then read-only layers) or None.

        Counts a hit (and adds the header's ``compile_seconds`` to ``seconds_saved``) or a
        miss; records the use of a hit in the writable root (its mtime, written with the
        counters: a hit itself writes nothing). Any defect is a miss
        (quarantined, counted, warned once). Returns None when KCACHE_DISABLE is set. Raises
        ValueError only for a bad key."""
        check_key(key)
        if self.disabled:
            return None
        found = self._reader.read(key, touch=True)
        if found is None:
            self._count(key, misses=1)
            return None
        return self._hit(key, found)

    def reject(self, key: str, entry: Entry, reason: str) -> None:
        """A served ``entry`` its user refused: a miss, its file corrupt (Reader.reject)."""
        if not self.disabled:
            self._reader.reject(check_key(key), entry, reason)

    def _hit(self, key: str, found) -> Entry:
        saved = found[0].get("compile_seconds") or 0.0
        self._stats.add_hit(key, float(saved))
        return found[1]

    # -- writing -----------------------------------------------------------------------------------
    def lock(self, key: str, timeout: float | None = None):
        """Context manager holding ``key``'s lock (filelock; reentrant in one process).

        ``timeout`` in seconds (default lock_timeout / KCACHE_LOCK_TIMEOUT); raises LockTimeout
        naming the lock file. On a root where lock files cannot be created it is a no-op.
        A stopped holder is waited for up to the timeout (the caller's critical section is
        never entered without the lock); while held, the heartbeat runs."""
        check_key(key)
        if not self._root.ensure():
            return contextlib.nullcontext(False)  # disabled, untrusted or unwritable: no files
        return self._locks.hold(key, timeout, if_stopped=None)

    def _compile_lock(self, key: str, while_waiting=None):
        """:meth:`lock` for a compile: the holder renews a heartbeat; a holder without one for
        KCACHE_LOCK_STALE seconds (stopped) is passed, counted in ``lock_stale`` (kcache.locks).
        ``while_waiting``: see :meth:`get_or_create`."""
        if not self._root.ensure():
            return contextlib.nullcontext(False)
        return self._locks.hold(key, flight=True, while_waiting=while_waiting)

    def put(self, key: str, entry: Entry, *, components: dict | None = None) -> bool:
        """Publish ``entry`` under ``key`` atomically; True if written.

        A holder of the key's lock that shows no heartbeat for KCACHE_LOCK_STALE seconds
        (stopped) is not waited for: the entry is published without the lock (the rename is
        atomic; ``lock_stale``, warned once). False (never an exception) if the store is
        disabled or the root is read-only, missing, full or untrusted, the entry's path is
        taken by something that is not an entry file, or the encoded entry is larger than
        ``max_entry_size`` bytes (reads would refuse it; neither stored nor published):
        counted in ``write_errors_*``, warned once; or a kernel or program entry's artifact
        fails kcache.artifacts (``artifacts_refused``, warned once). May evict
        least-recently-used entries when the total crosses max_size. TypeError if the entry's
        meta or ``components`` are not msgpack-encodable, ValueError if they hold what an
        entry may not (a non-finite number, more than the decoding limits)."""
        check_key(key)
        if not isinstance(entry, Entry):
            raise TypeError(f"put() needs a kcache.Entry, not {type(entry).__name__}")
        if self.disabled:
            return False
        why = artifacts.problem(entry.artifacts, entry.meta)
        if why is not None:  # e.g. an empty cubin from the compile step: never published
            self._count(key, now=True, artifacts_refused=1)
            warn_once("artifact-refused", f"kcache: not storing the entry of {cut(entry.meta.get('kernel') or key)} "
                      f"({why}); the kernel still runs, uncached")
            return False
        data = fmt.encode(key, entry, components)
        return self._publish(key, data)

    def _publish(self, key: str, data: bytes, *, remote: bool = True,
                 unless_same: bool = False) -> bool | None:
        """Publish verified entry bytes under ``key`` in the writable root (see put), then
        (``remote``) to the writable remote tier, whether or not the root took them.
        ``unless_same``: None, nothing written, when the root holds these very bytes
        already (checked under the key's lock: concurrent importers count each entry once)."""
        if len(data) > self.settings.max_entry_size:  # no read would accept it: store it nowhere
            self._count(key, now=True, write_errors_other=1)
            warn_once("put-too-large", f"kcache: entry of {key} not stored: {len(data)} bytes, more than the "
                      f"max entry size that reads accept ({self.settings.max_entry_size} bytes: "
                      "KCACHE_MAX_ENTRY_SIZE); that kernel runs uncached")
            return False
        if remote:
            self._remote_policy.publish(key, data)
        if not self.writable or not self._root.ensure():
            if not self.disabled:
                self._count(key, **{self._root.refused_cause(): 1})
            return False
        try:
            with self._locks.hold(key):
                if unless_same and self._root_bytes(key) == data:
                    return None
                old = self.local.publish(key, data)
                self._count(key, now=True, puts=1, bytes_written=len(data),
                            entries=0 if old is not None else 1, bytes=len(data) - (old or 0))
                self._note_totals(key)
        except OSError as exc:
            self._root.put_failed(key, exc)
            return False
        self._maybe_evict(len(data))
        return True

    def _root_bytes(self, key: str) -> bytes | None:
        """The writable root's file of ``key`` as it is (None when absent or unreadable)."""
        try:
            blob = self.local.read(key, self.settings.max_entry_size, fresh=True)
        except (CorruptEntry, OSError):
            return None
        return None if blob is None else blob.data

    def get_or_create(self, key: str, create: Callable[[], Entry], *,
                      components: dict | None = None, count: bool = True,
                      while_waiting: Callable[[], None] | None = None,
                      recache: bool = False) -> tuple[Entry, bool]:
        """Single flight: the cached entry, or ``create()``'s, built by one process only.

        Looks up ``key``; on a miss takes its lock, looks again (another process may have
        created it meanwhile), else calls ``create()`` (-> Entry) and puts the result. Returns
        ``(entry, was_hit)``. A holder of the lock that is stopped (no heartbeat for
        KCACHE_LOCK_STALE seconds) is not waited for: this process compiles and publishes too
        (``lock_stale``, warned once). Counts exactly one hit or one miss, or neither with
        ``count=False`` (an existence check, e.g. ``compile_for``: not a use). Compiles are
        not counted here: the caller records them (``record(compiles=1, compile_seconds=...)``).
        ``while_waiting()``: called when another process holds the key's lock (or another
        machine the remote tier's lease), before this one waits for its entry: work the wait
        hides (kcache.dispatcher readies the compiler for this process's own compiles); what
        it raises is ignored, its seconds count against the lock timeout (the remote wait).
        ``recache``: ``create()`` under the lock and put, overwriting what is there (ccache's
        ``--recache``): a miss, never a hit. Raises LockTimeout, or whatever ``create`` raises."""
        check_key(key)
        if self.disabled:
            return create(), False
        found = None if recache else self._reader.read(key, touch=count, recheck=False)  # again below
        if found is not None:
            return (self._hit(key, found) if count else found[1]), True
        with self._compile_lock(key, while_waiting):
            # the remote was asked just now
            found = None if recache else self._reader.read(key, touch=count, remote=False)
            if found is not None:
                return (self._hit(key, found) if count else found[1]), True
            if self.remote is None or recache:
                return self._create(key, create, components, count), False
            # Across machines: the remote tier's lease (Redis) makes one machine compile while
            # the others wait for its value (bounded by KCACHE_REMOTE_WAIT).
            policy = self._remote_policy
            with policy.tier.single_flight(key, policy.limit(),
                                           max_wait=policy.remote_settings.max_wait,
                                           while_waiting=while_waiting) as flight:
                if flight.waited:
                    self._count(key, remote_wait_seconds=flight.waited)
                if flight.error is not None:
                    policy.error(flight.error)
                found = policy.use(key, flight.blob, count) if flight.blob is not None else None
                if found is not None:
                    return (self._hit(key, found) if count else found[1]), True
                return self._create(key, create, components, count), False

    def _create(self, key: str, create, components, count: bool) -> Entry:
        """A miss: ``create()`` and put (which publishes to the remote tier too)."""
        if count:
            self._count(key, misses=1)
        ent = create()
        self.put(key, ent, components=components)
        return ent

    def copy_in(self, tier, keys=None, progress: Callable[[int, int], None] | None = None,
                where: Callable[[dict], bool] | None = None) -> "CopyReport":
        """Copy entries of ``tier`` (a bundle, a remote tier: :meth:`require_remote`) into
        the writable root, each through the verification path (:meth:`verify_bytes`, and
        the signature for the remote tier) before it is published.

        ``keys``: the keys to copy (default: all the tier holds). ``where(header) -> bool``:
        called with each verified entry's header (a dict: ``kernel``, ``arch``, ...); False
        leaves the entry out (``skipped``). An entry already in the root with the same bytes
        is left as it is (copying twice changes nothing). ``progress(done, total)`` is called
        per key. Returns a CopyReport: ``copied``, ``present`` and ``skipped`` (keys),
        ``failed`` ([(key, reason)]: absent, corrupt, not verified, not written). Never
        raises for a bad entry."""
        return self._transfer.copy_in(tier, keys, progress, where)

    def record(self, **counters: float) -> None:
        """Add to persistent counters, e.g. ``record(compiles=1, compile_seconds=0.8)``.
        Names: see Stats (not the totals entries/bytes). TypeError for an unknown name or a
        value that is not a number, ValueError for a non-finite one."""
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
        if self.local.entry_stat(key) is None:
            return False
        batch = _maintenance().Removals(self._housekeeping())
        try:
            return isinstance(batch.remove(key), int)
        finally:
            batch.write()

    def remove_many(self, keys) -> RemoveReport:
        """Remove the entries of ``keys`` (an iterable of keys) from the writable root, each
        under its key lock (waiting up to lock_timeout). Never stops at a failing entry:
        returns a RemoveReport (int: how many removed; ``bytes_freed``; ``failed``: a
        NotRemoved per key left, with the reason, "no such entry" for one absent from the
        writable root). Totals are updated for exactly the files removed. ValueError for a bad
        key (before anything is removed)."""
        return _maintenance().remove_many(self._housekeeping(), [check_key(k) for k in keys])

    def clear(self) -> RemoveReport:
        """Remove every entry of the writable root (read-only layers untouched).

        Returns a RemoveReport: an int (how many were removed) with ``bytes_freed`` and
        ``failed`` (a NotRemoved per entry left in place: busy lock, not a regular file,
        newer format, OS error such as EROFS). Goes on past failing entries; totals are
        updated for exactly the files removed. Files whose names are not entry names are
        never touched. kcache's own old temp files and remembered code analyses go too."""
        return _maintenance().clear(self._housekeeping())

    # -- eviction / maintenance ---------------------------------------------------------------------
    def _housekeeping(self) -> "maintenance.Housekeeping":
        """The interface maintenance works through (kcache.maintenance.Housekeeping)."""
        self.local.flush_touches()  # LRU order as of now: this process's uses count
        return _maintenance().Housekeeping(
            local=self.local, tiers=self._local_tiers(), locks=self._locks, stats=self._stats,
            max_entry_size=self.settings.max_entry_size,
            quarantine_age=self.settings.quarantine_age, lock_timeout=self.lock_timeout,
            writable=lambda: self.writable, ensure_root=self._root.ensure, count=self._count,
            info=self._listing.info, info_or_broken=self._listing.info_or_broken,
            verify_bytes=self.verify_bytes, quarantine=self._reader.quarantine)

    def _note_totals(self, key: str) -> None:
        s = shard_of(key)
        self._totals[s] = self._stats.shard_totals(s)

    def _maybe_evict(self, newest: int = 0) -> None:
        now = time.monotonic()
        if now - self._totals_at > _TOTALS_TTL or len(self._totals) < SHARDS:
            self._totals = {s: self._stats.shard_totals(s) for s in range(SHARDS)}
            self._totals_at = now
        if newest:  # an entry just put that no eviction would keep is said once
            _maintenance().warn_over_cap(newest, self.max_size)
        if sum(b for _n, b in self._totals.values()) <= self.max_size:
            return
        try:
            _maintenance().evict_over_cap(self._housekeeping(), self.max_size, self._file_mode)
        finally:
            self._totals_at = 0.0

    def _evict(self, target: int) -> None:
        """Remove least-recently-used entries until the root holds <= ``target`` bytes."""
        _maintenance().evict(self._housekeeping(), target)

    def prune(self, max_size=None, older_than=None, where=None, dry_run: bool = False) -> PruneReport:
        """Remove entries of the writable root (read-only layers are never touched).

        ``older_than`` (seconds, or duration text): entries not used for that long;
        ``where(EntryInfo) -> bool``: True = remove (headers are read only when given);
        ``max_size`` (bytes or size text; default the store's max_size): then remove least
        recently used entries until the rest fits. kcache's own temp files older than an
        hour, lock files of absent entries unused for an hour and quarantined files older
        than ``quarantine_age`` (default 30 days) are swept; with ``older_than``, files of
        remembered code analyses not used for that long too (``code_memos``). ``dry_run``
        reports without removing. Removals count as ``evictions``."""
        cap = self.max_size if max_size is None else parse_size(max_size, "max_size")
        age = None if older_than is None else parse_duration(older_than, "older_than")
        if self.local not in self._tiers:
            from .reports import PruneReport
            return PruneReport(dry_run=dry_run)
        return _maintenance().prune(self._housekeeping(), cap, age, where, dry_run)

    def verify(self, fix: bool = False, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
        """Fully check every entry of every trusted root, through the same checks as
        :meth:`get`. ``fix``: quarantine defective entries of the writable root
        (``quarantined`` counts those actually moved, ``not_quarantined`` says why others
        were left; each move subtracts the file from the totals). The totals are never
        recounted here (see :meth:`recount`). ``progress(done, total)`` is called per entry.
        A file named like an entry but not a regular file (e.g. a directory) is corrupt."""
        return _maintenance().verify(self._housekeeping(), fix, progress)

    # -- counters ---------------------------------------------------------------------------------
    def stats(self) -> Stats:
        """Persistent counters summed over the 16 shards (plus this process's unwritten ones),
        and what the quarantine and the remembered code analyses (``v1/code/``) hold."""
        from .reports import Stats
        if self.writable and self._root.ready:
            self._stats.flush()
        values = {k: v for k, v in self._stats.read().items() if k in Stats.__dataclass_fields__}
        s = Stats(**values)
        for name in Stats.__dataclass_fields__:
            if name not in ("compile_seconds", "seconds_saved", "remote_wait_seconds"):
                setattr(s, name, int(getattr(s, name)))
        s.max_size = self.max_size
        if self.local in self._tiers:
            s.quarantine_files, s.quarantine_bytes = files_and_bytes(self.local.quarantined())
            s.code_memo_files, s.code_memo_bytes = files_and_bytes(self.local.code_memos())
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
            exc = self._root.write_exc
            raise OSError(exc.errno if exc else errno.EIO,
                          f"the statistics were not zeroed: {self.write_problem or 'cannot write'}",
                          str(self.layout.stats))

    def recount(self) -> Stats:
        """Rebuild the totals (entries, bytes) from a scan of the writable root; returns stats().

        The step to take after files were copied into the cache (seeding it from a warmed
        one), changed or removed behind the store's back, or after a process was killed in
        a bulk removal: the store counts only what it writes and removes, so until then such
        files are missing from the totals and the size cap sees too few bytes. Exact only when
        no other process writes meanwhile (a put between the scan and the write is lost from
        the totals), so never run implicitly. (Totals above what is on disk, as writers killed
        in a bulk removal leave them, are lowered by the next eviction pass on its own.)"""
        if self.local in self._tiers:
            _maintenance().recount(self._housekeeping())
        return self.stats()

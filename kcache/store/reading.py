"""The verification path: every value from any tier crosses :meth:`VerificationPath.verify_bytes`
(format, bounds, schema, checksum: kcache.entry.decode) before it is used, and a defective one
is dealt with here: quarantined in the writable root under its key lock (``corrupt`` +1,
totals adjusted), remembered by identity in a read-only layer (never re-read while
unchanged), warned once. A newer-format entry is left alone; an unreadable one is a miss.
A part of :class:`kcache.Store` (:class:`Reader`), made with what it uses.
"""
from __future__ import annotations

import stat
from typing import Callable

from ..entry import artifacts
from ..entry import format as fmt
from ..entry.format import Entry
from ..errors import CorruptEntry, NewerFormat
from ..keys import check_key
from ..tiers.local import GONE, KnownBad, identity as _identity, os_reason
from ..tiers.local import BUSY
from .verified import VERIFIED
from ..warn import warn_once


def verify_bytes(key: str, data: bytes, *, hit: bool = False,
                 intact: bool = False) -> tuple[dict, Entry]:
    """The one check every value from any tier crosses before it is used: the entry
    format (kcache.entry.format.decode: bounds, checksum, header schema, decoding limits).
    A kernel or program entry's artifacts must also pass kcache.entry.artifacts (never handed to
    the driver otherwise). Returns (header, Entry); raises CorruptEntry (with ``code``) or
    NewerFormat. Bytes equal, byte for byte, to bytes of ``key`` that passed here before in
    this process have that verdict without its cost (kcache.store.verified). ``hit``: a file of
    this machine's cache read for a hit, whose artifacts may be checked by their own sums
    instead of the whole file's checksum (kcache.entry, "A cache hit"). ``intact``: the tier
    compared every byte with a digest of a checked index just now (Blob.intact): the entry's
    own checksums are not computed again, everything else is checked."""
    if VERIFIED.known(key, data, whole=not hit):
        return fmt.decode_verified(data, key)
    header, ent = fmt.decode(data, key, whole=not hit, intact=intact)
    why = artifacts.problem(ent.artifacts, ent.meta)
    if why is not None:
        raise CorruptEntry(why, "artifacts")
    if not intact:  # a verdict without the entry's own checksums is not for other reads
        VERIFIED.remember(key, data, whole=not hit)
    return header, ent


class Reader:
    """Reading and checking entries for :class:`kcache.Store`. ``local``: the writable root's
    LocalTier; ``tiers()``: the trusted local tiers in read order; ``remote``: the store's
    RemotePolicy (read after the local tiers); ``root``: its WritableRoot; ``locks()``: its
    KeyLocks (made on first use); ``stats``: its StatsBook; ``count(key, now=False,
    **counters)``; ``disabled()``; ``max_entry_size`` (bytes)."""

    def __init__(self, *, local, tiers: Callable[[], tuple], remote, root, locks: Callable,
                 stats, count, disabled: Callable[[], bool], max_entry_size: int):
        self.local, self.layout = local, local.layout
        self._tiers, self._remote, self._root, self._locks = tiers, remote, root, locks
        self._stats, self._count, self._disabled = stats, count, disabled
        self._max_entry_size = max_entry_size
        self._corrupt_seen: set[tuple] = set()  # identities of defective files counted once

    def read(self, key: str, touch: bool, remote: bool = True, recheck: bool = True):
        """(header, Entry, tier) of the first tier holding a valid entry for ``key``, or None.
        Defects on the way are counted, quarantined (writable root) or remembered (layers),
        and warned once; unusable tiers are a miss. ``touch`` records the use of what is read
        in the writable root (the LRU clock; a corrupt file touched so is quarantined next)
        and counts a remote hit or miss: without it the read is an existence check, which
        counts none (a remote error or refused value is still counted). ``recheck=False``:
        a read whose miss is followed by one with it (LocalTier.read)."""
        limit = self._max_entry_size
        for tier in self._tiers():
            blob = None
            try:  # a local tier (the root or a read-only layer; kcache.tiers.tier says why)
                blob = tier.read(key, limit, touch=touch and tier.writable and self._root.writable,
                                 recheck=recheck)
                if blob is None:
                    continue
                # a file of this machine's cache: a hit's check (verify_bytes)
                header, ent = verify_bytes(key, blob.data, hit=True, intact=blob.intact)
            except KnownBad:
                continue
            except NewerFormat as exc:
                warn_once("newer", f"kcache: the entry of {key} in {tier.name} was written by a "
                          f"newer kcache ({exc}); left untouched, treated as a miss")
                continue
            except CorruptEntry as exc:
                self._bad(tier, key, exc, getattr(exc, "stat", None), blob)
                continue
            except OSError as exc:  # unreadable (permissions, I/O error): a miss
                warn_once("unreadable", f"kcache: cannot read the entry of {key} in {tier.name} "
                          f"({os_reason(exc)}); treated as a miss")
                continue
            return header, ent, tier
        return self._remote.read(key, count=touch) if remote else None

    def reject(self, key: str, entry: Entry, reason: str) -> None:
        """``entry`` of ``key``, served by a read that counted a hit, was refused by what uses
        it (a field its consumer cannot take, e.g. the dispatcher's rebuild raised): the hit is
        counted as a miss, and the first local file still holding these contents is corrupt
        (:meth:`_bad`: quarantined from the writable root; a read-only layer's remembered
        for this process; ``corrupt`` +1, warned once with ``reason``). A file replaced
        meanwhile is left alone, as is a remote value (the caller stores the entry again)."""
        saved = entry.meta.get("compile_seconds") if isinstance(entry.meta, dict) else None
        saved = float(saved) if type(saved) in (int, float) and 0 < saved <= fmt.MAX_SECONDS else 0.0
        self._count(key, hits=-1, seconds_saved=-saved, misses=1)
        self._stats.forget(key)  # its use was no use; the entry stored next starts afresh
        for tier in self._tiers():
            st = tier.entry_stat(key)
            if st is None or not stat.S_ISREG(st.st_mode):
                continue
            try:  # the file as it is now: the root's is quarantined by what lstat saw, so it
                # must be what is read; a layer's is remembered by what is read (blob.ident)
                blob = tier.read(key, self._max_entry_size)
                if blob is None or (tier.writable and blob.ident != _identity(st)):
                    continue
                same = verify_bytes(key, blob.data, hit=True)[1] == entry
            except (CorruptEntry, NewerFormat, OSError):
                continue
            if same:
                self._bad(tier, key, CorruptEntry(reason, "invalid"), st, blob)
                return

    def _bad(self, tier, key: str, exc: CorruptEntry, st, blob) -> None:
        """A defective value: quarantine it (writable root) or remember it (a layer: not
        re-read while unchanged); count it once per file and process; warn once."""
        ident = blob.ident if blob is not None and blob.ident else _identity(st)
        if tier.writable:  # the root: quarantined; a read-only layer's file is remembered
            self.quarantine(key, str(exc), st, ident)
            return
        tier.mark_bad(ident)
        self._count_corrupt(key, ident)
        warn_once("corrupt", f"kcache: corrupt cache entry of {key} in {tier.name} ({exc}); "
                  "treated as a miss, left in place (read-only)")

    def _count_corrupt(self, key: str, ident) -> None:
        if ident is None or ident not in self._corrupt_seen:
            if ident is not None:
                self._corrupt_seen.add(ident)
            self._count(key, now=True, corrupt=1)

    def quarantine(self, key: str, reason: str, st, ident=None) -> str | None:
        """Move a defective entry of the writable root to quarantine under its key lock,
        count it, warn once (saying truthfully whether it was moved). Returns None when
        moved, GONE when it vanished or was replaced meanwhile, else why it was left."""
        why = self._move_to_quarantine(key, st)
        if why is None:
            fate = f"moved to {self.layout.quarantine}"
        elif why == GONE:
            fate = "already replaced or removed"
        else:
            fate = f"left in place: {why}"
            self.local.mark_bad(ident or _identity(st))  # not re-read while unchanged
            self._count_corrupt(key, ident or _identity(st))
        warn_once("corrupt", f"kcache: corrupt cache entry {self.layout.entry(key)} ({reason}); "
                  f"treated as a miss, {fate}")
        return why

    def _move_to_quarantine(self, key: str, st) -> str | None:
        if self._disabled():
            return "kcache is disabled (KCACHE_DISABLE)"
        if not self._root.writable or not self._root.ensure():
            return f"cache root not writable: {self._root.write_problem}"
        with self._locks().hold(key, blocking=False) as held:
            if held is False:
                return BUSY  # another process is writing this key; it will replace the file
            why = self.local.quarantine(key, st)
            if why is None:
                self._stats.forget(key)
                regular = st is None or stat.S_ISREG(st.st_mode)
                size = st.st_size if st is not None and regular else 0
                self._count(key, now=True, corrupt=1, entries=-1 if regular else 0, bytes=-size)
        return why

    def load(self, key: str, root: str | None = None) -> Entry:
        """Full read and check of ``key`` (no counters, no touch, no quarantine), through
        the same verification path as :meth:`get`; ``root``: that root's or layer's copy only
        (its name, ``EntryInfo.root``).

        Raises KeyError if no root has it, CorruptEntry or NewerFormat for a bad file."""
        check_key(key)
        error: Exception | None = None
        for tier in self._tiers():
            if root is not None and tier.name != str(root):
                continue
            try:
                blob = tier.read(key, self._max_entry_size)
                if blob is None:
                    continue
                return verify_bytes(key, blob.data)[1]
            except KnownBad:
                continue
            except (CorruptEntry, NewerFormat) as exc:
                if error is None:
                    error = type(exc)(f"{tier.entry_path(key)}: {exc}")
                    error.code = getattr(exc, "code", "invalid")
            except OSError as exc:
                error = error or CorruptEntry(f"{tier.entry_path(key)}: unreadable: "
                                              f"{os_reason(exc)}", "unreadable")
        if error is not None:
            raise error
        raise KeyError(key)

    def entry_bytes(self, key: str) -> bytes | None:
        """The verified bytes of ``key``'s entry from the first local tier holding a valid
        one (None if none does): for export and push. No counters, no touch."""
        check_key(key)
        for tier in self._tiers():
            try:
                blob = tier.read(key, self._max_entry_size)
                if blob is not None:
                    verify_bytes(key, blob.data)
                    return blob.data
            except (CorruptEntry, NewerFormat, OSError):
                continue
        return None

"""Entry bytes this process verified, remembered: a later read of the same key whose bytes are
equal to them, byte for byte, has their verification's verdict without paying for it again
(the BLAKE2b-256 of every byte and the artifact check: most of a hit of a large entry).

Sound because verification (:meth:`kcache.Store.verify_bytes`: kcache.entry.decode and
kcache.artifacts.problem) depends on the key and the bytes alone, and the comparison covers
every byte (one memcmp, far cheaper than a hash): a changed bit anywhere is a full
verification again. Only the check is remembered, never a read: every get still opens and
reads the file (a removed, replaced or damaged entry is seen at once), checks its size and
first bytes, and counts and touches the hit; the header and artifacts handed out are decoded
afresh from the bytes just read (kcache.entry.decode_verified), so callers never share them.

Bounded: a key's bytes are kept from its second verification on (a process that reads each
entry once, as a kernel's dispatcher does, keeps none), at most MAX_BYTES in all, the least
recently used dropped first, none over MAX_ONE bytes.
"""
from __future__ import annotations

import collections
import os
import threading

MAX_BYTES = 32 << 20  # bytes kept in all
MAX_ONE = 4 << 20  # bytes of the largest entry kept
MAX_NOTED = 4096  # keys verified once remembered (then forgotten all at once)


class Verified:
    """The verified bytes of one process (:data:`VERIFIED`), thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._kept: collections.OrderedDict[str, bytes] = collections.OrderedDict()
        self._noted: set[str] = set()  # keys verified once
        self._by_sums: set[str] = set()  # keys whose kept bytes a hit checked by their sums
        self._size = 0

    def known(self, key: str, data, whole: bool = False) -> bool:
        """True when ``data`` (bytes-like) is, byte for byte, what ``key``'s entry was when it
        passed verification in this process; with ``whole``, only a verification that checked
        the whole file (not a hit's check by the artifacts' sums: kcache.entry) counts."""
        with self._lock:
            kept = self._kept.get(key)
            if kept is None or len(kept) != len(data) or (whole and key in self._by_sums):
                return False
            self._kept.move_to_end(key)
        return kept is data or kept == data

    def remember(self, key: str, data, whole: bool = True) -> None:
        """``data`` passed verification as ``key``'s entry (``whole``: the whole file's check,
        else a hit's check by the artifacts' sums): noted the first time, kept (an immutable
        copy when it is not bytes) from the second on."""
        if len(data) > MAX_ONE:
            return
        with self._lock:
            if key not in self._noted and key not in self._kept:
                if len(self._noted) >= MAX_NOTED:
                    self._noted.clear()
                self._noted.add(key)
                return
            self._noted.discard(key)
            copy = data if isinstance(data, bytes) else bytes(data)
            old = self._kept.pop(key, None)
            self._size += len(copy) - (len(old) if old is not None else 0)
            self._kept[key] = copy
            if whole:  # the kept bytes have the verdict of this verification
                self._by_sums.discard(key)
            else:
                self._by_sums.add(key)
            while self._size > MAX_BYTES:
                dropped_key, dropped = self._kept.popitem(last=False)
                self._by_sums.discard(dropped_key)
                self._size -= len(dropped)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # another thread of the parent may have held it

    def clear(self) -> None:
        """Forget everything (tests, benchmarks of a process's first read)."""
        with self._lock:
            self._kept.clear()
            self._noted.clear()
            self._by_sums.clear()
            self._size = 0


VERIFIED = Verified()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=VERIFIED._after_fork)

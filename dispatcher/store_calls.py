"""The store calls a kernel dispatcher makes after a compile (publish an entry, add to the
counters) or after refusing a served entry, shared by every front-end's dispatcher class: a
failure there is counted and said once, never raised into the user's kernel call."""
from __future__ import annotations

from kcache.text import cut
from kcache.warn import warn_once

from .process import STATE


class RefusedEntry(Exception):
    """Raised by a front-end's rebuild step when ``kernel_entry.entry_to_kernel`` refused a
    served entry's content (a field it cannot take; ``__cause__``: what it raised), as opposed
    to the driver refusing to load a valid cubin: the entry is then corrupt
    (:meth:`StoreCalls._kcache_reject`) and the kernel compiled and stored again."""


class StoreCalls:
    """Methods for a kernel dispatcher class (a base beside the front-end's dispatcher) that
    keeps its own counters in ``_kcache_counts``."""

    __slots__ = ()  # adds nothing to the instance: adopt() may assign __class__ on a dispatcher

    def _kcache_put(self, store, key, entry, components):
        try:
            store.put(key, entry, components=components)
        except Exception as exc:
            self._kcache_store_failed(exc)

    def _kcache_record(self, store, **counters):
        try:
            store.record(**counters)
        except Exception as exc:
            self._kcache_store_failed(exc)

    def _kcache_store_failed(self, exc):
        self._kcache_counts["store_errors"] += 1
        STATE.counts["store_errors"] += 1
        warn_once("dispatcher-store-error", f"kcache: cache store failed ({type(exc).__name__}: "
                  f"{cut(exc)}); kernels still compile and run")

    def _kcache_reject(self, store, key, entry, exc) -> str:
        """``entry``, served for ``key``, refused by the rebuild (``exc``: what
        ``entry_to_kernel`` raised): the store counts a miss instead of the hit and treats the
        file as corrupt (``Store.reject``: quarantined, or a layer's remembered, warned once
        naming this kernel). Returns the reason, one line; the caller compiles and stores the
        kernel again over the entry."""
        # (the entry's own words may be quoted: escaped and cut)
        reason = f"refused by the rebuild of {self._kcache_name()}: {type(exc).__name__}: {cut(exc)}"
        try:
            store.reject(key, entry, reason)
        except Exception as failed:
            self._kcache_store_failed(failed)
        return reason

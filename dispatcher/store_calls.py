"""The store calls a kernel dispatcher makes after a compile (publish an entry, add to the
counters), shared by every front-end's dispatcher class: a failure there is counted and said
once, never raised into the user's kernel call."""
from __future__ import annotations

from kcache.text import cut
from kcache.warn import warn_once

from .process import STATE


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

"""``KCacheStats``: what ``stats`` of a kcache numba-cuda-mlir dispatcher returns."""
from __future__ import annotations

import collections


class KCacheStats(collections.namedtuple("_CompileStats", (
        "cache_path", "cache_hits", "cache_misses"))):
    """``dispatcher.stats``: numba-cuda-mlir's ``_CompileStats``, a tuple of its three fields
    (its suite checks ``_fields``; ``path, hits, misses = kernel.stats`` unpacks), with
    kcache's figures as attributes named as ``kcache.dispatcher.KCacheStats``'s fields for
    numba-cuda kernels (:data:`EXTRA_FIELDS`; None where not given). Copies, pickles and
    ``_replace`` keep them."""

    EXTRA_FIELDS = ("compiles", "compile_seconds", "uncached", "store_errors", "fallbacks",
                    "keys", "bypassed", "inspect_compiles")
    # None where not given (``_make`` gives none)
    compiles = compile_seconds = uncached = store_errors = None
    fallbacks = keys = bypassed = inspect_compiles = None

    def __new__(cls, cache_path, cache_hits, cache_misses, **extra):
        unknown = set(extra) - set(cls.EXTRA_FIELDS)
        if unknown:
            raise TypeError(f"KCacheStats has no field {sorted(unknown)[0]!r}")
        made = super().__new__(cls, cache_path, cache_hits, cache_misses)
        made.__dict__.update(extra)
        return made

    def _replace(self, **changes):
        made = super()._replace(**changes)
        made.__dict__.update(self.__dict__)
        return made

"""numba-cuda integration: kernels served from the kcache store (see docs/design.md and
docs/dispatcher.md).

Public API: :func:`jit`, :func:`install`, :func:`uninstall`, :func:`compile_for`,
:func:`explain`, :class:`KCacheDispatcher`. Importing this package imports numba-cuda.
"""
from __future__ import annotations

from .aot import compile_for, parse_cc
from .dispatcher import (KCacheDispatcher, KCacheStats, Options, explain_enabled, process_counts,
                         set_explain)
from .fingerprint import Uncacheable
from .install import install, installed, uninstall
from .jit import jit

__all__ = ["jit", "install", "uninstall", "installed", "compile_for", "parse_cc", "explain",
           "KCacheDispatcher", "KCacheStats", "Options", "Uncacheable", "process_counts",
           "explain_enabled"]


def explain(target=True):
    """Explain cache misses.

    ``explain(True)`` / ``explain(False)``: log, for every later miss in this process, which
    key component differs from the nearest entry of the same kernel (logger
    ``kcache.explain``; the same as ``KCACHE_EXPLAIN=1``). ``explain(dispatcher)``: the lines
    logged so far for that kernel's misses and uncached compiles (list of str). Raises
    TypeError for anything else.
    """
    if isinstance(target, bool):
        set_explain(target)
        return None
    if isinstance(target, KCacheDispatcher):
        lines = list(target.kcache_explanations)
        lines += [f"{sig}: not cached: {why}" for sig, why in target.stats.uncached.items()
                  if not any(why in line for line in lines)]
        return lines
    raise TypeError(f"kcache.explain takes True/False or a kcache dispatcher, not {target!r:.60}")

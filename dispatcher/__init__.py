"""numba-cuda integration: kernels served from the kcache store (see docs/design.md and
docs/dispatcher.md).

Public API: :func:`jit`, :func:`install`, :func:`uninstall`, :func:`compile_for`,
:func:`explain`, :class:`KCacheDispatcher`. Importing this package imports numba-cuda.
"""
from __future__ import annotations

import sys as _sys

from ._compat import CUDADispatcher as _CUDADispatcher
from .aot import (CompiledEntry, CompileForError, NotStored, check_cc, compile_for,
                  compile_for_report, parse_cc)
from .dispatcher import (KCacheDispatcher, KCacheStats, Options, explain_enabled, process_counts,
                         set_explain)
from .fingerprint import Uncacheable
from .install import install, installed, uninstall
from .jit import jit

__all__ = ["jit", "install", "uninstall", "installed", "compile_for", "compile_for_report",
           "CompileForError", "CompiledEntry", "NotStored", "parse_cc", "check_cc", "explain",
           "KCacheDispatcher", "KCacheStats", "Options", "Uncacheable", "process_counts",
           "explain_enabled"]


def explain(target=True):
    """Explain cache misses.

    ``explain(True)`` / ``explain(False)``: log, for every later miss in this process (kernel
    calls and ``compile_for`` alike), which key component differs from the nearest entry of
    the same kernel (logger ``kcache.explain``; the same as ``KCACHE_EXPLAIN=1``).
    ``explain(kernel)`` (a kcache or numba-cuda kernel dispatcher): the lines logged so far
    for that kernel's misses and uncached compiles (list of str). Raises TypeError for
    anything else.
    """
    if isinstance(target, bool):
        set_explain(target)
        return None
    if isinstance(target, _CUDADispatcher):
        lines = list(getattr(target, "kcache_explanations", ()))
        if isinstance(target, KCacheDispatcher):
            lines += [f"{sig}: not cached: {why}" for sig, why in target.stats.uncached.items()
                      if not any(why in line for line in lines)]
        return lines
    raise TypeError(f"kcache.explain takes True/False or a kernel dispatcher, not {target!r:.60}")


# Last: the KCACHE_ENABLE hook (kcache._hook) waits for the whole package when numba.cuda was
# imported by this package's own import.
READY = True
if "kcache._hook" in _sys.modules:
    _sys.modules["kcache._hook"].dispatcher_ready()

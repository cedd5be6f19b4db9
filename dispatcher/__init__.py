"""numba-cuda and numba-cuda-mlir integration: kernels served from the kcache store (see
docs/design.md, docs/dispatcher.md and docs/mlir.md).

Public API: :func:`jit`, :func:`install`, :func:`uninstall`, :func:`compile_for`,
:func:`explain`, :class:`KCacheDispatcher` (numba-cuda's), ``KCacheMLIRDispatcher``
(numba-cuda-mlir's). Importing this package imports no front-end (and not the store: that
comes with the first cached kernel); each is imported when the program uses it.
"""
from __future__ import annotations

import importlib as _importlib
import sys as _sys

# Only what ``install`` needs is imported with the package (``KCACHE_ENABLE=1`` imports it in
# every process that imports numba.cuda, kernels or not): the dispatcher, the store and the
# key are imported when the first cached kernel is defined (the bridge's ``adopt``), compile_for
# and the rest when first asked for (module ``__getattr__``, as ``kcache`` itself does).
from .install import install, installed, uninstall
from .jit import jit

#: public name -> the submodule that defines it
_WHERE = {
    "CompiledEntry": ".aot", "CompileForError": ".aot", "NotStored": ".aot",
    "check_cc": ".aot", "compile_for": ".aot", "compile_for_report": ".aot", "parse_cc": ".aot",
    "KCacheDispatcher": ".frontends.numba_cuda.dispatcher",
    "KCacheStats": ".frontends.numba_cuda.dispatcher", "Options": ".options",
    "KCacheMLIRDispatcher": ".frontends.numba_cuda_mlir.dispatcher",
    "explain_enabled": ".process", "process_counts": ".process",
    "set_explain": ".process", "own_phases": ".process",
    "Uncacheable": ".fingerprint",
}

__all__ = ["jit", "install", "uninstall", "installed", "compile_for", "compile_for_report",
           "CompileForError", "CompiledEntry", "NotStored", "parse_cc", "check_cc", "explain",
           "KCacheDispatcher", "KCacheStats", "Options", "Uncacheable", "process_counts",
           "explain_enabled", "own_phases", "KCacheMLIRDispatcher"]


def __getattr__(name: str):
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = _importlib.import_module(where, __name__)
    except ImportError:
        # The bridge cannot be imported with this front-end release: say so in kcache's line.
        from . import frontends
        front = "numba-cuda-mlir" if "numba_cuda_mlir" in where else "numba-cuda"
        reason = frontends.by_name(front).refusal()  # ImportError: it is not installed at all
        if reason is None:
            raise
        from kcache.errors import KcacheError
        raise KcacheError(reason) from None
    value = getattr(module, name)
    globals()[name] = value  # later look-ups are plain attribute reads
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


def explain(target=True):
    """Explain cache misses.

    ``explain(True)`` / ``explain(False)``: log, for every later miss in this process (kernel
    calls and ``compile_for`` alike), which key component differs from the nearest entry of
    the same kernel (logger ``kcache.explain``; the same as ``KCACHE_EXPLAIN=1``).
    ``explain(kernel)`` (a kernel dispatcher: kcache's, numba-cuda's or numba-cuda-mlir's):
    the lines logged so far for that kernel's misses and uncached compiles (list of str).
    Raises TypeError for anything else.
    """
    from .frontends import of_dispatcher
    from .process import set_explain
    if isinstance(target, bool):
        set_explain(target)
        return None
    frontend = of_dispatcher(target)
    if frontend is not None:
        KCacheDispatcher = frontend.dispatcher_class()
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

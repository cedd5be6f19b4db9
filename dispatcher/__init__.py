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
# every process that imports a front-end, kernels or not): the dispatcher, the store and the
# key are imported when the first cached kernel is defined (the bridge's ``adopt``),
# ``compile_for``'s module when it is first called, and the rest when first asked for (module
# ``__getattr__``, as ``kcache`` itself does). This module picks the front-end for its public
# functions (``frontends``' selectors: the kernel's, else the one imported or installed); the
# generic modules are handed it.
from . import frontends as _frontends
from .install import install, installed, uninstall
from .jit import jit

#: public name -> the submodule that defines it
_WHERE = {
    "CompiledEntry": ".aot", "CompileForError": ".aot", "NotStored": ".aot", "parse_cc": ".aot",
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
    except ImportError as exc:  # the bridge cannot be imported with this release: kcache's one line
        wanted = "numba-cuda-mlir" if "mlir" in where else "numba-cuda"
        try:
            frontend = _frontends.by_name(wanted)
        except ImportError:  # not installed at all: which extra installs it, no chained trace
            raise ModuleNotFoundError(
                f"kcache.dispatcher.{name} needs {wanted}, which is not installed ({exc}); "
                f"{_frontends.install_hint([wanted])}", name=exc.name) from None
        _refuse(frontend)
        raise
    value = getattr(module, name)
    globals()[name] = value  # later look-ups are plain attribute reads
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


def _refuse(frontend) -> None:
    """Raise ``kcache.KcacheError`` with ``frontend``'s refusal line, if it has one."""
    reason = frontend.refusal()
    if reason is not None:
        from kcache.errors import KcacheError
        raise KcacheError(reason) from None


#: The compute capabilities ``compile_for`` compiles for when given none.
DEFAULT_CC = ((8, 0), (9, 0))


def compile_for(kernel, signatures, cc=DEFAULT_CC, store=None, *, cache_key=None,
                recache=None) -> list:
    """Compile ``kernel`` for each signature and compute capability and store the entries.

    ``kernel``: a kernel dispatcher (``kcache.jit``, ``numba.cuda.jit`` or
    ``numba_cuda_mlir.cuda.jit``; not a device function); ``signatures``: one signature
    (``"void(float32[::1])"``, a tuple of numba types) or a list of them; ``cc``: (major,
    minor) or a list of them (strings "9.0"/"sm_90" and floats 9.0 too; a string may list
    several, "8.0,9.0", as ``kcache warm --cc`` does), each one the installed CUDA toolkit
    supports; ``store``: a ``kcache.Store`` (default: the
    kernel's, else ``kcache.Store()``); ``cache_key``: as ``kcache.jit``'s (default: the
    kernel's). Entries already present are not recompiled, unless ``recache`` (default: the
    ``KCACHE_RECACHE`` setting): then each is compiled and stored again, overwriting the one
    present (ccache's ``--recache``): counted as a compile, never a hit or a miss. Returns
    the keys (str, 64 hex digits), one per (cc, signature), in that order.
    :func:`compile_for_report` gives more.

    Raises TypeError/ValueError for bad arguments (nothing compiled; a bad cc is
    ``kcache.arch.BadCC``, a ``kcache.KcacheError`` and a ValueError, one line), numba's
    errors for a kernel that does not compile, and :class:`CompileForError` (a
    ``kcache.KcacheError``) when any entry could not be stored: KCACHE_DISABLE is set, the
    root is read-only, missing or full, the kernel cannot be cached (``Uncacheable``'s
    reason), a lock timed out. It is raised after storing every entry that could be stored.
    Raises ``kcache.KcacheError`` with the bridge's refusal line (``Frontend.refusal``),
    before anything else, when the kernel's front-end is a release kcache does not support.
    """
    frontend = _kernels_frontend(kernel)
    from . import aot
    return aot.compile_for(frontend, kernel, signatures, cc, store, cache_key=cache_key,
                           recache=recache)


def compile_for_report(kernel, signatures, cc=DEFAULT_CC, store=None, *,
                       cache_key=None, recache=None) -> list:
    """:func:`compile_for`, returning a :class:`CompiledEntry` per (cc, signature) instead of
    its key: whether it was compiled now or already cached, and the compile seconds. Same
    arguments and errors."""
    frontend = _kernels_frontend(kernel)
    from . import aot
    return aot.compile_for_report(frontend, kernel, signatures, cc, store,
                                  cache_key=cache_key, recache=recache)


def _kernels_frontend(kernel):
    """The front-end of ``kernel`` (else the default one, whose checks then refuse it as no
    kernel of its), its refusal raised."""
    frontend = _frontends.of_dispatcher(kernel) or _frontends.default()
    _refuse(frontend)
    return frontend


def check_cc(cc) -> tuple:
    """:func:`parse_cc`, then check that the installed CUDA toolkit can compile for it (the
    list the default front-end reads from NVRTC; numba-cuda itself would silently pick the
    closest lower cc, or fail deep inside NVVM). Returns (major, minor); raises
    ``kcache.arch.BadCC`` (a ``kcache.KcacheError`` and a ValueError) naming the cc and the
    supported ones."""
    from . import aot
    return aot.check_cc(_frontends.default(), cc)


def explain(target=True):
    """Explain cache misses.

    ``explain(True)`` / ``explain(False)``: log, for every later miss in this process (kernel
    calls and ``compile_for`` alike), which key component differs from the nearest entry of
    the same kernel (logger ``kcache.explain``; the same as ``KCACHE_EXPLAIN=1``).
    ``explain(kernel)`` (a kernel dispatcher: kcache's, numba-cuda's or numba-cuda-mlir's):
    the lines logged so far for that kernel's misses and uncached compiles (list of str).
    Raises TypeError for anything else.
    """
    from .process import set_explain
    if isinstance(target, bool):
        set_explain(target)
        return None
    frontend = _frontends.of_dispatcher(target)
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

"""``kcache.jit``: a front-end's ``jit`` (``numba.cuda.jit``, ``numba_cuda_mlir.cuda.jit``) with
kcache caching on by default."""
from __future__ import annotations

import inspect

from . import frontends
from .install import adopting


def jit(func_or_sig=None, *, cache: bool = True, cache_key: str | None = None, store=None,
        frontend: str | None = None, **kwargs):
    """JIT-compile a Python function for CUDA GPUs, with kernels cached by kcache.

    Takes every argument of the front-end's ``jit`` (signatures as first argument for eager
    compilation, ``device``, ``link``, ``debug``, ``lineinfo``, ``fastmath``, ``opt``,
    ``max_registers``, ``lto``, ``launch_bounds``, ``extensions``, ...) and behaves the same,
    except: ``cache`` (bool, default True) uses the kcache store, never the front-end's pickle
    cache; ``cache_key`` (str or None) is mixed into every key (e.g. a release id); ``store``
    is a ``kcache.Store`` (default: ``kcache.Store()`` configured by ``KCACHE_*``);
    ``frontend``: ``"numba-cuda"`` (``numba.cuda.jit``) or ``"numba-cuda-mlir"``
    (``numba_cuda_mlir.cuda.jit``); default: the one whose package the function's globals
    name (``from numba_cuda_mlir import cuda``: ``frontends.of_function``), else the
    one the program imported, numba-cuda first, else the one installed
    (``frontends.default``). Returns kcache's dispatcher of that
    front-end (device functions: the front-end's own) or, given only signatures, a
    decorator. Errors are the front-end's; a non-str ``cache_key`` is a TypeError, an unknown
    ``frontend`` a ValueError, one not installed a ModuleNotFoundError naming its extra. With
    a front-end release kcache does not support (``Frontend.refusal``: warned once), the
    front-end's ``jit(func_or_sig, **kwargs)`` itself: nothing cached.
    """
    if cache_key is not None and not isinstance(cache_key, str):  # as Options() says it
        raise TypeError(f"cache_key must be a str or None, not {type(cache_key).__name__}")
    if frontend is None and not inspect.isfunction(func_or_sig):
        # signatures (or nothing) first: the front-end is chosen once the function is seen
        def decorator(func):
            chosen_name = frontends.of_function(func) or frontends.default().name
            if func_or_sig is None:
                return jit(func, cache=cache, cache_key=cache_key, store=store,
                           frontend=chosen_name, **kwargs)
            return jit(func_or_sig, cache=cache, cache_key=cache_key, store=store,
                       frontend=chosen_name, **kwargs)(func)
        return decorator
    if frontend is None:
        frontend = frontends.of_function(func_or_sig)
    chosen = _named(frontend) if frontend is not None else frontends.default()
    if func_or_sig is None:
        def decorator(func):
            return jit(func, cache=cache, cache_key=cache_key, store=store,
                       frontend=chosen.name, **kwargs)
        return decorator
    front_jit = chosen.jit()
    if chosen.warn_refusal():
        return front_jit(func_or_sig, **kwargs)

    from .options import Options  # the store and the key come with the first kernel

    options = Options(store=store, cache=cache, cache_key=cache_key)
    with adopting(options, chosen):
        result = front_jit(func_or_sig, cache=True, **kwargs)
    if not (chosen.is_signature(func_or_sig) or isinstance(func_or_sig, list)):
        return result  # a function was given: result is its dispatcher

    def compile_with_signatures(func):
        with adopting(options, chosen):
            return result(func)
    return compile_with_signatures


def _named(frontend: str):
    """``frontends.by_name(frontend)``; a front-end that is not installed (or does not
    import) is a ModuleNotFoundError naming it and the extra that installs it."""
    try:
        return frontends.by_name(frontend)
    except ImportError as exc:
        name = frontends.ALIASES.get(frontend, frontend)
        raise ModuleNotFoundError(f"kcache.jit(frontend={frontend!r}) needs {name}, which is "
                                  f"not installed or does not import ({exc}); "
                                  f"{frontends.install_hint([name])}", name=exc.name) from exc

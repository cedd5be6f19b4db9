"""``kcache.jit``: ``numba.cuda.jit`` with kcache caching on by default."""
from __future__ import annotations

from .frontends.numba_cuda.bridge import FRONTEND
from .install import adopting


def jit(func_or_sig=None, *, cache: bool = True, cache_key: str | None = None, store=None,
        **kwargs):
    """JIT-compile a Python function for CUDA GPUs, with kernels cached by kcache.

    Takes every argument of ``numba.cuda.jit`` (signatures as first argument for eager
    compilation, ``device``, ``link``, ``debug``, ``lineinfo``, ``fastmath``, ``opt``,
    ``max_registers``, ``lto``, ``launch_bounds``, ``extensions``, ...) and behaves the same,
    except: ``cache`` (bool, default True) uses the kcache store, never numba-cuda's pickle
    cache; ``cache_key`` (str or None) is mixed into every key (e.g. a release id); ``store``
    is a ``kcache.Store`` (default: ``kcache.Store()`` configured by ``KCACHE_*``).
    Returns a :class:`~kcache.dispatcher.frontends.numba_cuda.dispatcher.KCacheDispatcher` (device functions: a
    plain ``CUDADispatcher``) or, given only signatures, a decorator. Errors are
    ``numba.cuda.jit``'s; a non-str ``cache_key`` is a TypeError. With a numba-cuda kcache
    does not support (``FRONTEND.refusal``: warned once), ``numba.cuda.jit(func_or_sig,
    **kwargs)`` itself: nothing cached.
    """
    from numba import cuda

    if cache_key is not None and not isinstance(cache_key, str):  # as Options() says it
        raise TypeError(f"cache_key must be a str or None, not {type(cache_key).__name__}")
    if func_or_sig is None:
        def decorator(func):
            return jit(func, cache=cache, cache_key=cache_key, store=store, **kwargs)
        return decorator
    if FRONTEND.warn_refusal():
        return cuda.jit(func_or_sig, **kwargs)

    from .options import Options  # the store and the key come with the first kernel

    options = Options(store=store, cache=cache, cache_key=cache_key)
    with adopting(options):
        result = cuda.jit(func_or_sig, cache=True, **kwargs)
    if not (FRONTEND.is_signature(func_or_sig) or isinstance(func_or_sig, list)):
        return result  # a function was given: result is its dispatcher

    def compile_with_signatures(func):
        with adopting(options):
            return result(func)
    return compile_with_signatures

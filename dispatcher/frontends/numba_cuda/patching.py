"""Transparent mode's patch of ``CUDADispatcher`` (``numba.cuda.jit(cache=True)`` -> kcache)
and numba-cuda 0.30's launch-configuration specializations."""
from __future__ import annotations

from . import internals as _internals
from .internals import CUDADispatcher

_originals: dict[str, object] = {}


def patch_dispatcher(on_enable_caching, on_init) -> None:
    """Route ``CUDADispatcher.enable_caching`` (called by ``numba.cuda.jit(cache=True)``) to
    ``on_enable_caching(dispatcher, original)`` and, after ``CUDADispatcher.__init__``, call
    ``on_init(dispatcher)``. Idempotent; :func:`unpatch_dispatcher` restores numba-cuda's."""
    if not _originals:
        _originals["enable_caching"] = CUDADispatcher.__dict__["enable_caching"]
        _originals["__init__"] = CUDADispatcher.__dict__["__init__"]
    original_enable = _originals["enable_caching"]
    original_init = _originals["__init__"]

    def enable_caching(self):
        on_enable_caching(self, original_enable)

    def __init__(self, py_func, targetoptions, *args, **kwargs):
        original_init(self, py_func, targetoptions, *args, **kwargs)
        on_init(self)

    enable_caching.__doc__ = original_enable.__doc__
    __init__.__doc__ = original_init.__doc__
    enable_caching._kcache = __init__._kcache = True
    CUDADispatcher.enable_caching = enable_caching
    CUDADispatcher.__init__ = __init__


def unpatch_dispatcher() -> None:
    """Restore numba-cuda's ``CUDADispatcher.enable_caching`` and ``__init__``."""
    if _originals:
        CUDADispatcher.enable_caching = _originals.pop("enable_caching")
        CUDADispatcher.__init__ = _originals.pop("__init__")


def is_patched() -> bool:
    """True while :func:`patch_dispatcher` is in effect."""
    return getattr(CUDADispatcher.__dict__["enable_caching"], "_kcache", False)


def launch_config_key(dispatcher, launch_config):
    """numba-cuda's launch-config cache key for ``dispatcher`` (``_cache_launch_config_key``):
    ``(griddim, blockdim, sharedmem)`` or its "no launch configuration" marker
    (``dispatcher._NO_LAUNCH_CONFIG_CACHE_KEY``); the marker without :data:`LAUNCH_CONFIGS`."""
    if not _internals.LAUNCH_CONFIGS:
        return _internals.NO_LAUNCH_CONFIG
    return dispatcher._cache_launch_config_key(launch_config)


def launch_config_specialization(dispatcher, key, make):
    """The dispatcher of ``dispatcher``'s kernel for launch configuration ``key``, made by
    ``make()`` the first time. Mirrors ``CUDADispatcher._get_launch_config_specialization``
    (numba-cuda 0.30, which calls it only for a launch-config-sensitive kernel; never called
    without :data:`LAUNCH_CONFIGS`)."""
    specializations = dispatcher._launch_config_specializations
    made = specializations.get(key)
    if made is None:
        made = make()
        made._launch_config_sensitive = True
        made._launch_config_is_specialized = True
        made._launch_config_specialization_key = key
        made._launch_config_default_key = key
        specializations[key] = made
    return made


"""Transparent mode: ``numba.cuda.jit(cache=True)`` served by kcache.

``install()`` patches numba-cuda's ``CUDADispatcher`` (through ``_nc_patching.patch_dispatcher``):
``enable_caching`` (what ``cache=True`` calls) turns the dispatcher into a
:class:`~kcache.dispatcher.frontends.numba_cuda.dispatcher.KCacheDispatcher` instead of attaching numba-cuda's
pickle-based ``CUDACache``; with ``mode="all"`` every new kernel dispatcher is turned into one,
``cache=True`` or not. ``KCACHE_ENABLE=1`` / ``KCACHE_ENABLE=all`` do the same through
``kcache._hook`` with no code change.
"""
from __future__ import annotations

from . import switch
from .frontends.numba_cuda.bridge import FRONTEND
from .require import set_mode
from .switch import adopting as _adopting
from .switch import installed

# The dispatcher (and with it the store and the key) is imported by the first cached kernel
# (FRONTEND.adopt, options.Options), not by install(): KCACHE_ENABLE=1 installs in every
# process that imports numba.cuda.

__all__ = ["MODES", "install", "uninstall", "installed", "adopting", "ensure_patched"]

MODES = ("cache", "all")


def _on_enable_caching(dispatcher, original) -> None:
    given = switch.adopting_options()
    options = given or switch.installed_options()
    if options is None:
        return original(dispatcher)  # patched only for kcache.jit: numba-cuda's own cache
    if dispatcher.targetoptions.get("device"):
        return None  # device functions reach the cache through the kernels that call them
    FRONTEND.adopt(dispatcher, _options(options))
    if given is None:
        dispatcher._kcache_numba_cache = True  # numba.cuda.jit(cache=True) in transparent mode
    return None


def _on_init(dispatcher) -> None:
    if switch.installed() == "all" and not dispatcher.targetoptions.get("device"):
        # adopt leaves a KCacheDispatcher as it is
        FRONTEND.adopt(dispatcher, _options(switch.installed_options()))


def _options(options):
    """The dispatcher's Options for what install() kept (its arguments, until the first cached
    kernel imports the dispatcher module) or kcache.jit gave (Options already)."""
    if isinstance(options, dict):
        from .options import Options  # the store and the key: with the first cached kernel
        made = Options(**options)
        switch.keep_options(made, options)
        return made
    return options


def ensure_patched() -> None:
    """Apply the ``CUDADispatcher`` patch if it is not in effect (inert until install() or
    kcache.jit set options). Only with a numba-cuda kcache supports (``FRONTEND.refusal``)."""
    FRONTEND.patch(_on_enable_caching, _on_init)


def install(mode: str = "cache", *, store=None, cache_key: str | None = None,
            require_hit=None) -> None:
    """Serve numba-cuda kernels from kcache in this process.

    ``mode``: "cache" -> every ``numba.cuda.jit(cache=True)`` kernel created from now on uses
    kcache instead of numba-cuda's cache; "all" -> every kernel created from now on, with or
    without ``cache=True`` (kernels that cannot be cached run uncached). ``store``: a
    ``kcache.Store`` (default: ``kcache.Store()``); ``cache_key``: str mixed into every key.
    ``require_hit``: True -> a kernel call that would compile raises ``kcache.CacheMissError``
    (every kcache kernel of the process, as ``KCACHE_REQUIRE_HIT=1``); "warn" -> warned once
    per kernel, then compiled; False -> compiles allowed whatever ``KCACHE_REQUIRE_HIT`` says;
    None (default) -> ``KCACHE_REQUIRE_HIT`` decides. Dispatchers created before the call are
    not changed (but ``require_hit`` holds for them too). Raises ValueError for another mode
    or ``require_hit`` value. With a numba-cuda kcache does not support
    (``FRONTEND.refusal``): warned once, numba-cuda left alone, nothing installed.
    """
    if mode not in MODES:
        raise ValueError(f"kcache.install: mode must be one of {MODES}, not {mode!r}")
    if cache_key is not None and not isinstance(cache_key, str):  # as Options() says it
        raise TypeError(f"cache_key must be a str or None, not {type(cache_key).__name__}")
    set_mode(require_hit)
    if FRONTEND.warn_refusal():
        return
    ensure_patched()
    switch.set_installed({"store": store, "cache": True, "cache_key": cache_key}, mode)


def uninstall() -> None:
    """Undo :func:`install`: numba-cuda's ``CUDADispatcher`` is restored; dispatchers already
    turned into KCacheDispatchers keep using kcache."""
    switch.set_installed(None, None)
    set_mode(None)  # back to KCACHE_REQUIRE_HIT
    if FRONTEND.refusal() is None:  # else nothing was patched
        FRONTEND.unpatch()


def adopting(options):
    """While the block runs in this thread, ``enable_caching`` adopts with ``options`` (used by
    ``kcache.jit`` around ``numba.cuda.jit(cache=True)``)."""
    ensure_patched()
    return _adopting(options)

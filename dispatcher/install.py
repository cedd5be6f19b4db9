"""Transparent mode: ``numba.cuda.jit(cache=True)`` served by kcache.

``install()`` patches numba-cuda's ``CUDADispatcher`` (through ``_compat.patch_dispatcher``):
``enable_caching`` (what ``cache=True`` calls) turns the dispatcher into a
:class:`~kcache.dispatcher.dispatcher.KCacheDispatcher` instead of attaching numba-cuda's
pickle-based ``CUDACache``; with ``mode="all"`` every new kernel dispatcher is turned into one,
``cache=True`` or not. ``KCACHE_ENABLE=1`` / ``KCACHE_ENABLE=all`` do the same through
``kcache._hook`` with no code change.
"""
from __future__ import annotations

import contextlib
import threading

from . import _support

# The dispatcher module (and with it the store and the key) is imported by the first cached
# kernel, not by install(): KCACHE_ENABLE=1 installs in every process that imports numba.cuda.

MODES = ("cache", "all")
_state = {"options": None, "mode": None}
_local = threading.local()


def _on_enable_caching(dispatcher, original) -> None:
    options = getattr(_local, "options", None) or _state["options"]
    if options is None:
        return original(dispatcher)  # patched only for kcache.jit: numba-cuda's own cache
    if dispatcher.targetoptions.get("device"):
        return None  # device functions reach the cache through the kernels that call them
    from .dispatcher import adopt
    adopt(dispatcher, _options(options))
    if getattr(_local, "options", None) is None:
        dispatcher._kcache_numba_cache = True  # numba.cuda.jit(cache=True) in transparent mode
    return None


def caching_asked(dispatcher) -> None:
    """``enable_caching()`` called on a KCacheDispatcher: by ``numba.cuda.jit(cache=True)``
    on a kernel mode "all" adopted when it was made (inside ``kcache.jit``: that call's own
    settings are taken, as in every other mode), or by the program itself."""
    options = getattr(_local, "options", None)
    if options is not None:
        if dispatcher._kcache is not options:
            dispatcher._kcache_setup(options)
        return
    dispatcher._kcache.cache = True
    if _state["mode"] is not None:
        dispatcher._kcache_numba_cache = True  # numba.cuda.jit(cache=True): numba-cuda's rules


def _on_init(dispatcher) -> None:
    if _state["mode"] == "all" and not dispatcher.targetoptions.get("device"):
        from .dispatcher import adopt
        adopt(dispatcher, _options(_state["options"]))  # adopt leaves a KCacheDispatcher as it is


def _options(options):
    """The dispatcher's Options for what install() kept (its arguments, until the first cached
    kernel imports the dispatcher module) or kcache.jit gave (Options already)."""
    if isinstance(options, dict):
        from .dispatcher import Options
        made = Options(**options)
        if _state["options"] is options:
            _state["options"] = made  # one Options (one default store) for every kernel
        return made
    return options


def ensure_patched() -> None:
    """Apply the ``CUDADispatcher`` patch if it is not in effect (inert until install() or
    kcache.jit set options). Only with a numba-cuda kcache supports (``_support.refusal``)."""
    from . import _compat  # the bridge: imported once numba-cuda is known to be supported
    if not _compat.is_patched():
        _compat.patch_dispatcher(_on_enable_caching, _on_init)


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
    (``_support.refusal``): warned once, numba-cuda left alone, nothing installed.
    """
    if mode not in MODES:
        raise ValueError(f"kcache.install: mode must be one of {MODES}, not {mode!r}")
    if cache_key is not None and not isinstance(cache_key, str):  # as Options() says it
        raise TypeError(f"cache_key must be a str or None, not {type(cache_key).__name__}")
    from .require import set_mode
    set_mode(require_hit)
    if _support.warn_refusal():
        return
    ensure_patched()
    _state["options"] = {"store": store, "cache": True, "cache_key": cache_key}
    _state["mode"] = mode


def uninstall() -> None:
    """Undo :func:`install`: numba-cuda's ``CUDADispatcher`` is restored; dispatchers already
    turned into KCacheDispatchers keep using kcache."""
    from .require import set_mode
    _state["options"] = None
    _state["mode"] = None
    set_mode(None)  # back to KCACHE_REQUIRE_HIT
    if _support.refusal() is None:  # else nothing was patched
        from . import _compat
        _compat.unpatch_dispatcher()


def installed() -> str | None:
    """The installed mode ("cache" or "all"), or None."""
    return _state["mode"]


@contextlib.contextmanager
def adopting(options):
    """While the block runs in this thread, ``enable_caching`` adopts with ``options`` (used by
    ``kcache.jit`` around ``numba.cuda.jit(cache=True)``)."""
    ensure_patched()
    previous = getattr(_local, "options", None)
    _local.options = options
    try:
        yield
    finally:
        _local.options = previous

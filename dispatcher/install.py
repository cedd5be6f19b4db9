"""Transparent mode: each front-end's ``jit(cache=True)`` served by kcache.

``install()`` patches the kernel dispatcher of every front-end the process has imported
(numba-cuda's ``CUDADispatcher``, numba-cuda-mlir's ``MLIRDispatcher``: ``Frontend.patch``),
and of one imported later (``kcache._hook`` watches their imports): ``enable_caching`` (what
``cache=True`` calls) turns the dispatcher into kcache's instead of attaching the front-end's
pickle-based cache; with ``mode="all"`` every new kernel dispatcher is turned into one,
``cache=True`` or not. ``KCACHE_ENABLE=1`` / ``KCACHE_ENABLE=all`` do the same through
``kcache._hook`` with no code change. A front-end kcache does not support is warned about
once and left alone; the others are served.
"""
from __future__ import annotations

import sys

from kcache import importwatch

from . import frontends, switch
from .require import set_mode
from .switch import adopting as _adopting
from .switch import installed

# No front-end is imported here: the bridges are imported for the front-ends the process has
# imported (their packages), and the dispatcher, the store and the key by the first cached
# kernel (Frontend.adopt, options.Options). KCACHE_ENABLE=1 installs in every process that
# imports a front-end.

__all__ = ["MODES", "install", "uninstall", "installed", "adopting", "ensure_patched",
           "frontend_imported", "bridge_ready"]

MODES = ("cache", "all")


def _on_enable_caching(frontend):
    def on_enable_caching(dispatcher, original) -> None:
        given = switch.adopting_options()
        options = given or switch.installed_options()
        if options is None:
            return original(dispatcher)  # patched only for kcache.jit: the front-end's cache
        if dispatcher.targetoptions.get("device"):
            return None  # device functions reach the cache through the kernels that call them
        frontend.adopt(dispatcher, _options(options))
        if given is None:
            dispatcher._kcache_numba_cache = True  # jit(cache=True) in transparent mode
        return None
    return on_enable_caching


def _on_init(frontend):
    def on_init(dispatcher) -> None:
        if switch.installed() == "all" and not dispatcher.targetoptions.get("device"):
            # adopt leaves a kcache dispatcher as it is
            frontend.adopt(dispatcher, _options(switch.installed_options()))
            dispatcher._kcache_by_all = True  # cached without the program asking
    return on_init


def _options(options):
    """The dispatcher's Options for what install() kept (its arguments, until the first cached
    kernel imports the dispatcher module) or kcache.jit gave (Options already)."""
    if isinstance(options, dict):
        from .options import Options  # the store and the key: with the first cached kernel
        made = Options(**options)
        switch.keep_options(made, options)
        return made
    return options


def ensure_patched(frontend=None) -> None:
    """Apply ``frontend``'s dispatcher patch (default: every imported front-end's) if it is not
    in effect (inert until install() or kcache.jit set options). Only with a release kcache
    supports (``Frontend.refusal``)."""
    for one in [frontend] if frontend is not None else frontends.imported():
        if one.refusal() is None:
            one.patch(_on_enable_caching(one), _on_init(one))


def install(mode: str = "cache", *, store=None, cache_key: str | None = None,
            require_hit=None) -> None:
    """Serve kernels from kcache in this process, whichever front-end compiles them
    (numba-cuda, numba-cuda-mlir, both).

    ``mode``: "cache" -> every ``jit(cache=True)`` kernel created from now on uses kcache
    instead of the front-end's own cache; "all" -> every kernel created from now on, with or
    without ``cache=True`` (kernels that cannot be cached run uncached). ``store``: a
    ``kcache.Store`` (default: ``kcache.Store()``); ``cache_key``: str mixed into every key.
    ``require_hit``: True -> a kernel call that would compile raises ``kcache.CacheMissError``
    (as ``KCACHE_REQUIRE_HIT=1``); "warn" -> warned once per kernel, then compiled; False ->
    compiles allowed whatever ``KCACHE_REQUIRE_HIT`` says; None (default) ->
    ``KCACHE_REQUIRE_HIT`` decides. Front-ends imported later are served from their import
    on. Dispatchers created before the call are not changed. Raises ValueError for another
    mode or ``require_hit`` value. A front-end release kcache does not support
    (``Frontend.refusal``): warned once, that front-end left alone; when it is the only one
    imported, nothing is installed (``installed()`` is None).
    """
    if mode not in MODES:
        raise ValueError(f"kcache.install: mode must be one of {MODES}, not {mode!r}")
    if cache_key is not None and not isinstance(cache_key, str):  # as Options() says it
        raise TypeError(f"cache_key must be a str or None, not {type(cache_key).__name__}")
    set_mode(require_hit)
    switch.request({"store": store, "cache": True, "cache_key": cache_key}, mode)
    for frontend in frontends.imported():
        _install_into(frontend)
    _watch_imports()


def _install_into(frontend) -> None:
    """Apply what install() asked for to ``frontend`` (imported now): its patch, unless its
    release is refused (warned once)."""
    requested = switch.requested()
    if requested is None or frontend.warn_refusal():
        return
    ensure_patched(frontend)
    switch.set_installed(*requested)


def frontend_imported(package: str) -> None:
    """Called (``kcache.importwatch``) when a front-end's package (``frontends.package``) has been
    imported: serve its kernels as install() asked (nothing when it did not). When the package
    was imported by its bridge's own import, the bridge calls :func:`bridge_ready` at its end."""
    for name in frontends.NAMES:
        if (frontends.package(name) == package and switch.requested() is not None
                and not frontends.importing(name)):
            _install_into(frontends.by_name(name))


def bridge_ready(frontend) -> None:
    """Called by a bridge module at the end of its import (``FRONTEND`` defined): what
    install() asked for, applied to it if its package was imported meanwhile."""
    if switch.requested() is not None and frontends.package(frontend.name) in sys.modules:
        _install_into(frontend)


def _watch_imports() -> None:
    """Have :func:`frontend_imported` called when a front-end not imported yet is
    (``kcache.importwatch``: nothing is imported until the program imports it)."""
    pending = [frontends.package(n) for n in frontends.NAMES
               if frontends.package(n) not in sys.modules]
    if pending:
        importwatch.watch(pending, frontend_imported)


def uninstall() -> None:
    """Undo :func:`install`: the front-ends' dispatchers are restored; dispatchers already
    turned into kcache's keep using kcache."""
    switch.request(None, None)
    switch.set_installed(None, None)
    set_mode(None)  # back to KCACHE_REQUIRE_HIT
    for frontend in frontends.imported():
        if frontend.refusal() is None:  # else nothing was patched
            frontend.unpatch()


def adopting(options, frontend=None):
    """While the block runs in this thread, ``enable_caching`` adopts with ``options`` (used by
    ``kcache.jit`` around the front-end's ``jit(cache=True)``; ``frontend``: the one it calls,
    default every imported one)."""
    ensure_patched(frontend)
    return _adopting(options)

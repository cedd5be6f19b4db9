"""Options of a kcache dispatcher, and the process's default store (opened once, early).

``Options.prepare`` does what every hit needs once per process when the first cached kernel is
defined (during the program's imports) instead of inside its first call: open the store, know
the toolchain versions, encode the components every key shares.
"""
from __future__ import annotations

from pathlib import Path

from kcache.config import environment_snapshot
from kcache.disk.layout import BUCKET
from kcache.warn import held_back, warn_once

from . import components as _components
from .process import STATE


class Options:
    """kcache settings of one dispatcher.

    ``store``: a ``kcache.Store`` or None for the process default (``kcache.Store()``, made on
    first use); ``cache``: False compiles uncached, as numba-cuda without ``cache=True``;
    ``cache_key``: user string mixed into every key (str or None).
    """

    def __init__(self, store=None, cache: bool = True, cache_key: str | None = None):
        if cache_key is not None and not isinstance(cache_key, str):
            raise TypeError(f"cache_key must be a str or None, not {type(cache_key).__name__}")
        self.store = store
        self.cache = bool(cache)
        self.cache_key = cache_key

    def get_store(self):
        """The store to use, or None when caching is off or no store can be opened (warned
        once: a broken cache never breaks the program)."""
        if not self.cache:
            return None
        store = self.store if self.store is not None else self._process_store()
        if store is None or getattr(getattr(store, "settings", None), "disabled", False):
            return None
        return store

    @classmethod
    def _process_store(cls, early: bool = False):
        """The process default store. ``early``: opened by :meth:`prepare`, before any
        kernel call, and kept only if that raised and warned nothing; the first call then
        checks that what settings come from (``environment_snapshot``) is unchanged, else
        opens it again, so settings still take effect as of the first kernel call."""
        with STATE.store_lock:
            if early:
                if STATE.default_store is None:
                    cls._open_early()
                return STATE.default_store or None
            if STATE.opened_early is not None:
                store = STATE.default_store
                if STATE.opened_early != environment_snapshot(store.root):
                    STATE.default_store = None  # the program changed a setting since
                STATE.opened_early = None
            if STATE.default_store is None:
                try:
                    from kcache import Store
                    STATE.default_store = Store()
                except Exception as exc:  # a bad setting or unusable root: run uncached
                    warn_once("dispatcher-store", f"kcache: cannot open the cache ({exc}); "
                              "kernels are compiled uncached")
                    STATE.default_store = False
            return STATE.default_store or None

    @classmethod
    def _open_early(cls) -> None:
        from kcache import Store
        with held_back() as would_warn:
            try:
                store = Store()
            except Exception:  # the first kernel call tries again, and says why
                return
        if not would_warn:  # else the first call opens it again and warns as it always did
            STATE.default_store = store
            STATE.opened_early = environment_snapshot(store.root)

    @classmethod
    def reset_process_store(cls) -> None:
        """Forget the process default store (tests, or after changing KCACHE_* variables)."""
        with STATE.store_lock:
            STATE.default_store = None
            STATE.opened_early = None

    def prepare(self, frontend, targetoptions: dict | None = None) -> None:
        """What every hit needs, done once per process when the first cached kernel is
        defined (during the program's imports) instead of in its first call: open the store,
        know the toolchain versions, encode the components every key shares (``frontend``:
        its ``frontends.base.Frontend``; ``targetoptions``: the first kernel's). Whatever
        would warn is left to the first call, which then does it again and warns as before.
        Never raises: a problem shows (and is warned about) at the kernel call, as before."""
        if not self.cache or STATE.prepared:
            return
        STATE.prepared = True
        try:
            store = self.store if self.store is not None else self._process_store(early=True)
            if store is None or getattr(store, "disabled", False):
                return
            with held_back():  # a warning here would be a first call's: it is left to it
                _components.toolchain_components(lambda: toolchain_memo(store))
                _components.prepare_shared(frontend, targetoptions)
        except Exception:  # the kernel call does it again and reports it
            pass


def toolchain_memo(store):
    """Where the toolchain memo lives in ``store``'s root (kcache.toolchain.memoized): a path
    through the bucket folder's descriptor (kcache.paths: no symlink below the root is
    followed); None when the store has no trusted root (nothing is read from or written to
    an untrusted one) or no bucket folder yet."""
    layout = getattr(store, "layout", None)
    if layout is None or not getattr(store, "trusted", False) or getattr(store, "disabled", False):
        return None
    dirs = getattr(getattr(store, "local", None), "dirs", None)
    if dirs is None:
        return layout.toolchain_memo
    try:
        return Path(dirs.path(BUCKET, layout.toolchain_memo.name))
    except OSError:
        return None


"""``KCacheCache``: kcache's stand-in for numba-cuda-mlir's ``MLIRCache`` in a kcache
dispatcher's ``_cache``."""
from __future__ import annotations


class KCacheCache:
    """Stands in for numba-cuda-mlir's ``MLIRCache`` as ``MLIRDispatcher._cache``: its paths
    never find anything here (kcache looked before them), and ``save_overload`` hands the
    compile result to the kcache lookup that asked for the compile (:meth:`capture`)."""

    def __init__(self, dispatcher):
        self._dispatcher = dispatcher
        self._captures: list = []  # one list per compile under way (a retry may nest one)

    @property
    def cache_path(self):
        """The store's root; None, as numba-cuda-mlir's ``NullCache`` says, for a kernel
        cached only by ``KCACHE_ENABLE=all`` until the program asks (``enable_caching``)."""
        disp = self._dispatcher
        if getattr(disp, "_kcache_by_all", False) and not disp._kcache_numba_cache:
            return None
        store = disp._kcache.get_store() if disp._kcache.cache else None
        return str(store.root) if store is not None else None

    def load_overload(self, sig, target_context):
        return None

    def save_overload(self, sig, cres):
        if self._captures:
            self._captures[-1].append(cres)

    def flush(self):  # recompile(): keys are worked out again (globals may have changed)
        self._dispatcher._kcache_keys.clear()

    def capture(self) -> list:
        """Keep what ``save_overload`` is given until :meth:`release`; returns the list it
        goes into."""
        self._captures.append([])
        return self._captures[-1]

    def release(self) -> None:
        self._captures.pop()

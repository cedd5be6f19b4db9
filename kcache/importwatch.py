"""Calling back when a package has been imported: a finder on ``sys.meta_path`` that finds
nothing itself and wraps the loader the rest of ``sys.meta_path`` finds for a watched package,
so that the callbacks run right after the package's module has executed. Standard library
only: ``kcache._hook`` (imported at interpreter start-up when ``KCACHE_ENABLE`` is set) and
``kcache.dispatcher.install`` use it to serve a front-end (``numba.cuda``,
``numba_cuda_mlir``) from the moment it is imported."""
import importlib.abc
import sys
import threading

_lock = threading.Lock()


class _Loader(importlib.abc.Loader):
    """Wraps a package's real loader; runs the callbacks right after the module executed."""

    def __init__(self, loader, callbacks):
        self._loader = loader
        self._callbacks = callbacks

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        for callback in self._callbacks:
            try:
                callback(module.__name__)
            except Exception as exc:  # never the program's import: one line, and it goes on
                sys.stderr.write(f"kcache: after importing {module.__name__}: "
                                 f"{type(exc).__name__}: {exc}\n")

    def __getattr__(self, name):  # get_resource_reader, is_package, ... of the real loader
        return getattr(self._loader, name)


class ImportWatch(importlib.abc.MetaPathFinder):
    """``watched``: package name -> the callbacks (``callback(package)``) to run once it is
    imported; each package is watched once (removed when its import starts)."""

    def __init__(self):
        self.watched: dict = {}

    def find_spec(self, fullname, path=None, target=None):
        with _lock:
            callbacks = self.watched.pop(fullname, None)
        if callbacks is None:
            return None
        from importlib.machinery import PathFinder
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            spec = PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, callbacks)
        return spec


def watch(packages, callback) -> None:
    """Run ``callback(package)`` once each of ``packages`` (names of packages not imported
    yet) has been imported; a callback given twice for a package runs once."""
    with _lock:
        finder = next((f for f in sys.meta_path if isinstance(f, ImportWatch)), None)
        if finder is None:
            finder = ImportWatch()
            sys.meta_path.insert(0, finder)
        for package in packages:
            callbacks = finder.watched.setdefault(package, [])
            if callback not in callbacks:
                callbacks.append(callback)


def watched() -> dict:
    """Package name -> its callbacks, of the packages watched now (a copy)."""
    finder = next((f for f in sys.meta_path if isinstance(f, ImportWatch)), None)
    return {k: list(v) for k, v in (finder.watched if finder else {}).items()}

"""``KCACHE_ENABLE`` hook: turn on kcache's transparent mode in any Python process.

Imported from the one-line ``kcache-hook.pth`` in site-packages only when ``KCACHE_ENABLE`` is
set (the .pth line costs one ``os.environ`` lookup otherwise). Standard library only: it must
not import numba or slow down interpreter start-up. It puts a finder on ``sys.meta_path`` that
waits for a front-end's package (``numba.cuda``, ``numba_cuda_mlir``) to finish importing,
then calls ``kcache.dispatcher.install(mode)``: ``KCACHE_ENABLE=1`` (or true/yes/on/cache) -> mode
"cache" (kernels declared with ``cache=True``), ``KCACHE_ENABLE=all`` -> mode "all" (every
kernel; those that cannot be cached run uncached). Empty/0/false/no/off: nothing. Any other
value is reported once on stderr and ignored (a typo must not break the user's program).
"""
import importlib.abc
import os
import sys

_MODES = {"1": "cache", "true": "cache", "yes": "cache", "on": "cache", "cache": "cache",
          "all": "all"}
_OFF = {"", "0", "false", "no", "off"}
#: The packages of the front-ends kcache serves (kcache.dispatcher.frontends.package).
TARGETS = ("numba.cuda", "numba_cuda_mlir")
TARGET = TARGETS[0]  # the name before numba-cuda-mlir was served too


def mode_from_env(value=None):
    """The install mode for ``KCACHE_ENABLE`` (default: the environment): "cache", "all" or
    None. Raises ValueError naming the accepted values for anything else."""
    raw = os.environ.get("KCACHE_ENABLE", "") if value is None else value
    text = raw.strip().lower()
    if text in _OFF:
        return None
    if text in _MODES:
        return _MODES[text]
    raise ValueError(f"KCACHE_ENABLE={raw!r} is not understood; use 1 (cache=True kernels), "
                     "all (every kernel) or 0")


_pending = []  # the mode to install once kcache.dispatcher has finished importing


def _install(mode):
    disp = sys.modules.get("kcache.dispatcher")
    if disp is not None and not getattr(disp, "READY", False):
        # numba.cuda was imported by kcache.dispatcher's own import (``import kcache;
        # kcache.jit``, ``kcache warm``): installing now would import a half-made package.
        # dispatcher_ready() installs when the package is complete.
        _pending.append(mode)
        return
    try:
        from kcache.dispatcher import install
        install(mode)
    except Exception as exc:  # the hook must never break the user's program
        sys.stderr.write(f"kcache: KCACHE_ENABLE={mode} ignored: cannot install ({exc})\n")


def dispatcher_ready():
    """Called by kcache.dispatcher at the end of its import: install a mode left pending."""
    if _pending:
        _install(_pending.pop())


class _Loader(importlib.abc.Loader):
    """Wraps a front-end package's real loader; calls back right after the module executed."""

    def __init__(self, loader, done):
        self._loader = loader
        self._done = done

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._done(module.__name__)

    def __getattr__(self, name):  # get_resource_reader, is_package, ... of the real loader
        return getattr(self._loader, name)


class FrontendFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when one of the watched packages is being imported, wraps the
    spec that the rest of ``sys.meta_path`` finds so that :func:`_imported` runs once it has
    loaded. ``mode``: the KCACHE_ENABLE mode to install then (None: only tell
    ``kcache.dispatcher.install`` that the package came, for an earlier ``install()``)."""

    def __init__(self, mode, packages=TARGETS):
        self.mode = mode
        self.packages = set(packages)

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.packages:
            return None
        self.packages.discard(fullname)  # one shot per package
        if not self.packages:
            sys.meta_path.remove(self)
        from importlib.machinery import PathFinder
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                break
        else:
            spec = PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self._imported)
        return spec

    def _imported(self, package):
        if self.mode is not None:
            _install(self.mode)
            return
        try:
            from kcache.dispatcher.install import frontend_imported
            frontend_imported(package)
        except Exception as exc:  # the hook must never break the user's program
            sys.stderr.write(f"kcache: cannot serve {package} kernels ({exc})\n")


#: The name before numba-cuda-mlir was served too.
NumbaCudaFinder = FrontendFinder


def _finder():
    return next((f for f in sys.meta_path if isinstance(f, FrontendFinder)), None)


def enable(mode):
    """Arrange for ``kcache.dispatcher.install(mode)`` once a front-end's package is imported
    (at once if one already is, and again when another one is)."""
    pending = [t for t in TARGETS if t not in sys.modules]
    if len(pending) < len(TARGETS):
        _install(mode)
    finder = _finder()
    if finder is not None:
        finder.mode = mode
        finder.packages.update(pending)
    elif pending:
        sys.meta_path.insert(0, FrontendFinder(mode, pending))


def watch(packages):
    """Tell ``kcache.dispatcher.install`` when one of ``packages`` (front-end packages not
    imported yet) is: ``install()`` serves front-ends imported after it too."""
    finder = _finder()
    if finder is not None:
        finder.packages.update(packages)
    elif packages:
        sys.meta_path.insert(0, FrontendFinder(None, packages))


def _main():
    try:
        mode = mode_from_env()
    except ValueError as exc:
        sys.stderr.write(f"kcache: {exc}\n")
        return
    if mode is not None:
        enable(mode)


_main()

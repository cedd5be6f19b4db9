"""``KCACHE_ENABLE`` hook: turn on kcache's transparent mode in any Python process.

Imported from the one-line ``kcache-hook.pth`` in site-packages only when ``KCACHE_ENABLE`` is
set (the .pth line costs one ``os.environ`` lookup otherwise). Standard library only: it must
not import numba or slow down interpreter start-up. It puts a finder on ``sys.meta_path`` that
waits for ``numba.cuda`` to finish importing, then calls
``kcache.dispatcher.install(mode)``: ``KCACHE_ENABLE=1`` (or true/yes/on/cache) -> mode
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
TARGET = "numba.cuda"


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
    """Wraps numba.cuda's real loader; installs kcache right after the module executed."""

    def __init__(self, loader, mode):
        self._loader = loader
        self._mode = mode

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _install(self._mode)

    def __getattr__(self, name):  # get_resource_reader, is_package, ... of the real loader
        return getattr(self._loader, name)


class NumbaCudaFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``numba.cuda`` is being imported, wraps the spec that the
    rest of ``sys.meta_path`` finds so that kcache is installed once it has loaded."""

    def __init__(self, mode):
        self.mode = mode

    def find_spec(self, fullname, path=None, target=None):
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)  # one shot, and no recursion into ourselves
        from importlib.machinery import PathFinder
        for finder in sys.meta_path:
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                break
        else:
            spec = PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self.mode)
        return spec


def enable(mode):
    """Arrange for ``kcache.dispatcher.install(mode)`` once numba.cuda is imported (at once if
    it already is)."""
    if TARGET in sys.modules:
        _install(mode)
    elif not any(isinstance(f, NumbaCudaFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, NumbaCudaFinder(mode))


def _main():
    try:
        mode = mode_from_env()
    except ValueError as exc:
        sys.stderr.write(f"kcache: {exc}\n")
        return
    if mode is not None:
        enable(mode)


_main()

"""kcache: a content-addressed on-disk cache for GPU kernels compiled by numba-cuda.

Importing ``kcache`` never imports numba; ``kcache.jit``, ``kcache.install``,
``kcache.uninstall``, ``kcache.compile_for``, ``kcache.explain`` and ``kcache.CompileForError``
are loaded lazily from ``kcache.dispatcher``, and so is ``kcache.dispatcher`` itself (an
attribute after a plain ``import kcache``). See docs/design.md.
"""
from .entry import Entry, EntryInfo
from .errors import ConfigError, CorruptEntry, KcacheError, LockTimeout, NewerFormat
from .keys import make_key
from .prune import NotRemoved, PruneReport, RemoveReport, VerifyReport
from .store import Stats, Store

__version__ = "0.1.0"

_LAZY = ("jit", "install", "uninstall", "compile_for", "explain", "CompileForError")

__all__ = ["make_key", "Entry", "EntryInfo", "Store", "Stats", "PruneReport", "VerifyReport",
           "RemoveReport", "NotRemoved",
           "KcacheError", "ConfigError", "LockTimeout", "CorruptEntry", "NewerFormat", *_LAZY]


def __getattr__(name: str):
    # numba is heavy: the dispatcher is imported only when one of its functions is asked for
    if name in _LAZY or name == "dispatcher":
        import importlib

        dispatcher = importlib.import_module(".dispatcher", __name__)  # also sets kcache.dispatcher
        return dispatcher if name == "dispatcher" else getattr(dispatcher, name)
    raise AttributeError(f"module 'kcache' has no attribute {name!r}")

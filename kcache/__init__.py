"""kcache: a content-addressed on-disk cache for GPU kernels compiled by numba-cuda.

Every public name is loaded on first use (module ``__getattr__``), so ``import kcache`` (and
the ``kcache`` command's start-up) costs almost nothing: ``kcache.Store`` imports the store,
and ``kcache.jit``, ``kcache.install``, ``kcache.uninstall``, ``kcache.compile_for``,
``kcache.explain``, ``kcache.CompileForError`` and ``kcache.dispatcher`` import numba-cuda
(see docs/design.md), and ``kcache.ProgramCache`` and ``kcache.compile_program`` import
``kcache.programs`` (and with it cuda.core: docs/programs.md). Importing ``kcache`` never
imports numba or cuda.
"""
import importlib

__version__ = "0.1.0"

#: public name -> the module that defines it
_WHERE = {
    "Entry": ".entry", "EntryInfo": ".entry",
    "ConfigError": ".errors", "CorruptEntry": ".errors", "KcacheError": ".errors",
    "CacheMissError": ".errors", "MissingExtra": ".errors",
    "LockTimeout": ".errors", "NewerFormat": ".errors",
    "make_key": ".keys",
    "NotRemoved": ".store", "PruneReport": ".store", "RemoveReport": ".store",
    "VerifyReport": ".store",
    "Stats": ".store", "Store": ".store", "CopyReport": ".store",
    # cuda.core programs: kcache.programs imports cuda.core, so only when one is asked for
    "ProgramCache": ".programs", "compile_program": ".programs",
}
_LAZY = ("jit", "install", "uninstall", "compile_for", "explain", "CompileForError")

__all__ = ["make_key", "Entry", "EntryInfo", "Store", "Stats", "PruneReport", "VerifyReport",
           "RemoveReport", "NotRemoved", "CopyReport",
           "KcacheError", "ConfigError", "LockTimeout", "CorruptEntry", "NewerFormat",
           "ProgramCache", "compile_program", "CacheMissError", "MissingExtra", *_LAZY]


def __getattr__(name: str):
    where = _WHERE.get(name)
    if where is not None:
        value = getattr(importlib.import_module(where, __name__), name)
        globals()[name] = value  # later look-ups are plain attribute reads
        return value
    # numba is heavy: the dispatcher is imported only when one of its functions is asked for
    if name in _LAZY or name == "dispatcher":
        dispatcher = importlib.import_module(".dispatcher", __name__)  # also sets kcache.dispatcher
        return dispatcher if name == "dispatcher" else getattr(dispatcher, name)
    raise AttributeError(f"module 'kcache' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))

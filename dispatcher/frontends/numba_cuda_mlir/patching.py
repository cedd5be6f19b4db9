"""Transparent mode's patch of ``MLIRDispatcher`` (``numba_cuda_mlir.cuda.jit(cache=True)``
-> kcache)."""
from __future__ import annotations

import contextlib
import threading

from .internals import MLIRDispatcher

_originals: dict[str, object] = {}
_plain = threading.local()  # .on: dispatchers made now stay numba-cuda-mlir's own


@contextlib.contextmanager
def plain_dispatchers():
    """Dispatchers made in the block (this thread) are not handed to ``on_init``: kcache's
    own compiles (compile_for's, an inspection's) must not be served by the cache they
    fill, under ``KCACHE_ENABLE=all`` too."""
    before = getattr(_plain, "on", False)
    _plain.on = True
    try:
        yield
    finally:
        _plain.on = before


def patch_dispatcher(on_enable_caching, on_init) -> None:
    """Route ``MLIRDispatcher.enable_caching`` (called by ``cuda.jit(cache=True)``,
    ``decorators.mlir_jit``) to ``on_enable_caching(dispatcher, original)`` and, after
    ``MLIRDispatcher.__init__``, call ``on_init(dispatcher)``. Idempotent;
    :func:`unpatch_dispatcher` restores numba-cuda-mlir's."""
    if not _originals:
        _originals["enable_caching"] = MLIRDispatcher.__dict__["enable_caching"]
        _originals["__init__"] = MLIRDispatcher.__dict__["__init__"]
    original_enable = _originals["enable_caching"]
    original_init = _originals["__init__"]

    def enable_caching(self):
        on_enable_caching(self, original_enable)

    def __init__(self, py_func, targetoptions=None, *args, **kwargs):
        original_init(self, py_func, targetoptions, *args, **kwargs)
        if not getattr(_plain, "on", False):
            on_init(self)

    enable_caching.__doc__ = original_enable.__doc__
    __init__.__doc__ = original_init.__doc__
    enable_caching._kcache = __init__._kcache = True
    MLIRDispatcher.enable_caching = enable_caching
    MLIRDispatcher.__init__ = __init__


def unpatch_dispatcher() -> None:
    """Restore numba-cuda-mlir's ``MLIRDispatcher.enable_caching`` and ``__init__``."""
    if _originals:
        MLIRDispatcher.enable_caching = _originals.pop("enable_caching")
        MLIRDispatcher.__init__ = _originals.pop("__init__")


def is_patched() -> bool:
    """True while :func:`patch_dispatcher` is in effect."""
    return getattr(MLIRDispatcher.__dict__["enable_caching"], "_kcache", False)

"""Compiling for an explicit compute capability, without a GPU or driver."""
from __future__ import annotations

import contextlib
import threading

from kcache.arch import full_cc

from .internals import CUDACodeLibrary, CUDADispatcher, _dispatcher, global_compiler_lock

class _OfflineDevice:
    """Stands in for ``numba.cuda.cudadrv.driver.Device`` where numba-cuda only reads the cc."""

    def __init__(self, cc):
        self.compute_capability = tuple(cc)
        self.id = 0


_offline_lock = threading.RLock()


@contextlib.contextmanager
def offline_target(cc):
    """Compile for compute capability ``cc`` (any ``kcache.arch`` form) with no GPU or driver.

    Inside the block, ``numba.cuda.dispatcher.get_current_device`` (read by ``_Kernel`` and
    ``compile_device``) reports ``cc`` and ``CUDACodeLibrary._ensure_cc(None)`` returns
    ``kcache.arch.full_cc`` of it, so NVVM and nvJitLink target ``cc``. Device-function dispatchers
    cache compile results per argument types whatever the cc, so each one compiled inside the
    block starts with empty ``overloads`` and gets its own back on exit: device functions in
    any module are compiled afresh for ``cc``. Holds numba's compiler lock for the block.
    Yields the full cc tuple.
    """
    target = full_cc(cc)
    fake = _OfflineDevice(target[:2])
    saved: dict[int, tuple] = {}
    original_compile_device = CUDADispatcher.compile_device
    original_ensure_cc = CUDACodeLibrary._ensure_cc

    def ensure_cc(self, want):
        return target if want is None else want

    def compile_device(self, args, return_type=None):
        if id(self) not in saved:
            saved[id(self)] = (self, dict(self.overloads))
            self.overloads.clear()
        return original_compile_device(self, args, return_type)

    with _offline_lock, global_compiler_lock:
        original_get_device = _dispatcher.get_current_device
        _dispatcher.get_current_device = lambda: fake
        CUDACodeLibrary._ensure_cc = ensure_cc
        CUDADispatcher.compile_device = compile_device
        try:
            yield target
        finally:
            _dispatcher.get_current_device = original_get_device
            CUDACodeLibrary._ensure_cc = original_ensure_cc
            CUDADispatcher.compile_device = original_compile_device
            for disp, overloads in saved.values():
                disp.overloads.clear()
                disp.overloads.update(overloads)


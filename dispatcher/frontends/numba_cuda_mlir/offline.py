"""Compiling for an explicit compute capability, without a GPU or driver."""
from __future__ import annotations

import contextlib
import sys
import threading

from kcache.arch import parse_cc

from .internals import MLIRDispatcher, global_compiler_lock, tools

_offline_lock = threading.RLock()
_TCGEN05_FROM = (10, 0)  # numba_cuda_mlir.runtime declares nvvm_tcgen05 on such devices only


@contextlib.contextmanager
def offline_target(cc):
    """Compile for compute capability ``cc`` (any ``kcache.arch`` form; an ``a`` suffix is
    ignored: numba-cuda-mlir compiles ``sm_90`` for 9.0) with no GPU or driver.

    numba-cuda-mlir asks the device's cc through ``tools.get_gpu_compute_capability``, which
    answers ``tools._cached_cc`` once set: the block sets it to ``cc`` (so the host cc,
    the compile chip of a kernel without ``chip=`` and the linker's arch are ``cc``) and puts
    the previous value back after. ``MLIRDispatcher._resolve_target_options`` writes the
    resolved chip into a dispatcher's ``targetoptions``; the chip each dispatcher compiled in
    the block had before is put back on exit, and device-function dispatchers start the
    block with empty ``overloads`` (theirs back on exit), so device functions in any module
    are compiled afresh for ``cc``. Holds the vendored numba's compiler lock for the block.
    Yields ``(major, minor, "")``.
    """
    major, minor, _suffix = parse_cc(cc)
    saved: dict[int, tuple] = {}
    originals = {name: MLIRDispatcher.__dict__[name]
                 for name in ("_compile_device_callee", "compile_device", "_compile_public",
                              "_compile_impl")}

    def keep(disp, clear: bool):
        if id(disp) not in saved:
            saved[id(disp)] = (disp, dict(disp.overloads) if clear else None,
                               "chip" in disp.targetoptions, disp.targetoptions.get("chip"))
            if clear:
                disp.overloads.clear()
            had, chip = getattr(disp, "_kcache_chip", (True, disp.targetoptions.get("chip")))
            if not (had and chip is not None):  # the chip a live compile resolved: not cc's
                disp.targetoptions.pop("chip", None)

    def wrap(name, clear):
        original = originals[name]

        def method(self, *args, **kwargs):
            keep(self, clear and self.targetoptions.get("device", False))
            return original(self, *args, **kwargs)
        method.__name__ = name
        return method

    with _offline_lock, global_compiler_lock:
        previous_cc = tools._cached_cc
        tools._cached_cc = (major, minor)
        added = _runtime_libraries((major, minor))
        for name in originals:
            setattr(MLIRDispatcher, name, wrap(name, name in ("_compile_device_callee",
                                                               "compile_device")))
        try:
            yield (major, minor, "")
        finally:
            for name, original in originals.items():
                setattr(MLIRDispatcher, name, original)
            tools._cached_cc = previous_cc
            for attr in added:
                delattr(sys.modules["numba_cuda_mlir.runtime"], attr)
            for disp, overloads, had_chip, chip in saved.values():
                if overloads is not None:
                    disp.overloads.clear()
                    disp.overloads.update(overloads)
                if had_chip:
                    disp.targetoptions["chip"] = chip
                else:
                    disp.targetoptions.pop("chip", None)


def _runtime_libraries(cc: tuple) -> list:
    """``numba_cuda_mlir.runtime`` declares its MLIR libraries when first imported, for the cc
    of that moment (``_get_all_libraries``: ``nvvm_tcgen05`` from 10.0). For a block of
    ``cc`` >= 10.0 in a process that imported it under an older cc, the missing one is
    declared now; returns the names added (removed again after the block)."""
    runtime = sys.modules.get("numba_cuda_mlir.runtime")
    if runtime is None or cc < _TCGEN05_FROM or hasattr(runtime, "nvvm_tcgen05"):
        return []
    try:
        runtime.nvvm_tcgen05 = runtime._runtime.nvvm_tcgen05
    except Exception:  # not this release's layout: compiled as numba-cuda-mlir does
        return []
    return ["nvvm_tcgen05"]

"""Compiling a kernel as numba-cuda does on a miss, readying its compiler, and what of a
compiled kernel its own cache (or kcache's) cannot keep."""
from __future__ import annotations

from .internals import NRT_LIBRARY, Kernel, _codegen

def compile_kernel(py_func, argtypes: tuple, targetoptions: dict):
    """Compile a kernel exactly as ``CUDADispatcher.compile`` does on a cache miss:
    ``_Kernel(py_func, argtypes, **targetoptions)``. Needs a device (or :func:`offline_target`)."""
    return Kernel(py_func, argtypes, **targetoptions)


def device_overloads(dispatcher) -> list:
    """The compile results a dispatcher holds (``Dispatcher.overloads`` values: a device
    function's ``CompileResult`` per argument types, which ``CUDADispatcher.compile_device``
    compiles once and then reuses whatever changed since)."""
    return list(getattr(dispatcher, "overloads", {}).values())


def _kcache_warm():  # what warm_compiler() compiles: no arguments, no work
    return


def warm_compiler(targetoptions: dict) -> None:
    """Compile an empty kernel to a cubin, nothing loaded on the GPU: a process's first
    compile also loads and sets up NVVM, the linker and numba-cuda's typing and target
    contexts (0.3-0.6 s), which a wait for another process's compile can hide. ``lto`` as in
    ``targetoptions`` (it picks the linker). The empty kernel raises no warning (numba-cuda
    0.30); the warning filters are left alone (``catch_warnings`` would change them for every
    thread of the program meanwhile). Raises whatever the compile raises."""
    Kernel(_kcache_warm, (), lto=bool(targetoptions.get("lto")))._codelibrary.get_cubin()


def uncacheable_reason(kernel) -> str | None:
    """Why a compiled kernel cannot be rebuilt from cubin + metadata alone, or None.

    Mirrors the checks of ``CUDACodeLibrary._reduce_states`` (captured device arrays) and adds
    setup/teardown callbacks of ``LinkableCode`` objects (live Python callables)."""
    lib = kernel._codelibrary
    for obj in lib.referenced_objects.values():
        if getattr(obj, "__cuda_array_interface__", None) is not None:
            return ("the kernel captures a global device array; pass the array as an "
                    "argument to cache it")
    if lib._setup_functions or lib._teardown_functions:
        return "the kernel links LinkableCode with setup/teardown callbacks (Python callables)"
    return None


def numba_cache_refusal(kernel):
    """The exception numba-cuda's own cache raises when it is asked to save ``kernel``
    (``cache=True``), or None when it would save it. Mirrors ``CUDACodeLibrary._reduce_states``
    (numba-cuda 0.30), which ``CUDACache.save_overload`` calls right after the compile: a
    library referencing a device array (a captured or global one) -> ``PicklingError``; linking
    files other than NRT (``link=``, ``declare_device(link=...)``) -> ``RuntimeError``. Same
    types and texts; the ``PicklingError`` class is the one numba-cuda's codegen raises (kcache
    pickles nothing)."""
    lib = kernel._codelibrary
    if any(getattr(obj, "__cuda_array_interface__", None) is not None
           for obj in (lib.referenced_objects or {}).values()):
        return _codegen.pickle.PicklingError(
            "Cannot serialize kernels or device functions referencing global device arrays. "
            "Pass the array(s) as arguments to the kernel instead.")
    files = lib._linking_files
    if files and not (len(files) == 1 and NRT_LIBRARY in files):
        return RuntimeError("Cannot pickle CUDACodeLibrary with linking files")
    return None


"""Compiling a kernel as numba-cuda-mlir does, and what of a compile result its own cache (or
kcache's) cannot keep."""
from __future__ import annotations

import types as types_

from .internals import MLIRDispatcher, PicklingError, make_signature, types
from .patching import plain_dispatchers
from .rebuild import compile_result


def compile_kernel(py_func, argtypes: tuple, targetoptions: dict):
    """Compile a kernel as ``MLIRDispatcher.compile`` (``_compile_public``) does for an
    eager signature, in a fresh plain dispatcher (nothing cached, nothing kept): returns the
    compile result. ``targetoptions``: the kernel dispatcher's (``cache`` dropped). Needs a
    device or :func:`~.offline.offline_target`."""
    options = {k: v for k, v in targetoptions.items() if k != "cache"}
    with plain_dispatchers():  # not adopted under KCACHE_ENABLE=all
        disp = MLIRDispatcher(py_func, targetoptions=options)
    return disp.compile(make_signature(types.none, *argtypes))


def device_overloads(dispatcher) -> list:
    """The compile results a dispatcher holds (``overloads`` values: a device function's
    per argument types, compiled once by ``_compile_device_callee`` and then reused whatever
    changed since), with those of the device dispatcher a kernel called from another kernel
    gets (``_device_dispatcher``)."""
    out = list(getattr(dispatcher, "overloads", {}).values())
    inner = getattr(dispatcher, "_device_dispatcher", None)
    if inner is not None:
        out += list(getattr(inner, "overloads", {}).values())
    return out


def _callbacks(md) -> list:
    from numba_cuda_mlir.mlir_optimization import _nrt_memsys_setup_callback
    return [cb for cb in list(md.get("setup_callbacks") or ()) + list(
        md.get("teardown_callbacks") or ()) if cb is not _nrt_memsys_setup_callback]


def uncacheable_reason(kernel) -> str | None:
    """Why a compile result cannot be rebuilt from its artifacts and plain data alone, or
    None: a captured device array (numba-cuda-mlir bakes its pointer into the code and keeps
    it in ``library.referenced_objects``; its own cache refuses one in the closure, see
    :func:`numba_cache_load_refusal`, and stores a module global's anyway), or
    setup/teardown callbacks of ``LinkableCode`` (Python callables; NRT's own set-up callback
    is given back by the rebuild)."""
    cres = compile_result(kernel)
    library = getattr(cres, "library", None)
    for obj in (getattr(library, "referenced_objects", None) or {}).values():
        if getattr(obj, "__cuda_array_interface__", None) is not None:
            return ("the kernel captures a global device array; pass the array as an "
                    "argument to cache it")
    if _callbacks(cres.metadata):
        return "the kernel links LinkableCode with setup/teardown callbacks (Python callables)"
    return None


#: What numba-cuda-mlir's pickler says of a device array (``serialize.NumbaPickler``, 0.6).
_DEVICE_ARRAY_REFUSAL = ("Cannot serialize kernels or device functions referencing global "
                         "device arrays. Pass the array(s) as arguments to the kernel instead.")


_LEAVES = frozenset({int, float, complex, bool, str, bytes, type(None)})  # hold nothing


def _holds_device_array(value) -> bool:
    """``value`` is, or holds, an object with ``__cuda_array_interface__``: what the pickler
    refuses anywhere in what it pickles, looked for without pickling, through containers
    (tuple, list, set, dict, an object array), functions' closures (a device function's too)
    and objects' ``__dict__``. Each object is looked into once (cycles end)."""
    stack, seen = [value], set()
    while stack:
        item = stack.pop()
        if type(item) in _LEAVES or id(item) in seen:
            continue
        seen.add(id(item))
        if getattr(item, "__cuda_array_interface__", None) is not None:
            return True  # (what raises there raises in numba-cuda-mlir's pickler too)
        try:
            stack.extend(_held_by(item))
        except Exception:  # an object's own attribute lookups: what it holds is not seen
            continue
    return False


def _held_by(item) -> list:
    """What the pickler would pickle with ``item``, for :func:`_holds_device_array`."""
    if isinstance(item, dict):
        return [i for pair in item.items() for i in pair]
    if isinstance(item, (tuple, list, set, frozenset)):
        return list(item)
    if getattr(getattr(item, "dtype", None), "kind", None) == "O" and hasattr(item, "ravel"):
        return list(item.ravel())  # a numpy object array
    func = getattr(item, "py_func", item)  # a dispatcher: its Python function
    if isinstance(func, types_.FunctionType):
        return [c.cell_contents for c in func.__closure__ or () if _filled(c)]
    held = getattr(item, "__dict__", None)
    return list(held.values()) if isinstance(held, dict) and not isinstance(
        item, (type, types_.ModuleType)) else []


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return True


def numba_cache_load_refusal(py_func):
    """The exception numba-cuda-mlir's own cache raises when it looks for ``py_func``'s
    overload (``cache=True``), before compiling, or None. Mirrors ``Cache._index_key`` of its
    vendored ``core/caching.py`` (0.6): the closure's cell contents are pickled with
    ``NumbaPickler``, which refuses a device array -> ``PicklingError`` (its class, same text;
    kcache pickles nothing, it looks)."""
    if py_func.__closure__ is None:  # most kernels: nothing to look into on a lookup
        return None
    if _holds_device_array([c.cell_contents for c in py_func.__closure__ if _filled(c)]):
        return PicklingError(_DEVICE_ARRAY_REFUSAL)
    return None


def numba_cache_refusal(kernel):
    """The exception numba-cuda-mlir's own cache raises when asked to save ``kernel``
    (``cache=True``), or None. Mirrors ``caching.MLIRCacheImpl.check_cachable`` (0.6), which
    ``save_overload`` calls right after the compile: a ``link=`` kernel -> ``RuntimeError``
    (same text)."""
    targetoptions = compile_result(kernel).metadata.get("targetoptions", {}) or {}
    if targetoptions.get("link", []):
        return RuntimeError("Cannot pickle CUDACodeLibrary with linking files")
    return None

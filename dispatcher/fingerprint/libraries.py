"""Which objects belong to a library (numba, numpy, cuda-python, the standard library: named
by module and qualname, their versions are in the toolchain component) and which are user
code (hashed by content); how other objects are recognised (dispatchers, intrinsics, numba
types, device arrays)."""
from __future__ import annotations

import sys
import types

from .model import _LIBRARY_ROOTS


# ---------------------------------------------------------------------------------------
# The walk: resolves references and encodes values, recursing into dependencies.


def _is_library(module_name) -> bool:
    if not isinstance(module_name, str):
        return False
    return module_name.partition(".")[0] in _LIBRARY_ROOTS


def _named_by_library(obj, module_name=None) -> bool:
    """True when ``obj`` (a function, dispatcher, intrinsic or class) may be identified by its
    library name alone: it lives in a library module and is not made at run time inside a
    function (``<locals>`` in its qualname). Such a local function (a closure built by a test
    helper, a factory's product) is a new object, with other closure cells and ``@overload``
    registrations, each time the enclosing function runs, under the very same name."""
    module_name = _origin_module(obj) if module_name is None else module_name
    if not _is_library(module_name):
        return False
    inner = getattr(obj, "py_func", None) or getattr(obj, "_defn", None) or obj
    return "<locals>" not in (getattr(inner, "__qualname__", None) or "")


def _module_level_library_class(cls) -> bool:
    """A class of a library module that its module names (``module.qualname`` leads to it):
    not one made at run time by ``type()`` or inside a function."""
    if not _is_library(cls.__module__) or "<locals>" in cls.__qualname__:
        return False
    obj = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is cls


def _library_named(obj) -> bool:
    """A library's object that its module names (``module.qualname`` leads to this very
    object), whatever its type: numpy's functions are ``_ArrayFunctionDispatcher`` objects,
    not Python functions (``np.min`` and ``np.max`` were told apart by nothing else)."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if not (isinstance(module, str) and isinstance(qualname, str) and _is_library(module)):
        return False
    found = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found is obj


def _qualified(obj) -> str:
    module = getattr(obj, "__module__", None) or "?"
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or "?"
    return f"{module}.{qualname}"


def _type_name(obj) -> str:
    return _qualified(type(obj))


def _is_dispatcher(obj) -> bool:
    # numba-cuda's CUDADispatcher (kernels and device functions) and numba's CPU
    # dispatchers both carry the Python function and the target options.
    return (
        not isinstance(obj, type)
        and hasattr(obj, "py_func")
        and hasattr(obj, "targetoptions")
        and isinstance(getattr(obj, "py_func", None), types.FunctionType)
    )


def _is_intrinsic(obj) -> bool:
    # numba.cuda.extending.intrinsic objects keep their definition in ``_defn``.
    return not isinstance(obj, type) and isinstance(getattr(obj, "_defn", None), types.FunctionType)


def _origin_module(obj):
    """Module that defined a dispatcher's/intrinsic's Python function (or the object)."""
    for attr in ("py_func", "_defn"):
        inner = getattr(obj, attr, None)
        if isinstance(inner, types.FunctionType):
            return inner.__module__
    return getattr(obj, "__module__", None)


def _is_extern(obj) -> bool:
    # numba-cuda's compiler.ExternFunction, returned by cuda.declare_device.
    return type(obj).__name__ == "ExternFunction" and isinstance(getattr(obj, "name", None), str)


def _is_numba_type(obj) -> bool:
    for cls in type(obj).__mro__:
        if cls.__name__ == "Type" and cls.__module__ in (
            "numba.core.types.abstract",
            "numba.cuda.types.abstract",
            "numba_cuda_mlir.numba_cuda.types.abstract",  # numba-cuda-mlir's vendored numba
        ):
            return True
    return False


def _has_cai(obj) -> bool:
    if isinstance(obj, type):
        return False  # e.g. the DeviceNDArray class itself: a name, not data
    try:
        return hasattr(obj, "__cuda_array_interface__")
    except Exception:
        return False


def _deterministic_repr(obj):
    try:
        text = repr(obj)
    except Exception:
        return None
    if " at 0x" in text or " object at " in text or len(text) > 4096:
        return None
    return text

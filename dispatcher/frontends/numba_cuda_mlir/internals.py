"""The numba-cuda-mlir internals kcache reads, imported in one place, and the feature tests
that decide whether the installed numba-cuda-mlir has them (supported: >= 0.6, < 0.7).

Nothing outside ``dispatcher/frontends/numba_cuda_mlir/`` touches a private numba-cuda-mlir
name, so an upgrade is checked here (docs/mlir.md lists what each one is used for).
"""
from __future__ import annotations

import inspect

import numba_cuda_mlir
from numba_cuda_mlir import caching as _caching
from numba_cuda_mlir import compiler as _compiler
from numba_cuda_mlir import descriptor as _descriptor
from numba_cuda_mlir import tools as _tools
from numba_cuda_mlir._whole_function_planners import _REQUIRED_DYNAMIC_SHARED_MEMORY_KEY
from numba_cuda_mlir._whole_function_planners import _planner_registry  # noqa: F401
from numba_cuda_mlir.numba_cuda import types  # noqa: F401
from numba_cuda_mlir.numba_cuda import typing as _typing
from numba_cuda_mlir.numba_cuda.core import config  # noqa: F401
from numba_cuda_mlir.numba_cuda.core import sigutils  # noqa: F401
from numba_cuda_mlir.numba_cuda import serialize as _serialize
from numba_cuda_mlir.numba_cuda.core.compiler_lock import global_compiler_lock  # noqa: F401

MLIRDispatcher = _descriptor.MLIRDispatcher
NullCache = _caching.NullCache  # a dispatcher's cache without cache=True
CompileResult = _compiler.CompileResult
CachedCompileResult = _caching.CachedCompileResult
NullCache = _caching.NullCache
make_signature = _typing.signature
#: The metadata key of the dynamic shared memory a whole-function planner asks for.
REQUIRED_DYNAMIC_SHARED_MEMORY = _REQUIRED_DYNAMIC_SHARED_MEMORY_KEY
tools = _tools
descriptor = _descriptor
#: Per-thread argument types, values and launch configuration of the launch compiling now
#: (``descriptor._compile_arg_types``, set by the launcher before ``_compile``).
compile_arg_types = _descriptor._compile_arg_types
MISSING = _descriptor._MISSING
extensions_use_launch_config = _descriptor._extensions_use_launch_config
typeof = _descriptor.typeof
VERSION = numba_cuda_mlir.__version__
#: The error numba-cuda-mlir's pickler (``serialize.NumbaPickler``) raises for what it refuses
#: (kcache imports no pickle module of its own: it raises this class, pickling nothing).
PicklingError = _serialize.pickle.PicklingError

#: What kcache calls or reads on numba-cuda-mlir beyond the imports above, tested by
#: :func:`missing_internals`: methods of ``MLIRDispatcher`` (the kcache dispatcher overrides
#: ``_compile_impl``/``_compile_public`` and calls them), the module-level hooks the offline
#: target replaces, and what a served compile result is made from.
_METHODS = (
    ("MLIRDispatcher", MLIRDispatcher, (
        "_compile_impl", "_compile_public", "enable_caching", "compile", "compile_device",
        "_compile_device_callee", "_resolve_target_options", "_propagate_compile_callbacks",
        "_apply_shared_memory_carveout", "specialize", "recompile", "disable_compile")),
    ("numba_cuda_mlir.tools", _tools, ("resolve_gpu_target", "get_gpu_compute_capability",
                                       "get_cuda_runtime_version")),
)


def _parameters(fn) -> frozenset | None:
    try:
        return frozenset(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None


def missing_internals() -> list:
    """The numba-cuda-mlir internals kcache needs that the installed one lacks, by name;
    [] when it has them all (``support.refusal`` makes the line)."""
    missing = []
    for name, owner, wanted in _METHODS:
        missing += [f"{name}.{m}" for m in wanted if not hasattr(owner, m)]
    if not hasattr(_tools, "_cached_cc"):  # what offline_target sets
        missing.append("numba_cuda_mlir.tools._cached_cc")
    if "metadata" not in (_parameters(CachedCompileResult) or ()):
        missing.append("CachedCompileResult(signature, metadata)")
    for name in ("_compile_arg_types", "_MISSING", "_extensions_use_launch_config", "typeof"):
        if not hasattr(_descriptor, name):
            missing.append(f"numba_cuda_mlir.descriptor.{name}")
    if not hasattr(_descriptor, "mlir_target"):
        missing.append("numba_cuda_mlir.descriptor.mlir_target")
    return missing

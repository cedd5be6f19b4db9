"""A launchable compile result from an entry: what an entry keeps of a numba-cuda-mlir compile
(:func:`kernel_state`) and the compile result rebuilt from it without the typing or target
context (:func:`rebuild_kernel`), as numba-cuda-mlir's own cache does (``caching.MLIRCacheImpl``
``reduce``/``rebuild``; kcache keeps plain data only, in msgpack, never pickle)."""
from __future__ import annotations

from kcache.entry.artifacts import MLIR_KERNEL_FIELDS

from .internals import (REQUIRED_DYNAMIC_SHARED_MEMORY, CachedCompileResult, CompileResult,
                        make_signature, types)

#: The metadata an entry of a numba-cuda-mlir kernel holds besides its artifacts, all plain
#: data (``kcache.entry.artifacts.MLIR_KERNEL_FIELDS`` checks their types on every read).
STATE_FIELDS = MLIR_KERNEL_FIELDS


def compile_result(kernel):
    """The compile result behind ``kernel`` (``compiler.CompileResult`` wraps one)."""
    return getattr(kernel, "cres", kernel)


def kernel_state(kernel, cc) -> dict:
    """What an entry needs from a numba-cuda-mlir compile result (``kernel``: what
    ``MLIRDispatcher.compile`` returns, or the result its cache's ``save_overload`` is
    given): ``cubin`` (bytes), ``ptx`` (str or None: an LTO build keeps none), ``ltoir``
    (bytes or None), the optimized MLIR (``more_artifacts["mlir"]``: what
    ``inspect_mlir_optimized`` answers, as numba-cuda-mlir's cache keeps it) and the fields of
    :data:`STATE_FIELDS`. ``cc`` is not read: the compile result names its target
    (``gpu_target``)."""
    md = compile_result(kernel).metadata
    ptx = md.get("ptx") or None
    ltoir = md.get("ltoir")
    mlir = md.get("mlir_module_optimized")
    capi = md.get("capi")
    return {
        "cubin": bytes(md["cubin"]),
        "ptx": ptx if isinstance(ptx, str) else (bytes(ptx).decode("utf-8") if ptx else None),
        "ltoir": bytes(ltoir) if ltoir else None,
        "more_artifacts": {"mlir": mlir.encode("utf-8")} if isinstance(mlir, str) and mlir else {},
        "func_name": str(md["func_name"]),
        "cooperative": bool(md.get("use_cooperative", False)),
        "needs_nrt": bool(md.get("needs_nrt", False)),
        "nrt_inline": bool(md.get("nrt_inline", False)),
        "dynamic_shared_memory": int(md.get(REQUIRED_DYNAMIC_SHARED_MEMORY, 0) or 0),
        "gpu_target": _plain_target(md.get("gpu_target") or {}),
        "lto": bool(md.get("ltoir")),
        "capi": capi if isinstance(capi, str) else None,
        "launch_config_sensitive": False,  # launch-config compiles are never stored
        "exceptions": {},  # device-side errors are read back by the launcher, not a table
        "argtypes": tuple(compile_result(kernel).signature.args),
    }


def _plain_target(target: dict) -> dict:
    """``tools.resolve_gpu_target``'s dict with tuples as lists (msgpack-plain)."""
    out = {}
    for name, value in target.items():
        if isinstance(value, tuple):
            value = list(value)
        if value is None or isinstance(value, (bool, int, str, list)):
            out[str(name)] = value
    return out


def _target_of(plain: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in plain.items()}


def rebuild_kernel(state: dict, argtypes: tuple, cc, *, extensions=None, exceptions=None,
                   use: str = "cubin", targetoptions=None):
    """A compile result (``compiler.CompileResult`` over ``caching.CachedCompileResult``, what
    numba-cuda-mlir's own cache hit publishes) from an entry's state, without the typing or
    target context: the native launcher loads ``cubin`` and calls ``func_name``.
    ``targetoptions``: the live dispatcher's (what ``metadata["targetoptions"]`` holds after
    a compile); the entry's optimized MLIR text (artifact ``mlir``) answers
    ``inspect_mlir_optimized``. ``extensions``/``exceptions`` are not used (numba-cuda-mlir
    keeps neither in a compile result). ``use="ptx"`` serves the
    entry's PTX instead of its cubin (the driver JIT-compiles it at load). An NRT kernel gets
    numba-cuda-mlir's NRT memsys set-up callback back (``mlir_optimization``)."""
    if use == "ptx":
        if not state.get("ptx"):
            raise LookupError("the entry has no PTX")
        code = state["ptx"].encode("utf-8") + b"\0"
    elif use == "cubin":
        code = state["cubin"]
    else:
        raise ValueError(f"use must be 'cubin' or 'ptx', not {use!r}")
    mlir = (state.get("more_artifacts") or {}).get("mlir")
    metadata = {
        "cubin": code, "ptx": state.get("ptx") or "", "ltoir": state.get("ltoir"),
        "func_name": state["func_name"],
        "mlir_module_optimized": bytes(mlir).decode("utf-8", "replace") if mlir else None,
        "needs_nrt": state["needs_nrt"], "nrt_inline": state["nrt_inline"],
        "targetoptions": dict(targetoptions or {}),
        "gpu_target": _target_of(state["gpu_target"]),
    }
    if state["cooperative"]:
        metadata["use_cooperative"] = True
    if state["dynamic_shared_memory"]:
        metadata[REQUIRED_DYNAMIC_SHARED_MEMORY] = state["dynamic_shared_memory"]
    if state.get("capi") is not None:
        metadata["capi"] = state["capi"]
    if state["needs_nrt"]:
        from numba_cuda_mlir.mlir_optimization import _nrt_memsys_setup_callback
        metadata["setup_callbacks"] = [_nrt_memsys_setup_callback]
    cres = CachedCompileResult(make_signature(types.none, *argtypes), metadata)
    return CompileResult(cres)

"""Signatures and the current target, as numba-cuda-mlir reads them: argument types from a
signature, the key's signature text, the signature namespace, the device's cc, the
configuration module and the ccs the toolkit compiles for."""
from __future__ import annotations

from .internals import config as _config
from .internals import sigutils, tools, types


def normalize_signature(sig) -> tuple:
    """Argument types of ``sig`` (a signature string, a Signature or a tuple of types), as
    ``MLIRDispatcher._compile_public`` gets them from the vendored
    ``sigutils.normalize_signature``. Raises TypeError for a non-void return type."""
    argtypes, restype = sigutils.normalize_signature(sig)
    if restype is not None and restype != types.none:
        raise TypeError(f"a kernel signature must return void, got {restype} in {sig!r}")
    return tuple(argtypes)


def signature_string(argtypes: tuple) -> str:
    """The ``signature`` key component: ``str`` of the tuple of types (layout, readonly and
    alignment named), as for numba-cuda."""
    return str(tuple(argtypes))


def signature_display(argtypes: tuple) -> str:
    """Argument types as numba prints them, for people: ``"(array(float32, 1d, C), float32)"``."""
    return "(" + ", ".join(str(t) for t in argtypes) + ")"


def is_signature(obj) -> bool:
    """True if ``obj`` is a signature, as ``numba_cuda_mlir.cuda.jit`` tells eager signatures
    from functions (``decorators._get_signatures``: ``sigutils.is_signature``)."""
    return sigutils.is_signature(obj)


def supported_ccs() -> list | None:
    """The compute capabilities ((major, minor), ascending) the installed toolkit compiles
    for (the vendored ``cudadrv.nvrtc.get_supported_ccs``); None when it cannot be asked."""
    try:
        from numba_cuda_mlir.numba_cuda.cudadrv import nvrtc
        return sorted(tuple(cc) for cc in nvrtc.get_supported_ccs())
    except Exception:  # no NVRTC library: nothing to check against
        return None


def numba_config():
    """The configuration module numba-cuda-mlir reads while compiling: its vendored
    ``numba_cuda_mlir.numba_cuda.core.config`` (numba's own is never read)."""
    return _config


def current_cc() -> tuple:
    """(major, minor) of the current device, as numba-cuda-mlir asks it
    (``tools.get_gpu_compute_capability``: remembered per process in ``tools._cached_cc``);
    never builds a typing or target context."""
    return tuple(tools.get_gpu_compute_capability(tuple))[:2]


def signature_namespace() -> dict:
    """The names a signature string is evaluated with (the vendored
    ``sigutils._parse_signature_string``: the vendored ``types`` namespace)."""
    return types.__dict__


def arch_name(cc) -> str:
    """The arch numba-cuda-mlir compiles a kernel for on a device of compute capability
    ``cc`` with no ``chip=`` option: ``sm_<major><minor>``, never an ``a`` suffix
    (``tools.format_arch``; 9.0 is ``sm_90``, where numba-cuda compiles ``sm_90a``; a suffix
    given is ignored, as the offline target does)."""
    from kcache.arch import parse_cc
    major, minor, _suffix = parse_cc(cc)
    return f"sm_{major}{minor}"


#: Target options that are not code: the cache switch, the eager signature and how it is
#: read, and what only prints while compiling (the dispatcher compiles instead of serving
#: while one of those is on).
_NOT_CODE = frozenset({
    "cache", "signature", "annotations_as_signatures", "profile_jit", "dump",
    "dump_numba_ir", "dump_mlir", "dump_cubin", "dump_llvmir", "dump_ptx", "dump_ast",
    "dump_ast_after_all", "print_before_all", "print_after_all"})


def key_targetoptions(dispatcher) -> dict:
    """The target options of ``dispatcher`` that change code, as the key takes them: every
    one but :data:`_NOT_CODE`, with ``chip`` as the user gave it (numba-cuda-mlir writes the
    resolved chip into ``targetoptions`` at each compile; a kcache dispatcher puts the given
    one back, kept in ``_kcache_chip``)."""
    options = {k: v for k, v in dispatcher.targetoptions.items() if k not in _NOT_CODE}
    given = getattr(dispatcher, "_kcache_chip", None)
    if given is not None:
        had, chip = given
        if had:
            options["chip"] = chip
        else:
            options.pop("chip", None)
    return options


def compiled_arch(cres, cc) -> str:
    """The arch a compile result's cubin is for: the linker's (``gpu_target["linker_arch"]``,
    ``tools.resolve_gpu_target``: the device's cc, or the ``chip=`` option when newer), else
    :func:`arch_name` of ``cc``."""
    target = getattr(cres, "metadata", {}).get("gpu_target") or {}
    arch = target.get("linker_arch")
    return arch if isinstance(arch, str) and arch.startswith("sm_") else arch_name(cc)

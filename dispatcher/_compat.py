"""Every use of numba-cuda internals, in one place (supported: numba-cuda >=0.26,<0.31).

Each function names the numba-cuda code it mirrors; docs/compat.md lists them all. Nothing
else in kcache touches a private numba-cuda name, so a numba-cuda upgrade is checked here.
What differs between the supported versions is found by testing for the feature (an import,
an attribute, a parameter), never by version number: :data:`LAUNCH_CONFIGS` (0.30's
launch-configuration-sensitive kernels). :func:`missing_internals` lists what kcache needs
and the installed numba-cuda lacks; ``_support.refusal`` turns it into the one line that
switches caching off (docs/compat.md).
"""
from __future__ import annotations

import contextlib
import inspect
import sys
import threading

from numba.cuda import codegen as _codegen
from numba.cuda import dispatcher as _dispatcher
from numba.cuda import types
from numba.cuda.api import get_current_device
from numba.cuda.core import config as _config
from numba.cuda.core import sigutils
from numba.cuda.core.callconv import _MinimalCallHelper
from numba.cuda.core.compiler_lock import global_compiler_lock
from numba.cuda.memory_management.nrt import NRT_LIBRARY
from numba.cuda.typing import signature as _make_signature

try:  # cuda-core >= 0.5 (numba-cuda 0.26 needs 0.5.1; before 0.30.2 it pins < 1.0)
    from cuda.core import ObjectCode
except ImportError:  # cuda-core 0.3-0.4, which numba-cuda <= 0.24 accepts: as its _compat does
    from cuda.core.experimental import ObjectCode

try:  # numba-cuda >= 0.30: kernels whose code depends on their launch configuration
    from numba.cuda import launchconfig as _launchconfig
except ImportError:
    _launchconfig = None

from kcache.arch import full_cc

CUDADispatcher = _dispatcher.CUDADispatcher
Kernel = _dispatcher._Kernel
CUDACodeLibrary = _codegen.CUDACodeLibrary


def _parameters(cls, method: str):
    """The parameter names of ``cls.method`` (a frozenset), or None where it has none."""
    try:
        return frozenset(inspect.signature(getattr(cls, method)).parameters)
    except (AttributeError, TypeError, ValueError):
        return None


#: numba-cuda 0.30's launch-configuration-sensitive kernels, by name -> present here.
_LAUNCH_CONFIG_FEATURES = {
    "numba.cuda.launchconfig": _launchconfig is not None,
    "CUDADispatcher._cache_launch_config_key": hasattr(CUDADispatcher, "_cache_launch_config_key"),
    "numba.cuda.dispatcher._NO_LAUNCH_CONFIG_CACHE_KEY":
        hasattr(_dispatcher, "_NO_LAUNCH_CONFIG_CACHE_KEY"),
    "_Kernel._rebuild(launch_config_sensitive=)":
        "launch_config_sensitive" in (_parameters(Kernel, "_rebuild") or ()),
}
#: True when numba-cuda has launch-configuration-sensitive kernels (all of the above; 0.30).
#: Without them (0.26-0.29) no kernel is sensitive, and none served is either; a numba-cuda
#: with some of them only is refused (:func:`missing_internals`).
LAUNCH_CONFIGS = all(_LAUNCH_CONFIG_FEATURES.values())
#: numba-cuda's marker for "no launch configuration" in launch-config-sensitive cache keys
#: (kcache warm --replay skips entries keyed by another launch configuration). Where numba-cuda
#: has none, 0.30's text: an entry a 0.30 toolchain made without a launch configuration can
#: still be replayed with an older one.
NO_LAUNCH_CONFIG = getattr(_dispatcher, "_NO_LAUNCH_CONFIG_CACHE_KEY",
                           "__numba_cuda_no_launch_config__")

#: What kcache calls on numba-cuda, tested by :func:`missing_internals` (beyond the imports
#: above): the parameters of the two ``_rebuild`` classmethods :func:`rebuild_kernel` calls, and
#: the methods the served library and kernel override or read. 0.24 and older lack
#: ``_Kernel._rebuild(shared_memory_carveout=)`` (and 0.22-0.23 key compute capabilities
#: without the "a" suffix and keep PTX as one string, which kernel_state would misfile).
_REBUILD_PARAMETERS = (
    ("_Kernel", Kernel, ("cooperative", "name", "signature", "codelibrary", "debug",
                         "lineinfo", "call_helper", "extensions", "shared_memory_carveout")),
    ("CUDACodeLibrary", CUDACodeLibrary, (
        "codegen", "name", "entry_name", "llvm_strs", "ptx_cache", "cubin_cache",
        "linkerinfo_cache", "max_registers", "nvvm_options", "needs_cudadevrt", "nrt",
        "use_cooperative", "lto")),
)
_METHODS = (
    ("CUDACodeLibrary", CUDACodeLibrary, ("_ensure_cc", "get_cubin", "get_asm_strs",
                                          "get_ltoir", "get_lto_ptx", "llvm_strs")),
    ("_Kernel", Kernel, ("bind", "launch", "argument_types")),
    ("CUDADispatcher", CUDADispatcher, ("compile", "compile_device", "enable_caching",
                                        "specialize", "add_overload", "typeof_pyval",
                                        "disable_compile", "recompile")),
)


def missing_internals() -> list:
    """The numba-cuda internals kcache needs that the installed numba-cuda lacks, by name
    (e.g. ``"_Kernel._rebuild(shared_memory_carveout=)"``); [] when it has them all. Feature
    tests only (``_support.refusal`` makes the line; a module this one imports being gone
    fails its import, which ``refusal`` reports too)."""
    missing = []
    for name, cls, wanted in _REBUILD_PARAMETERS:
        have = _parameters(cls, "_rebuild")
        if have is None:
            missing.append(f"{name}._rebuild")
        else:
            missing += [f"{name}._rebuild({p}=)" for p in wanted if p not in have]
    for name, cls, wanted in _METHODS:
        missing += [f"{name}.{m}" for m in wanted if not hasattr(cls, m)]
    if not hasattr(_dispatcher, "get_current_device"):  # what offline_target replaces
        missing.append("numba.cuda.dispatcher.get_current_device")
    if any(_LAUNCH_CONFIG_FEATURES.values()):  # all or none: a kernel kcache cannot key else
        missing += [name for name, here in _LAUNCH_CONFIG_FEATURES.items() if not here]
    return missing


__all__ = [
    "CUDADispatcher", "Kernel", "CUDACodeLibrary", "ObjectCode", "global_compiler_lock",
    "normalize_signature", "signature_string", "signature_display", "is_signature",
    "current_cc", "current_launch_config", "compile_kernel", "uncacheable_reason",
    "kernel_state", "rebuild_kernel", "ServedKernel", "ServedCodeLibrary", "make_call_helper", "offline_target", "patch_dispatcher",
    "unpatch_dispatcher", "is_patched", "supported_ccs", "launch_config_key",
    "overload_implementations", "numba_config", "numba_cache_refusal", "fixed_signatures",
    "extension_registries", "extension_parts", "extension_records", "LAUNCH_CONFIGS",
    "NO_LAUNCH_CONFIG", "missing_internals", "launch_config_specialization",
]


def normalize_signature(sig) -> tuple:
    """Argument types of ``sig`` (a signature string, a numba Signature or a tuple of numba
    types), as numba-cuda's ``CUDADispatcher.compile`` gets them from
    ``sigutils.normalize_signature``. Raises TypeError for a kernel signature with a non-void
    return type."""
    argtypes, restype = sigutils.normalize_signature(sig)
    if restype is not None and restype != types.none:
        raise TypeError(f"a kernel signature must return void, got {restype} in {sig!r}")
    return tuple(argtypes)


def signature_string(argtypes: tuple) -> str:
    """The ``signature`` key component: ``str`` of the tuple of numba types, which names layout,
    readonly and alignment (``"(array(float32, 1d, C),)"``, ``"unaligned array(...)"``).
    Remembered per tuple of types (numba types are interned and hashable; printing array
    types costs several microseconds each)."""
    argtypes = tuple(argtypes)
    try:
        return _signature_strings[argtypes]
    except KeyError:
        pass
    except TypeError:  # an unhashable type: just print it
        return str(argtypes)
    text = str(argtypes)
    if len(_signature_strings) < 4096:
        _signature_strings[argtypes] = text
    return text


_signature_strings: dict = {}


def signature_display(argtypes: tuple) -> str:
    """Argument types as numba prints them, for people (entry ``meta["signature"]``, messages):
    ``"(array(float32, 1d, C), float32)"``. Not a key component (see :func:`signature_string`)."""
    return "(" + ", ".join(str(t) for t in argtypes) + ")"


def is_signature(obj) -> bool:
    """True if ``obj`` is a signature (string, tuple of types or Signature), as
    ``numba.cuda.jit`` tells eager signatures from functions (``sigutils.is_signature``)."""
    return sigutils.is_signature(obj)


def supported_ccs() -> list | None:
    """The compute capabilities ((major, minor), ascending) the installed CUDA toolkit can
    compile for, as numba-cuda asks them (``numba.cuda.cudadrv.nvrtc.get_supported_ccs``,
    i.e. ``nvrtcGetSupportedArchs``; ``get_arch_option`` picks the NVVM target from this list).
    None when the toolkit cannot be asked (the compile then reports the problem itself)."""
    try:
        from numba.cuda.cudadrv import nvrtc
        return sorted(tuple(cc) for cc in nvrtc.get_supported_ccs())
    except Exception:  # no NVRTC library: nothing to check against
        return None


def numba_config():
    """The configuration module numba-cuda reads while compiling (``numba.cuda.core.config``,
    which is ``numba.core.config`` when numba is installed). Its NRT and debug-info
    attributes (``CUDA_ENABLE_NRT``, ``CUDA_DEBUG_POLY``, ...) are set when
    ``numba.cuda.memory_management.nrt`` and ``numba.cuda.debuginfo`` are imported, which
    ``import numba.cuda`` does (and this module, through ``NRT_LIBRARY``)."""
    return _config


def current_cc() -> tuple:
    """(major, minor) of the current device (``numba.cuda.get_current_device``); creates the
    CUDA context but never numba's typing or target context."""
    return tuple(get_current_device().compute_capability)


def current_launch_config():
    """numba-cuda's launch configuration of the launch now compiling, or None (always None
    without :data:`LAUNCH_CONFIGS`)."""
    return _launchconfig.current_launch_config() if LAUNCH_CONFIGS else None


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


def kernel_state(kernel, cc) -> dict:
    """What an entry needs from a compiled kernel for full cc ``cc`` (``kcache.arch.full_cc``):
    ``cubin`` (bytes, produced by nvJitLink if not yet linked), ``ptx`` (str or None; present
    when the non-LTO path produced it), ``ltoir`` (bytes or None), and the fields of
    ``_Kernel._reduce_states`` / ``CUDACodeLibrary._reduce_states`` that are plain data."""
    lib = kernel._codelibrary
    cubin = lib.get_cubin(cc=cc).code
    ptxes = lib._ptx_cache.get(cc)
    ltoir = lib._ltoir_cache.get(cc)
    nrt = NRT_LIBRARY in lib._linking_files
    return {
        "cubin": bytes(cubin),
        "ptx": "\n".join(ptxes) if ptxes else None,
        "ltoir": bytes(ltoir) if ltoir is not None else None,
        "entry_name": kernel.entry_name,
        "name": lib.name,
        "cooperative": bool(kernel.cooperative),
        "needs_cudadevrt": bool(lib.needs_cudadevrt),
        "nrt": nrt,
        "max_registers": lib._max_registers,
        "lto": bool(lib._lto),
        "nvvm_options": dict(lib._nvvm_options),
        "launch_config_sensitive": bool(getattr(kernel, "launch_config_sensitive", False)),
        "shared_memory_carveout": kernel.shared_memory_carveout,
        "debug": bool(kernel.debug),
        "lineinfo": bool(kernel.lineinfo),
        "exceptions": dict(getattr(kernel.call_helper, "exceptions", {}) or {}),
        "argtypes": tuple(kernel.argument_types),
    }


def make_call_helper(exceptions: dict):
    """A ``_MinimalCallHelper`` holding ``{code: (exception class, args, loc)}``, the table
    ``_Kernel.launch`` reads when a debug kernel reports an error."""
    helper = _MinimalCallHelper()
    helper.exceptions = dict(exceptions)
    return helper


class ServedCodeLibrary(CUDACodeLibrary):
    """The code library of a kernel served from an entry: the cubin (and the PTX, when the entry
    holds it) as numba-cuda's ``CUDACodeLibrary._rebuild`` would restore them; what only the
    compiler's in-memory state can answer (LLVM IR, PTX or LTO-IR for another cc, LTO PTX)
    comes from a kernel compiled on demand by ``_kcache_compiled()``, which the served kernel
    never launches."""

    _kcache_compiled = None  # () -> the compiled _Kernel (set by rebuild_kernel)

    def _kcache_library(self):
        return self._kcache_compiled()._codelibrary

    @property
    def llvm_strs(self):
        return self._kcache_library().llvm_strs

    def get_asm_strs(self, cc=None):
        cc = self._ensure_cc(cc)
        if self._ptx_cache.get(cc):
            return self._ptx_cache[cc]
        return self._kcache_library().get_asm_strs(cc=cc)

    def get_ltoir(self, cc=None):
        cc = self._ensure_cc(cc)
        if self._ltoir_cache.get(cc) is not None:
            return self._ltoir_cache[cc]
        return self._kcache_library().get_ltoir(cc=cc)

    def get_lto_ptx(self, cc=None):
        return self._kcache_library().get_lto_ptx(cc=cc)

    def get_cubin(self, cc=None):
        cc = self._ensure_cc(cc)
        if self._cubin_cache.get(cc) or self._ptx_cache.get(cc):
            return super().get_cubin(cc=cc)  # the entry's cubin, or a link of its PTX
        return self._kcache_library().get_cubin(cc=cc)


class ServedKernel(Kernel):
    """A ``_Kernel`` rebuilt from an entry (``_Kernel._rebuild``, as numba-cuda's cache does),
    with the attributes a compiled ``_Kernel.__init__`` sets that numba-cuda's dispatcher reads
    (``objectmode``, ``entry_point``: ``_DispatcherBase.nopython_signatures`` and its
    finalizer). Typing state (``_type_annotation``, ``fndesc``, ``environment``) comes from the
    kernel compiled on demand, as the library's LLVM IR does."""

    _ON_DEMAND = frozenset(("_type_annotation", "fndesc", "environment"))

    def __getattr__(self, name):
        # Only reached for attributes the instance lacks; bind()'s hasattr(self,
        # "target_context") must stay False (no compile on a launch).
        if name in ServedKernel._ON_DEMAND and "_kcache_compiled" in self.__dict__:
            return getattr(self.__dict__["_kcache_compiled"](), name)
        raise AttributeError(name)


def rebuild_kernel(state: dict, argtypes: tuple, cc, *, extensions, exceptions: dict,
                   use: str = "cubin", compiled=None, py_func=None, launch_bounds=None):
    """A launchable ``_Kernel`` (a :class:`ServedKernel`) from an entry's state, without numba's
    typing or target context.

    Mirrors ``CUDACodeLibrary._rebuild`` + ``_Kernel._rebuild`` (what numba-cuda's pickle cache
    does), except that the library gets only what ``get_cufunc`` needs: the cubin for full cc
    ``cc`` (``use="cubin"``; the entry's PTX, when it has one, answers ``inspect_asm`` for that
    cc), or only the PTX (``use="ptx"``: numba-cuda then links it with nvJitLink / the driver,
    the fallback for a cubin the driver refuses). ``state`` holds the keys written by
    :func:`kernel_state`; ``extensions`` come from the live dispatcher. ``compiled``: a callable
    returning the same kernel compiled (memoised by the caller), used only when something asks
    what the entry does not hold (LLVM IR, typing); ``py_func`` and ``launch_bounds`` are set
    as ``_Kernel.__init__`` sets them.
    """
    cubin_cache, ptx_cache = {}, {}
    if use == "cubin":
        cubin_cache[cc] = ObjectCode.from_cubin(state["cubin"])
        if state.get("ptx"):
            ptx_cache[cc] = [state["ptx"]]
    elif use == "ptx":
        if not state.get("ptx"):
            raise LookupError("the entry has no PTX")
        ptx_cache[cc] = [state["ptx"]]
    else:
        raise ValueError(f"use must be 'cubin' or 'ptx', not {use!r}")
    lib_class = ServedCodeLibrary if compiled is not None else CUDACodeLibrary
    lib = lib_class._rebuild(
        codegen=None, name=state["name"], entry_name=state["entry_name"], llvm_strs=None,
        ptx_cache=ptx_cache, cubin_cache=cubin_cache, linkerinfo_cache={},
        max_registers=state["max_registers"], nvvm_options=dict(state["nvvm_options"]),
        needs_cudadevrt=state["needs_cudadevrt"], nrt=state["nrt"],
        use_cooperative=state["cooperative"],
        # Linking PTX must not go through LTO-IR, which a rebuilt library does not have.
        lto=state["lto"] if use == "cubin" else False,
    )
    sensitive = {}
    if LAUNCH_CONFIGS:
        sensitive["launch_config_sensitive"] = state["launch_config_sensitive"]
    elif state["launch_config_sensitive"]:  # no such kernel without them: not this toolchain's
        raise ValueError("the entry is launch-config sensitive, which this numba-cuda is not")
    kernel = Kernel._rebuild(  # its super(cls, ...).__init__() call needs cls to be _Kernel
        cooperative=state["cooperative"], name=state["entry_name"],
        signature=_make_signature(types.none, *argtypes), codelibrary=lib,
        debug=state["debug"], lineinfo=state["lineinfo"],
        call_helper=make_call_helper(exceptions), extensions=list(extensions or []),
        shared_memory_carveout=state["shared_memory_carveout"], **sensitive,
    )
    kernel.__class__ = ServedKernel
    # What _Kernel.__init__ sets and _Kernel._rebuild does not (numba-cuda 0.26-0.30).
    kernel.objectmode = False
    kernel.entry_point = None
    kernel.py_func = py_func
    kernel.argtypes = tuple(argtypes)
    kernel.launch_bounds = launch_bounds
    kernel._referenced_environments = []
    kernel.lifted = []
    if compiled is not None:
        lib._kcache_compiled = compiled
        kernel._kcache_compiled = compiled
        del kernel._type_annotation  # None from _rebuild: typing comes from `compiled`
    return kernel


# --- compiling for an explicit compute capability, without a GPU --------------------------

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


# --- transparent mode: numba.cuda.jit(cache=True) -> kcache ----------------------------------

_originals: dict[str, object] = {}


def patch_dispatcher(on_enable_caching, on_init) -> None:
    """Route ``CUDADispatcher.enable_caching`` (called by ``numba.cuda.jit(cache=True)``) to
    ``on_enable_caching(dispatcher, original)`` and, after ``CUDADispatcher.__init__``, call
    ``on_init(dispatcher)``. Idempotent; :func:`unpatch_dispatcher` restores numba-cuda's."""
    if not _originals:
        _originals["enable_caching"] = CUDADispatcher.__dict__["enable_caching"]
        _originals["__init__"] = CUDADispatcher.__dict__["__init__"]
    original_enable = _originals["enable_caching"]
    original_init = _originals["__init__"]

    def enable_caching(self):
        on_enable_caching(self, original_enable)

    def __init__(self, py_func, targetoptions, *args, **kwargs):
        original_init(self, py_func, targetoptions, *args, **kwargs)
        on_init(self)

    enable_caching.__doc__ = original_enable.__doc__
    __init__.__doc__ = original_init.__doc__
    enable_caching._kcache = __init__._kcache = True
    CUDADispatcher.enable_caching = enable_caching
    CUDADispatcher.__init__ = __init__


def unpatch_dispatcher() -> None:
    """Restore numba-cuda's ``CUDADispatcher.enable_caching`` and ``__init__``."""
    if _originals:
        CUDADispatcher.enable_caching = _originals.pop("enable_caching")
        CUDADispatcher.__init__ = _originals.pop("__init__")


def is_patched() -> bool:
    """True while :func:`patch_dispatcher` is in effect."""
    return getattr(CUDADispatcher.__dict__["enable_caching"], "_kcache", False)


def launch_config_key(dispatcher, launch_config):
    """numba-cuda's launch-config cache key for ``dispatcher`` (``_cache_launch_config_key``):
    ``(griddim, blockdim, sharedmem)`` or its "no launch configuration" marker
    (``dispatcher._NO_LAUNCH_CONFIG_CACHE_KEY``); the marker without :data:`LAUNCH_CONFIGS`."""
    if not LAUNCH_CONFIGS:
        return NO_LAUNCH_CONFIG
    return dispatcher._cache_launch_config_key(launch_config)


def launch_config_specialization(dispatcher, key, make):
    """The dispatcher of ``dispatcher``'s kernel for launch configuration ``key``, made by
    ``make()`` the first time. Mirrors ``CUDADispatcher._get_launch_config_specialization``
    (numba-cuda 0.30, which calls it only for a launch-config-sensitive kernel; never called
    without :data:`LAUNCH_CONFIGS`)."""
    specializations = dispatcher._launch_config_specializations
    made = specializations.get(key)
    if made is None:
        made = make()
        made._launch_config_sensitive = True
        made._launch_config_is_specialized = True
        made._launch_config_specialization_key = key
        made._launch_config_default_key = key
        specializations[key] = made
    return made


# --- @overload implementations (for the source fingerprint) ---------------------------------
# numba-cuda keeps ``@overload`` templates in the typing registry behind the public
# ``numba.cuda.extending.infer`` (a bound method of that registry): ``registry.globals`` is a
# list of (function, typing Function type) pairs, each type's ``templates`` carry
# ``_overload_func`` (the Python implementation) and ``_jit_options``.
_overload_index: dict = {"n": -1, "by_id": {}}


def fixed_signatures(disp) -> list | None:
    """The signatures a CPU dispatcher (numba's ``@jit``) is limited to when it was given explicit ones
    (numba's ``Dispatcher._can_compile`` is False: typing picks among them, converting the
    arguments), as strings in the order given; None when it compiles on demand."""
    if getattr(disp, "_can_compile", True) or isinstance(disp, CUDADispatcher):
        # A CUDA device function's eager compile may be deferred (kcache warm's offline
        # target), so whether it is limited yet depends on the process: never keyed on it.
        return None
    return [str(sig) for sig in getattr(disp, "nopython_signatures", ())]


def overload_implementations(fn) -> list:
    """[(implementation function, jit options dict or None)] registered with numba-cuda's
    ``@overload`` for ``fn``; [] when none (or the registry is not where 0.30 keeps it).
    Indexed once per registry size, so a call costs a dict look-up."""
    registry = _typing_registry()
    if registry is None:
        return []
    entries = registry.globals
    if len(entries) != _overload_index["n"]:
        by_id: dict = {}
        for val, typ in list(entries):
            for template in getattr(typ, "templates", ()) or ():
                if hasattr(template, "_overload_func"):
                    by_id.setdefault(id(val), []).append((val, template))
        _overload_index.update(n=len(entries), by_id=by_id)
    return [(getattr(t, "_overload_func", None), _template_options(t))
            for val, t in _overload_index["by_id"].get(id(fn), ()) if val is fn]


def _template_options(template):
    """An ``@overload`` template's jit options plus the ``overload()`` arguments that change
    typing or the code (``make_overload_template``'s ``_strict``, ``_inline``,
    ``prefer_literal``), each only when it differs from ``overload()``'s default so that keys
    of overloads declared with the defaults stay as they were."""
    options = getattr(template, "_jit_options", None)
    extra = {}
    if getattr(template, "_strict", True) is not True:
        extra["__strict__"] = bool(template._strict)
    if getattr(template, "prefer_literal", False):
        extra["__prefer_literal__"] = True
    inline = getattr(getattr(template, "_inline", None), "_inline", "never")
    if inline != "never":
        extra["__inline__"] = inline if isinstance(inline, str) else \
            f"{getattr(inline, '__module__', '?')}:{getattr(inline, '__qualname__', '?')}"
    if not extra:
        return options
    return {**(options or {}), **extra}


def _typing_registry():
    ext = sys.modules.get("numba.cuda.extending")
    if ext is None:
        return None  # nothing can have been registered through it yet
    registry = getattr(getattr(ext, "infer", None), "__self__", None)
    return registry if isinstance(getattr(registry, "globals", None), list) else None


# === extension registrations (dispatcher/extensions.py) =======================================
# The registries numba-cuda 0.30's CUDA typing and target contexts install
# (CUDATypingContext.load_additional_registries + BaseContext._load_builtins; CUDATargetContext.
# load_additional_registries + BaseContext.refresh), the typeof functions (numba-cuda's
# typeof_impl, which falls back to numba's), the data model managers the target chains
# (cuda_data_manager.chain(default_manager)) and the rewrite registry the CUDA pipeline applies
# (untyped_passes: rewrite_registry.apply). tests/test_extension_keys.py checks these lists
# against the registries live contexts hold, so an upgrade cannot add one silently.
# "hot": a public extension API registers there (numba.cuda.extending, numba.core.extending,
# numba.cuda.cudadecl/cudaimpl): looked at on every key. The others are looked at whenever a
# module was imported since (registering into a library's own registry at run time, outside
# an import, is not seen: docs/keys.md, Limits).

_TYPING_REGISTRIES = (
    ("numba.cuda.typing.templates", "builtin_registry", True),
    ("numba.cuda.cudadecl", "registry", True),
    ("numba.core.typing.templates", "builtin_registry", True),
    ("numba.cuda.typing.cffi_utils", "registry", False),
    ("numba.cuda.cudamath", "registry", False),
    ("numba.cuda.typing.cmathdecl", "registry", False),
    ("numba.cuda.libdevicedecl", "registry", False),
    ("numba.cuda.typing.npydecl", "registry", False),
    ("numba.cuda.typing.enumdecl", "registry", False),
    ("numba.cuda.vector_types", "typing_registry", False),
    ("numba.cuda._internal.cuda_fp16", "typing_registry", False),
    ("numba.cuda._internal.cuda_bf16", "typing_registry", False),
    ("numba.cuda._internal.cuda_fp8", "typing_registry", False),
    ("numba.cuda.typing.builtins", "registry", False),
    ("numba.cuda.typing.collections", "registry", False),
    ("numba.cuda.typing.arraydecl", "registry", False),
    ("numba.cuda.typing.npdatetime", "registry", False),
)
_LOWERING_REGISTRIES = (
    ("numba.cuda.core.imputils", "builtin_registry", True),
    ("numba.cuda.cudaimpl", "registry", True),
    ("numba.core.imputils", "builtin_registry", True),
    ("numba.cuda.misc.cffiimpl", "registry", False),
    ("numba.cuda.printimpl", "registry", False),
    ("numba.cuda.libdeviceimpl", "registry", False),
    ("numba.cuda.cpython.cmathimpl", "registry", False),
    ("numba.cuda.cpython.mathimpl", "registry", False),
    ("numba.cuda.cpython.numbers", "registry", False),
    ("numba.cuda.core.optional", "registry", False),
    ("numba.cuda.mathimpl", "registry", False),
    ("numba.cuda.vector_types", "impl_registry", False),
    ("numba.cuda._internal.cuda_fp16", "target_registry", False),
    ("numba.cuda._internal.cuda_bf16", "target_registry", False),
    ("numba.cuda._internal.cuda_fp8", "target_registry", False),
    ("numba.cuda.cpython.slicing", "registry", False),
    ("numba.cuda.cpython.iterators", "registry", False),
    ("numba.cuda.cpython.listobj", "registry", False),
    ("numba.cuda.cpython.unicode", "registry", False),
    ("numba.cuda.cpython.charseq", "registry", False),
    ("numba.cuda.cpython.tupleobj", "registry", False),
    ("numba.cuda.cpython.rangeobj", "registry", False),
    ("numba.cuda.cpython.enumimpl", "registry", False),
    ("numba.cuda.cpython.builtins", "registry", False),
    ("numba.cuda.np.polynomial.polynomial_core", "registry", False),
    ("numba.cuda.np.npdatetime", "registry", False),
    ("numba.cuda.np.arrayobj", "registry", False),
    ("numba.cuda.np.arraymath", "registry", False),
)
_TYPEOF = (("numba.cuda.typing.typeof", "typeof_impl"), ("numba.core.typing.typeof", "typeof_impl"))
_MODEL_MANAGERS = (("numba.cuda.models", "cuda_data_manager"),
                   ("numba.cuda.datamodel.registry", "default_manager"),
                   ("numba.cuda.datamodel.cuda_registry", "default_manager"),
                   ("numba.core.datamodel.registry", "default_manager"))
_REWRITES = ("numba.cuda.core.rewrites.registry", "rewrite_registry")
_TYPING_LISTS = ("functions", "attributes", "globals")
_LOWERING_LISTS = ("functions", "getattrs", "setattrs", "casts", "constants")


def extension_registry_modules() -> tuple:
    """The names of the modules that hold the registries :func:`extension_registries` reads
    (a registry appears when its module is imported)."""
    return tuple(m for m, _a, _h in _TYPING_REGISTRIES) + \
        tuple(m for m, _a, _h in _LOWERING_REGISTRIES) + tuple(m for m, _a in _TYPEOF) + \
        tuple(m for m, _a in _MODEL_MANAGERS) + (_REWRITES[0],)


def extension_registries() -> list:
    """``[(kind, hot, container)]``: every registration container of the registries above whose
    module is imported (a registry of a module not imported holds nothing). ``kind`` names
    what its items are for :func:`extension_records`; containers are lists (append-only) or
    dicts (typeof functions, data models by type class), and the rewrite registry's dict of
    lists by pass kind is given too (a new kind grows it)."""
    out, seen = [], set()

    def add(kind, hot, container):
        if container is not None and id(container) not in seen:
            seen.add(id(container))
            out.append((kind, hot, container))

    for table, lists, prefix in ((_TYPING_REGISTRIES, _TYPING_LISTS, "typing"),
                                 (_LOWERING_REGISTRIES, _LOWERING_LISTS, "lower")):
        for module, attr, hot in table:
            registry = getattr(sys.modules.get(module), attr, None)
            for name in lists:
                add(f"{prefix}-{name}", hot, getattr(registry, name, None))
    for module, attr in _TYPEOF:
        add("typeof", True, getattr(getattr(sys.modules.get(module), attr, None), "registry", None))
    for module, attr in _MODEL_MANAGERS:
        add("model", True, getattr(getattr(sys.modules.get(module), attr, None), "_handlers", None))
    rewrites = getattr(getattr(sys.modules.get(_REWRITES[0]), _REWRITES[1], None), "rewrites", None)
    if isinstance(rewrites, dict):
        add("rewrite-kinds", True, rewrites)
        for kind, classes in list(rewrites.items()):
            add(f"rewrite {kind}", True, classes)
    return out


def known_and_installed_registries():
    """For tests/test_extension_keys.py: ``(ids of the registries of the tables above,
    [(name, registry)] of those numba-cuda's CUDA typing and target contexts hold once
    refreshed)``. Creates the contexts (no device needed)."""
    from numba.cuda.descriptor import cuda_target

    typing, target = cuda_target.typing_context, cuda_target.target_context
    typing.refresh()
    target.refresh()
    known = {id(getattr(sys.modules.get(module), attr, None))
             for module, attr, _hot in _TYPING_REGISTRIES + _LOWERING_REGISTRIES}
    installed = [(f"{type(r).__module__} registry {getattr(r, 'name', '')}", r)
                 for r in list(typing._registries) + list(target._registries)]
    return known, installed


def extension_parts(kind: str, items: list) -> list:
    """For each registration of ``items`` (items of a container of
    :func:`extension_registries`, of ``kind``), the tuple of objects that tell whose it is:
    its implementation, what it is registered for (argument types one by one), and the
    templates of a global's ``types.Function`` (an ``@overload`` template by its function,
    key and attribute). Built in bulk: the first key of a process reads every registration
    numba-cuda made (about two thousand)."""
    if kind == "lower-functions":
        return [(impl, func, *argtys) for impl, func, argtys in items]
    if kind in ("lower-casts", "lower-constants"):
        return [(impl, *sig) for impl, sig in items]
    if kind in ("lower-getattrs", "lower-setattrs"):
        return [(_decorated(impl), attr, *(sig or ())) for impl, attr, sig in items]
    if kind in ("typing-functions", "typing-attributes"):
        return [_template_parts(t) for t in items]
    if kind == "typing-globals":
        return [(val, typ, *[p for t in getattr(typ, "templates", None) or ()
                             for p in _template_parts(t)]) for val, typ in items]
    if kind in ("typeof", "model"):
        return items  # (type class, function or model class) pairs
    return [(item,) for item in items]


def _template_parts(template) -> tuple:
    namespace = getattr(template, "__dict__", {})
    for name in ("_overload_func", "_definition_func"):  # make_overload_*/intrinsic_template
        func = namespace.get(name)
        if func is not None:  # a staticmethod in the namespace
            return (getattr(func, "__func__", func), namespace.get("key"), namespace.get("_attr"))
    return (template,)


def extension_records(kind: str, item) -> list:
    """One registration as a list of records ``(what, keys, impls, options, covered_by)``,
    empty when it is not one the CUDA contexts use or one numba-cuda made itself while
    compiling (it follows from a registration that is in the key already, and would make a
    compiling process's keys differ from a serving one's). A global typed by a
    ``types.Function`` gives one record per template.

    ``what``: "overload", "overload_method", "lower", "typeof", ...; ``keys``: what it is
    registered for (a function, operator, type class, method name, argument types, ...);
    ``impls``: the objects whose code decides it (implementation functions, template, model or
    rewrite classes); ``options``: the ``@overload`` options or None; ``covered_by``: the
    function or intrinsic whose own fingerprint carries this registration when a kernel
    reaches it (:func:`overload_implementations`), else None."""
    if kind in ("typing-functions", "typing-attributes"):
        return _template_records(item, kind == "typing-attributes", None)
    if kind == "typing-globals":
        val, typ = item
        templates = getattr(typ, "templates", None)
        if not templates:
            return [("global", (val, typ), (), None, None)]
        return [r for t in templates for r in _template_records(t, False, val)]
    if kind == "lower-functions":
        impl, func, argtys = item
        if impl is func or _made_by_template(impl):  # _IntrinsicTemplate.generic's lowering
            return []
        return [("lower", (func, *argtys), (impl,), None, None)]
    if kind in ("lower-getattrs", "lower-setattrs"):
        impl, attr, sig = item
        impl = _decorated(impl)
        if _made_by_template(impl):  # _OverloadAttributeTemplate._init_once's getattr_impl
            return []
        what = "lower_getattr" if kind == "lower-getattrs" else "lower_setattr"
        return [(what, (*tuple(sig or ())[:1], attr), (impl,), None, None)]
    if kind in ("lower-casts", "lower-constants"):
        impl, sig = item
        return [("lower_cast" if kind == "lower-casts" else "lower_constant", tuple(sig),
                 (impl,), None, None)]
    if kind in ("typeof", "model"):
        cls, impl = item
        return [(kind, (cls,), (impl,), None, None)]
    if kind.startswith("rewrite "):
        return [(kind, (item,), (item,), None, None)]
    return []


def _template_records(template, attribute: bool, registered_as) -> list:
    """A typing template (registered class, or one of a global's types.Function) as records."""
    metadata = getattr(template, "metadata", None)
    target = metadata.get("target") if hasattr(metadata, "get") else None
    if target not in (None, "cuda", "generic"):  # typing.context install_registry: not for CUDA
        return []
    key = getattr(template, "key", None)
    keys = (registered_as,) if registered_as is not None else (key,)
    overload_func = getattr(template, "_overload_func", None)
    if overload_func is not None:
        names = {c.__name__ for c in type.mro(template)}
        what = ("overload_method" if "_OverloadMethodTemplate" in names else
                "overload_attribute" if "_OverloadAttributeTemplate" in names else "overload")
        if what != "overload":
            keys = (key, getattr(template, "_attr", None))
        # Only numba-cuda's own registry is read by overload_implementations().
        covered = key if what == "overload" and _in_cuda_registry(template) else None
        return [(what, keys, (overload_func,), _template_options(template), covered)]
    definition = getattr(template, "_definition_func", None)
    if definition is not None:  # make_intrinsic_template: reached through the intrinsic
        return [("intrinsic", keys, (definition,), None, key)]
    return [("typing_attribute" if attribute else "typing", keys, (template,), None, None)]


def _in_cuda_registry(template) -> bool:
    registry = _typing_registry()
    return registry is not None and template in registry.functions


def _made_by_template(fn) -> bool:
    """A lowering that a typing template registers while a kernel is typed
    (``_OverloadAttributeTemplate._init_once`` / ``_OverloadMethodTemplate._init_once``)."""
    module = getattr(fn, "__module__", "")
    return (module in ("numba.cuda.typing.templates", "numba.core.typing.templates")
            and "._init_once.<locals>." in (getattr(fn, "__qualname__", "") or ""))


def _decorated(impl):
    """The user's function behind ``imputils._decorate_getattr``/``_decorate_setattr``'s
    wrapper ``res`` (closure cell ``real_impl``)."""
    code = getattr(impl, "__code__", None)
    if code is None or "real_impl" not in code.co_freevars or not impl.__closure__:
        return impl
    try:
        return impl.__closure__[code.co_freevars.index("real_impl")].cell_contents
    except ValueError:
        return impl


# === kcache warm / KCACHE_RECORD (dispatcher/warm.py, discover.py, sigspec.py) ================
# Kept as one block, separate from the rest, so it merges cleanly with other changes above.

def signature_namespace() -> dict:
    """The names a signature string is evaluated with: numba-cuda's
    ``sigutils._parse_signature_string`` runs ``eval(text, {}, numba.cuda.types.__dict__)``.
    (kcache checks the text against its own grammar first: dispatcher/sigspec.py.)"""
    return types.__dict__


_EAGER = "_kcache_eager_signatures"
_EAGER_DEVICE = "_kcache_eager_device_signatures"
#: Device-function dispatchers whose eager signatures were noted, not compiled.
_eager_devices: list = []


def _kernel_dispatcher_classes() -> list:
    """CUDADispatcher and every subclass that defines its own ``compile``."""
    seen, todo = [], [CUDADispatcher]
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.append(cls)
            todo.extend(cls.__subclasses__())
    return [cls for cls in seen if "compile" in cls.__dict__]


@contextlib.contextmanager
def deferred_eager_compiles():
    """While the block runs, eager signatures are noted instead of compiled.

    ``numba.cuda.jit("void(float32[::1])")`` compiles each eager signature as the module is
    imported (``decorators.jit``: ``disp.compile(argtypes)`` for a kernel,
    ``disp.compile_device(argtypes, restype)`` for a device function, then
    ``disp.disable_compile()``), which needs a GPU and compiles for that GPU's cc only.
    ``kcache warm`` imports modules inside this block: a kernel's signatures are read back
    with :func:`eager_signatures`, and a device function's are compiled for each cc inside
    :func:`eager_device_functions`. ``disable_compile`` keeps its effect (numba-cuda
    then only uses those signatures) without its check that something was compiled. Not
    thread-safe: hold the compiler lock (as :func:`offline_target` does) around it."""
    saved = {(cls, "compile"): cls.__dict__["compile"] for cls in _kernel_dispatcher_classes()}
    owner = next(c for c in CUDADispatcher.__mro__ if "disable_compile" in c.__dict__)
    original_disable = owner.__dict__["disable_compile"]
    saved[owner, "disable_compile"] = original_disable
    saved[CUDADispatcher, "compile_device"] = CUDADispatcher.__dict__["compile_device"]

    def compile(self, sig):
        argtypes = normalize_signature(sig)
        noted = self.__dict__.setdefault(_EAGER, [])
        if argtypes not in noted:
            noted.append(argtypes)
        return None

    def compile_device(self, args, return_type=None):
        noted = self.__dict__.setdefault(_EAGER_DEVICE, [])
        if not noted:
            _eager_devices.append(self)
        noted.append((tuple(args), return_type))
        return None

    def disable_compile(self, val=True):
        if _EAGER in self.__dict__ or _EAGER_DEVICE in self.__dict__:
            self._can_compile = not val
            return None
        return original_disable(self, val)

    replacements = {"compile": compile, "compile_device": compile_device,
                    "disable_compile": disable_compile}
    for cls, name in saved:
        setattr(cls, name, replacements[name])
    try:
        yield
    finally:
        for (cls, name), original in saved.items():
            setattr(cls, name, original)


@contextlib.contextmanager
def eager_device_functions(cc):
    """While the block runs, every device function imported inside
    :func:`deferred_eager_compiles` holds its eager signatures compiled for compute
    capability ``cc`` ((major, minor)), as ``decorators.jit`` compiles them on a GPU of that
    cc (``compile_device`` under ``typeinfer.register_dispatcher``); a kernel compiled in the
    block (``compile_for`` nests its own :func:`offline_target`) calls exactly those. They
    are dropped when the block ends. Does nothing when there are none."""
    if not _eager_devices:
        yield
        return
    from numba.cuda.core import typeinfer
    with offline_target(cc):
        for disp in _eager_devices:
            for args, return_type in disp.__dict__.get(_EAGER_DEVICE, ()):
                with typeinfer.register_dispatcher(disp):
                    disp.compile_device(args, return_type)
        yield


def eager_signatures(dispatcher) -> list:
    """The eager signatures (tuples of numba types) of a kernel dispatcher: those noted while
    its module was imported inside :func:`deferred_eager_compiles`, else, for a dispatcher
    made by ``numba.cuda.jit(signatures)`` elsewhere (compiled, then ``disable_compile()``:
    ``_can_compile`` is False), the argument types of its ``overloads``. [] for a lazy one."""
    noted = dispatcher.__dict__.get(_EAGER)
    if noted is not None:
        return list(noted)
    if not getattr(dispatcher, "_can_compile", True):
        return [tuple(sig) for sig in dispatcher.overloads]
    return []

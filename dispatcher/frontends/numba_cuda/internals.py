"""The numba-cuda internals kcache reads, imported in one place, and the feature tests that
decide whether the installed numba-cuda has them (supported: numba-cuda >=0.26,<0.31).

Each function of this bridge names the numba-cuda code it mirrors; docs/compat.md lists them
all. Nothing outside ``dispatcher/frontends/numba_cuda/`` touches a private numba-cuda name,
so a numba-cuda upgrade is checked here. What differs between the supported versions is found
by testing for the feature (an import, an attribute, a parameter), never by version number:
:data:`LAUNCH_CONFIGS` (0.30's launch-configuration-sensitive kernels). :func:`missing_internals`
lists what kcache needs and the installed numba-cuda lacks; ``support.refusal`` turns it into
the one line that switches caching off (docs/compat.md).
"""
from __future__ import annotations

import inspect

# Every numba-cuda module and name the bridge reads, imported here (support.refusal imports
# this module: a name gone from numba-cuda is one refusal line, not an ImportError later).
from numba.cuda import codegen as _codegen
from numba.cuda import dispatcher as _dispatcher
from numba.cuda import types  # noqa: F401
from numba.cuda.api import get_current_device  # noqa: F401
from numba.cuda.core import config  # noqa: F401
from numba.cuda.core import sigutils  # noqa: F401
from numba.cuda.core.caching import NullCache  # noqa: F401  (a dispatcher without cache=True)
from numba.cuda.core.callconv import _MinimalCallHelper  # noqa: F401
from numba.cuda.core.compiler_lock import global_compiler_lock  # noqa: F401
from numba.cuda.memory_management.nrt import NRT_LIBRARY  # noqa: F401  (sets config's NRT names)
from numba.cuda.typing import signature as make_signature  # noqa: F401

try:  # cuda-core >= 0.5 (numba-cuda 0.26 needs 0.5.1; before 0.30.2 it pins < 1.0)
    from cuda.core import ObjectCode
except ImportError:  # cuda-core 0.3-0.4, which numba-cuda <= 0.24 accepts: as its _compat does
    from cuda.core.experimental import ObjectCode  # noqa: F401  (re-exported)

try:  # numba-cuda >= 0.30: kernels whose code depends on their launch configuration
    from numba.cuda import launchconfig as _launchconfig
except ImportError:
    _launchconfig = None

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
    tests only (``support.refusal`` makes the line; a module this one imports being gone
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


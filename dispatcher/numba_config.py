"""numba / numba-cuda configuration in the key: which variables change the code, and their values.

numba-cuda reads its settings from one module (``numba.cuda.core.config``, which is
``numba.core.config`` when numba is installed; NUMBA_* environment variables and
``.numba_config.yaml`` fill it, code may assign to it). Every variable of that module is
classified here, with the reason, in :data:`IN_KEY` (it changes the generated code or what is
linked) or :data:`NOT_IN_KEY`; docs/keys.md has the same table, and
tests/test_numba_config.py fails when an installed numba / numba-cuda has a variable that is
in neither, so an upgrade cannot add a stale-kernel hole silently.

The ``config`` key component (:func:`config_component`) holds the current value of each
:data:`IN_KEY` variable, read when the key is computed.
"""
from __future__ import annotations

from .process import STATE

__all__ = ["IN_KEY", "NOT_IN_KEY", "WARNINGS_IN_KEY", "IN_KEY_WHEN_CHANGED", "BYPASS",
           "config_component", "config_variables", "unclassified", "bypass_reason"]

#: Variables whose value changes the code numba-cuda generates or links -> why.
IN_KEY = {
    "CUDA_ENABLE_NRT": "NRT on: allocations lower to NRT calls and the NRT library is linked "
                       "(CUDATargetContext.enable_nrt, _Kernel.maybe_link_nrt)",
    "DEBUG_NRT": "selects the 'safe' NRT meminfo functions the lowering calls (NRTContext)",
    "FORCE_CUDA_CC": "replaces the compute capability NVVM compiles for "
                     "(nvrtc.get_arch_option)",
    "OPT": "isOptimized flag of the debug info (debuginfo.py); default of opt=",
    "CUDA_DEBUG_POLY": "how polymorphic variables are lowered and described in debug info "
                       "(lowering.py, debuginfo.py)",
    "CUDA_DEBUG_POLY_USE_TYPED_CONST": "form of the polymorphic debug info (debuginfo.py)",
    "CUDA_NVRTC_EXTRA_SEARCH_PATHS": "include paths NVRTC searches when compiling .cu sources "
                                     "(link= CUSource, the NRT library)",
    "CUDA_INCLUDE_PATH": "CUDA headers NVRTC includes when no toolkit wheel provides them "
                         "(cuda_paths)",
}

_OUTPUT = "diagnostic output only (dumps, traces, timings, annotations)"
_CPU = "numba's CPU target only; the CUDA pipeline does not read it"
_RUNTIME = "runtime behaviour (launches, memory, streams, logging, driver), not the code"
_PLATFORM = "a fact of the platform, not a setting (the Python version is in the toolchain)"
_MESSAGES = "error messages and warnings only"

#: Variables that do not change the code -> why.
NOT_IN_KEY = {
    # diagnostics
    **dict.fromkeys((
        "ANNOTATE", "HTML", "DEBUG", "DEBUG_ARRAY_OPT", "DEBUG_ARRAY_OPT_RUNTIME",
        "DEBUG_ARRAY_OPT_STATS", "DEBUG_CACHE", "DEBUG_FRONTEND", "DEBUG_INLINE_CLOSURE",
        "DEBUG_JIT", "DEBUG_NRT_STACK_LIMIT", "DEBUG_PRINT_AFTER", "DEBUG_PRINT_BEFORE",
        "DEBUG_PRINT_WRAP", "DEBUG_TYPEINFER", "DIFF_IR", "DUMP_ASSEMBLY", "DUMP_BYTECODE",
        "DUMP_CFG", "DUMP_FUNC_OPT", "DUMP_IR", "DUMP_LLVM", "DUMP_OPTIMIZED", "DUMP_SSA",
        "HIGHLIGHT_DUMPS", "LLVM_PASS_TIMINGS", "PARALLEL_DIAGNOSTICS", "TRACE",
        "CHROME_TRACE", "JIT_COVERAGE",
    ), _OUTPUT),
    # messages
    **dict.fromkeys((
        "COLOR_SCHEME", "DEVELOPER_MODE", "FULL_TRACEBACKS", "SHOW_HELP",
        "CUDA_LOW_OCCUPANCY_WARNINGS", "CUDA_WARN_ON_IMPLICIT_COPY",
    ), _MESSAGES),
    # numba's CPU target
    **dict.fromkeys((
        "CPU_FEATURES", "CPU_NAME", "DEBUGINFO_DEFAULT", "DISABLE_INTEL_SVML",
        "DISABLE_JIT", "ENABLE_AVX", "ENABLE_PROFILING", "ENABLE_SYS_MONITORING",
        "EXTEND_VARIABLE_LIFETIMES", "LLVM_REFPRUNE_FLAGS", "LLVM_REFPRUNE_PASS",
        "LOOP_VECTORIZE", "NRT_STATS", "NUMBA_DEFAULT_NUM_THREADS", "NUMBA_NUM_THREADS",
        "PARFOR_MAX_TUPLE_SIZE", "RUNNING_UNDER_PROFILER", "SLP_VECTORIZE",
        "THREADING_LAYER", "THREADING_LAYER_PRIORITY", "USE_LLVMLITE_MEMORY_MANAGER",
        "USING_SVML", "DISABLE_TYPEINFER_FAIL_CACHE",
    ), _CPU),
    # runtime
    **dict.fromkeys((
        "CUDA_ARRAY_INTERFACE_SYNC", "CUDA_DEALLOCS_COUNT", "CUDA_DEALLOCS_RATIO",
        "CUDA_DRIVER", "CUDA_ENABLE_MINOR_VERSION_COMPATIBILITY", "CUDA_LOG_API_ARGS",
        "CUDA_LOG_LEVEL", "CUDA_LOG_SIZE", "CUDA_MEMORY_MANAGER",
        "CUDA_PER_THREAD_DEFAULT_STREAM", "CUDA_USE_NVIDIA_BINDING", "CUDA_VERBOSE_JIT_LOG",
        "FUNCTION_CACHE_SIZE",
    ), _RUNTIME),
    # platform
    **dict.fromkeys(("IS_32BITS", "IS_OSX", "IS_WIN32", "MACHINE_BITS", "PYVERSION"),
                    _PLATFORM),
    "BOUNDSCHECK": "CUDATargetContext.enable_boundscheck is always False",
    "CUDA_NRT_STATS": "NRT statistics are switched on at bind and memsys set-up, at run time; "
                      "the cubin is the same",
    "CUDA_DEBUGINFO_DEFAULT": "resolved into the debug= target option when the kernel or device "
                              "function is decorated; that option is in the key",
    "CUDA_DEFAULT_PTX_CC": "used only by compile_ptx()/compile() without a cc; kernels are "
                           "compiled for the device's cc or compile_for's, which is in the key",
    "CACHE_DIR": "where numba-cuda's own cache lives; kcache does not use it",
    "CACHE_LOCATOR_CLASSES": "numba's own cache; kcache does not use it",
    "DISABLE_CUDA": "no CUDA compile happens at all",
    "ENABLE_CUDASIM": "the simulator runs Python; nothing is compiled or cached",
    "GDB_BINARY": "embedded only by numba's CPU gdb hook, which the CUDA target does not use",
    "USE_RVSDG_FRONTEND": "numba 0.60: read only by numba.core.compiler's untyped pipeline; "
                          "numba-cuda builds its own (numba.cuda.compiler.DefaultPassBuilder)",
    "NUMBA_CUDA_ENABLE_NRT": "read once at import into CUDA_ENABLE_NRT, which is in the key",
    "NUMBA_CUDA_NRT_STATS": "read once at import into CUDA_NRT_STATS",
}

#: Diagnostic settings (a subset of NOT_IN_KEY: they do not change the code) under which the
#: user asks to see the compiler work: while one is on, a kernel is compiled (and its entry
#: stored) instead of served silently, counted as a bypass with the setting as its reason.
BYPASS = (
    "ANNOTATE", "HTML", "DEBUG", "DEBUG_FRONTEND", "DEBUG_INLINE_CLOSURE", "DEBUG_JIT",
    "DEBUG_PRINT_AFTER", "DEBUG_PRINT_BEFORE", "DEBUG_PRINT_WRAP", "DEBUG_TYPEINFER", "DIFF_IR",
    "DUMP_ASSEMBLY", "DUMP_BYTECODE", "DUMP_CFG", "DUMP_FUNC_OPT", "DUMP_IR", "DUMP_LLVM",
    "DUMP_OPTIMIZED", "DUMP_SSA", "LLVM_PASS_TIMINGS", "TRACE", "CHROME_TRACE", "JIT_COVERAGE",
)
_OFF = (None, 0, False, "", "none")


def bypass_reason(config) -> str | None:
    """"NUMBA_<NAME> is on (...)" for the first :data:`BYPASS` setting of ``config`` (the
    module the front-end reads, ``Frontend.numba_config()``) that is on, else None. A
    setting is off at numba's default:
    0, False, None, "" or "none" (``DEBUG_PRINT_*``)."""
    # Asked on every lookup: the answer for the same values and module is remembered.
    values = (id(config),) + settings_values(config, BYPASS)
    memo = STATE.keys.bypass  # (id of the config module, its BYPASS values), the answer
    if values == memo[0]:
        return memo[1]
    reason = None
    for name, value in zip(BYPASS, values[1:]):
        if isinstance(value, str):
            value = value.strip().lower()
        if value not in _OFF:
            reason = f"NUMBA_{name} is on: the compiler's output is shown, so the kernel is compiled"
            break
    memo[0], memo[1] = values, reason
    return reason



def settings_values(config, names) -> tuple:
    """The values of ``names`` in ``config`` (a module; None where absent), read at once: a
    map over the module's dict, in C, for what every lookup asks."""
    try:
        return tuple(map(vars(config).get, names))
    except TypeError:  # an object without __dict__
        return tuple(getattr(config, name, None) for name in names)


#: Settings that change only what a compile warns -> why. An entry says again what its
#: compile warned (compile_warnings.py), so they are in the key, but only when set away from
#: numba's default (0): keys made under the defaults are those of before.
WARNINGS_IN_KEY = {
    "ALWAYS_WARN_UNINIT_VAR": "makes numba-cuda warn of a variable that may be used "
                              "uninitialised (NumbaWarning at compile)",
    "DISABLE_PERFORMANCE_WARNINGS": "silences NumbaPerformanceWarning at compile",
}


#: Variables of some numba versions that change the code only away from numba's default ->
#: (that default, why). In the key only when set to another value, so that keys made under the
#: defaults, or under a numba without the variable, are those of before. numba-cuda's types and
#: typing templates are numba's own modules when numba is installed
#: (``numba.cuda.utils.redirect_numba_module``), so numba's switches for them apply to kernels.
IN_KEY_WHEN_CHANGED = {
    "USE_LEGACY_TYPE_SYSTEM": (1, "numba 0.61-0.64: 0 selects numba's new (NumPy-based) type "
                                  "system at import (numba.core.types), which types kernels"),
    "CAPTURED_ERRORS": ("new_style", "numba 0.60: old_style lets a typing template that "
                                     "raises any error be skipped, so another may type the "
                                     "call (numba.core.types.functions, typeinfer)"),
}


def config_variables(config) -> list:
    """Names of the configuration variables of ``config`` (a module): its public upper-case
    attributes, as numba's ``_EnvReloader`` and numba-cuda's modules set them."""
    return sorted(n for n in vars(config) if n.isupper() and not n.startswith("_"))


def unclassified(config) -> list:
    """Variables of ``config`` (a module) in neither :data:`IN_KEY` nor :data:`NOT_IN_KEY`."""
    known = IN_KEY.keys() | NOT_IN_KEY.keys() | WARNINGS_IN_KEY.keys() | IN_KEY_WHEN_CHANGED.keys()
    return [n for n in config_variables(config) if n not in known]


def config_component(config) -> dict:
    """``{name: value}`` of every :data:`IN_KEY` variable of ``config`` (the module the
    front-end reads, ``Frontend.numba_config()``), as plain msgpack values: flags as bools
    (numba-cuda tests their truth), ``OPT`` as an int, ``FORCE_CUDA_CC`` as a list or None,
    paths as strings; an absent variable is None. :data:`WARNINGS_IN_KEY` and
    :data:`IN_KEY_WHEN_CHANGED` variables are there only when set away from numba's default."""
    component = {name: _plain(name, getattr(config, name, None)) for name in IN_KEY}
    for name in WARNINGS_IN_KEY:
        value = getattr(config, name, 0)
        if value:  # left out at the default, so the key does not change
            component[name] = _plain(name, value)
    for name, (default, _why) in IN_KEY_WHEN_CHANGED.items():
        value = getattr(config, name, None)
        if value is not None and value != default:  # absent or the default: not there
            component[name] = _plain(name, value)
    return component


def _plain(name: str, value):
    if value is None:
        return None
    if name in ("CUDA_ENABLE_NRT", "DEBUG_NRT", "CUDA_DEBUG_POLY",
                "CUDA_DEBUG_POLY_USE_TYPED_CONST"):
        return bool(value)
    if name == "OPT":
        try:
            return int(value)  # numba's _OptLevel is an int ("max" is 3)
        except (TypeError, ValueError):
            return str(value)
    if isinstance(value, (tuple, list)):
        return [v if isinstance(v, (bool, int, float, str)) or v is None else str(v)
                for v in value]
    return value if isinstance(value, (bool, int, float, str)) else str(value)

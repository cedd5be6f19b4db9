"""A launchable kernel from an entry: what an entry keeps of a compiled kernel
(:func:`kernel_state`) and the kernel rebuilt from it without numba's typing or target context
(:func:`rebuild_kernel`), as numba-cuda's pickle cache does."""
from __future__ import annotations

from . import internals as _internals
from .internals import NRT_LIBRARY, CUDACodeLibrary, Kernel, ObjectCode, _MinimalCallHelper, types
from .internals import make_signature as _make_signature

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
    if _internals.LAUNCH_CONFIGS:
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


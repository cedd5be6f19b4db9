"""numba-cuda-mlir as a kcache front-end (:class:`~kcache.dispatcher.frontends.base.Frontend`).

Imports ``numba_cuda_mlir`` and :mod:`.support` only; the modules holding numba-cuda-mlir's
internals are imported by the methods that need them, once :meth:`NumbaCudaMlir.refusal` has
said they exist (an unsupported release gets one warning, never an ImportError)."""
from __future__ import annotations

import sys

import numba_cuda_mlir

from kcache.entry.artifacts import MLIR_KERNEL_FIELDS

from ..base import package_modules
from . import support


class NumbaCudaMlir:
    """The numba-cuda-mlir front-end (one instance: :data:`FRONTEND`)."""

    def __reduce__(self):
        return "FRONTEND"  # pickled as a reference to this module's one (kcache warm's workers)

    name = "numba-cuda-mlir"
    distribution = "numba-cuda-mlir"
    supported = support.SUPPORTED
    #: The ``jit`` decorator's module, for messages (``kcache.jit(frontend=...)``).
    jit_name = "numba_cuda_mlir.cuda.jit"
    #: What a kernel entry of this front-end keeps besides its artifacts
    #: (``kernel_entry``; ``kcache.entry.artifacts.MLIR_KERNEL_FIELDS`` checks them).
    state_fields = MLIR_KERNEL_FIELDS

    def version(self) -> str | None:
        return str(getattr(numba_cuda_mlir, "__version__", None) or "") or None

    def numba(self):
        import numba_cuda_mlir.numba_cuda
        return numba_cuda_mlir.numba_cuda

    def jit(self):
        """The front-end's ``jit`` decorator (``numba_cuda_mlir.cuda.jit``)."""
        from numba_cuda_mlir import cuda
        return cuda.jit

    def refusal(self) -> str | None:
        return support.refusal()

    def warn_refusal(self) -> bool:
        return support.warn_refusal()

    def is_signature(self, obj) -> bool:
        from . import signatures
        return signatures.is_signature(obj)

    def is_kernel_dispatcher(self, obj) -> bool:
        from . import internals
        return isinstance(obj, internals.MLIRDispatcher)

    def dispatcher_class(self) -> type:
        from .dispatcher import KCacheMLIRDispatcher
        return KCacheMLIRDispatcher

    def adopt(self, dispatcher, options):
        from .dispatcher import adopt
        return adopt(self, dispatcher, options)  # the dispatcher is handed its front-end

    def patch(self, on_enable_caching, on_init) -> None:
        from . import patching
        if not patching.is_patched():
            patching.patch_dispatcher(on_enable_caching, on_init)

    def unpatch(self) -> None:
        from . import patching
        patching.unpatch_dispatcher()

    def is_patched(self) -> bool:
        from . import patching
        return patching.is_patched()

    def offline_target(self, cc):
        from . import offline
        return offline.offline_target(cc)

    def compile_kernel(self, py_func, argtypes: tuple, targetoptions: dict):
        from . import compiling
        return compiling.compile_kernel(py_func, argtypes, targetoptions)

    def kernel_state(self, kernel, cc) -> dict:
        from . import rebuild
        return rebuild.kernel_state(kernel, cc)

    def rebuild_kernel(self, state: dict, argtypes: tuple, cc, **served):
        return _module("rebuild").rebuild_kernel(state, argtypes, cc, **served)

    def numba_config(self):
        return _module("signatures").numba_config()

    def current_cc(self) -> tuple:
        return _module("signatures").current_cc()

    def arch_name(self, cc) -> str:
        return _module("signatures").arch_name(cc)

    def signature_display(self, argtypes: tuple) -> str:
        return _module("signatures").signature_display(argtypes)

    def uncacheable_reason(self, kernel) -> str | None:
        from . import compiling
        return compiling.uncacheable_reason(kernel)

    def device_overloads(self, dispatcher) -> list:
        from . import compiling
        return compiling.device_overloads(dispatcher)

    def registries(self):
        return _module("registries")

    def types(self):
        from . import internals
        return internals.types

    def signature_namespace(self) -> dict:
        from . import signatures
        return signatures.signature_namespace()

    def signature_string(self, argtypes: tuple) -> str:
        return _module("signatures").signature_string(argtypes)

    def normalize_signature(self, sig) -> tuple:
        from . import signatures
        return signatures.normalize_signature(sig)

    def supported_ccs(self) -> list | None:
        from . import signatures
        return signatures.supported_ccs()

    def key_targetoptions(self, dispatcher) -> dict:
        return _module("signatures").key_targetoptions(dispatcher)

    def key_toolchain(self, versions: dict) -> dict:
        """The key's ``toolchain`` component from the process's versions (``versions``:
        ``components.toolchain_components()``): numba-cuda-mlir's own version in, numba's,
        numba-cuda's and llvmlite's out (numba-cuda-mlir uses none of them: it vendors numba
        and compiles through its bundled MLIR, libNVVM and nvJitLink)."""
        out = {k: v for k, v in versions.items() if k not in ("numba", "numba-cuda", "llvmlite")}
        out["numba-cuda-mlir"] = self.version() or "unknown"
        return out

    #: numba-cuda-mlir stores no launch-configuration specialization on disk (nor does kcache).
    no_launch_config = None

    def launch_config_key(self, dispatcher, launch_config):
        return None

    def deferred_eager_compiles(self):
        from . import eager
        return eager.deferred_eager_compiles()

    def eager_signatures(self, dispatcher) -> list:
        from . import eager
        return eager.eager_signatures(dispatcher)

    def eager_device_functions(self, cc):
        from . import eager
        return eager.eager_device_functions(cc)


_module = package_modules(__package__)  # its modules for the hot methods above



#: The numba-cuda-mlir front-end.
FRONTEND = NumbaCudaMlir()

# The front-end's package may have been imported by this module's own import (above), while
# install() or KCACHE_ENABLE waited to serve it: they are told FRONTEND is ready (through
# sys.modules: the switch's module imports the bridges, never the other way).
if "kcache.dispatcher.install" in sys.modules:
    sys.modules["kcache.dispatcher.install"].bridge_ready(FRONTEND)

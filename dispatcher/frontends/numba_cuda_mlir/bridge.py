"""numba-cuda-mlir as a kcache front-end (:class:`~kcache.dispatcher.frontends.base.Frontend`).

Imports ``numba_cuda_mlir`` and :mod:`.support` only; the modules holding numba-cuda-mlir's
internals are imported by the methods that need them, once :meth:`NumbaCudaMlir.refusal` has
said they exist (an unsupported release gets one warning, never an ImportError)."""
from __future__ import annotations

import sys

import numba_cuda_mlir

from kcache.entry.artifacts import MLIR_KERNEL_FIELDS

from ..base import BridgeMethods
from . import support


class NumbaCudaMlir(BridgeMethods):
    """The numba-cuda-mlir front-end (one instance: :data:`FRONTEND`); what every bridge does
    alike is :class:`~kcache.dispatcher.frontends.base.BridgeMethods`'."""

    package = __package__
    name = "numba-cuda-mlir"
    distribution = "numba-cuda-mlir"
    supported = support.SUPPORTED
    #: The ``jit`` decorator's module, for messages (``kcache.jit(frontend=...)``).
    jit_name = "numba_cuda_mlir.cuda.jit"
    #: What a kernel entry of this front-end keeps besides its artifacts
    #: (``kernel_entry``; ``kcache.entry.artifacts.MLIR_KERNEL_FIELDS`` checks them).
    state_fields = MLIR_KERNEL_FIELDS
    #: numba-cuda-mlir stores no launch-configuration specialization on disk (nor does kcache).
    no_launch_config = None

    def version(self) -> str | None:
        return str(getattr(numba_cuda_mlir, "__version__", None) or "") or None

    def numba(self):
        import numba_cuda_mlir.numba_cuda
        return numba_cuda_mlir.numba_cuda

    def jit(self):
        """The front-end's ``jit`` decorator (``numba_cuda_mlir.cuda.jit``)."""
        from numba_cuda_mlir import cuda
        return cuda.jit

    def is_kernel_dispatcher(self, obj) -> bool:
        return isinstance(obj, self._module("internals").MLIRDispatcher)

    def dispatcher_class(self) -> type:
        return self._module("dispatcher").KCacheMLIRDispatcher

    def types(self):
        return self._module("internals").types

    def launch_config_key(self, dispatcher, launch_config):
        return None

    def arch_name(self, cc) -> str:
        return self._module("signatures").arch_name(cc)

    def key_targetoptions(self, dispatcher) -> dict:
        return self._module("signatures").key_targetoptions(dispatcher)

    def key_toolchain(self, versions: dict) -> dict:
        """The key's ``toolchain`` component from the process's versions (``versions``:
        ``components.toolchain_components()``): numba-cuda-mlir's own version in, numba's,
        numba-cuda's and llvmlite's out (numba-cuda-mlir uses none of them: it vendors numba
        and compiles through its bundled MLIR, libNVVM and nvJitLink)."""
        out = {k: v for k, v in versions.items() if k not in ("numba", "numba-cuda", "llvmlite")}
        out["numba-cuda-mlir"] = self.version() or "unknown"
        return out


#: The numba-cuda-mlir front-end.
FRONTEND = NumbaCudaMlir()

# The front-end's package may have been imported by this module's own import (above), while
# install() or KCACHE_ENABLE waited to serve it: they are told FRONTEND is ready (through
# sys.modules: the switch's module imports the bridges, never the other way).
if "kcache.dispatcher.install" in sys.modules:
    sys.modules["kcache.dispatcher.install"].bridge_ready(FRONTEND)

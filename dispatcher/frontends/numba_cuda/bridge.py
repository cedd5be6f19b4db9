"""numba-cuda as a kcache front-end (:class:`~kcache.dispatcher.frontends.base.Frontend`).

Imports ``numba.cuda`` and :mod:`.support` only; the modules holding numba-cuda's internals are
imported by the methods that need them, once :meth:`NumbaCuda.refusal` has said they exist
(an unsupported numba-cuda gets one warning, never an ImportError from ``import
kcache.dispatcher``)."""
from __future__ import annotations

import sys

import numba.cuda

from ..base import package_modules
from . import support


class NumbaCuda:
    """The numba-cuda front-end (one instance: :data:`FRONTEND`)."""

    def __reduce__(self):
        return "FRONTEND"  # pickled as a reference to this module's one (kcache warm's workers)

    name = "numba-cuda"
    distribution = "numba-cuda"
    supported = support.SUPPORTED
    jit_name = "numba.cuda.jit"

    def version(self) -> str | None:
        from kcache.toolchain import package_versions
        return package_versions().get(self.distribution)

    def numba(self):
        return numba.cuda

    def refusal(self) -> str | None:
        return support.refusal()

    def warn_refusal(self) -> bool:
        return support.warn_refusal()

    def is_signature(self, obj) -> bool:
        from . import signatures
        return signatures.is_signature(obj)

    def is_kernel_dispatcher(self, obj) -> bool:
        from . import internals
        return isinstance(obj, internals.CUDADispatcher)

    def dispatcher_class(self) -> type:
        from .dispatcher import KCacheDispatcher
        return KCacheDispatcher

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
        from . import signatures
        return signatures.types

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

    @property
    def no_launch_config(self):
        return _module("internals").NO_LAUNCH_CONFIG

    def launch_config_key(self, dispatcher, launch_config):
        return _module("patching").launch_config_key(dispatcher, launch_config)

    def deferred_eager_compiles(self):
        from . import eager
        return eager.deferred_eager_compiles()

    def eager_signatures(self, dispatcher) -> list:
        from . import eager
        return eager.eager_signatures(dispatcher)

    def eager_device_functions(self, cc):
        from . import eager
        return eager.eager_device_functions(cc)

    def key_targetoptions(self, dispatcher) -> dict:
        return dispatcher.targetoptions  # every one is in the key (components.encode_options)

    def key_toolchain(self, versions):
        return versions  # components.toolchain_components() is numba-cuda's toolchain

    def arch_name(self, cc) -> str:
        from kcache.arch import arch_name
        return arch_name(cc)

    def jit(self):
        return numba.cuda.jit


_module = package_modules(__package__)  # its modules for the hot methods above


#: The numba-cuda front-end.
FRONTEND = NumbaCuda()

# The front-end's package may have been imported by this module's own import (above), while
# install() or KCACHE_ENABLE waited to serve it: they are told FRONTEND is ready (through
# sys.modules: the switch's module imports the bridges, never the other way).
if "kcache.dispatcher.install" in sys.modules:
    sys.modules["kcache.dispatcher.install"].bridge_ready(FRONTEND)

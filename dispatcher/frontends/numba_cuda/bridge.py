"""numba-cuda as a kcache front-end (:class:`~kcache.dispatcher.frontends.base.Frontend`).

Imports ``numba.cuda`` and :mod:`.support` only; the modules holding numba-cuda's internals are
imported by the methods that need them, once :meth:`NumbaCuda.refusal` has said they exist
(an unsupported numba-cuda gets one warning, never an ImportError from ``import
kcache.dispatcher``)."""
from __future__ import annotations

import numba.cuda

from . import support


class NumbaCuda:
    """The numba-cuda front-end (one instance: :data:`FRONTEND`)."""

    name = "numba-cuda"
    distribution = "numba-cuda"
    supported = support.SUPPORTED

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
        return adopt(dispatcher, options)

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
        from . import rebuild
        return rebuild.rebuild_kernel(state, argtypes, cc, **served)

    def numba_config(self):
        from . import signatures
        return signatures.numba_config()

    def current_cc(self) -> tuple:
        from . import signatures
        return signatures.current_cc()

    def signature_display(self, argtypes: tuple) -> str:
        from . import signatures
        return signatures.signature_display(argtypes)

    def uncacheable_reason(self, kernel) -> str | None:
        from . import compiling
        return compiling.uncacheable_reason(kernel)

    def device_overloads(self, dispatcher) -> list:
        from . import compiling
        return compiling.device_overloads(dispatcher)


#: The numba-cuda front-end.
FRONTEND = NumbaCuda()

"""numba-cuda as a kcache front-end (:class:`~kcache.dispatcher.frontends.base.Frontend`).

Imports ``numba.cuda`` and :mod:`.support` only; the modules holding numba-cuda's internals are
imported by the methods that need them, once :meth:`NumbaCuda.refusal` has said they exist
(an unsupported numba-cuda gets one warning, never an ImportError from ``import
kcache.dispatcher``)."""
from __future__ import annotations

import sys

import numba.cuda

from ..base import BridgeMethods
from . import support


class NumbaCuda(BridgeMethods):
    """The numba-cuda front-end (one instance: :data:`FRONTEND`); what every bridge does
    alike is :class:`~kcache.dispatcher.frontends.base.BridgeMethods`'."""

    package = __package__
    name = "numba-cuda"
    distribution = "numba-cuda"
    supported = support.SUPPORTED
    jit_name = "numba.cuda.jit"

    def version(self) -> str | None:
        from kcache.toolchain import package_versions
        return package_versions().get(self.distribution)

    def numba(self):
        return numba.cuda

    def jit(self):
        return numba.cuda.jit

    def is_kernel_dispatcher(self, obj) -> bool:
        return isinstance(obj, self._module("internals").CUDADispatcher)

    def dispatcher_class(self) -> type:
        return self._module("dispatcher").KCacheDispatcher

    def types(self):
        return self._module("signatures").types

    @property
    def no_launch_config(self):
        return self._module("internals").NO_LAUNCH_CONFIG

    def launch_config_key(self, dispatcher, launch_config):
        return self._module("patching").launch_config_key(dispatcher, launch_config)

    def key_targetoptions(self, dispatcher) -> dict:
        return dispatcher.targetoptions  # every one is in the key (components.encode_options)

    def key_toolchain(self, versions):
        return versions  # components.toolchain_components() is numba-cuda's toolchain

    def arch_name(self, cc) -> str:
        from kcache.arch import arch_name
        return arch_name(cc)


#: The numba-cuda front-end.
FRONTEND = NumbaCuda()

# The front-end's package may have been imported by this module's own import (above), while
# install() or KCACHE_ENABLE waited to serve it: they are told FRONTEND is ready (through
# sys.modules: the switch's module imports the bridges, never the other way).
if "kcache.dispatcher.install" in sys.modules:
    sys.modules["kcache.dispatcher.install"].bridge_ready(FRONTEND)

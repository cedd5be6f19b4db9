"""numba-cuda-mlir's extension registries and ``@overload`` implementations, read for the
source fingerprint (dispatcher/fingerprint/, dispatcher/extensions.py): the tables of the
registries numba-cuda-mlir 0.6's contexts install, read by the generic
``registry_reader.RegistryReader``."""
from __future__ import annotations

import sys

from ...registry_reader import RegistryReader, Tables

_V = "numba_cuda_mlir.numba_cuda"  # the vendored numba-cuda

# The registries ``MLIRTypingContext.load_additional_registries`` (+ BaseContext._load_builtins)
# and ``MLIRTargetContext.load_additional_registries`` install (numba-cuda-mlir 0.6), the
# typeof functions (the vendored typeof_impl), the data model managers (numba-cuda-mlir's
# mlir_data_manager, the vendored ones) and the vendored rewrite registry.
# tests/test_mlir_keys.py checks these lists against the registries live contexts hold.
# "hot": numba_cuda_mlir.extending's default registries (its public extension API) and the
# vendored builtin registry, looked at on every key.
_TYPING_REGISTRIES = (
    ("numba_cuda_mlir.extending", "typing_registry", True),
    (f"{_V}.typing.templates", "builtin_registry", True),
    (f"{_V}.cudadecl", "registry", True),
    ("numba_cuda_mlir.typing.ctypes", "registry", False),
    ("numba_cuda_mlir.typing.libdevice", "registry", False),
    ("numba_cuda_mlir.typing.numpy", "registry", False),
    ("numba_cuda_mlir.typing.cuda", "registry", False),
    ("numba_cuda_mlir.typing.externals", "registry", False),
    ("numba_cuda_mlir.typing.builtin", "registry", False),
    ("numba_cuda_mlir.typing.struct", "registry", False),
    ("numba_cuda_mlir.typing.cmath", "registry", False),
    ("numba_cuda_mlir.typing.math", "registry", False),
    ("numba_cuda_mlir.typing.half_precision", "registry", False),
    ("numba_cuda_mlir.typing.exotic_float", "registry", False),
    ("numba_cuda_mlir.typing.vector", "registry", False),
    ("numba_cuda_mlir.typing.cuda_vector_types", "registry", False),
    ("numba_cuda_mlir.typing.unicode", "registry", False),
    ("numba_cuda_mlir.type_defs.torch_types", "registry", False),
    (f"{_V}._internal.cuda_bf16", "typing_registry", False),
    (f"{_V}.typing.enumdecl", "registry", False),
    (f"{_V}.typing.cffi_utils", "registry", False),
    (f"{_V}.typing.npydecl", "registry", False),
    (f"{_V}.typing.builtins", "registry", False),
    (f"{_V}.typing.collections", "registry", False),
    (f"{_V}.typing.arraydecl", "registry", False),
    (f"{_V}.typing.npdatetime", "registry", False),
)
_LOWERING_REGISTRIES = (
    ("numba_cuda_mlir.extending", "lowering_registry", True),
    ("numba_cuda_mlir.lowering.builtins", "registry", False),
    ("numba_cuda_mlir.lowering.math", "registry", False),
    ("numba_cuda_mlir.lowering.cmath", "registry", False),
    ("numba_cuda_mlir.lowering.numpy", "registry", False),
    ("numba_cuda_mlir.lowering.libdevice", "registry", False),
    ("numba_cuda_mlir.lowering.cuda", "registry", False),
    ("numba_cuda_mlir.lowering.print", "registry", False),
    ("numba_cuda_mlir.lowering.ctypes", "registry", False),
    ("numba_cuda_mlir.lowering.struct", "registry", False),
    ("numba_cuda_mlir.lowering.union", "registry", False),
    ("numba_cuda_mlir.lowering.record", "registry", False),
    ("numba_cuda_mlir.lowering.half_precision", "registry", False),
    ("numba_cuda_mlir.lowering.exotic_float", "registry", False),
    ("numba_cuda_mlir.lowering.vector", "registry", False),
    ("numba_cuda_mlir.lowering.cuda_vector_types", "registry", False),
    ("numba_cuda_mlir.lowering.enum", "registry", False),
    ("numba_cuda_mlir.lowering.unicode", "registry", False),
    ("numba_cuda_mlir.lowering.nrt", "registry", False),
    ("numba_cuda_mlir.lowering.datetime", "registry", False),
)
_TYPEOF = ((f"{_V}.typing.typeof", "typeof_impl"),)
_MODEL_MANAGERS = (("numba_cuda_mlir.models", "mlir_data_manager"),
                   (f"{_V}.models", "cuda_data_manager"),
                   (f"{_V}.datamodel.registry", "default_manager"),
                   (f"{_V}.datamodel.cuda_registry", "default_manager"))
_REWRITES = (f"{_V}.core.rewrites.registry", "rewrite_registry")


def _overload_registries() -> list:
    """``numba_cuda_mlir.extending.overload`` registers its templates into the registry it is
    given (``typing_registry=``): its default one, and the vendored builtin registry
    (``numba_cuda_mlir.numba_cuda.extending.overload``'s)."""
    out = []
    for module, attr in (("numba_cuda_mlir.extending", "typing_registry"),
                         (f"{_V}.typing.templates", "builtin_registry")):
        registry = getattr(sys.modules.get(module), attr, None)
        if isinstance(getattr(registry, "globals", None), list):
            out.append(registry)
    return out


def _is_kernel_dispatcher(disp) -> bool:
    cls = getattr(sys.modules.get("numba_cuda_mlir.descriptor"), "MLIRDispatcher", None)
    return cls is not None and isinstance(disp, cls)


READER = RegistryReader(
    Tables(typing=_TYPING_REGISTRIES, lowering=_LOWERING_REGISTRIES, typeof=_TYPEOF,
           models=_MODEL_MANAGERS, rewrites=_REWRITES,
           loaded_module=f"{_V}.typing.templates",
           template_modules=(f"{_V}.typing.templates",),
           targets=(None, "cuda", "generic", "numba_cuda_mlir")),
    overload_registries=_overload_registries, is_kernel_dispatcher=_is_kernel_dispatcher)

loaded = READER.loaded
fixed_signatures = READER.fixed_signatures
overload_implementations = READER.overload_implementations
extension_registry_modules = READER.extension_registry_modules
extension_registries = READER.extension_registries
extension_parts = READER.extension_parts
extension_records = READER.extension_records


def known_and_installed_registries():
    """For the tests: ``(ids of the registries of the tables above, [(name, registry)] of
    those numba-cuda-mlir's typing and target contexts hold once initialized)``. Creates and
    refreshes the contexts (no device needed)."""
    from numba_cuda_mlir.descriptor import mlir_target

    mlir_target.ensure_initialized()
    typing, target = mlir_target.typing_context, mlir_target.target_context
    installed = [(f"{type(r).__module__} registry {getattr(r, 'name', '')}", r)
                 for r in list(typing._registries) + list(target._registries)]
    return READER.known_registry_ids(), installed

"""numba-cuda's extension registries and ``@overload`` implementations, read for the source
fingerprint (dispatcher/fingerprint/, dispatcher/extensions.py): the tables of the registries
numba-cuda 0.30's contexts install, read by the generic ``registry_reader.RegistryReader``."""
from __future__ import annotations

import sys

from ...registry_reader import RegistryReader, Tables
from .internals import CUDADispatcher

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


def _overload_registries() -> list:
    """numba-cuda keeps ``@overload`` templates in the typing registry behind the public
    ``numba.cuda.extending.infer`` (a bound method of that registry)."""
    ext = sys.modules.get("numba.cuda.extending")
    if ext is None:
        return []  # nothing can have been registered through it yet
    registry = getattr(getattr(ext, "infer", None), "__self__", None)
    return [registry] if isinstance(getattr(registry, "globals", None), list) else []


READER = RegistryReader(
    Tables(typing=_TYPING_REGISTRIES, lowering=_LOWERING_REGISTRIES, typeof=_TYPEOF,
           models=_MODEL_MANAGERS, rewrites=_REWRITES,
           loaded_module="numba.cuda.typing.templates",
           template_modules=("numba.cuda.typing.templates", "numba.core.typing.templates")),
    overload_registries=_overload_registries,
    is_kernel_dispatcher=lambda disp: isinstance(disp, CUDADispatcher))

loaded = READER.loaded
fixed_signatures = READER.fixed_signatures
overload_implementations = READER.overload_implementations
extension_registry_modules = READER.extension_registry_modules
extension_registries = READER.extension_registries
extension_parts = READER.extension_parts
extension_records = READER.extension_records


def known_and_installed_registries():
    """For tests/test_extension_keys.py: ``(ids of the registries of the tables above,
    [(name, registry)] of those numba-cuda's CUDA typing and target contexts hold once
    refreshed)``. Creates the contexts (no device needed)."""
    from numba.cuda.descriptor import cuda_target

    typing, target = cuda_target.typing_context, cuda_target.target_context
    typing.refresh()
    target.refresh()
    installed = [(f"{type(r).__module__} registry {getattr(r, 'name', '')}", r)
                 for r in list(typing._registries) + list(target._registries)]
    return READER.known_registry_ids(), installed

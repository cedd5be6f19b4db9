"""Old import path of the numba-cuda bridge (``kcache.dispatcher._compat``, which docs/compat.md
cites): a plain re-export of ``kcache.dispatcher.frontends.numba_cuda``'s modules, split by
concern. Patch the names where they are defined (those modules), not here."""
from __future__ import annotations

from .frontends.numba_cuda.internals import (  # noqa: F401
    CUDACodeLibrary, CUDADispatcher, Kernel, LAUNCH_CONFIGS, NO_LAUNCH_CONFIG, ObjectCode,
    global_compiler_lock, missing_internals)
from .frontends.numba_cuda.signatures import (  # noqa: F401
    current_cc, current_launch_config, is_signature, normalize_signature, numba_config,
    signature_display, signature_namespace, signature_string, supported_ccs, types)
from .frontends.numba_cuda.compiling import (  # noqa: F401
    compile_kernel, device_overloads, numba_cache_refusal, uncacheable_reason, warm_compiler)
from .frontends.numba_cuda.rebuild import (  # noqa: F401
    ServedCodeLibrary, ServedKernel, kernel_state, make_call_helper, rebuild_kernel)
from .frontends.numba_cuda.offline import (  # noqa: F401
    offline_target)
from .frontends.numba_cuda.patching import (  # noqa: F401
    is_patched, launch_config_key, launch_config_specialization, patch_dispatcher,
    unpatch_dispatcher)
from .frontends.numba_cuda.registries import (  # noqa: F401
    extension_parts, extension_records, extension_registries, extension_registry_modules,
    fixed_signatures, known_and_installed_registries, overload_implementations)
from .frontends.numba_cuda.eager import (  # noqa: F401
    deferred_eager_compiles, eager_device_functions, eager_signatures)

"""The key of a kernel for one signature and cc: the same function serves a GPU process,
``compile_for`` and ``kcache warm``, so their keys agree."""
from __future__ import annotations

from kcache.keys import canonical_bytes, key_of_bytes

from . import components as _components
from .fingerprint.remembered import memo_of
from .options import toolchain_memo


def kernel_key(frontend, dispatcher, argtypes, cc, launch_config=None, cache_key=None,
               store=None):
    """(key, components) of ``dispatcher``'s kernel, a kernel of ``frontend`` (a
    ``frontends.base.Frontend``): ``argtypes`` (tuple of numba types),
    ``cc`` (any ``kcache.arch`` form; 9.0 and 9.0a give one key), ``launch_config``
    (numba-cuda's launch-config cache key, only for launch-config-sensitive kernels),
    ``cache_key`` (str or None), ``store`` (its root keeps the toolchain memo; None: no memo).
    The same function serves a GPU process and ``compile_for``, so their keys agree. Raises
    ``Uncacheable``."""
    key, components, _encoded = kernel_key_encoded(frontend, dispatcher, argtypes, cc,
                                                    launch_config, cache_key, store)
    return key, components


def kernel_key_encoded(frontend, dispatcher, argtypes, cc, launch_config, cache_key, store):
    """:func:`kernel_key` and the components' canonical encoding (what the key digests)."""
    lc = launch_config
    if isinstance(lc, tuple):
        lc = [list(lc[0]), list(lc[1]), lc[2]]
    # The memo path is only worked out the first time (the versions are kept per process).
    toolchain = frontend.key_toolchain(_components.toolchain_shared(lambda: toolchain_memo(store)))
    components = _components.kernel_components(
        dispatcher.py_func, frontend=frontend, signature=frontend.signature_string(argtypes),
        cc=cc, output="cubin", targetoptions=frontend.key_targetoptions(dispatcher),
        launch_config=lc, cache_key=cache_key, toolchain=toolchain, code_memo=memo_of(store))
    encoded = canonical_bytes(components)
    return key_of_bytes(encoded), components, encoded


"""``compile_for``: compile and store kernel entries for explicit compute capabilities, with no
GPU and no driver (NVVM and nvJitLink come from the toolkit wheels).

numba-cuda's ``compile_ptx`` asks the current device for its cc as soon as a kernel calls a
``@cuda.jit(device=True)`` function; here the whole compile runs inside
``_compat.offline_target(cc)``, which also compiles those device functions afresh per cc, in
whatever module they live. Keys are computed exactly as a GPU process computes them
(``dispatcher.kernel_key``), so a cache warmed here hits later on a GPU of that cc.
"""
from __future__ import annotations

import re
import time

from . import _compat
from .dispatcher import KCacheDispatcher, Options, kernel_key, kernel_name
from .kernel_entry import NotStorable, kernel_to_entry, marker_entry

DEFAULT_CC = ((8, 0), (9, 0))
_CC_RE = re.compile(r"(?:sm_|compute_)?(\d+)\.?(\d)a?")


def parse_cc(cc) -> tuple:
    """``(9, 0)``, ``"9.0"``, ``"90"`` or ``"sm_90"``/``"sm_90a"`` -> ``(9, 0)``.
    Raises ValueError naming the accepted forms."""
    if isinstance(cc, (tuple, list)) and len(cc) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in cc):
        return (int(cc[0]), int(cc[1]))
    if isinstance(cc, str):
        m = _CC_RE.fullmatch(cc.strip())
        if m:
            return (int(m.group(1)), int(m.group(2)))
    raise ValueError(f"bad compute capability {cc!r}: use (major, minor) like (9, 0), "
                     "or a string like '9.0' or 'sm_90'")


def _cc_list(cc) -> list:
    if isinstance(cc, str) or (isinstance(cc, tuple) and len(cc) == 2
                               and all(isinstance(v, int) for v in cc)):
        return [parse_cc(cc)]
    try:
        items = list(cc)
    except TypeError:
        raise ValueError(f"bad compute capability list {cc!r}: use e.g. [(8, 0), (9, 0)]") from None
    if not items:
        raise ValueError("compile_for needs at least one compute capability, e.g. [(9, 0)]")
    return [parse_cc(c) for c in items]


def _signature_list(signatures) -> list:
    if _compat.is_signature(signatures):
        signatures = [signatures]
    if not isinstance(signatures, (list, tuple)) or not signatures:
        raise TypeError(f"signatures must be a signature (e.g. 'void(float32[::1])') or a "
                        f"non-empty list of them, not {signatures!r:.80}")
    return [_compat.normalize_signature(s) for s in signatures]


def compile_for(kernel, signatures, cc=DEFAULT_CC, store=None, *, cache_key=None) -> list:
    """Compile ``kernel`` for each signature and compute capability and store the entries.

    ``kernel``: a kernel dispatcher (``kcache.jit`` or ``numba.cuda.jit``; not a device
    function); ``signatures``: one signature (``"void(float32[::1])"``, a tuple of numba types)
    or a list of them; ``cc``: (major, minor) or a list of them (strings "9.0"/"sm_90" too);
    ``store``: a ``kcache.Store`` (default: the kernel's, else ``kcache.Store()``);
    ``cache_key``: as ``kcache.jit``'s (default: the kernel's). Entries already present are
    not recompiled. Returns the keys (str), one per (cc, signature), in that order.

    Raises TypeError/ValueError for bad arguments, ``Uncacheable`` for a kernel that cannot be
    cached (the reason says why), numba's errors for a kernel that does not compile.
    """
    if not isinstance(kernel, _compat.CUDADispatcher):
        raise TypeError(f"compile_for needs a kernel made by kcache.jit or numba.cuda.jit, "
                        f"not {type(kernel).__name__}")
    if kernel.targetoptions.get("device"):
        raise TypeError(f"{kernel_name(kernel)} is a device function; compile_for the kernels "
                        "that call it")
    options = kernel._kcache if isinstance(kernel, KCacheDispatcher) else Options()
    if cache_key is None:
        cache_key = options.cache_key
    if store is None:
        store = options.store if options.store is not None else Options._process_store()
    if store is None:
        raise RuntimeError("compile_for: no kcache store could be opened (see the warning)")
    all_argtypes = _signature_list(signatures)
    keys = []
    for target in _cc_list(cc):
        for argtypes in all_argtypes:
            keys.append(_compile_one(kernel, argtypes, target, store, cache_key))
    return keys


def _compile_one(kernel, argtypes, cc, store, cache_key) -> str:
    key, components = kernel_key(kernel, argtypes, cc, None, cache_key, store)

    def create():
        with _compat.offline_target(cc) as full:
            start = time.perf_counter()
            compiled = _compat.compile_kernel(kernel.py_func, argtypes, kernel.targetoptions)
            entry = _entry(kernel, compiled, argtypes, cc, full, start)
        store.record(compiles=1, compile_seconds=entry.meta["compile_seconds"])
        if not entry.meta["launch_config_sensitive"]:
            return entry
        # As the dispatcher does for an eager compile: kernel under the "no launch
        # configuration" key, marker under the plain key.
        lc_key, lc_components = kernel_key(kernel, argtypes, cc,
                                           _compat.launch_config_key(kernel, None), cache_key)
        store.put(lc_key, entry, components=lc_components)
        return marker_entry(kernel=entry.meta["kernel"], signature=entry.meta["signature"],
                            arch=entry.meta["arch"])

    store.get_or_create(key, create, components=components)
    return key


def _entry(kernel, compiled, argtypes, cc, full, start):
    from .components import Uncacheable, arch_name
    try:
        entry = kernel_to_entry(compiled, full, kernel_name=kernel_name(kernel),
                                signature=_compat.signature_string(argtypes),
                                arch=arch_name(cc), compile_seconds=0.0)
    except NotStorable as exc:
        raise Uncacheable(f"{kernel_name(kernel)}: {exc}") from exc
    entry.meta["compile_seconds"] = time.perf_counter() - start
    return entry

"""The toolchain component of a kernel's key: the versions of every compiler in the chain
(docs/keys.md), asked once per process and remembered across processes in the cache root
(kcache.toolchain.memoized) for an unchanged environment."""
from __future__ import annotations

import os
from importlib import metadata

from .process import STATE

# key -> distributions that provide it (cu13 name first, then cu12)
_EXTRA_DISTS = {
    "numpy": ("numpy",),
    "nvrtc": ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12"),
    "cuda_runtime": ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12"),
}

#: Versions kcache.toolchain reports that are no part of numba-cuda's toolchain (another
#: front-end's: its bridge's ``key_toolchain`` adds them to its own kernels' keys).
_OTHER_FRONTENDS = ("numba-cuda-mlir",)


def toolchain_components(memo_path=None) -> dict:
    """Toolchain versions for the key, computed once per process (a copy is returned).

    ``kcache.toolchain.package_versions()`` (numba, numba-cuda, llvmlite, cuda-bindings,
    cuda-core, nvvm and nvjitlink wheels, python, kcache-format) plus ``numpy`` (numba types
    numpy calls by it), ``nvrtc`` and ``cuda_runtime`` (numba-cuda reports NVRTC's version as
    the runtime version).  Versions come from package metadata; only when no wheel provides
    NVVM / nvJitLink / NVRTC (a system CUDA toolkit) is the library itself asked through
    cuda-python's bindings, and ``"unavailable"`` recorded if that fails.

    ``memo_path`` (a Path in the cache root, a callable returning one or None, or None): where
    the answer is remembered across processes for an unchanged environment
    (``kcache.toolchain.memoized``), because asking costs 5-12 ms on the GPU machine, more than
    the rest of a cache hit. A callable is called only when the versions are not known yet.
    A library asked is part of that environment: the memo holds only while its file is the
    same (a toolkit upgraded in place, sys.path untouched, is asked again).
    """
    memo = STATE.keys
    if memo.toolchain is None:
        from kcache.toolchain import memoized

        path = memo_path() if callable(memo_path) else memo_path
        asked: list = []
        memo.toolchain = memoized(path, lambda: _toolchain(asked),
                                  files=lambda: _library_files(asked))
    return dict(memo.toolchain)


def _toolchain(asked: list | None = None) -> dict:
    """The versions; ``asked`` gets the name of each library asked for its own (pathfinder's
    name: ``nvvm``, ``nvJitLink``, ``nvrtc``)."""
    from kcache.toolchain import package_versions

    out = {k: v for k, v in package_versions().items() if k not in _OTHER_FRONTENDS}
    for key, dists in _EXTRA_DISTS.items():
        for dist in dists:
            try:
                out[key] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    for key, ask, lib in (("nvvm", _nvvm_version, "nvvm"),
                          ("nvjitlink", _nvjitlink_version, "nvJitLink"),
                          ("nvrtc", _nvrtc_version, "nvrtc")):
        if key not in out:
            try:
                out[key] = ask()
                if asked is not None:
                    asked.append(lib)
            except Exception:  # no library: compiling will fail loudly elsewhere
                out[key] = "unavailable"
    return out


def _library_files(libs: list) -> list:
    """The files of the CUDA libraries named in ``libs``, as cuda-python loaded them
    (cuda.pathfinder, which its bindings load through); a library whose file cannot be told
    is left out."""
    files = []
    for lib in libs:
        try:
            from cuda.pathfinder import load_nvidia_dynamic_lib
            path = load_nvidia_dynamic_lib(lib).abs_path
        except Exception:  # an older cuda-python without pathfinder
            continue
        if path and os.path.isabs(path):
            files.append(path)
    return files


def _nvvm_version() -> str:
    from cuda.bindings import nvvm

    return ".".join(map(str, nvvm.version()))


def _nvjitlink_version() -> str:
    from cuda.bindings import nvjitlink

    return ".".join(map(str, nvjitlink.version()))


def _nvrtc_version() -> str:
    from cuda.bindings import nvrtc

    _err, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"

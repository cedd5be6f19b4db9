"""Versions of the toolchain that produced a kernel, without importing numba.

Read with :mod:`importlib.metadata` only, so ``kcache`` commands start fast.
"""
from __future__ import annotations

import functools
import platform
from importlib import metadata

from .entry import FORMAT_VERSION

# distribution name -> key in the result; the NVVM / nvJitLink wheels per CUDA major version
_DISTS = {
    "numba": "numba",
    "numba-cuda": "numba-cuda",
    "llvmlite": "llvmlite",
    "cuda-bindings": "cuda-bindings",
    "cuda-core": "cuda-core",
    "nvidia-nvvm": "nvvm",
    "nvidia-cuda-nvcc-cu12": "nvvm",
    "nvidia-nvjitlink-cu12": "nvjitlink",
    "nvidia-nvjitlink": "nvjitlink",
}


def package_versions() -> dict[str, str]:
    """Installed versions: numba, numba-cuda, llvmlite, cuda-bindings, cuda-core, nvvm (the
    NVVM wheel: nvidia-nvvm, or nvidia-cuda-nvcc-cu12), nvjitlink (nvidia-nvjitlink[-cu12]), python and
    kcache-format. Packages that are not installed are left out. Cached per process; the
    caller gets a copy."""
    return dict(_versions())


@functools.lru_cache(maxsize=1)
def _versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for dist, name in _DISTS.items():
        if name in out:
            continue
        try:
            out[name] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    out["python"] = platform.python_version()
    out["kcache-format"] = str(FORMAT_VERSION)
    return out


def is_stale(components: dict, current: dict[str, str] | None = None) -> bool:
    """True when ``components["toolchain"]`` disagrees with ``current`` (default
    :func:`package_versions`) on any key they share."""
    tc = components.get("toolchain") if isinstance(components, dict) else None
    if not isinstance(tc, dict):
        return False
    current = current if current is not None else package_versions()
    return any(k in current and str(v) != current[k] for k, v in tc.items())

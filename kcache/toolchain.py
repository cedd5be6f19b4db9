"""Versions of the toolchain that produced a kernel, without importing numba.

Read with :mod:`importlib.metadata` only, so ``kcache`` commands start fast.
"""
from __future__ import annotations

import functools
import os
import platform
import stat
import sys
from pathlib import Path
from typing import Callable

import msgpack

from .disk import fsio
from .entry.format import FORMAT_VERSION, _unpack
from .errors import CorruptEntry

# distribution name -> key in the result; the NVVM / nvJitLink wheels per CUDA major version
_DISTS = {
    "numba": "numba",
    "numba-cuda": "numba-cuda",
    "numba-cuda-mlir": "numba-cuda-mlir",
    "llvmlite": "llvmlite",
    "cuda-bindings": "cuda-bindings",
    "cuda-core": "cuda-core",
    "nvidia-nvvm": "nvvm",
    "nvidia-cuda-nvcc-cu12": "nvvm",
    "nvidia-nvjitlink-cu12": "nvjitlink",
    "nvidia-nvjitlink": "nvjitlink",
}


def package_versions() -> dict[str, str]:
    """Installed versions: numba, numba-cuda, numba-cuda-mlir, llvmlite, cuda-bindings, cuda-core, nvvm (the
    NVVM wheel: nvidia-nvvm, or nvidia-cuda-nvcc-cu12), nvjitlink (nvidia-nvjitlink[-cu12]), python and
    kcache-format. Packages that are not installed are left out. Cached per process; the
    caller gets a copy."""
    return dict(_versions())


@functools.lru_cache(maxsize=1)
def _versions() -> dict[str, str]:
    from importlib import metadata  # 45-70 ms to import: only when versions are asked
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


#: NVRTC's wheels (cu13 name first): cuda.core programs are keyed on the NVRTC they met.
NVRTC_DISTS = ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12")


def program_versions() -> dict[str, str]:
    """The toolchain of a cuda.core program entry (``kcache.programs``): ``cuda-core``,
    ``cuda-bindings`` (from :func:`package_versions`) and ``nvrtc`` (the NVRTC wheel's
    version), those installed. Package metadata only: no CUDA library is loaded. Cached per
    process; the caller gets a copy."""
    return dict(_program_versions())


@functools.lru_cache(maxsize=1)
def _program_versions() -> dict[str, str]:
    from importlib import metadata
    out = {k: v for k, v in _versions().items() if k in ("cuda-core", "cuda-bindings")}
    for dist in NVRTC_DISTS:
        try:
            out["nvrtc"] = metadata.version(dist)
            break
        except metadata.PackageNotFoundError:
            continue
    return out


def is_stale(components: dict, current: dict[str, str] | None = None) -> bool:
    """True when ``components["toolchain"]`` disagrees with ``current`` (default
    :func:`package_versions`) on any key they share."""
    tc = components.get("toolchain") if isinstance(components, dict) else None
    if not isinstance(tc, dict):
        return False
    current = current if current is not None else package_versions()
    return any(k in current and str(v) != current[k] for k, v in tc.items())


# --- per-environment memo -------------------------------------------------------------------
# Asking package metadata (and, without an NVVM wheel, loading libNVVM) costs 5-12 ms on the
# GPU machine: more than a whole cache hit. The answer only changes when packages are
# installed, upgraded or removed, which rewrites the directories on sys.path (pip and conda
# add/remove *.dist-info folders there). So the toolchain is kept in a small file in the cache
# root and trusted while the interpreter, sys.path and those directories' mtimes are unchanged.
MEMO_NAME = "toolchain.msgpack"
_MEMO_LIMIT = 8  # environments remembered per cache root (venvs, containers sharing a cache)


def environment_state() -> list:
    """What a toolchain memo is valid for: the interpreter, CUDA_HOME/CUDA_PATH, and
    ``(path, mtime_ns)`` of every directory on ``sys.path`` after the first entry (the
    script's own folder, which changes as the user works, holds no installed packages)."""
    state: list = [sys.executable, sys.version, os.environ.get("CUDA_HOME", ""),
                   os.environ.get("CUDA_PATH", "")]
    for entry in sys.path[1:]:
        try:
            state.append([entry, os.stat(entry or ".").st_mtime_ns])
        except OSError:
            state.append([entry, None])
    return state


def memoized(memo_path: Path | None, compute: Callable[[], dict]) -> dict:
    """``compute()`` (a dict of str -> str), remembered in ``memo_path`` for the current
    :func:`environment_state`. Any failure to read or write the memo just recomputes: the
    memo is a speed-up, never a source of errors. ``memo_path`` None disables it."""
    if memo_path is None:
        return compute()
    state = environment_state()
    memo = _read_memo(memo_path)
    for item in memo:
        if item.get("state") == state and _versions_map(item.get("value")):
            return dict(item["value"])
    value = compute()
    fresh = [{"state": state, "value": value}]
    fresh += [m for m in memo if m.get("state") != state][: _MEMO_LIMIT - 1]
    _write_memo(memo_path, fresh)
    return value


_MAX_MEMO = 1 << 20  # bytes: a memo of 8 environments is a few KiB
_MAX_VERSIONS = 64  # names in one remembered value (a toolchain has about a dozen)
_MAX_TEXT = 256  # characters of a name or a version


def _versions_map(value) -> bool:
    """True for what ``compute()`` gives (a map of text to text, of a sane size): anything else
    in the file (a NaN, a nested list, ...) would go into every key's components and make
    every put fail, for good; it is recomputed (and replaced) instead."""
    return (type(value) is dict and len(value) <= _MAX_VERSIONS
            and all(type(k) is str and type(v) is str and len(k) <= _MAX_TEXT
                    and len(v) <= _MAX_TEXT for k, v in value.items()))


def _read_memo(path: Path) -> list:
    # Read like every file of a cache root: never a FIFO, a symlink or an oversized file,
    # decoding bounded by the file (kcache.fsio, kcache.entry._unpack).
    try:
        raw, _st = fsio.read_regular(path, _MAX_MEMO)
        data = _unpack(raw)
    except (OSError, CorruptEntry):
        return []
    except Exception:  # msgpack's errors for a bad file: recompute
        return []
    return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []


def _write_memo(path: Path, memo: list) -> None:
    try:
        # The memo's folder (the root's v1/) is 02770 in shared mode, 0700 otherwise: a
        # group-writable folder means the group shares the cache, so it reads the memo too
        # (files 0660, as every other file kcache makes there: docs/security.md).
        mode = 0o660 if os.stat(path.parent).st_mode & stat.S_IWGRP else 0o600
        fsio.write_atomic(path, msgpack.packb(memo, use_bin_type=True), mode=mode, fsync=False)
    except (OSError, TypeError, ValueError):
        pass  # a memo that cannot be written is only a recompute next time

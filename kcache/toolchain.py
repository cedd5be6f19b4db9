"""Versions of the toolchain that produced a kernel, without importing numba.

Read with :mod:`importlib.metadata` only, so ``kcache`` commands start fast.
"""
from __future__ import annotations

import functools
import hashlib
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
# add/remove *.dist-info folders there), or when a library asked for its own version (a system
# CUDA toolkit) is replaced. So the toolchain is kept in a small file in the cache root and
# trusted while the interpreter, sys.path, those directories' mtimes and the names of the
# distributions in them, and the files of the libraries asked are unchanged. The names, not
# only the mtimes: images built with fixed timestamps (SOURCE_DATE_EPOCH) that share a cache
# volume have the same mtimes whatever they install.
MEMO_NAME = "toolchain.msgpack"
_MEMO_LIMIT = 8  # environments remembered per cache root (venvs, containers sharing a cache)
_DISTRIBUTIONS = (".dist-info", ".egg-info", ".egg")  # what package metadata is read from


def environment_state() -> list:
    """What a toolchain memo is valid for: the interpreter, CUDA_HOME/CUDA_PATH, and
    ``(path, mtime_ns, digest of its distributions' names)`` of every directory on
    ``sys.path`` after the first entry (the script's own folder, which changes as the user
    works, holds no installed packages)."""
    state: list = [sys.executable, sys.version, os.environ.get("CUDA_HOME", ""),
                   os.environ.get("CUDA_PATH", "")]
    for entry in sys.path[1:]:
        try:
            state.append([entry, os.stat(entry or ".").st_mtime_ns, _distributions(entry)])
        except OSError:
            state.append([entry, None, None])
    return state


def _distributions(folder: str) -> str | None:
    """A digest of the names of the distributions installed in ``folder`` (their metadata
    folders name each one's version); None for what is not a folder (a zip on sys.path)."""
    try:
        names = sorted(n for n in os.listdir(folder or ".") if n.endswith(_DISTRIBUTIONS))
    except OSError:
        return None
    return hashlib.blake2b("\0".join(names).encode("utf-8", "surrogateescape"),
                           digest_size=16).hexdigest()


def _file_states(paths) -> list:
    """``[path, size, mtime_ns]`` of each file (None for one that cannot be examined)."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append([path, st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([path, None, None])
    return out


def memoized(memo_path: Path | None, compute: Callable[[], dict],
             files: Callable[[], list] | None = None) -> dict:
    """``compute()`` (a dict of str -> str), remembered in ``memo_path`` for the current
    :func:`environment_state` and, when ``files`` is given, the files it names after
    ``compute()`` ran (paths: libraries it asked), unchanged in size and mtime. Any failure to
    read or write the memo just recomputes: the memo is a speed-up, never a source of errors.
    ``memo_path`` None disables it."""
    if memo_path is None:
        return compute()
    state = environment_state()
    memo = _read_memo(memo_path)
    for item in memo:
        if (item.get("state") == state and _versions_map(item.get("value"))
                and _same_files(item.get("files", []))):
            return dict(item["value"])
    value = compute()
    fresh = [{"state": state, "value": value,
              "files": _file_states(files() if files is not None else [])}]
    fresh += [m for m in memo if m.get("state") != state][: _MEMO_LIMIT - 1]
    _write_memo(memo_path, fresh)
    return value


def _same_files(recorded) -> bool:
    """True when ``recorded`` (``[[path, size, mtime_ns], ...]``, from the memo) is a list of
    files that are as they were."""
    if type(recorded) is not list or len(recorded) > _MAX_VERSIONS:
        return False
    if not all(type(r) is list and len(r) == 3 and type(r[0]) is str and len(r[0]) <= 4096
               for r in recorded):
        return False
    return _file_states(r[0] for r in recorded) == recorded


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

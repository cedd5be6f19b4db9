"""Atomic file publication, used for entries, stats shards, config.json and the toolchain memo.

A file is written to a temp name in its target's directory (same file system, so the rename
is atomic), optionally fsync'ed, then ``os.replace``'d over the target: readers see the old
file or the new one, never a mix. Temp names start with "." and end with ".tmp" so that
prune can sweep those left behind by a crashed writer (kcache.layout.temp_files).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .fsio import unlink_quietly, write_all

TMP_SUFFIX = ".tmp"


def write_temp(path: Path, data: bytes, *, mode: int | None = None, fsync: bool = True) -> str:
    """Write ``data`` to a new temp file beside ``path``; returns its name. ``mode``: file
    permission bits (default: mkstemp's 0600); ``fsync``: flush to disk before returning
    (entries: a crash must not publish a file whose blocks never reached the disk).
    Raises OSError (the temp file is removed)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        write_all(fd, data, fsync=fsync)
    except BaseException:
        os.close(fd)
        unlink_quietly(tmp)
        raise
    os.close(fd)
    return tmp


def write_atomic(path: Path, data: bytes, *, mode: int | None = None, fsync: bool = True) -> None:
    """Replace ``path`` by a file holding ``data``, atomically (see :func:`write_temp`).
    Raises OSError; no temp file is left behind."""
    tmp = write_temp(path, data, mode=mode, fsync=fsync)
    try:
        os.replace(tmp, path)
    except BaseException:
        unlink_quietly(tmp)
        raise



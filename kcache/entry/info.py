"""``EntryInfo``: the header of one entry as the listings give it (``Store.header``,
``entries``, ``find``; prune's ``where``; ``kcache ls``/``show``). Also importable from
:mod:`kcache.entry` and as ``kcache.EntryInfo``.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path


@dataclasses.dataclass
class EntryInfo:
    """Header of one entry (no payloads). Sizes in bytes, times in unix seconds.

    ``last_used`` is the file's mtime (a hit touches it); ``hits`` is the per-entry hit count
    from the stats shards (0 when unknown); ``readonly`` is True for entries of a read-only root.
    ``problem`` is None for a readable entry; for one whose header cannot be read (listed only
    by ``Store.entries(include_broken=True)`` / ``Store.find(..., include_broken=True)``) it
    says why, e.g. "truncated: 0 bytes", "bad magic", "not a regular file", "newer format:
    ..."; then ``created`` is the file's mtime, kernel/signature/arch/compile_seconds are None
    and components/sizes/meta are empty.
    """

    key: str
    path: Path
    root: Path
    readonly: bool
    file_size: int
    created: float
    last_used: float
    kernel: str | None
    signature: str | None
    arch: str | None
    compile_seconds: float | None
    components: dict
    sizes: dict
    meta: dict
    hits: int = 0
    problem: str | None = None

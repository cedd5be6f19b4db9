"""``Stats``: the persistent counters of a cache root as :meth:`kcache.Store.stats` reports
them (``kcache.Stats``, also importable from :mod:`kcache.store`).

A module of its own so that only ``stats()`` pays for building the dataclass (34 fields: ~2 ms
on a 2-core machine), never a process that only defines kernels and reads entries.
"""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class Stats:
    """Persistent counters of a cache root. Times in seconds, sizes in bytes.

    ``write_errors_*``: puts that failed, by cause (no space, permission incl. a read-only
    file system, other); ``temp_swept``: temp files of killed writers removed;
    ``quarantine_files``/``quarantine_bytes``: what ``v1/quarantine/`` holds now;
    ``remote_*``: the remote tier's hits, misses, values refused by the verification path
    (``remote_bad``), publishes and failed publishes, errors by kind (kcache.tier.ERROR_KINDS;
    counted apart from misses) and seconds waited for another machine's compile."""

    hits: int = 0
    misses: int = 0
    compiles: int = 0
    puts: int = 0
    evictions: int = 0
    corrupt: int = 0
    lock_waits: int = 0
    lock_timeouts: int = 0
    lock_stale: int = 0
    artifacts_refused: int = 0
    bytes_written: int = 0
    compile_seconds: float = 0.0
    seconds_saved: float = 0.0
    entries: int = 0
    bytes: int = 0
    max_size: int = 0
    write_errors_no_space: int = 0
    write_errors_permission: int = 0
    write_errors_other: int = 0
    temp_swept: int = 0
    quarantine_files: int = 0
    quarantine_bytes: int = 0
    remote_hits: int = 0
    remote_misses: int = 0
    remote_bad: int = 0
    remote_puts: int = 0
    remote_put_errors: int = 0
    remote_errors_timeout: int = 0
    remote_errors_refused: int = 0
    remote_errors_auth: int = 0
    remote_errors_bad_value: int = 0
    remote_errors_io: int = 0
    remote_errors_unavailable: int = 0
    remote_wait_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __getitem__(self, name: str) -> Any:
        return getattr(self, name)

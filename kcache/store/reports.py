"""The reports of clear, prune, remove_many and verify (the operations are in
:mod:`kcache.store.maintenance`), of copy_in/push (:class:`CopyReport`) and of
``Store.stats()`` (:class:`Stats`)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..entry.info import EntryInfo

# Why an entry was left in place by clear/prune/remove_many (NotRemoved.reason starts so).
from ..tiers.local import BUSY, NEWER, NOT_REGULAR, TEMP_MAX_AGE  # noqa: F401 (named for the reports)


@dataclasses.dataclass
class NotRemoved:
    """An entry that clear/prune/remove_many meant to remove but left in place.

    ``reason``: :data:`BUSY` (its lock is held by another process; after a lock timeout the
    text adds how long it waited), :data:`NOT_REGULAR` (e.g. a directory named like an entry),
    :data:`NEWER`, "no such entry", or the OS error, e.g. "Read-only file system (EROFS)"."""

    key: str
    path: Path
    reason: str


class RemoveReport(int):
    """Outcome of ``Store.clear()`` / ``Store.remove_many()``.

    Its int value is the number of entries removed (so ``n = store.clear()`` keeps working);
    ``removed``: their keys; ``bytes_freed``: their file sizes summed (bytes); ``failed``: a
    :class:`NotRemoved` per entry left in place, with the reason; ``code_memos``: (files,
    bytes) of remembered code analyses removed besides (``clear`` only)."""

    removed: list[str]
    bytes_freed: int
    failed: list[NotRemoved]
    code_memos: tuple[int, int]

    def __new__(cls, removed: list[str], bytes_freed: int, failed: list[NotRemoved],
                code_memos: tuple[int, int] = (0, 0)):
        self = super().__new__(cls, len(removed))
        self.removed, self.bytes_freed, self.failed = removed, bytes_freed, failed
        self.code_memos = code_memos
        return self

    def __str__(self) -> str:  # "removed {n} entries" prints the count
        return str(int(self))

    def __repr__(self) -> str:
        return f"RemoveReport(removed={len(self.removed)}, bytes_freed={self.bytes_freed}, failed={self.failed!r})"


@dataclasses.dataclass
class PruneReport:
    """What prune removed (or would remove, with ``dry_run``). Sizes in bytes.

    ``removed`` holds every entry removed, including broken ones (``EntryInfo.problem`` set),
    so ``bytes_freed`` is exactly the sum of their ``file_size``. ``failed``: a
    :class:`NotRemoved` per entry chosen but left in place (busy, newer format, OS error); with
    ``dry_run``, the newer-format entries that a real prune would refuse to delete.
    ``code_memos``: (files, bytes) of remembered code analyses removed besides (only with
    ``older_than``); not in ``bytes_freed``."""

    dry_run: bool = False
    removed: list[EntryInfo] = dataclasses.field(default_factory=list)
    bytes_freed: int = 0
    entries_left: int = 0
    bytes_left: int = 0
    temp_files: int = 0
    lock_files: int = 0  # lock files of absent entries swept
    quarantine_files: int = 0  # quarantined files older than quarantine_age removed
    failed: list[NotRemoved] = dataclasses.field(default_factory=list)
    code_memos: tuple[int, int] = (0, 0)


@dataclasses.dataclass
class VerifyReport:
    """Outcome of a full check: ``corrupt`` lists (path, reason); ``newer`` lists entries of a
    newer format (left alone); ``quarantined`` counts files actually moved with ``fix=True``;
    ``not_quarantined`` lists (path, why it was left in place) for defective entries of the
    writable root that ``fix=True`` could not move (e.g. read-only root, busy lock)."""

    checked: int = 0
    ok: int = 0
    corrupt: list[tuple[Path, str]] = dataclasses.field(default_factory=list)
    newer: list[Path] = dataclasses.field(default_factory=list)
    quarantined: int = 0
    not_quarantined: list[tuple[Path, str]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class CopyReport:
    """Outcome of :meth:`kcache.Store.copy_in` and :meth:`kcache.Store.push`: ``copied`` and
    ``present`` (already there, same bytes) are keys; ``skipped`` are keys left out by
    ``where``; ``failed`` is [(key, reason)]."""

    copied: list = dataclasses.field(default_factory=list)
    present: list = dataclasses.field(default_factory=list)
    failed: list = dataclasses.field(default_factory=list)
    skipped: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Stats:
    """Persistent counters of a cache root. Times in seconds, sizes in bytes.

    ``write_errors_*``: puts that failed, by cause (no space, permission incl. a read-only
    file system, other); ``temp_swept``: temp files of killed writers removed;
    ``quarantine_files``/``quarantine_bytes``: what ``v1/quarantine/`` holds now;
    ``remote_*``: the remote tier's hits, misses, values refused by the verification path
    (``remote_bad``), publishes and failed publishes, errors by kind (kcache.tier.ERROR_KINDS;
    counted apart from misses) and seconds waited for another machine's compile;
    ``code_memo_files``/``code_memo_bytes``: what ``v1/code/`` (code analyses remembered for
    keys) holds now."""

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
    code_memo_files: int = 0
    code_memo_bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __getitem__(self, name: str) -> Any:
        return getattr(self, name)

"""Entry listings of the store: headers read without payloads (``header``, ``entries``,
``find``), and the EntryInfo of a file whose header cannot be read (``problem`` set), for
``kcache ls``/``show``, prune's ``where`` and the reports. A part of :class:`kcache.Store`.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable, Iterator

from ..entry.info import EntryInfo
from ..errors import CorruptEntry, NewerFormat
from ..keys import check_key
from ..tiers.local import LocalTier, os_reason
from ..tiers.local import NOT_REGULAR


class Listing:
    """Headers and listings for :class:`kcache.Store`. ``tiers()``: the trusted local tiers in
    read order; ``stats``: the store's StatsBook (hit counts); ``max_entry_size`` (bytes)."""

    def __init__(self, tiers: Callable[[], tuple], stats, max_entry_size: int):
        self._tiers, self._stats, self._max_entry_size = tiers, stats, max_entry_size

    def info(self, key: str, path: Path, tier: LocalTier, hits: dict | None = None) -> EntryInfo:
        """EntryInfo from the file's header only, read safely (OSError, CorruptEntry,
        NewerFormat)."""
        h, st = tier.read_header(key, self._max_entry_size)
        return EntryInfo(
            key=key, path=path, root=tier.root, readonly=not tier.writable, file_size=st.st_size,
            created=float(h["created"]), last_used=st.st_mtime, kernel=h.get("kernel"),
            signature=h.get("signature"), arch=h.get("arch"), compile_seconds=h.get("compile_seconds"),
            components=h["components"], sizes=h["sizes"], meta=h["meta"],
            # a layer's hits are recorded in the writable root too, under the entry's key
            hits=int((hits or {}).get(key, 0)))

    def info_or_broken(self, key: str, path: Path, tier: LocalTier, st: os.stat_result,
                        hits: dict | None = None) -> EntryInfo | None:
        """EntryInfo of the file, or one with ``problem`` set when its header cannot be read;
        None if it vanished meanwhile."""
        try:
            if not stat.S_ISREG(st.st_mode):
                problem = NOT_REGULAR
            else:
                return self.info(key, path, tier, hits)
        except FileNotFoundError:
            return None
        except NewerFormat as exc:
            problem = f"newer format: {exc}"
        except CorruptEntry as exc:
            problem = str(exc)
        except OSError as exc:
            problem = f"unreadable: {os_reason(exc)}"
        return EntryInfo(
            key=key, path=path, root=tier.root, readonly=not tier.writable, file_size=st.st_size,
            created=st.st_mtime, last_used=st.st_mtime, kernel=None, signature=None, arch=None,
            compile_seconds=None, components={}, sizes={}, meta={}, hits=0, problem=problem)

    def header(self, key: str) -> EntryInfo | None:
        """Header of ``key``'s entry (first root that has a readable one), without payloads."""
        check_key(key)
        hits = None
        for tier in self._tiers():
            try:
                hits = self._stats.hits(key) if hits is None else hits
                return self.info(key, tier.entry_path(key), tier, hits)
            except (OSError, CorruptEntry, NewerFormat):
                continue
        return None

    def entries(self, *, readonly: bool = True, include_broken: bool = False) -> Iterator[EntryInfo]:
        """Headers of every entry (writable root, then read-only layers if ``readonly``).

        Files whose header cannot be read (truncated, zero-length, garbage, unreadable, not a
        regular file, newer format) are skipped, or with ``include_broken`` listed as an
        EntryInfo whose ``problem`` says why (so they can be shown and removed). Files whose
        names are not entry names are never listed."""
        hits = self._stats.hits()
        for tier in self._tiers():
            if not readonly and not tier.writable:
                continue
            for key, path, st in tier.scan(regular_only=not include_broken):
                info = self.info_or_broken(key, path, tier, st, hits)
                if info is not None and (include_broken or info.problem is None):
                    yield info

    def find(self, prefix: str, *, include_broken: bool = False) -> list[EntryInfo]:
        """Entries whose key starts with ``prefix`` (hex digits), across all roots;
        ``include_broken`` as for :meth:`entries`. ValueError for a prefix that is not hex."""
        prefix = prefix.lower()
        if prefix and not all(c in "0123456789abcdef" for c in prefix):
            raise ValueError(f"bad key prefix {prefix!r}: expected hex digits")
        # a prefix names its shard: `kcache rm P1 P2 ...` reads one hits file per prefix
        hits = self._stats.hits(prefix) if prefix else self._stats.hits()
        out = []
        for tier in self._tiers():
            for key, path, st in tier.scan(prefix[:2] if len(prefix) >= 2 else (prefix or None),
                                           regular_only=not include_broken):
                if key.startswith(prefix):
                    info = self.info_or_broken(key, path, tier, st, hits)
                    if info is not None and (include_broken or info.problem is None):
                        out.append(info)
        return out

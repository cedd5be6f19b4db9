"""Copying the entries of another tier (a bundle, the remote tier) into the writable root,
each through the verification path (and the signature, for the remote tier) before it is
published: ``Store.copy_in`` (``kcache import``, ``kcache pull``). A part of
:class:`kcache.Store`, made with what it uses."""
from __future__ import annotations

from typing import Callable

from ..errors import CorruptEntry, NewerFormat
from ..keys import check_key
from ..tiers.tier import TierError


class Transfer:
    """``policy``: the store's RemotePolicy (is a tier the remote one, its limit, unwrap);
    ``verify(key, data)``: the verification path; ``entry_bytes(key)``: the local entry's
    verified bytes; ``publish(key, data, remote=False, unless_same=True)``; ``count``: the
    counters; ``write_problem()``: why the root cannot be written; ``max_entry_size`` (bytes)."""

    def __init__(self, *, policy, verify, entry_bytes, publish, count,
                 write_problem: Callable[[], str | None], max_entry_size: int):
        self._policy, self._verify, self._entry_bytes = policy, verify, entry_bytes
        self._publish, self._count, self._write_problem = publish, count, write_problem
        self._max_entry_size = max_entry_size

    def copy_in(self, tier, keys=None, progress: Callable[[int, int], None] | None = None,
                where: Callable[[dict], bool] | None = None) -> "CopyReport":
        """:meth:`kcache.Store.copy_in`."""
        from .reports import CopyReport
        report = CopyReport()
        try:
            wanted = list(dict.fromkeys(tier.keys() if keys is None else [check_key(k) for k in keys]))
        except TierError as exc:
            if tier is self._policy.tier:
                self._count(None, now=True, **{f"remote_errors_{exc.kind}": 1})
            # a remote tier's error starts with its name: said once (RemoteTier.detail)
            said = getattr(tier, "detail", str)(exc)
            report.failed.append(("*", f"cannot list {tier.name}: {said}"))
            return report
        for i, key in enumerate(wanted, 1):
            why = self._copy_one(tier, key, report, where)
            if why is not None:
                report.failed.append((key, why))
            if progress is not None:
                progress(i, len(wanted))
        return report

    def _copy_one(self, tier, key: str, report: "CopyReport", where=None) -> str | None:
        remote = tier is self._policy.tier and tier is not None
        limit = self._policy.limit() if remote else self._max_entry_size
        try:
            blob = tier.read(key, limit)
            if blob is None:
                return f"not in {tier.name}"
            data = self._policy.unwrap(tier, blob.data)
            header, _ent = self._verify(key, data)
        except (CorruptEntry, NewerFormat) as exc:
            self._count(key, now=True, **({"remote_bad": 1} if remote else {"corrupt": 1}))
            return f"refused: {exc}"
        except (TierError, OSError) as exc:
            if remote and isinstance(exc, TierError):  # counted by kind, as for a get
                self._count(key, now=True, **{f"remote_errors_{exc.kind}": 1})
            return f"cannot read it: {exc}"
        if where is not None and not where(header):
            report.skipped.append(key)
            return None
        if self._entry_bytes(key) == data:
            report.present.append(key)
            return None
        published = self._publish(key, data, remote=False, unless_same=True)
        if published is None:  # another process published these bytes meanwhile
            report.present.append(key)
        elif not published:
            return f"not written: {self._write_problem() or 'see the warning above'}"
        else:
            report.copied.append(key)
        return None

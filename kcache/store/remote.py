"""The store's remote policy: when the remote tier is opened, how its values are signed and
checked, what is published to it, and how a failing remote is switched off.

A remote value is untrusted until it crosses the verification path: it is unwrapped (its
signature checked when a secret is set: kcache.signing), then decoded like any entry
(:meth:`kcache.verification.VerificationPath.verify_bytes`), and only then used and copied
into the writable root (backfill). Every remote error is counted by kind
(``remote_errors_*``, kcache.tier.ERROR_KINDS), warned once, and is a miss; a tier that
switched itself off (``disabled_reason``) says so once. A part of :class:`kcache.Store`: it
receives what it uses when made (the store's settings, counters, verification and publish).
"""
from __future__ import annotations

import collections
import contextlib
import os
from typing import Callable

from ..errors import CorruptEntry, KcacheError, NewerFormat
from ..keys import check_key
from ..tiers.tier import TierError
from ..warn import warn_once

MAX_FOREIGN = 1 << 16  # keys remembered as holding another secret's value (the oldest forgotten)


class RemotePolicy:
    """The remote tier's part of :class:`kcache.Store`. ``settings``: the store's Settings
    (``config``, ``max_entry_size``); ``disabled()``: whether the store is disabled now;
    ``count(key, now=False, **counters)``; ``verify(key, data) -> (header, Entry)`` (the
    verification path); ``publish(key, data, remote=False)`` (into the writable root);
    ``entries()`` and ``entry_bytes(key)``: the local entries (push)."""

    def __init__(self, settings, *, disabled: Callable[[], bool], count, verify, publish,
                 entries, entry_bytes):
        self.settings = settings
        self._disabled = disabled
        self._count, self._verify, self._publish = count, verify, publish
        self._entries, self._entry_bytes = entries, entry_bytes
        self._remote = None  # the remote tier, opened on first use (kcache.tiers.remote)
        self._remote_settings = None
        self._remote_opened = False
        # keys whose remote value was refused for its signature alone: never published over
        # (an OrderedDict: its popitem drops the oldest in one step, safe between threads)
        self._foreign_keys: collections.OrderedDict[str, None] = collections.OrderedDict()

    @property
    def remote(self):
        """The remote tier (kcache.remote: Redis or an fsspec URL) when one is configured
        (``KCACHE_REMOTE`` or config.json ``remote``) and could be opened, else None (a bad
        setting or a missing client library is warned once). Opened on first use: a store
        that never misses locally never connects."""
        if not self._remote_opened:
            self._remote_opened = True
            if not self._disabled() and (os.environ.get("KCACHE_REMOTE", "").strip()
                                      or self.settings.config.get("remote")):
                from ..tiers.remote import open_configured  # imports no client library by itself
                self._remote, self._remote_settings = open_configured(os.environ, self.settings.config)
        return self._remote

    def require_remote(self):
        """The remote tier for a command that asked for it (``kcache push``, ``pull``,
        ``remote check``): :attr:`remote`, but a bad setting raises ConfigError, a missing
        client library kcache.remote.MissingClient (naming the extra to install) and no
        configured remote KcacheError, instead of one warning and None. Works while the
        store is disabled (the command was asked for explicitly)."""
        if self._remote is None:
            from ..tiers.remote import open_settings, remote_settings
            settings = remote_settings(os.environ, self.settings.config)
            if settings is None:
                raise KcacheError("no remote tier is configured: set KCACHE_REMOTE (e.g. "
                                  "redis://host:6379/0 or s3://bucket/prefix) or 'kcache config "
                                  "set remote URL'")
            self._remote, self._remote_settings = open_settings(settings), settings
            self._remote_opened = True
        return self._remote

    @property
    def tier(self):
        """The remote tier if it was opened, else None (never opens it)."""
        return self._remote

    def served(self, key: str) -> bool:
        """Whether the remote tier served ``key``'s value in this process (a value that passed
        the checks); False when it was never opened: never opens it (a hit of the local root
        must not connect, nor warn about a remote it never needed)."""
        return self._remote is not None and self._remote.served(key)

    @property
    def remote_settings(self):
        """The remote tier's settings (kcache.remote.RemoteSettings; no secret is shown) or
        None."""
        return self._remote_settings if self.remote is not None else None

    def limit(self) -> int:
        """The most bytes a remote value may have: an entry and its signature."""
        from ..tiers.remote.signing import OVERHEAD
        return self.settings.max_entry_size + OVERHEAD

    def unwrap(self, tier, data: bytes) -> bytes:
        """The entry bytes of a value read from ``tier``: a remote value is signed when a
        secret is set (kcache.signing: a missing or wrong signature raises CorruptEntry)."""
        if tier is not self._remote or tier is None:
            return data
        from ..tiers.remote.signing import unwrap
        secret = self._remote_settings.secret
        return unwrap(secret, data, require=secret is not None)

    def read(self, key: str, count: bool = True):
        """(header, Entry, tier) from the remote tier, verified and copied into the writable
        root; None on a miss, a refused value or a tier error (each counted, warned once).
        ``count=False``: an existence check (``compile_for``, ``kcache warm``), which counts
        no remote hit or miss."""
        remote = self.remote
        if remote is None:
            return None
        try:
            blob = remote.read(key, self.limit())
        except TierError as exc:
            self.error(exc)
            return None
        if blob is None:
            if count:
                self._count(key, remote_misses=1)
            return None
        return self.use(key, blob, count)

    def use(self, key: str, blob, count: bool = True):
        try:
            data = self.unwrap(self._remote, blob.data)
            header, ent = self._verify(key, data)
        except (CorruptEntry, NewerFormat) as exc:
            self._count(key, now=True, remote_bad=1)
            if self._foreign(key, blob.data, exc):
                self._keep_off(key, exc)
            else:
                warn_once("remote-bad", f"kcache: a value of {self._remote.name} was refused "
                          f"({exc}); treated as a miss, never used")
            self._remote.refused(exc)
            if self._remote.disabled_reason:
                self._warn_off(self._remote)
            return None
        self._remote.used(key)
        if count:
            self._count(key, remote_hits=1)
        self._publish(key, data, remote=False)  # backfill: the next read is local
        return header, ent, self._remote

    def _foreign(self, key: str, data: bytes, exc: Exception) -> bool:
        """True when ``data`` was refused for its signature alone (unsigned, or signed with
        another secret) while the entry inside passes every other check: a value of a machine
        with another secret, or none, which other machines may be using."""
        from ..tiers.remote.signing import SignatureError, unwrap
        if not isinstance(exc, SignatureError):
            return False
        try:
            self._verify(key, unwrap(None, data))  # stripped, unchecked: the entry's own checks
        except (CorruptEntry, NewerFormat):
            return False  # damaged or truncated: replaced by this process's good value
        return True

    def _keep_off(self, key: str, exc: Exception) -> None:
        """Never publish over ``key``'s value (a machine with another secret published it:
        overwriting it would take it from every machine that shares that secret); one warning
        saying what to check."""
        from ..tiers.remote.signing import UnsignedValue
        if len(self._foreign_keys) >= MAX_FOREIGN:
            with contextlib.suppress(KeyError):  # another thread emptied it meanwhile
                self._foreign_keys.popitem(last=False)  # the oldest
        self._foreign_keys[key] = None
        what, check = (("unsigned values", "every machine publishing there sets the same "
                        "KCACHE_REMOTE_SECRET, or give this one another KCACHE_REMOTE_NAMESPACE")
                       if isinstance(exc, UnsignedValue) else
                       ("values signed with another secret", "KCACHE_REMOTE_SECRET (or "
                        "KCACHE_SECRET) is the secret of the machines publishing there"))
        warn_once("remote-foreign", f"kcache: remote {self._remote.name} holds {what} ({exc}); "
                  "they are never used, nor overwritten by this process's compiles (those stay "
                  f"in the local root): check that {check}")

    def error(self, exc: TierError) -> None:
        self._count(None, **{f"remote_errors_{exc.kind}": 1})
        remote = self._remote
        warn_once("remote", f"kcache: remote tier error ({exc}); treated as a miss")
        if remote is not None and getattr(remote, "disabled_reason", None):
            self._warn_off(remote)

    @staticmethod
    def _warn_off(remote) -> None:
        """One line, once: the remote is off for this process, and what to do about it."""
        why = getattr(remote, "disabled_short", None) or remote.disabled_reason
        warn_once("remote-off", f"kcache: remote {remote.name} {why}; test it with "
                  "'kcache remote check'")

    def publish(self, key: str, data: bytes) -> bool:
        """Publish verified entry bytes to the writable remote tier (signed when a secret is
        set); True if published. A failure is counted and warned once, never raised."""
        return self._send(key, data) is None

    def _send(self, key: str, data: bytes) -> str | None:
        """:meth:`publish`, saying why a value was not published (None: it was)."""
        remote = self.remote
        if remote is None or not remote.writable:
            return "no writable remote tier"
        if key in self._foreign_keys:
            return "the remote holds a value of another secret there (not overwritten)"
        secret = self._remote_settings.secret
        if secret is not None:
            from ..tiers.remote.signing import wrap
            data = wrap(secret, data)
        try:
            remote.write(key, data)
        except TierError as exc:
            self._count(key, now=True, remote_put_errors=1)
            self.error(exc)
            return f"{exc.kind}: {exc}"
        self._count(key, remote_puts=1)
        return None

    def push(self, keys=None, progress: Callable[[int, int], None] | None = None) -> "CopyReport":
        """Publish local entries (default: every entry of the local tiers) to the writable
        remote tier, each verified first and signed when a secret is set; keys the remote
        already holds are ``present``. Raises KcacheError when no writable remote is
        configured. Never raises for one entry (it is in ``failed``)."""
        remote = self.remote
        if remote is None or not remote.writable:
            raise KcacheError("no writable remote tier is configured (KCACHE_REMOTE, and "
                              "KCACHE_REMOTE_READONLY unset)")
        from .reports import CopyReport  # the reports are imported when one is made
        report = CopyReport()
        try:
            there = set(remote.keys())
        except TierError as exc:
            self._count(None, now=True, **{f"remote_errors_{exc.kind}": 1})
            report.failed.append(("*", f"cannot list {remote.name}: {remote.detail(exc)}"))
            return report
        wanted = (list(dict.fromkeys(i.key for i in self._entries())) if keys is None
                  else [check_key(k) for k in keys])
        for i, key in enumerate(wanted, 1):
            if key in there:
                report.present.append(key)
            else:
                data = self._entry_bytes(key)
                why = "no valid local entry" if data is None else self._send(key, data)
                if why is None:
                    report.copied.append(key)
                else:
                    report.failed.append((key, why if data is None else f"not written: {why}"))
            if progress is not None:
                progress(i, len(wanted))
        return report

"""What the remote tiers share: error accounting (the switch-off), naming without secrets,
key names, and the single-flight result type.

A remote tier is a *soft* tier: every call is bounded by the backend's connect and read
timeouts, every failure is a :class:`~kcache.tier.TierError` with a kind, and after
``max_errors`` consecutive failures the tier switches itself off for the rest of the process
(every later call raises ``TierError("unavailable")`` at once, with no network traffic). A new
tier object (a new process) tries the server again.
"""
from __future__ import annotations

import dataclasses
import errno
import contextlib
import re
import threading
from typing import Callable, Iterator, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit

from ..entry import FORMAT_VERSION
from ..keys import check_key
from ..tier import Blob, TierError

T = TypeVar("T")

DEFAULT_NAMESPACE = "kcache"
DEFAULT_TIMEOUT = 1.0  # seconds: each connect and each read of one operation
DEFAULT_MAX_ERRORS = 3  # consecutive failures before the tier switches itself off
DEFAULT_LEASE_TTL = 10.0  # seconds; renewed every third of it while held, so a crash frees it fast
DEFAULT_MAX_WAIT = 60.0  # seconds a waiter polls for another machine's compile before its own
NAMESPACE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
NAMESPACE_ACCEPTED = "1-64 characters: letters, digits, '.', '_', '-', starting with a letter or digit"

#: URL query parameters that may be shown (none of them a credential).
_SHOWN_QUERY = {"db"}


def redact(url: str) -> str:
    """``url`` without user name, password and query parameters other than ``db`` (what a
    tier's ``name`` shows: ``kcache dir``, messages). Never raises."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"  # IPv6 literal
        netloc = f"{host}:{parts.port}" if parts.port is not None else host
        query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k in _SHOWN_QUERY])
        return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")
    except ValueError:  # a bad port, a bad IPv6 literal: show the scheme only
        return url.split(":", 1)[0] + "://(unparsable URL)"


def shown(value) -> str:
    """A URL setting as a message may show it, whatever was given: :func:`redact` for a URL;
    for other text (a mistyped URL such as ``redis//:pw@host``) everything up to its last
    ``@`` hidden (it may be a password); repr, clipped to 200 characters. Never raises."""
    if isinstance(value, str) and "://" in value:
        return redact(value)
    if isinstance(value, str) and "@" in value:
        value = "…@" + value.rpartition("@")[2]
    return repr(value)[:200]


def version_tag() -> str:
    """``v<FORMAT_VERSION>``: part of every remote key, so kcache versions with different
    entry formats never read each other's values."""
    return f"v{FORMAT_VERSION}"


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or during (``__cause__`` /
    ``__context__``), at most 16: the backends wrap socket errors in their own types."""
    seen = 0
    while exc is not None and seen < 16:
        yield exc
        seen += 1
        exc = exc.__cause__ or exc.__context__


_REFUSED = (ConnectionRefusedError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError)
_REFUSED_ERRNOS = {errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE,
                   errno.EHOSTUNREACH, errno.ENETUNREACH}


def os_kind(exc: BaseException) -> str | None:
    """The TierError kind of a standard-library error in ``exc``'s chain (socket, TLS,
    permission), or None when nothing there says."""
    import ssl  # not at module level: `import kcache.remote` stays cheap

    for e in causes(exc):
        if isinstance(e, ssl.SSLCertVerificationError):
            return "auth"  # the server's certificate was rejected: not the server we trust
        if isinstance(e, TimeoutError):  # socket.timeout and asyncio.TimeoutError too
            return "timeout"
        if isinstance(e, _REFUSED) or (isinstance(e, OSError) and e.errno in _REFUSED_ERRNOS):
            return "refused"
        if isinstance(e, PermissionError):
            return "auth"
    return None


def describe(exc: BaseException) -> str:
    """One line for a backend error: its type and first line, at most 300 characters."""
    text = str(exc).strip().splitlines()
    if not text and isinstance(exc, TimeoutError):
        text = ["no answer before the call's deadline"]
    return (f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__)[:300]


@dataclasses.dataclass
class Flight:
    """The outcome of entering a tier's ``single_flight(key, ...)``.

    ``held``: True when this process should compile and publish (it holds the lease, or the
    tier has no leases); ``blob``: the value that appeared while waiting (not yet verified);
    ``error``: the TierError that ended the attempt early (then held is False, blob None:
    compile without the lease); ``waited``: seconds spent waiting for another holder."""

    held: bool
    blob: Blob | None = None
    error: TierError | None = None
    waited: float = 0.0


class RemoteTier:
    """Base of the remote tiers: the tier protocol's attributes, the error guard, key checks.

    Subclasses implement ``_classify(exc) -> TierError`` and the protocol's methods, each
    wrapping its backend calls in :meth:`_call`."""

    kind = "remote"
    backfill = True

    def __init__(self, name: str, *, readonly: bool, max_errors: int = DEFAULT_MAX_ERRORS):
        self.name = name
        self.writable = not readonly
        self.max_errors = max_errors
        #: why the tier switched itself off (None while it is on); for the store's one warning
        self.disabled_reason: str | None = None
        self._errors = 0  # consecutive failures
        self._mutex = threading.Lock()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def _classify(self, exc: BaseException) -> TierError:  # pragma: no cover - abstract
        raise NotImplementedError

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one backend operation: TierError("unavailable") at once when switched off;
        any exception becomes a TierError (kind from ``_classify``), counted towards the
        switch-off unless it is ``bad_value`` (the server answered)."""
        if self.disabled_reason is not None:
            raise TierError("unavailable", f"{self.name}: {self.disabled_reason}")
        try:
            out = fn()
        except TierError as err:  # raised by the subclass itself, already named
            if err.kind == "bad_value":
                self._answered()
            else:
                self._failed(err)
            raise
        except Exception as exc:  # the backends raise many types: all become TierError
            err = self._classify(exc)
            err.args = (f"{self.name}: {what}: {err}",)
            if err.kind == "bad_value":
                self._answered()
            else:
                self._failed(err)
            raise err from exc
        self._answered()
        return out

    def _answered(self) -> None:
        with self._mutex:
            self._errors = 0

    def _failed(self, err: TierError) -> None:
        with self._mutex:
            self._errors += 1
            if self._errors >= self.max_errors and self.disabled_reason is None:
                self.disabled_reason = (f"switched off for this process after {self._errors} "
                                        f"consecutive errors (last: {err.kind}: {err})")

    @contextlib.contextmanager
    def single_flight(self, key: str, limit: int, *, ttl: float | None = None,
                      max_wait: float | None = None) -> Iterator[Flight]:
        """No cross-machine lease on this tier: yields ``Flight(held=False)`` at once (compile
        and publish; machines starting together may compile the same kernel). ``limit``,
        ``ttl`` and ``max_wait`` are accepted for the Redis tier's signature."""
        self._key(key)
        yield Flight(False)

    def check(self) -> None:  # pragma: no cover - abstract
        """One bounded round trip that says whether the tier works. Raises TierError."""
        raise NotImplementedError

    def _check_writable(self, what: str) -> None:
        if not self.writable:
            raise TierError("io", f"{self.name}: {what}: this remote is read-only "
                                  "(KCACHE_REMOTE_READONLY); nothing is written")

    @staticmethod
    def _key(key: str) -> str:
        """``key`` if it is a kcache key (ValueError otherwise: a caller's bug, never data)."""
        return check_key(key)

    def _too_large(self, key: str, size: int | str, limit: int) -> TierError:
        return TierError("bad_value", f"{self.name}: value of {key} is {size} bytes, larger than "
                                      f"the limit of {limit} bytes; not read")

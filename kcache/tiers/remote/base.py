"""What the remote tiers share: error accounting (the switch-off), naming without secrets,
key names, and the single-flight result type.

A remote tier is a *soft* tier: each connect and each read is bounded by the timeout, and every
call as a whole by a :class:`Deadline` (2 x timeout, plus 1 s per MiB it sends, and per MiB it
has received: a server that answers one byte at a time within each read's timeout is still cut
off, whatever size it stated; at most 10 x timeout in all). A value is read in chunks of at
most :func:`chunk_size` bytes, each one earning the time for the next when it has arrived.
Every failure is
a :class:`~kcache.tier.TierError` with a kind (a call cut off at its deadline: ``timeout``);
after ``max_errors`` consecutive failures the tier switches itself off for the rest of the
process (every later call raises ``TierError("unavailable")`` at once, with no network
traffic), at once when a call cut off may still be using the backend's only connection. A new
tier object (a new process) tries the server again.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import errno
import re
import threading
import time
from typing import Callable, Iterator, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit

from ...entry.format import FORMAT_VERSION
from ...keys import check_key
from ...text import cut
from ..tier import Blob, TierError

T = TypeVar("T")

DEFAULT_NAMESPACE = "kcache"
DEFAULT_TIMEOUT = 1.0  # seconds: each connect and each read of one operation
CALL_TIMEOUTS = 2  # a whole call (connect, every read) ends within this many timeouts ...
TRANSFER_RATE = 1 << 20  # ... plus 1 s per this many bytes it transfers (bytes per second at worst)
# ... and never more than this many timeouts in all, whatever it transfers: a server trickling a
# value of 255 MiB just above TRANSFER_RATE earned 255 s per lookup (the user's program stalled)
MAX_CALL_TIMEOUTS = 10
CHUNK_MIN, CHUNK_MAX = 64 << 10, 1 << 20  # bytes: a value is read in chunks of this size (chunk_size)
RECEIVE_SLACK = 16 << 20  # bytes a call may receive besides the value it reads (replies, listings)
MAX_SERVED = 1 << 16  # keys a tier remembers having served (the oldest forgotten)
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


def describe(exc: BaseException, hidden: tuple[str, ...] = ()) -> str:
    """One line for a backend error: its type and the first line of its words, escaped and
    cut to 200 characters (kcache.text.cut: a Redis error reply or an object store's error
    message is the server's text, on its way to a program's warning). When the backend's
    words contain one of ``hidden`` (the credentials the tier sends: a server may echo a
    command it refused), they are left out whole, never edited."""
    # The first 64 KiB: more than any line shown (200) plus any secret that could overlap it.
    text = str(exc)[:_DESCRIBE_SCAN].strip().splitlines()
    if not text and isinstance(exc, TimeoutError):
        text = ["no answer before the call's deadline"]
    if text and any(secret and secret in text[0] for secret in hidden):
        return f"{type(exc).__name__} (its message is not shown: it may contain a credential)"
    return f"{type(exc).__name__}: {cut(text[0])}" if text else type(exc).__name__


_DESCRIBE_SCAN = 64 << 10  # characters of a backend's error text looked at


def url_credentials(url: str) -> tuple[str, ...]:
    """What :func:`redact` leaves out of ``url`` that may be a credential: the user name and
    password, the values of query parameters other than ``db``. Never raises."""
    try:
        parts = urlsplit(url)
        found = [parts.username, parts.password]
        found += [v for k, v in parse_qsl(parts.query) if k not in _SHOWN_QUERY]
    except ValueError:
        return ()
    return tuple(v for v in found if v)


def chunk_size(timeout: float) -> int:
    """Bytes per read of a value (each its own request, :meth:`Deadline.transfer` credited once
    it arrived): what the slowest accepted server (TRANSFER_RATE) sends in one ``timeout``,
    within CHUNK_MIN .. CHUNK_MAX. The first chunk has only the base deadline (2 x timeout),
    so at that rate it arrives in half of it; each later one in the second it earned."""
    return int(min(CHUNK_MAX, max(CHUNK_MIN, timeout * TRANSFER_RATE)))


class Deadline:
    """The end of one tier call: CALL_TIMEOUTS x ``timeout`` seconds after it starts, pushed
    back by 1 s per TRANSFER_RATE bytes the call transfers (:meth:`transfer`): bytes it sends
    (its own, granted before sending) and bytes it has received (granted as they arrive, never
    for a size a server states: a server that states 50 MiB and then sends one byte every
    0.5 s would otherwise hold the call for 50 s); never past MAX_CALL_TIMEOUTS x ``timeout``
    after it starts (a server that keeps earning time, just above the rate, cannot hold a
    call for the size of the largest value: a larger value needs a faster server, or a
    longer timeout)."""

    def __init__(self, timeout: float):
        self.start = time.monotonic()
        self.at = self.start + CALL_TIMEOUTS * timeout
        self.ceiling = self.start + MAX_CALL_TIMEOUTS * timeout
        self.received = 0  # bytes the backend received (where it counts them: :meth:`receive`)
        self.receivable = RECEIVE_SLACK  # ... and the most it may

    def transfer(self, nbytes: int) -> None:
        """Allow 1 s more per TRANSFER_RATE of ``nbytes`` (bytes sent, or just received), up
        to the ceiling."""
        self.at = min(self.ceiling, self.at + max(0, nbytes) / TRANSFER_RATE)

    def expect(self, nbytes: int) -> None:
        """Allow ``nbytes`` to be received from now on (and RECEIVE_SLACK besides): a value of
        that size, checked against the caller's limit (never time: that is earned,
        :meth:`transfer`)."""
        self.receivable = max(self.receivable, self.received + max(0, nbytes) + RECEIVE_SLACK)

    def receive(self, nbytes: int) -> None:
        """Count ``nbytes`` received by the call's connection; Oversent past what it may
        receive (a reply claiming a 1 TiB string fills memory at the network's speed long
        before any deadline)."""
        self.received += nbytes
        if self.received > self.receivable:
            raise Oversent(f"the server sent more than the {self.receivable} bytes this call can use")

    def left(self) -> float:
        """Seconds until the deadline (0 or less: passed)."""
        return self.at - time.monotonic()

    @property
    def seconds(self) -> float:
        return self.at - self.start


class Overrun(TimeoutError):
    """A call ran past its :class:`Deadline` (its thread was abandoned)."""


class Oversent(Exception):
    """A server sent a call more bytes than it can use (:meth:`Deadline.receive`). Not an
    OSError, so that a client library passes it on as it is (redis-py closes the connection)."""


class BadAnswer(Oversent):
    """An answer refused whole before the client library parses it (an S3 answer's XML that no
    S3 server sends: a DOCTYPE, nesting or elements past s3_counted's bounds): a bad value,
    as :class:`Oversent`."""


_current = threading.local()
#: the same Deadline for an asynchronous backend's requests, which run on fsspec's event loop:
#: a context variable, which ``asyncio.run_coroutine_threadsafe`` carries into the task
#: (s3_counted counts an S3 answer's bytes against it)
RECEIVING: contextvars.ContextVar = contextvars.ContextVar("kcache_remote_receiving", default=None)


def current_deadline() -> Deadline | None:
    """The deadline of the tier call running in this thread (None outside a call): an
    operation that learns how many bytes it will transfer extends it."""
    return getattr(_current, "deadline", None)


def run_within(fn: Callable[[], T], deadline: Deadline, name: str = "kcache-remote-call") -> T:
    """``fn()`` in a daemon thread: its result, or its exception re-raised; Overrun when the
    deadline passes first (the thread is left behind: the caller closes what it uses, so
    that its blocked read ends). The one way to bound a blocking client library as a whole:
    its own timeouts are per read."""
    done = threading.Event()
    box: dict = {}

    def work() -> None:
        _current.deadline = deadline
        try:
            box["out"] = fn()
        except BaseException as exc:  # handed to the caller, which re-raises it
            box["exc"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name=name, daemon=True).start()
    while not done.is_set():
        left = deadline.left()
        if left <= 0:
            break
        done.wait(left)  # the deadline may move (transfer), so wait again
    if not done.is_set():
        raise Overrun(f"no complete answer within the call's deadline ({deadline.seconds:.3g} s)")
    if "exc" in box:
        raise box.pop("exc")
    return box["out"]


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
    wrapping its backend calls in :meth:`_call`; a blocking backend sets ``threaded`` (each
    call runs in a thread of its own, abandoned at its deadline: :meth:`_abandon` then closes
    its connections); ``hidden``: the credentials it sends (never shown)."""

    kind = "remote"
    backfill = True
    threaded = True

    def __init__(self, name: str, *, readonly: bool, timeout: float,
                 max_errors: int = DEFAULT_MAX_ERRORS, hidden: tuple[str, ...] = ()):
        self.name = name
        self.writable = not readonly
        self.timeout = timeout
        self.max_errors = max_errors
        self.hidden = hidden
        #: why the tier switched itself off (None while it is on), with the last error's text
        self.disabled_reason: str | None = None
        #: the same, short (the last error's kind only), for the store's one-line warning
        #: (the error's text was warned already)
        self.disabled_short: str | None = None
        self._errors = 0  # consecutive failures
        # values refused in a row (a bad answer, or the store's checks): an answer resets
        # _errors, so a server that answers only with bad values, slowly, is counted here
        self._refused = 0
        self._served: dict[str, None] = {}  # keys whose values passed the checks (used)
        self._mutex = threading.Lock()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def _classify(self, exc: BaseException) -> TierError:  # pragma: no cover - abstract
        raise NotImplementedError

    def _call(self, what: str, fn: Callable[[], T], *, nbytes: int = 0, bounded: bool = True) -> T:
        """Run one backend operation within its :class:`Deadline` (``nbytes``: bytes it sends;
        ``bounded=False``: a listing of unknown length, bounded per read only):
        TierError("unavailable") at once when switched off; any exception becomes a
        TierError (kind from ``_classify``), counted towards the switch-off unless it is
        ``bad_value`` (the server answered); running past the deadline is a ``timeout``,
        counted alike (:meth:`_overrun`)."""
        if self.disabled_reason is not None:
            raise TierError("unavailable", f"{self.name}: {self.disabled_reason}")
        deadline = None
        try:
            self._prepare()
            if bounded:
                deadline = Deadline(self.timeout)
                deadline.transfer(nbytes)
            out = self._within(fn, deadline)
        except TierError as err:  # raised by the subclass itself, already named
            if err.kind == "bad_value":
                self._answered()
                self.refused(err)
            else:
                self._failed(err)
            raise
        except Exception as exc:  # the backends raise many types: all become TierError
            over = next((e for e in causes(exc) if isinstance(e, Oversent)), None)
            if over is not None:  # an answer, though a hostile one (maybe wrapped): a bad value
                with contextlib.suppress(Exception):
                    self._abandon()  # the rest of that answer is never read: a new connection
                self._answered()
                err = TierError("bad_value", f"{self.name}: {what}: {over}; not read")
                self.refused(err)
                raise err from None
            if deadline is not None and (isinstance(exc, Overrun) or deadline.left() <= 0):
                raise self._overrun(what, deadline) from None
            err = self._classify(exc)
            err.args = (f"{self.name}: {what}: {err}",)
            if err.kind == "bad_value":
                self._answered()
                self.refused(err)
            else:
                self._failed(err)
            raise err from exc
        self._answered()
        return out

    def _within(self, fn: Callable[[], T], deadline: Deadline | None) -> T:
        if deadline is None:
            return fn()
        if self.threaded:
            return run_within(fn, deadline)
        _current.deadline = deadline  # the backend bounds each step by what is left of it
        try:
            return fn()
        finally:
            _current.deadline = None

    def _overrun(self, what: str, deadline: Deadline) -> TierError:
        """A call ran past its deadline: a ``timeout``, counted towards the switch-off; its
        connections are closed (:meth:`_abandon`), or, where that cannot be done, the tier is
        switched off at once (the call left behind may still be using them)."""
        err = self._overrun_error(what, deadline)
        try:
            closed = self._abandon()
        except Exception:  # closing failed: nothing else can be done with that connection
            closed = False
        self._failed(err, at_once=not closed)
        return err

    def _overrun_error(self, what: str, deadline: Deadline) -> TierError:
        return TierError("timeout", f"{self.name}: {what}: no complete answer within the call's "
                                    f"deadline of {deadline.seconds:.3g} s ({CALL_TIMEOUTS} x "
                                    f"KCACHE_REMOTE_TIMEOUT {self.timeout:g} s, + 1 s per MiB "
                                    f"transferred, at most {MAX_CALL_TIMEOUTS} x)")

    def _prepare(self) -> None:
        """CPU work a call needs first, outside its deadline (s3fs's client)."""

    def _abandon(self) -> bool:
        """Close the connections of a call left behind at its deadline, so that its thread
        ends and the next call starts afresh; False when that cannot be done."""
        return False

    def _answered(self) -> None:
        with self._mutex:
            self._errors = 0

    def refused(self, why: object) -> None:
        """A value of this tier was refused (a bad answer, or the store's checks): after
        ``max_errors`` in a row the tier switches itself off, as after errors, so a server
        that sends only bad values cannot cost every lookup its deadline."""
        with self._mutex:
            self._refused += 1
            if self.disabled_reason is None and self._refused >= self.max_errors:
                self._switch_off(f"after {self._refused} values in a row were refused",
                                 str(why), "a refused value")

    def used(self, key: str | None = None) -> None:
        """A value of this tier passed the store's checks: the refusals in a row start again;
        ``key`` is remembered as served (:meth:`served`)."""
        with self._mutex:
            self._refused = 0
            if key is not None:
                if len(self._served) >= MAX_SERVED:
                    self._served.pop(next(iter(self._served)))  # the oldest
                self._served[key] = None

    def served(self, key: str) -> bool:
        """Whether this tier served ``key``'s value in this process (it passed the store's
        checks): ``kcache warm`` and compile_for tell an entry downloaded from a local one."""
        return key in self._served

    def _failed(self, err: TierError, at_once: bool = False) -> None:
        with self._mutex:
            self._errors += 1
            if self.disabled_reason is not None:
                return
            if at_once:
                self._switch_off("after a call ran past its deadline, leaving its connection "
                                 "in use", self.detail(err), None)
            elif self._errors >= self.max_errors:
                self._switch_off(f"after {self._errors} consecutive errors",
                                 f"{err.kind}: {self.detail(err)}", err.kind)

    def _switch_off(self, after: str, last: str, kind: str | None) -> None:
        """Set :attr:`disabled_reason` (``last``: the last error's text) and
        :attr:`disabled_short` (``kind``: the last error's kind, when that says enough)."""
        self.disabled_reason = f"switched off for this process {after} (last: {last})"
        self.disabled_short = (f"switched off for this process {after}"
                               + (f" (last: {kind})" if kind else ""))

    def detail(self, err: BaseException) -> str:
        """``err``'s text without this tier's name in front (the warnings name it once)."""
        text = str(err)
        return text[len(self.name) + 2:] if text.startswith(f"{self.name}: ") else text

    @contextlib.contextmanager
    def single_flight(self, key: str, limit: int, *, ttl: float | None = None,
                      max_wait: float | None = None,
                      while_waiting: Callable[[], None] | None = None) -> Iterator[Flight]:
        """No cross-machine lease on this tier: yields ``Flight(held=False)`` at once (compile
        and publish; machines starting together may compile the same kernel). ``limit``,
        ``ttl``, ``max_wait`` and ``while_waiting`` are accepted for the Redis tier's
        signature."""
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

    def _stated(self, key: str, size, limit: int) -> int:
        """``size``, the size a server stated for ``key``'s value, if it is one of 0 .. ``limit``
        bytes; else TierError("bad_value") (not a size: negative, not an integer; or above the
        limit), before anything of the value is read."""
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise TierError("bad_value", f"{self.name}: the size stated for {key} is not a size "
                                          f"({repr(size)[:40]}); not read")
        if size > limit:
            raise self._too_large(key, size, limit)
        return size


class Unopened(RemoteTier):
    """A remote that could not be opened (an fsspec backend that connects in its constructor
    and was refused, timed out, ...): the first call raises that error (counted like any
    call's), and the tier is switched off from then on."""

    def __init__(self, name: str, kind: str, error: TierError, *, readonly: bool, timeout: float):
        super().__init__(name, readonly=readonly, timeout=timeout)
        self.kind = kind
        self._error = error

    def _call(self, what: str, fn=None, **_kw):
        if self.disabled_reason is None:
            self.disabled_reason = self.disabled_short = (
                f"switched off for this process: it could not be opened ({self._error.kind})")
            raise self._error
        raise TierError("unavailable", f"{self.name}: {self.disabled_reason}")

    def read(self, key: str, limit: int) -> Blob | None:
        self._key(key)
        return self._call("read")

    def write(self, key: str, data: bytes) -> None:
        self._key(key)
        self._check_writable("write")
        self._call("write")

    def remove(self, key: str) -> bool:
        self._key(key)
        self._check_writable("remove")
        return self._call("remove")

    def keys(self) -> Iterator[str]:
        yield from self._call("keys")

    def check(self) -> None:
        self._call("check")

    def close(self) -> None:
        """Nothing was opened."""

"""The Redis tier (``redis://``, ``rediss://``, ``unix://``) through redis-py.

Values are the entry bytes as the store gives them (signed when a secret is set), under
``<namespace>:v<format>:<key>``; a cross-machine single-flight lease under
``<namespace>:v<format>:lease:<key>`` is redis-py's :class:`redis.lock.Lock` (SET NX PX with a
random token; released and renewed by redis-py's token-checking Lua scripts, so a process never
releases another's lease). Imported only when a ``redis`` URL is opened.
"""
from __future__ import annotations

import contextlib
import importlib.util
import secrets
import threading
import time
from typing import Callable, Iterator

import redis
import redis.exceptions as rx
from redis.backoff import NoBackoff
from redis.retry import Retry

from ...errors import ConfigError
from ...keys import KEY_RE
from ...text import cut
from ...warn import warn_once
from ...disk.locks import WORK_GRACE, WORK_ROOM, run_while_waiting
from ..tier import Blob, TierError
from .base import (DEFAULT_LEASE_TTL, DEFAULT_MAX_WAIT, Flight, RemoteTier, chunk_size, current_deadline,
                   describe, os_kind, redact, url_credentials, version_tag)

POLL_FIRST, POLL_GROWTH, POLL_CAP = 0.02, 1.5, 0.5  # seconds: waiters' back-off
SCAN_COUNT = 10_000  # keys a SCAN page examines (a hint to the server)
# names and pages one listing takes from the server at most (push, pull): a server answering
# SCAN with a new cursor and new names for ever filled memory at ~35 MB/s and never ended.
# 2**14 pages of SCAN_COUNT: a database of ~164 million keys, the namespace's among them
MAX_LISTED, MAX_PAGES = 1 << 21, 1 << 14

# No CLIENT SETINFO round trip on each new connection: redis-py >= 7 spells it driver_info=None,
# older versions lib_name=None, lib_version=None (deprecated since).
_NO_SETINFO = ({"driver_info": None} if importlib.util.find_spec("redis.driver_info")
               else {"lib_name": None, "lib_version": None})

_AUTH = (rx.AuthenticationError, rx.AuthorizationError, rx.NoPermissionError,
         rx.AuthenticationWrongNumberOfArgsError)


class RedisTier(RemoteTier):
    """A Redis server as a tier. ``url``: ``redis://[[user]:password@]host:port/db``,
    ``rediss://...`` (TLS; redis-py's ``ssl_*`` query options apply), ``unix:///path?db=N``.
    ``password`` is used when the URL has none (redis-py's from_url: the URL's wins);
    ``timeout``: seconds for each connect and each read (redis-py's socket timeouts), and
    each call as a whole within 2 x timeout + 1 s per MiB, at most 10 x timeout
    (base.Deadline: the call runs in a thread of its own, and at the deadline its connections
    are closed; a call cut off so is a ``timeout`` like any other); ``ttl``: seconds a value
    lives (None: forever), renewed by a hit unless read-only. Raises ConfigError for a
    URL redis-py cannot parse. Connects lazily: nothing is sent before the first call."""

    kind = "redis"

    def __init__(self, url: str, *, namespace: str, readonly: bool, timeout: float,
                 ttl: float | None = None, password: str | None = None,
                 lease_ttl: float = DEFAULT_LEASE_TTL, max_wait: float = DEFAULT_MAX_WAIT):
        super().__init__(redact(url), readonly=readonly, timeout=timeout,
                         hidden=url_credentials(url) + ((password,) if password else ()))
        options = dict(
            socket_timeout=timeout, socket_connect_timeout=timeout,
            # one attempt per call: a retry would multiply the time a dead server costs
            retry=Retry(NoBackoff(), 0), retry_on_timeout=False,
            health_check_interval=0, **_NO_SETINFO,
            # RESP2, said: redis-py >= 8 opens each connection with HELLO 3 and, on a server
            # without it (Redis < 6, many proxies), logs a 4-line warning on the user's stderr
            # at every connect (after each call cut off, again); kcache needs nothing of RESP3
            protocol=2)
        if password:
            options["password"] = password
        try:
            self._redis = redis.Redis.from_url(url, connection_class=_counted_class(url), **options)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"KCACHE_REMOTE={self.name!r} is not a Redis URL redis-py accepts "
                              f"({exc}); accepted: redis://host:port/db, rediss://host:port/db, "
                              "unix:///path/to/socket?db=N") from None
        self._prefix = f"{namespace}:{version_tag()}:"
        self._ttl_ms = max(1, round(ttl * 1000)) if ttl else None
        self.lease_ttl = lease_ttl
        self.max_wait = max_wait
        # waits in a row that ended at max_wait with the lease still another's and no value:
        # after max_errors, this process no longer waits (a lease planted without expiry, by
        # any writer of the server, cost every kernel of every process its max_wait)
        self._waits_out = 0

    # -- names --------------------------------------------------------------------
    def redis_key(self, key: str) -> str:
        """The Redis key holding ``key``'s value: ``<namespace>:v<format>:<key>``."""
        return self._prefix + self._key(key)

    def lease_key(self, key: str) -> str:
        """The Redis key of ``key``'s single-flight lease."""
        return f"{self._prefix}lease:{self._key(key)}"

    # -- the tier protocol ----------------------------------------------------------
    def read(self, key: str, limit: int) -> Blob | None:
        """``key``'s value or None. STRLEN first: a stated size that is not one of 0 ..
        ``limit`` bytes is a TierError("bad_value") without anything being transferred. A
        value of one chunk (base.chunk_size: 1 MiB at the default timeout) is then read in one
        transaction with its length (GETRANGE, STRLEN; PEXPIRE with a TTL on a writable tier:
        a hit renews it); a larger one chunk by chunk under WATCH, then confirmed unchanged
        in a transaction (else it is a miss: replaced while read). Each chunk that arrives
        adds 1 s per MiB to the call's deadline; a size the server states adds nothing, so a
        server that states 50 MiB and then trickles costs the base deadline (2 x timeout).
        At most ``limit`` bytes are ever asked for."""
        name = self.redis_key(key)
        step = chunk_size(self.timeout)

        def op() -> Blob | None:
            size = self._stated(key, self._redis.strlen(name), limit)
            if size == 0:
                return None  # absent (an empty value is no entry either)
            current_deadline().expect(size)
            if size <= step:
                pipe = self._redis.pipeline(transaction=True)
                pipe.getrange(name, 0, step - 1)
                pipe.strlen(name)
                self._renew(pipe, name)
                data, size = pipe.execute()[:2]
                data = self._chunk(key, data, step)
                if size == len(data):  # the whole value, read atomically
                    return Blob(data) if data else None
                size = self._stated(key, size, limit)  # replaced meanwhile by a larger one
                current_deadline().expect(size)
            return self._read_chunks(key, name, size, limit, step)

        return self._call("read", op)

    def _read_chunks(self, key: str, name: str, size: int, limit: int, step: int) -> Blob | None:
        """A value of more than one chunk (``size`` stated, at most ``limit``), in ``step``-byte
        GETRANGEs under WATCH; None when it changed meanwhile (EXEC refused: a miss)."""
        deadline = current_deadline()
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.watch(name)
            size = self._stated(key, pipe.strlen(name), limit)  # as of the WATCH
            deadline.expect(size)
            parts, got = [], 0
            while got < size:
                part = self._chunk(key, pipe.getrange(name, got, min(got + step, size) - 1), step)
                if not part:
                    break  # shrunk: EXEC below says it changed
                parts.append(part)
                got += len(part)
                deadline.transfer(len(part))  # the time for the next chunk, earned by this one
            pipe.multi()
            pipe.strlen(name)
            self._renew(pipe, name)
            try:
                now = pipe.execute()[0]
            except rx.WatchError:
                return None  # replaced or removed while read: a miss, never a mix of two values
        if now != got:
            return None
        return Blob(b"".join(parts)) if got else None

    def _renew(self, pipe, name: str) -> None:
        """With a TTL and a writable tier, a hit renews the value's TTL (in ``pipe``)."""
        if self._ttl_ms and self.writable:
            pipe.pexpire(name, self._ttl_ms)

    def _chunk(self, key: str, data, step: int) -> bytes:
        """``data``, the answer to a GETRANGE of at most ``step`` bytes, if it is one."""
        if not isinstance(data, (bytes, bytearray)):
            raise TierError("bad_value", f"{self.name}: the value of {key} came as "
                                          f"{type(data).__name__}, not bytes; not read")
        if len(data) > step:
            raise TierError("bad_value", f"{self.name}: the server sent {len(data)} bytes of the "
                                          f"value of {key} for {step} asked; not read")
        return bytes(data)

    def write(self, key: str, data: bytes) -> None:
        """SET ``key``'s value (atomic in Redis), with PX = the TTL when one is set."""
        name = self.redis_key(key)
        self._check_writable("write")
        self._call("write", lambda: self._redis.set(name, data, px=self._ttl_ms), nbytes=len(data))

    def remove(self, key: str) -> bool:
        """DEL ``key``'s value; True if it existed."""
        name = self.redis_key(key)
        self._check_writable("remove")
        return bool(self._call("remove", lambda: self._redis.delete(name)))

    def keys(self) -> Iterator[str]:
        """Every key under this namespace and format version (SCAN MATCH, page by page, each
        page one bounded call); leases and foreign keys are skipped. TierError("bad_value")
        for a page that is not a cursor and a list of names, and once the server has sent
        MAX_LISTED names or MAX_PAGES pages (a listing that never ends)."""
        cursor = 0
        pattern = self._prefix + "*"  # the namespace has no glob characters (checked)
        names_seen = pages = 0
        while True:
            cursor, names = self._call("keys", lambda c=cursor: self._page(c, pattern))
            names_seen += len(names)
            pages += 1
            if names_seen > MAX_LISTED or pages > MAX_PAGES:
                raise TierError("bad_value", f"{self.name}: keys: the listing went on past {MAX_LISTED} "
                                             f"names or {MAX_PAGES} pages; stopped")
            for raw in names:
                name = raw.decode("ascii", "replace")
                # MATCH is the server's to honour: a name of another namespace is not ours
                key = name[len(self._prefix):] if name.startswith(self._prefix) else ""
                if KEY_RE.fullmatch(key):
                    yield key
            if cursor == 0:
                return

    def _page(self, cursor: int, pattern: str) -> tuple[int, list]:
        """One SCAN page: (next cursor, names); TierError("bad_value") when the answer is not
        a cursor of 0 .. 2**64-1 and a list of strings (a name of another type, a nested
        list: the server's, never a traceback)."""
        cursor, names = self._redis.scan(cursor, match=pattern, count=SCAN_COUNT)
        if (not isinstance(cursor, int) or not 0 <= cursor < 1 << 64 or not isinstance(names, list)
                or not all(isinstance(n, (bytes, bytearray)) for n in names)):
            shown = cut(repr((cursor, names[:4] if isinstance(names, list) else names)), 80)
            raise TierError("bad_value", f"{self.name}: keys: the server answered SCAN with {shown}, "
                                         "not a cursor and a list of names; not read")
        return cursor, names

    def close(self) -> None:
        """Close the connection pool."""
        with contextlib.suppress(Exception):
            self._redis.close()

    def _abandon(self) -> bool:
        # closes every connection of the pool, also the one in use by the call left behind:
        # its blocked read returns at once (redis-py shuts the socket down) and its thread
        # ends; the next call connects afresh
        self._redis.connection_pool.disconnect()
        return True

    def ttl(self, key: str) -> float | None:
        """Seconds left before ``key``'s value expires; None without expiry or when absent."""
        ms = self._call("ttl", lambda: self._redis.pttl(self.redis_key(key)))
        return ms / 1000 if ms >= 0 else None

    def check(self) -> None:
        """PING, and when writable SET + DEL of a probe key (``<namespace>:v<format>:check:...``,
        expiring in 10 s should the DEL not arrive). Raises TierError (auth: a wrong password or
        an ACL that forbids these commands)."""
        def op() -> None:
            self._redis.ping()
            if self.writable:
                probe = f"{self._prefix}check:{secrets.token_hex(8)}"
                self._redis.set(probe, b"kcache remote check", px=10_000)
                self._redis.delete(probe)

        self._call("check", op)

    # -- single flight across machines ---------------------------------------------
    @contextlib.contextmanager
    def single_flight(self, key: str, limit: int, *, ttl: float | None = None,
                      max_wait: float | None = None,
                      while_waiting: Callable[[], None] | None = None) -> Iterator[Flight]:
        """Context manager for one compile of ``key`` across machines; yields a Flight.

        Takes the lease (SET NX PX ``ttl`` s, default lease_ttl, renewed by a thread while
        held); if another process holds it, polls for the value (back-off 20 ms x1.5 up to
        0.5 s) until it appears, or the lease is free (the holder finished without a value or
        crashed and its lease expired) and taken by us, or ``max_wait`` seconds passed.
        ``flight.blob`` set: use it (verify it first); else compile and publish inside the
        block. After ``max_errors`` waits in a row that ended at ``max_wait`` (the lease
        another's, no value), warned once, the process waits no more: a lease planted without
        expiry cannot cost every kernel its wait. A read-only tier never takes the lease, only waits. ``while_waiting()`` runs
        once when the lease is still another's after 0.1 s of waiting, as for the store's
        local lock (what it raises is ignored; its time counts against ``max_wait``; not
        run when ``max_wait`` is under 5 s). Never raises TierError (it is in
        ``flight.error``); the lease is released on exit, only if still ours. Mirrors the
        store's local get_or_create, one level up."""
        lock = self._redis.lock(self.lease_key(key), timeout=ttl or self.lease_ttl,
                                thread_local=False, raise_on_release_error=False)
        flight = self._take_or_wait(key, limit, lock, self.max_wait if max_wait is None else max_wait,
                                    while_waiting)
        renewer = _Renewer(self, lock, ttl or self.lease_ttl) if flight.held else None
        try:
            yield flight
        finally:
            if renewer is not None:
                renewer.stop()
                self._release(lock)

    def _take_or_wait(self, key: str, limit: int, lock, max_wait: float,
                      while_waiting=None) -> Flight:
        start = time.monotonic()
        delay = POLL_FIRST
        held = False
        slept = False

        def waited() -> float:  # seconds spent waiting for another holder (not round trips)
            return time.monotonic() - start if slept else 0.0

        try:
            while True:
                if self.writable:
                    held = self._call("lease", lambda: lock.acquire(blocking=False, token=secrets.token_hex(16)))
                free = held or (not self.writable and not self._call("lease", lock.locked))
                # after taking the lease, look once more: the holder before us may have
                # published just before releasing
                blob = self.read(key, limit)
                if blob is not None:
                    self._waits_out = 0
                    if held:
                        self._release(lock)
                    return Flight(False, blob, waited=waited())
                if free:
                    self._waits_out = 0  # the leases come and go: waiting works
                    return Flight(held, waited=waited())
                if self._waits_out >= self.max_errors:
                    return Flight(False)  # held past max_wait too often: compile, no wait
                if while_waiting is not None and time.monotonic() - start >= WORK_GRACE:
                    work, while_waiting = while_waiting, None  # once
                    if max_wait >= WORK_ROOM:
                        run_while_waiting(work)
                        slept = True  # the work's time was a wait for the holder too
                        continue  # look again at once: the work took time
                left = start + max_wait - time.monotonic()
                if left <= 0:
                    self._wait_ran_out(max_wait)
                    return Flight(False, waited=waited())
                time.sleep(min(delay, left))  # polling with a deadline (another machine's compile)
                slept = True
                delay = min(delay * POLL_GROWTH, POLL_CAP)
        except TierError as err:
            if held:
                self._release(lock)
            return Flight(False, error=err, waited=waited())

    def _wait_ran_out(self, max_wait: float) -> None:
        """A wait ended at ``max_wait``, the lease another's, no value: after ``max_errors`` in
        a row, one warning, and this process waits no more (each kernel compiles at once)."""
        self._waits_out += 1
        if self._waits_out == self.max_errors:
            warn_once(f"remote-lease:{self.name}", f"kcache: remote {self.name}: {self._waits_out} "
                      f"leases in a row were still held after KCACHE_REMOTE_WAIT ({max_wait:g} s) "
                      "with no value published; this process no longer waits for leases")

    def _release(self, lock) -> None:
        """Release the lease if it is still ours (redis-py compares the token in Lua); an
        error is ignored: the lease expires by itself."""
        with contextlib.suppress(TierError):
            self._call("release lease", lambda: _quietly(lock.release))

    def _classify(self, exc: BaseException) -> TierError:
        return TierError(_kind(exc), describe(exc, self.hidden))


class _CountingSocket:
    """A connected socket whose every receipt counts against the current call's allowance
    (base.Deadline.receive): a server that answers with more than a call can use (a string
    claiming 1 TiB, an endless array) is cut off by size, not only at the deadline. Anything
    else is the socket's own."""

    __slots__ = ("_sock",)

    def __init__(self, sock):
        self._sock = sock

    def recv(self, *args):
        data = self._sock.recv(*args)
        _received(len(data))
        return data

    def recv_into(self, buffer, *args):
        n = self._sock.recv_into(buffer, *args)
        _received(n)
        return n

    def __getattr__(self, name: str):
        return getattr(self._sock, name)


def _received(nbytes: int) -> None:
    deadline = current_deadline()
    if deadline is not None:
        deadline.receive(nbytes)


class _Counted:
    """Mixed into redis-py's connection classes: the socket it connects is counted."""

    def _connect(self):
        return _CountingSocket(super()._connect())


class _TCPConnection(_Counted, redis.Connection):
    pass


class _TLSConnection(_Counted, redis.SSLConnection):
    pass


class _UnixConnection(_Counted, redis.UnixDomainSocketConnection):
    pass


def _counted_class(url: str):
    """The counted connection class for ``url``'s scheme (what redis-py's from_url picks)."""
    scheme = url.split(":", 1)[0].lower()
    return {"rediss": _TLSConnection, "unix": _UnixConnection}.get(scheme, _TCPConnection)


def _quietly(fn) -> bool:
    """``fn()``; False when the lease is no longer ours (expired, maybe taken by another)."""
    try:
        fn()
    except rx.LockError:
        return False
    return True


def _kind(exc: BaseException) -> str:
    """The TierError kind of a redis-py exception."""
    if isinstance(exc, _AUTH):
        return "auth"
    if isinstance(exc, rx.TimeoutError):
        return "timeout"
    if isinstance(exc, rx.InvalidResponse):
        return "bad_value"  # an answer that is no RESP (a RESP3 type to a RESP2 client)
    if isinstance(exc, rx.ResponseError):
        text = str(exc)
        if text.startswith("WRONGTYPE"):
            return "bad_value"  # the key holds a list, a hash...: not a value of ours
        if text.startswith(("NOAUTH", "WRONGPASS", "NOPERM")):
            return "auth"
        return "io"
    kind = os_kind(exc)
    if kind is not None:
        return kind
    if isinstance(exc, rx.ConnectionError):
        return "refused"  # closed by the server, unreachable
    return "io"


class _Renewer:
    """Keeps a held lease alive: ``lock.reacquire()`` every third of its TTL, from a daemon
    thread, until stopped or the lease is lost. A process killed while holding stops renewing,
    so its lease expires within one TTL."""

    def __init__(self, tier: RedisTier, lock, ttl: float):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(tier, lock, ttl / 3),
                                        name="kcache-remote-lease", daemon=True)
        self._thread.start()

    def _run(self, tier: RedisTier, lock, period: float) -> None:
        while not self._stop.wait(period):
            try:
                if not tier._call("renew lease", lambda: _quietly(lock.reacquire)):
                    return
            except TierError:
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

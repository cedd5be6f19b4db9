"""The Redis tier against real redis-server processes on loopback ports (tests/servers.py):
round trips, bounds, namespacing, read-only, TTL, timeouts against a silent server, refused
connections, wrong passwords, the switch-off, a server killed and restarted, and the
cross-machine single-flight lease with real processes."""
import multiprocessing as mp
import os
import signal
import threading
import time

import pytest

from kcache import Entry, make_key
from kcache.entry import format as fmt
from kcache.tiers.remote import open_remote
from kcache.tiers.tier import Tier, TierError
from servers import (DrippingServer, EchoingServer, SilentServer, make_redis, redis_url, refusing_port,  # noqa: F401
                     unique_namespace, wait_until)

redis = pytest.importorskip("redis")

CTX = mp.get_context("fork")
LIMIT = 1 << 20  # bytes
TIMEOUT = 0.5  # seconds: short, so the timeout tests are quick
T_OK = 10.0  # seconds: the timeout of tests that are not about timeouts (a loaded machine)
# A bounded call costs at most connect + one read: each at most TIMEOUT. The slack covers a
# loaded 2-core machine; a call that waited for a default (5 s) timeout or retried with
# back-off would still exceed it.
BOUND = 2 * TIMEOUT + 0.7


def key(*parts) -> str:
    return make_key({"test": list(parts)})


def entry_bytes(k: str, size: int = 1000) -> bytes:
    return fmt.encode(k, Entry({"cubin": os.urandom(size)}, {"kernel": "m:f", "arch": "sm_90a"}))


@pytest.fixture
def ns() -> str:
    return unique_namespace()


@pytest.fixture
def tier(redis_url, ns):
    t = open_remote(redis_url, namespace=ns, timeout=1.0)
    yield t
    t.close()


@pytest.fixture
def raw(redis_url):
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def timed(fn, *args):
    """(result or the TierError raised, seconds taken)."""
    t0 = time.monotonic()
    try:
        out = fn(*args)
        if hasattr(out, "__next__"):
            out = list(out)
    except TierError as exc:
        out = exc
    return out, time.monotonic() - t0


def calls(t, k):
    """One of each tier call, as (name, function, args)."""
    return [("read", t.read, (k, LIMIT)), ("write", t.write, (k, b"x")), ("remove", t.remove, (k,)),
            ("keys", t.keys, ()), ("check", t.check, ())]


# -- the protocol --------------------------------------------------------------------------

def test_round_trip_namespaced_and_versioned(tier, raw, ns):
    assert isinstance(tier, Tier)
    assert (tier.kind, tier.writable, tier.backfill) == ("redis", True, True)
    k = key("round trip")
    data = entry_bytes(k, 50_000)
    assert tier.read(k, LIMIT) is None
    tier.write(k, data)
    blob = tier.read(k, LIMIT)
    assert blob.data == data  # the entry bytes exactly, no wrapping, no pickle
    assert fmt.decode(blob.data, k)[1].artifacts == fmt.decode(data, k)[1].artifacts
    assert raw.get(f"{ns}:v{fmt.FORMAT_VERSION}:{k}") == data
    assert raw.pttl(f"{ns}:v{fmt.FORMAT_VERSION}:{k}") == -1  # no TTL unless asked
    assert tier.remove(k) is True
    assert tier.remove(k) is False
    assert tier.read(k, LIMIT) is None


def test_keys_lists_only_this_namespace_and_version(redis_url, raw, ns):
    tier = open_remote(redis_url, timeout=T_OK, namespace=ns)
    other = open_remote(redis_url, timeout=T_OK, namespace=ns + "-other")
    mine = {key("mine", i) for i in range(2500)}  # several SCAN pages
    pipe = raw.pipeline(transaction=False)
    for k in mine:
        pipe.set(f"{ns}:v{fmt.FORMAT_VERSION}:{k}", b"v")
    pipe.execute()
    other.write(key("other"), b"v")
    raw.set(f"{ns}:v{fmt.FORMAT_VERSION + 1}:{key('newer format')}", b"v")  # another format version
    raw.set(f"{ns}:v{fmt.FORMAT_VERSION}:not-a-key", b"v")
    with tier.single_flight(key("leased"), LIMIT) as flight:  # a lease is not a value
        assert flight.held
        assert set(tier.keys()) == mine
    assert set(other.keys()) == {key("other")}


def test_value_larger_than_limit_is_refused_without_transfer(tier, raw):
    k = key("large")
    tier.write(k, b"\x00" * (4 << 20))
    sent_before = raw.info("stats")["total_net_output_bytes"]
    with pytest.raises(TierError) as exc:
        tier.read(k, 1000)
    sent = raw.info("stats")["total_net_output_bytes"] - sent_before
    assert exc.value.kind == "bad_value" and "larger than the limit" in str(exc.value)
    # STRLEN said no: the 4 MiB value never left the server (the count is the server's, and
    # other workers' tests may share it: 1 MiB leaves room for their traffic, not for the value)
    assert sent < 1 << 20
    assert tier.read(k, 4 << 20).data == b"\x00" * (4 << 20)  # within the limit: read


def test_value_of_another_type_is_a_bad_value_and_three_in_a_row_switch_the_tier_off(tier, raw, ns):
    """A bad value is an answer (the connection is fine) but costs its call: a server
    answering only with bad values is switched off like one that fails (attack review, round
    3: -WRONGTYPE after 0.9 s held every lookup 0.9 s); a good answer in between resets."""
    k = key("list")
    raw.rpush(f"{ns}:v{fmt.FORMAT_VERSION}:{k}", b"not a string")
    for _ in range(2):
        with pytest.raises(TierError) as exc:
            tier.read(k, LIMIT)
        assert exc.value.kind == "bad_value"
    tier.used()  # a value that passed the store's checks
    for _ in range(3):
        assert tier.disabled_reason is None
        with pytest.raises(TierError) as exc:
            tier.read(k, LIMIT)
        assert exc.value.kind == "bad_value"
    assert "3 values in a row were refused" in tier.disabled_reason
    with pytest.raises(TierError) as exc:
        tier.read(key("absent"), LIMIT)
    assert exc.value.kind == "unavailable"


def test_read_only_tier_refuses_writes(redis_url, raw, ns):
    k = key("ro")
    writer = open_remote(redis_url, timeout=T_OK, namespace=ns)
    writer.write(k, b"published")
    ro = open_remote(redis_url, timeout=T_OK, namespace=ns, readonly=True, ttl=60)
    assert ro.writable is False
    for call, args in ((ro.write, (k, b"changed")), (ro.write, (key("new"), b"v")), (ro.remove, (k,))):
        with pytest.raises(TierError) as exc:
            call(*args)
        assert "read-only" in str(exc.value)
    assert raw.get(f"{ns}:v{fmt.FORMAT_VERSION}:{k}") == b"published"
    assert not raw.exists(f"{ns}:v{fmt.FORMAT_VERSION}:{key('new')}")
    assert ro.read(k, LIMIT).data == b"published"
    assert raw.pttl(f"{ns}:v{fmt.FORMAT_VERSION}:{k}") == -1  # a read-only hit sets no TTL
    with ro.single_flight(key("ro flight"), LIMIT) as flight:  # waits, never takes a lease
        assert (flight.held, flight.blob) == (False, None)
        assert not raw.exists(ro.lease_key(key("ro flight")))


def test_ttl_is_set_and_a_hit_renews_it(redis_url, raw, ns):
    k = key("ttl")
    tier = open_remote(redis_url, timeout=T_OK, namespace=ns, ttl=100)
    tier.write(k, b"value")
    name = f"{ns}:v{fmt.FORMAT_VERSION}:{k}"
    assert 90_000 < raw.pttl(name) <= 100_000
    assert 90 < tier.ttl(k) <= 100
    raw.pexpire(name, 5_000)
    assert tier.read(k, LIMIT).data == b"value"
    assert raw.pttl(name) > 90_000
    assert open_remote(redis_url, timeout=T_OK, namespace=ns).ttl(key("absent")) is None


def test_unix_socket_url(make_redis, ns):
    server = make_redis(unix=True)
    tier = open_remote(server.url.replace("?db=0", "?db=1"), namespace=ns)
    k = key("unix")
    tier.write(k, b"over a unix socket")
    assert tier.read(k, LIMIT).data == b"over a unix socket"
    assert tier.name == f"unix://{server.socket}?db=1"


def test_tls(make_redis, ns):
    server = make_redis(tls=True, password="tls-password-123")
    k = key("tls")
    url = server.tls_url.replace("rediss://", "rediss://:tls-password-123@")
    tier = open_remote(url, namespace=ns, timeout=2.0)
    tier.write(k, b"over TLS")
    assert tier.read(k, LIMIT).data == b"over TLS"
    assert tier.name == f"rediss://127.0.0.1:{server.tls_port}/0"  # no password, no TLS options
    # a server whose certificate does not verify (not signed by the system's CAs) is refused
    untrusted = open_remote(f"rediss://:tls-password-123@127.0.0.1:{server.tls_port}/0", namespace=ns,
                            timeout=2.0)
    err, took = timed(untrusted.read, k, LIMIT)
    assert isinstance(err, TierError) and err.kind == "auth" and "certificate" in str(err).lower(), err


# -- names never show secrets ----------------------------------------------------------------

def test_name_and_errors_never_show_the_password(ns):
    secret = "hunter2-Secret-Pw"
    with refusing_port() as port:
        for url, kw in ((f"redis://user:{secret}@127.0.0.1:{port}/3", {}),
                        (f"redis://127.0.0.1:{port}/3?password={secret}", {}),
                        (f"redis://127.0.0.1:{port}/3", {"password": secret})):
            tier = open_remote(url, namespace=ns, timeout=TIMEOUT, **kw)
            assert tier.name == f"redis://127.0.0.1:{port}/3"
            texts = [tier.name, repr(tier)]
            for _name, call, args in calls(tier, key("x")):
                texts.append(str(timed(call, *args)[0]))
            assert all(secret not in t for t in texts), texts


def test_a_server_quoting_the_password_back_is_not_shown(ns):
    """A server that quotes a refused command (here every one: AUTH with the password too)
    puts the password in its error text: that text is left out whole, never edited, and the
    rest of the message reads as usual."""
    with EchoingServer() as echo:
        for password, kw in (("kcache", {}), ("a", {}), ("hunter2-Secret-Pw", {"password": "hunter2-Secret-Pw"})):
            url = f"redis://127.0.0.1:{echo.port}/0" if kw else f"redis://:{password}@127.0.0.1:{echo.port}/0"
            tier = open_remote(url, namespace=ns, timeout=T_OK, **kw)
            err, _took = timed(tier.read, key("echo"), LIMIT)
            text = str(err)
            assert text == (f"redis://127.0.0.1:{echo.port}/0: read: ResponseError (its message is not "
                            "shown: it may contain a credential)"), text
            assert "***" not in text
        # without a password, the server's words are shown as they are
        tier = open_remote(f"redis://127.0.0.1:{echo.port}/0", namespace=ns, timeout=T_OK)
        text = str(timed(tier.read, key("echo"), LIMIT)[0])
        assert ": read: ResponseError: unknown command, with args beginning with: *" in text, text


# -- a soft tier: bounded calls, classified errors, the switch-off ------------------------------

def test_silent_server_every_call_bounded_then_switched_off(ns):
    with SilentServer() as silent:
        tier = open_remote(f"redis://127.0.0.1:{silent.port}/0", namespace=ns, timeout=TIMEOUT)
        k = key("silent")
        for name, call, args in calls(tier, k)[:3]:
            err, took = timed(call, *args)
            assert isinstance(err, TierError) and err.kind == "timeout", (name, err)
            assert took < BOUND, (name, took)
        assert tier.disabled_reason is not None and "3 consecutive errors" in tier.disabled_reason
        for name, call, args in calls(tier, k):  # switched off: no network at all
            err, took = timed(call, *args)
            assert isinstance(err, TierError) and err.kind == "unavailable", (name, err)
            assert took < 0.05, (name, took)
        with tier.single_flight(k, LIMIT) as flight:  # never raises: the error is in the flight
            assert (flight.held, flight.blob, flight.error.kind) == (False, None, "unavailable")


def test_silent_server_with_password_and_db_is_bounded_too(ns):
    with SilentServer() as silent:  # AUTH and SELECT on connect are reads as well
        tier = open_remote(f"redis://:pw@127.0.0.1:{silent.port}/5", namespace=ns, timeout=TIMEOUT)
        err, took = timed(tier.read, key("x"), LIMIT)
        assert err.kind == "timeout" and took < BOUND


def test_dripping_server_is_cut_off_at_the_call_deadline(ns):
    """A server that answers one byte every 0.25 s never trips a read timeout of 0.75 s: the
    whole call's deadline (2 x timeout) ends each call, a timeout like any other, with its
    connection closed (the call's thread ends; the next call connects afresh); three of them
    switch the tier off."""
    timeout = 0.75
    with DrippingServer(interval=0.25) as drip:
        tier = open_remote(f"redis://:pw@127.0.0.1:{drip.port}/2", namespace=ns, timeout=timeout)
        k = key("drip")
        for i, (fn, args) in enumerate([(tier.read, (k, LIMIT)), (tier.write, (k, b"v" * 100)), (tier.check, ())]):
            err, took = timed(fn, *args)
            assert isinstance(err, TierError) and err.kind == "timeout", err
            assert "no complete answer within the call's deadline of 1.5 s" in str(err), err
            assert 2 * timeout - 0.05 < took < 2 * timeout + 0.7, took
            # the call left behind had its connection closed, so its thread ends
            wait_until(lambda: drip.closed == drip.accepted == i + 1, 10, "the dripping connection closed")
            wait_until(lambda: not [t for t in threading.enumerate() if t.name == "kcache-remote-call"], 10,
                       "the abandoned call's thread to end")
            assert (tier.disabled_reason is None) == (i < 2), tier.disabled_reason
        assert "after 3 consecutive errors (last: timeout:" in tier.disabled_reason
        err, took = timed(tier.read, k, LIMIT)
        assert err.kind == "unavailable" and took < 0.05
        assert drip.accepted == 3  # switched off: no new connection


def test_connection_refused(ns):
    with refusing_port() as port:
        tier = open_remote(f"redis://127.0.0.1:{port}/0", namespace=ns, timeout=TIMEOUT)
        for name, call, args in calls(tier, key("refused"))[:3]:
            err, took = timed(call, *args)
            assert isinstance(err, TierError) and err.kind == "refused", (name, err)
            assert took < BOUND
        assert timed(tier.read, key("refused"), LIMIT)[0].kind == "unavailable"


def test_a_success_resets_the_error_count(redis_url, ns):
    tier = open_remote(redis_url, namespace=ns, timeout=TIMEOUT)
    real = tier._redis
    with refusing_port() as port:
        dead = open_remote(f"redis://127.0.0.1:{port}/0", namespace=ns, timeout=TIMEOUT)._redis
        for _ in range(5):
            tier._redis = dead
            assert timed(tier.read, key("x"), LIMIT)[0].kind == "refused"
            assert timed(tier.read, key("x"), LIMIT)[0].kind == "refused"
            tier._redis = real
            assert tier.read(key("x"), LIMIT) is None  # 2 errors, then an answer: still on
    assert tier.disabled_reason is None


def test_wrong_password_is_auth(make_redis, ns):
    server = make_redis(password="right-password-123")
    k = key("auth")
    good = open_remote(server.url, timeout=T_OK, namespace=ns)
    good.write(k, b"v")
    for url, kw in ((f"redis://127.0.0.1:{server.port}/0", {}),
                    (f"redis://:wrong@127.0.0.1:{server.port}/0", {}),
                    (f"redis://127.0.0.1:{server.port}/0", {"password": "wrong"})):
        err, took = timed(open_remote(url, namespace=ns, timeout=TIMEOUT, **kw).read, k, LIMIT)
        assert isinstance(err, TierError) and err.kind == "auth", (url, err)
    # KCACHE_REMOTE_PASSWORD's way in; the URL's password wins over it (redis-py's rule)
    assert open_remote(f"redis://127.0.0.1:{server.port}/0", namespace=ns,
                       password="right-password-123").read(k, LIMIT).data == b"v"
    assert open_remote(server.url, timeout=T_OK, namespace=ns, password="wrong").read(k, LIMIT).data == b"v"


def test_server_killed_mid_run_then_restarted(make_redis, ns):
    server = make_redis()
    tier = open_remote(server.url, namespace=ns, timeout=TIMEOUT)
    k = key("killed")
    tier.write(k, b"before")
    assert tier.read(k, LIMIT).data == b"before"
    server.stop(kill=True)
    kinds = []
    for name, call, args in calls(tier, k) * 2:
        err, took = timed(call, *args)
        assert isinstance(err, TierError), (name, err)
        assert took < BOUND, (name, took)
        kinds.append(err.kind)
    assert kinds[:3] == ["refused"] * 3 and set(kinds[3:]) == {"unavailable"}
    server.start()  # same port, empty (no persistence)
    assert timed(tier.read, k, LIMIT)[0].kind == "unavailable"  # switched off for the process
    fresh = open_remote(server.url, namespace=ns, timeout=TIMEOUT)  # a new process, in effect
    assert fresh.read(k, LIMIT) is None
    fresh.write(k, b"after")
    assert fresh.read(k, LIMIT).data == b"after"


def test_server_killed_before_a_large_read(make_redis, ns):
    server = make_redis()
    k = key("large read")
    open_remote(server.url, namespace=ns, timeout=T_OK).write(k, os.urandom(16 << 20))
    tier = open_remote(server.url, namespace=ns, timeout=TIMEOUT)
    assert len(tier.read(k, 128 << 20).data) == 16 << 20  # connected, pooled
    server.stop(kill=True)
    err, took = timed(tier.read, k, 128 << 20)
    assert isinstance(err, TierError) and err.kind == "refused" and took < BOUND


# -- single flight across machines ---------------------------------------------------------------

def _flight_worker(url: str, ns: str, k: str, value: bytes, barrier, results) -> None:
    tier = open_remote(url, namespace=ns, timeout=2.0)
    barrier.wait()
    if tier.read(k, LIMIT) is not None:
        results.put(("hit", tier.read(k, LIMIT).data))
        return
    with tier.single_flight(k, LIMIT, ttl=5.0, max_wait=60.0) as flight:
        if flight.blob is not None:
            results.put(("waited", flight.blob.data))
            return
        assert flight.held and flight.error is None
        time.sleep(1.0)  # the compile (work, not synchronisation): the others poll meanwhile
        tier.write(k, value)
        results.put(("compiled", value))


def test_eight_processes_one_compile(redis_url, ns):
    k = key("fleet")
    n = 8
    barrier = CTX.Barrier(n)
    results = CTX.Queue()
    procs = [CTX.Process(target=_flight_worker, args=(redis_url, ns, k, f"value {i}".encode(), barrier, results))
             for i in range(n)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in range(n)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    kinds = [o[0] for o in outcomes]
    assert kinds.count("compiled") == 1, kinds
    assert kinds.count("waited") >= 1, kinds  # they started together: some waited on the lease
    assert len({o[1] for o in outcomes}) == 1  # everyone ended with the one compiled value
    tier = open_remote(redis_url, timeout=T_OK, namespace=ns)
    assert redis.Redis.from_url(redis_url).exists(tier.lease_key(k)) == 0  # released


def _holder(url: str, ns: str, k: str, ttl: float, held, release) -> None:
    tier = open_remote(url, namespace=ns, timeout=2.0)
    with tier.single_flight(k, LIMIT, ttl=ttl) as flight:
        assert flight.held
        held.set()
        release.wait(120)


def test_crashed_holder_lease_expires_and_another_takes_it(redis_url, ns):
    k = key("crash")
    ttl = 1.0
    held, release = CTX.Event(), CTX.Event()
    p = CTX.Process(target=_holder, args=(redis_url, ns, k, ttl, held, release))
    p.start()
    assert held.wait(60)
    tier = open_remote(redis_url, namespace=ns, timeout=2.0)
    raw = redis.Redis.from_url(redis_url)
    assert raw.exists(tier.lease_key(k))
    os.kill(p.pid, signal.SIGKILL)  # killed while holding: never releases
    p.join()
    t0 = time.monotonic()
    with tier.single_flight(k, LIMIT, ttl=ttl, max_wait=30) as flight:
        waited = time.monotonic() - t0
        assert flight.held and flight.blob is None and flight.error is None
    # the dead holder renewed every ttl/3: its lease ran out within one ttl of the kill (the
    # waiter polls every 0.5 s at most; the rest is slack for a loaded machine), far below max_wait
    assert waited < ttl + 2.0, waited
    assert not raw.exists(tier.lease_key(k))


def _publishing_holder(url: str, ns: str, k: str, held, release) -> None:
    tier = open_remote(url, namespace=ns, timeout=2.0)
    with tier.single_flight(k, LIMIT, ttl=30) as flight:
        assert flight.held
        held.set()
        release.wait(120)
        tier.write(k, b"the holder's value")


def test_work_while_waiting_for_the_lease_runs_once_then_the_value_is_used(redis_url, ns):
    k = key("work while waiting")
    held, release = CTX.Event(), CTX.Event()
    p = CTX.Process(target=_publishing_holder, args=(redis_url, ns, k, held, release))
    p.start()
    try:
        assert held.wait(60)
        tier = open_remote(redis_url, namespace=ns, timeout=2.0)
        calls = []

        def work():
            calls.append(tier.read(k, LIMIT))  # the holder has published nothing yet
            release.set()
            raise RuntimeError("ignored")

        with tier.single_flight(k, LIMIT, max_wait=60, while_waiting=work) as flight:
            assert (flight.held, flight.blob.data) == (False, b"the holder's value")
        assert calls == [None]
    finally:
        release.set()
        p.join(60)
    assert p.exitcode == 0


@pytest.mark.slow
def test_live_holder_renews_its_lease_and_waiters_give_up_at_the_cap(redis_url, ns):
    k = key("renewed")
    held, release = CTX.Event(), CTX.Event()
    p = CTX.Process(target=_holder, args=(redis_url, ns, k, 1.2, held, release))
    p.start()
    try:
        assert held.wait(60)
        tier = open_remote(redis_url, namespace=ns, timeout=2.0)
        t0 = time.monotonic()
        with tier.single_flight(k, LIMIT, max_wait=3.0) as flight:
            took = time.monotonic() - t0
            # the holder's 1.2 s lease outlived 3 s of waiting: renewed; the waiter gave up
            assert (flight.held, flight.blob, flight.error) == (False, None, None)
        assert 3.0 <= took < 6.0, took
        assert flight.waited >= 3.0
    finally:
        release.set()
        p.join(60)
    assert p.exitcode == 0
    assert not redis.Redis.from_url(redis_url).exists(tier.lease_key(k))


def test_a_lease_lost_meanwhile_is_not_released(redis_url, raw, ns):
    tier = open_remote(redis_url, timeout=T_OK, namespace=ns)
    k = key("lost lease")
    with tier.single_flight(k, LIMIT, ttl=30) as flight:
        assert flight.held
        raw.set(tier.lease_key(k), b"another process's token")  # ours expired, another took it
    assert raw.get(tier.lease_key(k)) == b"another process's token"


def test_value_published_before_the_lease_is_taken_is_used(redis_url, ns):
    tier = open_remote(redis_url, timeout=T_OK, namespace=ns)
    k = key("published first")
    tier.write(k, b"already there")
    with tier.single_flight(k, LIMIT) as flight:
        assert (flight.held, flight.blob.data) == (False, b"already there")
    assert not redis.Redis.from_url(redis_url).exists(tier.lease_key(k))


def test_leases_held_past_the_wait_three_times_stop_the_waiting(redis_url, raw, ns):
    """Leases that never expire (SET without PX, by any writer of the server: a secret keeps
    out its values, not its leases) cost each kernel the whole wait, in every process; after
    3 such waits in a row the process waits no more, with one warning, and a lease taken
    again starts the count afresh."""
    tier = open_remote(redis_url, timeout=T_OK, namespace=ns)
    keys = [key("planted lease", i) for i in range(6)]
    for k in keys:
        raw.set(tier.lease_key(k), b"planted, no expiry")
    waits = []
    with pytest.warns(Warning, match="3 leases in a row were still held after KCACHE_REMOTE_WAIT"):
        for k in keys:
            with tier.single_flight(k, LIMIT, max_wait=0.3) as flight:
                assert (flight.held, flight.blob, flight.error) == (False, None, None)
                waits.append(flight.waited)
    assert all(w >= 0.3 for w in waits[:3]) and waits[3:] == [0.0] * 3, waits
    free = key("free lease")
    with tier.single_flight(free, LIMIT, max_wait=0.3) as flight:
        assert flight.held  # a free lease is still taken: the remote is not off
    with tier.single_flight(keys[0], LIMIT, max_wait=0.3) as flight:
        assert flight.waited >= 0.3  # and waiting works again after it

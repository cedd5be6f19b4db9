"""The store with a remote tier, end to end: real servers (redis-server, moto's S3 server, a
``file://`` folder, tests/servers.py) and real processes (tests/remote_child.py, configured by
``KCACHE_REMOTE*`` as users configure it). Two cache roots act as two machines.

Covers issue 10's "Tests, with real servers": an entry shared through each backend and
backfilled; tampered, unsigned and wrongly signed values refused and never served; a read-only
remote never written; the server killed mid-run and restarted; a server that never answers;
8 processes over 2 roots compiling one kernel once (the Redis lease); a missing client library.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kcache import Entry, Store, make_key
from kcache.tiers.remote import signing
from kcache.entry import format as fmt
from kcache.disk.layout import Layout
from kcache.tiers.remote import open_remote
from kcache.warn import KcacheWarning
from servers import (DrippingServer, SilentServer, aws_env, make_redis, redis_url,  # noqa: F401
                     refusing_port, s3_bucket, s3_endpoint, unique_namespace, wait_until)

pytestmark = pytest.mark.slow  # real processes through each backend

CHILD = Path(__file__).resolve().parent / "remote_child.py"
LIMIT = fmt.MAX_FILE + signing.OVERHEAD  # bytes: any value
T_OK = 10.0  # seconds: the remote timeout of tests that are not about timeouts (a loaded machine)
SECRET = "fleet-secret-0123456789abcdef"
OTHER_SECRET = "attacker-secret-0123456789abc"
START = 180.0  # seconds a group of processes may take to start on a loaded machine


@dataclasses.dataclass
class Backend:
    """A remote for one test: ``url``, a fresh namespace, and a tier on it for the test's own
    reads and writes (the raw values on the server)."""

    kind: str
    url: str
    ns: str

    def tier(self, **kw):
        return open_remote(self.url, namespace=self.ns, timeout=T_OK, **kw)

    def env(self, **extra) -> dict:
        return {"KCACHE_REMOTE": self.url, "KCACHE_REMOTE_NAMESPACE": self.ns,
                "KCACHE_REMOTE_TIMEOUT": str(T_OK), **extra}


@pytest.fixture(params=["redis", "s3", "file"])
def backend(request, tmp_path) -> Backend:
    if request.param == "redis":
        pytest.importorskip("redis")
        return Backend("redis", request.getfixturevalue("redis_url"), unique_namespace())
    if request.param == "s3":
        pytest.importorskip("s3fs")
        return Backend("s3", f"s3://{request.getfixturevalue('s3_bucket')}/shared", unique_namespace())
    pytest.importorskip("fsspec")
    return Backend("file", (tmp_path / "remote").as_uri(), unique_namespace())


@pytest.fixture
def redis_backend(redis_url) -> Backend:
    pytest.importorskip("redis")
    return Backend("redis", redis_url, unique_namespace())


def key(*parts) -> str:
    return make_key({"remote-store": list(parts)})


def child_env(env: dict) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    return {**base, **env}


def spawn(tmp_path: Path, spec: dict, env: dict) -> subprocess.Popen:
    """Start tests/remote_child.py with ``spec`` (see there) and ``env`` added."""
    spec = {"record": str(tmp_path / "compiles.log"), **spec}
    path = tmp_path / f"spec-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(spec))
    return subprocess.Popen([sys.executable, str(CHILD), str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env(env))


def finish(proc: subprocess.Popen, timeout: float = 300) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0 and "Traceback" not in err, err
    return json.loads(out)


def machine(tmp_path: Path, root: Path, ops, env: dict, **spec) -> dict:
    """Run one child to its end; its JSON report."""
    return finish(spawn(tmp_path, {"root": str(root), "ops": ops, **spec}, env))


def compiles(tmp_path: Path) -> list[list[str]]:
    """Every create() call of every process so far: [machine, pid, key]."""
    path = tmp_path / "compiles.log"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def remote_warnings(report: dict) -> list[str]:
    return [w for w in report["warnings"] if "remote" in w]


# -- sharing -----------------------------------------------------------------------------------

@pytest.mark.parametrize("secret", [None, SECRET], ids=["unsigned", "signed"])
def test_two_roots_share_an_entry_and_the_second_backfills(tmp_path, backend, secret):
    k = key("share", backend.kind)
    env = backend.env(**({"KCACHE_REMOTE_SECRET": secret} if secret else {}))
    a = machine(tmp_path, tmp_path / "a", [["get_or_create", k]], env, machine="A")
    assert a["results"][0]["hit"] is False and a["created"] == [k]
    assert a["stats"]["remote_puts"] == 1 and a["stats"]["remote_misses"] == 1
    assert a["stats"]["remote_wait_seconds"] == 0  # a free lease is no wait
    local = Layout(tmp_path / "a").entry(k).read_bytes()
    published = backend.tier().read(k, LIMIT).data
    # the value is the entry bytes exactly (signed with a secret): no other format
    assert published == (signing.wrap(secret.encode(), local) if secret else local)

    b = machine(tmp_path, tmp_path / "b", [["get_or_create", k], ["get", k]], env, machine="B")
    first, again = b["results"]
    assert first["hit"] is True and first["cubin"] == f"compiled by A for {k}"
    assert b["created"] == [] and len(compiles(tmp_path)) == 1  # no create() on B
    assert b["stats"]["remote_hits"] == 1 and b["stats"]["hits"] == 2
    assert again["hit"] is True and b["stats"]["remote_misses"] == 0
    assert b["stats"]["remote_bad"] == 0 and remote_warnings(b) == []
    # backfilled: B's root holds the same entry, served without any remote
    assert Layout(tmp_path / "b").entry(k).read_bytes() == local
    assert Store(tmp_path / "b").get(k).artifacts["cubin"].startswith(b"compiled by A")


def flip_a_byte(backend: Backend, k: str) -> bytes:
    """Change one byte of the cubin inside ``k``'s value on the server (same length)."""
    tier = backend.tier()
    data = bytearray(tier.read(k, LIMIT).data)
    at = data.index(b"compiled by A") + 3
    data[at] ^= 0x01
    tier.write(k, bytes(data))
    return bytes(data)


def test_a_tampered_value_is_refused_and_never_served(tmp_path, backend):
    k = key("tamper", backend.kind)
    env = backend.env()
    machine(tmp_path, tmp_path / "a", [["get_or_create", k]], env, machine="A")
    flip_a_byte(backend, k)
    b = machine(tmp_path, tmp_path / "b", [["get_or_create", k], ["get", k]], env, machine="B")
    first, again = b["results"]
    assert first["hit"] is False and first["cubin"] == f"compiled by B for {k}"  # B compiled
    assert again["hit"] is True and again["cubin"] == f"compiled by B for {k}"
    assert b["created"] == [k] and b["stats"]["remote_bad"] >= 1 and b["stats"]["remote_hits"] == 0
    refused = [w for w in b["warnings"] if "was refused" in w]
    assert len(refused) == 1 and "checksum" in refused[0], b["warnings"]
    assert b"compiled by B" in Layout(tmp_path / "b").entry(k).read_bytes()  # never backfilled
    assert b"compiled by B" in backend.tier().read(k, LIMIT).data  # B's good value replaced it


def test_a_server_that_sends_only_refused_values_is_switched_off(tmp_path, backend):
    """Each read of a tampered value is an answer (the connection is fine), so the errors in a
    row never grew: a server sending only bad values cost every lookup. Three refused in a row
    switch the tier off; the fourth lookup sends nothing."""
    ks = [key("refused", i, backend.kind) for i in range(4)]
    env = backend.env()
    machine(tmp_path, tmp_path / "a", [["get_or_create", k] for k in ks], env, machine="A")
    for k in ks:
        flip_a_byte(backend, k)
    b = machine(tmp_path, tmp_path / "b", [["get", k] for k in ks], env, machine="B")
    assert [r["hit"] for r in b["results"]] == [False] * 4
    assert b["stats"]["remote_bad"] == 3 and b["stats"]["remote_errors_unavailable"] == 1
    assert any("switched off for this process after 3 values in a row were refused" in w
               for w in b["warnings"]), b["warnings"]


def test_with_a_secret_unsigned_and_wrongly_signed_values_are_refused(tmp_path, backend):
    signed, unsigned = key("signed", backend.kind), key("unsigned", backend.kind)
    machine(tmp_path, tmp_path / "a", [["get_or_create", signed]],
            backend.env(KCACHE_REMOTE_SECRET=SECRET), machine="A")
    machine(tmp_path, tmp_path / "a2", [["get_or_create", unsigned]], backend.env(), machine="A")
    assert signing.is_signed(backend.tier().read(signed, LIMIT).data)
    assert not signing.is_signed(backend.tier().read(unsigned, LIMIT).data)

    # read-only, so that the values on the server stay as they are for the next reader
    holder = machine(tmp_path, tmp_path / "b", [["get_or_create", signed], ["get_or_create", unsigned]],
                     backend.env(KCACHE_REMOTE_SECRET=SECRET, KCACHE_REMOTE_READONLY="1"), machine="B")
    ok, bare = holder["results"]
    assert ok["hit"] is True and ok["cubin"] == f"compiled by A for {signed}"  # the control
    assert bare["hit"] is False and bare["cubin"] == f"compiled by B for {unsigned}"
    assert holder["stats"]["remote_bad"] >= 1 and holder["stats"]["remote_hits"] == 1
    assert any("unsigned value refused" in w for w in holder["warnings"]), holder["warnings"]

    other = machine(tmp_path, tmp_path / "c", [["get_or_create", signed]],
                    backend.env(KCACHE_REMOTE_SECRET=OTHER_SECRET, KCACHE_REMOTE_READONLY="1"),
                    machine="C")
    assert other["results"][0]["hit"] is False
    assert other["results"][0]["cubin"] == f"compiled by C for {signed}"
    assert other["stats"]["remote_bad"] >= 1
    assert any("bad signature" in w for w in other["warnings"]), other["warnings"]
    for root, k in (("b", unsigned), ("c", signed)):  # a refused value never reaches the root
        assert b"compiled by A" not in Layout(tmp_path / root).entry(k).read_bytes()
    assert [c[0] for c in compiles(tmp_path)] == ["A", "A", "B", "C"]


def test_a_machine_with_another_secret_never_overwrites_the_teams_values(tmp_path, backend):
    """A machine whose secret differs from its team's (or which has one where the team has
    none) refuses every value, compiles, and published over the team's values, so the team
    lost them. A value refused for its signature alone is now left as it is (the compile stays
    local), with one warning naming the secret to check; a damaged value is still replaced."""
    signed, unsigned, damaged = (key(w, backend.kind) for w in ("team", "bare", "damaged"))
    team = backend.env(KCACHE_REMOTE_SECRET=SECRET)
    machine(tmp_path, tmp_path / "a", [["get_or_create", signed], ["get_or_create", damaged]],
            team, machine="A")
    machine(tmp_path, tmp_path / "a2", [["get_or_create", unsigned]], backend.env(), machine="A")
    before = {k: backend.tier().read(k, LIMIT).data for k in (signed, unsigned)}
    other = machine(tmp_path, tmp_path / "c", [["get_or_create", signed]],
                    backend.env(KCACHE_REMOTE_SECRET=OTHER_SECRET), machine="C")
    assert other["results"][0]["cubin"] == f"compiled by C for {signed}"  # compiled, kept local
    [said] = remote_warnings(other)
    assert "holds values signed with another secret" in said and "KCACHE_REMOTE_SECRET" in said
    assert other["stats"]["remote_puts"] == 0
    mine = machine(tmp_path, tmp_path / "b", [["get_or_create", unsigned]], team, machine="B")
    assert mine["results"][0]["cubin"] == f"compiled by B for {unsigned}"
    [said] = remote_warnings(mine)
    assert "holds unsigned values" in said and "KCACHE_REMOTE_SECRET" in said
    assert {k: backend.tier().read(k, LIMIT).data for k in (signed, unsigned)} == before
    # the team still shares its value; a damaged one is replaced by a good one, as before
    flip_a_byte(backend, damaged)
    d = machine(tmp_path, tmp_path / "d", [["get_or_create", signed], ["get_or_create", damaged]],
                team, machine="D")
    assert [r["cubin"] for r in d["results"]] == [f"compiled by A for {signed}",
                                                  f"compiled by D for {damaged}"]
    assert d["stats"]["remote_puts"] == 1
    value = backend.tier().read(damaged, LIMIT).data
    assert b"compiled by D" in value and signing.unwrap(SECRET.encode(), value)


def test_a_read_only_remote_is_read_and_never_written(tmp_path, backend):
    shared, mine = key("ro shared", backend.kind), [key("ro own", backend.kind, i) for i in range(3)]
    machine(tmp_path, tmp_path / "a", [["get_or_create", shared]], backend.env(), machine="A")
    before = set(backend.tier().keys())
    ro = machine(tmp_path, tmp_path / "b", [["get_or_create", shared]]
                 + [["get_or_create", k] for k in mine] + [["put", key("ro put", backend.kind)]],
                 backend.env(KCACHE_REMOTE_READONLY="1"), machine="B")
    assert ro["results"][0]["hit"] is True  # read
    assert [r["hit"] for r in ro["results"][1:]] == [False, False, False, True]  # compiled, put locally
    assert ro["stats"]["remote_puts"] == 0 and ro["stats"]["remote_put_errors"] == 0
    assert set(backend.tier().keys()) == before == {shared}  # nothing published
    if backend.kind == "redis":  # not even a lease
        import redis
        client = redis.Redis.from_url(backend.url)
        assert [n for n in client.scan_iter(match=f"{backend.ns}:*")] == [
            f"{backend.ns}:v{fmt.FORMAT_VERSION}:{shared}".encode()]
        client.close()
    assert remote_warnings(ro) == []


# -- failures: the program goes on ------------------------------------------------------------

def test_server_killed_mid_run_then_a_new_process_uses_it_again(tmp_path, make_redis):
    pytest.importorskip("redis")
    server = make_redis()
    timeout = 2.0
    env = {"KCACHE_REMOTE": server.url, "KCACHE_REMOTE_NAMESPACE": unique_namespace(),
           "KCACHE_REMOTE_TIMEOUT": str(timeout)}
    keys = [key("killed", i) for i in range(16)]
    signals = tmp_path / "signals"
    signals.mkdir()
    proc = spawn(tmp_path, {"root": str(tmp_path / "a"), "ops": [["get_or_create", k] for k in keys],
                            "pause_at": 5, "signals": str(signals)}, env)
    wait_until(lambda: (signals / "paused").exists() or proc.poll() is not None, START, "the loop's pause")
    server.stop()  # terminate: SIGTERM, as a server shut down under a running job
    (signals / "resume").touch()
    out = finish(proc)
    results, stats = out["results"], out["stats"]
    assert [r["hit"] for r in results] == [False] * 16 and len(out["created"]) == 16  # all worked
    assert stats["remote_puts"] == 5 and stats["remote_put_errors"] >= 1
    # each call bounded: at most a read, a lease and a publish, each refused at once or timed out
    assert max(r["seconds"] for r in results[5:]) < 3 * timeout + 2.0, results
    errors = {k[len("remote_errors_"):]: v for k, v in stats.items() if k.startswith("remote_errors_") and v}
    assert errors.get("refused", 0) >= 1 and errors.get("unavailable", 0) >= 1, stats
    assert set(errors) <= {"refused", "timeout", "unavailable"}, errors
    assert stats["remote_misses"] == 5  # errors are not counted as misses
    off = [w for w in out["warnings"] if "switched off" in w]
    assert len(off) == 1 and "3 consecutive errors" in off[0], out["warnings"]
    assert len(remote_warnings(out)) <= 2, out["warnings"]  # the first error, the switch-off

    server.start()  # same port, empty (no persistence)
    new = machine(tmp_path, tmp_path / "b", [["get_or_create", keys[0]], ["get_or_create", key("after")]], env,
                  machine="B")
    assert new["stats"]["remote_puts"] == 2 and new["stats"]["remote_misses"] == 2
    assert not any(v for k, v in new["stats"].items() if k.startswith("remote_errors_"))
    assert remote_warnings(new) == []
    again = machine(tmp_path, tmp_path / "c", [["get_or_create", key("after")]], env, machine="C")
    assert again["results"][0]["hit"] is True and again["stats"]["remote_hits"] == 1


@pytest.mark.parametrize("server", ["redis", "s3"])  # not "kind": the hostile corpus's parameter
def test_a_server_that_never_answers_bounds_every_call(tmp_path, server, request):
    timeout, n = 0.5, 10
    with SilentServer() as silent:
        if server == "redis":
            pytest.importorskip("redis")
            env = {"KCACHE_REMOTE": f"redis://127.0.0.1:{silent.port}/0"}
            per_call = timeout  # connect + one read, each bounded
        else:
            pytest.importorskip("s3fs")
            request.getfixturevalue("aws_env")
            env = {"KCACHE_REMOTE": "s3://never-answers/x",
                   "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{silent.port}"}
            per_call = 2 * timeout  # the whole-call deadline of an asynchronous backend
        env.update(KCACHE_REMOTE_TIMEOUT=str(timeout), KCACHE_REMOTE_NAMESPACE=unique_namespace())
        ops = [["get" if i % 2 == 0 else "put", key("silent", server, i // 2)] for i in range(n - 2)]
        ops += [["get_or_create", key("silent", server, "goc", i)] for i in range(2)]
        out = machine(tmp_path, tmp_path / "a", ops, env)
    results, stats = out["results"], out["stats"]
    total = sum(r["seconds"] for r in results)
    # n calls cost less than n timeouts: three timed-out calls switch the tier off
    slack = 3.0 + (2.0 if server == "s3" else 0.0)  # a loaded machine; S3: botocore's client build
    assert total < n * timeout + slack, results
    assert max(r["seconds"] for r in results) < 3 * per_call + slack, results
    assert stats["remote_errors_timeout"] >= 1, stats
    assert stats["remote_errors_timeout"] <= 3 and stats["remote_errors_unavailable"] >= 1, stats
    assert [r["hit"] for r in results if r["op"] == "put"] == [True] * 4  # stored locally
    assert len([w for w in out["warnings"] if "switched off" in w]) == 1, out["warnings"]


@pytest.mark.parametrize("server", ["redis-dripping", "ftp-refusing", "ftp-silent", "ftp-dripping"])
def test_a_slow_or_refusing_server_is_a_miss_within_the_deadline(tmp_path, server):
    """At the default timeout (1 s), a server answering one byte every 0.5 s (each read in
    time, the answer never complete), one that never answers, and a refused port (an fsspec
    backend that connects when opened: ftp://) each cost a call at most its deadline (2 s),
    never raise out of the store, and are counted and warned once; the tier is switched off
    after 3 such calls (Redis), or after the first when it could not even be opened (ftp)."""
    scheme, kind = server.split("-")
    pytest.importorskip("redis" if scheme == "redis" else "fsspec")
    with contextlib.ExitStack() as stack:
        if kind == "refusing":
            port = stack.enter_context(refusing_port())
        else:
            srv = DrippingServer(greet=scheme == "ftp") if kind == "dripping" else SilentServer()
            port = stack.enter_context(srv).port
        url = f"redis://127.0.0.1:{port}/0" if scheme == "redis" else f"ftp://127.0.0.1:{port}/cache"
        env = {"KCACHE_REMOTE": url, "KCACHE_REMOTE_NAMESPACE": unique_namespace()}
        ops = [["get", key("slow", server, 0)], ["put", key("slow", server, 1)],
               ["get_or_create", key("slow", server, 2)], ["get", key("slow", server, 1)]]
        out = machine(tmp_path, tmp_path / "a", ops, env)
    results, stats = out["results"], out["stats"]
    assert max(r["seconds"] for r in results) < 5, results  # each lookup, each kernel call
    assert [r["hit"] for r in results] == [False, True, False, True], results  # misses; local puts
    errors = {n: v for n, v in stats.items() if n.startswith("remote_errors_") and v}
    first = {"dripping": "timeout", "silent": "timeout", "refusing": "refused"}[kind]
    calls = 3 if scheme == "redis" else 1  # then switched off
    assert sum(r["seconds"] for r in results) < 2 * calls + 2, results
    assert errors.get(f"remote_errors_{first}") == calls and errors.get("remote_errors_unavailable", 0) >= 1, stats
    assert stats["remote_puts"] == 0 and stats["remote_put_errors"] >= 1, stats
    said = remote_warnings(out)
    assert len([w for w in said if "remote tier error" in w]) == 1, out["warnings"]
    assert len([w for w in out["warnings"] if "switched off" in w]) == 1, "\n".join(out["warnings"])
    if kind == "dripping":
        assert any("deadline of 2 s" in w for w in said), out["warnings"]


def test_eight_processes_over_two_roots_compile_once(tmp_path, redis_backend):
    k = key("fleet")
    signals = tmp_path / "signals"
    signals.mkdir()
    procs = [spawn(tmp_path, {"root": str(tmp_path / ("a" if i % 2 else "b")), "ops": [["get_or_create", k]],
                              "machine": f"p{i}", "work": 0.5, "start": str(signals)}, redis_backend.env())
             for i in range(8)]
    wait_until(lambda: len(list(signals.glob("ready.*"))) == 8 or any(p.poll() is not None for p in procs),
               START, "8 processes ready")
    (signals / "go").touch()
    reports = [finish(p) for p in procs]
    assert len(compiles(tmp_path)) == 1, compiles(tmp_path)  # one compile in all
    served = {r["results"][0]["cubin"] for r in reports}
    assert len(served) == 1 and served.pop().startswith("compiled by p")
    assert sorted(r["results"][0]["hit"] for r in reports) == [False] + [True] * 7
    both = [Layout(tmp_path / root).entry(k).read_bytes() for root in ("a", "b")]
    assert both[0] == both[1]  # the other root was backfilled from the remote
    # the counters of each root (shared by its processes), read after all of them ended
    counted = [Store(tmp_path / root).stats() for root in ("a", "b")]
    assert sum(s.remote_puts for s in counted) == 1
    assert sum(s.remote_hits for s in counted) >= 1  # the other root's first process(es)
    assert sum(s.hits for s in counted) == 7 and sum(s.misses for s in counted) == 1


@pytest.mark.parametrize("library,url,extra", [
    ("redis", "redis://127.0.0.1:9/0", "kcache-cuda[redis]"),
    ("s3fs", "s3://some-bucket/prefix", "kcache-cuda[s3]")])
def test_missing_client_library_warns_once_and_kernels_still_work(tmp_path, library, url, extra):
    k = key("missing", library)
    env = {"KCACHE_REMOTE": url}
    out = machine(tmp_path, tmp_path / "a", [["get_or_create", k], ["get_or_create", k], ["put", key("p")]],
                  env, block=[library])
    assert [r["hit"] for r in out["results"]] == [False, True, True]
    assert out["created"] == [k, key("p")]
    said = remote_warnings(out)
    assert len(said) == 1 and f"pip install '{extra}'" in said[0], out["warnings"]
    assert not any(v for n, v in out["stats"].items() if n.startswith("remote_") and n != "remote_wait_seconds")


def test_an_entry_larger_than_reads_accept_is_neither_stored_nor_published(tmp_path, monkeypatch):
    """With KCACHE_MAX_ENTRY_SIZE=1 every read refuses every entry: a put must not say True
    for an entry that can never be read, nor publish it for other machines to refuse."""
    pytest.importorskip("fsspec")
    remote = tmp_path / "remote"
    monkeypatch.setenv("KCACHE_REMOTE", remote.as_uri())
    monkeypatch.setenv("KCACHE_REMOTE_NAMESPACE", unique_namespace())
    k, ent = key("too large"), Entry({"cubin": b"\x7fELF" * 100}, {"kernel": "m:k", "arch": "sm_90"})
    size = len(fmt.encode(k, ent))
    monkeypatch.setenv("KCACHE_MAX_ENTRY_SIZE", "1")
    with pytest.warns(KcacheWarning) as caught:
        store = Store(tmp_path / "a")
        assert store.put(k, ent) is False and store.put(k, ent) is False
        assert store.get(k) is None
    said = [str(w.message) for w in caught if "not stored" in str(w.message)]
    assert len(said) == 1 and f"{size} bytes, more than the max entry size that reads accept (1 bytes" in said[0]
    stats = store.stats()
    assert (stats.puts, stats.write_errors_other, stats.remote_puts) == (0, 2, 0), stats
    assert not list(remote.rglob("*.kce")) and not list((tmp_path / "a").rglob("*.kce"))
    # at the bound, the same entry is stored, published and read back
    monkeypatch.setenv("KCACHE_MAX_ENTRY_SIZE", str(size))
    store = Store(tmp_path / "b")
    assert store.put(k, ent) is True and store.get(k) == ent
    assert store.stats().remote_puts == 1 and len(list(remote.rglob("*.kce"))) == 1


def test_keys_of_another_secret_are_remembered_safely_from_many_threads(tmp_path, monkeypatch):
    """A process's threads that meet values of another secret at once each remember the key
    (never published over); past MAX_FOREIGN the oldest is dropped. Dropping it took the
    first key of a dict another thread was changing: RuntimeError ('dictionary changed size
    during iteration') in a user's lookup."""
    import sys
    import threading

    import kcache.store.remote as policy_module
    from kcache import Store
    from kcache.tiers.remote.signing import SignatureError

    monkeypatch.setattr(policy_module, "MAX_FOREIGN", 4)
    policy = Store(tmp_path / "root")._remote_policy
    policy._remote = type("Tier", (), {"name": "memory://team"})()
    errors = []

    def meet(thread: int) -> None:
        try:
            for i in range(5000):
                policy._keep_off(f"{thread}-{i}", SignatureError("another secret"))
        except Exception as exc:  # what the user's lookup would have raised
            errors.append(repr(exc))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        threads = [threading.Thread(target=meet, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert len(policy._foreign_keys) <= 4 + len(threads)

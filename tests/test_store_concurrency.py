"""Concurrency and crash safety, with real processes (fork)."""
import hashlib
import multiprocessing as mp
import os
import random
import select
import signal
import time

import pytest

from kcache import Entry, LockTimeout, Store, make_key
from kcache.disk.layout import Layout

pytestmark = pytest.mark.slow  # real processes racing, SIGKILLed mid-write

CTX = mp.get_context("fork")


def key(*parts) -> str:
    return make_key({"k": list(parts)})


def checked_entry(k: str, rng: random.Random, size: int) -> Entry:
    """An entry that proves its own integrity: payload + its digest + the key it belongs to."""
    payload = rng.randbytes(size)
    return Entry({"cubin": payload, "sum": hashlib.blake2b(payload).digest()}, {"key": k, "n": size})


def intact(k: str, e: Entry) -> bool:
    return (e.meta.get("key") == k and hashlib.blake2b(e.artifacts["cubin"]).digest() == e.artifacts["sum"]
            and len(e.artifacts["cubin"]) == e.meta["n"])


# -- 8 processes x 2,000 mixed operations ------------------------------------------------------

SHARED = [key("shared", i) for i in range(3)]  # few keys: writers of one key collide often
OWN = 30


def _mixed_worker(root: str, w: int, ops: int, barrier, results) -> None:
    rng = random.Random(w)
    s = Store(root, max_size=1 << 40)
    own = [key("own", w, i) for i in range(OWN)]
    present: set[str] = set()
    t = dict(puts=0, hits=0, misses=0, evictions=0, torn=0, lost=0, ghost=0)
    barrier.wait()
    for _ in range(ops):
        r = rng.random()
        if r < 0.35:
            k = rng.choice(SHARED)
            e = s.get(k)
            t["hits" if e else "misses"] += 1
            t["torn"] += e is not None and not intact(k, e)
        elif r < 0.47:
            k = rng.choice(SHARED)
            t["puts"] += s.put(k, checked_entry(k, rng, rng.randint(100, 4000)))
        elif r < 0.50:
            s.remove(rng.choice(SHARED))
        elif r < 0.72:
            k = rng.choice(own)
            e = s.get(k)
            t["hits" if e else "misses"] += 1
            t["torn"] += e is not None and not intact(k, e)
            t["lost"] += e is None and k in present
            t["ghost"] += e is not None and k not in present
        elif r < 0.88:
            k = rng.choice(own)
            if s.put(k, checked_entry(k, rng, rng.randint(100, 4000))):
                t["puts"] += 1
                present.add(k)
        elif r < 0.995:
            k = rng.choice(own)
            removed = s.remove(k)
            t["lost"] += removed != (k in present)
            present.discard(k)
        else:
            doomed = set(rng.sample(own, 5))
            rep = s.prune(max_size=1 << 40, where=lambda info: info.key in doomed)
            t["evictions"] += len(rep.removed)
            got = {i.key for i in rep.removed}
            t["lost"] += got != (doomed & present)
            present -= got
    s.flush()
    results.put((w, t, sorted(present)))


def test_eight_processes_mixed_operations_exact_counters(root):
    n, ops = 8, 2000
    barrier, results = CTX.Barrier(n), CTX.Queue()
    procs = [CTX.Process(target=_mixed_worker, args=(str(root), w, ops, barrier, results)) for w in range(n)]
    for p in procs:
        p.start()
    out = [results.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    total = {name: sum(t[name] for _w, t, _p in out) for name in out[0][1]}
    assert total["torn"] == total["lost"] == total["ghost"] == 0, total

    s = Store(root)
    st = s.stats()
    assert (st.puts, st.hits, st.misses, st.evictions, st.corrupt) == (
        total["puts"], total["hits"], total["misses"], total["evictions"], 0)
    assert total["hits"] + total["misses"] > n * ops * 0.5
    files = list(Layout(root).entries.rglob("*.kce"))
    assert (st.entries, st.bytes) == (len(files), sum(f.stat().st_size for f in files))
    on_disk = {e.key for e in s.entries()}
    for w, _t, present in out:
        own = {key("own", w, i) for i in range(OWN)}
        assert on_disk & own == set(present)  # no lost entry, no resurrected one
    assert s.verify().corrupt == [] and list(Store(root).local.temp_files()) == []
    assert s.recount().entries == st.entries


# -- SIGKILL at random points ----------------------------------------------------------------

KILL_KEYS = [key("kill", i) for i in range(6)]


def _looping_writer(root: str, seed: int, wfd: int) -> None:
    rng = random.Random(seed)
    s = Store(root)
    os.write(wfd, b"s")
    i = 0
    while True:
        k = KILL_KEYS[i % len(KILL_KEYS)]
        s.put(k, checked_entry(k, rng, rng.randint(256 << 10, 2 << 20)))
        s.get(KILL_KEYS[rng.randrange(len(KILL_KEYS))])
        os.write(wfd, b".")
        i += 1


def _spin(seconds: float) -> None:
    # a random kill point, not a synchronisation: the child's progress is read from the pipe
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _byte_from(fd: int, limit: float = 60.0) -> bytes:
    """One byte from a child's pipe; a child that says nothing for ``limit`` seconds (stuck)
    fails the test instead of hanging the suite."""
    ready, _, _ = select.select([fd], [], [], limit)
    assert ready, f"the child said nothing for {limit:g} s"
    return os.read(fd, 1)


def test_sigkill_writer_never_serves_a_broken_entry(root):
    rng = random.Random(1234)
    s = Store(root)
    served = 0
    for i in range(110):
        rfd, wfd = os.pipe()
        p = CTX.Process(target=_looping_writer, args=(str(root), i, wfd))
        p.start()
        os.close(wfd)
        assert _byte_from(rfd) == b"s"
        for _ in range(rng.randrange(3)):  # let it finish 0-2 puts
            assert _byte_from(rfd) == b"."
        _spin(rng.uniform(0, 0.02))
        os.kill(p.pid, signal.SIGKILL)
        p.join(30)
        os.close(rfd)
        assert p.exitcode == -signal.SIGKILL
        for k in KILL_KEYS:
            e = s.get(k)
            if e is not None:
                assert intact(k, e)
                served += 1
    assert served > 0
    rep = s.verify()
    assert rep.corrupt == [] and s.stats().corrupt == 0
    # a lock held by a killed child was released by the kernel
    assert s.put(KILL_KEYS[0], checked_entry(KILL_KEYS[0], rng, 10))
    # leftovers of killed writers: swept by prune once older than an hour
    leftovers = [folder / name for folder, name, _st in Store(root).local.temp_files()]
    old = time.time() - 7200
    for p in leftovers:
        os.utime(p, (old, old))
    assert s.prune(max_size=1 << 40).temp_files == len(leftovers)
    assert list(Store(root).local.temp_files()) == []
    files = list(Layout(root).entries.rglob("*.kce"))
    st = s.recount()
    assert (st.entries, st.bytes) == (len(files), sum(f.stat().st_size for f in files))


# -- single flight -----------------------------------------------------------------------------

def _single_flight_worker(root: str, k: str, n: int, log: str, barrier, results) -> None:
    s = Store(root)

    def create() -> Entry:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        # hold the lock until every other process is waiting for it (or a deadline)
        deadline = time.monotonic() + 30
        while Store(root).stats().lock_waits < n - 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        return Entry({"cubin": b"compiled once"}, {"compile_seconds": 1.5})

    barrier.wait()
    e, hit = s.get_or_create(k, create)
    s.flush()
    results.put((hit, e.artifacts["cubin"]))


def test_single_flight_one_create_for_n_processes(root, tmp_path):
    n, k, log = 6, key("sf"), tmp_path / "creates.log"
    barrier, results = CTX.Barrier(n), CTX.Queue()
    procs = [CTX.Process(target=_single_flight_worker, args=(str(root), k, n, str(log), barrier, results))
             for _ in range(n)]
    for p in procs:
        p.start()
    out = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    assert len(log.read_text().splitlines()) == 1
    assert sorted(hit for hit, _ in out) == [False] + [True] * (n - 1)
    assert {art for _, art in out} == {b"compiled once"}
    st = Store(root).stats()
    assert (st.misses, st.hits, st.puts) == (1, n - 1, 1) and st.lock_waits >= n - 1
    assert st.seconds_saved == pytest.approx(1.5 * (n - 1))


# -- lock timeout --------------------------------------------------------------------------------

def _hold_lock(root: str, k: str, held, release) -> None:
    with Store(root).lock(k):
        held.set()
        release.wait(60)


def test_lock_timeout_names_the_lock_file_and_setting(root):
    k = key("busy")
    held, release = CTX.Event(), CTX.Event()
    p = CTX.Process(target=_hold_lock, args=(str(root), k, held, release))
    p.start()
    try:
        assert held.wait(30)
        s = Store(root, lock_timeout=0.2)
        with pytest.raises(LockTimeout) as info:
            with s.lock(k):
                pass
        msg = str(info.value)
        assert str(root / "v1" / "locks" / k[:2] / f"{k}.lock") in msg
        assert "raise KCACHE_LOCK_TIMEOUT (seconds, now 0.2)" in msg
        assert isinstance(info.value, TimeoutError)
        # a timeout the caller gave is the one to raise, not the setting
        with pytest.raises(LockTimeout, match=r"raise the timeout argument \(seconds, now 0\.3\)"):
            with s.lock(k, timeout=0.3):
                pass
        st = s.stats()
        assert (st.lock_waits, st.lock_timeouts) == (2, 2)
    finally:
        release.set()
        p.join(30)
    with Store(root).lock(k, timeout=5):
        pass


# -- counters of multiprocessing children --------------------------------------------------------

def _getter(root: str, k: str) -> None:
    s = Store(root)
    for _ in range(5):
        s.get(k)  # no flush(): the child leaves through os._exit


def test_multiprocessing_child_counters_are_not_lost(root):
    k = key("child")
    Store(root).put(k, Entry({"cubin": b"x"}, {}))
    p = CTX.Process(target=_getter, args=(str(root), k))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert Store(root).stats().hits == 5

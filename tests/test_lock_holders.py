"""Every lock holder renews its heartbeat, and nothing waits a lock timeout for a stopped one
(issue 32, items 5 and 9).

A stopped holder (SIGSTOP) of a key's lock is passed after KCACHE_LOCK_STALE by a put (it
publishes without the lock: the rename is atomic), by ``kcache import`` (the same) and by
``prune``/eviction (they leave that key); a stopped holder of ``evict.lock`` no longer holds
every eviction off. A live holder looks alive to every waiter whatever its own setting: with
KCACHE_LOCK_STALE=0 on the holder (which once meant no heartbeat at all), a waiter with a
short stale period still waits for it. Real processes (fork), real files, no sleeps."""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from kcache import Entry, Store, make_key
from kcache.warn import KcacheWarning

CTX = mp.get_context("fork")
STALE = 5.0  # seconds: the stale period of the promise (docs/security.md)
PROMISE = 20.0  # seconds: a put behind a stopped holder is done within this
START = 30.0  # seconds a child may take to start on a loaded machine


def entry(tag: bytes) -> Entry:
    return Entry({"cubin": b"\x7fELF" + tag}, {"kernel": "m:k", "arch": "sm_90"})


def _compiling_holder(root: str, k: str, started, release_fd: int, stale: str | None) -> None:
    """get_or_create whose create() blocks on a pipe: holds k's lock as a compile does."""
    if stale is not None:
        os.environ["KCACHE_LOCK_STALE"] = stale

    def create():
        started.set()
        os.read(release_fd, 1)
        return entry(b"holder")

    Store(root).get_or_create(k, create)


def _locking_holder(root: str, k: str, started, release_fd: int, stale: str | None) -> None:
    """Store.lock(k) held until the pipe says: a holder that is not a compile."""
    if stale is not None:
        os.environ["KCACHE_LOCK_STALE"] = stale
    with Store(root).lock(k):
        started.set()
        os.read(release_fd, 1)


def _evicting_holder(root: str, k: str, started, release_fd: int, stale: str | None) -> None:
    """Holds evict.lock as an eviction pass does (kcache.locks.try_global), its heartbeat on."""
    from kcache.disk.locks import try_global
    store = Store(root)
    store.put(k, entry(b"x"))  # the root and its lock folder exist
    lock = try_global(store.layout.evict_lock, 0o600, store._locks.ready_folder, store.local.dirs)
    with store._locks.beating(store.layout.evict_lock):
        started.set()
        os.read(release_fd, 1)
    lock.release()


class Holder:
    """A child process holding a lock through ``target``; ``stop()`` SIGSTOPs it; closed at
    the end: SIGCONT, released, joined."""

    def __init__(self, target, root, k: str, stale: str | None = None):
        self.started = CTX.Event()
        r, self.release_fd = os.pipe()
        self.proc = CTX.Process(target=target, args=(str(root), k, self.started, r, stale))
        self.proc.start()
        os.close(r)
        assert self.started.wait(START), "the holder never took the lock"

    def stop(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def release(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)
        os.write(self.release_fd, b"x")

    def close(self) -> None:
        if self.proc.is_alive():
            self.release()
        os.close(self.release_fd)
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


@pytest.fixture
def holders():
    made: list[Holder] = []

    def make(target, root, k, stale=None) -> Holder:
        made.append(Holder(target, root, k, stale))
        return made[-1]

    yield make
    for h in made:
        h.close()


@pytest.fixture
def stale_env(monkeypatch):
    monkeypatch.setenv("KCACHE_LOCK_STALE", f"{STALE:g}")
    monkeypatch.setenv("KCACHE_LOCK_TIMEOUT", "600")  # the default: the whole wait, before


def test_a_put_behind_a_stopped_compile_publishes_without_the_lock(root, holders, stale_env):
    k = make_key({"put behind": "stopped compile"})
    holder = holders(_compiling_holder, root, k)
    holder.stop()
    store = Store(root)
    start = time.monotonic()
    with pytest.warns(KcacheWarning, match="no heartbeat for 5 s.*publishing here without it"):
        assert store.put(k, entry(b"put")) is True
    took = time.monotonic() - start
    assert STALE - 0.5 <= took < PROMISE, took  # before: the whole lock timeout (600 s), then False
    assert store.get(k).artifacts["cubin"] == b"\x7fELFput"
    st = store.stats()
    assert (st.lock_stale, st.lock_timeouts, st.entries) == (1, 0, 1)
    holder.release()  # it resumes and publishes the same key again: one entry still
    holder.proc.join(START)
    assert holder.proc.exitcode == 0 and Store(root).stats().entries == 1


def test_kcache_import_behind_a_stopped_holder_goes_on(root, tmp_path, holders, stale_env):
    src = Store(tmp_path / "src")
    keys = [make_key({"import behind": i}) for i in range(3)]
    for i, k in enumerate(keys):
        src.put(k, entry(b"%d" % i))
    bundle = tmp_path / "b.kcb"
    env = {**os.environ, "KCACHE_DIR": str(tmp_path / "src")}
    subprocess.run([sys.executable, "-m", "kcache", "export", str(bundle)], env=env, check=True,
                   capture_output=True, timeout=120)
    holder = holders(_locking_holder, root, keys[1])
    holder.stop()
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "kcache", "import", str(bundle)],
                         env={**os.environ, "KCACHE_DIR": str(root)}, capture_output=True, text=True,
                         timeout=300)
    took = time.monotonic() - start
    assert out.returncode == 0, out.stderr
    assert took < PROMISE, took  # before: the lock timeout (600 s) for keys[1]
    assert "imported 3" in out.stdout + out.stderr, out
    assert "publishing here without it" in out.stderr
    store = Store(root)
    assert [store.get(k).artifacts["cubin"] for k in keys] == [b"\x7fELF0", b"\x7fELF1", b"\x7fELF2"]


def test_prune_behind_a_stopped_holder_leaves_that_entry(root, holders, stale_env):
    store = Store(root)
    keys = [make_key({"prune behind": i}) for i in range(4)]
    for k in keys:
        store.put(k, entry(k.encode()))
    holder = holders(_locking_holder, root, keys[2])
    holder.stop()
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "kcache", "prune", "--max-size", "0", "--json"],
                         env={**os.environ, "KCACHE_DIR": str(root)}, capture_output=True, text=True,
                         timeout=300)
    took = time.monotonic() - start
    assert took < PROMISE, (took, out.stderr)  # before: the lock timeout (600 s)
    assert "heartbeat" in out.stdout + out.stderr, out
    left = [k for k in keys if Store(root).get(k) is not None]
    assert left == [keys[2]]  # the held entry is left; the others are removed
    assert Store(root).stats().entries == 1


def test_eviction_passes_a_stopped_holder_of_evict_lock(root, holders, stale_env, monkeypatch):
    monkeypatch.setenv("KCACHE_MAX_SIZE", "2000")
    holder = holders(_evicting_holder, root, make_key({"evict": "holder"}))
    holder.stop()
    store = Store(root)
    deadline = time.monotonic() + PROMISE + 10
    i, over = 0, False
    with pytest.warns(KcacheWarning, match="evict.lock shows no heartbeat"):
        while True:  # puts cross the cap, and each finds evict.lock busy ...
            assert time.monotonic() < deadline, "eviction never passed the stopped holder"
            store.put(make_key({"evict": i}), entry(os.urandom(500)))
            i += 1
            if store.stats().bytes > store.max_size:
                over = True
            elif over:
                break  # ... until, STALE s after the first, one evicts without it
            time.sleep(0.05)  # a program's pace between compiles (polling, with a deadline)
    assert store.stats().bytes <= store.max_size


@pytest.mark.parametrize("target", [_compiling_holder, _locking_holder], ids=["compile", "lock"])
def test_a_live_holder_with_lock_stale_0_is_waited_for(root, holders, monkeypatch, target):
    """Item 9: the holder's KCACHE_LOCK_STALE=0 (its own waits never pass anyone) does not turn
    its heartbeat off: a waiter with a 1 s stale period waits through 3 s of it, then gets
    the holder's work (a hit), passing nobody."""
    monkeypatch.setenv("KCACHE_LOCK_STALE", "1")
    k = make_key({"live holder": target.__name__})
    holder = holders(target, root, k, stale="0")
    out = CTX.Queue()
    waiter = CTX.Process(target=_waiter, args=(str(root), k, out))
    waiter.start()
    try:
        deadline = time.monotonic() + START
        while Store(root).stats().lock_waits < 1:  # the waiter waits (written at once)
            assert time.monotonic() < deadline, "the waiter never waited"
        with pytest.raises(queue.Empty):
            out.get(timeout=3)  # three stale periods: still waiting for the live holder
        holder.release()
        got = out.get(timeout=START)
    finally:
        waiter.join(START)
        if waiter.is_alive():
            waiter.kill()
    if target is _compiling_holder:
        assert got == (b"\x7fELFholder", True, 0)  # the holder's compile, a hit
    else:
        assert got == (b"\x7fELFwaiter", False, 0)  # compiled after the lock was free
    assert Store(root).stats().lock_stale == 0


def _waiter(root: str, k: str, out) -> None:
    store = Store(root)
    ent, hit = store.get_or_create(k, lambda: entry(b"waiter"))
    out.put((ent.artifacts["cubin"], hit, store.stats().lock_stale))


def test_every_hold_beats_and_a_waiter_passes_only_a_stopped_one(root, holders, monkeypatch):
    """A put waiting on a live non-compile holder (Store.lock) waits; once the holder is
    stopped it publishes after the stale period."""
    monkeypatch.setenv("KCACHE_LOCK_STALE", "1")
    k = make_key({"put waits": 1})
    holder = holders(_locking_holder, root, k, stale="0")
    store = Store(root)
    lock_file = store.layout.lock(k)
    first = lock_file.stat().st_mtime_ns
    deadline = time.monotonic() + START
    while lock_file.stat().st_mtime_ns == first:  # the holder's heartbeat moves the mtime
        assert time.monotonic() < deadline, "no heartbeat from a live holder"
    holder.stop()
    start = time.monotonic()
    with pytest.warns(KcacheWarning, match="publishing here without it"):
        assert store.put(k, entry(b"put")) is True
    assert 0.9 <= time.monotonic() - start < PROMISE


def test_lock_stale_under_one_second_counts_as_one(root, monkeypatch):
    monkeypatch.setenv("KCACHE_LOCK_STALE", "0.1")
    from kcache.disk.locks import MIN_STALE
    assert Store(root)._locks.waiting_stale() == MIN_STALE == 1.0
    monkeypatch.setenv("KCACHE_LOCK_STALE", "0")
    assert Store(root)._locks.waiting_stale() == 0.0


def _stats_holder(root: str, k: str, started, release_fd: int, stale: str | None) -> None:
    """Holds the statistics shard lock of k's shard, as a writer of counters does for a few
    milliseconds (a process frozen there holds it for good)."""
    import filelock
    from kcache.store.stats import shard_of
    store = Store(root)
    store.put(make_key({"stats": "first"}), entry(b"first"))  # the stats folder exists
    with filelock.FileLock(str(store.layout.stats / f"{shard_of(k):x}.lock")):
        started.set()
        os.read(release_fd, 1)


def test_a_put_behind_a_stopped_counter_writer_is_not_held(root, holders, stale_env):
    """A holder stopped in the middle of writing counters holds that shard's lock: every put
    of a key of that shard waited for it for good. Now a count waits 2 s, stays in memory,
    and is written once the lock is free."""
    k = make_key({"stats": "stopped"})
    holder = holders(_stats_holder, root, k)
    holder.stop()
    store = Store(root)
    done = []

    def puts() -> None:
        done.append(store.put(k, entry(b"put")))
        done.append(store.put(make_key({"stats": "stopped", "again": 1}), entry(b"again")))

    with pytest.warns(KcacheWarning, match="stayed locked"):
        thread = threading.Thread(target=puts)
        thread.start()
        thread.join(PROMISE)  # before: waited for the stopped holder for good
        assert done == [True, True]
    assert store.stats().entries == 3  # this process's counts, kept in memory
    holder.release()
    deadline = time.monotonic() + START
    while Store(root).stats().entries != 3:  # the background writer tries again, and writes
        assert time.monotonic() < deadline, Store(root).stats()
        time.sleep(0.05)  # polling with a deadline

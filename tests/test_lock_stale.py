"""A compile's lock holder that is stopped (SIGSTOP) is passed after KCACHE_LOCK_STALE; a
running one, however slow, is waited for. Real processes (fork), real files, no sleeps."""
import multiprocessing as mp
import os
import queue
import signal
import time

import pytest

from kcache import Entry, KcacheError, Store, make_key
from kcache.warn import KcacheWarning

CTX = mp.get_context("fork")


def _holder(root: str, k: str, started, release_fd: int) -> None:
    """get_or_create whose create() blocks on a pipe: holds the key's lock meanwhile."""

    def create():
        started.set()
        os.read(release_fd, 1)
        return Entry({"a": b"holder"}, {"kernel": "m:k"})

    Store(root).get_or_create(k, create)


def _waiter(root: str, k: str, out) -> None:
    try:
        ent, hit = Store(root).get_or_create(k, lambda: Entry({"a": b"waiter"}, {"kernel": "m:k"}))
        out.put((ent.artifacts["a"], hit))
    except KcacheError as exc:
        out.put((repr(exc), None))


@pytest.fixture
def holder(root, monkeypatch):
    """A started holder process compiling key k: (process, k, release write end)."""
    monkeypatch.setenv("KCACHE_LOCK_STALE", "1")
    k = make_key({"stale": str(root)})
    started = CTX.Event()
    r, w = os.pipe()
    p = CTX.Process(target=_holder, args=(str(root), k, started, r))
    p.start()
    os.close(r)
    try:
        assert started.wait(30), "the holder never started compiling"
        yield p, k, w
    finally:
        if p.is_alive():
            os.kill(p.pid, signal.SIGCONT)
            os.write(w, b"x")  # a holder still blocked in create() returns
        os.close(w)
        p.join(30)
        if p.is_alive():
            p.kill()
            p.join()


def test_a_stopped_holder_is_passed_after_lock_stale(root, holder):
    p, k, release = holder
    os.kill(p.pid, signal.SIGSTOP)
    store = Store(root)
    start = time.monotonic()
    with pytest.warns(KcacheWarning, match="no heartbeat for 1 s"):
        ent, hit = store.get_or_create(k, lambda: Entry({"a": b"waiter"}, {"kernel": "m:k"}))
    waited = time.monotonic() - start
    assert (ent.artifacts["a"], hit) == (b"waiter", False)
    assert 0.9 <= waited < 10, waited
    assert store.get(k).artifacts["a"] == b"waiter"  # published, though the lock was never free
    st = store.stats()
    assert (st.lock_stale, st.lock_waits, st.lock_timeouts) == (1, 1, 0)
    os.kill(p.pid, signal.SIGCONT)  # the holder goes on and publishes too: same key, no harm
    os.write(release, b"x")
    p.join(30)
    assert p.exitcode == 0
    assert Store(root).stats().entries == 1


def test_a_running_holder_is_waited_for_past_lock_stale(root, holder):
    p, k, release = holder
    out = CTX.Queue()
    w = CTX.Process(target=_waiter, args=(str(root), k, out))
    w.start()
    try:
        deadline = time.monotonic() + 30
        while Store(root).stats().lock_waits < 1:  # the waiter is waiting (written at once)
            assert time.monotonic() < deadline, "the waiter never waited"
        # Three times KCACHE_LOCK_STALE: the heartbeat keeps the waiter waiting all along.
        with pytest.raises(queue.Empty):
            out.get(timeout=3)
        os.write(release, b"x")
        assert out.get(timeout=30) == (b"holder", True)
    finally:
        w.join(30)
        if w.is_alive():
            w.kill()
    p.join(30)
    st = Store(root).stats()
    assert (st.lock_stale, st.lock_timeouts, st.misses, st.hits) == (0, 0, 1, 1)


def test_lock_stale_zero_never_passes_a_holder(root, holder, monkeypatch):
    monkeypatch.setenv("KCACHE_LOCK_STALE", "0")
    monkeypatch.setenv("KCACHE_LOCK_TIMEOUT", "1.5")
    p, k, _release = holder
    os.kill(p.pid, signal.SIGSTOP)
    store = Store(root)
    with pytest.raises(KcacheError, match="KCACHE_LOCK_TIMEOUT"):
        store.get_or_create(k, lambda: Entry({"a": b"waiter"}, {}))
    assert (store.stats().lock_stale, store.stats().lock_timeouts) == (0, 1)


def test_lock_stale_is_a_setting(monkeypatch, root):
    from kcache.errors import ConfigError
    assert Store(root).settings.lock_stale == 30.0
    monkeypatch.setenv("KCACHE_LOCK_STALE", "2m")
    assert Store(root).settings.lock_stale == 120.0
    monkeypatch.setenv("KCACHE_LOCK_STALE", "soon")
    with pytest.raises(ConfigError, match="KCACHE_LOCK_STALE"):
        Store(root)

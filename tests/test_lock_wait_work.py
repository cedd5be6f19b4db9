"""Work done while waiting for another process's compile (``get_or_create(while_waiting=)``),
and the dispatcher's use of it: a waiting process readies numba-cuda's compiler once, so that
processes starting together do not each pay a first compile's set-up in turn. Real processes
(fork), real files, no sleeps: the holder compiles until the waiter's work releases it."""
import multiprocessing as mp
import os
import signal

import pytest

from kcache import Entry, Store, make_key

CTX = mp.get_context("fork")


def _holder(root: str, k: str, started, release_fd: int, publish: bool) -> None:
    """Holds ``k``'s compile lock until a byte arrives on ``release_fd``; publishes an entry
    then (``publish``) or leaves the key empty (a compile that failed)."""
    store = Store(root)
    with store._compile_lock(k):
        started.set()
        os.read(release_fd, 1)
        if publish:
            store.put(k, Entry({"a": b"holder"}, {"kernel": "m:k"}))


@pytest.fixture
def holder(root):
    """Start a holder of a key's lock: holder(k, publish=True) -> the release write end."""
    procs = []

    def start(k: str, publish: bool = True) -> int:
        started = CTX.Event()
        r, w = os.pipe()
        p = CTX.Process(target=_holder, args=(str(root), k, started, r, publish))
        p.start()
        os.close(r)
        procs.append((p, w))
        assert started.wait(30), "the holder never took the lock"
        return w

    yield start
    for p, w in procs:
        try:
            os.write(w, b"x")
        except OSError:
            pass
        os.close(w)
        p.join(30)
        if p.is_alive():
            os.kill(p.pid, signal.SIGKILL)
            p.join()


def test_the_work_runs_once_while_the_lock_is_held_then_the_holders_entry_is_served(root, holder):
    k = make_key({"wait-work": 1})
    release = holder(k)
    calls = []

    def work():
        # The holder still has the lock: nothing is published yet.
        calls.append(Store(root).get(k))
        os.write(release, b"x")  # the holder publishes and lets go

    ent, hit = Store(root).get_or_create(k, lambda: Entry({"a": b"waiter"}, {"kernel": "m:k"}),
                                         while_waiting=work)
    assert calls == [None]
    assert (ent.artifacts["a"], hit) == (b"holder", True)
    assert Store(root).stats().lock_waits == 1


def test_the_work_is_not_done_without_a_wait(root):
    store = Store(root)
    k = make_key({"wait-work": 2})
    calls = []
    make = lambda: Entry({"a": b"mine"}, {"kernel": "m:k"})  # noqa: E731
    assert store.get_or_create(k, make, while_waiting=lambda: calls.append(1))[1] is False
    assert store.get_or_create(k, make, while_waiting=lambda: calls.append(1))[1] is True
    assert calls == []


def test_what_the_work_raises_is_ignored(root, holder):
    k = make_key({"wait-work": 3})
    release = holder(k, publish=False)

    def work():
        os.write(release, b"x")
        raise RuntimeError("the work failed")

    ent, hit = Store(root).get_or_create(k, lambda: Entry({"a": b"waiter"}, {"kernel": "m:k"}),
                                         while_waiting=work)
    assert (ent.artifacts["a"], hit) == (b"waiter", False)  # the holder published nothing


# --- the dispatcher ---------------------------------------------------------------------------

def test_a_dispatcher_waiting_for_another_process_readies_its_compiler_once(root, holder,
                                                                            monkeypatch):
    pytest.importorskip("numba.cuda")
    from numba import cuda
    from numba.cuda import types

    from kcache.dispatcher import _compat, dispatcher as D
    from kcache.dispatcher import jit
    from test_dispatcher_fakegpu import fake_gpu

    store = Store(root)
    readied, release = [], []
    real = _compat.warm_compiler

    def warm(targetoptions):
        real(targetoptions)  # the real work: it must compile with the process's settings
        readied.append(dict(targetoptions))
        os.write(release[0], b"x")

    monkeypatch.setattr(_compat, "warm_compiler", warm)
    monkeypatch.setattr(D, "_compiler_readied", [False])
    monkeypatch.setitem(D._process_counts, "compiles", 0)

    def kernel(n):
        @jit(store=store, lto=False)
        def k(a):
            i = cuda.grid(1)
            if i < a.size:
                a[i] = n * a[i]
        return k

    sig = (types.float32[::1],)
    with fake_gpu((9, 0)):
        first = kernel(1)
        key, _ = first.kcache_key(sig, (9, 0), store=store)
        release.append(holder(key, publish=False))  # another process "compiles" it, then fails
        first.compile(sig)
        assert [o.get("lto") for o in readied] == [False]
        assert first.stats.compiles == 1  # compiled here once the lock was free
        second = kernel(2)
        key2, _ = second.kcache_key(sig, (9, 0), store=store)
        release[0] = holder(key2, publish=False)
        os.write(release[0], b"x")  # released at once: the wait is for the process to notice
        second.compile(sig)
    assert len(readied) == 1  # this process has compiled already: nothing to ready

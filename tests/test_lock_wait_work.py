"""Work done while waiting for another process's compile (``get_or_create(while_waiting=)``),
and the dispatcher's use of it: a waiting process readies numba-cuda's compiler once, so that
processes starting together do not each pay a first compile's set-up in turn. Real processes
(fork), real files, no sleeps: the holder compiles until the waiter's work releases it (a
waiter whose work is not done times out after WAIT seconds instead of hanging)."""
import multiprocessing as mp
import os
import signal

import pytest

from kcache import Entry, Store, make_key

CTX = mp.get_context("fork")
WAIT = 30  # seconds: the lock timeout of the waiters here (room for the work: >= 5 s)


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

    ent, hit = Store(root, lock_timeout=WAIT).get_or_create(
        k, lambda: Entry({"a": b"waiter"}, {"kernel": "m:k"}), while_waiting=work)
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

    ent, hit = Store(root, lock_timeout=WAIT).get_or_create(
        k, lambda: Entry({"a": b"waiter"}, {"kernel": "m:k"}), while_waiting=work)
    assert (ent.artifacts["a"], hit) == (b"waiter", False)  # the holder published nothing


def test_no_work_where_it_could_outlast_a_short_lock_timeout(root, holder):
    from kcache.errors import LockTimeout

    k = make_key({"wait-work": 4})
    holder(k)  # never released by the waiter: it times out
    calls = []
    store = Store(root, lock_timeout=0.3)
    with pytest.raises(LockTimeout, match=r"now 0\.3\)"):  # the setting, not what was left
        store.get_or_create(k, lambda: Entry({"a": b"waiter"}, {"kernel": "m:k"}),
                            while_waiting=lambda: calls.append(1))
    assert calls == []


# --- the dispatcher ---------------------------------------------------------------------------

def test_a_dispatcher_waiting_for_another_process_readies_its_compiler_once(root, holder,
                                                                            monkeypatch):
    pytest.importorskip("numba.cuda")
    from numba import cuda
    from numba.cuda import types

    from kcache.dispatcher import dispatcher as D
    from kcache.dispatcher import process
    from kcache.dispatcher.frontends.numba_cuda import compiling as _nc_compiling
    from kcache.dispatcher import jit
    from test_dispatcher_fakegpu import fake_gpu

    store = Store(root, lock_timeout=WAIT)
    readied, waits, release = [], [], []
    real_warm, real_ready = _nc_compiling.warm_compiler, D.KCacheDispatcher._kcache_ready_compiler

    def warm(targetoptions):
        real_warm(targetoptions)  # the real work: it must compile with the process's settings
        readied.append(dict(targetoptions))

    def ready(self):
        waits.append(self)
        real_ready(self)
        os.write(release[-1], b"x")  # the holder gives up its lock, having published nothing

    monkeypatch.setattr(_nc_compiling, "warm_compiler", warm)
    monkeypatch.setattr(D.KCacheDispatcher, "_kcache_ready_compiler", ready)
    monkeypatch.setattr(process.STATE, "compiler_readied", False)
    monkeypatch.setitem(process.STATE.counts, "compiles", 0)

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
        release.append(holder(first.kcache_key(sig, (9, 0), store=store)[0], publish=False))
        first.compile(sig)
        assert [o.get("lto") for o in readied] == [False]
        assert first.stats.compiles == 1  # compiled here once the lock was free
        assert D.own_phases()[-1]["compile"] > 0  # the readying is numba-cuda's time, not own
        second = kernel(2)
        release.append(holder(second.kcache_key(sig, (9, 0), store=store)[0], publish=False))
        second.compile(sig)
    assert waits == [first, second]  # both waited for the other process
    assert len(readied) == 1  # the second time this process had compiled: nothing to ready


def test_a_child_forked_during_the_background_import_of_filelock_can_import_it():
    """The stats flusher imports filelock on its first write, in its own thread: a child
    forked meanwhile inherits that unfinished import (its lock held by a thread the child does
    not have) and must still be able to import filelock (a put, a lock) instead of hanging."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent('''
        import importlib.abc, importlib.util, os, signal, sys, threading
        import kcache.store.stats  # its fork handler
        assert "filelock" not in sys.modules
        started, go = threading.Event(), threading.Event()

        class Slow(importlib.abc.MetaPathFinder, importlib.abc.Loader):
            def find_spec(self, name, path=None, target=None):
                if name != "filelock":
                    return None
                sys.meta_path.remove(self)
                self.real = importlib.util.find_spec(name)
                return importlib.util.spec_from_loader(name, self, origin=self.real.origin,
                                                       is_package=True)
            def create_module(self, spec):
                return None
            def exec_module(self, module):
                module.__path__ = self.real.submodule_search_locations
                started.set()
                go.wait(60)  # still importing when the main thread forks
                self.real.loader.exec_module(module)

        sys.meta_path.insert(0, Slow())
        importer = threading.Thread(target=lambda: __import__("filelock"))
        importer.start()
        assert started.wait(60)
        pid = os.fork()
        if pid == 0:
            signal.alarm(30)  # a hang is reported as a failure
            import filelock
            filelock.FileLock
            os._exit(0)
        go.set()
        importer.join(60)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    ''')
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "0"  # not killed by the alarm (-14)

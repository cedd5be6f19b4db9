"""The hit path's set-up and shortcuts (issue 8, "fast hits") keep the behaviour exact.

* The process store is opened when the first cached kernel is defined; KCACHE_* variables
  changed after that, before the first kernel call, still take effect (fresh processes).
* Batched counters reach the disk through one background thread per process, started once
  (in a forked child again), while the process keeps running.
* Components shared by every key are put in canonical form once: read-only, and the key is
  the one ``make_key`` gives for plain copies (``True`` and ``1`` stay apart).
"""
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import kcache
from kcache import Entry, make_key
from kcache.keys import CanonicalMap

REPO = Path(__file__).resolve().parents[1]


def run_child(code: str, env: dict, stdin=None, timeout=120) -> subprocess.Popen:
    full = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    full.update(env)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=full,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc, timeout=180) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


# -- the store opened at kernel definition -------------------------------------------------------

KERNEL_CHILD = """
    import json, os, sys
    import kcache
    kcache.install("cache")
    from numba import cuda, types
    from kcache.dispatcher import _compat
    from kcache.dispatcher.dispatcher import Options

    @cuda.jit(cache=True)
    def k(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = 2 * a[i]

    early = Options._default_store            # opened when k was defined
    if os.environ.get("MOVE_TO"):
        os.environ["KCACHE_DIR"] = os.environ["MOVE_TO"]
    with _compat.offline_target((9, 0)):
        _compat.current_cc = lambda: (9, 0)
        _compat.Kernel.bind = lambda self: self._codelibrary.get_cubin()
        k.compile((types.float32[::1],))
    used = Options._default_store
    print(json.dumps({"early": str(early.root) if early else None, "used": str(used.root),
                      "same": used is early, "key": k.stats.keys and list(k.stats.keys.values())[0]}))
"""


@pytest.fixture
def numba_cuda():
    return pytest.importorskip("numba.cuda")


def test_store_opened_at_definition_is_kept_when_settings_are_unchanged(tmp_path, numba_cuda):
    root = tmp_path / "a"
    res = finish(run_child(KERNEL_CHILD, {"KCACHE_DIR": str(root)}))
    assert res["early"] == str(root)  # opened before any kernel call
    assert res["same"] is True  # the first call used it, not a second one
    assert kcache.Store(root).header(res["key"]) is not None


def test_kcache_dir_changed_before_the_first_call_takes_effect(tmp_path, numba_cuda):
    first, moved = tmp_path / "a", tmp_path / "b"
    res = finish(run_child(KERNEL_CHILD, {"KCACHE_DIR": str(first), "MOVE_TO": str(moved)}))
    assert res["early"] == str(first)
    assert res["used"] == str(moved) and res["same"] is False
    assert kcache.Store(moved).header(res["key"]) is not None
    assert kcache.Store(first).header(res["key"]) is None  # nothing went to the old root


# -- counters written by one background thread -----------------------------------------------------

FLUSH_CHILD = """
    import json, os, sys, threading
    import kcache
    from kcache import Entry
    s = kcache.Store(os.environ["ROOT"])
    key = "ab" * 32
    s.put(key, Entry({"cubin": b"x"}, {"kernel": "m:k"}))
    if os.environ.get("FORK"):
        pid = os.fork()
        if pid:                      # the parent waits; the forked child does the counting
            _, status = os.waitpid(pid, 0)
            os._exit(os.waitstatus_to_exitcode(status))
    for n in range(3):               # a hit, then wait until the parent has seen it on disk
        assert s.get(key) is not None
        print(json.dumps({"hit": n + 1}), flush=True)
        sys.stdin.readline()
    names = [t.name for t in threading.enumerate()]
    print(json.dumps({"flushers": names.count("kcache-stats-flush")}), flush=True)
    os._exit(0)                      # no exit-time flush: only the thread wrote the counts
"""


def _wait_for_hits(root, n, deadline_s=20.0):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:  # polling the files with a deadline, not a sleep
        if kcache.Store(root).stats().hits >= n:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("fork", [False, True], ids=["process", "forked-child"])
def test_hits_reach_the_disk_while_the_process_runs(tmp_path, fork):
    if fork and not hasattr(os, "fork"):
        pytest.skip("no os.fork here")
    root = tmp_path / "cache"
    proc = run_child(FLUSH_CHILD, {"ROOT": str(root), **({"FORK": "1"} if fork else {})})
    try:
        for n in (1, 2, 3):
            line = json.loads(proc.stdout.readline())
            assert line == {"hit": n}
            assert _wait_for_hits(root, n), f"hit {n} never reached {root}"
            proc.stdin.write("\n")
            proc.stdin.flush()
        assert json.loads(proc.stdout.readline()) == {"flushers": 1}
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr.read()[-2000:]


# -- shared canonical components -------------------------------------------------------------------

def _plain(value):
    return json.loads(json.dumps(value))


def test_shared_components_are_read_only_and_keep_the_key(numba_cuda):
    from numba import cuda, types

    from kcache.dispatcher.dispatcher import kernel_key

    @cuda.jit
    def k(a):
        a[0] = 1

    key, comps = kernel_key(k, (types.float32[::1],), (9, 0))
    shared = [name for name, value in comps.items() if type(value) is CanonicalMap]
    assert {"toolchain", "config", "options", "target"} <= set(shared)
    with pytest.raises(TypeError, match="read-only"):
        comps["toolchain"]["numba"] = "0.0"
    with pytest.raises(TypeError, match="read-only"):
        comps["options"].update(fastmath=True)
    assert make_key(_plain(comps)) == key  # the same key as plain dicts give
    # a second kernel of the process gets the same objects, not copies
    _key2, comps2 = kernel_key(k, (types.float64[::1],), (9, 0))
    assert comps2["toolchain"] is comps["toolchain"] and comps2["config"] is comps["config"]


def test_shared_components_tell_true_from_one():
    from kcache.dispatcher.components import _shared

    as_bool, as_int = _shared("options", {"opt": True}), _shared("options", {"opt": 1})
    assert as_bool is not as_int
    assert make_key({"options": as_bool}) != make_key({"options": as_int})
    assert make_key({"options": as_bool}) == make_key({"options": {"opt": True}})


def test_put_and_get_with_shared_components(tmp_path, numba_cuda):
    from numba import cuda, types

    from kcache.dispatcher.dispatcher import kernel_key

    @cuda.jit
    def k(a):
        a[0] = 1

    key, comps = kernel_key(k, (types.float32[::1],), (9, 0))
    store = kcache.Store(tmp_path / "cache")
    assert store.put(key, Entry({"cubin": b"\x00" * 8}, {"kernel": "m:k"}), components=comps)
    assert store.header(key).components == _plain(comps)

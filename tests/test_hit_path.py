"""The hit path's set-up and shortcuts (issue 8, "fast hits") keep the behaviour exact.

* The process store is opened when the first cached kernel is defined; settings changed
  after that and before the first kernel call (KCACHE_* variables, the current folder for a
  relative root, XDG_CACHE_HOME, config.json) still take effect, and a setting that is bad
  at definition is reported as the first call finds it (fresh processes).
* Batched counters reach the disk while the process keeps running, through a background
  thread started by the first count (none when kernels are only defined) that ends when no
  more are due, in a forked child too.
* Components shared by every key are put in canonical form once: read-only (their lists
  too), copies are plain, and the key is the one ``make_key`` gives for plain copies
  (``True`` and ``1`` stay apart).
"""
import copy
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

import kcache
from kcache import Entry, make_key
from kcache.keys import CanonicalMap


def run_child(code: str, env: dict, cwd=None) -> subprocess.Popen:
    full = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    full.update(env)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=full, cwd=cwd,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc, timeout=180) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def numba_cuda():
    return pytest.importorskip("numba.cuda")


# -- the store opened at kernel definition -------------------------------------------------------

# CHANGES (JSON list) is applied after the kernel is defined and before its first call:
# ["chdir", path], ["config", root, json text] (writes <root>/config.json) or [VAR, value].
KERNEL_CHILD = """
    import json, os, sys
    import kcache
    kcache.install("cache")
    from numba import cuda, types
    from kcache.dispatcher.frontends.numba_cuda import internals as _nc_internals
    from kcache.dispatcher.frontends.numba_cuda import offline as _nc_offline
    from kcache.dispatcher.frontends.numba_cuda import signatures as _nc_signatures
    from kcache.dispatcher.process import STATE
    from kcache.store.stats import _FLUSHER

    @cuda.jit(cache=True)
    def k(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = 2 * a[i]

    early = STATE.default_store            # opened when k was defined
    thread_at_definition = _FLUSHER.running
    for change in json.loads(os.environ.get("CHANGES", "[]")):
        if change[0] == "chdir":
            os.chdir(change[1])
        elif change[0] == "config":
            with open(os.path.join(change[1], "config.json"), "w") as f:
                f.write(change[2])
        else:
            os.environ[change[0]] = change[1]
    with _nc_offline.offline_target((9, 0)):
        _nc_signatures.current_cc = lambda: (9, 0)
        _nc_internals.Kernel.bind = lambda self: self._codelibrary.get_cubin()
        k.compile((types.float32[::1],))
    used = STATE.default_store
    print(json.dumps({"early": str(early.root) if early else None,
                      "used": str(used.root) if used else None, "same": used is early,
                      "layers": [str(p) for p in used.readonly_roots] if used else None,
                      "key": list(k.stats.keys.values())[0],
                      "thread_at_definition": thread_at_definition}))
"""


def changes(*items) -> dict:
    return {"CHANGES": json.dumps([list(item) for item in items])}


@pytest.mark.slow
def test_store_opened_at_definition_is_kept_when_settings_are_unchanged(tmp_path, numba_cuda):
    root = tmp_path / "a"
    res = finish(run_child(KERNEL_CHILD, {"KCACHE_DIR": str(root)}))
    assert res["early"] == str(root)  # opened before any kernel call
    assert res["same"] is True  # the first call used it, not a second one
    assert res["thread_at_definition"] is False  # nothing counted yet: no thread
    assert kcache.Store(root).header(res["key"]) is not None


@pytest.mark.slow
@pytest.mark.parametrize("how", ["KCACHE_DIR", "relative KCACHE_DIR, chdir", "XDG_CACHE_HOME"])
def test_a_root_changed_before_the_first_call_is_the_one_used(tmp_path, numba_cuda, how):
    cwd = None
    if how == "KCACHE_DIR":
        first, moved = tmp_path / "a", tmp_path / "b"
        env = {"KCACHE_DIR": str(first), **changes(("KCACHE_DIR", str(moved)))}
    elif how == "XDG_CACHE_HOME":
        first, moved = tmp_path / "xa" / "kcache", tmp_path / "xb" / "kcache"
        env = {"XDG_CACHE_HOME": str(tmp_path / "xa"),
               **changes(("XDG_CACHE_HOME", str(tmp_path / "xb")))}
    else:
        cwd, other = tmp_path / "w1", tmp_path / "w2"
        cwd.mkdir()
        other.mkdir()
        first, moved = cwd / "rel", other / "rel"
        env = {"KCACHE_DIR": "rel", **changes(("chdir", str(other)))}
    res = finish(run_child(KERNEL_CHILD, env, cwd=cwd))
    assert res["early"] == str(first)
    assert res["used"] == str(moved) and res["same"] is False
    assert kcache.Store(moved).header(res["key"]) is not None
    assert kcache.Store(first).header(res["key"]) is None  # nothing went to the old root


@pytest.mark.slow
def test_config_json_changed_before_the_first_call_is_read(tmp_path, numba_cuda):
    root, layer = tmp_path / "a", tmp_path / "layer"
    root.mkdir(mode=0o700)
    layer.mkdir(mode=0o700)
    env = {"KCACHE_DIR": str(root),
           **changes(("config", str(root), json.dumps({"readonly_dirs": [str(layer)]})))}
    res = finish(run_child(KERNEL_CHILD, env))
    assert res["same"] is False and res["layers"] == [str(layer)]


BAD_THEN = """
    import json, os, warnings
    warnings.simplefilter("always")
    import kcache
    kcache.install("cache")
    from numba import cuda, types
    from kcache.dispatcher.frontends.numba_cuda import internals as _nc_internals
    from kcache.dispatcher.frontends.numba_cuda import offline as _nc_offline
    from kcache.dispatcher.frontends.numba_cuda import signatures as _nc_signatures
    with warnings.catch_warnings(record=True) as at_definition:
        @cuda.jit(cache=True)
        def k(a):
            a[0] = 1
    os.environ["KCACHE_MAX_SIZE"] = os.environ["THEN"]
    with warnings.catch_warnings(record=True) as at_call, _nc_offline.offline_target((9, 0)):
        _nc_signatures.current_cc = lambda: (9, 0)
        _nc_internals.Kernel.bind = lambda self: self._codelibrary.get_cubin()
        k.compile((types.float32[::1],))
    print(json.dumps({"definition": [str(w.message) for w in at_definition],
                      "call": [str(w.message) for w in at_call],
                      "uncached": list(k.stats.uncached.values())}))
"""


@pytest.mark.slow
def test_a_bad_setting_at_definition_fixed_before_the_call_warns_nothing(tmp_path, numba_cuda):
    res = finish(run_child(BAD_THEN, {"KCACHE_DIR": str(tmp_path / "c"),
                                      "KCACHE_MAX_SIZE": "bogus", "THEN": "1G"}))
    assert res == {"definition": [], "call": [], "uncached": []}


@pytest.mark.slow
def test_a_bad_setting_is_reported_as_the_first_call_finds_it(tmp_path, numba_cuda):
    res = finish(run_child(BAD_THEN, {"KCACHE_DIR": str(tmp_path / "c"),
                                      "KCACHE_MAX_SIZE": "bogus", "THEN": "0"}))
    assert res["definition"] == []  # nothing said ahead of the call
    assert len(res["call"]) == 1 and "KCACHE_MAX_SIZE" in res["call"][0]
    assert "bogus" not in res["call"][0]  # the value of the call's time, not the definition's
    assert res["uncached"]  # and the call still ran, uncached


# -- counters written by a background thread -------------------------------------------------------

FLUSH_CHILD = """
    import json, os, sys, time
    import kcache
    from kcache import Entry
    from kcache.store.stats import _FLUSHER
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
    deadline = time.monotonic() + 20  # the writer thread ends once nothing more is due
    while _FLUSHER.running and time.monotonic() < deadline:
        time.sleep(0.02)
    print(json.dumps({"writer_running": _FLUSHER.running}), flush=True)
    os._exit(0)                      # no exit-time flush: only the thread wrote the counts
"""


STARTED_CHILD = """
    import _thread, json, os
    import kcache
    from kcache import Entry
    s = kcache.Store(os.environ["ROOT"])
    key = "ab" * 32
    s.put(key, Entry({"cubin": b"x"}, {"kernel": "m:k"}))
    before = _thread._count()         # threads of _thread's that have begun to run
    assert s.get(key) is not None     # the process's first count starts the writer
    print(json.dumps({"before": before, "after": _thread._count()}), flush=True)
"""


def test_the_writer_thread_is_running_when_the_first_count_returns(tmp_path):
    # Its first take of the interpreter lock is then paid by that count, not by a later
    # kernel's lookup (docs/bench-dispatch.md): without the wait it has often not begun.
    res = finish(run_child(STARTED_CHILD, {"ROOT": str(tmp_path / "cache")}))
    assert res["after"] == res["before"] + 1


DROPPED_CHILD = """
    import gc, os
    import kcache
    from kcache import Entry
    key = "cd" * 32
    kcache.Store(os.environ["ROOT"]).put(key, Entry({"cubin": b"x"}, {"kernel": "m:k"}))
    for _ in range(3):
        assert kcache.Store(os.environ["ROOT"]).get(key) is not None  # the store dropped
        gc.collect()                  # and collected at once, its counts not yet written
    print("{}")
"""


def test_a_store_dropped_after_a_hit_keeps_its_count(tmp_path):
    finish(run_child(DROPPED_CHILD, {"ROOT": str(tmp_path / "cache")}))
    assert kcache.Store(tmp_path / "cache").stats().hits == 3


def _wait_for_hits(root, n, deadline_s=20.0):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:  # polling the files with a deadline, not a sleep
        if kcache.Store(root).stats().hits >= n:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
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
        assert json.loads(proc.stdout.readline()) == {"writer_running": False}
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr.read()[-2000:]
    assert kcache.Store(root).stats().hits == 3


# -- shared canonical components -------------------------------------------------------------------

def _plain(value):
    return json.loads(json.dumps(value))


def test_shared_components_are_read_only_and_keep_the_key(numba_cuda):
    from numba import cuda, types

    from kcache.dispatcher.dispatcher import kernel_key
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND

    @cuda.jit(fastmath=True)  # fastmath=True: options hold a list
    def k(a):
        a[0] = 1

    key, comps = kernel_key(FRONTEND, k, (types.float32[::1],), (9, 0))
    shared = [name for name, value in comps.items() if type(value) is CanonicalMap]
    assert {"toolchain", "config", "options", "target"} <= set(shared)
    with pytest.raises(TypeError, match="read-only"):
        comps["toolchain"]["numba"] = "0.0"
    with pytest.raises(TypeError, match="read-only"):
        comps["options"].update(fastmath=False)
    lists = [v for v in comps["options"].values() if isinstance(v, list)]
    assert lists
    for value in lists:  # shared lists are read-only too
        with pytest.raises(TypeError, match="read-only"):
            value.append("x")
    assert make_key(_plain(comps)) == key  # the same key as plain dicts give
    copied = copy.deepcopy(comps)  # a user's copy is plain and editable
    assert type(copied["options"]) is dict
    copied["toolchain"]["numba"] = "0.0"
    assert make_key(copied) != key
    # a second kernel of the process gets the same objects, not copies
    _key2, comps2 = kernel_key(FRONTEND, k, (types.float64[::1],), (9, 0))
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
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND

    @cuda.jit
    def k(a):
        a[0] = 1

    key, comps = kernel_key(FRONTEND, k, (types.float32[::1],), (9, 0))
    store = kcache.Store(tmp_path / "cache")
    assert store.put(key, Entry({"cubin": b"\x00" * 8}, {"kernel": "m:k"}), components=comps)
    assert store.header(key).components == _plain(comps)

"""Text from an entry or a server on its way to a program's output (issue 32, item 6).

A name or value from an entry (a bundle, a remote tier, a shared root or layer) or from a
server, quoted in a message, a warning or an exception, is escaped and cut to 200 characters
(kcache.text.cut); a log or a warning an entry says again is escaped and bounded by the cap it
was written under; a miss is explained in one line. Every entry here is a real file in a real
root, planted as any writer of a root, a layer or a bundle could; the servers are real sockets
on 127.0.0.1; ``kcache warm`` runs as a process.
"""
from __future__ import annotations

import contextlib
import copy
import io
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import kcache
from kcache import Entry, Store, make_key
from kcache.text import QUOTE_LIMIT, cut
from kcache.warn import KcacheWarning

REPO = Path(__file__).resolve().parents[1]
#: What a hostile writer puts in a text field: terminal escapes (a title, a clear screen, a
#: bell), 10 MB of them.
RAW = "\x1b]0;owned\x07\x1b[2J"
HUGE = RAW * (10_000_000 // len(RAW))
CONTROL = [chr(c) for c in range(32) if chr(c) not in "\n\t"] + ["\x7f", "\x9b"]


def raw_control(text: str, keep: str = "") -> list[str]:
    """The control characters in ``text`` (other than those in ``keep``)."""
    return sorted({c for c in CONTROL if c in text and c not in keep})


def hostile(components: dict, parts: int = 20_000) -> dict:
    """``components`` of the same kernel, every other field hostile: a 10 MB signature of
    escapes, ``parts`` source parts named with escapes, a toolchain version of escapes."""
    out = copy.deepcopy(components)
    out["signature"] = HUGE
    out["source"] = {f"dep:{RAW}{i}": "x" for i in range(parts)}
    out.setdefault("toolchain", {})["numba-cuda"] = RAW * 1000
    out[RAW * 10] = RAW  # a component no kcache writes
    return out


def plant(store: Store, components: dict, **meta) -> str:
    """Put an opaque entry holding ``components`` (a real file in the root) and return its key."""
    key = make_key(components)
    assert store.put(key, Entry({"cubin": b"x"}, dict(meta)), components=components)
    return key


# --- the kernel call: KCACHE_REQUIRE_HIT, KCACHE_EXPLAIN ----------------------------------------

@pytest.fixture
def kernel_with_hostile_neighbour(store):
    """(kernel, signature): a kernel whose store holds a hostile entry of the same kernel."""
    pytest.importorskip("numba.cuda")
    from numba.cuda import types

    from test_dispatcher_fakegpu import _kernels
    k, sig = _kernels(store), (types.float32[::1],)
    _key, components = k.kcache_key(sig, (9, 0), store=store)
    plant(store, hostile(components), kernel=components["kernel"])
    return k, sig


def test_require_hit_quotes_a_hostile_entry_escaped_and_cut(store, monkeypatch,
                                                            kernel_with_hostile_neighbour):
    from test_dispatcher_fakegpu import fake_gpu
    k, sig = kernel_with_hostile_neighbour
    monkeypatch.setenv("KCACHE_REQUIRE_HIT", "1")
    with fake_gpu((9, 0)), pytest.raises(kcache.CacheMissError) as info:
        k.compile(sig)
    message, reason = str(info.value), info.value.reason
    assert "the nearest entry differs: " in message and "; and 19999 more." in message, message
    assert raw_control(message) == [] and raw_control(reason) == []
    assert "dependency \\x1b]0;owned\\x07\\x1b[2J0 removed" in message  # shown, escaped
    # 8 differences of at most 2 quoted values of 200 characters each, and the words
    assert len(message) < 8 * (2 * QUOTE_LIMIT + 40) + 600, len(message)


def test_explain_logs_one_escaped_bounded_line_per_miss(store, caplog,
                                                         kernel_with_hostile_neighbour):
    from test_dispatcher_fakegpu import fake_gpu
    k, sig = kernel_with_hostile_neighbour
    kcache.dispatcher.explain(True)
    try:
        with caplog.at_level(logging.WARNING, logger="kcache.explain"), fake_gpu((9, 0)):
            k.compile(sig)
    finally:
        kcache.dispatcher.explain(False)
    said = [r.getMessage() for r in caplog.records if r.name == "kcache.explain"]
    assert len(said) == 1 and ": miss: " in said[0], said
    assert raw_control(said[0]) == [] and len(said[0]) < 8 * (2 * QUOTE_LIMIT + 40) + 600
    assert kcache.dispatcher.explain(k) == said  # what kcache.explain(kernel) returns


# --- compile_program: the log of a hit ------------------------------------------------------------

def test_compile_program_hit_writes_a_planted_log_escaped_and_bounded(root):
    pytest.importorskip("cuda.core")
    from cuda.core import ProgramOptions

    from kcache.programs.bridge import MAX_LOG
    src = 'extern "C" __global__ void k(int* a) { a[0] = 1; }'
    kcache.compile_program(src, "c++", ProgramOptions(arch="sm_90"), "cubin", root=root)
    store = Store(root)
    (info,) = store.entries()
    entry = store.load(info.key)
    unit = "warning: " + RAW + "\n\t"
    entry.meta["log"] = unit * (15 * 2**20 // len(unit))  # 15 MiB
    assert store.put(info.key, entry, components=info.components)  # the file, replaced
    logs = io.StringIO()
    kcache.compile_program(src, "c++", ProgramOptions(arch="sm_90"), "cubin", root=root,
                           logs=logs)
    written = logs.getvalue()
    assert written.startswith("warning: \\x1b]0;owned\\x07") and "\n\t" in written
    assert raw_control(written, keep="\n\t\0") == [] and len(written) <= MAX_LOG


# --- warnings an entry says again -----------------------------------------------------------------

def test_replayed_warnings_are_escaped_within_the_cap_they_were_written_under(recwarn):
    pytest.importorskip("numba.cuda")
    from kcache.dispatcher import compile_warnings
    cap = compile_warnings.MAX_TEXT
    said = compile_warnings.replay([["builtins:UserWarning", "\x1b" * cap, "\x07" * cap, 7]])
    (w,) = recwarn.list
    assert said == 1 and raw_control(str(w.message)) == [] and raw_control(w.filename) == []
    assert len(str(w.message)) <= cap and len(w.filename) <= cap


# --- a server's words -----------------------------------------------------------------------------

class HostileRedis:
    """A loopback "Redis" whose every answer is an error reply of about 1.4 MB of terminal
    escapes, as a hostile or broken server may send (redis-py makes it a ResponseError)."""

    REPLY = b"-ERR " + RAW.encode() * 100_000 + b"\r\n"

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.sock.settimeout(30)

    def serve_one(self):
        conn, _ = self.sock.accept()
        with conn:
            conn.settimeout(30)
            with contextlib.suppress(OSError):
                while conn.recv(65536):
                    conn.sendall(self.REPLY)


def test_a_redis_error_reply_reaches_a_warning_escaped_and_cut(tmp_path, monkeypatch):
    pytest.importorskip("redis")
    import threading
    server = HostileRedis()
    thread = threading.Thread(target=server.serve_one, daemon=True)
    thread.start()
    monkeypatch.setenv("KCACHE_REMOTE", f"redis://127.0.0.1:{server.port}/0")
    with pytest.warns(KcacheWarning) as said:
        assert Store(tmp_path / "cache").get("ab" * 32) is None
    server.sock.close()
    texts = [str(w.message) for w in said if "remote" in str(w.message)]
    assert texts and all(raw_control(t) == [] for t in texts), texts
    assert any("ResponseError: \\x1b]0;owned\\x07" in t for t in texts), texts
    assert all(len(t) < QUOTE_LIMIT + 400 for t in texts), [len(t) for t in texts]


def test_cut_bounds_and_escapes():
    assert cut("plain") == "plain" and cut(5) == "5"
    shown = cut(HUGE)
    assert len(shown) == QUOTE_LIMIT and shown.endswith("…") and raw_control(shown) == []
    assert cut("a\nb\tc", keep="\n\t") == "a\nb\tc" and cut("a\nb") == "a\\nb"
    assert cut("x" * QUOTE_LIMIT) == "x" * QUOTE_LIMIT  # exactly at the limit: whole


# --- kcache warm with KCACHE_EXPLAIN ----------------------------------------------------------

@pytest.mark.slow
def test_warm_with_explain_says_at_most_one_line_per_kernel_compiled(tmp_path):
    """The root holds 30 hostile entries of the kernel warm compiles (each with 20,000
    differences named with escapes): one explain line per compile, escaped and bounded."""
    pytest.importorskip("numba.cuda")
    root = tmp_path / "cache"
    store = Store(root)
    kernel = "examples.kernels:clamp_square"
    for n in range(30):
        components = hostile({"kernel": kernel, "format": n}, parts=20_000)
        plant(store, components, kernel=kernel)
    sigs = tmp_path / "one.sigs"
    sigs.write_text(f"{kernel} void(float64[::1])\n{kernel} void(float32[::1])\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "home"),
               KCACHE_EXPLAIN="1")
    done = subprocess.run([sys.executable, "-m", "kcache", "warm", "examples", "--signatures",
                           str(sigs), "--cc", "9.0", "--jobs", "1", "--dir", str(root)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    misses = [line for line in lines if ": miss: " in line]
    assert len(misses) == 2, lines[:20]  # one per kernel compiled
    assert "more" in misses[0] and "owned" in misses[0], misses  # the second: the first compile
    assert raw_control(done.stderr) == [] and raw_control(done.stdout) == []
    assert len(done.stderr) + len(done.stdout) < 20_000, (len(done.stderr), len(lines))


# --- kcache warm --replay: entries it lists -------------------------------------------------------

def test_replay_lists_hostile_entries_escaped_and_cut(store, tmp_path):
    """Stale entries whose kernel is 10 MB of escapes, a 10,000-character identifier of a
    module the TARGETs hold, a list, or whose target is escapes: each one row, escaped and
    cut, never an exception."""
    pytest.importorskip("numba.cuda")
    from kcache.dispatcher import replay
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
    from kcache.dispatcher.warm import Plan
    old = {"toolchain": {"numba-cuda": "0.0.1"}, "target": {"cc": "sm_90a"},
           "signature": RAW * 1000}
    kernels = [HUGE, "mod:" + "k" * 10_000, ["not", "text"], "mod:" + RAW]
    for n, kernel in enumerate(kernels):
        plant(store, {**old, "kernel": kernel, "n": n}, signature=RAW * 1000)
    plant(store, {**old, "kernel": "mod:k", "target": {"cc": RAW * 100}}, arch=RAW * 100)
    for modules in (None, {"mod": str(tmp_path)}):
        plan = replay.plan_replay(Plan(FRONTEND), store, modules=modules)
        assert len(plan.rows) == 5 and not plan.tasks, plan.rows
        for row in plan.rows:
            assert row.status == "skipped"
            for text in (row.kernel, row.display, row.reason):
                assert text is None or (len(text) <= 2 * QUOTE_LIMIT and raw_control(text) == [])

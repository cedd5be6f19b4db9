"""``KCACHE_RECORD=FILE``: a run records the signatures it compiles or loads (through
``KCacheDispatcher.compile``), many processes append to one file without duplicates or torn
lines, and ``kcache warm --signatures FILE`` then finds exactly the keys the run used."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("numba.cuda")

pytestmark = pytest.mark.compat  # runs in every leg of tests/compat/run.sh (docs/compat.md)

from kcache.dispatcher import record, sigfile  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND  # noqa: E402
from kcache.warn import KcacheWarning  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

# A program launching the example kernels, on a machine without a GPU: the dispatcher's real
# compile path runs for cc 9.0 (as tests/test_dispatcher_fakegpu.py's fake_gpu does), and
# `kcache.install` serves the examples' cache=True kernels through KCacheDispatcher.
RUN_EXAMPLES = textwrap.dedent(f"""
    import json, sys
    sys.path.insert(0, {str(REPO)!r})
    import numpy as np
    import kcache
    kcache.install("cache")
    from kcache.dispatcher.frontends.numba_cuda import internals as _nc_internals
    from kcache.dispatcher.frontends.numba_cuda import offline as _nc_offline
    from kcache.dispatcher.frontends.numba_cuda import signatures as _nc_signatures
    _nc_signatures.current_cc = lambda: (9, 0)
    _nc_internals.Kernel.bind = lambda self: self._codelibrary.get_cubin()
    from examples import kernels
    x = np.zeros(256, np.float32)
    launches = [(kernels.scaled_add, (x, x, x)), (kernels.clamp_square, (np.zeros(256),)),
                (kernels.block_sum, (x, x))]
    print("ready", flush=True)
    sys.stdin.readline()  # start together with the other processes
    with _nc_offline.offline_target((9, 0)):
        for disp, args in launches:
            disp.compile(tuple(disp.typeof_pyval(a) for a in args))  # what a launch calls
            disp.compile(tuple(disp.typeof_pyval(a) for a in args))  # in memory: not again
    print(json.dumps(sorted(k for d, _ in launches for k in d.stats.keys.values())))
""")

APPEND_LINES = textwrap.dedent("""
    import sys
    from kcache.dispatcher import record
    path, me = sys.argv[1], sys.argv[2]
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(40):
        record._append(path, f"pkg.shared:k{i}", "void(float32[::1])")
        record._append(path, f"pkg.own{me}:k{i}", "void(int64)")
""")


def env_for(tmp_path: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env["HOME"] = env["XDG_CACHE_HOME"] = str(tmp_path / "home")
    env.update(extra)
    return env


def run_together(commands, env) -> list[str]:
    """Start every command, wait until each says "ready", release them all at once (a line on
    their stdin), and return their outputs (each must exit 0)."""
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for cmd in commands]
    try:
        for p in procs:
            line = p.stdout.readline()
            assert line.strip() == "ready", p.stderr.read()[-3000:]
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outputs = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-3000:]
            outputs.append(out)
        return outputs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


@pytest.mark.slow
def test_a_recorded_run_warms_the_same_keys(tmp_path):
    rec = tmp_path / "used.sigs"
    root = tmp_path / "cache"
    env = env_for(tmp_path, KCACHE_RECORD=str(rec), KCACHE_DIR=str(root))
    outputs = run_together([[sys.executable, "-c", RUN_EXAMPLES]] * 2, env)
    keys = [json.loads(out) for out in outputs]
    assert keys[0] == keys[1] and len(keys[0]) == 3
    text = rec.read_text()
    assert text.startswith(sigfile.HEADER) and text.endswith("\n")
    lines = sigfile.read_signatures(FRONTEND, rec)
    assert sorted((l.kernel, l.signature) for l in lines) == [
        ("examples.kernels:block_sum", "void(float32[::1], float32[::1])"),
        ("examples.kernels:clamp_square", "void(float64[::1])"),
        ("examples.kernels:scaled_add", "void(float32[::1], float32[::1], float32[::1])"),
    ]
    assert len(text.splitlines()) == 4  # the header and one line per kernel: no duplicates

    def warm(into):
        proc = subprocess.run([sys.executable, "-m", "kcache", "warm", "--signatures", str(rec),
                               "--cc", "9.0", "--json", "--dir", str(into)], cwd=REPO,
                              env=env_for(tmp_path), capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["results"]

    # the same root: every signature the run used is there already, under the same key
    same = warm(root)
    assert {r["status"] for r in same} == {"cached"}
    assert sorted(r["key"] for r in same) == keys[0]
    # a fresh root (e.g. a container build): compiled to exactly those keys
    fresh = warm(tmp_path / "fresh")
    assert {r["status"] for r in fresh} == {"compiled"}
    assert sorted(r["key"] for r in fresh) == keys[0]


@pytest.mark.slow
def test_concurrent_appends_keep_whole_lines_once(tmp_path):
    rec = tmp_path / "many.sigs"
    n = 4
    run_together([[sys.executable, "-c", APPEND_LINES, str(rec), str(i)] for i in range(n)],
                 env_for(tmp_path))
    lines = rec.read_text().splitlines()
    assert lines[0] == sigfile.HEADER.rstrip("\n") and lines.count(lines[0]) == 1
    body = lines[1:]
    expected = {f"pkg.shared:k{i}  void(float32[::1])" for i in range(40)}
    expected |= {f"pkg.own{p}:k{i}  void(int64)" for p in range(n) for i in range(40)}
    assert len(body) == len(set(body)) == len(expected)  # no duplicate, no torn line
    assert set(body) == expected


def _local_kernel():
    from kcache.dispatcher import jit

    @jit
    def local(a):
        a[0] = 1
    return local


def test_what_cannot_be_recorded_is_skipped_with_a_reason(tmp_path, caplog):
    from numba.cuda import types as T
    from examples_for_record import module_kernel
    rec = tmp_path / "r.sigs"
    record.start(rec)
    try:
        with pytest.warns(KcacheWarning, match="defined inside a function"):
            record.note(FRONTEND, _local_kernel(), (T.float32[::1],))
        with pytest.warns(KcacheWarning, match="no signature-string form"):
            record.note(FRONTEND, module_kernel, (T.CPointer(T.int32),))
        record.note(FRONTEND, module_kernel, (T.Array(T.float32, 2, "F", readonly=True),))
        record.note(FRONTEND, module_kernel,
                    (T.Array(T.float32, 2, "F", readonly=True),))  # once
    finally:
        record.stop()
    skipped = record.skipped()
    assert any("inside a function" in why for why in skipped.values())
    assert any("int32*" in what and "no signature-string form" in why
               for what, why in skipped.items())
    [line] = sigfile.read_signatures(FRONTEND, rec)
    assert line.kernel == "examples_for_record:module_kernel"
    assert line.argtypes == (T.Array(T.float32, 2, "F", readonly=True),)
    record.note(FRONTEND, module_kernel, (T.float64[::1],))  # recording is off: nothing written
    assert len(sigfile.read_signatures(FRONTEND, rec)) == 1


def test_an_unwritable_record_file_never_breaks_the_program(tmp_path):
    from numba.cuda import types as T
    from examples_for_record import module_kernel
    record.start(tmp_path / "no" / "such" / "dir" / "r.sigs")
    try:
        record.note(FRONTEND, module_kernel, (T.float32[::1],))  # warned once, not raised
    finally:
        record.stop()


@pytest.fixture(autouse=True)
def _module_with_a_kernel(tmp_path, monkeypatch):
    """An importable module ``examples_for_record`` with one kernel (recorded by name)."""
    (tmp_path / "examples_for_record.py").write_text(textwrap.dedent("""
        from kcache.dispatcher import jit

        @jit
        def module_kernel(a):
            a[0] = 1
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("examples_for_record", None)


def test_a_record_file_that_is_a_fifo_never_blocks_the_program(tmp_path):
    """KCACHE_RECORD naming a FIFO (or a device): the launch goes on at once, warned; reading
    the FIFO to skip recorded lines blocked the program until a writer came."""
    fifo = tmp_path / "r.sigs"
    os.mkfifo(fifo)
    code = ("import sys\nfrom kcache.dispatcher import record\n"
            "record._append(sys.argv[1], 'pkg.m:k', 'void(int64)')\nprint('went on')")
    done = subprocess.run([sys.executable, "-c", code, str(fifo)], env=env_for(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "went on\n", done.stderr
    assert "KCACHE_RECORD: cannot write" in done.stderr and "not a regular file" in done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_launch_reads_only_its_own_kernels_lines_of_a_big_record_file(tmp_path, monkeypatch):
    """A record file other processes fill (up to 16 MiB, every line with a comment) costs a
    new launch a comparison of its own kernel's lines, never a parse of every line (a
    tokenizer pass per '#' took 10-24 s of CPU per launch); its own line is still found
    behind a trailing comment, and a new one is appended once."""
    import tokenize
    path = tmp_path / "r.sigs"
    other = "pkg.other:k  void(float32[::1])  # recorded elsewhere\n"
    path.write_text(sigfile.HEADER + other * 200_000 + "pkg.mine:k  void(int64)  # mine\n")
    parsed = []
    real = tokenize.generate_tokens
    monkeypatch.setattr(tokenize, "generate_tokens", lambda *a: parsed.append(1) or real(*a))
    size = path.stat().st_size
    record._append(str(path), "pkg.mine:k", "void(int64)")  # there: nothing appended
    assert path.stat().st_size == size
    for _ in range(2):
        record._append(str(path), "pkg.mine:k", "void(float64)")
    assert path.read_text().count("pkg.mine:k  void(float64)\n") == 1
    assert parsed == []


FACTORY = """
    from kcache.dispatcher import jit

    def make_adder(k):
        @jit
        def adder(a):
            a[0] += k
        return adder

    add3 = make_adder(3.0)
    add4 = make_adder(4.0)

    def _impl(a):
        a[0] = 1

    impl_k = jit(_impl)
"""


def test_a_kernel_a_module_name_holds_is_recorded_under_that_name(tmp_path, monkeypatch):
    """A factory's closures (``add3 = make_adder(3.0)``: ``<locals>`` in their qualname) and
    ``k = jit(impl)`` are recorded as ``module:attr``, the name kcache warm finds them by
    (a closure was refused, and ``impl_k`` recorded as ``factory_rec:_impl``, a function);
    a closure no module name holds is still refused, with the reason."""
    from numba.cuda import types as T

    from kcache.dispatcher import discover
    (tmp_path / "factory_rec.py").write_text(textwrap.dedent(FACTORY))
    monkeypatch.syspath_prepend(str(tmp_path))
    import factory_rec
    rec = tmp_path / "r.sigs"
    record.start(rec)
    try:
        for kernel in (factory_rec.add3, factory_rec.add4, factory_rec.impl_k):
            record.note(FRONTEND, kernel, (T.float32[::1],))
        with pytest.warns(KcacheWarning, match="no name of its module holds it"):
            record.note(FRONTEND, factory_rec.make_adder(5.0), (T.float32[::1],))
    finally:
        record.stop()
        sys.modules.pop("factory_rec", None)
    lines = sigfile.read_signatures(FRONTEND, rec)
    assert [line.kernel for line in lines] == [
        "factory_rec:add3", "factory_rec:add4", "factory_rec:impl_k"]
    for line in lines:  # each names the very kernel launched, as warm's worker finds it
        module, attr = sigfile.split_kernel(line.kernel)
        assert discover.find_kernel(FRONTEND, factory_rec, attr) is getattr(factory_rec, attr)
    assert [k for k in record.skipped() if k.startswith("factory_rec:")] == [
        "factory_rec:make_adder.<locals>.adder (array(float32, 1d, C))"]

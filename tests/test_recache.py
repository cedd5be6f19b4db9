"""KCACHE_RECACHE=1, compile_for(recache=True), kcache warm --recache: compile and overwrite
an entry that is present (ccache's --recache, SCCACHE_RECACHE), never counted as a hit: a
kernel's call counts a compile and a miss, compile_for and warm a compile only (their lookup
is an existence check)."""
import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest

import kcache
from kcache import Entry, Store, make_key

pytestmark = pytest.mark.compat


def test_store_get_or_create_recache_overwrites_and_counts_a_miss(tmp_path):
    store = Store(tmp_path / "cache")
    key = make_key({"recache": 1})
    made = []

    def create(payload):
        def build():
            made.append(payload)
            return Entry({"cubin": payload}, {"kernel": "m:k"})
        return build

    store.get_or_create(key, create(b"old" * 10))
    entry, was_hit = store.get_or_create(key, create(b"new" * 10))
    assert was_hit and made == [b"old" * 10]
    entry, was_hit = store.get_or_create(key, create(b"new" * 10), recache=True)
    assert was_hit is False and made == [b"old" * 10, b"new" * 10]
    assert Store(tmp_path / "cache").load(key).artifacts["cubin"] == b"new" * 10  # overwritten
    stats = store.stats()
    assert (stats["hits"], stats["misses"], stats["entries"]) == (1, 2, 1)
    # an existence check that recaches counts no miss either
    store.get_or_create(key, create(b"third" * 4), count=False, recache=True)
    assert store.stats()["misses"] == 2 and store.load(key).artifacts["cubin"] == b"third" * 4


def test_recache_setting_reads_as_every_boolean(monkeypatch):
    from kcache.dispatcher.process import recache_enabled
    monkeypatch.delenv("KCACHE_RECACHE", raising=False)
    assert recache_enabled() is False
    for value, on in (("1", True), ("yes", True), ("on", True), ("0", False), ("false", False)):
        monkeypatch.setenv("KCACHE_RECACHE", value)
        assert recache_enabled() is on


def _scaled_add():
    from examples import kernels
    return kernels.scaled_add, kernels.SIGNATURES[kernels.scaled_add]


@pytest.fixture
def examples_path(monkeypatch):
    from pathlib import Path
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))


def test_compile_for_recache_compiles_again_and_overwrites(tmp_path, monkeypatch, examples_path):
    pytest.importorskip("numba.cuda")
    from kcache.dispatcher import compile_for_report
    monkeypatch.delenv("KCACHE_RECACHE", raising=False)
    store = Store(tmp_path / "cache")
    kernel, sig = _scaled_add()
    (first,) = compile_for_report(kernel, sig, cc=(9, 0), store=store)
    stamp = store.header(first.key).created
    (found,) = compile_for_report(kernel, sig, cc=(9, 0), store=store)
    assert found.cached and store.stats()["compiles"] == 1
    (again,) = compile_for_report(kernel, sig, cc=(9, 0), store=store, recache=True)
    assert not again.cached and again.key == first.key and again.compile_seconds > 0
    monkeypatch.setenv("KCACHE_RECACHE", "1")  # the default of recache=
    (third,) = compile_for_report(kernel, sig, cc=(9, 0), store=store)
    assert not third.cached
    (kept,) = compile_for_report(kernel, sig, cc=(9, 0), store=store, recache=False)
    assert kept.cached
    stats = store.stats()
    assert (stats["compiles"], stats["hits"], stats["misses"], stats["entries"]) == (3, 0, 0, 1)
    assert store.header(first.key).created >= stamp


def test_a_kcache_dispatcher_under_recache_compiles_over_its_entry(tmp_path, monkeypatch, caplog):
    """The dispatcher's path (a fake GPU, tests/test_dispatcher_fakegpu.py): a second
    dispatcher with KCACHE_RECACHE=1 compiles although the entry is there, counts a miss and
    a compile, and KCACHE_EXPLAIN says recache."""
    pytest.importorskip("numba.cuda")
    from numba.cuda import types
    from test_dispatcher_fakegpu import _kernels, fake_gpu
    from kcache.dispatcher import set_explain
    store = Store(tmp_path / "cache")
    sig = (types.float32[::1],)
    monkeypatch.delenv("KCACHE_RECACHE", raising=False)
    with fake_gpu((9, 0)):
        first = _kernels(store)
        first.compile(sig)
        monkeypatch.setenv("KCACHE_RECACHE", "1")
        set_explain(True)
        try:
            with caplog.at_level(logging.WARNING, logger="kcache.explain"):
                again = _kernels(store)
                again.compile(sig)
        finally:
            set_explain(False)
    assert again.stats.cache_hits[sig] == 0 and again.stats.cache_misses[sig] == 1
    assert again.stats.compiles == 1 and again.stats.keys[sig] == first.stats.keys[sig]
    assert any("recache: KCACHE_RECACHE is set" in r.getMessage() for r in caplog.records)
    stats = store.stats()
    assert (stats["hits"], stats["misses"], stats["compiles"], stats["entries"]) == (0, 2, 2, 1)


SIGS = "kern:double  void(float32[::1])\n"
KERNEL = textwrap.dedent("""
    from numba import cuda

    @cuda.jit
    def double(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] *= 2
""")


def _warm(tmp_path, *extra, env=None):
    full = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    full.update(KCACHE_DIR=str(tmp_path / "cache"), **(env or {}))
    done = subprocess.run([sys.executable, "-m", "kcache", "warm", "kern.py", "--signatures",
                           "kern.sigs", "--cc", "9.0", "--json", *extra], cwd=tmp_path,
                          env=full, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_warm_recache(tmp_path):
    (tmp_path / "kern.py").write_text(KERNEL)
    (tmp_path / "kern.sigs").write_text(SIGS)
    first = _warm(tmp_path)
    assert first["summary"]["compiled"] == 1 and first["recache"] is False
    assert _warm(tmp_path)["summary"]["cached"] == 1
    dry = _warm(tmp_path, "--recache", "--dry-run")
    assert dry["summary"]["would_compile"] == 1 and dry["recache"] is True
    again = _warm(tmp_path, "--recache")
    assert again["summary"] == {**again["summary"], "compiled": 1, "cached": 0}
    assert again["results"][0]["key"] == first["results"][0]["key"]
    by_env = _warm(tmp_path, env={"KCACHE_RECACHE": "1"})
    assert by_env["summary"]["compiled"] == 1 and by_env["recache"] is True
    stats = Store(tmp_path / "cache").stats()
    assert (stats["compiles"], stats["hits"], stats["entries"]) == (3, 0, 1)

"""An entry that passes the store's checks but is refused when the front-end rebuilds the kernel
from it (a ``frontend`` label that is not the dispatcher's, a refused exception class: forged
with a valid checksum, as a planted entry would be) is corrupt: quarantined from the writable
root (a read-only layer's remembered for the process), counted as a miss and a corrupt entry,
never as a hit, and compiled and stored again over it, so that the next process hits. The
user's call gets the right kernel. Real processes and files; no GPU (a child stands in for
one: tests/test_dispatcher_fakegpu.py's ``fake_gpu``, tests/mlirkit.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kcache import Entry, Store, make_key
from kcache.warn import KcacheWarning

TESTS = Path(__file__).resolve().parent


# --- the store: Store.reject -------------------------------------------------------------------

def _entry(payload: bytes = b"x" * 64) -> Entry:
    return Entry({"blob": payload}, {"kernel": "m:k", "compile_seconds": 2.5})


def test_reject_counts_the_hit_as_a_miss_and_quarantines_the_file(tmp_path):
    store = Store(tmp_path / "cache")
    key = make_key({"refused": 1})
    store.put(key, _entry())
    entry, hit = store.get_or_create(key, lambda: pytest.fail("a hit compiles nothing"))
    assert hit
    with pytest.warns(KcacheWarning, match=r"corrupt cache entry .* \(refused by the "
                      r"rebuild of m:k: NotStorable: forged\); treated as a miss, moved to"):
        store.reject(key, entry, "refused by the rebuild of m:k: NotStorable: forged")
    stats = store.stats()
    assert (stats.hits, stats.misses, stats.corrupt, stats.seconds_saved) == (0, 1, 1, 0)
    assert (stats.entries, stats.quarantine_files) == (0, 1)
    assert store.get(key) is None  # a plain miss now
    fresh, hit = store.get_or_create(key, lambda: _entry(b"y" * 64), recache=True, count=False)
    assert not hit and Store(tmp_path / "cache").load(key) == fresh
    assert store.stats().misses == 2 and store.stats().hits == 0


def test_reject_leaves_an_entry_replaced_meanwhile(tmp_path):
    """Another process replaced the refused entry with its own compile: that file is not the
    one refused and stays; only this lookup's count changes (a miss, not a hit)."""
    store = Store(tmp_path / "cache")
    key = make_key({"refused": 2})
    store.put(key, _entry())
    served, _hit = store.get_or_create(key, lambda: pytest.fail("hit"))
    Store(tmp_path / "cache").put(key, _entry(b"z" * 64))  # the other process
    store.reject(key, served, "refused")
    stats = store.stats()
    assert (stats.hits, stats.misses, stats.corrupt, stats.quarantine_files) == (0, 1, 0, 0)
    assert store.load(key).artifacts["blob"] == b"z" * 64


def _as_layer(folder: Path, kind: str) -> Path:
    """The read-only layer holding ``folder``'s entries: the folder itself, or a bundle file
    of them (format 3, served in place)."""
    if kind == "folder":
        return folder
    from kcache.tiers.bundle.v2 import write_bundle
    store, path = Store(folder), folder.parent / "layer.kcb"
    write_bundle(path, [({"key": k}, store.entry_bytes(k)) for k in (e.key for e in store.entries())], version=3)
    path.chmod(0o644)
    return path


def _layer_bytes(layer: Path) -> list:
    return [layer.read_bytes()] if layer.is_file() else sorted(
        p.read_bytes() for p in layer.rglob("*.kce"))


@pytest.mark.parametrize("kind", ["folder", "bundle"])
def test_reject_remembers_a_layer_file_and_leaves_it(tmp_path, kind):
    key = make_key({"refused": 3})
    Store(tmp_path / "layer").put(key, _entry())
    layer = _as_layer(tmp_path / "layer", kind)
    before = _layer_bytes(layer)
    store = Store(tmp_path / "cache", readonly_dirs=[layer])
    served = store.get(key)
    with pytest.warns(KcacheWarning, match=r"\(refused\); treated as a miss, left in "
                      r"place \(read-only\)"):
        store.reject(key, served, "refused")
    assert store.get(key) is None  # remembered as bad for this process: not read again
    stats = store.stats()
    assert (stats.hits, stats.misses, stats.corrupt) == (0, 2, 1)
    assert _layer_bytes(layer) == before  # never moved
    assert Store(tmp_path / "other", readonly_dirs=[layer]).get(key) == served


def test_reject_is_a_no_op_when_disabled(tmp_path):
    store = Store(tmp_path / "cache")
    key = make_key({"refused": 4})
    store.put(key, _entry())
    entry = store.get(key)
    store.disabled = True
    store.reject(key, entry, "refused")
    store.disabled = False
    assert store.get(key) == entry
    with pytest.raises(ValueError):
        store.reject("not a key", entry, "refused")


# --- numba-cuda kernels, in real processes -----------------------------------------------------

KERNEL = textwrap.dedent("""\
    import kcache


    @kcache.jit(debug=True, opt=False)
    def k(a):
        if a[0] < 0:
            raise ValueError("negative input")
        a[0] = 1
    """)

#: One process: kern.k compiled or served for float32[::1] on a stand-in GPU (cc 9.0), then
#: what the dispatcher and its store counted, and the warnings said.
CHILD = textwrap.dedent("""\
    import json, sys, warnings
    sys.path[:0] = sys.argv[1:3]
    from numba.cuda import types
    from test_dispatcher_fakegpu import fake_gpu
    import kcache, kern
    sig = (types.float32[::1],)
    with fake_gpu((9, 0)), warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        kernel = kern.k.compile(sig)
    st = kern.k.stats
    print(json.dumps({
        "hits": st.cache_hits[sig], "misses": st.cache_misses[sig], "compiles": st.compiles,
        "uncached": list(st.uncached.values()), "key": st.keys[sig],
        "exceptions": sorted({c.__name__ for c, _a, _l in kernel.call_helper.exceptions.values()}),
        "warnings": [str(w.message) for w in said], "explained": kcache.explain(kern.k)}))
    """)


def _child(src: Path, env: dict) -> dict:
    full = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    full.update(env, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([sys.executable, "-c", CHILD, str(TESTS), str(src)], env=full,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _forge(root: Path, key: str, change) -> None:
    """Replace ``key``'s entry in ``root`` by one whose meta ``change`` altered, written by the
    store itself: checksum, format and artifact checks all pass."""
    store = Store(root)
    entry, header = store.load(key), store.header(key)
    meta = dict(entry.meta)
    change(meta)
    assert store.put(key, Entry(artifacts=dict(entry.artifacts), meta=meta),
                     components=header.components)


def _relabel(meta):
    meta["frontend"] = "planted-frontend"


def _exit_class(meta):
    assert meta["exceptions"]
    meta["exceptions"] = {code: ["builtins:SystemExit", args, loc]
                          for code, (_name, args, loc) in meta["exceptions"].items()}


@pytest.fixture
def src(tmp_path):
    pytest.importorskip("numba.cuda")
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "kern.py").write_text(KERNEL)
    return folder


def _counts(root: Path) -> tuple:
    s = Store(root).stats()
    return s.hits, s.misses, s.compiles, s.corrupt


@pytest.mark.parametrize("change", [_relabel, _exit_class], ids=["frontend", "SystemExit"])
def test_a_refused_entry_is_quarantined_and_replaced(src, tmp_path, change):
    root = tmp_path / "cache"
    env = {"KCACHE_DIR": str(root)}
    first = _child(src, env)
    assert first["compiles"] == 1
    _forge(root, first["key"], change)
    Store(root).zero_stats()
    planted = Store(root).entry_bytes(first["key"])

    second = _child(src, env)
    assert (second["hits"], second["misses"], second["compiles"]) == (0, 1, 1)
    assert second["uncached"] == [] and second["exceptions"] == ["ValueError"]
    assert _counts(root) == (0, 1, 1, 1)  # hits, misses, compiles, corrupt
    quarantined = list((root / "v1" / "quarantine").iterdir())
    assert [p.read_bytes() for p in quarantined] == [planted]
    assert Store(root).entry_bytes(first["key"]) not in (None, planted)  # replaced
    said = [w for w in second["warnings"] if "corrupt cache entry" in w]
    assert len(said) == 1 and "refused by the rebuild of kern:k" in said[0]

    third = _child(src, env)
    assert (third["hits"], third["misses"], third["compiles"]) == (1, 0, 0)
    assert third["exceptions"] == ["ValueError"] and third["warnings"] == []
    assert _counts(root) == (1, 1, 1, 1)


@pytest.mark.parametrize("kind", ["folder", "bundle"])
def test_a_refused_entry_of_a_read_only_layer_stays_and_the_root_gets_a_good_one(src, tmp_path, kind):
    folder, root = tmp_path / "layer", tmp_path / "cache"
    made = _child(src, {"KCACHE_DIR": str(folder)})
    _forge(folder, made["key"], _relabel)
    layer = _as_layer(folder, kind)
    planted = _layer_bytes(layer)
    env = {"KCACHE_DIR": str(root), "KCACHE_READONLY_DIRS": str(layer)}

    second = _child(src, env)
    assert (second["hits"], second["misses"], second["compiles"]) == (0, 1, 1)
    assert _counts(root) == (0, 1, 1, 1)
    assert _layer_bytes(layer) == planted  # never moved
    assert not (folder / "v1" / "quarantine").exists() or not any(
        (folder / "v1" / "quarantine").iterdir())
    assert Store(root, readonly_dirs=[]).entry_bytes(made["key"]) is not None
    assert any("left in place (read-only)" in w for w in second["warnings"])
    assert not any("cache store failed" in w for w in second["warnings"]), second["warnings"]

    third = _child(src, env)  # the root's entry comes first
    assert (third["hits"], third["compiles"]) == (1, 0)
    assert _counts(root) == (1, 1, 1, 1)


def test_explain_says_why_a_refused_entry_was_compiled(src, tmp_path):
    root = tmp_path / "cache"
    first = _child(src, {"KCACHE_DIR": str(root)})
    _forge(root, first["key"], _relabel)
    second = _child(src, {"KCACHE_DIR": str(root), "KCACHE_EXPLAIN": "1"})
    assert second["compiles"] == 1
    (line,) = second["explained"]
    assert "miss: refused by the rebuild of kern:k: NotStorable: the entry holds a " \
           "planted-frontend kernel" in line and line.endswith("compiled, stored again")


# --- numba-cuda-mlir kernels, in real processes ------------------------------------------------

MLIR_CALL = """
    import kcache, kernels, warnings
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        cres = kernels.axpy.compile("{sig}")
    st = kernels.axpy.stats
    print(json.dumps({{
        "hits": sum(st.cache_hits.values()), "compiles": st.compiles,
        "keys": sorted(set(st.keys.values())), "uncached": st.uncached,
        "cubin": bytes(cres.metadata["cubin"]).hex(),
        "counts": dict(kcache.dispatcher.process_counts()),
        "warnings": [str(w.message) for w in said]}}))
"""


def _mlir_relabel(meta):
    meta["frontend"] = "numba-cuda"  # a numba-cuda label: lacks numba-cuda's fields, not checked


def _mlir_exit_class(meta):
    meta["exceptions"] = {"1": ["builtins:SystemExit", None, None]}


@pytest.mark.slow
@pytest.mark.parametrize("change", [_mlir_relabel, _mlir_exit_class],
                         ids=["frontend", "SystemExit"])
def test_a_refused_numba_cuda_mlir_entry_is_quarantined_and_replaced(tmp_path, change):
    pytest.importorskip("numba_cuda_mlir")
    sys.path.insert(0, str(TESTS))
    try:
        from mlirkit import SIG, run, write
    finally:
        sys.path.remove(str(TESTS))
    kernels = write(tmp_path / "src")
    source = (kernels / "kernels.py").read_text()
    source = source[:source.index('@cuda.jit("void')]  # no eager kernel: one key
    (kernels / "kernels.py").write_text(
        "import kcache\n" + source.replace("@cuda.jit\n", "@kcache.jit(frontend='numba-cuda-mlir')\n"))
    call = MLIR_CALL.format(sig=SIG)
    root = tmp_path / "cache"
    first = run(call, kernels, root)
    assert first["compiles"] == 1
    (key,) = first["keys"]
    _forge(root, key, change)
    Store(root).zero_stats()

    second = run(call, kernels, root)
    assert (second["hits"], second["compiles"], second["uncached"]) == (0, 1, {})
    assert second["cubin"] == first["cubin"]  # the right kernel
    assert (second["counts"].get("hits", 0), second["counts"].get("misses")) == (0, 1)
    assert _counts(root) == (0, 1, 1, 1)
    assert len(list((root / "v1" / "quarantine").iterdir())) == 1
    said = [w for w in second["warnings"] if "corrupt cache entry" in w]
    assert len(said) == 1 and "refused by the rebuild of kernels:axpy" in said[0]

    third = run(call, kernels, root)
    assert (third["hits"], third["compiles"]) == (1, 0) and third["cubin"] == first["cubin"]
    assert _counts(root) == (1, 1, 1, 1)

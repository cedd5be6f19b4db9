"""Explain lines: which key component differs from the nearest entry of the same kernel."""

import copy
import os

import pytest

import kcache
from kcache.dispatcher.misses import diff_components, explain_miss

BASE = {
    "format": 1,
    "kernel": "pkg.kernels:kern",
    "source": {"code": "c1", "dep:mathbits.step": "d1", "global:SCALE": "g1",
               "attr:consts.OFFSET": "a1", "closure:0": "k1", "default:scale": "s1"},
    "opaque": [],
    "signature": "(array(float32, 1d, C),)",
    "target": {"cc": "sm_80", "output": "cubin"},
    "toolchain": {"numba": "0.68.1", "nvvm": "2.0", "python": "3.11.7"},
    "options": {"debug": False, "fastmath": False, "opt": True, "max_registers": None},
    "link": {"ext.ptx": "l1"},
    "launch_config": None,
    "cache_key": "a",
}


def changed(**edits):
    new = copy.deepcopy(BASE)
    for path, value in edits.items():
        node = new
        *parents, leaf = path.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return new


@pytest.mark.parametrize("edits,expected", [
    ({"source__dep:mathbits.step": "d2"}, ["dependency mathbits.step changed"]),
    ({"source__global:SCALE": "g2"}, ["global SCALE changed"]),
    ({"source__attr:consts.OFFSET": "a2"}, ["module attribute consts.OFFSET changed"]),
    ({"source__closure:0": "k2"}, ["closure variable 0 changed"]),
    ({"source__default:scale": "s2"}, ["default of argument scale changed"]),
    ({"source__code": "c2"}, ["code changed"]),
    ({"source__global:NEW": "n"}, ["new global NEW"]),
    ({"target__cc": "sm_90a"}, ["cc sm_80 -> sm_90a"]),
    ({"target__output": "ptx"}, ["output cubin -> ptx"]),
    ({"toolchain__nvvm": "2.1"}, ["nvvm 2.0 -> 2.1"]),
    ({"signature": "(array(float64, 1d, C),)"},
     ["signature: argument 1 array(float32, 1d, C) -> array(float64, 1d, C)"]),
    ({"options__fastmath": True}, ["option fastmath False -> True"]),
    ({"options__max_registers": 32}, ["option max_registers None -> 32"]),
    ({"cache_key": "b"}, ["cache_key 'a' -> 'b'"]),
    ({"link__ext.ptx": "l2"}, ["link file ext.ptx changed"]),
    ({"launch_config": [[1], [128], 0]}, ["launch config None -> [[1], [128], 0]"]),
])
def test_diff_lines(edits, expected):
    assert diff_components(BASE, changed(**edits)) == expected


def test_diff_orders_source_first_and_lists_all():
    new = changed(**{"toolchain__nvvm": "2.1", "source__global:SCALE": "g2",
                     "target__cc": "sm_90a"})
    assert diff_components(BASE, new) == ["global SCALE changed", "cc sm_80 -> sm_90a",
                                          "nvvm 2.0 -> 2.1"]
    assert diff_components(BASE, copy.deepcopy(BASE)) == []


def test_diff_tolerates_malformed_input():
    assert diff_components({}, BASE)  # every component reported as new, no exception
    assert diff_components(None, None) == []
    assert diff_components({"source": "x"}, {"source": {"code": "c"}}) == [
        "source 'x' -> {'code': 'c'}"]


def _put(store, components, key_byte):
    key = kcache.make_key(components)
    entry = kcache.Entry({"cubin": bytes([key_byte]) * 16},
                         {"kernel": components["kernel"], "signature": components["signature"],
                          "arch": components["target"]["cc"], "compile_seconds": 0.1})
    assert store.put(key, entry, components=components)
    return key


def test_explain_miss_uses_nearest_entry_of_same_kernel(tmp_path):
    store = kcache.Store(tmp_path / "cache")
    far = changed(**{"target__cc": "sm_90a", "toolchain__nvvm": "2.1", "cache_key": "z"})
    near = changed(**{"target__cc": "sm_90a"})
    other_kernel = changed(kernel="pkg.kernels:other")
    for i, comps in enumerate((far, near, other_kernel)):
        _put(store, comps, i)
    assert explain_miss(store, BASE) == ["cc sm_90a -> sm_80"]


def test_explain_miss_without_entries(tmp_path):
    store = kcache.Store(tmp_path / "cache")
    assert explain_miss(store, BASE) == ["no entry of this kernel yet"]
    _put(store, changed(kernel="pkg.kernels:other"), 1)
    assert explain_miss(store, BASE) == ["no entry of this kernel yet"]


def test_explain_miss_with_broken_store_says_so():
    class Broken:
        def entries(self):
            raise OSError("disk on fire")

    lines = explain_miss(Broken(), BASE)
    assert len(lines) == 1 and "disk on fire" in lines[0]


def test_explain_real_kernels(tmp_path):
    """End to end with components of real (uncompiled) kernels."""
    cuda = pytest.importorskip("numba.cuda")
    from kcache.dispatcher.components import kernel_components
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND

    def make(factor):
        @cuda.jit
        def kern(out, a):
            out[0] = a[0] * factor

        return kern

    store = kcache.Store(tmp_path / "cache")
    sig = "(array(float32, 1d, C), array(float32, 1d, C))"
    first = make(2.0)
    old = kernel_components(first, frontend=FRONTEND, signature=sig, cc=(8, 0),
                            targetoptions=first.targetoptions)
    _put(store, old, 1)
    second = make(3.0)
    new = kernel_components(second, frontend=FRONTEND, signature=sig, cc=(9, 0),
                            targetoptions=dict(second.targetoptions, fastmath=True))
    assert explain_miss(store, new) == ["closure variable 0 changed", "cc sm_80 -> sm_90a",
                                        "option fastmath False -> True"]


@pytest.mark.parametrize("value,on,warned", [("1", True, False), ("yes", True, False),
                                             ("false", False, False), ("off", False, False),
                                             ("", False, False), ("bogus", False, True)])
def test_kcache_explain_reads_as_every_boolean_setting(value, on, warned):
    import subprocess
    import sys
    env = dict(os.environ, KCACHE_EXPLAIN=value)
    done = subprocess.run([sys.executable, "-c", "from kcache.dispatcher import dispatcher as D;"
                           "print(D.explain_enabled())"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.strip() == str(on)
    assert ("KCACHE_EXPLAIN='bogus' is not a boolean; accepted: 1/0" in done.stderr) == warned


def test_a_signature_miss_names_the_changed_argument_in_short_form():
    """numba's reprs (``Array(float32, 1, 'C', False, aligned=True)``) are read back to types
    and named as users write them; only the arguments that differ are named."""
    T = pytest.importorskip("numba.cuda").types
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
    old = str((T.float32[::1], T.float32, T.float32[:, ::1]))
    new = str((T.float32[::1], T.float64, T.float64[:, ::1]))
    assert diff_components({"signature": old}, {"signature": new}, FRONTEND) == [
        "signature: argument 2 float32 -> float64",
        "signature: argument 3 float32[:, ::1] -> float64[:, ::1]"]
    fewer = str((T.float32[::1],))
    assert diff_components({"signature": old}, {"signature": fewer}, FRONTEND) == [
        "signature (float32[::1], float32, float32[:, ::1]) -> (float32[::1])"]
    readonly = str((T.Array(T.float32, 1, "C", readonly=True), T.float32, T.float32[:, ::1]))
    assert diff_components({"signature": old}, {"signature": readonly}, FRONTEND) == [
        "signature: argument 1 float32[::1] -> Array(float32, 1, 'C', readonly=True)"]
    # without a front-end (no numba types to read them back) the arguments are as held
    assert diff_components({"signature": old}, {"signature": new})[0] == (
        "signature: argument 2 float32 -> float64")
    # an entry's text that is no signature at all: quoted, escaped and cut, never raised
    assert diff_components({"signature": "(\x1b[31m" + "x" * 500 + ",)"},
                           {"signature": 7})[0].startswith("signature (\\x1b[31mxxx")


def test_a_cc_miss_names_the_arch_the_front_end_compiles():
    """numba-cuda-mlir compiles cc 9.0 as sm_90 while the key's target holds sm_90a (the
    device's cc in numba-cuda's spelling): the line names sm_90, as the entry's arch and the
    headline ``... for sm_90: miss: ...`` do, not ``cc sm_80 -> sm_90a`` (a user trial)."""
    pytest.importorskip("numba_cuda_mlir")
    from kcache.dispatcher.frontends.numba_cuda_mlir.bridge import FRONTEND as MLIR
    nine = changed(**{"target__cc": "sm_90a"})
    assert diff_components(BASE, nine, MLIR) == ["cc sm_80 -> sm_90"]
    assert diff_components(nine, BASE, MLIR) == ["cc sm_90 -> sm_80"]
    # numba-cuda compiles sm_90a: named as before; without a front-end, as the key holds it
    numba_cuda = pytest.importorskip("kcache.dispatcher.frontends.numba_cuda.bridge")
    assert diff_components(BASE, nine, numba_cuda.FRONTEND) == ["cc sm_80 -> sm_90a"]
    assert diff_components(BASE, nine) == ["cc sm_80 -> sm_90a"]
    # an entry's cc that is no cc: escaped and cut as any value, never raised
    odd = changed(**{"target__cc": "\x1b[31m" + "x" * 500})
    assert diff_components(odd, BASE, MLIR)[0].startswith("cc \\x1b[31mxxx")


def test_kcache_explain_on_a_signature_miss_is_brief(tmp_path):
    """A real process: compile_for float32[::1], then float64[::1] with KCACHE_EXPLAIN=1: the
    miss line names argument 1 in short form, not numba's reprs of every argument."""
    import subprocess
    import sys
    (tmp_path / "kern.py").write_text(
        "from numba import cuda\nimport kcache\n\n@kcache.jit\ndef put(out, x):\n"
        "    i = cuda.grid(1)\n    if i < out.size:\n        out[i] = x[i]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env.update(KCACHE_DIR=str(tmp_path / "cache"), KCACHE_EXPLAIN="1")
    code = ("import kcache, kern\n"
            "kcache.compile_for(kern.put, ['void(float32[::1], {0}[::1])'], cc='9.0')\n")
    for dtype in ("float32", "float64"):
        done = subprocess.run([sys.executable, "-c", code.format(dtype)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    [line] = [l for l in done.stderr.splitlines() if "miss:" in l]
    assert line.endswith("miss: signature: argument 2 float32[::1] -> float64[::1]"), line
    assert "aligned=True" not in line and len(line) < 160

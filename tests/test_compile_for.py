"""compile_for: entries for explicit compute capabilities on a machine with no GPU.

Covers the round trip (store -> load -> identical cubin bytes, PTX ``.target`` per cc), the
example kernels (device function in a second module) and the module-level kernels of
numba-cuda's own ``cache_usecases`` for cc 8.0 and 9.0, key agreement with a process that
compiles through the dispatcher, and loading an entry in a fresh process without numba's
target/typing context and without any pickle-family loader.
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numba.cuda")

pytestmark = pytest.mark.compat  # runs in every leg of tests/compat/run.sh (docs/compat.md)

import kcache  # noqa: E402
from kcache import arch as kc_arch  # noqa: E402
from kcache.dispatcher import (CompileForError, compile_for,  # noqa: E402
                               compile_for_report, parse_cc)
from kcache.dispatcher.frontends.numba_cuda import compiling as _nc_compiling  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda import internals as _nc_internals  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda import signatures as _nc_signatures  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # examples/ is not an installed package
CCS = [(8, 0), (9, 0)]


@pytest.fixture
def store(tmp_path):
    return kcache.Store(tmp_path / "cache")


def _ptx_target(entry):
    lines = entry.artifacts["ptx"].decode().splitlines()
    return [line.split()[1] for line in lines if line.startswith(".target")]


@pytest.mark.slow
def test_examples_round_trip_for_each_cc(store):
    from examples import kernels
    for kernel, sigs in kernels.SIGNATURES.items():
        keys = compile_for(kernel, sigs, cc=CCS, store=store)
        assert len(keys) == len(CCS) * len(sigs) and len(set(keys)) == len(keys)
        for key, cc, arch in zip(keys, CCS, ["sm_80", "sm_90a"]):
            entry = store.load(key)
            assert entry.meta["arch"] == arch
            assert _ptx_target(entry) == [arch]
            assert entry.artifacts["cubin"][:4] == b"\x7fELF"
            # The cubin is what numba-cuda would load: rebuild a kernel, compare bytes.
            rebuilt = _rebuild(entry, sigs[0], cc)
            lib = rebuilt._codelibrary
            assert lib._cubin_cache[kc_arch.full_cc(cc)].code == entry.artifacts["cubin"]
            assert rebuilt.entry_name == entry.meta["entry_name"]
        assert kernel.overloads == {}  # compile_for leaves the dispatcher untouched
    stats = store.stats()
    assert stats["compiles"] == 6 and stats["entries"] == 6


def _rebuild(entry, sig, cc):
    from kcache.dispatcher.kernel_entry import entry_to_kernel
    return entry_to_kernel(FRONTEND, entry, _nc_signatures.normalize_signature(sig),
                           kc_arch.full_cc(cc), extensions=[])


@pytest.mark.slow
def test_present_entries_are_not_recompiled(store):
    from examples import kernels
    sig = kernels.SIGNATURES[kernels.scaled_add]
    first = compile_for(kernels.scaled_add, sig, cc=(9, 0), store=store)
    again = compile_for(kernels.scaled_add, sig, cc="sm_90", store=store)
    assert first == again
    assert store.stats()["compiles"] == 1


def test_device_function_compiled_afresh_per_cc(store):
    """The device function of examples/mathbits.py is compiled for each cc, and its
    dispatcher keeps its own overloads afterwards."""
    from examples import kernels, mathbits
    before = dict(mathbits.axpy.overloads)
    keys = compile_for(kernels.scaled_add, kernels.SIGNATURES[kernels.scaled_add], cc=CCS,
                       store=store)
    assert mathbits.axpy.overloads == before
    ptx80, ptx90 = (store.load(k).artifacts["ptx"].decode() for k in keys)
    for ptx, arch in ((ptx80, "sm_80"), (ptx90, "sm_90a")):
        assert f".target {arch}" in ptx
        assert "fma.rn.f32" in ptx or "mul.f32" in ptx  # axpy inlined into the kernel


def _usecase_kernels():
    from numba.cuda.tests.cudapy import cache_usecases as cu
    f64_0d = np.zeros((), np.float64)
    i64_0d = np.zeros((), np.int64)
    packed = cu.packed_arr
    cases = [
        (cu.add_usecase_kernel, (f64_0d, f64_0d, f64_0d)),
        (cu.add_nocache_usecase_kernel, (f64_0d, f64_0d, f64_0d)),
        (cu.outer_kernel, (f64_0d, f64_0d, f64_0d)),
        (cu.outer_uncached_kernel, (f64_0d, f64_0d, f64_0d)),
        (cu.record_return, (np.zeros((), packed.dtype), packed, 1)),
        (cu.record_return, (np.zeros((), cu.aligned_arr.dtype), cu.aligned_arr, 1)),
        (cu.many_locals, ()),
        (cu.simple_usecase_kernel, (i64_0d, i64_0d)),
    ]
    cases += [(uc.func, (i64_0d, i64_0d)) for uc in
              (cu.closure1, cu.closure2, cu.closure3, cu.closure4)]
    cases += [(uc.func, (f64_0d, f64_0d)) for uc in (cu.renamed_function1, cu.renamed_function2)]
    return [(k, tuple(k.typeof_pyval(a) for a in args)) for k, args in cases]


@pytest.mark.slow
def test_numba_cuda_cache_usecases_compile_for_80_and_90(store):
    pytest.importorskip("filecheck")  # numba.cuda.testing (imported by cache_usecases) needs it
    keys_by_case = []
    for kernel, argtypes in _usecase_kernels():
        keys = compile_for(kernel, [argtypes], cc=CCS, store=store)
        keys_by_case.append(keys)
        for key, arch in zip(keys, ("sm_80", "sm_90a")):
            assert _ptx_target(store.load(key)) == [arch]
    flat = [k for keys in keys_by_case for k in keys]
    assert len(set(flat)) == len(flat)  # closures, renamed functions, records: distinct keys


def test_bad_arguments_get_one_clear_message(store):
    from examples import kernels, mathbits
    sig = kernels.SIGNATURES[kernels.scaled_add]
    with pytest.raises(ValueError, match="compute capability"):
        compile_for(kernels.scaled_add, "void(float32[::1])", cc="ninety", store=store)
    # cc the toolkit cannot compile for: named with the supported list (asked from NVRTC),
    # not numba's "Can't use arch-specific compute_999a" from deep inside the compile.
    with pytest.raises(ValueError, match=r"cc 99\.9 is not supported .*supported: .*9\.0"):
        compile_for(kernels.scaled_add, sig, cc=(99, 9), store=store)
    with pytest.raises(ValueError, match=r"cc 8\.1 \(given as 'sm_81'\) is not supported"):
        compile_for(kernels.scaled_add, sig, cc="sm_81", store=store)  # numba would use 8.0
    with pytest.raises(ValueError, match=r"cc=\(9,\)"):  # the user's value, quoted as given
        compile_for(kernels.scaled_add, sig, cc=(9,), store=store)
    with pytest.raises(ValueError, match=r"signature 'garbage\(' is not a numba kernel signature"):
        compile_for(kernels.scaled_add, "garbage(", store=store)
    # Wrong argument count: one ValueError naming both, not numba's TypeError from deep in
    # its pipeline (FixupArgs), and before compiling anything.
    with pytest.raises(ValueError, match=r"signature 'void\(float32\[:\]\)' has 1 argument; "
                       r"kernel examples\.kernels:scaled_add takes \d+ \("):
        compile_for(kernels.scaled_add, "void(float32[:])", store=store)
    with pytest.raises(TypeError, match=r"store must be a kcache.Store or None, not str"):
        compile_for(kernels.scaled_add, sig, store="x")
    assert store.stats()["compiles"] == 0  # rejected before compiling anything
    with pytest.raises(TypeError, match="device function"):
        compile_for(mathbits.axpy, "float32(float32, float32, float32)", store=store)
    with pytest.raises(TypeError, match="signatures"):
        compile_for(kernels.scaled_add, [], store=store)
    with pytest.raises(TypeError, match="kernel made by"):
        compile_for(len, "void()", store=store)
    assert parse_cc("sm_90a") == (9, 0) and parse_cc("8.6") == (8, 6) and parse_cc((7, 5)) == (7, 5)
    assert parse_cc((9, 0, "a")) == (9, 0) and parse_cc(90) == (9, 0) and parse_cc("9.0a") == (9, 0)


_FILL = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import kcache
    from kcache.dispatcher import compile_for
    from examples import kernels
    store, keys, cubins = kcache.Store(), [], {}
    for kernel, sigs in kernels.SIGNATURES.items():
        (key,) = compile_for(kernel, sigs, cc=(9, 0), store=store)
        keys.append(key)
        cubins[kernel.py_func.__name__] = store.load(key).artifacts["cubin"].hex()
    print(json.dumps([keys, cubins]))
""")

_CHILD = textwrap.dedent("""
    import json, sys

    def pickle_family():
        return {m for m in sys.modules if m.split(".")[-1] in
                ("pickle", "_pickle", "cloudpickle", "dill", "_compat_pickle")}  # marshal: always loaded (importlib)

    # 1. The store alone, in a clean process: reading every entry imports no pickle module.
    import kcache
    store = kcache.Store()
    for key in sys.argv[2].split(","):
        assert store.get(key) is not None, key
    out = {"store_pickle_modules": sorted(pickle_family())}

    # 2. The dispatcher's hit path (numba itself imports pickle modules: compare before and
    #    after, and make every pickle-family loader raise).
    import pickle, marshal
    import kcache.dispatcher
    from kcache.dispatcher import install
    from kcache.dispatcher.frontends.numba_cuda import compiling as _nc_compiling
    from kcache.dispatcher.frontends.numba_cuda import internals as _nc_internals
    from kcache.dispatcher.frontends.numba_cuda import signatures as _nc_signatures
    from numba.cuda.target import CUDATargetContext, CUDATypingContext

    def forbidden(*a, **k):
        raise AssertionError("a pickle-family loader was called while loading an entry")

    def no_refresh(self):
        raise AssertionError("numba's target/typing context was refreshed on a hit")

    CUDATargetContext.refresh = no_refresh
    CUDATypingContext.refresh = no_refresh
    sys.path.insert(0, sys.argv[1])
    install("cache")                        # transparent mode: kernels use cache=True
    # imported first: importing a module from bytecode is marshal.loads (Python's own import)
    from examples import kernels
    pickle.loads = pickle.load = marshal.loads = marshal.load = forbidden
    pickle.Unpickler = forbidden
    before = pickle_family()
    # A GPU would report its cc and bind the cubin; stand in for both.
    _nc_signatures.current_cc = lambda: (9, 0)
    _nc_internals.Kernel.bind = lambda self: None
    for kernel, sigs in kernels.SIGNATURES.items():
        k = kernel.compile(_nc_signatures.normalize_signature(sigs[0]))
        s = kernel.stats
        cubin = k._codelibrary._cubin_cache[(9, 0, "a")].code
        out[kernel.py_func.__name__] = {"hits": sum(s.cache_hits.values()),
                                        "misses": sum(s.cache_misses.values()),
                                        "compiles": s.compiles, "cubin": cubin.hex(),
                                        "class": type(kernel).__name__}
    out["new_pickle_modules"] = sorted(pickle_family() - before)
    print(json.dumps(out))
""")


@pytest.mark.exec_children  # what a fresh interpreter imports
@pytest.mark.slow
def test_gpu_process_hits_compile_for_entries_without_target_context_or_pickle(tmp_path):
    """Entries warmed by compile_for are hit by a process that computes keys itself
    (same key), rebuilt without refreshing numba's contexts and without pickle."""
    env = dict(os.environ, KCACHE_DIR=str(tmp_path / "cache"))
    env.pop("KCACHE_ENABLE", None)
    # Warmed in a process of its own: a test run earlier in this one may have left extension
    # registrations (an @overload), which are rightly in this process's keys, not the child's.
    fill = subprocess.run([sys.executable, "-c", _FILL, str(REPO)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert fill.returncode == 0, fill.stderr[-3000:]
    keys, cubins = json.loads(fill.stdout.strip().splitlines()[-1])
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(REPO), ",".join(keys)],
                          env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out.pop("store_pickle_modules") == []
    assert out.pop("new_pickle_modules") == []
    for name, row in out.items():
        assert row["class"] == "KCacheDispatcher"
        assert (row["hits"], row["misses"], row["compiles"]) == (1, 0, 0), (name, row)
        assert row["cubin"] == cubins[name]


# --- compile_for must store what it compiles, or fail -----------------------------------------


def _scaled_add():
    from examples import kernels
    return kernels.scaled_add, kernels.SIGNATURES[kernels.scaled_add]


def test_disabled_store_is_an_error_naming_each_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("KCACHE_DISABLE", "1")
    kernel, sig = _scaled_add()
    with pytest.raises(CompileForError) as info:
        compile_for(kernel, sig, cc=[(8, 0), (9, 0)], store=kcache.Store(tmp_path / "c"))
    err = info.value
    assert isinstance(err, kcache.KcacheError)
    text = str(err)
    assert "KCACHE_DISABLE" in text and "examples.kernels:scaled_add" in text
    assert "for cc 8.0 (sm_80)" in text and "for cc 9.0 (sm_90a)" in text
    assert "(array(float32, 1d, C), array(float32, 1d, C), array(float32, 1d, C))" in text
    assert [f.arch for f in err.failures] == ["sm_80", "sm_90a"] and err.results == []


def test_unwritable_root_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "afile").write_text("not a directory")
    store = kcache.Store(tmp_path / "afile" / "sub")  # ENOTDIR even for root
    kernel, sig = _scaled_add()
    compiles = []
    real_compile = _nc_compiling.compile_kernel
    monkeypatch.setattr(_nc_compiling, "compile_kernel",
                        lambda *a: compiles.append(a) or real_compile(*a))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the store's own "cannot write" warning
        with pytest.raises(CompileForError, match="cannot be written") as info:
            compile_for(kernel, sig, cc=[(8, 0), (9, 0)], store=store)
    assert [f.arch for f in info.value.failures] == ["sm_80", "sm_90a"]
    assert len(compiles) <= 1  # once the root proved unwritable, nothing more is compiled


def test_entries_that_can_be_stored_are_stored_before_the_error(store, monkeypatch):
    """put() refuses the sm_80 entry only: the sm_90a one is stored, the error names sm_80."""
    kernel, sig = _scaled_add()
    real_put = store.put
    refused = []

    def put(key, entry, **kw):
        if entry.meta.get("arch") == "sm_80":
            refused.append(key)
            return False
        return real_put(key, entry, **kw)

    monkeypatch.setattr(store, "put", put)
    with pytest.raises(CompileForError) as info:
        compile_for(kernel, sig, cc=[(8, 0), (9, 0)], store=store)
    err = info.value
    assert [f.arch for f in err.failures] == ["sm_80"] and "not kept" in err.failures[0].reason
    assert [r.arch for r in err.results] == ["sm_90a"]
    assert store.header(err.results[0].key) is not None and store.header(refused[0]) is None


def test_an_entry_evicted_by_a_later_one_of_the_same_call_is_a_failure(tmp_path):
    """A cap that holds one entry but not two: the sm_90a put evicts the sm_80 entry stored
    just before it. compile_for must not report sm_80 as stored (its results are "the entries
    that are in the store"): it is a failure naming the size cap."""
    kernel, sig = _scaled_add()
    store = kcache.Store(tmp_path / "cache", max_size="30K")  # an entry is about 22 KiB
    with pytest.raises(CompileForError, match="max_size") as info:
        compile_for(kernel, sig, cc=[(8, 0), (9, 0)], store=store)
    err = info.value
    assert [f.arch for f in err.failures] == ["sm_80"], str(err)
    assert "evicted" in err.failures[0].reason and "30720 bytes" in err.failures[0].reason
    assert [r.arch for r in err.results] == ["sm_90a"]
    assert all(store.header(r.key) is not None for r in err.results)


def test_uncacheable_kernel_is_an_error(store):
    from numba import cuda

    class FakeDeviceArray:  # what the fingerprint checks: the CUDA array interface
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0, False),
                                    "version": 3}

    captured = FakeDeviceArray()

    def body(a):
        a[0] = captured[0]

    body.__globals__["captured"] = captured
    kernel = cuda.jit(body)
    with pytest.raises(CompileForError, match="cannot be cached.*device array"):
        compile_for(kernel, "void(float32[::1])", cc=(9, 0), store=store)


def test_report_says_compiled_or_already_cached(store):
    kernel, sig = _scaled_add()
    (first,) = compile_for_report(kernel, sig, cc=(9, 0), store=store)
    (again,) = compile_for_report(kernel, sig, cc=(9, 0), store=store)
    assert not first.cached and first.compile_seconds > 0 and first.arch == "sm_90a"
    assert again.cached and again.compile_seconds == 0.0 and again.key == first.key


def test_finding_an_entry_is_not_a_hit(store):
    """compile_for's "already cached" is an existence check: no hit, no miss, no seconds
    saved (only the one compile is counted), whatever form the cc is given in."""
    kernel, sig = _scaled_add()
    (first,) = compile_for_report(kernel, sig, cc=(9, 0), store=store)
    for cc in ((9, 0), "9.0a", (9, 0, "a"), "sm_90", 90):
        (again,) = compile_for_report(kernel, sig, cc=cc, store=store)
        assert again.cached and again.key == first.key and again.arch == "sm_90a"
    stats = store.stats()
    assert (stats["hits"], stats["misses"], stats["compiles"]) == (0, 0, 1)
    assert stats["seconds_saved"] == 0.0
    info = store.header(first.key)
    assert getattr(info, "hits", 0) == 0


def test_finding_an_entry_on_the_remote_is_not_a_hit_either(tmp_path, monkeypatch):
    """With a remote tier (a file:// folder): compile_for's existence check that finds the
    entry on the remote counts no remote hit (nor a remote miss where it is absent), as
    docs/warm.md says; a use (Store.get) still counts its remote hit."""
    pytest.importorskip("fsspec")
    monkeypatch.setenv("KCACHE_REMOTE", (tmp_path / "remote").as_uri())
    kernel, sig = _scaled_add()
    one = kcache.Store(tmp_path / "one")
    (made,) = compile_for_report(kernel, sig, cc=(9, 0), store=one)
    assert not made.cached and one.stats()["remote_puts"] == 1
    assert one.stats()["remote_misses"] == 0  # absent there: checked, not counted
    other = kcache.Store(tmp_path / "other")
    (found,) = compile_for_report(kernel, sig, cc=(9, 0), store=other)
    assert found.cached and found.key == made.key
    stats = other.stats()
    assert (stats["remote_hits"], stats["remote_misses"], stats["hits"], stats["misses"],
            stats["compiles"]) == (0, 0, 0, 0, 0)
    third = kcache.Store(tmp_path / "third")
    assert third.get(made.key) is not None and third.stats()["remote_hits"] == 1


_LOCAL_HIT = """
import sys
sys.path.insert(0, sys.argv[1])
import kcache
from kcache.dispatcher import compile_for_report
from examples.kernels import scaled_add
(found,) = compile_for_report(scaled_add, sys.argv[2], cc=(9, 0), store=kcache.Store(sys.argv[3]))
print(found.cached, found.remote)
"""


def test_a_local_hit_never_opens_the_remote(tmp_path):
    """compile_for_report asked the remote whether it had served each hit, which opened it
    (imported its client, connected where a backend does so when opened) even when the root
    held the entry: a hit that needs no remote warned 'remote tier not used: ...' about a
    remote setting it never used. A local hit now leaves the remote closed: silent."""
    from examples.kernels import SIGNATURES, scaled_add
    sig = SIGNATURES[scaled_add][0]
    (made,) = compile_for_report(scaled_add, sig, cc=(9, 0), store=kcache.Store(tmp_path / "c"))
    assert not made.cached
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env.update(KCACHE_REMOTE="redis://127.0.0.1:1/0", KCACHE_REMOTE_TIMEOUT="soon")
    proc = subprocess.run([sys.executable, "-c", _LOCAL_HIT, str(REPO), sig, str(tmp_path / "c")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False"]
    assert "remote" not in proc.stderr, proc.stderr  # the bad setting is never looked at


def test_cc_forms_and_lists(store):
    from kcache.dispatcher.aot import _cc_list as cc_list_of

    def _cc_list(cc):
        return cc_list_of(FRONTEND, cc)
    assert _cc_list((9, 0, "a")) == [(9, 0)] and _cc_list("sm_90a") == [(9, 0)]
    assert _cc_list(90) == [(9, 0)] and _cc_list([80, 90]) == [(8, 0), (9, 0)]
    assert _cc_list([(8, 0), "9.0a"]) == [(8, 0), (9, 0)]
    # a list of one packed int is one cc, as the int alone is (issue 18): 80 -> 8.0, 120 -> 12.0
    assert _cc_list([90]) == [(9, 0)] and _cc_list((80,)) == [(8, 0)]
    assert _cc_list([120]) == [(12, 0)] and _cc_list([90, (8, 0)]) == [(9, 0), (8, 0)]
    with pytest.raises(ValueError, match=r"cc=\(9,\)"):
        _cc_list((9,))
    with pytest.raises(ValueError, match="compute capability"):
        _cc_list("9" * 5000)


def test_cc_as_a_float_or_a_comma_list_as_the_cli_takes_it(store):
    """cc=9.0 (a float) and cc="8.0,9.0" (warm's --cc text) are accepted; a bad value is a
    kcache.KcacheError (and a ValueError, as before) with one line naming what is accepted."""
    from kcache.dispatcher.aot import _cc_list as cc_list_of

    def _cc_list(cc):
        return cc_list_of(FRONTEND, cc)
    assert _cc_list(9.0) == [(9, 0)] and _cc_list(8.6) == [(8, 6)]
    assert _cc_list("8.0,9.0") == [(8, 0), (9, 0)]
    assert _cc_list(" 8.0 , sm_90a") == [(8, 0), (9, 0)]
    assert _cc_list([8.0, "8.6,9.0"]) == [(8, 0), (8, 6), (9, 0)]
    kernel, sig = _scaled_add()
    keys = compile_for(kernel, sig, cc="8.0,9.0", store=store)
    assert keys == compile_for(kernel, sig, cc=[(8, 0), 9.0], store=store)  # found: the same
    assert store.stats()["compiles"] == 2
    for bad, said in [(9.55, r"cc=9\.55: use .*9\.0"), ("8.0,,9.0", r"empty compute capability"),
                      (float("nan"), r"cc=nan"), ("8.0,ninety", r"cc='ninety'"),
                      (99.9, r"cc 99\.9 is not supported"), (object(), "compute capability list")]:
        with pytest.raises(kcache.KcacheError, match=said) as info:
            compile_for(kernel, sig, cc=bad, store=store)
        assert isinstance(info.value, ValueError) and "\n" not in str(info.value)
    assert store.stats()["compiles"] == 2  # refused before compiling anything


# --- explain covers compile_for ------------------------------------------------------------

_WARM = textwrap.dedent("""
    import json, logging, sys
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    sys.path.insert(0, sys.argv[1])
    import kcache
    import kernmod
    keys = kcache.compile_for(kernmod.kern, "void(float32[::1])", cc=(9, 0),
                              store=kcache.Store())
    print(json.dumps({"key": keys[0], "explain": kcache.explain(kernmod.kern)}))
""")

_KERNMOD = textwrap.dedent("""
    from numba import cuda
    import devmod

    @cuda.jit
    def kern(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = devmod.step(a[i])
""")

_DEVMOD = textwrap.dedent("""
    from numba import cuda

    @cuda.jit(device=True)
    def step(x):
        return x + BODY
""")


@pytest.mark.slow
def test_explain_names_a_changed_device_function_for_compile_for(tmp_path):
    """KCACHE_EXPLAIN=1: a compile_for miss after a device function in another module changed
    logs (and kcache.explain(kernel) returns) 'dependency devmod.step changed'."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "kernmod.py").write_text(_KERNMOD)
    env = dict(os.environ, KCACHE_DIR=str(tmp_path / "cache"), KCACHE_EXPLAIN="1")
    env.pop("KCACHE_DISABLE", None)
    runs = []
    for body in ("1.0", "2.0"):
        (project / "devmod.py").write_text(_DEVMOD.replace("BODY", body))
        # the same size within the same second: Python's bytecode cache would serve the old
        # module (its check is size and mtime in whole seconds), whatever kcache does
        shutil.rmtree(project / "__pycache__", ignore_errors=True)
        proc = subprocess.run([sys.executable, "-c", _WARM, str(project)], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append((json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr))
    (first, first_log), (second, second_log) = runs
    assert first["key"] != second["key"]
    assert any("no entry of this kernel yet" in line for line in first["explain"])
    assert "dependency devmod.step changed" in second_log
    assert any(line.endswith("dependency devmod.step changed") and "for sm_90a" in line
               for line in second["explain"]), second["explain"]

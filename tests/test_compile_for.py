"""compile_for: entries for explicit compute capabilities on a machine with no GPU.

Covers the round trip (store -> load -> identical cubin bytes, PTX ``.target`` per cc), the
example kernels (device function in a second module) and the module-level kernels of
numba-cuda's own ``cache_usecases`` for cc 8.0 and 9.0, key agreement with a process that
compiles through the dispatcher, and loading an entry in a fresh process without numba's
target/typing context and without any pickle-family loader.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numba.cuda")

import kcache  # noqa: E402
from kcache.dispatcher import _compat, compile_for, parse_cc  # noqa: E402

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
            assert lib._cubin_cache[_compat.full_cc(cc)].code == entry.artifacts["cubin"]
            assert rebuilt.entry_name == entry.meta["entry_name"]
        assert kernel.overloads == {}  # compile_for leaves the dispatcher untouched
    stats = store.stats()
    assert stats["compiles"] == 6 and stats["entries"] == 6


def _rebuild(entry, sig, cc):
    from kcache.dispatcher.kernel_entry import entry_to_kernel
    return entry_to_kernel(entry, _compat.normalize_signature(sig), _compat.full_cc(cc),
                           extensions=[])


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
    with pytest.raises(ValueError, match="compute capability"):
        compile_for(kernels.scaled_add, "void(float32[::1])", cc="ninety", store=store)
    with pytest.raises(TypeError, match="device function"):
        compile_for(mathbits.axpy, "float32(float32, float32, float32)", store=store)
    with pytest.raises(TypeError, match="signatures"):
        compile_for(kernels.scaled_add, [], store=store)
    with pytest.raises(TypeError, match="kernel made by"):
        compile_for(len, "void()", store=store)
    assert parse_cc("sm_90a") == (9, 0) and parse_cc("8.6") == (8, 6) and parse_cc((7, 5)) == (7, 5)


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
    from kcache.dispatcher import _compat, install
    from numba.cuda.target import CUDATargetContext, CUDATypingContext

    def forbidden(*a, **k):
        raise AssertionError("a pickle-family loader was called while loading an entry")

    def no_refresh(self):
        raise AssertionError("numba's target/typing context was refreshed on a hit")

    CUDATargetContext.refresh = no_refresh
    CUDATypingContext.refresh = no_refresh
    pickle.loads = pickle.load = marshal.loads = marshal.load = forbidden
    pickle.Unpickler = forbidden
    sys.path.insert(0, sys.argv[1])
    install("cache")                        # transparent mode: kernels use cache=True
    from examples import kernels
    before = pickle_family()
    # A GPU would report its cc and bind the cubin; stand in for both.
    _compat.current_cc = lambda: (9, 0)
    _compat.Kernel.bind = lambda self: None
    for kernel, sigs in kernels.SIGNATURES.items():
        k = kernel.compile(_compat.normalize_signature(sigs[0]))
        s = kernel.stats
        cubin = k._codelibrary._cubin_cache[(9, 0, "a")].code
        out[kernel.py_func.__name__] = {"hits": sum(s.cache_hits.values()),
                                        "misses": sum(s.cache_misses.values()),
                                        "compiles": s.compiles, "cubin": cubin.hex(),
                                        "class": type(kernel).__name__}
    out["new_pickle_modules"] = sorted(pickle_family() - before)
    print(json.dumps(out))
""")


def test_gpu_process_hits_compile_for_entries_without_target_context_or_pickle(tmp_path):
    """Entries warmed by compile_for are hit by a process that computes keys itself
    (same key), rebuilt without refreshing numba's contexts and without pickle."""
    env = dict(os.environ, KCACHE_DIR=str(tmp_path / "cache"))
    env.pop("KCACHE_ENABLE", None)
    store = kcache.Store(tmp_path / "cache")
    from examples import kernels
    cubins, keys = {}, []
    for kernel, sigs in kernels.SIGNATURES.items():
        (key,) = compile_for(kernel, sigs, cc=(9, 0), store=store)
        keys.append(key)
        cubins[kernel.py_func.__name__] = store.load(key).artifacts["cubin"].hex()
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

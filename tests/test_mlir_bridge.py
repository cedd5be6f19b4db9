"""The numba-cuda-mlir bridge (docs/mlir.md): it implements every member of
``frontends.base.Frontend``, pickles by reference, reads the registries numba-cuda-mlir's
contexts install, keeps its entries' fields plain and checked, and refuses a release outside
>= 0.6, < 0.7 with one warning (the program runs uncached). No GPU: compiles target an
explicit cc."""
import inspect
import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba_cuda_mlir")

from kcache.dispatcher.frontends import base  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda_mlir import support  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda_mlir.bridge import FRONTEND  # noqa: E402
from kcache.entry.artifacts import MLIR_KERNEL_FIELDS, problem  # noqa: E402

pytestmark = pytest.mark.compat

SIG = "void(float32[::1], float32[::1])"


def test_the_bridge_implements_the_frontend_protocol():
    members = sorted(n for n in vars(base.Frontend) if not n.startswith("_")) + \
        sorted(base.Frontend.__annotations__)
    for name in members:
        assert hasattr(FRONTEND, name), name
        want = getattr(base.Frontend, name, None)
        if callable(want):
            mine = inspect.signature(getattr(FRONTEND, name))
            theirs = inspect.signature(want)
            assert list(mine.parameters) == [p for p in theirs.parameters if p != "self"], name
    assert FRONTEND.name == "numba-cuda-mlir" and FRONTEND.refusal() is None
    import numba_cuda_mlir.numba_cuda
    from numba_cuda_mlir import cuda
    assert FRONTEND.numba() is numba_cuda_mlir.numba_cuda
    assert FRONTEND.jit() is cuda.jit
    assert FRONTEND.is_kernel_dispatcher(cuda.jit(lambda a: None))
    assert FRONTEND.is_signature(SIG) and not FRONTEND.is_signature(len)
    assert FRONTEND.state_fields == MLIR_KERNEL_FIELDS


def test_a_front_end_pickles_as_its_bridges_object():
    assert pickle.loads(pickle.dumps(FRONTEND)) is FRONTEND


def test_selectors_tell_the_front_ends_apart():
    from numba_cuda_mlir import cuda

    from kcache.dispatcher import frontends
    assert frontends.by_name("numba-cuda-mlir") is FRONTEND
    assert frontends.by_name("mlir") is FRONTEND  # what kcache ls shows
    assert frontends.of_dispatcher(cuda.jit(lambda a: None)) is FRONTEND
    assert frontends.of_dispatcher(len) is None
    with pytest.raises(ValueError, match="unknown front-end 'numba'"):
        frontends.by_name("numba")


@pytest.mark.parametrize("text, ok", [("0.6.0", True), ("0.6.3.dev2", True), ("0.5.9", False),
                                      ("0.7.0", False), ("1.0", False), ("garbage", False)])
def test_the_supported_releases(text, ok):
    assert support.version_supported(text) is ok


def test_the_registry_tables_hold_every_registry_the_contexts_install():
    """An upgrade that installs a registry the tables miss would let its registrations
    change code without changing keys: listed here, it fails instead."""
    from kcache.dispatcher.frontends.numba_cuda_mlir import registries
    known, installed = registries.known_and_installed_registries()
    assert [name for name, r in installed if id(r) not in known] == []


def test_every_configuration_variable_is_classified():
    from kcache.dispatcher import numba_config
    import numba_cuda_mlir.mlir_optimization  # noqa: F401  (reads config at import)
    config = FRONTEND.numba_config()
    assert len(numba_config.config_variables(config)) > 50
    assert numba_config.unclassified(config) == []


def _meta(**changes):
    from mlirkit import cubin
    from kcache.entry.artifacts import cubin_entry_points
    (func_name,) = cubin_entry_points(cubin())  # the kernel the launch looks up
    meta = {"func_name": func_name, "cooperative": False, "needs_nrt": False,
            "nrt_inline": False, "dynamic_shared_memory": 0,
            "gpu_target": {"chip": "sm_90", "cc": [9, 0], "linker_arch": "sm_90"},
            "lto": False, "capi": None, "launch_config_sensitive": False,
            "frontend": "numba-cuda-mlir"}
    meta.update(changes)
    return meta


@pytest.mark.parametrize("changes, why", [
    ({}, None),
    ({"func_name": 3}, "func_name must be text"),
    ({"func_name": ""}, "func_name must be text"),
    ({"func_name": "_Z" + "k" * 4096}, "func_name must be at most 4096 characters"),
    ({"func_name": "_Z1kf"}, "func_name '_Z1kf' is not a kernel of the cubin"),
    ({"cooperative": "yes"}, "cooperative must be true or false"),
    ({"dynamic_shared_memory": -1}, "dynamic_shared_memory"),
    ({"dynamic_shared_memory": 2**64 - 1}, "dynamic_shared_memory"),
    ({"exceptions": [1, 2]}, "exceptions must map"),
    ({"exceptions": {"1": "os:system"}}, "exceptions must map"),
    ({"capi": b"x"}, "capi must be text or nil"),
    ({"gpu_target": {"cc": [{"x": 1}]}}, "gpu_target"),
    ({"gpu_target": []}, "gpu_target"),
])
def test_an_entrys_fields_are_checked(changes, why):
    from mlirkit import cubin
    found = problem({"cubin": cubin()}, _meta(**changes))
    assert (found is None) if why is None else (why in found), found


def test_a_missing_field_or_a_bad_cubin_is_a_problem():
    from mlirkit import cubin
    meta = _meta()
    del meta["gpu_target"]
    assert "gpu_target missing" in problem({"cubin": cubin()}, meta)
    assert problem({"cubin": b"\x7fELF garbage"}, _meta()).startswith("bad cubin")
    # another front-end's name: no kernel of a front-end kcache serves, nothing rebuilt from it
    assert problem({"cubin": b"junk"}, _meta(frontend="numba-cuda-next")) is None


_REFUSED = textwrap.dedent("""\
    import json, os, sys, warnings
    import numba_cuda_mlir
    numba_cuda_mlir.__version__ = sys.argv[1]  # as a later release would say it
    from numba_cuda_mlir import cuda
    from numba_cuda_mlir.descriptor import MLIRDispatcher
    enable, init = MLIRDispatcher.__dict__["enable_caching"], MLIRDispatcher.__dict__["__init__"]

    def body(a):
        a[0] = 1

    out = {}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        os.environ["KCACHE_ENABLE"] = "all"
        import kcache._hook  # numba_cuda_mlir is imported: installs at once
        out["hook"] = type(cuda.jit(body)).__name__
        import kcache
        k = kcache.jit(body, frontend="numba-cuda-mlir")
        out["jit"] = [type(k).__name__, type(k._cache).__name__]
        kcache.install("all")
        out["installed"] = kcache.dispatcher.installed()
        out["numba_cuda"] = "numba.cuda" in sys.modules  # numba-cuda's .pth may import it
        out["untouched"] = (MLIRDispatcher.__dict__["enable_caching"] is enable
                            and MLIRDispatcher.__dict__["__init__"] is init)
        out["own_cache"] = type(cuda.jit(cache=True)(body)._cache).__name__
        try:
            kcache.compile_for(k, "void(float32[::1])", cc="9.0")
        except kcache.KcacheError as exc:
            out["compile_for"] = [type(exc).__name__, str(exc)]
    out["warnings"] = [[w.category.__name__, str(w.message)] for w in seen
                       if "kcache" in str(w.message)]
    out["cache"] = os.listdir(os.environ["KCACHE_DIR"]) if os.path.exists(os.environ["KCACHE_DIR"]) else []
    print(json.dumps(out))
    """)


@pytest.mark.parametrize("version", ["0.7.0", "0.5.0"])
def test_an_unsupported_release_is_one_warning_and_kernels_run_uncached(tmp_path, version):
    script = tmp_path / "child.py"
    script.write_text(_REFUSED)
    env = dict(os.environ, KCACHE_DIR=str(tmp_path / "cache"))
    env.pop("KCACHE_ENABLE", None)
    proc = subprocess.run([sys.executable, str(script), version], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    line = (f"numba-cuda-mlir {version} is not supported by kcache (supported: numba-cuda-mlir "
            ">= 0.6, < 0.7); its kernels run uncached in this process")
    assert out["warnings"] == [["KcacheWarning", line]]  # one, for hook, jit and install
    assert out["hook"] == "MLIRDispatcher" and out["jit"] == ["MLIRDispatcher", "NullCache"]
    # nothing installed, unless numba-cuda was imported too (it is served then)
    assert out["installed"] == ("all" if out["numba_cuda"] else None)
    assert out["untouched"] is True
    assert out["own_cache"] == "MLIRCache"  # cache=True: numba-cuda-mlir's own, as without
    assert out["compile_for"] == ["KcacheError", line]
    assert out["cache"] == []


def test_an_entry_round_trips_and_is_never_another_front_ends(tmp_path):
    """kernel_state -> entry (msgpack, checked) -> compile result with the same artifacts and
    launch data; an entry of another front-end is refused by the rebuild (keys differ: only a
    forged entry could be found under a numba-cuda-mlir key)."""
    from numba_cuda_mlir import cuda

    import kcache
    from kcache.dispatcher.frontends.numba_cuda_mlir import offline
    from kcache.dispatcher.kernel_entry import NotStorable, entry_to_kernel, kernel_to_entry

    def one(a):
        a[0] = 1.0

    with offline.offline_target((8, 0)):
        compiled = cuda.jit(one).compile("void(float32[::1])")
    entry = kernel_to_entry(FRONTEND, compiled, (8, 0, ""), kernel_name="m:one",
                            signature="(array(float32, 1d, C),)", arch="sm_80",
                            compile_seconds=0.5)
    assert entry.meta["frontend"] == "numba-cuda-mlir" and entry.meta["arch"] == "sm_80"
    assert problem(entry.artifacts, entry.meta) is None
    store = kcache.Store(tmp_path)
    assert store.put("a" * 64, entry)
    loaded = store.load("a" * 64)
    argtypes = FRONTEND.normalize_signature("void(float32[::1])")
    served = entry_to_kernel(FRONTEND, loaded, argtypes, (8, 0, ""), targetoptions={})
    for field in ("cubin", "func_name", "ptx", "needs_nrt"):
        assert served.metadata[field] == compiled.metadata[field], field
    assert served.signature.args == compiled.signature.args
    assert ".target sm_80" in loaded.artifacts["ptx"].decode()
    forged = kcache.Entry(artifacts=dict(loaded.artifacts),
                          meta={k: v for k, v in loaded.meta.items() if k != "frontend"})
    with pytest.raises(NotStorable, match="numba-cuda kernel, not a numba-cuda-mlir one"):
        entry_to_kernel(FRONTEND, forged, argtypes, (8, 0, ""), targetoptions={})


_ONLY_MLIR = textwrap.dedent("""\
    import importlib.abc, json, sys

    class NoNumba(importlib.abc.MetaPathFinder):  # an environment without numba-cuda
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in ("numba", "numba_cuda", "llvmlite"):
                raise ModuleNotFoundError(f"No module named {name!r}")

    sys.meta_path.insert(0, NoNumba())
    for name in [m for m in sys.modules if m.partition(".")[0] in ("numba", "numba_cuda",
                                                                     "llvmlite")]:
        del sys.modules[name]
    import kcache, kcache.dispatcher
    from numba_cuda_mlir import cuda

    @kcache.jit
    def k(a):
        a[0] = 1.0

    keys = kcache.compile_for(k, "void(float32[::1])", cc="9.0")
    print(json.dumps([type(k).__name__, len(keys), "numba" in sys.modules,
                      kcache.dispatcher.frontends.default().name]))
    """)


def test_kcache_works_with_numba_cuda_mlir_as_the_only_front_end(tmp_path):
    """No numba, llvmlite or numba-cuda importable: kcache.jit picks numba-cuda-mlir,
    compile_for stores its entries."""
    script = tmp_path / "only.py"
    script.write_text(_ONLY_MLIR)
    env = dict(os.environ, KCACHE_DIR=str(tmp_path / "cache"))
    env.pop("KCACHE_ENABLE", None)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == [
        "KCacheMLIRDispatcher", 1, False, "numba-cuda-mlir"]


class _DeviceArray:  # what numba-cuda-mlir's pickler refuses, without a device
    __cuda_array_interface__ = {"shape": (1,), "typestr": "<f4", "data": (0, False),
                                "version": 3}


def _closing_over(value):
    def body():
        return value
    return body


def test_a_closure_holding_a_device_array_is_refused_where_numba_cuda_mlir_refuses_it():
    # Its cache key pickles the closure: a device array in a container is refused too; the
    # walk looks into each container once (a list holding itself 100 times is quick).
    from kcache.dispatcher.frontends.numba_cuda_mlir.compiling import numba_cache_load_refusal
    import types

    import numpy as np
    looped = []
    looped.extend([looped] * 100)
    shared = [_DeviceArray()]
    for _ in range(7):
        shared = [shared]
    holder = types.SimpleNamespace(array=_DeviceArray())
    objects = np.empty(1, dtype=object)
    objects[0] = _DeviceArray()
    device_function = _closing_over(_DeviceArray())  # a callee closing over one
    for held in (_DeviceArray(), [1, {"a": (_DeviceArray(),)}], {_DeviceArray(): 1},
                 ((((((shared,),),),),), shared),  # met deep first, then shallow
                 [[[[[[[[[[_DeviceArray()]]]]]]]]]], holder, objects, device_function):
        refusal = numba_cache_load_refusal(_closing_over(held))
        assert isinstance(refusal, pickle.PicklingError)
        assert "global device arrays" in str(refusal)
    for held in (looped, [1.0, "text", (2, 3)], None):
        assert numba_cache_load_refusal(_closing_over(held)) is None
    assert numba_cache_load_refusal(lambda: 1) is None  # no closure


def test_stats_is_numba_cuda_mlirs_tuple_and_keeps_kcaches_figures():
    # its suite checks _fields; kcache's figures survive copies, pickles and _replace
    import copy

    from kcache.dispatcher.frontends.numba_cuda_mlir.stats import KCacheStats
    stats = KCacheStats("/root", {"a": 1}, {}, compiles=2, keys={"sig": "k"})
    assert stats._fields == ("cache_path", "cache_hits", "cache_misses")
    path, hits, misses = stats
    assert (path, hits, misses) == ("/root", {"a": 1}, {})
    for made in (copy.copy(stats), copy.deepcopy(stats), pickle.loads(pickle.dumps(stats)),
                 stats._replace(cache_path="/other")):
        assert (made.compiles, made.keys, made.uncached) == (2, {"sig": "k"}, None)
    with pytest.raises(TypeError, match="no field 'bogus'"):
        KCacheStats("/root", {}, {}, bogus=1)

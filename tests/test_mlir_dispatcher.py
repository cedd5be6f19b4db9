"""numba-cuda-mlir kernels served from the store, in real processes (docs/mlir.md): a child
stands in for a GPU of a given cc (``tools._cached_cc``, what numba-cuda-mlir asks the device
for), so its compiles and hits are the real ones; only the launch needs a GPU
(tests/test_mlir_gpu.py). Entries warmed without a GPU (compile_for) are what a GPU process
finds; a hit builds neither the typing nor the target context; the stale-kernel cases miss;
the two front-ends' entries never serve each other."""
import json
import textwrap

import pytest

pytest.importorskip("numba_cuda_mlir")

import kcache  # noqa: E402

from mlirkit import MATHBITS, SIG, run, write  # noqa: E402

pytestmark = pytest.mark.slow  # real compiles, one or two per child

#: In a child: the kernel called through both of numba-cuda-mlir's paths (compile(sig), as
#: an eager signature; _compile_impl, as the launcher does with the arguments), then what
#: happened. cc "0.0" in the child: no stand-in, compile_for's own offline target.
CALL = """
    import numpy as np
    import kcache
    import kernels
    from numba_cuda_mlir.descriptor import mlir_target
    x = np.ones(4, np.float32)
    cres = kernels.axpy.compile(sys.argv[3] if len(sys.argv) > 3 else "{sig}")
    launched = kernels.axpy._compile_impl([x, x])
    st = kernels.axpy.stats
    print(json.dumps({{
        "type": type(kernels.axpy).__name__, "hits": sum(st.cache_hits.values()),
        "compiles": st.compiles, "keys": sorted(set(st.keys.values())),
        "uncached": st.uncached, "contexts": mlir_target._typingctx_initialized,
        "fields": st._fields,
        "cubin": cres.metadata["cubin"].hex(), "launched": launched[0] == cres.metadata["cubin"],
        "func_name": launched[1], "explained": kcache.explain(kernels.axpy),
        "counts": dict(kcache.dispatcher.process_counts())}}))
""".format(sig=SIG)
CALL = textwrap.dedent(CALL)  # other lines may come before it


def _kcache_jit(directory, eager=True):
    """kernels.py with kcache.jit(frontend="numba-cuda-mlir") kernels (``eager``: with the
    kernel of an eager signature, which compiles, or is served, at import)."""
    source = (directory / "kernels.py").read_text().replace(
        "@cuda.jit\n", "@kcache.jit(frontend='numba-cuda-mlir')\n").replace(
        '@cuda.jit("void(float32[::1])")',
        '@kcache.jit("void(float32[::1])", frontend="numba-cuda-mlir")')
    if not eager:
        source = source[:source.index("@kcache.jit(\"void")]
    (directory / "kernels.py").write_text("import kcache\n" + source)


@pytest.fixture
def kernels(tmp_path):
    directory = write(tmp_path / "src")
    _kcache_jit(directory)
    return directory


def test_a_miss_then_a_hit_in_a_fresh_process_without_the_contexts(kernels, tmp_path):
    root = tmp_path / "cache"
    first = run(CALL, kernels, root)
    assert first["type"] == "KCacheMLIRDispatcher"
    assert first["compiles"] == 1 and first["hits"] == 0 and first["launched"]
    second = run(CALL, kernels, root)
    assert second["compiles"] == 0 and second["hits"] == 1
    assert second["contexts"] is False  # served before numba-cuda-mlir's refresh
    # stats is numba-cuda-mlir's three-field tuple (its suite checks _fields), kcache's
    # figures (compiles, keys, ...) attributes of it
    assert first["fields"] == second["fields"] == ["cache_path", "cache_hits", "cache_misses"]
    assert "inspect_compiles" not in second["counts"]  # a launch reads nothing compile-only
    assert second["cubin"] == first["cubin"] and second["launched"]
    assert second["func_name"] == first["func_name"] and second["keys"] == first["keys"]
    listed = json.loads(_cli(root, "ls", "--json"))["entries"]
    assert {(e["kernel"], e["frontend"], e["arch"]) for e in listed} == {
        ("kernels:axpy", "numba-cuda-mlir", "sm_90"), ("kernels:eager", "numba-cuda-mlir", "sm_90")}
    _cli(root, "verify")  # every entry checks out (exit status 0)


def _cli(root, *args) -> str:
    import os
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "kcache", *args], capture_output=True,
                          text=True, env=dict(os.environ, KCACHE_DIR=str(root)), timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_entries_warmed_without_a_gpu_are_hits_on_one(tmp_path):
    """compile_for (no device at all) stores the entries a process on a GPU of that cc finds:
    the same keys, for each cc; the chip given decides the code, never the machine's."""
    kernels = write(tmp_path / "src")
    _kcache_jit(kernels, eager=False)  # importing an eager kernel compiles it: needs a GPU
    root = tmp_path / "cache"
    warmed = run(f"""
        import kernels
        rows = kcache.dispatcher.compile_for_report(kernels.axpy, "{SIG}", cc=["8.0", "9.0"])
        print(json.dumps([[r.key, r.arch, r.cached] for r in rows]))
    """.replace("import kernels", "import kcache, kernels"), kernels, root, cc="0.0")
    assert [(arch, cached) for _k, arch, cached in warmed] == [("sm_80", False),
                                                              ("sm_90", False)]
    for cc, (key, _arch, _cached) in zip(("8.0", "9.0"), warmed):
        got = run(CALL, kernels, root, cc=cc)
        assert got["compiles"] == 0 and got["hits"] == 1 and got["keys"] == [key], cc
    entries = {e["arch"]: e for e in json.loads(_cli(root, "ls", "--json"))["entries"]}
    assert set(entries) == {"sm_80", "sm_90"}


def test_stale_kernel_cases_miss(kernels, tmp_path):
    """A callee edited in another module, a global changed at run time: a miss, compiled,
    explained; the old entry is never served."""
    root = tmp_path / "cache"
    base = run(CALL, kernels, root)
    (kernels / "mathbits.py").write_text(MATHBITS.replace("x + x", "x + x + x"))
    edited = run("import kcache\nkcache.explain(True)\n" + CALL, kernels, root)
    assert edited["compiles"] == 1 and edited["keys"] != base["keys"]
    assert any("dependency mathbits.twice changed" in line for line in edited["explained"])
    # numba-cuda-mlir compiles 9.0 as sm_90: the line names that arch, as compile_for's do
    assert all(" for sm_90: " in line for line in edited["explained"]), edited["explained"]
    changed = run("import kernels as _k\n_k.SCALE = 3.0\n" + CALL, kernels, root)
    assert changed["compiles"] == 1 and changed["keys"] not in (base["keys"], edited["keys"])
    again = run("import kernels as _k\n_k.SCALE = 3.0\n" + CALL, kernels, root)
    assert again["compiles"] == 0 and again["keys"] == changed["keys"]


def test_the_transparent_switch_serves_cache_true_kernels(tmp_path):
    """KCACHE_ENABLE=1: numba_cuda_mlir.cuda.jit(cache=True) kernels are kcache's, others
    numba-cuda-mlir's own; KCACHE_ENABLE=all: every kernel. install() before the import of
    numba_cuda_mlir serves it from its import on."""
    directory = write(tmp_path / "src", {"mods": """
        from numba_cuda_mlir import cuda

        def body(a):
            a[0] = 1.0

        cached = cuda.jit(cache=True)(body)
        plain = cuda.jit(body)
    """.replace("\n        ", "\n")})
    script = textwrap.dedent("""
        import mods
        print(json.dumps([type(mods.cached).__name__, type(mods.plain).__name__,
                          type(mods.cached._cache).__name__]))
    """)
    root = tmp_path / "cache"
    assert run(script, directory, root, env={"KCACHE_ENABLE": "1"}) == [
        "KCacheMLIRDispatcher", "MLIRDispatcher", "KCacheCache"]
    assert run(script, directory, root, env={"KCACHE_ENABLE": "all"})[:2] == [
        "KCacheMLIRDispatcher", "KCacheMLIRDispatcher"]
    assert run(script, directory, root) == ["MLIRDispatcher", "MLIRDispatcher", "MLIRCache"]
    later = run("import kcache\nassert 'numba_cuda_mlir' not in sys.modules\n"
                "kcache.install()\n" + script, directory, root, cc="0.0")
    assert later[0] == "KCacheMLIRDispatcher" and later[1] == "MLIRDispatcher"


def test_both_front_ends_in_one_process(tmp_path):
    pytest.importorskip("numba.cuda")
    directory = write(tmp_path / "src", {"both": """
        from numba import cuda as nc
        from numba_cuda_mlir import cuda as mc

        def body(a):
            a[0] = 1.0

        nk = nc.jit(cache=True)(body)
        mk = mc.jit(cache=True)(body)
    """.replace("\n        ", "\n")})
    got = run("""
        import both, kcache
        k1 = kcache.dispatcher.compile_for(both.nk, "void(float32[::1])", cc="9.0")
        k2 = kcache.dispatcher.compile_for(both.mk, "void(float32[::1])", cc="9.0")
        print(json.dumps([type(both.nk).__name__, type(both.mk).__name__, k1 != k2]))
    """, directory, tmp_path / "cache", cc="0.0", env={"KCACHE_ENABLE": "1"})
    assert got == ["KCacheDispatcher", "KCacheMLIRDispatcher", True]
    listed = json.loads(_cli(tmp_path / "cache", "ls", "--json"))["entries"]
    assert sorted(e["frontend"] for e in listed) == ["numba-cuda", "numba-cuda-mlir"]


def test_a_cache_true_link_kernel_is_refused_as_numba_cuda_mlir_refuses_it(tmp_path):
    """numba-cuda-mlir's cache raises RuntimeError for a ``link=`` kernel after compiling it;
    under KCACHE_ENABLE so does kcache's (kcache.jit stores it)."""
    directory = write(tmp_path / "src", {"linked": """
        from numba_cuda_mlir import cuda
        import os

        LIB = os.path.join(os.path.dirname(__file__), "lib.ptx")

        def body(a):
            a[0] = 1.0

        cached = cuda.jit(cache=True, link=[LIB])(body)
    """.replace("\n        ", "\n")})
    (directory / "lib.ptx").write_text(".version 8.0\n.target sm_90\n.address_size 64\n")
    script = """
        import linked
        try:
            linked.cached.compile("void(float32[::1])")
            print(json.dumps("compiled"))
        except RuntimeError as exc:
            print(json.dumps(str(exc)))
    """
    own = run(script, directory, tmp_path / "c1")
    ours = run(script, directory, tmp_path / "c2", env={"KCACHE_ENABLE": "1"})
    assert own == ours == "Cannot pickle CUDACodeLibrary with linking files"


CLOSURE = textwrap.dedent("""
    from numba_cuda_mlir import cuda


    class DeviceArray:  # what numba-cuda-mlir's pickler looks for, without a device
        __cuda_array_interface__ = {"shape": (3,), "typestr": "<f4", "data": (0, False),
                                    "version": 3}


    def make(cache):
        held = [DeviceArray()]

        def body(out):
            out[0] = 1.0 if held else 0.0
        return cuda.jit(cache=cache)(body) if cache else cuda.jit(body)
""")


def test_a_cache_true_kernel_closing_over_a_device_array_is_refused_as_numba_cuda_mlir_does(
        tmp_path):
    """numba-cuda-mlir's cache key pickles the closure, and its pickler refuses a device
    array (PicklingError, before any compile; its own suite's test_caching): under
    KCACHE_ENABLE so does kcache, with the same text; kcache.jit runs it uncached."""
    directory = write(tmp_path / "src", {"closing": CLOSURE})
    script = """
        import pickle
        import closing
        kernel = closing.make(cache=os.environ["MODE"] == "cache")
        try:
            kernel.compile("void(float32[::1])")
            print(json.dumps(["compiled", len(kernel.overloads)]))
        except pickle.PicklingError as exc:
            print(json.dumps([str(exc), len(kernel.overloads)]))
        except Exception as exc:  # not a cache's refusal: the compile's own error
            print(json.dumps([type(exc).__name__, len(kernel.overloads)]))
    """
    own = run(script, directory, tmp_path / "c1", env={"MODE": "cache"})
    ours = run(script, directory, tmp_path / "c2", env={"MODE": "cache", "KCACHE_ENABLE": "1"})
    assert own == ours == ["Cannot serialize kernels or device functions referencing global "
                           "device arrays. Pass the array(s) as arguments to the kernel "
                           "instead.", 0]
    # asked for no cache: no refusal, under KCACHE_ENABLE=all too (compiled as without kcache)
    plain = run(script, directory, tmp_path / "c3", env={"MODE": ""})
    assert run(script, directory, tmp_path / "c4", env={"MODE": "", "KCACHE_ENABLE": "all"}) \
        == plain != own


def test_cache_path_is_none_until_asked_under_enable_all(kernels, tmp_path):
    """numba-cuda-mlir's NullCache has no path for a kernel made without cache=True, and
    enable_caching() gives it one (its suite's test_enable_caching_method): under
    KCACHE_ENABLE=all the same, though the kernel is served either way."""
    script = """
        from numba_cuda_mlir import cuda

        @cuda.jit
        def kernel(a):
            a[0] = 1.0

        before = kernel._cache.cache_path
        kernel.enable_caching()
        print(json.dumps([type(kernel).__name__, before, kernel._cache.cache_path]))
    """
    root = tmp_path / "cache"
    got = run(script, kernels, root, env={"KCACHE_ENABLE": "all"})
    assert got[0] == "KCacheMLIRDispatcher" and got[1] is None
    assert got[2] == str(root.resolve()) or got[2] == str(root)


def test_kcache_warm_for_numba_cuda_mlir_kernels(kernels, tmp_path):
    """kcache warm --frontend numba-cuda-mlir: eager signatures and a signatures file, for
    explicit ccs, no GPU; warming again compiles nothing."""
    import os
    import subprocess
    import sys
    (kernels / "sigs.txt").write_text(f"kernels:axpy {SIG}\n")
    root = tmp_path / "cache"

    def warm(*more, frontend="numba-cuda-mlir"):
        proc = subprocess.run(
            [sys.executable, "-m", "kcache", "--json", "warm", "--frontend", frontend,
             "--cc", "9.0", "--jobs", "1", "--signatures", str(kernels / "sigs.txt"),
             str(kernels / "kernels.py"), *more],
            capture_output=True, text=True, cwd=kernels, timeout=600,
            env=dict(os.environ, KCACHE_DIR=str(root), PYTHONPATH=str(kernels)))
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout)

    first = warm()
    assert first["frontend"] == "numba-cuda-mlir"
    assert first["summary"]["compiled"] == 2 and first["summary"]["failed"] == 0
    again = warm(frontend="mlir")  # the short name ls shows
    assert again["frontend"] == "numba-cuda-mlir"
    assert again["summary"]["compiled"] == 0
    # the arch the rows name is the entry's: numba-cuda-mlir compiles 9.0 as sm_90
    assert {r["arch"] for r in first["results"]} == {r["arch"] for r in again["results"]} \
        == {"sm_90"}, again["results"]
    hit = run(CALL, kernels, root)
    assert hit["compiles"] == 0 and hit["hits"] == 1


def test_the_switch_waits_for_a_bridge_that_imports_its_front_end(tmp_path):
    """KCACHE_ENABLE set, the front-end's package first imported by kcache's own bridge (as
    ``kcache warm`` and ``kcache.jit(frontend=...)`` do): the switch is installed once the
    bridge is ready, with nothing said on stderr."""
    import os
    import subprocess
    import sys
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent("""\
        import json, sys
        from kcache.dispatcher import frontends
        assert "numba_cuda_mlir" not in sys.modules
        frontends.by_name("numba-cuda-mlir")  # imports numba_cuda_mlir inside the bridge
        from numba_cuda_mlir import cuda
        print(json.dumps(type(cuda.jit(cache=True)(lambda a: None)).__name__))
        """))
    env = dict(os.environ, KCACHE_ENABLE="1", KCACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == "KCacheMLIRDispatcher"


def _inc(x):
    x[0] += 1


def test_a_kcache_dispatchers_states_are_numba_cuda_mlirs_own(tmp_path):
    # numba-cuda-mlir's suite hands a dispatcher's _reduce_states() to
    # MLIRDispatcher._rebuild: a "frontend" among them raised TypeError there (on the H200).
    # Unpickled, a kcache dispatcher takes the bridge's front-end.
    import pickle

    from numba_cuda_mlir import cuda
    from numba_cuda_mlir.descriptor import MLIRDispatcher

    from kcache.dispatcher.frontends.numba_cuda_mlir.bridge import FRONTEND

    kernel = kcache.jit(_inc, frontend="numba-cuda-mlir", store=kcache.Store(tmp_path))
    plain = cuda.jit(_inc)
    states = kernel._reduce_states()
    assert sorted(states) == sorted(plain._reduce_states())
    assert isinstance(MLIRDispatcher._rebuild(**states), MLIRDispatcher)
    again = pickle.loads(pickle.dumps(kernel))
    assert type(again) is type(kernel) and again._kcache_frontend is FRONTEND



PICKLED = textwrap.dedent("""
    import pickle
    import kcache
    import kernels
    path = os.environ["PICKLE_FILE"]
    if not os.path.exists(path):  # the first process: compiled (or served), then pickled
        kernels.axpy.compile("{sig}")
        with open(path, "wb") as f:
            f.write(pickle.dumps(kernels.axpy))
        kernel = kernels.axpy
    else:  # a fresh process: the dispatcher unpickled, before its module is imported
        with open(path, "rb") as f:
            kernel = pickle.loads(f.read())
        kernel.compile("{sig}")
    st = kernel.stats
    print(json.dumps({{"type": type(kernel).__name__, "keys": sorted(set(st.keys.values())),
                      "chip": kernel._kcache_chip[1],
                      "counts": dict(kcache.dispatcher.process_counts())}}))
""".format(sig=SIG))


def test_a_pickled_kernel_is_served_in_a_fresh_process(kernels, tmp_path):
    # numba-cuda-mlir's unpickling called _rebuild with its states alone, which dropped the
    # front-end _rebuild_with had set (TypeError: needs frontend=); and the chip a compile or
    # a serve resolved travelled as a chip given, another key (a helper's review).
    root = tmp_path / "cache"
    env = {"PICKLE_FILE": str(tmp_path / "k.pickle")}
    first = run(PICKLED, kernels, root, env=env)
    assert first["counts"]["compiles"] == 2  # axpy, and the eager kernel at import
    again = run(PICKLED, kernels, root, env=env)
    assert again["type"] == "KCacheMLIRDispatcher" and again["chip"] is None
    assert again["keys"] == first["keys"] and again["counts"].get("compiles", 0) == 0
    assert again["counts"]["hits"] >= 1


PLANNED = textwrap.dedent("""
    from numba_cuda_mlir._whole_function_planners import WholeFunctionPlanner, register_planner

    class Planner(WholeFunctionPlanner):
        def run(self):
            return False

    class UnexpectedCache:  # the program's own object in _cache: never used with a planner
        def load_overload(self, *args):
            raise RuntimeError("loaded")

        def save_overload(self, *args):
            raise RuntimeError("saved")

    register_planner(Planner)

    import numpy as np
    import kcache
    import kernels
    kernels.axpy._cache = UnexpectedCache()
    x = np.ones(4, np.float32)
    cubin, name, _ = kernels.axpy._compile_impl([x, x])  # as the launcher does
    print(json.dumps({"launched": bool(cubin),
                      "counts": dict(kcache.dispatcher.process_counts())}))
""")


def test_a_registered_planner_compiles_as_numba_cuda_mlir_does(kernels, tmp_path):
    # With a whole-function planner registered numba-cuda-mlir reads and writes no cache
    # entry, and kcache serves none. Its suite's test of this puts its own object in the
    # dispatcher's _cache: kcache's compile path took it for its own (on the H200).
    root = tmp_path / "cache"
    assert run(CALL, kernels, root)["compiles"] == 1  # an entry a lookup could serve
    planned = run(PLANNED, kernels, root)
    assert planned["launched"] and planned["counts"].get("hits", 0) == 0


SERVED_METADATA = textwrap.dedent("""
    import kcache
    import kernels
    cres = kernels.axpy.compile("{sig}")
    md = cres.metadata
    kept = dict.__contains__(md, "transformed_source")
    got = md.get("transformed_source", "absent")  # as inspect_transformed_source reads it
    source = md["transformed_source"]  # only a compile makes it
    print(json.dumps({{
        "kept": kept, "source": type(source).__name__, "got": type(got).__name__,
        "module_str": len(cres.mlir_module_str),
        "chip": kernels.axpy.targetoptions.get("chip"),  # what inspect_llvm reads
        "llvm": "define" in kernels.axpy.inspect_llvm(cres.signature.args),
        "annotation": type(cres.cres.type_annotation).__name__,
        "counts": dict(kcache.dispatcher.process_counts())}}))
""".format(sig=SIG))


SERVED_MLIR = textwrap.dedent("""
    import kcache
    import kernels
    cres = kernels.axpy.compile("{sig}")
    # first thing read: numba-cuda-mlir asks "mlir_module_str" in metadata, then reads
    # ["mlir_module"], which a compile's passes lower in place
    mlir = kernels.axpy.inspect_mlir(cres.signature.args)
    print(json.dumps({{"mlir": mlir, "counts": dict(kcache.dispatcher.process_counts())}}))
""".format(sig=SIG))


def test_a_served_kernels_inspect_mlir_is_the_mlir_before_the_passes(kernels, tmp_path):
    # the H200 suite: test_array_alignment.py found no memref.alloca in a served kernel's
    # inspect_mlir (it printed the lowered module over the string kept before the passes)
    root = tmp_path / "cache"
    compiled = run(SERVED_MLIR, kernels, root)
    served = run(SERVED_MLIR, kernels, root)
    assert served["counts"]["hits"] == 2 and served["counts"]["inspect_compiles"] == 1
    assert served["mlir"] == compiled["mlir"] and "memref<" in served["mlir"]


def test_what_only_a_compile_makes_is_compiled_once_for_a_served_kernel(kernels, tmp_path):
    # numba-cuda-mlir's suite reads metadata["transformed_source"], cres.mlir_module_str,
    # type_annotation of kernels kcache served (KeyError / AttributeError on the H200): a
    # served result answers them from one uncached compile, as inspect_* does for numba-cuda.
    root = tmp_path / "cache"
    compiled = run(SERVED_METADATA, kernels, root)
    assert compiled["kept"] and compiled["counts"].get("inspect_compiles", 0) == 0
    served = run(SERVED_METADATA, kernels, root)
    assert not served["kept"] and served["counts"]["hits"] == 2  # axpy, the eager kernel
    assert served["counts"]["inspect_compiles"] == 1 and "compiles" not in served["counts"]
    assert (served["source"], served["annotation"], served["got"]) == (
        compiled["source"], compiled["annotation"], compiled["got"])
    assert served["module_str"] == compiled["module_str"]
    # numba-cuda-mlir resolves the chip before its own cache's load: a served kernel has it
    assert served["chip"] == compiled["chip"] == "sm_90" and served["llvm"] and compiled["llvm"]
    listed = json.loads(_cli(root, "ls", "--json"))["entries"]
    assert len(listed) == 1 + 1  # the eager kernel's and axpy's: the inspection stored none

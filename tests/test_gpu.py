"""GPU tests (marker ``gpu``): kernels served from the cache in fresh processes, launched and
checked. Skipped with a reason where ``numba.cuda.is_available()`` is false.

Each scenario runs in fresh subprocesses sharing one cache directory (KCACHE_DIR): the first
process compiles, the next one must load (hits, no compile) and compute the same results.
"""
import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

numba_cuda = pytest.importorskip("numba.cuda")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not numba_cuda.is_available(), reason="needs a CUDA GPU and driver"),
]

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"


def run_child(tmp_path, code, *, env_extra=None, name="child.py", timeout=300):
    """Run ``code`` as a script in a fresh process; returns the JSON of its last stdout line."""
    script = tmp_path / name
    script.write_text(textwrap.dedent(code))
    env = dict(os.environ, KCACHE_DIR=str(tmp_path / "cache"),
               # REPO last (for `examples`): first, its kcache/ folder would hide an installed
               # (non-editable) kcache and its kcache.dispatcher
               PYTHONPATH=os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(REPO)])))
    env.pop("KCACHE_ENABLE", None)
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_example_kernels_hit_in_a_fresh_process(tmp_path):
    code = """
        import json, kcache
        kcache.install("cache")
        from examples import kernels
        from kcache.dispatcher import process_counts
        disps = kernels.run_all()          # asserts the results against NumPy
        print(json.dumps({n: [sum(d.stats.cache_hits.values()), d.stats.compiles]
                          for n, d in disps.items()}))
    """
    first = run_child(tmp_path, code)
    second = run_child(tmp_path, code)
    assert all(compiles == 1 for _hits, compiles in first.values()), first
    assert all(row == [1, 0] for row in second.values()), second


def test_cooperative_kernel_first_in_a_process(tmp_path):
    code = """
        import json
        import numpy as np
        from numba import cuda
        import kcache

        @kcache.jit
        def grid_sum(x, out):
            g = cuda.cg.this_grid()
            i = cuda.grid(1)
            if i < x.size:
                cuda.atomic.add(out, 0, x[i])
            g.sync()
            if i < x.size:
                x[i] = out[0]

        x = np.arange(256, dtype=np.float32)
        out = np.zeros(1, np.float32)
        grid_sum[2, 128](x, out)           # the first thing this process launches
        assert np.all(x == np.arange(256).sum()), x[:4]
        s = grid_sum.stats
        print(json.dumps([sum(s.cache_hits.values()), s.compiles,
                          grid_sum.overloads[next(iter(grid_sum.overloads))].cooperative]))
    """
    assert run_child(tmp_path, code) == [0, 1, True]
    assert run_child(tmp_path, code) == [1, 0, True]


def test_specialize_is_cached(tmp_path):
    code = """
        import json
        import numpy as np
        from numba import cuda
        import kcache

        @kcache.jit
        def double(a):
            i = cuda.grid(1)
            if i < a.size:
                a[i] *= 2

        a = np.arange(64, dtype=np.int32)
        spec = double.specialize(a)
        spec[1, 64](a)
        assert (a == 2 * np.arange(64)).all()
        print(json.dumps([sum(spec.stats.cache_hits.values()), spec.stats.compiles]))
    """
    assert run_child(tmp_path, code) == [0, 1]
    assert run_child(tmp_path, code) == [1, 0]


def test_link_kernel_is_cached(tmp_path):
    code = f"""
        import json
        import numpy as np
        from numba import cuda
        import kcache

        add_one = cuda.declare_device("add_one", "int32(int32)")

        @kcache.jit(link=[{str(DATA / "add_one.cu")!r}])
        def k(a):
            i = cuda.grid(1)
            if i < a.size:
                a[i] = add_one(a[i])

        a = np.arange(32, dtype=np.int32)
        k[1, 32](a)
        assert (a == np.arange(32) + 1).all()
        print(json.dumps([sum(k.stats.cache_hits.values()), k.stats.compiles]))
    """
    assert run_child(tmp_path, code) == [0, 1]
    assert run_child(tmp_path, code) == [1, 0]


def test_debug_kernel_raises_from_cached_entry(tmp_path):
    code = """
        import json
        import numpy as np
        from numba import cuda
        import kcache

        @kcache.jit(debug=True, opt=False)
        def check(a):
            i = cuda.grid(1)
            if i < a.size and a[i] < 0:
                raise ValueError("negative input")

        a = np.zeros(8, np.float32)
        a[3] = -1
        try:
            check[1, 8](a)
            message = None
        except ValueError as exc:
            message = str(exc)
        print(json.dumps([sum(check.stats.cache_hits.values()), check.stats.compiles, message]))
    """
    hits, compiles, message = run_child(tmp_path, code)
    assert (hits, compiles) == (0, 1) and "negative input" in message
    hits, compiles, message = run_child(tmp_path, code)
    assert (hits, compiles) == (1, 0) and "negative input" in message
    assert "tid=[0, 0, 3]" in message


def _cold_start(barrier, cache_dir, queue):
    os.environ["KCACHE_DIR"] = cache_dir
    sys.path.append(str(REPO))
    import kcache
    kcache.install("cache")
    from examples import kernels
    from numba import cuda
    cuda.current_context()
    barrier.wait(timeout=120)
    kernels.run_all()
    from kcache.dispatcher import process_counts
    queue.put(process_counts())


def test_eight_processes_cold_start_compile_each_kernel_once(tmp_path):
    import kcache
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(8), ctx.Queue()
    procs = [ctx.Process(target=_cold_start, args=(barrier, str(tmp_path / "cache"), queue))
             for _ in range(8)]
    for p in procs:
        p.start()
    counts = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    total_compiles = sum(c.get("compiles", 0) for c in counts)
    store_stats = kcache.Store(tmp_path / "cache").stats()
    assert total_compiles == 3 and store_stats["compiles"] == 3, (counts, store_stats)
    assert sum(c.get("hits", 0) for c in counts) == 8 * 3 - 3


DOC_EXAMPLES = ["vecadd", "laplace", "reduction", "random", "cg", "montecarlo", "sessionize"]


def test_numba_cuda_doc_examples_twice_under_kcache_enable_all(tmp_path):
    pytest.importorskip("filecheck")
    code = """
        import json, sys, unittest
        import numba.cuda  # the KCACHE_ENABLE hook installs kcache here
        from kcache.dispatcher import installed, process_counts
        names = [f"numba.cuda.tests.doc_examples.test_{n}" for n in %r]
        suite = unittest.defaultTestLoader.loadTestsFromNames(names)
        result = unittest.TextTestRunner(stream=sys.stderr, verbosity=1).run(suite)
        print(json.dumps({"ok": result.wasSuccessful(), "run": result.testsRun,
                          "mode": installed(), **process_counts()}))
    """ % (DOC_EXAMPLES,)
    env = {"KCACHE_ENABLE": "all"}
    # The hook is loaded by kcache-hook.pth when installed; import it explicitly otherwise.
    code = "import kcache._hook\n" + textwrap.dedent(code)
    first = run_child(tmp_path, code, env_extra=env, timeout=600)
    second = run_child(tmp_path, code, env_extra=env, timeout=600)
    assert first["ok"] and second["ok"] and first["mode"] == "all"
    assert first["run"] == second["run"] > 0
    assert first.get("compiles", 0) > 0
    assert second.get("compiles", 0) == 0 and second.get("misses", 0) == 0, second


def test_cache_warmed_without_a_gpu_serves_the_gpu(tmp_path):
    """The container-build story: compile_for in a process that sees no GPU
    (CUDA_VISIBLE_DEVICES=""), then a GPU process launches every example kernel from the
    cache with no compile, and the results are right."""
    warm = """
        import json
        from numba import cuda
        import kcache
        from examples import kernels
        assert not cuda.is_available()
        cc = "{cc}"
        keys = [k for disp, sigs in kernels.SIGNATURES.items()
                for k in kcache.compile_for(disp, sigs, cc=[cc])]
        print(json.dumps(keys))
    """
    cc = numba_cuda.get_current_device().compute_capability
    keys = run_child(tmp_path, warm.format(cc=f"{cc[0]}.{cc[1]}"), name="warm.py",
                     env_extra={"CUDA_VISIBLE_DEVICES": ""})
    assert len(keys) == len(set(keys)) >= 3
    launch = """
        import json, kcache
        kcache.install("cache")
        from examples import kernels
        disps = kernels.run_all()          # asserts the results against NumPy
        print(json.dumps({n: [sum(d.stats.cache_hits.values()), d.stats.compiles]
                          for n, d in disps.items()}))
    """
    served = run_child(tmp_path, launch, name="launch.py")
    assert all(row == [1, 0] for row in served.values()), served


def _have_filecheck() -> bool:
    try:
        import filecheck  # noqa: F401  (numba.cuda.testing, imported by cache_usecases)
    except ImportError:
        return False
    return True


def test_main_job_bundle_serves_every_kernel(tmp_path):
    """examples/main.py (docs/containers.md, the main job): warmed, exported and imported with
    the GPU hidden (CUDA_VISIBLE_DEVICES=""), then its GPU process, pointed at the imported
    root, launches every kernel (examples and cache_usecases) with the results checked: all
    hits, no compile. Then the GPU path of main.py itself, which must say 100 % hits."""
    main = REPO / "examples" / "main.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    cc = numba_cuda.get_current_device().compute_capability
    hidden = subprocess.run([sys.executable, str(main), "--cc", f"8.0,{cc[0]}.{cc[1]}",
                             "--cache-dir", str(tmp_path / "cache"), "--work-dir",
                             str(tmp_path / "work")], env=dict(env, CUDA_VISIBLE_DEVICES=""),
                            cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert hidden.returncode == 0, hidden.stderr[-3000:] + hidden.stdout[-3000:]
    assert "No GPU found" in hidden.stdout and "Same " in hidden.stdout
    argv = [sys.executable, str(main), "--child"] + (["--usecases"] if _have_filecheck() else [])
    child = subprocess.run(argv, env=dict(env, KCACHE_DIR=str(tmp_path / "work" / "imported")),
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    doc = json.loads(child.stdout.strip().splitlines()[-1])
    assert len(doc["kernels"]) == 3 + (9 if _have_filecheck() else 0)
    assert all(r["hits"] >= 1 and r["misses"] == 0 and r["compiles"] == 0
               for r in doc["kernels"].values()), doc
    assert set(doc["process"]) == {"hits"}, doc["process"]

    gpu = subprocess.run([sys.executable, str(main), "--cache-dir", str(tmp_path / "cache2")],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert gpu.returncode == 0, gpu.stderr[-3000:] + gpu.stdout[-3000:]
    assert "(100 % hits)" in " ".join(gpu.stdout.split()), gpu.stdout[-3000:]


def test_remote_tier_serves_an_empty_local_root(tmp_path):
    """Issue 10 on the GPU: a process on machine A (its own root) compiles the example kernels
    and publishes them to Redis; a process on machine B, whose local root is empty, launches
    them with no compile (remote hits, results checked) and keeps them in its root."""
    from servers import RedisServer
    server = RedisServer().start()
    try:
        code = """
            import json, kcache
            kcache.install("cache")
            from examples import kernels
            disps = kernels.run_all()          # asserts the results against NumPy
            from kcache.dispatcher.dispatcher import Options
            store = Options._process_store()   # the store the kernels used: its counters
            st = store.stats()
            print(json.dumps({"kernels": {n: [sum(d.stats.cache_hits.values()), d.stats.compiles]
                                          for n, d in disps.items()},
                              "remote_hits": st.remote_hits, "remote_puts": st.remote_puts,
                              "entries": len(list(store.entries()))}))
        """
        remote = {"KCACHE_REMOTE": server.url}
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        a = run_child(tmp_path / "a", code, env_extra=remote)
        assert all(c == 1 for _h, c in a["kernels"].values()), a
        assert a["remote_puts"] >= len(a["kernels"]), a
        b = run_child(tmp_path / "b", code, env_extra=remote)
        print("machine A:", json.dumps(a), "\nmachine B (empty root):", json.dumps(b))
        assert all(row == [1, 0] for row in b["kernels"].values()), b
        assert b["remote_hits"] >= len(b["kernels"]) and b["entries"] >= len(b["kernels"]), b
    finally:
        server.close()


def test_served_kernels_behave_as_compiled_ones(tmp_path):
    """numba-cuda's own suite, in one process pair: an eager kernel with two signatures called
    with arguments that need a conversion (numba-cuda reads each overload's ``objectmode``),
    inspect_llvm / inspect_asm / inspect_sass / type annotation of a served kernel, and the
    compile's warnings said again on a hit."""
    code = """
        import json, re, warnings
        import numpy as np
        from numba import cuda
        from numba.cuda.core.errors import NumbaWarning
        import kcache
        from kcache.dispatcher import process_counts
        kcache.install("all")

        @cuda.jit(["void(float64[::1], float64)", "void(int64[::1], int64)"])
        def eager(r, x):
            r[0] = x + 1

        r = np.zeros(1, np.float64)
        eager[1, 1](r, np.float32(1.5))    # float32 -> float64: a conversion search
        assert r[0] == 2.5, r

        @cuda.jit
        def axpy(r, a, x):
            i = cuda.grid(1)
            if i < r.size:
                r[i] = a * x[i] + r[i]

        x = np.arange(32, dtype=np.float32)
        out = np.zeros_like(x)
        axpy[1, 32](out, np.float32(2), x)
        assert np.all(out == 2 * x)
        sig = axpy.signatures[0]
        llvm = axpy.inspect_llvm(sig)
        ptx = axpy.inspect_asm(sig)
        try:
            sass = axpy.inspect_sass(sig)
        except Exception as exc:  # nvdisasm may be missing: numba-cuda raises the same
            sass = "unavailable: %s" % exc
        typemap = sorted(axpy.overloads[sig].type_annotation.typemap)

        @cuda.jit
        def chatty(a):
            print(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
                  21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33)
            a[0] = 1
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            chatty[1, 1](np.zeros(1, np.int32))
        cuda.synchronize()
        said = [str(w.message) for w in seen if issubclass(w.category, NumbaWarning)
                and "32 items" in str(w.message)]
        print(json.dumps({"llvm": "define" in llvm and "fmul" in llvm,
                          "ptx": ".entry" in ptx, "sass": sass[:40],
                          "typemap": "a" in typemap and "x" in typemap,
                          "warned": len(said), "counts": process_counts()}))
    """
    first = run_child(tmp_path, code)
    second = run_child(tmp_path, code)
    for run in (first, second):
        assert run["llvm"] and run["ptx"] and run["typemap"] and run["warned"] == 1, run
    assert second["counts"].get("hits", 0) >= 3 and second["counts"].get("compiles", 0) == 0
    assert second["counts"].get("inspect_compiles", 0) == 1, second


def test_require_hit_raises_or_warns_on_a_real_launch(tmp_path):
    """KCACHE_REQUIRE_HIT with real launches: =1 on an empty cache raises CacheMissError at the
    first launch (nothing compiled or stored); =warn warns once and the kernel runs; then =1
    launches the entry warn stored, with no compile."""
    code = """
        import json, warnings
        import numpy as np
        import kcache
        from numba import cuda

        @kcache.jit
        def add_one(a):
            i = cuda.grid(1)
            if i < a.size:
                a[i] += 1

        a = cuda.to_device(np.zeros(64, dtype=np.float32))
        out = {}
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            try:
                add_one[1, 64](a)
                out["raised"] = None
            except kcache.CacheMissError as exc:
                out["raised"] = str(exc)
        out["warned"] = [str(w.message) for w in seen if "KCACHE_REQUIRE_HIT" in str(w.message)]
        out["ok"] = bool((a.copy_to_host() == (out["raised"] is None)).all())
        out["hits_compiles"] = [sum(add_one.stats.cache_hits.values()), add_one.stats.compiles]
        out["entries"] = len(list(kcache.Store().entries()))
        print(json.dumps(out))
    """
    strict = run_child(tmp_path, code, name="strict.py", env_extra={"KCACHE_REQUIRE_HIT": "1"})
    assert "add_one" in strict["raised"] and "no entry of this kernel yet" in strict["raised"]
    assert strict["hits_compiles"] == [0, 0] and strict["entries"] == 0 and strict["ok"]
    warned = run_child(tmp_path, code, name="warn.py", env_extra={"KCACHE_REQUIRE_HIT": "warn"})
    assert warned["raised"] is None and warned["ok"] and len(warned["warned"]) == 1
    assert warned["hits_compiles"] == [0, 1] and warned["entries"] == 1
    served = run_child(tmp_path, code, name="served.py", env_extra={"KCACHE_REQUIRE_HIT": "1"})
    assert served["raised"] is None and served["ok"] and served["warned"] == []
    assert served["hits_compiles"] == [1, 0]

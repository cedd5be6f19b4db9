"""Benchmark: first kernel calls in a fresh process, kcache vs numba-cuda ``cache=True`` vs no
cache (run on the GPU machine; results go to docs/dispatcher.md).

For each mode, a generated module of kernels (an axpy calling a device function, a tiled
matmul, an atomic reduction, a stencil, a scale) is launched in fresh processes:

* ``cold``: ``--cold-repeat`` fresh processes, each on an empty cache (modes interleaved); the
  first call of each kernel compiles (and, with a cache, stores);
* ``warm``: ``--repeat`` fresh processes on the filled cache.

Reported per mode (milliseconds): the first kernel call of the process (median over warm runs),
each further kernel's first call (median), the part of those spent looking the overload up
(``dispatcher.compile``: cache read, rebuild, module load; measured in separate "split" runs),
and the cold first calls summed over all kernels (median over the cold processes);
"cold overhead" is kcache's cold total over the no-cache total, minus 1 (goal <= 3 %).
Goals (docs/design.md): first call <= 10 ms, further first calls <= 0.5 ms.

Usage: python bench/bench_dispatch.py RESULTS.json [--repeat 5] [--cold-repeat 3] [--baseline DIR]

``--baseline DIR`` (an earlier revision installed by bench/baseline.py) adds the mode
``kcache-base``: kcache's mode run with that revision, interleaved with the others, so a
change's effect on the hit path is measured before and after in one run.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

KERNELS = textwrap.dedent('''
    import os
    import numpy as np
    from numba import cuda

    CACHE = os.environ.get("BENCH_CACHE") == "1"
    TILE = 16

    @cuda.jit(device=True)
    def axpy1(a, x, y):
        return a * x + y

    @cuda.jit(cache=CACHE)
    def axpy(a, x, y, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = axpy1(a, x[i], y[i])

    @cuda.jit(cache=CACHE)
    def matmul(A, B, C):
        sA = cuda.shared.array((TILE, TILE), np.float32)
        sB = cuda.shared.array((TILE, TILE), np.float32)
        x, y = cuda.grid(2)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        acc = np.float32(0)
        for t in range((A.shape[1] + TILE - 1) // TILE):
            sA[ty, tx] = A[y, t * TILE + tx] if y < A.shape[0] and t * TILE + tx < A.shape[1] else 0
            sB[ty, tx] = B[t * TILE + ty, x] if x < B.shape[1] and t * TILE + ty < B.shape[0] else 0
            cuda.syncthreads()
            for k in range(TILE):
                acc += sA[ty, k] * sB[k, tx]
            cuda.syncthreads()
        if y < C.shape[0] and x < C.shape[1]:
            C[y, x] = acc

    @cuda.jit(cache=CACHE)
    def reduce_sum(x, out):
        i = cuda.grid(1)
        if i < x.size:
            cuda.atomic.add(out, 0, x[i])

    @cuda.jit(cache=CACHE)
    def stencil(a, b):
        i = cuda.grid(1)
        if 0 < i < a.size - 1:
            b[i] = 0.25 * a[i - 1] + 0.5 * a[i] + 0.25 * a[i + 1]

    @cuda.jit(cache=CACHE)
    def scale(a, s):
        i = cuda.grid(1)
        if i < a.size:
            a[i] *= s
''')

CHILD = textwrap.dedent('''
    import json, sys, time
    mode = sys.argv[1]
    t0 = time.perf_counter()
    if mode == "kcache":
        import kcache
        kcache.install("cache")
    import numpy as np
    from numba import cuda
    import bench_kernels as K
    cuda.current_context()              # context creation is not part of a kernel call
    n = 1 << 16
    x = cuda.to_device(np.ones(n, np.float32))
    y = cuda.to_device(np.ones(n, np.float32))
    out = cuda.device_array(n, np.float32)
    A = cuda.to_device(np.ones((64, 64), np.float32))
    C = cuda.device_array((64, 64), np.float32)
    s = cuda.to_device(np.zeros(1, np.float32))
    cuda.synchronize()
    ready = time.perf_counter() - t0
    calls = [
        ("axpy", K.axpy, n // 128, 128, (np.float32(2), x, y, out)),
        ("matmul", K.matmul, (4, 4), (16, 16), (A, A, C)),
        ("reduce_sum", K.reduce_sum, n // 128, 128, (x, s)),
        ("stencil", K.stencil, n // 128, 128, (x, out)),
        ("scale", K.scale, n // 128, 128, (out, np.float32(0.5))),
    ]
    split = len(sys.argv) > 2 and sys.argv[2] == "split"
    times, lookups, phases, current = {}, {}, {}, [None]
    if split and mode == "kcache":
        # Where a hit's time goes: each phase of KCacheDispatcher.compile timed (nested: the
        # key includes the fingerprint); the launch is the first call minus the lookup.
        from kcache.dispatcher import _compat, components, dispatcher as D
        from kcache.store import Store

        def timed(owner, attr, label):
            real = getattr(owner, attr, None)
            if real is None:
                return
            def wrapper(*a, **k):
                t = time.perf_counter()
                try:
                    return real(*a, **k)
                finally:
                    ph = phases.setdefault(current[0], {})
                    ph[label] = ph.get(label, 0.0) + time.perf_counter() - t
            setattr(owner, attr, wrapper)

        timed(D.KCacheDispatcher, "kcache_key", "key")
        timed(components, "fingerprint", "fingerprint")
        timed(Store, "get_or_create", "store read")
        timed(D, "entry_to_kernel", "rebuild")
        timed(_compat.Kernel, "bind", "module load")
    for name, disp, grid, block, args in calls:
        current[0] = name
        start = time.perf_counter()
        if split:  # the overload lookup alone (cache read + rebuild + bind), then the launch
            disp.compile(tuple(disp.typeof_pyval(a) for a in args))
            lookups[name] = time.perf_counter() - start
        disp[grid, block](*args)
        cuda.synchronize()
        times[name] = time.perf_counter() - start
    # kcache reports how long each compile itself took: the rest of a cold first call is
    # kcache's own work (key, lock, encode, publish) plus the launch.
    compiles = {name: disp.stats.compile_seconds for name, disp, *_ in calls
                if hasattr(disp.stats, "compile_seconds")}
    print(json.dumps({"times": times, "lookups": lookups, "compiles": compiles,
                      "phases": phases, "startup_s": ready}))
''')

MODES = ("kcache", "numba", "none")
BASELINE = None  # --baseline DIR: the mode "kcache-base" imports kcache from there


def run_child(workdir, mode, env, *extra):
    child_mode = "kcache" if mode == "kcache-base" else mode
    proc = subprocess.run([sys.executable, str(workdir / "child.py"), child_mode, *extra], cwd=workdir,
                          env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child_env(workdir, mode, cache_dir):
    first = [str(BASELINE)] if mode == "kcache-base" else []
    env = dict(os.environ, BENCH_CACHE="0" if mode == "none" else "1",
               KCACHE_DIR=str(cache_dir / "kcache"), NUMBA_CACHE_DIR=str(cache_dir / "numba"),
               PYTHONPATH=os.pathsep.join(filter(None, [*first, str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("KCACHE_ENABLE", None)
    return env


def bench(repeat, cold_repeat):
    """Cold runs (each on an empty cache) interleaved across modes so that machine noise hits
    them alike; then ``repeat`` warm runs per mode on the last cold run's cache."""
    modes = MODES + (("kcache-base",) if BASELINE is not None else ())
    results = {mode: {"cold": [], "warm": [], "split": []} for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "bench_kernels.py").write_text(KERNELS)
        (workdir / "child.py").write_text(CHILD)
        for i in range(cold_repeat):
            for mode in modes:
                env = child_env(workdir, mode, workdir / f"{mode}-{i}")
                results[mode]["cold"].append(run_child(workdir, mode, env))
        for _round in range(repeat):  # interleaved, so machine noise hits every mode alike
            for mode in modes:
                env = child_env(workdir, mode, workdir / f"{mode}-{cold_repeat - 1}")
                results[mode]["warm"].append(run_child(workdir, mode, env))
                results[mode]["split"].append(run_child(workdir, mode, env, "split"))
    return results


def summarize(results):
    rows = {}
    for mode, r in results.items():
        names = list(r["cold"][0]["times"])
        first = [w["times"][names[0]] for w in r["warm"]]
        further = [w["times"][n] for w in r["warm"] for n in names[1:]]
        rows[mode] = {
            "first_call_ms": 1e3 * statistics.median(first),
            "further_first_calls_ms": 1e3 * statistics.median(further),
            "cold_total_ms": 1e3 * statistics.median(sum(c["times"].values()) for c in r["cold"]),
            "lookup_first_ms": 1e3 * statistics.median(w["lookups"][names[0]] for w in r["split"]),
            "lookup_further_ms": 1e3 * statistics.median(
                w["lookups"][n] for w in r["split"] for n in names[1:]),
        }
    for mode, r in results.items():
        names = list(r["cold"][0]["times"])
        split = [w for w in r["split"] if w.get("phases")]
        if split:
            labels = sorted({lab for w in split for ph in w["phases"].values() for lab in ph})
            rows[mode]["phases_first_ms"] = {lab: 1e3 * statistics.median(
                w["phases"].get(names[0], {}).get(lab, 0.0) for w in split) for lab in labels}
            rows[mode]["phases_further_ms"] = {lab: 1e3 * statistics.median(
                w["phases"].get(n, {}).get(lab, 0.0) for w in split for n in names[1:])
                for lab in labels}
            rows[mode]["launch_further_ms"] = 1e3 * statistics.median(
                w["times"][n] - w["lookups"][n] for w in split for n in names[1:])
    base = rows["none"]["cold_total_ms"]
    for mode in rows:
        rows[mode]["cold_overhead_pct"] = 100 * (rows[mode]["cold_total_ms"] / base - 1)
    for mode in ("kcache", "kcache-base"):
        if mode in rows:
            rows[mode].update(own_cold_overhead(results[mode]["cold"]))
    return rows


def own_cold_overhead(colds):
    """kcache's own time on cold misses, exactly: each first call minus the compile it timed
    (``dispatcher.stats.compile_seconds``), summed over the kernels; median over the cold
    processes, in ms and as a percentage of the compile time. The cold totals above differ by
    more than 3 % between identical processes (numba's compile time alone varies by +-20 %),
    so this is the figure that the <= 3 % goal is checked against."""
    own = [sum(c["times"][k] - c["compiles"][k] for k in c["times"]) for c in colds]
    compiled = [sum(c["compiles"].values()) for c in colds]
    return {"own_cold_ms": 1e3 * statistics.median(own),
            "own_cold_pct": 100 * statistics.median(o / t for o, t in zip(own, compiled))}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path, help="where to write the JSON results")
    parser.add_argument("--repeat", type=int, default=5, help="warm fresh processes per mode")
    parser.add_argument("--cold-repeat", type=int, default=3,
                        help="cold processes (empty cache) per mode; the median is reported")
    parser.add_argument("--baseline", type=Path, help="an earlier revision installed by "
                        "bench/baseline.py: adds the mode kcache-base")
    args = parser.parse_args(argv)
    global BASELINE
    BASELINE = args.baseline.resolve() if args.baseline is not None else None
    if args.repeat < 1 or args.cold_repeat < 1:
        parser.error("--repeat and --cold-repeat must be at least 1")
    from numba import cuda
    if not cuda.is_available():
        parser.error("no CUDA GPU here: run this benchmark on the GPU machine")
    results = bench(args.repeat, args.cold_repeat)
    rows = summarize(results)
    from rich.console import Console
    from rich.table import Table
    table = Table(title=f"first kernel calls in a fresh process (median of {args.repeat})")
    for col in ("mode", "first call ms", "further first calls ms", "of which lookup ms (first, further)",
                "cold total ms", "cold overhead %"):
        table.add_column(col, justify="right")
    for mode, row in rows.items():
        table.add_row(mode, f"{row['first_call_ms']:.2f}", f"{row['further_first_calls_ms']:.3f}",
                      f"{row['lookup_first_ms']:.2f}, {row['lookup_further_ms']:.3f}",
                      f"{row['cold_total_ms']:.0f}", f"{row['cold_overhead_pct']:+.1f}")
    Console().print(table)
    k = rows["kcache"]
    Console().print(f"kcache's own time on cold misses (first calls minus timed compiles): "
                    f"{k['own_cold_ms']:.1f} ms, {k['own_cold_pct']:.2f} % of compile time")
    if "phases_further_ms" in k:
        for which in ("first", "further"):
            parts = ", ".join(f"{lab} {ms:.3f}" for lab, ms in k[f"phases_{which}_ms"].items())
            Console().print(f"kcache hit phases, {which} kernel (ms, median): {parts}")
        Console().print(f"kcache launch after the lookup, further kernels: "
                        f"{k['launch_further_ms']:.3f} ms (median)")
    args.output.write_text(json.dumps({"summary": rows, "raw": results,
                                       "device": cuda.get_current_device().name.decode()
                                       if isinstance(cuda.get_current_device().name, bytes)
                                       else str(cuda.get_current_device().name)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

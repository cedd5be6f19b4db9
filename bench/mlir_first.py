"""numba-cuda-mlir kernels: the first kernel call of a fresh process on a warm cache, with kcache
against numba-cuda-mlir's own ``cache=True`` and no cache, in the same run (issue 34).

    python bench/mlir_first.py [--runs N] [--out bench/results/gpu.json] [--fake]

Figures (section ``mlir`` of the GPU results file; the other sections' figures are kept):

* ``mlir_first.kcache`` / ``mlir_first.numba_cuda_mlir`` / ``mlir_first.none``: the first
  kernel call of a fresh process, warm cache (ms). Goal: kcache <= 10 ms.
* ``mlir_further.*``: each further kernel's first call (ms). Goal: kcache no slower than
  numba-cuda-mlir's own cache (medians).
* ``mlir_concurrent.compiles``: 8 processes started together (released at once through their
  stdin) on an empty kcache root call the three kernels: the compiles counted in all of them.
  Goal: 3 (each kernel once).

Every measurement is a fresh process (the kernels module and the child script written into a
temporary folder): ``KCACHE_ENABLE=1`` with ``cache=True`` kernels (kcache), the kernels'
``cache=True`` without kcache (numba-cuda-mlir's own cache, in ``NUMBA_CACHE_DIR``), and
``cache=False`` (none). Each cache is filled by one process first; ``--runs`` processes per
mode are then timed, modes interleaved. Run it on a wheel install of kcache (bench/install.py),
bytecode compiled, as bench/run.py gpu does.

``--fake`` runs the same flow without a GPU: numba-cuda-mlir is told the device is cc 9.0
(``tools._cached_cc``) and a "call" is the dispatcher's compile step for the call's arguments
(``_compile_impl``, what the native launcher calls), nothing launched. The figures are then
meaningless; the processes, the caches and the counts are real.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import install  # noqa: E402
from figures import MIN_RUNS, Results, figure, log  # noqa: E402

MODES = ("kcache", "numba_cuda_mlir", "none")
SECTION = "mlir"
FLEET = 8

KERNELS = textwrap.dedent('''
    import os
    from numba_cuda_mlir import cuda

    CACHE = os.environ.get("BENCH_CACHE") == "1"

    @cuda.jit(device=True)
    def axpy1(a, x, y):
        return a * x + y

    @cuda.jit(cache=CACHE)
    def axpy(a, x, y, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = axpy1(a, x[i], y[i])

    @cuda.jit(cache=CACHE)
    def reduce_sum(x, out):
        i = cuda.grid(1)
        if i < x.size:
            cuda.atomic.add(out, 0, x[i])

    @cuda.jit(cache=CACHE)
    def scale(a, s):
        i = cuda.grid(1)
        if i < a.size:
            a[i] *= s
''')

CHILD = textwrap.dedent('''
    import json, os, sys, time
    t0 = time.perf_counter()
    if os.environ.get("KCACHE_ENABLE") and "kcache._hook" not in sys.modules:
        import kcache._hook  # what kcache-hook.pth does (a --target install runs no .pth)
    fake = os.environ.get("BENCH_FAKE") == "1"
    if fake:
        import numba_cuda_mlir.tools as tools
        tools._cached_cc = (9, 0)
    if os.environ.get("BENCH_WAIT") == "1":
        sys.stdin.readline()  # released together with the other processes of the fleet
    import numpy as np
    import bench_mlir_kernels as k
    from numba_cuda_mlir import cuda
    t_imports = time.perf_counter()
    n = 1 << 16
    x = np.ones(n, np.float32)
    if fake:
        def call(kernel, *args):
            kernel._compile_impl(list(args))
    else:
        x, y, out, acc = (cuda.to_device(x), cuda.to_device(x), cuda.device_array_like(x),
                          cuda.to_device(np.zeros(1, np.float32)))

        def call(kernel, *args):
            kernel[(n + 255) // 256, 256](*args)
            cuda.synchronize()
    if fake:
        y, out, acc = x, x.copy(), np.zeros(1, np.float32)
    t_setup = time.perf_counter()
    times = []
    for kernel, args in ((k.axpy, (np.float32(2.0), x, y, out)), (k.reduce_sum, (x, acc)),
                         (k.scale, (out, np.float32(0.5)))):
        start = time.perf_counter()
        call(kernel, *args)
        times.append((time.perf_counter() - start) * 1e3)
    counts = {}
    if os.environ.get("KCACHE_ENABLE"):
        import kcache.dispatcher
        counts = kcache.dispatcher.process_counts()
    print(json.dumps({"calls_ms": times, "imports_s": t_imports - t0,
                      "setup_s": t_setup - t_imports, "dispatcher": type(k.axpy).__name__,
                      "kcache_compiles": counts.get("compiles", 0),
                      "kcache_hits": counts.get("hits", 0),
                      "kcache_inspect_compiles": counts.get("inspect_compiles", 0)}))
''')


class Bench:
    def __init__(self, opts, work: Path):
        self.opts, self.work = opts, work
        (work / "bench_mlir_kernels.py").write_text(KERNELS)
        (work / "child.py").write_text(CHILD)

    def env(self, mode: str, cache: Path) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KCACHE_", "NUMBA_"))}
        env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(self.work),
                                                            os.environ.get("PYTHONPATH")])),
                   BENCH_FAKE="1" if self.opts.fake else "0",
                   BENCH_CACHE="0" if mode == "none" else "1", NUMBA_CACHE_DIR=str(cache / "nb"))
        if mode == "kcache":
            env.update(KCACHE_ENABLE="1", KCACHE_DIR=str(cache / "kc"))
        return env

    def child(self, mode: str, cache: Path, stdin=None, wait=False):
        env = self.env(mode, cache)
        if wait:
            env["BENCH_WAIT"] = "1"
        return subprocess.Popen([sys.executable, str(self.work / "child.py")], cwd=self.work,
                                env=env, stdin=subprocess.PIPE if wait else None,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    @staticmethod
    def result(proc) -> dict:
        out, err = proc.communicate(timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"child failed ({proc.returncode}): {err[-2000:]}")
        return json.loads(out.strip().splitlines()[-1])


def first_calls(b: Bench) -> list[dict]:
    """Fill each mode's cache with one process, then time ``--runs`` warm processes per mode,
    modes interleaved."""
    caches = {mode: Path(tempfile.mkdtemp(prefix=f"mlir-{mode}-", dir=b.work)) for mode in MODES}
    for mode in MODES:
        b.result(b.child(mode, caches[mode]))  # cold: fills the cache (none: warms the disk)
    runs = {mode: [] for mode in MODES}
    for i in range(b.opts.runs):
        for mode in MODES:
            run = b.result(b.child(mode, caches[mode]))
            if mode == "kcache" and (run["kcache_hits"] != 3 or run["kcache_compiles"]
                                     or run["kcache_inspect_compiles"]):
                raise RuntimeError(f"a warm kcache process was not served from the cache: {run}")
            runs[mode].append(run)
        log(f"mlir first calls: run {i + 1}/{b.opts.runs}")
    out = []
    for mode in MODES:
        first = [r["calls_ms"][0] for r in runs[mode]]
        further = [t for r in runs[mode] for t in r["calls_ms"][1:]]
        goal_first = "<= 10 ms" if mode == "kcache" else None
        out.append(figure(f"mlir_first.{mode}", SECTION, "numba-cuda-mlir: first kernel call "
                          "of a fresh process, warm cache", first, "ms", mode=mode,
                          goal=goal_first,
                          met=(sorted(first)[len(first) // 2] <= 10.0) if goal_first else None))
        out.append(figure(f"mlir_further.{mode}", SECTION, "numba-cuda-mlir: each further "
                          "kernel's first call, warm cache", further, "ms", mode=mode))
    kc = next(f for f in out if f["id"] == "mlir_further.kcache")
    own = next(f for f in out if f["id"] == "mlir_further.numba_cuda_mlir")
    kc["goal"] = "no slower than numba-cuda-mlir's own cache (medians)"
    kc["met"] = kc["median"] is not None and own["median"] is not None and \
        kc["median"] <= own["median"]
    return out


def concurrent(b: Bench) -> list[dict]:
    """FLEET kcache processes released together on an empty root: compiles in all of them."""
    cache = Path(tempfile.mkdtemp(prefix="mlir-fleet-", dir=b.work))
    procs = [b.child("kcache", cache, wait=True) for _ in range(FLEET)]
    time.sleep(0.5 if b.opts.fake else 2.0)  # let them reach the barrier (imports done or not)
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    results = [b.result(p) for p in procs]
    compiles = sum(r["kcache_compiles"] for r in results)
    return [figure("mlir_concurrent.compiles", SECTION, f"{FLEET} processes starting together "
                   "on an empty cache, three kernels: compiles in all of them", [compiles],
                   "count", mode="kcache", goal="3", met=compiles == 3)]


def install_wheel(root: Path) -> dict:
    """bench/install.py's wheel install, for numba-cuda-mlir: its probe imports numba-cuda,
    which need not be importable here, so the front-end's folder is compiled instead."""
    import importlib.util
    root.mkdir(parents=True)
    whl = install.build_wheel(root)
    site = root / "site"
    install.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                 "--target", str(site), str(whl)], cwd=root, env=install.timed_env(None))
    frontend = os.path.dirname(importlib.util.find_spec("numba_cuda_mlir").origin)
    targets = [str(site), frontend]
    prefix = None if all(install.writable(t) for t in targets) else root / "pycache"
    install.compile_roots(targets, install.timed_env(site, prefix))
    detail = {"install": install.WHEEL, "wheel": whl.name, "site": str(site),
              "pycache_prefix": str(prefix) if prefix else None, "compiled": len(targets),
              "kcache_file": str(site / "kcache" / "__init__.py")}
    install.activate(detail)
    return detail


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="mlir_first.py", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=MIN_RUNS)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "gpu.json")
    parser.add_argument("--fake", action="store_true",
                        help="no GPU: cc 9.0 stand-in, calls compile without launching")
    parser.add_argument("--install", choices=("wheel", "as-is"), default="wheel",
                        help="kcache as a user installs it (a wheel of this tree, bytecode "
                             "compiled: bench/install.py) or the interpreter's own")
    opts = parser.parse_args(argv)
    start = time.perf_counter()
    error = None
    with tempfile.TemporaryDirectory(prefix="kcache-mlir-bench-") as tmp:
        detail = install_wheel(Path(tmp) / "install") if opts.install == "wheel" else \
            install.as_is()
        results = Results(opts.out, "gpu", fake=opts.fake, install=detail, sections=[SECTION])
        b = Bench(opts, Path(tmp))
        try:
            results.add(*first_calls(b))
            results.add(*concurrent(b))
        except Exception as exc:  # a cut run still leaves what it measured
            error = f"{type(exc).__name__}: {exc}"
    results.section(SECTION, time.perf_counter() - start, error)
    results.save(complete=error is None)
    for f in results.doc["figures"]:
        if f["section"] == SECTION:
            print(f"{f['id']:32} median {f['median']:.3f} {f['unit']}  (n={f['n']})")
    if error:
        print(f"mlir_first: {error}", file=sys.stderr)
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(main())

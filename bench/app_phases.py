"""Where an application's lookups go on a GPU (a diagnostic script, not a benchmark).

Usage: python bench/app_phases.py [N] [--layer]   (on the GPU machine; N kernels, default 1,000)

bench/gpu.py's application module of N kernels, its cache filled by ``kcache.compile_for`` in
12 processes, then fresh processes (``KCACHE_ENABLE=1``) launch every kernel once: twice with
the garbage collector on, twice off, and once off under cProfile. Each prints the loop's
time, the time inside ``KCacheDispatcher.compile``, ``kcache.dispatcher.own_phases()`` summed
and as medians (key, store read, rebuild, the driver's module load), and the collector's
time and full collections in the loop. docs/bench-dispatch.md has a run's figures.
``--layer``: every process is served from a bundle layer instead (issue 36): the filled
root is written by ``kcache export`` into one file, named in ``KCACHE_READONLY_DIRS``, with a
new, empty ``KCACHE_DIR`` for each process.
"""
import json, os, subprocess, sys, tempfile, time, statistics as S
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu import app_module
work = tempfile.mkdtemp()
args = [a for a in sys.argv[1:] if a != "--layer"]
layer = "--layer" in sys.argv[1:]
n = int(args[0]) if args else 1000
open(os.path.join(work, "appmod.py"), "w").write(app_module(n))
FILL = '''
import sys, kcache
import appmod
from numba import cuda
cc = tuple(cuda.get_current_device().compute_capability)
part, parts = int(sys.argv[1]), int(sys.argv[2])
for k in appmod.KERNELS[part::parts]:
    kcache.compile_for(k, ["void(float32[::1], float32[::1])"], cc=[cc])
'''
RUN = '''
import gc, time, json, sys, statistics as S
gcs = []
gc.callbacks.append(lambda p, i: gcs.append((p, i["generation"], time.perf_counter())))
import numpy as np
from numba import cuda
import appmod
from kcache.dispatcher import dispatcher as D
x = cuda.to_device(np.ones(1 << 16, np.float32)); out = cuda.to_device(np.zeros(1 << 16, np.float32))
cuda.synchronize()
from numba.cuda.codegen import CUDACodeLibrary
real = D.KCacheDispatcher.compile
acc = [0.0]
def compile(self, *a):
    t = time.perf_counter()
    try: return real(self, *a)
    finally: acc[0] += time.perf_counter() - t
D.KCacheDispatcher.compile = compile
prof = None
if "nogc" in sys.argv: gc.disable()
if "prof" in sys.argv:
    import cProfile; prof = cProfile.Profile(); prof.enable()
T0 = time.perf_counter()
for k in appmod.KERNELS:
    k[128, 128](x, out); cuda.synchronize()
T1 = time.perf_counter()
if prof:
    prof.disable()
    import pstats, io
    b = io.StringIO(); pstats.Stats(prof, stream=b).sort_stats("tottime").print_stats(30); print(b.getvalue()[-6000:])
ph = D.own_phases()
gct = 0.0; full = 0; st = None
for p, g, t in gcs:
    if p == "start": st = (g, t)
    elif st and st[1] >= T0: gct += t - st[1]; full += st[0] == 2
med = lambda f: round(S.median(p[f] for p in ph[1:]), 4)
tot = lambda f: round(sum(p[f] for p in ph), 1)
print(json.dumps({"loop_ms": round((T1 - T0) * 1e3, 1), "in_compile_ms": round(acc[0] * 1e3, 1),
  "own_total_ms": tot("own"), "key_total": tot("key"), "read_total": tot("read"), "rebuild_total": tot("rebuild"), "load_total": tot("load"), "total_total": tot("total"),
  "own_med": med("own"), "key_med": med("key"), "read_med": med("read"), "rebuild_med": med("rebuild"), "load_med": med("load"),
  "gc_ms": round(gct * 1e3, 1), "full_gcs": full, "hits": D.process_counts().get("hits"), "compiles": D.process_counts().get("compiles")}))
'''
open(os.path.join(work, "fill.py"), "w").write(FILL)
open(os.path.join(work, "run.py"), "w").write(RUN)
env = dict(os.environ, BENCH_CACHE="1", KCACHE_ENABLE="1", KCACHE_DIR=os.path.join(work, "cache"), PYTHONPATH=work + os.pathsep + os.environ.get("PYTHONPATH", ""))
env.pop("PYTHONDONTWRITEBYTECODE", None)
t = time.time()
procs = [subprocess.Popen([sys.executable, "fill.py", str(i), "12"], cwd=work, env=env) for i in range(12)]
assert all(p.wait() == 0 for p in procs)
print(f"filled {n} in {time.time() - t:.0f} s", flush=True)
if layer:  # one bundle file of the filled root; each process gets an empty writable root
    bundle = os.path.join(work, "layer.kcb")
    subprocess.run([sys.executable, "-m", "kcache", "export", bundle], cwd=work, env=env, check=True)
    env["KCACHE_READONLY_DIRS"] = bundle
for i, args in enumerate(([], ["nogc"], [], ["nogc"], ["nogc", "prof"])):
    if layer:
        env["KCACHE_DIR"] = os.path.join(work, f"empty{i}")
    r = subprocess.run([sys.executable, "run.py"] + args, cwd=work, env=env, capture_output=True, text=True)
    print(args, flush=True)
    print(r.stdout.strip() or r.stderr[-2000:], flush=True)
__import__("shutil").rmtree(work, ignore_errors=True)

"""Profile of kcache's hit path on a GPU (a diagnostic script, not a benchmark).

Usage: python bench/profile_hit.py   (on the GPU machine)

Fills a cache with the GPU benchmark's kernels (bench/gpu.py) in one process, then in fresh processes times
``dispatcher.compile`` of each further kernel with the phases replaced one at a time (touch
off; stats off) and prints a cProfile of the further lookups, so the cost of each part of a
hit is measured rather than guessed.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu import KERNELS  # noqa: E402

CHILD = r'''
import cProfile, io, json, os, pstats, sys, time
variant = sys.argv[1]
import kcache
kcache.install("cache")
import numpy as np
from numba import cuda
import bench_kernels as K
cuda.current_context()
if variant == "notouch":
    from kcache.tiers.local import LocalTier
    LocalTier.flush_touches = lambda self: None
if variant == "nostats":
    from kcache.store.stats import StatsBook
    StatsBook.add = lambda self, *a, **k: None
    StatsBook.add_hit = lambda self, *a, **k: None
n = 1 << 16
x = cuda.to_device(np.ones(n, np.float32)); y = cuda.to_device(np.ones(n, np.float32))
out = cuda.device_array(n, np.float32); A = cuda.to_device(np.ones((64, 64), np.float32))
C = cuda.device_array((64, 64), np.float32); s = cuda.to_device(np.zeros(1, np.float32))
calls = [(K.axpy, (np.float32(2), x, y, out)), (K.matmul, (A, A, C)), (K.reduce_sum, (x, s)),
         (K.stencil, (x, out)), (K.scale, (out, np.float32(0.5)))]
types = [tuple(d.typeof_pyval(a) for a in args) for d, args in calls]
first_prof = cProfile.Profile() if variant == "profile" else None
if first_prof: first_prof.enable()
t = time.perf_counter(); calls[0][0].compile(types[0]); first = time.perf_counter() - t
if first_prof: first_prof.disable()
prof = cProfile.Profile() if variant == "profile" else None
times = []
for (d, _), ty in zip(calls[1:], types[1:]):
    if prof: prof.enable()
    t = time.perf_counter(); d.compile(ty); times.append(time.perf_counter() - t)
    if prof: prof.disable()
res = {"first_ms": first * 1e3, "further_ms": [v * 1e3 for v in times]}
if prof:
    buf = io.StringIO(); pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
    res["profile"] = buf.getvalue()
    buf = io.StringIO(); pstats.Stats(first_prof, stream=buf).sort_stats("cumulative").print_stats(45)
    res["profile_first"] = buf.getvalue()
print(json.dumps(res))
'''


def main():
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "bench_kernels.py").write_text(KERNELS)
        (work / "child.py").write_text(CHILD)
        env = dict(os.environ, BENCH_CACHE="1", KCACHE_DIR=str(work / "cache"))
        run = lambda v: json.loads(subprocess.run([sys.executable, "child.py", v], cwd=work, env=env,
                                                  capture_output=True, text=True, check=True).stdout.splitlines()[-1])
        run("plain")  # fills the cache
        for variant in ("plain", "notouch", "nostats", "plain", "notouch", "nostats"):
            r = run(variant)
            print(variant, f"first {r['first_ms']:.2f} ms, further", " ".join(f"{v:.3f}" for v in r["further_ms"]))
        prof = run("profile")
        print("--- the first lookup of a process (cumulative):\n" + prof["profile_first"])
        print("--- further lookups (own time):\n" + prof["profile"])


if __name__ == "__main__":
    main()

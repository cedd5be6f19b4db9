"""Throughput of ``kcache warm`` (issue 9 goal: ``--jobs 2`` >= 1.7x ``--jobs 1`` on 2 cores).

Writes a package of N kernels (each a few arithmetic loops and a device function call, so
that a compile costs about what a small real kernel does) and a signatures file for them,
then times complete ``python -m kcache warm PKG --signatures FILE --cc 8.0,9.0 --jobs J``
runs into a fresh cache root each time (process start to exit: what a container build
waits for), alternating ``--jobs 1`` and ``--jobs 2`` R times. Reports the median wall time
of each, compiles per second, the CPU time of warm and its workers (from ``getrusage``), the
1-minute load average when each run started (other work on a shared machine takes CPU from
both; with a load above the core count the speed-up cannot show) and the speed-up. Run:

    .venv/bin/python bench/bench_warm.py [--kernels 48] [--runs 3] [--jobs 1 2]

Results are recorded in docs/bench-warm.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

KERNEL = '''
@cuda.jit
def k{i}(x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        acc = x[i] * {i}.5
        for j in range(8):
            acc = helpers.mix(acc, y[i] + j) * 0.5 + math.sin(acc) * {i}.25
        if acc > 1.0:
            acc = math.sqrt(acc) + math.exp(-acc)
        out[i] = acc
'''

HELPERS = '''
from numba import cuda

@cuda.jit(device=True)
def mix(a, b):
    return a * 0.75 + b * 0.25
'''


def make_package(base: Path, n: int) -> tuple[Path, Path]:
    """base/benchpkg with ``n`` kernels; returns (package folder, signatures file)."""
    pkg = base / "benchpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text(textwrap.dedent(HELPERS))
    body = "import math\nfrom numba import cuda\nfrom benchpkg import helpers\n"
    body += "".join(KERNEL.format(i=i) for i in range(n))
    (pkg / "kernels.py").write_text(body)
    sigs = base / "bench.sigs"
    sig = "void(float32[::1], float32[::1], float32[::1])"
    sigs.write_text("".join(f"benchpkg.kernels:k{i}  {sig}\n" for i in range(n)))
    return pkg, sigs


def run_warm(base: Path, pkg: Path, sigs: Path, jobs: int, ccs: str) -> dict:
    """One complete ``kcache warm`` run into a fresh root: wall and CPU seconds."""
    root = Path(tempfile.mkdtemp(dir=base, prefix=f"root-j{jobs}-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env["HOME"] = env["XDG_CACHE_HOME"] = str(base / "home")
    cmd = [sys.executable, "-m", "kcache", "warm", str(pkg), "--signatures", str(sigs),
           "--cc", ccs, "--jobs", str(jobs), "--json", "--dir", str(root)]
    load = os.getloadavg()[0]  # other work on the machine: the figures are only as good
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=base, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # warm and its workers, all waited for
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if proc.returncode != 0:
        sys.exit(f"warm failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    doc = json.loads(proc.stdout)
    compiled = doc["summary"]["compiled"]
    return {"wall": wall, "compiled": compiled, "cpu": cpu, "load": load,
            "compile_seconds": sum(r["compile_seconds"] or 0 for r in doc["results"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=48)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--cc", default="8.0,9.0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kcache-bench-warm-") as tmp:
        base = Path(tmp)
        pkg, sigs = make_package(base, args.kernels)
        results: dict = {j: [] for j in args.jobs}
        empty = base / "empty.sigs"
        empty.write_text("# nothing: start-up and discovery only\n")
        serial = statistics.median(run_warm(base, pkg, empty, 1, args.cc)["cpu"]
                                   for _ in range(args.runs))
        for _ in range(args.runs):
            for jobs in args.jobs:  # alternate, so drift on a shared machine hits both alike
                results[jobs].append(run_warm(base, pkg, sigs, jobs, args.cc))
    n_cc = len(args.cc.split(","))
    print(f"kcache warm: {args.kernels} kernels x {n_cc} ccs = {args.kernels * n_cc} compiles; "
          f"{args.runs} runs each; {os.cpu_count()} cores; Python {platform.python_version()}")
    print(f"{'jobs':>4}  {'median wall s':>13}  {'min s':>7}  {'compiles/s':>10}  "
          f"{'sum of compile s':>16}  {'CPU s':>6}  {'load avg':>8}")
    medians = {}
    for jobs, runs in results.items():
        walls = [r["wall"] for r in runs]
        medians[jobs] = statistics.median(walls)
        compiled = runs[0]["compiled"]
        print(f"{jobs:>4}  {medians[jobs]:>13.2f}  {min(walls):>7.2f}  "
              f"{compiled / medians[jobs]:>10.2f}  "
              f"{statistics.median(r['compile_seconds'] for r in runs):>16.2f}  "
              f"{statistics.median(r['cpu'] for r in runs):>6.1f}  "
              f"{statistics.median(r['load'] for r in runs):>8.1f}")
    base_jobs = min(medians)
    for jobs in medians:
        if jobs != base_jobs:
            print(f"speed-up --jobs {jobs} vs --jobs {base_jobs}: "
                  f"{medians[base_jobs] / medians[jobs]:.2f}x (measured wall time)")
    if serial is not None and 1 in results and 2 in results:
        # For a machine busy with other work: what the measured CPU times give on an idle
        # one, where one process runs at 1 CPU s per s and the part after start-up is shared
        # by two processes. Labelled as a projection, next to the measured figure.
        cpu1 = statistics.median(r["cpu"] for r in results[1])
        cpu2 = statistics.median(r["cpu"] for r in results[2])
        print(f"start-up and discovery alone (no compile): {serial:.1f} CPU s; projected "
              f"speed-up on an idle 2-core machine from the CPU times: "
              f"{cpu1 / (serial + (cpu2 - serial) / 2):.2f}x")


if __name__ == "__main__":
    main()

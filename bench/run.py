"""kcache's benchmark harness: kcache, numba-cuda's ``cache=True`` and no cache, on the same
kernels in the same run; results as JSON, rendered into docs/benchmarks.md with plots.

    python bench/run.py gpu [--out bench/results/gpu.json] [--fake]   # on the GPU machine
    python bench/run.py cpu [--out bench/results/cpu.json]            # on the 2-core machine
    python bench/run.py render                                        # docs/benchmarks.md + PNGs

``gpu``: bench/gpu.py (first calls in fresh processes, processes starting together, an
application-sized module); ``--fake`` runs its whole flow without a GPU (compiles, never
launches) to check it. ``cpu``: bench/cpu.py (store lookup at 100,000 entries, CLI start-up,
``ls``/``prune`` at scale, ``warm`` throughput, remote hits). ``render``: bench/render.py (needs
``pip install matplotlib`` for the plots; ``--no-plots`` without it).

On the GPU machine (no network; the wheels it lacks are carried, see
../shared/device/README.md: run ``../shared/device/fetch-wheels.sh redis zstandard`` here
first, then carry ``.whl``), from the repository root::

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \\
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site \\
      && python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . \\
      && python3 bench/run.py gpu --out $OUT/gpu.json

(about 6-7 minutes; ``--budget`` seconds, default 400, bounds it by dropping the largest
application sizes first). Then, here: copy ``gpu.json`` to bench/results/gpu.json and run
``python bench/run.py render``. A copied tree whose ``.git`` is not its own records its commit
as ``-dirty``; ``BENCH_COMMIT=<rev>`` names the commit the tree really is.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from figures import MIN_RUNS, Results, load, log  # noqa: E402

REPO = HERE.parent
RESULTS = HERE / "results"


def sizes(text: str) -> list[int]:
    try:
        out = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers separated by commas, e.g. 10,50,100,200")
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: sizes must be at least 1")
    return out


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="bench/run.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="part", required=True, metavar="PART")
    g = sub.add_parser("gpu", help="the GPU part (run it on the GPU machine)")
    g.add_argument("--out", type=Path, default=RESULTS / "gpu.json")
    g.add_argument("--runs", type=positive, default=MIN_RUNS, help="processes behind each figure")
    g.add_argument("--fleet", type=positive, default=8, help="processes starting together")
    g.add_argument("--app-sizes", type=sizes, default=[10, 50, 100, 200],
                   help="kernels in the application-sized modules (default 10,50,100,200)")
    g.add_argument("--budget", type=float, default=400.0,
                   help="seconds the whole part may take: application sizes that would not fit "
                        "are dropped, largest first (0: no limit)")
    g.add_argument("--baseline", type=Path, default=None,
                   help="an earlier revision installed by bench/baseline.py: its warm-cache first "
                        "calls are measured in the same run (before and after)")
    g.add_argument("--fake", action="store_true",
                   help="no GPU: compile for cc 9.0 without launching (checks the flow only)")
    g.add_argument("--quick", action="store_true",
                   help="smallest flow (1 run, 2 processes, one module of 3 kernels): for tests")
    c = sub.add_parser("cpu", help="the CPU part (no GPU needed)")
    c.add_argument("--out", type=Path, default=RESULTS / "cpu.json")
    c.add_argument("--runs", type=positive, default=MIN_RUNS, help="runs behind each figure")
    c.add_argument("--entries", type=positive, default=100_000, help="entries of the large cache")
    c.add_argument("--ls-entries", type=positive, default=10_000)
    c.add_argument("--cli-rounds", type=positive, default=7, help="rounds of CLI start-up runs")
    c.add_argument("--warm-kernels", type=positive, default=64,
                   help="kernels of the warm package (each compiled for 2 ccs)")
    c.add_argument("--only", type=lambda t: t.split(","), default=None,
                   help="sections to run, e.g. store,cli (default: all)")
    c.add_argument("--quick", action="store_true", help="tiny sizes and 1 run: for tests")
    r = sub.add_parser("render", help="docs/benchmarks.md and its plots from the JSON files")
    r.add_argument("--gpu", type=Path, default=RESULTS / "gpu.json")
    r.add_argument("--cpu", type=Path, default=RESULTS / "cpu.json")
    r.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks.md")
    r.add_argument("--no-plots", action="store_true", help="the Markdown only (no matplotlib)")
    return ap


def main(argv=None) -> int:
    opts = parser().parse_args(argv)
    if opts.part == "render":
        return render(opts)
    if opts.quick:
        quick(opts)
    results = Results(opts.out, opts.part, fake=getattr(opts, "fake", False))
    if opts.part == "gpu":
        import gpu
        status = gpu.run(opts, results)
    else:
        import cpu
        status = cpu.run(opts, results)
    if opts.out.exists():
        log(f"bench: {opts.part} part done in {results.doc['seconds']:.0f} s; results in {opts.out}")
    return status


def quick(opts) -> None:
    opts.runs = 1
    if opts.part == "gpu":
        opts.fleet, opts.app_sizes, opts.budget = 2, [3], 0.0
    else:
        opts.entries, opts.ls_entries, opts.cli_rounds, opts.warm_kernels = 6000, 100, 1, 2


def render(opts) -> int:
    import render as r
    gpu, cpu = load(opts.gpu), load(opts.cpu)
    plots = not opts.no_plots and gpu is not None
    if plots:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            log("bench: render: the plots need matplotlib (pip install matplotlib), or give "
                "--no-plots")
            return 2
        for path in r.plots(gpu, opts.out.parent / "img"):
            log(f"bench: wrote {path}")
    # a section the last GPU run did not reach is shown from the last run that did
    earlier = load(RESULTS / "gpu-earlier.json") if (RESULTS / "gpu-earlier.json").exists() else None
    opts.out.write_text(r.render_markdown(gpu, cpu, plots=gpu is not None, earlier=earlier))
    log(f"bench: wrote {opts.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

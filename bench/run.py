"""kcache's benchmark harness: kcache, numba-cuda's ``cache=True`` and no cache, on the same
kernels in the same run; results as JSON, rendered into docs/benchmarks.md with plots.

    python bench/run.py gpu [--out bench/results/gpu.json] [--sections app] [--fake]   # GPU machine
    python bench/run.py cpu [--out bench/results/cpu.json]            # on the 2-core machine
    python bench/run.py merge --out bench/results/gpu.json A.json B.json   # sections run apart
    python bench/run.py render                                        # docs/benchmarks.md + PNGs

``gpu``: bench/gpu.py (first calls in fresh processes, processes starting together, an
application of 100 and 1,000 kernels against the floor, from the directory root and from a
bundle layer); ``--sections`` runs some of them, the others' figures kept from the ``--out``
file; ``--fake`` runs the flow without a GPU (compiles, never launches) to check it. ``cpu``: bench/cpu.py (store lookup at 100,000 entries, CLI
start-up, ``ls``/``prune`` at scale, ``warm`` throughput, remote hits). ``render``:
bench/render.py (needs ``pip install matplotlib`` for the plots; ``--no-plots`` without it).

Both parts time kcache as a user installs it (``--install wheel``, the default, bench/install.py):
a wheel of this tree installed into a temp folder, bytecode compiled, PYTHONDONTWRITEBYTECODE
unset in the timed processes; the results say so (``"install": "wheel, bytecode compiled"``).

On the GPU machine (no network; the wheels it lacks are carried in .whl/, see
../shared/device/README.md), from the repository root, the whole run in one go::

    bash bench/gpu_run.sh first_calls,fleet     # about 5 minutes
    bash bench/gpu_run.sh app                   # about 6-7 minutes

each writing ``$OUT/gpu.json`` (bench/gpu_run.sh says how). Then, here: ``python bench/run.py
merge --out bench/results/gpu.json first.json app.json`` (or copy a complete one) and
``python bench/run.py render``. A copied tree whose ``.git`` is not its own records its
commit as ``-dirty``; ``BENCH_COMMIT=<rev>`` names the commit the tree really is.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from figures import MIN_RUNS, Results, load, log, merge  # noqa: E402

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


def names(text: str) -> list[str]:
    out = [s.strip() for s in text.split(",") if s.strip()]
    if not out:
        raise argparse.ArgumentTypeError(f"{text!r}: expected section names separated by commas")
    return out


def install_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--install", choices=("wheel", "as-is"), default="wheel",
                   help="how the timed processes get kcache: a wheel of this tree installed into "
                        "a temp folder, bytecode compiled (default; bench/install.py), or the "
                        "interpreter's own kcache as it is")
    p.add_argument("--install-dir", type=Path, default=None,
                   help="folder for the wheel install (default: a temp folder, removed after)")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="bench/run.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="part", required=True, metavar="PART")
    g = sub.add_parser("gpu", help="the GPU part (run it on the GPU machine)")
    g.add_argument("--out", type=Path, default=RESULTS / "gpu.json")
    g.add_argument("--runs", type=positive, default=MIN_RUNS, help="processes behind each figure")
    g.add_argument("--fleet", type=positive, default=8, help="processes starting together")
    g.add_argument("--sections", type=names, default=None,
                   help="sections to run, e.g. app (default: first_calls,fleet,app); the figures "
                        "of the others are kept from the --out file")
    g.add_argument("--app-sizes", type=sizes, default=None,
                   help="kernels in the application modules (default 100,1000; 3,4 with --quick)")
    g.add_argument("--budget", type=float, default=540.0,
                   help="seconds the whole part may take: the no-cache runs of the application "
                        "that would not fit are left out, largest size first (0: no limit)")
    g.add_argument("--baseline", type=Path, default=None,
                   help="an earlier revision installed by bench/baseline.py: its warm-cache first "
                        "calls are measured in the same run (before and after)")
    g.add_argument("--fake", action="store_true",
                   help="no GPU: compile for cc 9.0 without launching (checks the flow only)")
    g.add_argument("--quick", action="store_true",
                   help="smallest flow (1 run, 2 processes, one module of 3 kernels): for tests")
    install_options(g)
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
    install_options(c)
    m = sub.add_parser("merge", help="one results file from runs of separate sections")
    m.add_argument("files", type=Path, nargs="+", help="results files of one part, oldest first: "
                   "each section is taken from the last file that has it")
    m.add_argument("--out", type=Path, required=True)
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
    if opts.part == "merge":
        return merge_files(opts)
    if opts.quick:
        quick(opts)
    if opts.part == "gpu":  # what can be refused is refused before the install
        opts.app_sizes = opts.app_sizes or [100, 1000]
        import gpu
        unknown = sorted(set(opts.sections or ()) - set(gpu.SECTIONS))
        if unknown:
            log(f"bench: unknown section(s) {', '.join(unknown)}; "
                f"the GPU part's are {', '.join(gpu.SECTIONS)}")
            return 2
        if gpu.refused(opts):
            return 2
    with installed(opts) as detail:
        if opts.part == "gpu":
            import gpu
            results = Results(opts.out, opts.part, fake=opts.fake, install=detail,
                              sections=opts.sections)
            status = gpu.run(opts, results)
        else:
            import cpu
            results = Results(opts.out, opts.part, install=detail, sections=opts.only)
            status = cpu.run(opts, results)
    if opts.out.exists():
        log(f"bench: {opts.part} part done in {results.doc['seconds']:.0f} s; results in {opts.out}")
    return status


@contextlib.contextmanager
def installed(opts):
    """kcache installed for the timed processes as ``--install`` says (bench/install.py);
    yields the install's description for the results."""
    import install
    if opts.install == "as-is":
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # timed processes read and write bytecode
        yield install.as_is()
        return
    root = opts.install_dir or Path(tempfile.mkdtemp(prefix="kcache-bench-install-"))
    try:
        log("bench: installing kcache from a wheel of this tree, bytecode compiled ...")
        detail = install.wheel(root)
        install.activate(detail)
        log(f"bench: installed {detail['wheel']} into {detail['site']} "
            f"({detail['compiled']} folders compiled"
            f"{', bytecode under ' + detail['pycache_prefix'] if detail['pycache_prefix'] else ''})")
        yield detail
    finally:
        if opts.install_dir is None:
            shutil.rmtree(root, ignore_errors=True)


def merge_files(opts) -> int:
    docs = [load(p) for p in opts.files]
    missing = [str(p) for p, d in zip(opts.files, docs) if d is None]
    if missing:
        log(f"bench: merge: no such file: {', '.join(missing)}")
        return 2
    if len({(d["part"], bool(d.get("fake"))) for d in docs}) != 1:
        log("bench: merge: the files are of different parts (or fake and real runs)")
        return 2
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(merge(docs), indent=1) + "\n")
    log(f"bench: wrote {opts.out}")
    return 0


def quick(opts) -> None:
    opts.runs = 1
    if opts.part == "gpu":
        opts.fleet, opts.budget = 2, 0.0
        opts.app_sizes = opts.app_sizes or [3, 4]  # an explicit --app-sizes is kept
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

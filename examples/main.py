"""The main job: example kernels served by kcache.

With a GPU: runs the example kernels (examples/kernels.py, with a device function in
examples/mathbits.py) in two fresh processes under kcache's transparent mode; the first may
compile, the second must load every kernel from the cache; results are checked against NumPy
and each run's statistics are shown. Without a GPU: compiles the kernels for a compute
capability (default 9.0) with ``kcache.compile_for`` and lists the cache entries.

Usage: python examples/main.py [--cc 9.0] [--cache-dir DIR]
Exit status: 0 on success, 1 if a result is wrong or the second run compiled anything.
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child() -> None:
    """One fresh process: install kcache, launch every example kernel, print stats as JSON."""
    sys.path.insert(0, str(REPO))
    import kcache
    kcache.install("cache")
    from examples import kernels
    dispatchers = kernels.run_all()
    rows = {}
    for name, disp in dispatchers.items():
        s = disp.stats
        rows[name] = {"hits": sum(s.cache_hits.values()), "misses": sum(s.cache_misses.values()),
                      "compiles": s.compiles, "compile_s": round(s.compile_seconds, 3)}
    print(json.dumps(rows))


def with_gpu(env) -> int:
    from rich.console import Console
    from rich.table import Table
    console = Console()
    runs = []
    for run in (1, 2):
        proc = subprocess.run([sys.executable, __file__, "--child"], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            console.print(f"[red]run {run} failed[/red]\n{proc.stderr[-4000:]}")
            return 1
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    table = Table(title="example kernels under kcache (two fresh processes)")
    for col in ("kernel", "run", "hits", "misses", "compiles", "compile s"):
        table.add_column(col)
    for run, rows in enumerate(runs, 1):
        for name, r in rows.items():
            table.add_row(name, str(run), str(r["hits"]), str(r["misses"]), str(r["compiles"]),
                          str(r["compile_s"]))
    console.print(table)
    second = runs[1].values()
    if any(r["compiles"] or r["misses"] for r in second):
        console.print("[red]the second run compiled kernels: the cache did not serve them[/red]")
        return 1
    console.print("results checked against NumPy; second run: all hits")
    return 0


def without_gpu(cc, env) -> int:
    sys.path.insert(0, str(REPO))
    import kcache
    from examples import kernels
    store = kcache.Store()
    for kernel, sigs in kernels.SIGNATURES.items():
        keys = kcache.compile_for(kernel, sigs, cc=[cc], store=store)
        print(f"compiled {kernel.py_func.__name__} for cc {cc[0]}.{cc[1]}: {keys[0][:16]}")
    proc = subprocess.run([sys.executable, "-m", "kcache", "ls"], env=env)
    if proc.returncode != 0:  # the CLI is not there: list the entries directly
        for info in store.entries():
            print(info.key[:16], info.arch, info.kernel, info.signature,
                  f"{info.file_size} bytes")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cc", default="9.0", help="compute capability without a GPU (9.0)")
    parser.add_argument("--cache-dir", help="cache directory (default: KCACHE_DIR or the "
                        "user cache directory)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child()
        return 0
    env = dict(os.environ)
    if args.cache_dir:
        env["KCACHE_DIR"] = os.environ["KCACHE_DIR"] = args.cache_dir
    from numba import cuda
    if cuda.is_available():
        return with_gpu(env)
    from kcache.dispatcher import parse_cc
    try:
        cc = parse_cc(args.cc)
    except ValueError as exc:
        parser.error(str(exc))
    return without_gpu(cc, env)


if __name__ == "__main__":
    sys.exit(main())

"""The main job: example kernels served by kcache.

With a GPU: runs the example kernels (examples/kernels.py, with device functions in
examples/mathbits.py) in two fresh processes under kcache's transparent mode; the first may
compile, the second must load every kernel from the cache; results are checked against NumPy
and each run's statistics are shown. Without a GPU: says so, compiles the kernels for one
compute capability (default 9.0, i.e. sm_90a) with ``kcache.compile_for`` without launching
them, says per kernel whether it was compiled or already cached, and lists the entries with
``kcache ls``.

Usage: python examples/main.py [--cc 9.0] [--cache-dir DIR]
Exit status: 0 on success; 1 if a result is wrong, the second run compiled anything, or an
entry could not be stored; 2 for a bad argument or setting (one line on stderr).
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROG = "examples/main.py"


def _short(key) -> str:
    return key[:12] if key else "-"  # as `kcache ls` shows keys


def child() -> None:
    """One fresh process: install kcache, launch every example kernel, print stats as JSON."""
    sys.path.append(str(REPO))  # for `examples`; appended so it never hides an installed kcache
    import kcache
    kcache.install("cache")
    from examples import kernels
    dispatchers = kernels.run_all()
    rows = {}
    for name, disp in dispatchers.items():
        s = disp.stats
        rows[name] = {"hits": sum(s.cache_hits.values()), "misses": sum(s.cache_misses.values()),
                      "compiles": s.compiles, "compile_s": s.compile_seconds,
                      "keys": sorted(s.keys.values()), "uncached": list(s.uncached.values())}
    print(json.dumps(rows))


def with_gpu(env, root) -> int:
    from numba import cuda
    from rich.console import Console
    from rich.table import Table

    from kcache.dispatcher.components import arch_name
    console = Console()
    device = cuda.get_current_device()
    cc = tuple(device.compute_capability)
    name = device.name.decode() if isinstance(device.name, bytes) else device.name
    console.print(f"GPU found: {name}, cc {cc[0]}.{cc[1]} ({arch_name(cc)}).")
    console.print(f"Running the example kernels in two fresh processes under kcache.install(); "
                  f"cache: {root}")
    runs = []
    for run in (1, 2):
        proc = subprocess.run([sys.executable, __file__, "--child"], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            console.print(f"[red]run {run} failed[/red]\n{proc.stderr[-4000:]}")
            return 1
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    table = Table(title="example kernels under kcache (two fresh processes)")
    for col in ("kernel", "run", "served", "hits", "misses", "compiles", "compile s", "key"):
        table.add_column(col)
    for run, rows in enumerate(runs, 1):
        for kname, r in rows.items():
            served = "compiled" if r["compiles"] else "from the cache"
            if r["uncached"]:
                served = f"compiled, not cached ({r['uncached'][0]})"
            table.add_row(kname, str(run), served, str(r["hits"]), str(r["misses"]),
                          str(r["compiles"]), f"{r['compile_s']:.2f}",
                          ", ".join(_short(k) for k in r["keys"]))
    console.print(table)
    if any(r["compiles"] or r["misses"] for r in runs[1].values()):
        console.print("[red]the second run compiled kernels: the cache did not serve them[/red]")
        return 1
    console.print("Results checked against NumPy; second run: every kernel loaded from the "
                  "cache, nothing compiled.")
    return 0


def without_gpu(cc, store, env) -> int:
    from kcache.dispatcher import CompileForError, compile_for_report
    from kcache.dispatcher.components import arch_name
    from examples import kernels
    print(f"No GPU found (numba-cuda sees no CUDA device): the example kernels are compiled "
          f"for cc {cc[0]}.{cc[1]} ({arch_name(cc)}) and not launched.")
    print(f"Cache: {store.root} (change it with --cache-dir or KCACHE_DIR)")
    print()
    for kernel, sigs in kernels.SIGNATURES.items():
        try:
            results = compile_for_report(kernel, sigs, cc=[cc], store=store)
        except CompileForError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return 1
        for r in results:
            what = "already cached" if r.cached else f"compiled in {r.compile_seconds:.2f} s"
            print(f"  {kernel.py_func.__name__:<14} {what:<22} key {_short(r.key)}")
    print()
    print("Entries in the cache (kcache ls):")
    sys.stdout.flush()
    proc = subprocess.run([sys.executable, "-m", "kcache", "ls"], env=env)
    if proc.returncode != 0:  # the CLI failed: list the entries directly
        for info in store.entries():
            print(_short(info.key), info.arch, info.kernel, info.signature,
                  f"{info.file_size} bytes")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cc", default="9.0", help="compute capability to compile for when "
                        "there is no GPU (default 9.0, i.e. sm_90a)")
    parser.add_argument("--cache-dir", help="cache directory (default: KCACHE_DIR or the "
                        "user cache directory)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child()
        return 0
    if args.cache_dir is not None and not args.cache_dir.strip():
        # An unset shell variable (--cache-dir "$X") must not silently mean the default cache.
        print(f"{PROG}: --cache-dir needs a directory path, got {args.cache_dir!r} (omit "
              "--cache-dir for KCACHE_DIR or the user cache directory)", file=sys.stderr)
        return 2
    env = dict(os.environ)
    if args.cache_dir is not None:
        env["KCACHE_DIR"] = os.environ["KCACHE_DIR"] = args.cache_dir
    sys.path.append(str(REPO))  # for `examples`; appended so it never hides an installed kcache
    import kcache
    from kcache.dispatcher import check_cc
    try:
        cc = check_cc(args.cc)  # checked first: a usage error writes nothing
    except ValueError as exc:
        print(f"{PROG}: --cc: {exc}", file=sys.stderr)
        return 2
    try:
        # --cache-dir is passed as the root argument so a bad one is named as such, not as
        # the environment variable it is also handed to the child processes in.
        store = kcache.Store(args.cache_dir)
    except kcache.KcacheError as exc:  # a bad setting: one line, usage error
        text = str(exc).replace("(from argument)", "(from --cache-dir)")
        print(f"{PROG}: {text}", file=sys.stderr)
        return 2
    from numba import cuda
    if cuda.is_available():
        if args.cc != parser.get_default("cc"):
            print(f"{PROG}: --cc is ignored with a GPU: kernels are built for the GPU's cc")
        return with_gpu(env, store.root)
    return without_gpu(cc, store, env)


if __name__ == "__main__":
    sys.exit(main())

"""The main job: example kernels warmed, shipped in a bundle and served by kcache.

1. ``kcache warm`` compiles the example kernels (examples/kernels.py, with device functions in
   examples/mathbits.py; signatures in examples/kernels.sigs) and numba-cuda's own
   module-level test kernels (``numba.cuda.tests.cudapy.cache_usecases``, signatures in
   examples/cache_usecases.sigs) for each ``--cc`` (default 8.0 and 9.0) into the cache,
   without a GPU, and says per kernel whether it was compiled or already cached.
2. ``kcache export`` writes the cache's entries into a bundle; ``kcache import`` adds them to a
   fresh cache root; ``kcache ls`` lists that root, and the two roots are compared: the same
   entries in both.
3. With a GPU (its cc is added to the list): a fresh process pointed at the imported root
   (``KCACHE_DIR``) launches every kernel under ``kcache.install("all")``, checks the results
   against NumPy, and must load every kernel from the cache: 100 % hits, no compile. Its
   statistics are shown.

``cache_usecases`` needs ``pytest`` and ``filecheck`` (numba.cuda.testing imports them; the test
extra installs them): without them that part is skipped with one line saying so.

Usage: python examples/main.py [--cc 8.0,9.0] [--cache-dir DIR] [--work-dir DIR] [--jobs N]
Exit status: 0 on success; 1 if a kernel failed to compile, a result is wrong, the GPU run
compiled or missed anything, or the bundle's entries differ; 2 for a bad argument or setting
(one line on stderr).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROG = "examples/main.py"
EXAMPLE_SIGS = REPO / "examples" / "kernels.sigs"
USECASE_SIGS = REPO / "examples" / "cache_usecases.sigs"
USECASES = "numba.cuda.tests.cudapy.cache_usecases"


def _short(key) -> str:
    return key[:12] if key else "-"  # as `kcache ls` shows keys


#: Characters of a signature on a line (80 columns in all); a longer one keeps its start and
#: end, where overloads differ most often.
SIG_WIDTH = 34


def _signature(text) -> str:
    """An entry's signature as `kcache ls` shows it (numba's short form, float32[::1])."""
    from kcache.entry.shortsig import short_signature
    short = short_signature(text) if text else "-"
    if len(short) <= SIG_WIDTH:
        return short
    half = (SIG_WIDTH - 1) // 2
    return short[:half] + "…" + short[-(SIG_WIDTH - 1 - half):]


def _grouped(rows, line) -> None:
    """Print ``rows`` (dicts with ``kernel``) under their kernel's name, one line each made
    by ``line(row)``: a kernel's overloads are told apart by their signatures."""
    current = None
    for row in rows:
        name = (row["kernel"] or "-").rsplit(":", 1)[-1]
        if name != current:
            print(f"  {name}")
            current = name
        print(f"    {line(row)}")


def _size(n: int) -> str:
    from kcache.config import format_size
    return format_size(n)  # as `kcache ls` shows sizes on a terminal: 21.3 KiB


def _kcache(*args, env, cwd, check=True) -> subprocess.CompletedProcess:
    """``python -m kcache ARGS`` in ``cwd`` with stdout captured (stderr passes through).
    ``cwd`` is never the repository root: there ``python -m`` would import the kcache/ folder
    itself, which is not the installed package when kcache is not installed editable."""
    proc = subprocess.run([sys.executable, "-m", "kcache", *map(str, args)], env=env, cwd=cwd,
                          stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise _Failed(f"kcache {args[0]} failed (exit status {proc.returncode})")
    return proc


class _Failed(Exception):
    """A step of the main job failed; the message says which."""


# --- the GPU process ----------------------------------------------------------------------------

def child(with_usecases: bool) -> None:
    """One fresh process: install kcache (every kernel), launch every kernel, print per-kernel
    statistics as JSON."""
    sys.path.append(str(REPO))  # for `examples`; appended so it never hides an installed kcache
    import kcache
    kcache.install("all")  # cache_usecases has cache=False kernels too: they were warmed as well
    from examples import kernels
    dispatchers = dict(kernels.run_all())
    if with_usecases:
        from examples import usecases
        dispatchers.update(usecases.launch_all())
    from kcache.dispatcher import process_counts
    rows, seen = {}, set()
    for name, disp in dispatchers.items():
        s = disp.stats
        first = id(disp) not in seen  # record_return is launched twice: count it once
        seen.add(id(disp))
        rows[name] = {"hits": sum(s.cache_hits.values()), "misses": sum(s.cache_misses.values()),
                      "compiles": s.compiles, "compile_s": s.compile_seconds, "first": first,
                      "keys": sorted(s.keys.values()), "uncached": list(s.uncached.values())}
    print(json.dumps({"kernels": rows, "process": process_counts()}))


def gpu_run(env, imported: Path, with_usecases: bool, cwd: Path, temporary: bool = False) -> int:
    """Launch every kernel in a fresh process served by ``imported``; 0 when all were hits.
    ``temporary``: ``imported`` is removed at the end, so it is not named by its path."""
    from rich.console import Console
    from rich.table import Table
    console = Console()
    where = "the imported root" if temporary else str(imported)
    console.print(f"\nLaunching every kernel in a fresh process with KCACHE_DIR={where} "
                  "(kcache.install('all')):", soft_wrap=True)
    child_env = dict(env, KCACHE_DIR=str(imported))
    child_env.pop("KCACHE_READONLY_DIRS", None)
    argv = [sys.executable, str(Path(__file__).resolve()), "--child"]
    argv += ["--usecases"] if with_usecases else []
    proc = subprocess.run(argv, env=child_env, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        console.print(f"[red]the GPU process failed[/red]\n{proc.stderr[-4000:]}")
        return 1
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    rows, process = doc["kernels"], doc["process"]
    table = Table(title="kernels launched from the imported root")
    for col in ("kernel", "served", "hits", "misses", "compiles", "key"):
        table.add_column(col)
    for name, r in rows.items():
        served = "compiled" if r["compiles"] else "from the cache"
        if r["uncached"]:
            served = f"compiled, not cached ({r['uncached'][0]})"
        table.add_row(name, served, str(r["hits"]), str(r["misses"]), str(r["compiles"]),
                      ", ".join(_short(k) for k in r["keys"]))
    console.print(table)
    sys.stdout.flush()
    print("Statistics of the imported root (kcache stats):")
    print(_kcache("stats", "--dir", imported, env=env, cwd=cwd).stdout, end="")
    counted = [r for r in rows.values() if r["first"]]
    hits = sum(r["hits"] for r in counted)
    bad = [n for n, r in rows.items() if r["compiles"] or r["misses"] or r["uncached"]]
    if bad or any(v for k, v in process.items() if k != "hits"):
        console.print(f"[red]compiled or missed: {', '.join(bad) or process}: the imported "
                      "root did not serve them[/red]")
        return 1
    console.print(f"{len(rows)} launches of {len(counted)} kernels, results checked: {hits} "
                  f"hits, 0 misses, 0 compiles (100 % hits).", soft_wrap=True)  # one line: greppable
    return 0


# --- warm, export, import, compare --------------------------------------------------------------

def warm(env, root: Path, ccs: list, jobs, with_usecases: bool, cwd: Path) -> list:
    """``kcache warm`` the examples (and cache_usecases) into ``root``; prints one line per
    (kernel, signature, cc) and warm's summary; returns warm's results. Raises _Failed."""
    from kcache.cli.fmt import plural
    from kcache.dispatcher.warm import cc_text
    examples = str(REPO / "examples")  # a folder: imported as the package `examples`
    targets = [examples, USECASES] if with_usecases else [examples]
    targets += ["--signatures", EXAMPLE_SIGS]
    if with_usecases:
        targets += ["--signatures", USECASE_SIGS]
    args = ["warm", *targets, "--cc", ",".join(cc_text(cc) for cc in ccs), "--json",
            "--dir", root]
    if jobs is not None:
        args += ["--jobs", jobs]
    proc = _kcache(*args, env=env, cwd=cwd, check=False)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise _Failed(f"kcache warm failed (exit status {proc.returncode})") from None

    def line(r) -> str:
        if r["status"] == "compiled":
            what = f"compiled in {r['compile_seconds']:.2f} s"
        elif r["status"] == "cached":
            what = "already cached"
        else:
            what = f"{r['status']}: {r['reason']}"
        return (f"{_signature(r.get('display') or r.get('signature')):<{SIG_WIDTH}}  "
                f"{r['arch'] or '-':<6}  "
                f"{what:<18}  {_short(r['key'])}")
    _grouped(doc["results"], line)
    if doc["without_signatures"]:
        print(f"  not compiled, no known signature: {', '.join(doc['without_signatures'])}")
    s = doc["summary"]
    print(f"kcache warm: {s['compiled']} compiled, {s['cached']} already cached, "
          f"{s['failed']} failed in {doc['seconds']:.1f} s "
          f"({plural(doc['processes'], 'job')})")  # the processes that compiled, as warm says
    if proc.returncode != 0 or s["failed"]:
        raise _Failed("kcache warm could not compile every kernel (above)")
    return doc["results"]


def listing(env, root: Path, cwd: Path) -> dict:
    """``kcache ls --json`` of ``root``: {key: entry record}."""
    doc = json.loads(_kcache("ls", "--json", "--dir", root, env=env, cwd=cwd).stdout)
    return {e["key"]: e for e in doc["entries"]}


def ship(env, root: Path, work: Path, temporary: bool = False) -> Path:
    """Export ``root`` into a bundle, import it into a fresh root, list it and compare the
    two listings; returns the imported root. ``temporary``: ``work`` is removed at the end,
    so its paths are not printed (they would name nothing). Raises _Failed."""
    bundle, imported = work / "kernels.kcb", work / "imported"
    out = json.loads(_kcache("export", bundle, "--dir", root, "--json", env=env, cwd=work).stdout)
    how = "zstd" if out["compressed"] else "tar"
    print()
    if temporary:
        print("In a temporary folder, removed at the end (--work-dir DIR keeps it):")
    print(f"kcache export: {out['entries']} entries ({_size(out['entry_bytes'])}) -> "
          f"{bundle.name if temporary else bundle} ({_size(out['bundle_bytes'])}, {how})")
    got = json.loads(_kcache("import", bundle, "--into", imported, "--json", env=env,
                             cwd=work).stdout)
    again = f", {len(got['present'])} already there" if got["present"] else ""
    into = f"a fresh root, {imported.name}/" if temporary else str(imported)
    print(f"kcache import: {len(got['imported'])} entries added to {into}{again}")
    mine, theirs = listing(env, root, work), listing(env, imported, work)
    print("\nEntries in the imported root (kcache ls):")
    rows = sorted(theirs.values(), key=lambda e: (e["kernel"] or "", e["signature"] or "",
                                                  e["arch"] or ""))
    _grouped(rows, lambda e: (f"{_signature(e['signature']):<{SIG_WIDTH}}  "
                              f"{e['arch'] or '-':<6}  {_size(e['file_size']):>9}  "
                              f"{e['short_key']}"))
    print(f"  {len(rows)} entries, {_size(sum(e['file_size'] for e in rows))}")
    same = {k: (e["kernel"], e["signature"], e["arch"], e["file_size"]) for k, e in mine.items()}
    if same != {k: (e["kernel"], e["signature"], e["arch"], e["file_size"])
                for k, e in theirs.items()}:
        raise _Failed(f"kcache ls differs: {len(mine)} entries in {root}, {len(theirs)} in "
                      f"{imported}")
    # Compared field by field as `kcache ls --json` gives them (the lines above show some).
    print(f"Same {len(mine)} entries in both roots (every field of kcache ls --json).")
    return imported


# --- main ---------------------------------------------------------------------------------------

def _usecases_available() -> str | None:
    """None when cache_usecases can be imported, else why not (one line)."""
    sys.path.append(str(REPO))
    try:
        from examples import usecases
        usecases.usecases()
    except ImportError as exc:
        return str(exc)
    return None


def _parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cc", action="append", help="compute capabilities to compile for, "
                        "comma-separated or repeated (default 8.0,9.0; with a GPU its own is "
                        "added)")
    parser.add_argument("--cache-dir", help="cache directory (default: KCACHE_DIR or the "
                        "user cache directory)")
    parser.add_argument("--work-dir", help="where the bundle and the imported root are made "
                        "(default: a temporary folder, removed at the end)")
    parser.add_argument("--jobs", type=int, help="compiling processes (default: the cores)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--usecases", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _blank(value) -> bool:
    return value is not None and not value.strip()


def main(argv=None) -> int:
    args = _parse(argv)
    if args.child:
        child(args.usecases)
        return 0
    for flag, value in (("--cache-dir", args.cache_dir), ("--work-dir", args.work_dir)):
        if _blank(value):
            # An unset shell variable (--cache-dir "$X") must not silently mean the default.
            print(f"{PROG}: {flag} needs a directory path, got {value!r} (omit {flag} for the "
                  "default)", file=sys.stderr)
            return 2
    if args.jobs is not None and not 1 <= args.jobs <= 256:
        print(f"{PROG}: --jobs {args.jobs}: accepted: 1 to 256", file=sys.stderr)
        return 2
    env = dict(os.environ)
    if args.cache_dir is not None:
        env["KCACHE_DIR"] = os.environ["KCACHE_DIR"] = args.cache_dir
    sys.path.append(str(REPO))  # for `examples`; appended so it never hides an installed kcache
    import kcache
    try:
        from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
    except ImportError as exc:  # e.g. kcache-cuda[mlir] alone: numba-cuda-mlir kernels only
        print(f"{PROG}: warms numba-cuda kernels, and numba-cuda cannot be imported ({exc}); "
              "install kcache-cuda[cu13] (or [cu12]); numba-cuda-mlir kernels: docs/mlir.md",
              file=sys.stderr)
        return 1
    from kcache.dispatcher.warm import parse_cc_list
    try:
        # checked first (against numba-cuda's toolkit, as kcache warm --cc): a usage error
        # writes nothing
        ccs = parse_cc_list(FRONTEND, args.cc or ["8.0,9.0"])
    except ValueError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        # --cache-dir is passed as the root argument so a bad one is named as such, not as
        # the environment variable it is also handed to the child processes in.
        store = kcache.Store(args.cache_dir)
    except kcache.KcacheError as exc:  # a bad setting: one line, usage error
        text = str(exc).replace("(from argument)", "(from --cache-dir)")
        print(f"{PROG}: {text}", file=sys.stderr)
        return 2
    return run(args, env, store.root, ccs)


def run(args, env, root: Path, ccs: list) -> int:
    from numba import cuda

    from kcache.dispatcher.components import arch_name
    from kcache.dispatcher.warm import cc_text
    gpu = cuda.is_available()
    if gpu:
        device = cuda.get_current_device()
        cc = tuple(device.compute_capability)
        name = device.name.decode() if isinstance(device.name, bytes) else device.name
        print(f"GPU found: {name}, cc {cc_text(cc)} ({arch_name(cc)}).")
        ccs = ccs + [cc] if cc not in ccs else ccs
    else:
        print("No GPU found (numba-cuda sees none): the kernels are compiled, not launched.")
    why_not = _usecases_available()
    if why_not is not None:
        print(f"{PROG}: skipping {USECASES}: it cannot be imported ({why_not}); "
              "numba-cuda's test modules need pytest and filecheck: install kcache's test extra "
              "(pip install -e '.[cu13,test]') to include them")
    print(f"Compiling for cc {', '.join(cc_text(c) for c in ccs)} "
          f"({', '.join(arch_name(c) for c in ccs)}) with kcache warm.")
    print(f"Cache: {root} (change it with --cache-dir or KCACHE_DIR)\n", flush=True)
    work = (Path(args.work_dir).absolute() if args.work_dir
            else Path(tempfile.mkdtemp(prefix="kcache-main-")))
    start = time.perf_counter()
    try:
        work.mkdir(parents=True, exist_ok=True)
        warm(env, root, ccs, args.jobs, why_not is None, work)
        imported = ship(env, root, work, temporary=not args.work_dir)
        if gpu:
            return gpu_run(env, imported, why_not is None, work, temporary=not args.work_dir)
        return 0
    except _Failed as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
        print(f"\nmain job: {time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())

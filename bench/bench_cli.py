"""Start-up time of the ``kcache`` command (goal: ``ls`` and ``stats`` <= 150 ms, issue 4).

Fills a temporary cache with N entries through the store API, then times complete runs of
``python -m kcache <command> --dir ROOT`` (process start to exit, output piped, so rich is
not needed) and reports the median and best of R runs, plus the modules each run imported
that must stay out (numba, kcache.dispatcher, rich). Run:

    /tmp/venv/bin/python bench/bench_cli.py [--entries 200] [--runs 15]

Results are recorded in docs/bench-cli.md.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kcache import Entry, Store, make_key

COMMANDS = (
    ["--version-probe"],  # python + site + `import kcache.cli` only (see probe below)
    ["ls"],
    ["ls", "--json"],
    ["stats"],
    ["stats", "--json"],
    ["dir"],
    ["config"],
)

PROBE = ("import sys, kcache.cli;"
         "bad = [m for m in ('numba', 'kcache.dispatcher', 'rich') if m in sys.modules];"
         "sys.exit(1 if bad else 0)")


def fill(root: Path, n: int) -> None:
    """Put ``n`` entries of ~8 KiB (cubin + PTX) into a store at ``root``."""
    store = Store(root)
    for i in range(n):
        comps = {"format": 1, "kernel": f"bench.mod:k{i}", "signature": "(float32[::1],)",
                 "target": {"cc": "sm_90", "output": "cubin"}}
        entry = Entry({"cubin": os.urandom(6000), "ptx": b"// ptx\n" * 300},
                      {"kernel": f"bench.mod:k{i}", "signature": "(float32[::1],)",
                       "arch": "sm_90", "compile_seconds": 0.4})
        store.put(make_key(comps), entry, components=comps)
    store.flush()


def time_command(args: list[str], root: Path, runs: int) -> tuple[float, float, str]:
    """(median s, best s, modules that must not load) over ``runs`` runs of ``args``."""
    if args == ["--version-probe"]:
        cmd = [sys.executable, "-c", PROBE]
    else:
        cmd = [sys.executable, "-m", "kcache", *args, "--dir", str(root)]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(args)} failed: {done.stderr.decode()}")
    leaked = _leaked(args, root)
    return statistics.median(times), min(times), leaked


def _leaked(args: list[str], root: Path) -> str:
    if args == ["--version-probe"]:
        return "-"
    probe = ("import sys, runpy; sys.argv = ['kcache'] + sys.argv[1:];"
             "from kcache.cli import main; rc = main();"
             "bad = [m for m in ('numba', 'kcache.dispatcher', 'rich') if m in sys.modules];"
             "sys.stderr.write('LEAKED=' + ','.join(bad) + '\\n'); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", probe, *args, "--dir", str(root)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = [l for l in done.stderr.splitlines() if l.startswith("LEAKED=")]
    return (line[0][len("LEAKED="):] or "none") if line else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200)
    parser.add_argument("--runs", type=int, default=15)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kcache-bench-") as tmp:
        root = Path(tmp) / "cache"
        fill(root, opts.entries)
        bare = time_command_bare(opts.runs)
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
              f"{platform.python_version()}; {opts.entries} entries; {opts.runs} runs each")
        print(f"{'command':<28} {'median ms':>10} {'best ms':>8}  numba/dispatcher/rich loaded")
        print(f"{'python -c pass':<28} {bare[0] * 1e3:>10.0f} {bare[1] * 1e3:>8.0f}  -")
        for args in COMMANDS:
            median, best, leaked = time_command(args, root, opts.runs)
            name = "import kcache.cli" if args == ["--version-probe"] else "kcache " + " ".join(args)
            print(f"{name:<28} {median * 1e3:>10.0f} {best * 1e3:>8.0f}  {leaked}")


def time_command_bare(runs: int) -> tuple[float, float]:
    """Interpreter start-up alone (the floor under every command)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


if __name__ == "__main__":
    main()

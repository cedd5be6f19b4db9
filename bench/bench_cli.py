"""Speed of the ``kcache`` command (issue 8): start-up of every command, ``ls`` on 10,000
entries, ``prune`` on 100,000 entries.

Goals: every command at most 150 ms above bare Python (``python -c pass``, the same
interpreter and site-packages) on the 2-core development machine, median of >= 7 runs;
``kcache ls`` on 10,000 entries <= 1 s; ``kcache prune`` on 100,000 entries <= 5 s.

Start-up: complete runs (process start to exit, stdout piped, so the plain-text path) of
``python -m kcache CMD --dir ROOT`` and of the ``kcache`` console script, on a cache of N
small entries. The commands are timed round-robin (one run of each, R rounds), so that load
from other processes on the machine spreads evenly over all of them; the table gives the
median and best wall time, the median minus the median of ``python -c pass``, and the same
for CPU time (user + system of the child, from ``wait4``: what the run costs on an idle
core, the better figure on a machine shared with other work). A separate
in-process run lists which of numba, ``kcache.dispatcher``, rich each command imported (must
be none when piped).

Scale (``--scale``): caches of 10,000 and 100,000 entries are written directly in the entry
file format (``kcache.entry.encode``, no fsync, then ``Store.recount()``), much faster than
100,000 ``put`` calls; ``ls``, ``ls --json``, ``prune --dry-run`` and a real ``prune`` (down
to 90 % of the size) are timed as subprocesses. ``--profile`` adds an in-process cProfile of
``ls`` and ``prune`` at that scale, summed per kcache function, to say where the time goes.

Bytecode: Python writes ``__pycache__`` unless PYTHONDONTWRITEBYTECODE is set (it is in some
sandboxes); then every run compiles kcache's source again. The runs here drop that variable
so that the figures are what a user sees (after one warm-up run); ``--no-bytecode`` keeps
it, to measure that case. Run (results in docs/bench-cli.md):

    .venv/bin/python bench/bench_cli.py [--entries 200] [--rounds 11] [--scale] [--profile]
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kcache import Entry, Store, make_key

#: (label, arguments) timed for start-up; KEY is replaced by an entry's key prefix.
COMMANDS = (
    ("--version", ["--version"]),
    ("--help", ["--help"]),
    ("dir", ["dir"]),
    ("config", ["config"]),
    ("stats", ["stats"]),
    ("stats --json", ["stats", "--json"]),
    ("ls", ["ls"]),
    ("ls --json", ["ls", "--json"]),
    ("show KEY", ["show", "KEY"]),
    ("verify", ["verify"]),
    ("prune --dry-run", ["prune", "--dry-run"]),
    ("rm <missing key>", ["rm", "0000000000"]),
    ("clear --yes (empty)", ["clear", "--yes", "--dir", "EMPTY"]),
)
#: Exit statuses expected (anything else fails the benchmark): rm of a missing key is 1.
EXPECTED = {"rm <missing key>": 1}
MUST_NOT_LOAD = ("numba", "kcache.dispatcher", "rich")


def fill(root: Path, n: int) -> None:
    """Put ``n`` entries of ~8 KiB (cubin + PTX) into a store at ``root`` (Store.put)."""
    store = Store(root)
    for i in range(n):
        comps = {"format": 1, "kernel": f"bench.mod:k{i}", "signature": "(float32[::1],)",
                 "target": {"cc": "sm_90", "output": "cubin"}}
        entry = Entry({"cubin": os.urandom(6000), "ptx": b"// ptx\n" * 300},
                      {"kernel": f"bench.mod:k{i}", "signature": "(float32[::1],)",
                       "arch": "sm_90", "compile_seconds": 0.4})
        store.put(make_key(comps), entry, components=comps)
    store.flush()


def fill_fast(root: Path, n: int) -> None:
    """Write ``n`` small entries (~600 bytes) straight in the entry file format, with last
    uses spread over a day, then recount the totals. For scale runs only: no locks, no
    fsync (``Store.put`` takes ~4 ms each here)."""
    from kcache.entry.format import encode
    from kcache.disk.layout import Layout
    layout = Layout(root)
    now = time.time()
    made: set[str] = set()
    for i in range(n):
        comps = {"format": 1, "kernel": f"bench.mod:k{i}", "target": {"cc": "sm_90"}}
        key = make_key(comps)
        entry = Entry({"cubin": b"\x7fELF" + i.to_bytes(4, "big") * 64},
                      {"kernel": f"bench.mod:k{i}", "signature": "(float32[::1],)",
                       "arch": "sm_90", "compile_seconds": 0.4})
        path = layout.entry(key)
        if key[:2] not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(key[:2])
        path.write_bytes(encode(key, entry, comps))
        when = now - 86400.0 * i / n
        os.utime(path, (when, when))
    Store(root).recount()


def bench_env(bytecode: bool) -> dict:
    """The environment of every timed run: no KCACHE_* (the cache is --dir), and, unless
    ``bytecode`` is False, without PYTHONDONTWRITEBYTECODE (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def command_line(how: list[str], args: list[str], root: Path, empty: Path, key: str) -> list[str]:
    args = [key[:12] if a == "KEY" else str(empty) if a == "EMPTY" else a for a in args]
    if "--dir" not in args and args[0] not in ("--version", "--help"):
        args += ["--dir", str(root)]
    return how + args


def run_once(cmd: list[str], env: dict, expected: int = 0) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``cmd``. The CPU time (user + system, from
    ``wait4``) is what the run costs on an otherwise idle core: on a machine shared with
    other work, wall time also counts the waits for a core."""
    start = time.perf_counter()
    # Run outside the source tree: ``python -m`` puts the working directory first on
    # sys.path, and a checkout's ./kcache would shadow the installed package.
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            cwd=tempfile.gettempdir())
    stderr = proc.stderr.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stderr.close()
    if proc.returncode != expected:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {stderr.decode()}")
    return elapsed, usage.ru_utime + usage.ru_stime


def round_robin(cases: dict[str, tuple[list[str], int]], env: dict, rounds: int) -> dict:
    """{label: [(wall, cpu) seconds...]} with each case run once per round, in turn."""
    times: dict[str, list[tuple[float, float]]] = {label: [] for label in cases}
    for label, (cmd, expected) in cases.items():  # warm-up: bytecode written, caches filled
        run_once(cmd, env, expected)
    for _ in range(rounds):
        for label, (cmd, expected) in cases.items():
            times[label].append(run_once(cmd, env, expected))
    return times


def leaked(args: list[str], env: dict) -> str:
    """Which of :data:`MUST_NOT_LOAD` a piped run of ``kcache ARGS`` imported."""
    probe = ("import sys; sys.argv = ['kcache'] + sys.argv[1:]\n"
             "from kcache.cli import main\ntry:\n rc = main()\nexcept SystemExit as e:\n rc = e.code\n"
             f"bad = [m for m in {MUST_NOT_LOAD!r} if m in sys.modules];"
             "sys.stderr.write('LEAKED=' + ','.join(bad) + '\\n'); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", probe, *args], env=env, text=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          cwd=tempfile.gettempdir())
    line = [l for l in done.stderr.splitlines() if l.startswith("LEAKED=")]
    return (line[0][len("LEAKED="):] or "none") if line else "?"


def startup(opts, tmp: Path) -> None:
    root, empty = tmp / "cache", tmp / "empty"
    fill(root, opts.entries)
    empty.mkdir()
    key = next(iter(Store(root).entries())).key
    env = bench_env(not opts.no_bytecode)
    script = shutil.which("kcache", path=str(Path(sys.executable).parent))
    hows = {"python -m kcache": [sys.executable, "-m", "kcache"]}
    if script:
        hows["kcache (console script)"] = [script]
    cases = {"python -c pass": ([sys.executable, "-c", "pass"], 0),
             "python -c 'import kcache'": ([sys.executable, "-c", "import kcache"], 0)}
    for how_name, how in hows.items():
        for label, args in COMMANDS:
            cases[f"{how_name} {label}"] = (command_line(how, args, root, empty, key),
                                            EXPECTED.get(label, 0))
    times = round_robin(cases, env, opts.rounds)
    wall_floor = statistics.median(w for w, _ in times["python -c pass"])
    cpu_floor = statistics.median(c for _, c in times["python -c pass"])
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f} at the end; "
          f"{opts.entries} entries; {opts.rounds} rounds; bytecode "
          f"{'not written (PYTHONDONTWRITEBYTECODE=1)' if opts.no_bytecode else 'cached'}")
    print(f"{'command':<48} {'wall ms':>8} {'best':>6} {'above':>6}  {'CPU ms':>7} "
          f"{'above':>6}  loaded")
    for label, samples in times.items():
        wall = statistics.median(w for w, _ in samples)
        cpu = statistics.median(c for _, c in samples)
        args = next((a for l, a in COMMANDS if label.endswith(" " + l)), None)
        loaded = "-"
        if args is not None and label.startswith("python -m"):
            loaded = leaked(command_line([], args, root, empty, key), env)
        print(f"{label:<48} {wall * 1e3:>8.0f} {min(w for w, _ in samples) * 1e3:>6.0f} "
              f"{(wall - wall_floor) * 1e3:>+6.0f}  {cpu * 1e3:>7.0f} "
              f"{(cpu - cpu_floor) * 1e3:>+6.0f}  {loaded}")


def scale(opts, tmp: Path) -> None:
    env = bench_env(True)
    kcache = [sys.executable, "-m", "kcache"]
    for n, commands in ((opts.ls_entries, (["ls"], ["ls", "--json"], ["ls", "--limit", "10"])),
                        (opts.prune_entries, (["prune", "--dry-run", "--max-size", "1G"],
                                              ["prune", "--dry-run", "--max-size", "CAP"],
                                              ["prune", "--max-size", "CAP"]))):
        root = tmp / f"scale{n}"
        start = time.perf_counter()
        fill_fast(root, n)
        size = Store(root).stats().bytes
        print(f"{n} entries ({size / 2**20:.1f} MiB) written in "
              f"{time.perf_counter() - start:.1f} s")
        for args in commands:
            args = [str(int(size * 0.9)) if a == "CAP" else a for a in args]
            runs = 1 if "--dry-run" not in args and args[0] == "prune" else opts.scale_runs
            samples = [run_once(kcache + args + ["--dir", str(root)], env) for _ in range(runs)]
            wall = statistics.median(w for w, _ in samples)
            print(f"  kcache {' '.join(args):<40} wall median {wall:6.2f} s "
                  f"(best {min(w for w, _ in samples):.2f} s), CPU median "
                  f"{statistics.median(c for _, c in samples):.2f} s, {runs} runs")
        if opts.profile:
            for args in commands[:2]:
                args = [str(int(size * 0.9)) if a == "CAP" else a for a in args]
                profile(args + ["--dir", str(root)])
        shutil.rmtree(root)


def profile(argv: list[str]) -> None:
    """cProfile of ``kcache ARGV`` in this process: the functions with the most own time,
    and the kcache functions with the most cumulative time."""
    import cProfile
    import io
    import pstats
    from kcache.cli import main
    out, real = io.StringIO(), sys.stdout
    prof = cProfile.Profile()
    sys.stdout = out
    try:
        prof.runcall(main, argv)
    finally:
        sys.stdout = real
    stats = pstats.Stats(prof)
    total = stats.total_tt
    print(f"  profile of kcache {' '.join(argv[:-2])}: {total:.2f} s under cProfile")
    rows = []
    for (path, line, name), (_cc, _nc, tt, ct, _callers) in stats.stats.items():
        if "/kcache/" in path or "/cli/" in path or "/dispatcher/" in path:
            rows.append((ct, tt, f"{Path(path).parent.name}/{Path(path).name}:{name}"))
    for ct, tt, name in sorted(rows, reverse=True)[:14]:
        print(f"    {name:<48} cumulative {ct:6.2f} s  own {tt:6.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200, help="entries for start-up runs")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--no-bytecode", action="store_true",
                        help="keep PYTHONDONTWRITEBYTECODE=1 (compile on every run)")
    parser.add_argument("--scale", action="store_true", help="also ls/prune at scale")
    parser.add_argument("--skip-startup", action="store_true")
    parser.add_argument("--ls-entries", type=int, default=10_000)
    parser.add_argument("--prune-entries", type=int, default=100_000)
    parser.add_argument("--scale-runs", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kcache-bench-") as tmp:
        if not opts.skip_startup:
            startup(opts, Path(tmp))
        if opts.scale:
            scale(opts, Path(tmp))


if __name__ == "__main__":
    main()

"""The CPU part of bench/run.py (no GPU needed): the store and the command at scale.

Sections (each figure min / median / max over ``--runs`` runs, >= 5):

* ``store``: ``Store.get`` of random keys at 10 and at ``--entries`` (100,000) entries, and
  misses, in fresh processes (bench/bench_hit.py's fill and measuring process); per run the
  median of 5 x 1,000 gets, and the ratio large / small of that run.
* ``cli``: start-up of every command (process start to exit, piped), the commands taken in
  turn each round, with ``python -c pass`` in the same rounds: per round, each command minus
  bare Python, wall and CPU time (bench/bench_cli.py's runner).
* ``scale``: ``kcache ls`` (and ``ls --json``) at 10,000 entries; ``kcache prune`` at
  100,000 entries (the store section's cache): a dry run and a real prune with nothing to
  remove, and a dry run selecting 10 % by LRU.
* ``warm``: ``kcache warm`` of ``--warm-kernels`` generated kernels for two ccs, ``--jobs 1``
  and ``--jobs 2`` alternating (bench/bench_warm.py), and the speed-up per pair of runs.
* ``import``: what ``KCACHE_ENABLE=1`` adds to a process's imports: ``import kcache._hook``
  (with numba.cuda imported: ``import kcache.dispatcher`` and ``install``) timed inside 9
  fresh processes (at least ``--runs``) after ``import numba.cuda``, bytecode compiled; and
  the definition of the first ``cache=True`` kernel, with kcache and with numba-cuda's own
  cache (bench/bench_import.py).
* ``remote``: remote hit vs local hit for Redis and S3 (moto) on loopback, 10 KB and 5 MB
  entries, through bench/bench_remote.py's ``latency`` when that file is present (servers
  started by tests/servers.py; skipped with the reason otherwise).

The machine may be shared: the 1-minute load average is recorded when each section ends,
and CPU time is reported next to wall time where a process is timed.
"""
from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from figures import Results, figure, log

HERE = Path(__file__).resolve().parent


def _load(name: str):
    """A module of bench/ by file name (they are scripts, not a package), or None."""
    path = HERE / f"{name}.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def store(opts, tmp: Path, shared: dict) -> list[dict]:
    hit = _load("bench_hit")
    small, large = tmp / "small", tmp / "large"
    keys = tmp / "keys.json"
    t = time.perf_counter()
    keys.write_text(json.dumps(hit.populate(small, large, opts.entries)))
    log(f"bench: cpu store: {opts.entries:,} entries written in {time.perf_counter() - t:.0f} s")
    shared["large"] = large
    runs = []
    for _ in range(opts.runs):
        done = subprocess.run([sys.executable, "-c", hit.MEASURE, str(small), str(large), str(keys)],
                              capture_output=True, text=True, check=True, cwd=tmp)
        runs.append(json.loads(done.stdout))
    ratios = [r["get_large_us"] / r["get_small_us"] for r in runs]
    sec = "store"
    return [
        figure("store_get.10", sec, "Store.get (hit), 10 entries", [r["get_small_us"] for r in runs], "us"),
        figure("store_get.large", sec, f"Store.get (hit), {opts.entries:,} entries (random keys)",
               [r["get_large_us"] for r in runs], "us", entries=opts.entries),
        figure("store_get.ratio", sec, f"get at {opts.entries:,} / get at 10, per run", ratios, "x",
               goal="<= 1.2 (issue 8)", met=statistics.median(ratios) <= 1.2),
        figure("store_miss.large", sec, f"Store.get (miss), {opts.entries:,} entries",
               [r["miss_us"] for r in runs], "us"),
    ]


def cli(opts, tmp: Path, shared: dict) -> list[dict]:
    bc = _load("bench_cli")
    root, empty = tmp / "cli-cache", tmp / "cli-empty"
    bc.fill(root, 200)
    empty.mkdir()
    from kcache import Store
    key = next(iter(Store(root).entries())).key
    env = bc.bench_env(True)
    how = [sys.executable, "-m", "kcache"]
    commands = (*bc.COMMANDS, ("completion bash", ["completion", "bash"]))
    cases = {"python -c pass": ([sys.executable, "-c", "pass"], 0)}
    for label, args in commands:
        cases[label] = (bc.command_line(how, args, root, empty, key), bc.EXPECTED.get(label, 0))
    times = bc.round_robin(cases, env, opts.cli_rounds)
    bare = times.pop("python -c pass")
    out = [figure("cli_bare.wall", "cli", "python -c pass", [w * 1e3 for w, _ in bare], "ms",
                  cpu_ms=[c * 1e3 for _, c in bare])]
    for label, samples in times.items():
        above = [(w - bw) * 1e3 for (w, _), (bw, _) in zip(samples, bare)]
        above_cpu = [(c - bc_) * 1e3 for (_, c), (_, bc_) in zip(samples, bare)]
        out.append(figure(f"cli_startup.{label}", "cli", f"kcache {label}", above, "ms",
                          goal="<= 150 ms above bare Python (issue 8)",
                          met=statistics.median(above) <= 150,
                          wall_ms=[w * 1e3 for w, _ in samples], cpu_above_ms=above_cpu))
    return out


def scale(opts, tmp: Path, shared: dict) -> list[dict]:
    bc = _load("bench_cli")
    env = bc.bench_env(True)
    kc = [sys.executable, "-m", "kcache"]
    root = tmp / "ls10k"
    bc.fill_fast(root, opts.ls_entries)
    out = []

    def timed(label, fid, args, goal=None, limit=None, **extra):
        samples = [bc.run_once(kc + args, env) for _ in range(opts.runs)]
        walls = [w for w, _ in samples]
        out.append(figure(fid, "scale", label, walls, "s", goal=goal,
                          met=(statistics.median(walls) <= limit) if limit else None,
                          cpu_s=[c for _, c in samples], **extra))

    n = opts.ls_entries
    timed(f"kcache ls, {n:,} entries", "ls", ["ls", "--dir", str(root)],
          "<= 1 s (issue 8)", 1.0, entries=n)
    timed(f"kcache ls --json, {n:,} entries", "ls_json", ["ls", "--json", "--dir", str(root)],
          entries=n)
    large = shared.get("large")
    if large is None:
        return out
    from kcache import Store
    size = Store(large).stats().bytes
    n = opts.entries
    timed(f"kcache prune --dry-run, {n:,} entries, nothing to remove", "prune_dry",
          ["prune", "--dry-run", "--max-size", "1T", "--dir", str(large)], "<= 5 s (issue 8)", 5.0,
          entries=n)
    timed(f"kcache prune, {n:,} entries, nothing to remove", "prune",
          ["prune", "--max-size", "1T", "--dir", str(large)], "<= 5 s (issue 8)", 5.0, entries=n)
    timed(f"kcache prune --dry-run, {n:,} entries, down to 90 % (LRU selection)", "prune_dry_90",
          ["prune", "--dry-run", "--max-size", str(int(size * 0.9)), "--dir", str(large)],
          entries=n)
    return out


def warm(opts, tmp: Path, shared: dict) -> list[dict]:
    bw = _load("bench_warm")
    base = tmp / "warm"
    base.mkdir()
    pkg, sigs = bw.make_package(base, opts.warm_kernels)
    runs = {1: [], 2: []}
    for _ in range(opts.runs):
        for jobs in (1, 2):  # alternating, so drift on a shared machine hits both alike
            runs[jobs].append(bw.run_warm(base, pkg, sigs, jobs, "8.0,9.0"))
    speedup = [a["wall"] / b["wall"] for a, b in zip(runs[1], runs[2])]
    compiles = runs[1][0]["compiled"]
    out = []
    for jobs, rs in runs.items():
        out.append(figure(f"warm_wall.j{jobs}", "warm", f"kcache warm --jobs {jobs}, {compiles} compiles",
                          [r["wall"] for r in rs], "s", cpu_s=[r["cpu"] for r in rs],
                          load=[r["load"] for r in rs], compiles=compiles))
    out.append(figure("warm_speedup", "warm", "speed-up --jobs 2 over --jobs 1, per pair of runs",
                      speedup, "x", goal=">= 1.7x on 2 cores (issue 9)",
                      met=statistics.median(speedup) >= 1.7))
    return out


def remote(opts, tmp: Path, shared: dict) -> list[dict]:
    br = _load("bench_remote")
    if br is None:
        raise Skip("bench/bench_remote.py is not in this tree")
    redis_url, endpoint, opened = br.servers(argparse_namespace(redis_url=None, s3_endpoint=None))
    out = []
    try:
        backends = {"redis": redis_url, "s3": br.s3_setup(endpoint)}
        for name, url in backends.items():
            for label, size in br.SIZES.items():
                r = br.latency(url, size, opts.runs, tmp)
                tag = label.replace(" ", "")
                out.append(figure(f"remote_local_hit.{name}.{tag}", "remote",
                                  f"local hit, {label} entry", [s * 1e3 for s in r["local"]], "ms",
                                  mode=name, size=label))
                out.append(figure(f"remote_hit.{name}.{tag}", "remote",
                                  f"remote hit (read, verify, backfill), {label} entry",
                                  [s * 1e3 for s in r["remote"]], "ms", mode=name, size=label,
                                  first_call_ms=r["first"] * 1e3))
    finally:
        for server in opened:
            server.close()
    return out


IMPORT_RUNS = 9  # fresh processes per mode (issue 19: the median of 9)


def imports(opts, tmp: Path, shared: dict) -> list[dict]:
    bi = _load("bench_import")
    res = bi.measure(max(IMPORT_RUNS, opts.runs) if not opts.quick else opts.runs)
    imp = [d["import_ms"] for d in res["kcache"]]
    sec = "import"
    return [
        figure("import_dispatcher.kcache", sec, "import kcache.dispatcher (KCACHE_ENABLE=1), after "
               "import numba.cuda", imp, "ms", goal="<= 20 ms (2-core)",
               met=statistics.median(imp) <= 20.0, modules=len(res["kcache"][0]["modules"])),
        figure("first_definition.kcache", sec, "definition of the first cache=True kernel, kcache "
               "(opens the store, imports the hit path)",
               [d["define_ms"] for d in res["kcache"]], "ms"),
        figure("first_definition.numba", sec, "definition of the first cache=True kernel, "
               "numba-cuda's own cache", [d["define_ms"] for d in res["numba"]], "ms"),
    ]


def argparse_namespace(**kw):
    import argparse
    return argparse.Namespace(**kw)


class Skip(Exception):
    """A section that cannot run here (the reason is recorded)."""


SECTIONS = {"store": store, "cli": cli, "scale": scale, "warm": warm, "import": imports,
            "remote": remote}


def run(opts, results: Results) -> int:
    """Run the CPU part into ``results``; return an exit status."""
    failed = False
    shared: dict = {}
    with tempfile.TemporaryDirectory(prefix="kcache-bench-cpu-") as tmp:
        for name, fn in SECTIONS.items():
            if opts.only and name not in opts.only:
                continue
            t = time.perf_counter()
            try:
                results.add(*fn(opts, Path(tmp), shared))
                results.section(name, time.perf_counter() - t)
                log(f"bench: cpu {name}: {time.perf_counter() - t:.1f} s, load average "
                    f"{os.getloadavg()[0]:.1f}")
            except Skip as exc:
                results.section(name, time.perf_counter() - t, error=None, notes=[f"skipped: {exc}"])
                log(f"bench: cpu {name}: skipped: {exc}")
            except (Exception, SystemExit) as exc:  # keep what the other sections measured
                failed = True
                results.section(name, time.perf_counter() - t, error=f"{type(exc).__name__}: {exc}")
                log(f"bench: cpu {name} failed: {type(exc).__name__}: {exc}")
        results.save(complete=True)  # before the temp folder's (long) removal
    return 1 if failed else 0

"""Remote-tier benchmark (a script, not a test; issue 10 "Benchmark"): remote hit vs local hit
latency for 10 KB and 5 MB entries through Redis and S3 (moto) on loopback, and a cold fleet
of 8 processes over 2 cache roots compiling the same kernels with and without a remote.

Usage: python bench/bench_remote.py [--runs 7] [--fleet-runs 3] [--kernels 4] [--work 0.5]
       [--redis-url URL] [--s3-endpoint URL]

Servers: the given ones, else a redis-server and moto's S3 server started on free loopback
ports (tests/servers.py; needs the Debian package redis-server and kcache's test extra).
Everything timed goes through the public Store API with the remote configured as users do
(KCACHE_REMOTE...). The fleet's processes are tests/remote_child.py: a fixed-cost fake compile
(hashing for --work CPU seconds), so no GPU is needed. Results are printed as Markdown tables
(docs/remote.md, "Benchmark").
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
sys.path.insert(0, str(TESTS))  # servers.py, remote_child.py

from kcache import Entry, Store, make_key, signing  # noqa: E402

SIZES = {"10 KB": 10_000, "5 MB": 5_000_000}
TIMEOUT = "10"  # seconds: KCACHE_REMOTE_TIMEOUT; a loaded machine must not time out


def entry(size: int, i: int) -> Entry:
    return Entry({"cubin": os.urandom(size)}, {"kernel": f"bench.remote:k{i}", "arch": "sm_90",
                                                "compile_seconds": 0.5})


def spread(values: list[float], unit: float = 1e3) -> str:
    """``min / median / max`` in milliseconds (``unit``: the factor from seconds)."""
    return " / ".join(f"{v * unit:.2f}" for v in (min(values), statistics.median(values), max(values)))


def timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def remote_env(url: str, ns: str) -> dict:
    return {"KCACHE_REMOTE": url, "KCACHE_REMOTE_NAMESPACE": ns, "KCACHE_REMOTE_TIMEOUT": TIMEOUT}


def with_env(env: dict | None):
    """Set (or, with None, remove) the KCACHE_REMOTE* variables of this process."""
    for name in [n for n in os.environ if n.startswith("KCACHE_REMOTE")]:
        del os.environ[name]
    os.environ.update(env or {})


def latency(url: str, size: int, runs: int, tmp: Path) -> dict:
    """Seconds per get: local hits, remote hits (each a key the local root lacks: read, verify,
    backfill), the remote read + verification alone, and the first remote call of a process."""
    ns = f"bench{uuid.uuid4().hex[:8]}"
    env = remote_env(url, ns)
    keys = [make_key({"bench-remote": ns, "i": i}) for i in range(runs + 1)]
    with_env(env)
    writer = Store(tmp / f"writer-{ns}")
    for i, k in enumerate(keys):
        writer.put(k, entry(size, i))  # published to the remote after the local put
    # local hits: the writer's own root, without a remote
    with_env(None)
    local = Store(tmp / f"writer-{ns}")
    local.get(keys[0])
    local_s = [timed(lambda: local.get(keys[0]))[0] for _ in range(runs)]
    # remote hits in one process (a warm connection), each key absent from its root
    with_env(env)
    reader = Store(tmp / f"reader-{ns}")
    first, _ = timed(lambda: reader.get(make_key({"absent": ns})))  # connect (S3: botocore client)
    remote_s = [timed(lambda: reader.get(k))[0] for k in keys[1:]]
    assert reader.stats().remote_hits == runs, "not all remote hits"
    tier = reader.remote
    limit = reader.settings.max_entry_size + signing.OVERHEAD
    read_s = [timed(lambda: reader.verify_bytes(k, tier.read(k, limit).data))[0] for k in keys[1:]]
    with_env(None)
    return {"local": local_s, "remote": remote_s, "read": read_s, "first": first}


def fleet(url: str | None, ns: str, kernels: int, work: float, tmp: Path) -> dict:
    """8 processes over 2 fresh roots, started together, each getting the same ``kernels``
    (named by ``ns``) in the same order, with the remote ``url`` (namespace ``ns``) or none;
    each opens its remote before the start signal. Returns compiles (create() calls in all)
    and wall time (start signal to the last process's last get)."""
    run = tmp / f"fleet-{uuid.uuid4().hex[:8]}"
    signals = run / "signals"
    signals.mkdir(parents=True)
    keys = [make_key({"fleet": ns, "k": i}) for i in range(kernels)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    if url:
        env.update(remote_env(url, ns))
    procs = []
    for i in range(8):
        spec = run / f"spec{i}.json"
        spec.write_text(json.dumps({"root": str(run / ("a" if i % 2 else "b")), "machine": f"p{i}",
                                    "ops": [["get_or_create", k] for k in keys], "work": work,
                                    "record": str(run / "compiles.log"), "start": str(signals),
                                    "connect": True}))
        procs.append(subprocess.Popen([sys.executable, str(TESTS / "remote_child.py"), str(spec)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    deadline = time.monotonic() + 300
    while len(list(signals.glob("ready.*"))) < 8:
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            raise SystemExit("fleet: processes did not start: "
                             + "".join(p.stderr.read() for p in procs if p.poll() is not None))
        time.sleep(0.01)
    (signals / "go").touch()
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        if p.returncode:
            raise SystemExit(f"fleet: a process failed: {err[-2000:]}")
        reports.append(json.loads(out))
    wall = max(sum(r["seconds"] for r in rep["results"]) for rep in reports)
    log = run / "compiles.log"
    compiles = len(log.read_text().splitlines()) if log.exists() else 0
    return {"wall": wall, "compiles": compiles}


def servers(args):
    """(redis URL, S3 endpoint, things to close): the given servers or our own."""
    opened = []
    redis_url, endpoint = args.redis_url, args.s3_endpoint
    from servers import MotoServer, RedisServer
    if not redis_url:
        server = RedisServer().start()
        opened.append(server)
        redis_url = server.url
    if not endpoint:
        server = MotoServer().start()
        opened.append(server)
        endpoint = server.endpoint
    return redis_url, endpoint, opened


def s3_setup(endpoint: str) -> str:
    """Test credentials (moto), no AWS profile; a new bucket. Returns its s3:// URL."""
    import boto3
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                      AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
                      AWS_ENDPOINT_URL_S3=endpoint)
    bucket = f"kcache-bench-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/bench"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="gets per latency figure (default 7)")
    ap.add_argument("--fleet-runs", type=int, default=3, help="runs of each fleet (default 3)")
    ap.add_argument("--kernels", type=int, default=4, help="kernels each fleet process gets (default 4)")
    ap.add_argument("--work", type=float, default=0.5, help="CPU seconds of one fake compile (default 0.5)")
    ap.add_argument("--redis-url", help="a Redis server to use (default: start one)")
    ap.add_argument("--s3-endpoint", help="an S3 endpoint to use (default: start moto's)")
    args = ap.parse_args(argv)
    redis_url, endpoint, opened = servers(args)
    try:
        s3_url = s3_setup(endpoint)
        backends = {"Redis": redis_url, "S3 (moto)": s3_url}
        print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}; "
              f"{time.strftime('%Y-%m-%d %H:%M')}; Python {sys.version.split()[0]}; {os.cpu_count()} CPUs\n")
        print("| backend | entry | local hit (ms) min / median / max | remote hit, incl. backfill (ms) "
              "| remote read + verify (ms) | first remote call of a process (ms) |")
        print("| --- | --- | --- | --- | --- | --- |")
        with tempfile.TemporaryDirectory() as d:
            for name, url in backends.items():
                for label, size in SIZES.items():
                    r = latency(url, size, args.runs, Path(d))
                    print(f"| {name} | {label} | {spread(r['local'])} | {spread(r['remote'])} | "
                          f"{spread(r['read'])} | {r['first'] * 1e3:.0f} |", flush=True)
            print(f"\nFleet: 8 processes over 2 roots, {args.kernels} kernels each (same order), "
                  f"a compile = {args.work} s of CPU; {args.fleet_runs} runs\n")
            print("| remote | fleet | compiles (each run) | wall time (s) min / median / max |")
            print("| --- | --- | --- | --- |")
            for name, url in {"none": None, **backends}.items():
                cold, warm = [], []
                for _ in range(args.fleet_runs):
                    ns = f"fleet{uuid.uuid4().hex[:8]}"
                    cold.append(fleet(url, ns, args.kernels, args.work, Path(d)))
                    if url:  # fresh roots again, the remote now holds the kernels
                        warm.append(fleet(url, ns, args.kernels, args.work, Path(d)))
                for what, runs in (("cold", cold), ("warm remote, empty roots", warm)):
                    if runs:
                        print(f"| {name} | {what} | {', '.join(str(r['compiles']) for r in runs)} | "
                              f"{spread([r['wall'] for r in runs], 1)} |", flush=True)
        print(f"\nload average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    finally:
        for server in opened:
            server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

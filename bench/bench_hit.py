"""Store hit latency before and after a change, in one run (a script, not a test).

Usage: python bench/bench_hit.py [--baseline DIR] [--entries 100000] [--rounds 6] [--json OUT]

Fills two caches once (10 entries, and ``--entries`` written straight in the entry format),
then runs fresh measuring processes alternately for this tree and, with ``--baseline DIR``
(made by bench/baseline.py), for the earlier revision installed there. Each process times
``Store.get`` of random keys at 10 entries, at the large size, and misses (median of 5
sub-rounds of 1,000 gets, microseconds). Reported: min / median / max over the rounds.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from baseline import with_baseline  # noqa: E402

MEASURE = r'''
import json, random, statistics, sys, time
import kcache
from kcache import Store
small, large = sys.argv[1], sys.argv[2]
ks, kl, km = json.load(open(sys.argv[3]))
rng = random.Random(1)

def per_get(store, keys, n=1000, sub=5):
    runs = []
    for _ in range(sub):
        pick = [rng.choice(keys) for _ in range(n)]
        t = time.perf_counter()
        for k in pick:
            store.get(k)
        runs.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(runs)

s, l = Store(small, max_size=1 << 40), Store(large, max_size=1 << 40)
for k in ks + kl[:200]:  # warm the page cache and the imports
    s.get(k); l.get(k)
print(json.dumps({"get_small_us": per_get(s, ks), "get_large_us": per_get(l, kl),
                  "miss_us": per_get(l, km), "version": getattr(kcache, "__file__", "?")}))
'''


def populate(small: Path, large: Path, n: int) -> tuple[list, list, list]:
    from kcache import Entry, Store, make_key
    from kcache.entry import format as fmt
    from kcache.disk.layout import Layout
    rng = random.Random(0)

    def ent(i):
        return Entry({"cubin": rng.randbytes(rng.randint(1024, 4096)), "ptx": b"// ptx"},
                     {"kernel": f"bench:k{i}", "signature": "(float32[::1],)", "arch": "sm_90a",
                      "compile_seconds": 0.5})

    ks = [make_key({"s": i}) for i in range(10)]
    st = Store(small, max_size=1 << 40)
    for i, k in enumerate(ks):
        st.put(k, ent(i))
    kl = [make_key({"l": i}) for i in range(n)]
    lay = Layout(large)
    for i, k in enumerate(kl):
        path = lay.entry(k)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_bytes(fmt.encode(k, ent(i)))
    os.chmod(large, 0o700)
    for d in (lay.bucket, lay.entries):
        os.chmod(d, 0o700)
    Store(large, max_size=1 << 40).recount()
    sample = rng.sample(kl, 5000)
    return ks, sample, [make_key({"m": i}) for i in range(2000)]


def summary(values: list[float]) -> str:
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, help="folder made by bench/baseline.py")
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--json", type=Path, help="write the raw results here")
    args = ap.parse_args(argv)
    trees = {"this tree": None}
    if args.baseline is not None:
        trees = {"baseline " + (args.baseline / "BASELINE_REV").read_text().strip(): args.baseline,
                 **trees}
    with tempfile.TemporaryDirectory() as d:
        small, large = Path(d) / "small", Path(d) / "large"
        keys = Path(d) / "keys.json"
        keys.write_text(json.dumps(populate(small, large, args.entries)))
        results = {name: [] for name in trees}
        for _ in range(args.rounds):
            for name, base in trees.items():
                done = subprocess.run([sys.executable, "-c", MEASURE, str(small), str(large), str(keys)],
                                      capture_output=True, text=True, check=True,
                                      env=with_baseline(os.environ, base), cwd=d)
                results[name].append(json.loads(done.stdout))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.entries:,} entries, "
          f"{args.rounds} rounds; min / median / max of per-process medians, microseconds\n")
    print(f"| tree | get, 10 entries | get, {args.entries:,} entries | ratio | miss |")
    print("| --- | --- | --- | --- | --- |")
    for name, runs in results.items():
        small_us = [r["get_small_us"] for r in runs]
        large_us = [r["get_large_us"] for r in runs]
        ratio = statistics.median(large_us) / statistics.median(small_us)
        print(f"| {name} | {summary(small_us)} | {summary(large_us)} | {ratio:.2f} | "
              f"{summary([r['miss_us'] for r in runs])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

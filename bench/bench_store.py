"""Store benchmark (a script, not a test): get latency at 10 and at 100,000 entries, put
latency, stats(), entries() and prune time at 100,000 entries.

Usage: python bench/bench_store.py [--entries 100000] [--dir DIR]

The 100,000 entries (1-4 KB each) are written straight in the entry file format (no fsync,
no locks) to keep the set-up short; ``recount()`` then sets the totals. Everything measured
goes through the public Store API. Results are printed as a Markdown table (docs/bench-store.md).
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kcache import Entry, Store, make_key
from kcache.entry import format as fmt
from kcache.disk.layout import Layout


def keys(n: int, tag: str = "bench") -> list[str]:
    return [make_key({"bench": tag, "i": i}) for i in range(n)]


def make_entry(rng: random.Random, i: int) -> Entry:
    return Entry({"cubin": rng.randbytes(rng.randint(1024, 4096)), "ptx": b"// ptx"},
                 {"kernel": f"bench:k{i}", "signature": "(float32[::1],)", "arch": "sm_90a",
                  "compile_seconds": 0.5})


def populate_raw(root: Path, ks: list[str], rng: random.Random) -> None:
    lay = Layout(root)
    for i, k in enumerate(ks):
        path = lay.entry(k)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(fmt.encode(k, make_entry(rng, i)))


def per_op(fn, items, repeat: int = 5) -> float:
    """Median over ``repeat`` runs of the mean seconds per item."""
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        for it in items:
            fn(it)
        runs.append((time.perf_counter() - t) / len(items))
    return statistics.median(runs)


def timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=100_000, help="large cache size (default 100000)")
    ap.add_argument("--rounds", type=int, default=40, help="interleaved get rounds of 500 (default 40)")
    ap.add_argument("--dir", type=Path, default=None, help="parent directory for the temp caches")
    args = ap.parse_args(argv)
    rng = random.Random(0)
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        small, large = Path(d) / "small", Path(d) / "large"

        s10 = Store(small, max_size=1 << 40)
        k10 = keys(10, "small")
        for i, k in enumerate(k10):
            s10.put(k, make_entry(rng, i))

        n = args.entries
        kn = keys(n)
        t_pop, _ = timed(lambda: populate_raw(large, kn, rng))
        big = Store(large, max_size=1 << 40)
        t_recount, st = timed(big.recount)
        assert st.entries == n, st

        # Interleave short rounds of both, so background load on a shared machine hits both
        # sides alike; the medians of the rounds are compared.
        r10, rn = [], []
        for _ in range(args.rounds):
            r10.append(per_op(s10.get, [rng.choice(k10) for _ in range(500)], repeat=1))
            rn.append(per_op(big.get, [rng.choice(kn) for _ in range(500)], repeat=1))
        get10, getn = statistics.median(r10), statistics.median(rn)
        rows.append(("get (hit), 10 entries", f"{get10 * 1e6:.1f} µs"))
        rows.append((f"get (hit), {n:,} entries (random keys)", f"{getn * 1e6:.1f} µs"))
        rows.append((f"ratio get({n:,}) / get(10)", f"{getn / get10:.2f} (goal <= 1.2)"))
        missing = keys(2000, "missing")
        rows.append((f"get (miss), {n:,} entries", f"{per_op(big.get, missing) * 1e6:.1f} µs"))

        new = keys(500, "new")
        fresh = [make_entry(rng, i) for i in range(len(new))]
        t_put, _ = timed(lambda: [big.put(k, e) for k, e in zip(new, fresh)])
        rows.append((f"put (new key, 1-4 KB, fsync), {n:,} entries", f"{t_put / len(new) * 1e3:.2f} ms"))
        rows.append(("stats()", f"{per_op(lambda _: big.stats(), range(50)) * 1e3:.2f} ms"))
        rows.append((f"recount() ({n:,} entries)", f"{t_recount:.2f} s"))
        t_list, count = timed(lambda: sum(1 for _ in big.entries()))
        rows.append((f"entries() headers of {count:,}", f"{t_list:.2f} s"))
        t_dry, rep = timed(lambda: big.prune(dry_run=True))
        rows.append(("prune() with nothing to remove (scan only)", f"{t_dry:.2f} s"))
        total = big.stats().bytes
        t_prune, rep = timed(lambda: big.prune(max_size=int(total * 0.9)))
        rows.append((f"prune(max_size=90 %) removing {len(rep.removed):,} LRU entries", f"{t_prune:.2f} s"))
        after = big.stats()
        assert after.bytes <= total * 0.9 and after.entries == n + len(new) - len(rep.removed)

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; populate {n:,} entries raw: {t_pop:.1f} s\n")
    print("| operation | time |\n| --- | --- |")
    for name, value in rows:
        print(f"| {name} | {value} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

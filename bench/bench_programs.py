"""cuda.core program cache benchmark (a script, not a test): a hit through
``kcache.ProgramCache`` against cuda.core's own ``FileStreamProgramCache``, in one run.

Usage: python bench/bench_programs.py [--rounds 7] [--iterations 300] [--json FILE]

NVRTC compiles for sm_90 without a GPU, so this runs on any machine with cuda-core. Two
programs (a small kernel, about 4 KB of cubin, and a larger one, about 60 KB) are compiled
once into each cache; then, in interleaved rounds (so drift hits both alike), each cache is
timed for:

* ``lookup``: ``cache[key]`` with cuda.core's key (what ``Program.compile(cache=)`` does on a
  hit after deriving the key);
* ``compile(cache=)``: the whole ``Program(src, "c++", options).compile("cubin", cache=...)``
  hit, cuda.core's key derivation and Program set-up included;
* ``first lookup``: ``lookup`` with nothing of the entry remembered (kcache.verified forgotten
  before each call): the first hit of a key in a process, every byte hashed and checked;
* ``compile_program``: ``kcache.compile_program`` (kcache only: single flight, symbol mapping).

Every kcache check stays on (checksums, header schema, artifact check, counters, LRU touch);
``lookup`` and ``compile(cache=)`` after the first are of bytes verified before in the process
(kcache.verified: compared byte for byte, not hashed again). Medians of the per-round means,
in microseconds. Goal: a kcache lookup within 2x of FileStreamProgramCache's
(docs/programs.md).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

SMALL = 'extern "C" __global__ void add_one(int* a) { a[threadIdx.x] += 1; }'
LARGE = "\n".join(
    f'extern "C" __global__ void k{i}(float* a, int n) {{ for (int j = 0; j < n; ++j) '
    f'a[(threadIdx.x + j * {i + 1}) % 1024] = a[j] * {i}.5f + sinf(a[j]); }}'
    for i in range(40))


def per_call(fn, iterations: int) -> float:
    start = time.perf_counter()
    for _ in range(iterations):
        fn()
    return (time.perf_counter() - start) / iterations


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args(argv)

    import cuda.core
    from cuda.core import Program, ProgramOptions
    from cuda.core.utils import FileStreamProgramCache, make_program_cache_key

    import kcache
    from kcache.store.verified import VERIFIED

    options = ProgramOptions(arch="sm_90")
    tmp = Path(tempfile.mkdtemp(prefix="kcache-bench-programs-"))
    fs = FileStreamProgramCache(tmp / "filestream")
    kc = kcache.ProgramCache(tmp / "kcache")
    programs = {"small": SMALL, "large": LARGE}
    sizes, keys = {}, {}
    for name, src in programs.items():
        for cache in (fs, kc):
            obj = Program(src, "c++", options=options).compile("cubin", cache=cache)
        sizes[name] = len(obj.code)
        keys[name] = make_program_cache_key(code=src, code_type="c++", options=options,
                                            target_type="cubin")
        kcache.compile_program(src, "c++", options, "cubin", root=tmp / "kcache")
        assert fs[keys[name]] == kc[keys[name]]

    ops = {}
    for name, src in programs.items():
        key = keys[name]
        ops[(name, "lookup", "FileStreamProgramCache")] = lambda key=key: fs[key]
        ops[(name, "lookup", "kcache.ProgramCache")] = lambda key=key: kc[key]
        ops[(name, "first lookup", "FileStreamProgramCache")] = lambda key=key: fs[key]
        ops[(name, "first lookup", "kcache.ProgramCache")] = (
            lambda key=key: (VERIFIED.clear(), kc[key]))
        for label, cache in (("FileStreamProgramCache", fs), ("kcache.ProgramCache", kc)):
            ops[(name, "compile(cache=)", label)] = (
                lambda src=src, cache=cache: Program(src, "c++", options=options).compile(
                    "cubin", cache=cache))
        ops[(name, "compile_program", "kcache.compile_program")] = (
            lambda src=src: kcache.compile_program(src, "c++", options, "cubin",
                                                   root=tmp / "kcache"))
    runs = {op: [] for op in ops}
    for _ in range(args.rounds):
        for op, fn in ops.items():
            runs[op].append(per_call(fn, args.iterations))
    us = {op: statistics.median(r) * 1e6 for op, r in runs.items()}

    print(f"cuda-core {cuda.core.__version__}, kcache {kcache.__version__}, python "
          f"{sys.version.split()[0]}; {args.rounds} rounds x {args.iterations} calls, "
          "median of the round means\n")
    print("| program | cubin | operation | FileStreamProgramCache | kcache | kcache / FileStream |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    rows = []
    for name in programs:
        for what in ("lookup", "first lookup", "compile(cache=)"):
            f = us[(name, what, "FileStreamProgramCache")]
            k = us[(name, what, "kcache.ProgramCache")]
            rows.append({"program": name, "cubin_bytes": sizes[name], "operation": what,
                         "filestream_us": f, "kcache_us": k, "ratio": k / f})
            print(f"| {name} | {sizes[name]:,} B | `{what}` | {f:.1f} µs | {k:.1f} µs | "
                  f"{k / f:.2f}x |")
        cp = us[(name, "compile_program", "kcache.compile_program")]
        rows.append({"program": name, "cubin_bytes": sizes[name], "operation": "compile_program",
                     "kcache_us": cp})
        print(f"| {name} | {sizes[name]:,} B | `compile_program` | | {cp:.1f} µs | |")
    if args.json:
        Path(args.json).write_text(json.dumps({"cuda_core": cuda.core.__version__,
                                               "rounds": args.rounds,
                                               "iterations": args.iterations,
                                               "rows": rows}, indent=2))
    kc.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``kcache export`` and ``kcache import`` of 1,000 entries: seconds, and the bundle's bytes
against the sum of the entries' bytes, with and without zstd (issue 9 benchmark).

The entries are real: a generated package of N/2 kernels (arithmetic loops whose length,
functions and constants differ from kernel to kernel, each calling a device function), warmed
with ``kcache warm --cc 8.0,9.0`` into a root kept in ``.bench/bundle-N/`` (made once; delete
it or pass ``--rebuild`` to make it again). Then, R times each, complete command runs (process
start to exit, what a container build waits for):

* ``kcache export OUT --compress zstd`` / ``--compress none`` / zstd with a secret (signed);
* ``kcache import OUT --into FRESH_ROOT`` of each bundle, into a new root each time;
* ``kcache import`` again into that root (every entry already there: a container start);

and ``python -m kcache --version`` (interpreter and CLI start-up, part of every figure).
Also: each entry compressed on its own with zstd at the same level (10), to show how much of
the bundle's compression comes from what entries share. Run:

    .venv/bin/python bench/bench_bundle.py [--entries 1000] [--runs 3]

Results are recorded in docs/containers.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FUNCS = ("math.sin", "math.exp", "math.sqrt", "math.log1p", "math.cos")

KERNEL = '''
@cuda.jit
def k{i}(x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        acc = x[i] * {a}
        for j in range({loop}):
            acc = helpers.mix(acc, y[i] + j) * 0.5 + {f}(abs(acc)) * {b}
        if acc > {c}:
            acc = {g}(abs(acc)) - acc * {a}
        out[i] = acc
'''

HELPERS = '''
from numba import cuda

@cuda.jit(device=True)
def mix(a, b):
    return a * 0.75 + b * 0.25
'''


def make_package(base: Path, n: int) -> tuple[Path, Path]:
    """base/bundlepkg with ``n`` kernels and a signatures file; returns (package, sigs)."""
    pkg = base / "bundlepkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text(textwrap.dedent(HELPERS))
    body = "import math\nfrom numba import cuda\nfrom bundlepkg import helpers\n"
    body += "".join(KERNEL.format(i=i, a=f"{i}.5", b=f"{i % 13}.25", c=f"{i % 5}.0",
                                  loop=2 + i % 9, f=FUNCS[i % 5], g=FUNCS[(i // 5) % 5])
                    for i in range(n))
    (pkg / "kernels.py").write_text(body)
    sigs = base / "bundle.sigs"
    sig = "void(float32[::1], float32[::1], float32[::1])"
    sigs.write_text("".join(f"bundlepkg.kernels:k{i}  {sig}\n" for i in range(n)))
    return pkg, sigs


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env["HOME"] = env["XDG_CACHE_HOME"] = tempfile.gettempdir()
    return env


def kcache(*args, cwd=None, env=None) -> tuple[float, subprocess.CompletedProcess]:
    """Run ``python -m kcache ARGS``; (wall seconds, process). Exits on failure."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kcache", *map(str, args)], cwd=cwd,
                          env=env or _env(), capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"kcache {' '.join(map(str, args))} failed: {proc.stderr[-2000:]}")
    return wall, proc


def warmed_root(n_entries: int, rebuild: bool) -> Path:
    """.bench/bundle-N/cache holding N entries (N/2 kernels x cc 8.0, 9.0); made if missing."""
    base = REPO / ".bench" / f"bundle-{n_entries}"
    root = base / "cache"
    if rebuild and base.exists():
        shutil.rmtree(base)
    if (base / "done").exists():
        return root
    shutil.rmtree(base, ignore_errors=True)
    pkg, sigs = make_package(base, n_entries // 2)
    wall, proc = kcache("warm", pkg, "--signatures", sigs, "--cc", "8.0,9.0", "--json",
                        "--dir", root, cwd=base)
    doc = json.loads(proc.stdout)
    print(f"warmed {doc['summary']['compiled']} entries in {wall:.0f} s ({doc['jobs']} jobs; "
          f"made once, kept in {base})")
    (base / "done").write_text(f"{wall:.1f}\n")
    return root


def zstd_each(root: Path) -> int | None:
    """Sum of each entry file compressed alone (zstd level 10), or None without zstandard."""
    try:
        import zstandard
    except ImportError:
        return None
    z = zstandard.ZstdCompressor(level=10)
    return sum(len(z.compress(p.read_bytes())) for p in (root / "v1" / "entries").rglob("*.kce"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    root = warmed_root(args.entries, args.rebuild)
    startup = statistics.median(kcache("--version")[0] for _ in range(args.runs))
    variants = {"zstd": ["--compress", "zstd"], "none": ["--compress", "none"],
                "zstd, signed": ["--compress", "zstd"]}
    rows = []
    with tempfile.TemporaryDirectory(prefix="kcache-bench-bundle-") as tmp:
        secret = Path(tmp, "secret")
        secret.write_text("bench-bundle secret 0123456789abcdef")
        for name, flags in variants.items():
            sign = ["--secret-file", secret] if "signed" in name else []
            out = Path(tmp, f"bundle-{len(rows)}.kcb")
            exports, imports, again, loads = [], [], [], []
            for r in range(args.runs):
                loads.append(os.getloadavg()[0])
                wall, proc = kcache("export", out, *flags, *sign, "--json", "--dir", root)
                exports.append(wall)
                doc = json.loads(proc.stdout)
                into = Path(tmp, f"root-{len(rows)}-{r}")
                wall, proc = kcache("import", out, "--into", into, *sign, "--json")
                imports.append(wall)
                assert len(json.loads(proc.stdout)["imported"]) == doc["entries"]
                again.append(kcache("import", out, "--into", into, *sign)[0])
                shutil.rmtree(into)
            rows.append((name, doc, exports, imports, again, loads))
    n = rows[0][1]["entries"]
    entry_bytes = rows[0][1]["entry_bytes"]
    print(f"kcache export / import of {n} entries ({entry_bytes:,} bytes of entries); "
          f"{args.runs} runs each, median; {os.cpu_count()} cores; Python "
          f"{platform.python_version()}; start-up alone (kcache --version): {startup:.2f} s")
    print(f"{'bundle':<13} {'bytes':>11} {'of entries':>10} {'export s':>8} {'import s':>8} "
          f"{'again s':>7} {'load avg':>8}")
    for name, doc, exports, imports, again, loads in rows:
        print(f"{name:<13} {doc['bundle_bytes']:>11,} {doc['bundle_bytes'] / entry_bytes:>10.1%} "
              f"{statistics.median(exports):>8.2f} {statistics.median(imports):>8.2f} "
              f"{statistics.median(again):>7.2f} {statistics.median(loads):>8.1f}")
    each = zstd_each(root)
    if each is not None:
        print(f"each entry zstd-compressed alone (level 10): {each:,} bytes, "
              f"{each / entry_bytes:.1%} of the entries")


if __name__ == "__main__":
    main()

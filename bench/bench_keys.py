"""Benchmark: the key phase of a cache hit, and the rest of kcache's CPU work on a hit (no GPU).

A generated project of 20 kernels (module ``bk_kernels``) calls device functions of two other
modules (``bk_dev_a`` -> ``bk_dev_b``, across modules and transitively) and reads constants of
a fourth (``bk_consts``). In each of ``--repeat`` fresh processes, every kernel is timed once
with ``time.perf_counter``:

* ``key``: ``KCacheDispatcher.kcache_key`` -- what a kernel's first call does before reading
  the store;
* ``fingerprint``: the source fingerprint alone (``fingerprint(py_func, registries)``);
* ``hit`` (with ``--hit``; the kernels are first stored by ``compile_for`` for cc 9.0):
  ``dispatcher.compile(argtypes)`` served from the store, split into key, store read
  (``Store.get_or_create``) and rebuild (``entry_to_kernel``). The device query and
  ``_Kernel.bind`` are replaced (no GPU), so the driver's module load and the launch, which
  the GPU run adds, are not in it.

Reported (milliseconds): the first kernel of the process (includes the toolchain versions,
read from the memo in the cache root after the first process) and the further kernels (min /
median over all further kernels of all processes).

``--extensions N``: the kernels' module also imports ``bk_ext``, which registers N user
``@overload``s of operators for a user type (the ``extensions`` key component,
dispatcher/extensions.py); the kernels do not use them.

Usage: python bench/bench_keys.py [--repeat 7] [--hit] [--extensions N] [--json OUT.json]
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

N_KERNELS = 20

CONSTS = """
    import numpy as np
    SCALE = 2.0
    OFFSET = 0.5
    LIMIT = 1024
    TABLE = (1.0, 2.0, 3.0, 4.0)
    DTYPE = np.float32
"""

DEV_B = """
    import math
    from numba import cuda
    import bk_consts

    @cuda.jit(device=True)
    def clamp(x):
        return min(max(x, 0.0), 1.0)

    @cuda.jit(device=True)
    def smooth(x):
        y = clamp(x)
        return y * y * (3.0 - 2.0 * y)

    @cuda.jit(device=True)
    def wave(x):
        return math.sin(x * bk_consts.SCALE) + bk_consts.OFFSET
"""

DEV_A = """
    from numba import cuda
    import bk_consts
    import bk_dev_b
    from bk_dev_b import clamp

    @cuda.jit(device=True)
    def axpy(a, x, y):
        return a * x + y

    @cuda.jit(device=True)
    def mix(x, y):
        return bk_dev_b.smooth(x) * y + clamp(y)

    @cuda.jit(device=True)
    def shaped(x):
        return bk_dev_b.wave(x) * bk_consts.TABLE[1]

    @cuda.jit(device=True)
    def both(x, y):
        return mix(x, y) + shaped(y) + axpy(bk_consts.SCALE, x, y)
"""

EXT_HEAD = """
    import operator
    from numba.cuda import types
    from numba.cuda.extending import overload

    class PairType(types.Type):
        def __init__(self):
            super().__init__(name="Pair")
"""

EXT_ONE = """
    @overload(operator.{op})
    def pair_{op}(a, b):
        if isinstance(a, PairType) and isinstance(b, PairType):
            def impl(a, b):
                return {n}
            return impl
"""

EXT_OPS = ("add", "sub", "mul", "truediv", "mod", "pow", "floordiv", "and_", "or_", "xor",
           "lshift", "rshift", "lt", "le", "gt", "ge", "eq", "ne")

KERNEL = """
    @kcache.jit
    def kern{i}(out, a, b):
        i = cuda.grid(1)
        if i < out.size and i < bk_consts.LIMIT:
            out[i] = {body} + {i}.0
"""

BODIES = [
    "bk_dev_a.axpy(bk_consts.SCALE, a[i], b[i])",
    "bk_dev_a.mix(a[i], b[i])",
    "bk_dev_a.shaped(a[i]) * b[i]",
    "bk_dev_a.both(a[i], b[i])",
    "bk_dev_b.wave(a[i]) + bk_dev_a.axpy(2.0, a[i], b[i])",
]

CHILD = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(1, sys.argv[1])  # after '' (skipped by the toolchain memo)
    what, root = sys.argv[2], sys.argv[3]
    import kcache
    from kcache.dispatcher import _compat, dispatcher as disp_mod
    from kcache.dispatcher.fingerprint import fingerprint
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
    import bk_kernels
    store = kcache.Store(root)
    kernels = [getattr(bk_kernels, "kern%d" % i) for i in range(N_KERNELS)]
    for k in kernels:
        k._kcache.store = store
    argtypes = _compat.normalize_signature("void(float32[::1], float32[::1], float32[::1])")
    phases = {"key": 0.0, "store": 0.0, "rebuild": 0.0}

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                phases[name] += time.perf_counter() - start
        return wrapper

    if what == "hit":
        # where current_cc is defined (the bridge's signatures module; a baseline's _compat)
        _cc_home = sys.modules[_compat.current_cc.__module__]
        _cc_home.current_cc = lambda: (9, 0)  # no GPU: the device's answer
        _compat.Kernel.bind = lambda self: None  # no GPU: no module load
        disp_mod.KCacheDispatcher.kcache_key = timed("key", disp_mod.KCacheDispatcher.kcache_key)
        store.get_or_create = timed("store", store.get_or_create)
        disp_mod.entry_to_kernel = timed("rebuild", disp_mod.entry_to_kernel)
    rows = []
    for k in kernels:
        for name in phases:
            phases[name] = 0.0
        start = time.perf_counter()
        if what == "key":
            k.kcache_key(argtypes, (9, 0), store=store)
        elif what == "fingerprint":
            fingerprint(k.py_func, FRONTEND.registries())
        else:
            k.compile(argtypes)
            assert k.stats.cache_hits[argtypes] == 1, k.stats
        total = time.perf_counter() - start
        rows.append([total * 1e3] + [phases[n] * 1e3 for n in ("key", "store", "rebuild")])
    print(json.dumps(rows))
""").replace("N_KERNELS", str(N_KERNELS))

WARM = textwrap.dedent("""
    import sys
    sys.path.insert(1, sys.argv[1])  # after '' (skipped by the toolchain memo)
    import kcache
    from kcache.dispatcher import compile_for
    import bk_kernels
    store = kcache.Store(sys.argv[3])  # argv: project directory, "warm", cache root
    for i in range(N_KERNELS):
        compile_for(getattr(bk_kernels, "kern%d" % i),
                    "void(float32[::1], float32[::1], float32[::1])", cc=(9, 0), store=store)
""").replace("N_KERNELS", str(N_KERNELS))


def write_project(directory: Path, extensions: int = 0) -> None:
    files = {"bk_consts": CONSTS, "bk_dev_b": DEV_B, "bk_dev_a": DEV_A}
    kernels = ["import kcache", "from numba import cuda", "import bk_consts", "import bk_dev_a",
               "import bk_dev_b", ""]
    if extensions:
        if extensions > len(EXT_OPS):
            raise SystemExit(f"--extensions: at most {len(EXT_OPS)}")
        files["bk_ext"] = EXT_HEAD + "".join(EXT_ONE.format(op=op, n=n)
                                             for n, op in enumerate(EXT_OPS[:extensions]))
        kernels.insert(1, "import bk_ext")
    for i in range(N_KERNELS):
        kernels.append(textwrap.dedent(KERNEL.format(i=i, body=BODIES[i % len(BODIES)])))
    files["bk_kernels"] = "\n".join(kernels)
    for name, source in files.items():
        (directory / f"{name}.py").write_text(textwrap.dedent(source))


def run(directory: Path, what: str, root: Path, script: str = CHILD) -> list:
    proc = subprocess.run([sys.executable, "-B", "-c", script, str(directory), what, str(root)],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode:
        raise SystemExit(f"child failed:\n{proc.stderr[-3000:]}")
    lines = proc.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else []


def summary(runs: list) -> dict:
    """min/median of the first kernel and of the further kernels; for ``hit`` runs also the
    median of each phase over the further kernels."""
    first = [r[0][0] for r in runs]
    further = [row for r in runs for row in r[1:]]
    out = {"first_min": min(first), "first_median": statistics.median(first),
           "further_min": min(row[0] for row in further),
           "further_median": statistics.median(row[0] for row in further),
           "further_max": max(row[0] for row in further), "processes": len(runs)}
    for i, phase in enumerate(("key", "store", "rebuild"), start=1):
        out[f"further_{phase}_median"] = statistics.median(row[i] for row in further)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--hit", action="store_true",
                        help="also time whole hits (compiles the 20 kernels once first)")
    parser.add_argument("--extensions", type=int, default=0, metavar="N",
                        help="a module of N user @overloads of operators is imported too")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    modes = ("key", "fingerprint") + (("hit",) if args.hit else ())
    with tempfile.TemporaryDirectory() as tmp:
        directory, root = Path(tmp) / "proj", Path(tmp) / "cache"
        directory.mkdir()
        write_project(directory, args.extensions)
        (root / "v1").mkdir(parents=True, mode=0o700)  # a used cache root holds the memo
        run(directory, "key", root)  # fills the toolchain memo, as any earlier process would
        if args.hit:
            run(directory, "warm", root, WARM)
        results = {what: summary([run(directory, what, root) for _ in range(args.repeat)])
                   for what in modes}
    for what, s in results.items():
        print(f"{what:12s} first kernel: min {s['first_min']:.3f} ms, median "
              f"{s['first_median']:.3f} ms; further kernels: min {s['further_min']:.3f} ms, "
              f"median {s['further_median']:.3f} ms, max {s['further_max']:.3f} ms "
              f"({s['processes']} processes x {N_KERNELS} kernels)")
        if what == "hit":
            print(f"{'':12s} further kernels, medians: key {s['further_key_median']:.3f} ms, "
                  f"store read {s['further_store_median']:.3f} ms, rebuild "
                  f"{s['further_rebuild_median']:.3f} ms")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

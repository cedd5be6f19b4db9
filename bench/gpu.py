"""The GPU part of bench/run.py: three modes on the same kernels, in the same run.

Modes: ``kcache`` (the transparent switch: ``KCACHE_ENABLE=1``, kernels declared
``cache=True``), ``numba`` (numba-cuda's own ``cache=True``) and ``none`` (no cache). Every
measurement is a fresh process (``child.py`` below, written into a temp folder with the
kernel modules), because what a cache changes is the first call of a process.

Sections, in this order (each writes its figures to the results file when it ends):

* ``first_calls``: five kernels (an axpy calling a device function, a tiled matmul in shared
  memory, an atomic reduction, a stencil, a scale). ``--runs`` cold processes per mode, each on
  an empty cache (modes interleaved), then ``--runs`` warm processes per mode on the filled
  cache, then ``--runs`` "split" processes (kcache, numba) timing the overload lookup
  (``dispatcher.compile``) apart from the launch, then ``--runs`` "preloaded" kcache processes
  that look every overload up before the clock starts: numba-cuda's floor, what a first call
  would cost if the lookup cost nothing. Reported: interpreter start, imports, CUDA
  context and allocations, the first kernel call, each further kernel's first call, process
  start to first call done, the lookups, the cold first calls summed, and kcache's own share
  of a cold miss (each cold first call minus the compile time kcache timed itself).
* ``fleet``: ``--fleet`` processes start together (released at once through their stdin)
  on an empty cache and call the five kernels; compiles counted in all of them, and the wall
  time from the release to the last process done.
* ``app``: an application's kernels: modules of N generated kernels (sizes ``--app-sizes``,
  100 and 1,000), time from process start to every kernel launched once and done, in five
  modes: ``kcache`` and ``numba`` on a filled cache, ``layer``, ``none`` and the ``floor``.
  ``layer`` is kcache with every kernel served from a bundle layer (issue 36): the filled
  directory root is written into one bundle file by ``kcache export`` (the install's own
  command, as a user runs it), and each run names that file in ``KCACHE_READONLY_DIRS`` with
  ``KCACHE_DIR`` a new, empty folder; after each run the process's counters, ``kcache stats``
  of that root and the root itself (no entry in it) must show every kernel a hit and nothing
  compiled, or the section fails rather than report a figure that is not the layer's. kcache's
  own part of each further hit is timed inside the call (``own_phases``) over the kernels of
  the 1,000-kernel runs, from the layer and from the directory root. The floor is
  the same process (interpreter, imports, ``@cuda.jit`` definitions, launches, clock from
  process start) in which each kernel's overload is rebuilt from its cubin, all of them read
  from one file at start (with kcache's ``rebuild_kernel``, the numba-cuda bridge's
  rebuild.py, and nothing else of kcache:
  no key, no store), and put into the dispatcher's overloads, so every launch goes through
  numba-cuda's dispatch of an overload it holds: what remains when a cache costs nothing. Each
  run is split (timers in the child) into interpreter start, imports, kernel definitions
  (the module's import), CUDA context and arrays, lookups (``dispatcher.compile``: a cache
  read, or the compile without a cache; the floor's file read and rebuilds), module loads
  (``cuModuleLoadData``, in ``get_cufunc``) and launches; the garbage collector's time within
  those parts (``gc.callbacks``: all of it, and in the loop of lookups and launches) and its
  full collections are counted too. kcache's cache is filled by
  ``kcache.compile_for`` for the device's cc, numba-cuda's by one launch of every kernel, both
  in parallel processes on disjoint kernels; the floor's file holds the cubins of kcache's
  entries. Modes alternate run by run; the no-cache runs come last (one run from
  ``NONE_ONCE_FROM`` kernels), each left out with a note when its estimate would overrun
  ``--budget``. Goals: kcache within 10 % of the floor (medians), at each size (issue 19);
  from the bundle layer within 10 % at 100 kernels and 25 % at 1,000, and its own part of a
  further hit at most 0.25 ms (issue 36).

``--fake`` runs the same flow without a GPU: kernels are compiled for cc 9.0 through
kcache's offline target (``kcache.dispatcher.frontends.numba_cuda.offline.offline_target``; ``_Kernel.bind``
builds the cubin instead of loading it) and "calls" are ``dispatcher.compile`` without a
launch. The figures are then meaningless; the flow, the processes, the compiles counted and
the results file are real.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from figures import MIN_RUNS, Results, figure, log

REPO = Path(__file__).resolve().parents[1]
MODES = ("kcache", "numba", "none")

KERNELS = textwrap.dedent('''
    import os
    import numpy as np
    from numba import cuda

    CACHE = os.environ.get("BENCH_CACHE") == "1"
    TILE = 16

    @cuda.jit(device=True)
    def axpy1(a, x, y):
        return a * x + y

    @cuda.jit(cache=CACHE)
    def axpy(a, x, y, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = axpy1(a, x[i], y[i])

    @cuda.jit(cache=CACHE)
    def matmul(A, B, C):
        sA = cuda.shared.array((TILE, TILE), np.float32)
        sB = cuda.shared.array((TILE, TILE), np.float32)
        x, y = cuda.grid(2)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        acc = np.float32(0)
        for t in range((A.shape[1] + TILE - 1) // TILE):
            sA[ty, tx] = A[y, t * TILE + tx] if y < A.shape[0] and t * TILE + tx < A.shape[1] else 0
            sB[ty, tx] = B[t * TILE + ty, x] if x < B.shape[1] and t * TILE + ty < B.shape[0] else 0
            cuda.syncthreads()
            for k in range(TILE):
                acc += sA[ty, k] * sB[k, tx]
            cuda.syncthreads()
        if y < C.shape[0] and x < C.shape[1]:
            C[y, x] = acc

    @cuda.jit(cache=CACHE)
    def reduce_sum(x, out):
        i = cuda.grid(1)
        if i < x.size:
            cuda.atomic.add(out, 0, x[i])

    @cuda.jit(cache=CACHE)
    def stencil(a, b):
        i = cuda.grid(1)
        if 0 < i < a.size - 1:
            b[i] = 0.25 * a[i - 1] + 0.5 * a[i] + 0.25 * a[i + 1]

    @cuda.jit(cache=CACHE)
    def scale(a, s):
        i = cuda.grid(1)
        if i < a.size:
            a[i] *= s
''')

APP_HEAD = textwrap.dedent('''
    import math
    import os
    from numba import cuda

    CACHE = os.environ.get("BENCH_CACHE") == "1"

    @cuda.jit(device=True)
    def blend(a, b, w):
        return a * w + b * (1.0 - w)
''')

APP_KERNEL = textwrap.dedent('''
    @cuda.jit(cache=CACHE)
    def k{i}(x, out):
        j = cuda.grid(1)
        if j < out.size:
            v = blend(x[j], {i}.25, 0.{w})
            if v > {i}.5:
                v = math.sqrt(v) + {i}
            out[j] = v
''')


def app_module(n: int) -> str:
    """A module of ``n`` distinct kernels (each compiles on its own), like an application's."""
    return APP_HEAD + "".join(APP_KERNEL.format(i=i, w=(i % 9) + 1) for i in range(n)) + \
        f"\nKERNELS = [{', '.join(f'k{i}' for i in range(n))}]\n"


CHILD = textwrap.dedent('''
    import time
    T_START = time.time()                 # the first statement: the interpreter has started
    import contextlib, importlib, json, os, sys
    mode, role, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    fake = opts["fake"]
    hook = "kcache._hook" in sys.modules  # imported by kcache-hook.pth when KCACHE_ENABLE is set
    if mode.startswith("kcache") and not hook:
        import kcache._hook                # what the .pth line does (an install without it)
    import numpy as np
    from numba import cuda
    module = importlib.import_module(opts["module"])
    T_IMPORTS = time.time()

    stack = contextlib.ExitStack()
    if fake:                               # no GPU: compile for cc 9.0, "launch" = compile
        from kcache.dispatcher import _compat
        stack.enter_context(_compat.offline_target((9, 0)))
        # where current_cc is defined (the bridge's signatures module; a baseline's _compat)
        _cc_home = sys.modules[_compat.current_cc.__module__]
        _cc_home.current_cc = lambda: (9, 0)
        def bind(self):
            self._codelibrary.get_cubin()
        _compat.Kernel.bind = bind
        # numba-cuda's cache index asks the device for the runtime version and cc
        from numba.cuda.codegen import JITCUDACodegen
        JITCUDACodegen.magic_tuple = lambda self: ((13, 0), (9, 0))
        to_device = lambda a: a
        sync = lambda: None
    else:
        cuda.current_context()             # context creation is not part of a kernel call
        to_device = cuda.to_device
        sync = cuda.synchronize

    n = 1 << 16
    if opts["module"] == "bench_kernels":
        K = module
        x, y = to_device(np.ones(n, np.float32)), to_device(np.ones(n, np.float32))
        out = to_device(np.zeros(n, np.float32))
        A, C = to_device(np.ones((64, 64), np.float32)), to_device(np.zeros((64, 64), np.float32))
        s = to_device(np.zeros(1, np.float32))
        calls = [("axpy", K.axpy, n // 128, 128, (np.float32(2), x, y, out)),
                 ("matmul", K.matmul, (4, 4), (16, 16), (A, A, C)),
                 ("reduce_sum", K.reduce_sum, n // 128, 128, (x, s)),
                 ("stencil", K.stencil, n // 128, 128, (x, out)),
                 ("scale", K.scale, n // 128, 128, (out, np.float32(0.5)))]
    else:
        x, out = to_device(np.ones(n, np.float32)), to_device(np.zeros(n, np.float32))
        calls = [(k.__name__, k, n // 128, 128, (x, out)) for k in module.KERNELS]
    sync()
    T_READY = time.time()

    if role == "fleet":
        print("READY", flush=True)
        sys.stdin.buffer.read(1)           # released together with the other processes
    T_GO = time.time()
    times, lookups, phases, typing, current = {}, {}, {}, {}, [None]
    if role == "split" and mode == "kcache":
        # Where a hit's time goes: each phase of KCacheDispatcher.compile timed (nested: the
        # key includes the fingerprint); the launch is the first call minus the lookup.
        from kcache.dispatcher import _compat, components, dispatcher as D
        from kcache.store import Store

        def timed(owner, attr, label):
            real = getattr(owner, attr, None)
            if real is None:
                return
            def wrapper(*a, **k):
                t = time.perf_counter()
                try:
                    return real(*a, **k)
                finally:
                    ph = phases.setdefault(current[0], {})
                    ph[label] = ph.get(label, 0.0) + time.perf_counter() - t
            setattr(owner, attr, wrapper)

        timed(D.KCacheDispatcher, "kcache_key", "key")
        timed(components, "fingerprint", "fingerprint")
        timed(Store, "get_or_create", "store read")
        timed(sys.modules[D.KCacheDispatcher.__module__], "entry_to_kernel", "rebuild")
        timed(_compat.Kernel, "bind", "module load")
    if role == "preloaded":
        # numba-cuda's floor: every overload looked up (and its module loaded) before the
        # clock starts, so each timed call is numba-cuda's own path alone: argument typing,
        # dispatch, launch. The types are built, not asked of typeof, which would warm
        # numba-cuda's first typing of a device array before the clock starts.
        import numba
        def built_type(a):
            if getattr(a, "ndim", 0):
                return numba.types.Array(numba.from_dtype(a.dtype), a.ndim, "C")
            return numba.from_dtype(a.dtype)
        for name, disp, grid, block, args in calls:
            start = time.perf_counter()
            disp.compile(tuple(built_type(a) for a in args))
            lookups[name] = time.perf_counter() - start
    for name, disp, grid, block, args in calls:
        current[0] = name
        if role == "split" or fake:
            start = time.perf_counter()    # numba-cuda's typing of the arguments (Python)
            types = tuple(disp.typeof_pyval(a) for a in args)
            typing[name] = time.perf_counter() - start
        start = time.perf_counter()
        if role == "split" or fake:        # the overload lookup alone: cache read + rebuild
            disp.compile(types)
            lookups[name] = time.perf_counter() - start
        if not fake:
            disp[grid, block](*args)
            sync()
        times[name] = time.perf_counter() - start
    T_DONE = time.time()

    own = None                             # kcache's own phases, timed inside each lookup
    if mode.startswith("kcache"):
        from kcache.dispatcher import dispatcher as kcache_dispatcher
        if hasattr(kcache_dispatcher, "own_phases"):  # not in a baseline before it
            own = kcache_dispatcher.own_phases()

    def compiles(d):
        if hasattr(d.stats, "compile_seconds"):      # a kcache dispatcher
            return d.stats.compiles
        return sum(d.stats.cache_misses.values())    # numba-cuda compiles on each miss
    print(json.dumps({
        "dispatcher": type(calls[0][1]).__name__, "hook_from_pth": hook,
        "interpreter_s": T_START - float(os.environ["BENCH_SPAWN"]),
        "imports_s": T_IMPORTS - T_START, "setup_s": T_READY - T_IMPORTS,
        "times": times, "lookups": lookups, "phases": phases, "typing": typing, "own": own,
        "compile_seconds": {name: d.stats.compile_seconds for name, d, *_ in calls
                            if hasattr(d.stats, "compile_seconds")},
        "compiles": sum(compiles(d) for _, d, *_ in calls),
        "go": T_GO, "done": T_DONE,
        "overloads": sum(len(d.overloads) for _, d, *_ in calls),
        "ready_s": T_DONE - float(os.environ["BENCH_SPAWN"])}))
''')


class Bench:
    """One GPU-part run: the temp folder with the modules, the options, the results file."""

    def __init__(self, opts, results: Results, work: Path):
        self.opts = opts
        self.results = results
        self.work = work
        (work / "bench_kernels.py").write_text(KERNELS)
        (work / "child.py").write_text(CHILD)
        self._caches = 0

    def env(self, mode: str, cache: Path) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
        env.update(BENCH_CACHE="0" if mode == "none" else "1", KCACHE_DIR=str(cache / "kcache"),
                   NUMBA_CACHE_DIR=str(cache / "numba"),
                   # the kernels' modules; kcache itself as installed (as users run it)
                   PYTHONPATH=os.pathsep.join(filter(None, [str(self.work),
                                                            os.environ.get("PYTHONPATH")])))
        if mode.startswith("kcache"):
            env["KCACHE_ENABLE"] = "1"
        if mode == "kcache-base":  # an earlier revision (bench/baseline.py) imported first
            env["PYTHONPATH"] = os.pathsep.join([str(self.opts.baseline), env["PYTHONPATH"]])
        return env

    def new_cache(self) -> Path:
        self._caches += 1
        return self.work / f"cache{self._caches}"

    def spawn(self, mode, role, env, module="bench_kernels", stdin=None):
        env = dict(env, BENCH_SPAWN=repr(time.time()))
        opts = json.dumps({"fake": self.opts.fake, "module": module})
        return subprocess.Popen([sys.executable, str(self.work / "child.py"), mode, role, opts],
                                cwd=self.work, env=env, stdin=stdin, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def finish(self, proc, mode) -> dict:
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"{mode} child failed (exit {proc.returncode}):\n{err[-3000:]}")
        doc = json.loads(out.strip().splitlines()[-1])
        doc["warnings"] = [line for line in err.splitlines() if line.startswith("kcache:")][:5]
        want = "KCacheDispatcher" if mode.startswith("kcache") or mode == "layer" \
            else "CUDADispatcher"
        if doc["dispatcher"] != want:
            raise RuntimeError(f"{mode} child ran {doc['dispatcher']} kernels, not {want}")
        return doc

    def child(self, mode, role, cache, module="bench_kernels") -> dict:
        return self.finish(self.spawn(mode, role, self.env(mode, cache), module), mode)


# --- sections -------------------------------------------------------------------------------

def first_calls(b: Bench) -> list[dict]:
    runs = b.opts.runs
    raw = {m: {"cold": [], "warm": [], "split": []} for m in MODES}
    caches = {}
    for _ in range(runs):                      # interleaved: machine drift hits every mode
        for mode in MODES:
            caches[mode] = b.new_cache()
            raw[mode]["cold"].append(b.child(mode, "calls", caches[mode]))
    for mode in MODES:
        raw[mode]["warm"] = [b.child(mode, "calls", caches[mode]) for _ in range(runs)]
    for mode in ("kcache", "numba"):
        raw[mode]["split"] = [b.child(mode, "split", caches[mode]) for _ in range(runs)]
    raw["kcache"]["preloaded"] = [b.child("kcache", "preloaded", caches["kcache"])
                                  for _ in range(runs)]
    b.raw_first_calls = raw
    out = []
    sec = "first_calls"
    for mode in MODES:
        warm, cold, split = raw[mode]["warm"], raw[mode]["cold"], raw[mode]["split"]
        names = list(warm[0]["times"])
        first = [1e3 * w["times"][names[0]] for w in warm]
        further = [1e3 * w["times"][n] for w in warm for n in names[1:]]
        goal_first = "<= 1.5 ms (issue 8)" if mode == "kcache" else None
        goal_further = "<= 0.5 ms (issue 8)" if mode == "kcache" else None
        out += [
            figure(f"first_call.{mode}", sec, "first kernel call, warm cache", first, "ms",
                   mode=mode, goal=goal_first,
                   met=(statistics.median(first) <= 1.5) if goal_first else None),
            figure(f"further_first_call.{mode}", sec, "each further kernel's first call, warm cache",
                   further, "ms", mode=mode, goal=goal_further,
                   met=(statistics.median(further) <= 0.5) if goal_further else None),
            figure(f"interpreter.{mode}", sec, "process start to the first line of the script",
                   [1e3 * w["interpreter_s"] for w in warm], "ms", mode=mode),
            figure(f"imports.{mode}", sec, "imports (numpy, numba.cuda, the kernels' module)",
                   [1e3 * w["imports_s"] for w in warm], "ms", mode=mode),
            figure(f"setup.{mode}", sec, "CUDA context and allocations",
                   [1e3 * w["setup_s"] for w in warm], "ms", mode=mode),
            figure(f"start_to_first_call.{mode}", sec,
                   "process start to the first kernel call done, warm cache",
                   [1e3 * (w["interpreter_s"] + w["imports_s"] + w["setup_s"] + w["times"][names[0]])
                    for w in warm], "ms", mode=mode),
            figure(f"cold_total.{mode}", sec, "first calls of the five kernels summed, empty cache",
                   [1e3 * sum(c["times"].values()) for c in cold], "ms", mode=mode),
        ]
        if split:
            out += [
                figure(f"lookup_first.{mode}", sec, "of the first call: the overload lookup",
                       [1e3 * s["lookups"][names[0]] for s in split], "ms", mode=mode),
                figure(f"lookup_further.{mode}", sec, "of each further first call: the lookup",
                       [1e3 * s["lookups"][n] for s in split for n in names[1:]], "ms", mode=mode),
                figure(f"typing_first.{mode}", sec, "numba-cuda's typing of the first call's "
                       "arguments (typeof_pyval, before the lookup)",
                       [1e3 * s["typing"][names[0]] for s in split], "ms", mode=mode),
                figure(f"typing_further.{mode}", sec, "numba-cuda's typing of each further first "
                       "call's arguments", [1e3 * s["typing"][n] for s in split for n in names[1:]],
                       "ms", mode=mode),
            ]
    out += own_figures(raw["kcache"]["warm"], sec)
    out += import_figures(b, sec)
    out += phase_figures(raw["kcache"]["split"], sec)
    out += floor_figures(raw["kcache"]["preloaded"], sec)
    out += baseline_figures(b, sec)
    # kcache's own work on a cold miss (key, lock, encode, publish, counters), exactly: each
    # first call minus the compile kcache timed itself; the cold totals of identical processes
    # vary by more than the 3 % goal, so this is the figure the goal is read against
    own_ms, own_pct = [], []
    for c in raw["kcache"]["cold"]:
        own = sum(c["times"][k] - c["compile_seconds"].get(k, 0.0) for k in c["times"])
        compiled = sum(c["compile_seconds"].values())
        own_ms.append(1e3 * own)
        own_pct.append(100 * own / compiled if compiled else 0.0)
    out += [figure("own_cold.kcache", sec, "kcache's own time on the cold misses of a process",
                   own_ms, "ms", mode="kcache"),
            figure("own_cold_pct.kcache", sec, "kcache's own share of a cold miss (of compile time)",
                   own_pct, "%", mode="kcache", goal="<= 3 % (issue 8)",
                   met=statistics.median(own_pct) <= 3.0)]
    return out


def own_figures(warm: list[dict], sec: str) -> list[dict]:
    """kcache's own part of each hit, timed inside the call (kcache.dispatcher.own_phases:
    the lookup minus the driver's module load), in the warm processes (no phase wrappers):
    the first kernel of each process, and each further one. Each figure keeps the phases
    (key, store read, rebuild) of every value in ``extra``."""
    runs = [w["own"] for w in warm if w.get("own")]
    if not runs or not all(o["hit"] for own in runs for o in own):
        return []
    first = [own[0] for own in runs]
    further = [o for own in runs for o in own[1:]]

    def phases(items):
        return {p: [o[p] for o in items] for p in ("key", "read", "rebuild", "load")}
    return [figure("own_first.kcache", sec, "kcache's own part of the first kernel's hit "
                   "(timed inside the call)", [o["own"] for o in first], "ms", mode="kcache",
                   goal="<= 0.5 ms (issue 19)",
                   met=statistics.median(o["own"] for o in first) <= 0.5, **phases(first)),
            figure("own_further.kcache", sec, "kcache's own part of each further kernel's hit "
                   "(timed inside the call)", [o["own"] for o in further], "ms", mode="kcache",
                   **phases(further))]  # issue 19's goal: superseded by own_further.layer (36)


def import_figures(b: Bench, sec: str) -> list[dict]:
    """What KCACHE_ENABLE=1 adds to the imports: ``import kcache.dispatcher`` (the hook) after
    ``import numba.cuda``, timed inside fresh processes (bench/bench_import.py)."""
    import bench_import  # bench/ is on the path (bench/run.py's folder)
    docs = bench_import.measure(max(9, b.opts.runs), modes=("kcache",))["kcache"]
    imp = [d["import_ms"] for d in docs]
    return [figure("import_dispatcher.kcache", sec, "import kcache.dispatcher (KCACHE_ENABLE=1), "
                   "after import numba.cuda", imp, "ms", mode="kcache", goal="<= 15 ms (H200)",
                   met=statistics.median(imp) <= 15.0),
            figure("first_definition.kcache", sec, "definition of the first cache=True kernel "
                   "(kcache opens the store)", [d["define_ms"] for d in docs], "ms", mode="kcache")]


def floor_figures(pre: list[dict], sec: str) -> list[dict]:
    """numba-cuda's own part of a first call, which no cache removes: the same calls with every
    overload looked up and loaded before the clock starts (launch, synchronize, and numba-cuda's
    first-launch work of the process); and the module load (``cuModuleLoadData``) of a further
    kernel, timed within its lookup."""
    if not pre:
        return []
    if any(p["overloads"] != len(p["times"]) for p in pre):  # a call looked up again
        raise RuntimeError("preloaded: the built argument types missed an overload")
    names = list(pre[0]["times"])
    return [figure("floor_first.kcache", sec, "numba-cuda's floor: first call of a process with "
                   "its overload already loaded", [1e3 * p["times"][names[0]] for p in pre], "ms",
                   mode="kcache"),
            figure("floor_further.kcache", sec, "numba-cuda's floor: each further first call with "
                   "its overload already loaded",
                   [1e3 * p["times"][n] for p in pre for n in names[1:]], "ms", mode="kcache")]


def baseline_figures(b: Bench, sec: str) -> list[dict]:
    """With ``--baseline DIR``: the same warm-cache processes for an earlier revision of kcache
    (made by bench/baseline.py), alternating with this tree's, so both meet the same machine."""
    if getattr(b.opts, "baseline", None) is None:
        return []
    rev = (b.opts.baseline / "BASELINE_REV").read_text().strip()
    cache = {m: b.new_cache() for m in ("kcache", "kcache-base")}
    raw = {m: {"calls": [], "split": []} for m in cache}
    for m in cache:
        b.child(m, "calls", cache[m])  # fill
    for _ in range(b.opts.runs):
        for m in cache:
            raw[m]["calls"].append(b.child(m, "calls", cache[m]))
            raw[m]["split"].append(b.child(m, "split", cache[m]))
    out = []
    for m, r in raw.items():
        names = list(r["calls"][0]["times"])
        what = f"kcache at {rev}" if m == "kcache-base" else "kcache (this tree)"
        out += [figure(f"before_after.first_call.{m}", sec, f"{what}: first kernel call",
                       [1e3 * w["times"][names[0]] for w in r["calls"]], "ms", mode=m, rev=rev),
                figure(f"before_after.further_first_call.{m}", sec,
                       f"{what}: each further kernel's first call",
                       [1e3 * w["times"][n] for w in r["calls"] for n in names[1:]], "ms", mode=m,
                       rev=rev),
                figure(f"before_after.lookup_first.{m}", sec, f"{what}: lookup of the first call",
                       [1e3 * w["lookups"][names[0]] for w in r["split"]], "ms", mode=m, rev=rev),
                figure(f"before_after.lookup_further.{m}", sec,
                       f"{what}: lookup of each further first call",
                       [1e3 * w["lookups"][n] for w in r["split"] for n in names[1:]], "ms",
                       mode=m, rev=rev)]
        own = [w["own"] for w in r["calls"] if w.get("own")]
        if own and all(o["hit"] for run in own for o in run):  # both revisions time their own part
            out += [figure(f"before_after.own_first.{m}", sec,
                           f"{what}: kcache's own part of the first kernel's hit",
                           [run[0]["own"] for run in own], "ms", mode=m, rev=rev),
                    figure(f"before_after.own_further.{m}", sec,
                           f"{what}: kcache's own part of each further kernel's hit",
                           [o["own"] for run in own for o in run[1:]], "ms", mode=m, rev=rev)]
    return out


def phase_figures(split: list[dict], sec: str) -> list[dict]:
    """Where each further kernel's first call (a hit) goes, phase by phase (nested: ``key``
    includes ``fingerprint``; ``launch`` is the call minus the lookup)."""
    split = [s for s in split if s.get("phases")]
    if not split:
        return []
    names = list(split[0]["times"])[1:]
    labels = sorted({lab for s in split for n in names for lab in s["phases"].get(n, {})})
    out = [figure(f"phase.{lab.replace(' ', '_')}.kcache", sec,
                  f"of each further first call (a hit): {lab}",
                  [1e3 * s["phases"].get(n, {}).get(lab, 0.0) for s in split for n in names],
                  "ms", mode="kcache") for lab in labels]
    out.append(figure("phase.launch.kcache", sec,
                      "of each further first call (a hit): launch and synchronize",
                      [1e3 * (s["times"][n] - s["lookups"][n]) for s in split for n in names],
                      "ms", mode="kcache"))
    return out


def fleet(b: Bench) -> list[dict]:
    n, runs = b.opts.fleet, b.opts.runs
    out = []
    kernels = 5
    for mode in MODES:
        compiles, walls = [], []
        for _ in range(runs):
            cache = b.new_cache()
            env = b.env(mode, cache)
            procs = [b.spawn(mode, "fleet", env, stdin=subprocess.PIPE) for _ in range(n)]
            for p in procs:                          # every process set up, then all at once
                line = p.stdout.readline()
                if line.strip() != "READY":
                    p.kill()
                    raise RuntimeError(f"{mode} fleet process failed: {p.stderr.read()[-3000:]}")
            go = time.time()
            for p in procs:  # communicate() closes stdin; each child reads one byte
                p.stdin.write("g")
                p.stdin.flush()
            docs = [b.finish(p, mode) for p in procs]
            compiles.append(sum(d["compiles"] for d in docs))
            walls.append(max(d["done"] for d in docs) - go)
        goal = f"{kernels} (each kernel once)" if mode == "kcache" else None
        out += [figure(f"fleet_compiles.{mode}", "fleet",
                       f"compiles in all, {n} processes starting together on an empty cache",
                       compiles, "count", mode=mode, goal=goal,
                       met=(max(compiles) == kernels) if goal else None, processes=n,
                       kernels=kernels),
                figure(f"fleet_wall.{mode}", "fleet",
                       f"release to the last of {n} processes done", walls, "s", mode=mode,
                       processes=n)]
    return out


# --- the application section ----------------------------------------------------------------

#: The app kernels' one signature (``APP_KERNEL``: an input and an output array).
APP_SIGNATURE = "void(float32[::1], float32[::1])"
APP_MODES = ("kcache", "layer", "numba", "none", "floor")
#: The parts of an app run, in process order; they add up to the run's time.
APP_PARTS = ("interpreter", "imports", "definitions", "context", "lookups", "loads", "launches")
#: From this many kernels the no-cache mode runs once (each run compiles every kernel).
NONE_ONCE_FROM = 1000
#: The app size whose layer runs give ``own_further.layer`` (else the largest size run).
OWN_LAYER_SIZE = 1000
#: kcache's own part of a further hit from a bundle layer, at most (ms; issue 36).
OWN_LAYER_GOAL = 0.25


def layer_goal(n: int) -> float:
    """Issue 36's goal for a module of ``n`` kernels served from a bundle layer, as a ratio to
    the floor: 1.10 up to 100 kernels, 1.25 above (the goals are set at 100 and 1,000)."""
    return 1.10 if n <= 100 else 1.25

APP_CHILD = textwrap.dedent('''
    import time
    T_START = time.time()                  # the first statement: the interpreter has started
    import gc
    # The collector's work in every part (its time is inside the parts): (start, generation)
    # of each collection and the seconds each took, and whether it ran in the loop.
    GC = {"seconds": 0.0, "full": 0, "loop_seconds": 0.0, "loop_full": 0, "in_loop": False}
    def _gc_timer(phase, info, now=time.perf_counter, gc_state=GC, since=[0.0]):
        if phase == "start":
            since[0] = now()
            return
        spent = now() - since[0]
        full = info["generation"] == 2
        gc_state["seconds"] += spent
        gc_state["full"] += full
        if gc_state["in_loop"]:
            gc_state["loop_seconds"] += spent
            gc_state["loop_full"] += full
    gc.callbacks.append(_gc_timer)
    import contextlib, importlib, json, os, sys
    mode, role, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    fake = opts["fake"]
    hook = "kcache._hook" in sys.modules   # imported by kcache-hook.pth when KCACHE_ENABLE is set
    if mode in ("kcache", "layer") and not hook:
        import kcache._hook                 # that line's work (a --target install runs no .pth)
    import numpy as np
    from numba import cuda
    if mode == "floor":
        # The rebuild alone: kcache's numba-cuda rebuild (dispatcher/frontends/numba_cuda/rebuild.py) loaded
        # by itself, not the kcache.dispatcher package, whose imports are a cache's cost.
        import importlib.util
        import msgpack
        import types as _types
        from kcache.arch import full_cc as floor_full_cc
        found = importlib.util.find_spec("kcache.dispatcher")   # imports kcache, not this one
        bridge = os.path.join(found.submodule_search_locations[0], "frontends", "numba_cuda")
        if os.path.isdir(bridge):  # the bridge's modules as a package of their own
            floor_pkg = _types.ModuleType("bench_floor_nc")
            floor_pkg.__path__ = [bridge]
            sys.modules["bench_floor_nc"] = floor_pkg
            compat = importlib.import_module("bench_floor_nc.rebuild")
        else:  # a baseline before the bridge package: its one module
            where = os.path.join(found.submodule_search_locations[0], "_compat.py")
            spec = importlib.util.spec_from_file_location("bench_floor_compat", where)
            compat = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(compat)
    T_IMPORTS = time.time()
    module = importlib.import_module(opts["module"])
    kernels = module.KERNELS[opts["part"]::opts["parts"]]
    T_DEFS = time.time()

    if role == "fill" and mode == "kcache":  # the cache filled ahead of time, no launch
        from kcache.dispatcher import compile_for_report
        cc = (9, 0) if fake else tuple(cuda.get_current_device().compute_capability)
        done = [r for k in kernels for r in compile_for_report(k, opts["signature"], cc=[cc])]
        print(json.dumps({"dispatcher": type(kernels[0]).__name__, "compiled": sum(
            not r.cached for r in done), "compile_seconds": [r.compile_seconds for r in done
                                                              if not r.cached]}))
        sys.exit(0)

    stack = contextlib.ExitStack()
    if fake:                               # no GPU: compile for cc 9.0, "launch" = compile
        from kcache.dispatcher import _compat
        stack.enter_context(_compat.offline_target((9, 0)))
        # where current_cc is defined (the bridge's signatures module; a baseline's _compat)
        _cc_home = sys.modules[_compat.current_cc.__module__]
        _cc_home.current_cc = lambda: (9, 0)
        def bind(self):
            self._codelibrary.get_cubin()
        _compat.Kernel.bind = bind
        from numba.cuda.codegen import JITCUDACodegen   # numba-cuda's cache index asks the device
        JITCUDACodegen.magic_tuple = lambda self: ((13, 0), (9, 0))
        cc = (9, 0)
        to_device, sync = (lambda a: a), (lambda: None)
    else:
        cuda.current_context()
        cc = tuple(cuda.get_current_device().compute_capability)
        to_device, sync = cuda.to_device, cuda.synchronize
    n = 1 << 16
    x, out = to_device(np.ones(n, np.float32)), to_device(np.zeros(n, np.float32))
    sync()

    # Timers: the lookup (dispatcher.compile, entered on a dispatcher's first call) and the
    # module load (CUDACodeLibrary.get_cufunc: its first call per library loads the cubin;
    # within a lookup for kcache and no cache, within the launch for numba-cuda's cache).
    from numba.cuda.codegen import CUDACodeLibrary
    acc = {"lookups": 0.0, "loads": 0.0, "loads_in_lookups": 0.0}
    depth = [0]
    def timed_compile(real):
        def compile(self, *a, **k):
            depth[0] += 1
            t = time.perf_counter()
            try:
                return real(self, *a, **k)
            finally:
                acc["lookups"] += time.perf_counter() - t
                depth[0] -= 1
        return compile
    cls = type(kernels[0])
    cls.compile = timed_compile(cls.compile)
    real_cufunc = CUDACodeLibrary.get_cufunc
    def get_cufunc(self):
        t = time.perf_counter()
        try:
            return real_cufunc(self)
        finally:
            dt = time.perf_counter() - t
            acc["loads"] += dt
            if depth[0]:
                acc["loads_in_lookups"] += dt
    CUDACodeLibrary.get_cufunc = get_cufunc
    T_CONTEXT = time.time()

    if mode == "floor":                    # every overload from the one file: no key, no store
        import numba
        with open(opts["cubins"], "rb") as f:
            table = msgpack.unpackb(f.read())
        argtypes = (numba.types.Array(numba.from_dtype(np.float32), 1, "C"),) * 2
        full = floor_full_cc(cc)
        for k in kernels:
            state = table[f"{k.py_func.__module__}:{k.py_func.__qualname__}"]
            kernel = compat.rebuild_kernel(state, argtypes, full,
                                           extensions=k.targetoptions.get("extensions"),
                                           exceptions={}, py_func=k.py_func)
            k.add_overload(kernel, argtypes)
    T_LOOP = time.time()
    GC["in_loop"] = True
    for k in kernels:
        if fake:
            k.compile(tuple(k.typeof_pyval(a) for a in (x, out)))
        else:
            k[n // 128, 128](x, out)
            sync()
    T_DONE = time.time()
    GC["in_loop"] = False

    def compiles(d):
        if hasattr(d.stats, "compile_seconds"):      # a kcache dispatcher
            return d.stats.compiles
        return sum(d.stats.cache_misses.values())    # numba-cuda compiles on each miss
    spawn = float(os.environ["BENCH_SPAWN"])
    in_loop = acc["lookups"] + acc["loads"] - acc["loads_in_lookups"]
    kc = sys.modules.get("kcache")
    served = {}                            # kcache's modes: what served the kernels, and how fast
    if mode in ("kcache", "layer"):
        from kcache.dispatcher import dispatcher as kcache_dispatcher, process_counts
        counts = process_counts()
        served["counts"] = {c: counts.get(c, 0) for c in ("hits", "misses", "compiles")}
        # each lookup's own part and phases (ms): [own, key, read, rebuild, load, hit]
        if hasattr(kcache_dispatcher, "own_phases"):  # not in a baseline before it
            served["own"] = [[round(o[f], 4) for f in ("own", "key", "read", "rebuild", "load")]
                             + [o["hit"]] for o in kcache_dispatcher.own_phases()]
        from kcache.dispatcher.process import STATE   # the store the kernels were served from
        store = STATE.default_store or None
        served["layers"] = [str(r) for r in getattr(store, "readonly_roots", ())]
        served["untrusted"] = dict(getattr(store, "untrusted", {}) or {})
    print(json.dumps({
        **served,
        "dispatcher": type(kernels[0]).__name__, "hook_from_pth": hook,
        "kcache_file": getattr(kc, "__file__", None),
        "parts": {"interpreter": T_START - spawn, "imports": T_IMPORTS - T_START,
                  "definitions": T_DEFS - T_IMPORTS, "context": T_CONTEXT - T_DEFS,
                  "lookups": (T_LOOP - T_CONTEXT) + acc["lookups"] - acc["loads_in_lookups"],
                  "loads": acc["loads"], "launches": (T_DONE - T_LOOP) - in_loop},
        "compiles": sum(compiles(d) for d in kernels),
        "overloads": sum(len(d.overloads) for d in kernels), "kernels": len(kernels),
        "gc": {k: v for k, v in GC.items() if k != "in_loop"},
        "ready_s": T_DONE - spawn}))
''')


def app_child(b: Bench, mode: str, role: str, cache: Path, module: str,
              layer: Path | None = None, **extra) -> dict:
    """One app process: ``role`` "app" (timed; every kernel of ``module``) or "fill" (the
    kernels ``part::parts``: compile_for for kcache, a launch for numba-cuda). Mode "layer"
    is kcache with ``KCACHE_READONLY_DIRS=layer`` (a bundle file) and ``cache`` for its
    writable root."""
    # the floor and no cache declare their kernels without a cache (BENCH_CACHE=0); the
    # layer is the transparent switch as kcache's mode, with the bundle named as a layer
    env = dict(b.env({"floor": "none", "layer": "kcache"}.get(mode, mode), cache),
               BENCH_SPAWN=repr(time.time()))
    if mode == "layer":
        env["KCACHE_READONLY_DIRS"] = str(layer)
    opts = json.dumps({"fake": b.opts.fake, "module": module, "part": 0, "parts": 1,
                       "signature": APP_SIGNATURE, **extra})
    proc = subprocess.Popen([sys.executable, str(b.work / "app_child.py"), mode, role, opts],
                            cwd=b.work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    return proc if extra.get("parts", 1) > 1 else b.finish(proc, mode)


def fill_jobs() -> int:
    """Processes that fill a cache together (on disjoint kernels): half the cores, up to 8."""
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def app_fill(b: Bench, mode: str, cache: Path, module: str, n: int) -> list[dict]:
    """Fill ``mode``'s cache with every kernel of ``module``, in parallel processes."""
    parts = min(fill_jobs(), n)
    if parts == 1:
        return [app_child(b, mode, "fill", cache, module)]
    procs = [app_child(b, mode, "fill", cache, module, part=i, parts=parts) for i in range(parts)]
    done, errors = [], []
    for proc in procs:  # every process waited for: none may outlive the section's folder
        try:
            done.append(b.finish(proc, mode))
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]
    return done


def write_cubins(cache: Path, module: str, n: int, path: Path) -> None:
    """The floor's one file: every kernel's cubin and the plain fields a rebuild reads
    (``kcache.artifacts.KERNEL_FIELDS``), from the kcache entries that ``compile_for`` wrote,
    as one msgpack map {"module:qualname": state}."""
    import msgpack
    from kcache import Store
    from kcache.entry.artifacts import KERNEL_FIELDS
    store = Store(cache / "kcache")
    table = {}
    for info in store.entries():
        entry = store.get(info.key)
        if entry is None or entry.meta.get("marker") or not info.kernel.startswith(module + ":"):
            continue
        if entry.meta.get("exceptions"):
            raise RuntimeError(f"{info.kernel}: the floor rebuilds kernels without exceptions")
        table[info.kernel] = {"cubin": entry.artifacts["cubin"],
                              **{f: entry.meta[f] for f in KERNEL_FIELDS}}
    if len(table) != n:
        raise RuntimeError(f"the kcache fill left {len(table)} entries of {module}, not {n}")
    path.write_bytes(msgpack.packb(table, use_bin_type=True))


def kcache_command(b: Bench) -> list[str]:
    """The ``kcache`` command of the install being measured: the wheel install's console
    script (``SITE/bin/kcache``, as a user runs it), else ``python -m kcache``."""
    site = json.loads(os.environ.get("BENCH_INSTALL", "{}")).get("site")
    script = Path(site, "bin", "kcache") if site else None
    if script is not None and script.is_file():
        return [sys.executable, str(script)]  # its #! line names this interpreter anyway
    return [sys.executable, "-m", "kcache"]


def kcache_cli(b: Bench, cache: Path, *args: str, layer: Path | None = None) -> dict:
    """Run ``kcache ARGS --json`` on ``cache``'s root (and ``layer`` as a read-only layer);
    its JSON document. Run from the work folder, outside the checkout (whose ./kcache would
    shadow the install)."""
    env = b.env("kcache", cache)
    env.pop("KCACHE_ENABLE", None)       # the command, not a program with kernels
    if layer is not None:
        env["KCACHE_READONLY_DIRS"] = str(layer)
    done = subprocess.run([*kcache_command(b), *args, "--json"], cwd=b.work, env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"kcache {' '.join(args)} exited {done.returncode}: "
                           f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return json.loads(done.stdout)


class LayerError(RuntimeError):
    """The layer mode failed (the export, or a run not served from the layer): its figures
    are left out and the section reports the error; the other modes' figures stand."""


def export_layer(b: Bench, cache: Path, bundle: Path, n: int) -> str:
    """``kcache export`` the filled directory root ``cache`` into ``bundle`` (the CLI of the
    install being measured, as a user would); a note saying what it wrote. LayerError when
    the command fails or writes fewer entries than kernels."""
    t = time.perf_counter()
    try:
        rep = kcache_cli(b, cache, "export", str(bundle))
    except RuntimeError as exc:
        raise LayerError(str(exc)) from None
    took = time.perf_counter() - t
    bundle.chmod(0o644)  # as docs/containers.md's image does: whatever the umask, a layer's mode
    if rep.get("entries", 0) < n:
        raise LayerError(f"kcache export wrote {rep.get('entries')} entries of {n} kernels")
    how = ", ".join(filter(None, (
        f"format {rep['format']}" if rep.get("format") is not None else None,
        "zstd" if rep.get("compressed") else "uncompressed",
        "signed" if rep.get("signed") else "unsigned")))
    return (f"{n} kernels: the bundle layer written by `kcache export` in {took:.1f} s: "
            f"{rep['entries']} entries, {rep['entry_bytes']:,} bytes of entries in a "
            f"{rep['bundle_bytes']:,}-byte file ({how})")


def layer_memo(b: Bench, module: str, n: int, bundle: Path) -> Path:
    """A container's first process, untimed: served from the bundle layer, it leaves the code
    analyses of the kernels' keys in its writable root (docs/keys.md). Returns their folder."""
    cache = b.new_cache()
    (cache / "kcache").mkdir(parents=True, mode=0o700)
    try:
        app_child(b, "layer", "app", cache, module, layer=bundle)
    except RuntimeError as exc:
        raise LayerError(f"layer, {n} kernels: {exc}") from None
    return cache / "kcache" / "v1" / "code"


def layer_run(b: Bench, module: str, n: int, bundle: Path, memo: Path | None = None) -> dict:
    """One timed run served from the bundle layer: a new writable root without an entry (so
    every kernel can only come from the layer), then checked (check_layer_run). ``memo``: a
    root's ``v1/code`` folder, copied into the new root first: the code analyses an earlier
    process of the container left there (docs/keys.md), as the directory root's fill left
    them in kcache's root."""
    cache = b.new_cache()
    (cache / "kcache").mkdir(parents=True, mode=0o700)
    if memo is not None and memo.is_dir():
        shutil.copytree(memo, cache / "kcache" / "v1" / "code")
    try:  # a process that fails on a layer (a crash, kernels not kcache's) is the layer's
        doc = app_child(b, "layer", "app", cache, module, layer=bundle)
    except RuntimeError as exc:
        raise LayerError(f"layer, {n} kernels: {exc}") from None
    check_layer_run(doc, None, cache / "kcache", n)    # the process's own counters first
    try:
        stats = kcache_cli(b, cache, "stats", layer=bundle)
    except RuntimeError as exc:
        raise LayerError(f"layer, {n} kernels: {exc}") from None
    check_layer_run(doc, stats, cache / "kcache", n)
    return doc


def check_layer_run(doc: dict, stats: dict | None, root: Path, n: int) -> None:
    """What a layer figure claims: every kernel was a hit (the process's counters, and the
    writable root's counters as ``kcache stats`` reads them after the process, when
    ``stats`` is given), nothing was compiled, and the writable root, empty at start, holds
    no entry: so the hits came from the bundle layer. LayerError naming what was seen
    otherwise."""
    counts = doc.get("counts") or {}
    entries = sorted(p.name for p in root.rglob("*.kce"))
    seen = {"hits": counts.get("hits"), "misses": counts.get("misses"),
            "compiles": counts.get("compiles"), "entries in the writable root": len(entries)}
    want = {"hits": n, "misses": 0, "compiles": 0, "entries in the writable root": 0}
    if stats is not None:
        seen.update({f"stats {c}": stats.get(c) for c in ("hits", "misses", "compiles")})
        want.update({"stats hits": n, "stats misses": 0, "stats compiles": 0})
    own = doc.get("own") or []
    if seen == want and doc["compiles"] == 0 and len(own) == n and all(o[-1] for o in own):
        return
    why = "; ".join(f"{k} {v}" for k, v in (doc.get("untrusted") or {}).items())
    raise LayerError(
        f"layer, {n} kernels: not every kernel was served from the bundle layer "
        f"{', '.join(doc.get('layers') or []) or '(no layer in the store)'}: "
        + ", ".join(f"{k} {seen[k]} (want {want[k]})" for k in want if seen[k] != want[k])
        + (f"; lookups timed {len(own)}, hits among them {sum(bool(o[-1]) for o in own)}"
           if len(own) != n or not all(o[-1] for o in own) else "")
        + (f"; layers refused: {why}" if why else "")
        + "".join(f"; the process said: {w}" for w in doc.get("warnings") or []))


def app(b: Bench) -> tuple[list[dict], list[str], str | None]:
    """The application section: (figures, notes, error). The error is the layer mode's
    (LayerError): its figures are then left out, the other modes' kept."""
    (b.work / "app_child.py").write_text(APP_CHILD)
    runs, notes, layer_error = b.opts.runs, [], None
    site = json.loads(os.environ.get("BENCH_INSTALL", "{}")).get("site")
    raw = {}           # (mode, n) -> [child docs]
    compile_s = []     # seconds per kernel compile, from the kcache fills
    sizes = sorted(set(b.opts.app_sizes))
    for n in sizes:
        module = f"bench_app{n}"
        (b.work / f"{module}.py").write_text(app_module(n))
        caches = {m: b.new_cache() for m in ("kcache", "numba")}
        caches["none"] = caches["floor"] = b.new_cache()   # no cache: nothing is read
        t = time.perf_counter()
        filled = app_fill(b, "kcache", caches["kcache"], module, n)
        compile_s += [s for d in filled for s in d["compile_seconds"]]
        cubins = b.work / f"cubins{n}.msgpack"
        write_cubins(caches["kcache"], module, n, cubins)
        t_kcache = time.perf_counter() - t
        bundle = b.work / f"layer{n}.kcb"     # the directory root warm: one file of it
        t = time.perf_counter()
        app_fill(b, "numba", caches["numba"], module, n)
        notes.append(f"{n} kernels: kcache's cache filled by compile_for in {t_kcache:.0f} s, "
                     f"numba-cuda's by a launch of each kernel in {time.perf_counter() - t:.0f} s "
                     f"({min(fill_jobs(), n)} processes at a time)")
        memo = None
        try:
            if layer_error is None:
                notes.append(export_layer(b, caches["kcache"], bundle, n))
                memo = layer_memo(b, module, n, bundle)
        except LayerError as exc:
            layer_error = str(exc)
        for _ in range(runs):              # modes alternate: drift meets every mode alike
            for mode in ("kcache", "layer", "numba", "floor"):
                if mode != "layer":
                    raw.setdefault((mode, n), []).append(
                        app_child(b, mode, "app", caches[mode], module, cubins=str(cubins)))
                    continue
                if layer_error is not None:
                    continue
                try:
                    raw.setdefault((mode, n), []).append(layer_run(b, module, n, bundle, memo))
                except LayerError as exc:  # no layer figure from here on, at any size
                    layer_error = str(exc)
    if layer_error is not None:
        for n in sizes:
            raw.pop(("layer", n), None)
    per_kernel = statistics.median(compile_s) if compile_s else 0.5
    for n in sizes:                        # the no-cache runs last: the budget drops them first
        module = f"bench_app{n}"
        want = 1 if n >= NONE_ONCE_FROM else runs
        start_s = max(d["ready_s"] for d in raw[("kcache", n)])
        estimate = start_s + n * per_kernel
        for i in range(want):
            elapsed = time.perf_counter() - b.part_start
            if b.opts.budget > 0 and elapsed + estimate > b.opts.budget:
                notes.append(f"no cache, {n} kernels: {want - i} of {want} runs left out to stay "
                             f"within --budget {b.opts.budget:.0f} s (estimated {estimate:.0f} s "
                             f"each, {elapsed:.0f} s spent)")
                break
            raw.setdefault(("none", n), []).append(
                app_child(b, "none", "app", b.new_cache(), module))
    check_app_runs(raw, site)
    return app_figures(raw, sizes), notes, layer_error


def check_app_runs(raw: dict, site: str | None) -> None:
    """What the figures claim: warm and floor runs compiled nothing, every kernel ran once,
    kcache came from the install being measured."""
    for (mode, n), docs in raw.items():
        for d in docs:
            if d["kernels"] != n or d["overloads"] != n:
                raise RuntimeError(f"{mode}, {n} kernels: {d['overloads']} overloads in "
                                   f"{d['kernels']} kernels")
            if mode != "none" and d["compiles"]:
                raise RuntimeError(f"{mode}, {n} kernels: {d['compiles']} compiles on a "
                                   "filled cache")
            if mode in ("kcache", "layer") and site and \
                    not (d["kcache_file"] or "").startswith(site):
                raise RuntimeError(f"kcache was imported from {d['kcache_file']}, not {site}")


def app_figures(raw: dict, sizes: list[int]) -> list[dict]:
    out = []
    for n in sizes:
        floor = raw.get(("floor", n))
        floor_med = statistics.median(d["ready_s"] for d in floor) if floor else None
        for mode in APP_MODES:
            docs = raw.get((mode, n))
            if not docs:
                continue
            ready = [d["ready_s"] for d in docs]
            vs = statistics.median(ready) / floor_med if floor_med else None
            # issue 36's goals on the layer supersede issue 19's on the directory root
            limit = layer_goal(n) if mode == "layer" else None
            goal = f"<= {limit:.2f} x floor (issue 36)" if limit else None
            what = "kcache, every kernel from a bundle layer" if mode == "layer" else mode
            out.append(figure(f"app_ready.{mode}.{n}", "app",
                              f"{what}, {n} kernels: process start to all launched and done",
                              ready, "s", mode=mode, goal=goal,
                              met=(vs <= limit) if goal and vs is not None else None, kernels=n,
                              compiles=statistics.median(d["compiles"] for d in docs),
                              vs_floor=vs, floor_median=floor_med))
            for part in APP_PARTS:
                out.append(figure(f"app_phase.{part}.{mode}.{n}", "app",
                                  f"{mode}, {n} kernels: {part}",
                                  [1e3 * d["parts"][part] for d in docs], "ms", mode=mode,
                                  kernels=n, part=part))
            if all("gc" in d for d in docs):  # runs from before 2026-12-03 have none
                out.append(figure(f"app_gc.{mode}.{n}", "app", f"{mode}, {n} kernels: the "
                                  "garbage collector's time, process start to done (within "
                                  "the parts)", [1e3 * d["gc"]["seconds"] for d in docs], "ms",
                                  mode=mode, kernels=n,
                                  loop_ms=[1e3 * d["gc"]["loop_seconds"] for d in docs],
                                  full=[d["gc"]["full"] for d in docs],
                                  loop_full=[d["gc"]["loop_full"] for d in docs]))
    return out + app_own_figures(raw, sizes)


def app_own_figures(raw: dict, sizes: list[int]) -> list[dict]:
    """kcache's own part of each further kernel's hit (every lookup of a process but its
    first), timed inside the call (``kcache.dispatcher.own_phases``, as ``own_further.kcache``
    is), over the kernels of the app runs at OWN_LAYER_SIZE kernels (else the largest size):
    from the bundle layer (``own_further.layer``, issue 36's goal) and, beside it, from the
    directory root in the same run (``own_further_app.kcache``). Values are per kernel; the
    phases (key, read, rebuild, load) in ``extra`` are each run's medians."""
    n = OWN_LAYER_SIZE if OWN_LAYER_SIZE in sizes else max(sizes)
    out = []
    for mode, fid in (("layer", "own_further.layer"), ("kcache", "own_further_app.kcache")):
        runs = [d["own"][1:] for d in raw.get((mode, n), []) if d.get("own")]
        if not runs or not all(o[-1] for own in runs for o in own):  # a miss is no hit's time
            continue
        values = [o[0] for own in runs for o in own]
        phases = {p: [statistics.median(o[i] for o in own) for own in runs if own]
                  for i, p in enumerate(("key", "read", "rebuild", "load"), 1)}
        where = "a bundle layer" if mode == "layer" else "the directory root"
        goal = f"<= {OWN_LAYER_GOAL} ms (issue 36)" if mode == "layer" else None
        out.append(figure(fid, "app", f"kcache's own part of each further kernel's hit from "
                          f"{where}, {n} kernels (timed inside the call)", values, "ms",
                          mode=mode, goal=goal,
                          met=(statistics.median(values) <= OWN_LAYER_GOAL) if goal else None,
                          kernels=n, runs=len(runs), **phases))
    return out


def refused(opts) -> bool:
    """True (said on stderr) when there is no GPU to run on and ``--fake`` is not given."""
    if opts.fake:
        return False
    from numba import cuda
    if cuda.is_available():
        return False
    log("bench: no CUDA GPU here; run the GPU part on the GPU machine, or --fake to "
        "exercise it without one")
    return True


def run(opts, results: Results) -> int:
    """Run the GPU part into ``results``; return an exit status."""
    if refused(opts):
        return 2
    if opts.runs < MIN_RUNS and not opts.fake:
        log(f"bench: note: --runs {opts.runs} is below {MIN_RUNS}: figures need >= {MIN_RUNS} runs")
    start = time.perf_counter()
    chosen = [name for name in SECTIONS if not opts.sections or name in opts.sections]
    with tempfile.TemporaryDirectory(prefix="kcache-bench-gpu-") as tmp:
        b = Bench(opts, results, Path(tmp))
        b.part_start = start
        for name in chosen:
            t = time.perf_counter()
            notes = []
            try:
                error = None
                if name == "app":  # a failed layer mode leaves the other modes' figures
                    figures, notes, error = app(b)
                else:
                    figures = SECTIONS[name](b)
                if opts.fake:  # timings of a run without a GPU say nothing about a goal
                    for f in figures:
                        f["met"] = None
                results.add(*figures)
                results.section(name, time.perf_counter() - t, notes=notes, error=error)
                log(f"bench: gpu {name}: {time.perf_counter() - t:.1f} s"
                    + (f"; failed: {error}" if error else ""))
            except (Exception, SystemExit) as exc:  # keep what the other sections measured
                results.section(name, time.perf_counter() - t, error=f"{type(exc).__name__}: {exc}",
                                notes=notes)
                log(f"bench: gpu {name} failed: {exc}")
        results.save(complete=True)  # before the temp folder's (long) removal
    return 1 if any(s["error"] for name, s in results.doc["sections"].items()
                    if name in chosen) else 0


#: The sections, in the order they run (``--sections`` picks some).
SECTIONS = {"first_calls": first_calls, "fleet": fleet, "app": app}

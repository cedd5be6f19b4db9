"""Where a hit's time goes without a GPU (a diagnostic script, not a benchmark).

Usage: python bench/hit_phases_fake.py [RUNS] [--baseline DIR] [--cpu]

The GPU benchmark's five kernels (bench/gpu.py) through the fake-GPU flow of ``--fake``
(offline target, cc 9.0; binding builds the cubin): one process fills a cache, then RUNS
fresh processes (``KCACHE_ENABLE=1``) look every overload up, with the phases of
``KCacheDispatcher.compile`` wrapped and timed as bench/gpu.py's split processes do (key,
fingerprint, store read, rebuild). With ``--baseline DIR`` (a revision installed by
bench/baseline.py) its processes alternate with this tree's on the same cache; ``--cpu``
times with ``time.thread_time`` (CPU time of the thread: less disturbed by a loaded machine
than wall time). Prints the median of the first lookup / of each further one, in us.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu import KERNELS  # noqa: E402

CHILD = textwrap.dedent(r'''
    import contextlib, json, sys, time
    import kcache._hook                    # KCACHE_ENABLE=1, as the .pth line does
    import numpy as np
    from numba import cuda
    import bench_kernels as K
    from kcache.dispatcher import _compat, components, dispatcher as D
    from kcache.store import Store
    clock = time.thread_time if sys.argv[2] == "cpu" else time.perf_counter
    stack = contextlib.ExitStack()          # kept: the offline target lasts for the process
    stack.enter_context(_compat.offline_target((9, 0)))
    # where current_cc is defined (the bridge's signatures module; a baseline's _compat)
    _cc_home = sys.modules[_compat.current_cc.__module__]
    _cc_home.current_cc = lambda: (9, 0)
    _compat.Kernel.bind = lambda self: self._codelibrary.get_cubin()
    phases, current = {}, [None]

    def timed(owner, attr, label):
        real = getattr(owner, attr)
        def wrapper(*a, **k):
            t = clock()
            try:
                return real(*a, **k)
            finally:
                ph = phases.setdefault(current[0], {})
                ph[label] = ph.get(label, 0.0) + clock() - t
        setattr(owner, attr, wrapper)
    if sys.argv[1] == "measure":
        timed(D.KCacheDispatcher, "kcache_key", "key")
        timed(components, "fingerprint", "fingerprint")
        timed(Store, "get_or_create", "store read")
        timed(sys.modules[D.KCacheDispatcher.__module__], "entry_to_kernel", "rebuild")
    x, A, s = np.ones(256, np.float32), np.ones((64, 64), np.float32), np.zeros(1, np.float32)
    calls = [("axpy", K.axpy, (np.float32(2), x, x, x)), ("matmul", K.matmul, (A, A, A)),
             ("reduce_sum", K.reduce_sum, (x, s)), ("stencil", K.stencil, (x, x)),
             ("scale", K.scale, (x, np.float32(0.5)))]
    lookups = {}
    for name, d, args in calls:
        current[0] = name
        types = tuple(d.typeof_pyval(a) for a in args)
        t = clock()
        d.compile(types)
        lookups[name] = clock() - t
    print(json.dumps({"lookups": lookups, "phases": phases,
                      "hits": D.process_counts().get("hits", 0)}))
''')
LABELS = ("key", "fingerprint", "store read", "rebuild")


def main(argv):
    runs = int(argv[0]) if argv and argv[0].isdigit() else 11
    baseline = argv[argv.index("--baseline") + 1] if "--baseline" in argv else None
    how = "cpu" if "--cpu" in argv else "wall"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "bench_kernels.py").write_text(KERNELS)
        (work / "child.py").write_text(CHILD)
        env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.update(BENCH_CACHE="1", KCACHE_DIR=str(work / "cache"), KCACHE_ENABLE="1",
                   PYTHONPATH=str(work))
        envs = {"this tree": env}
        if baseline:
            envs["baseline"] = dict(env, PYTHONPATH=f"{baseline}{os.pathsep}{work}")

        def run(which, role):
            done = subprocess.run([sys.executable, "child.py", role, how], cwd=work,
                                  env=envs[which], capture_output=True, text=True, check=True)
            return json.loads(done.stdout.splitlines()[-1])
        for which in envs:
            run(which, "fill")
        docs = {which: [] for which in envs}
        for _ in range(runs):  # alternating, so a loaded machine meets both alike
            for which in envs:
                docs[which].append(run(which, "measure"))
        for which, ds in docs.items():
            assert all(d["hits"] == 5 for d in ds), "not every lookup was a hit"
            names = list(ds[0]["lookups"])

            def med(values):
                return f"{statistics.median(values) * 1e6:.0f}"
            row = [f"lookup {med([d['lookups'][names[0]] for d in ds])}/"
                   f"{med([d['lookups'][n] for d in ds for n in names[1:]])}"]
            for lab in LABELS:
                first = [d["phases"][names[0]].get(lab, 0.0) for d in ds]
                further = [d["phases"][n].get(lab, 0.0) for d in ds for n in names[1:]]
                row.append(f"{lab} {med(first)}/{med(further)}")
            print(f"{which} ({how}, us, first/further, median of {runs}): " + ", ".join(row))


if __name__ == "__main__":
    main(sys.argv[1:])

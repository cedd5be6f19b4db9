"""What ``KCACHE_ENABLE=1`` adds to a process's imports, timed inside fresh processes.

Each process imports ``numba.cuda``, then starts the clock and does what the one-line
``kcache-hook.pth`` does with ``KCACHE_ENABLE=1`` (``import kcache._hook``: with numba.cuda
imported, that is ``import kcache.dispatcher`` and ``install("cache")``), stops it, then times
the definition of one ``@cuda.jit(cache=True)`` kernel (kcache opens the store and imports
what a hit needs there). ``numba`` mode times that definition alone, without kcache. Used by
bench/cpu.py (section ``import``) and bench/gpu.py (section ``first_calls``).

Bytecode is compiled by a first, untimed process (PYTHONDONTWRITEBYTECODE removed), so every
timed process reads .pyc files, as an installed package does.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap

CHILD = textwrap.dedent('''
    import json, os, sys, time
    mode = sys.argv[1]
    import numba.cuda
    from numba import cuda
    t0 = time.perf_counter()
    if mode == "kcache":
        os.environ["KCACHE_ENABLE"] = "1"
        import kcache._hook              # numba.cuda is imported: installs at once
    t1 = time.perf_counter()

    @cuda.jit(cache=True)
    def k(a):
        a[0] = 1
    t2 = time.perf_counter()
    want = "KCacheDispatcher" if mode == "kcache" else "CUDADispatcher"
    assert type(k).__name__ == want, type(k)
    print(json.dumps({"import_ms": (t1 - t0) * 1e3, "define_ms": (t2 - t1) * 1e3,
                      "modules": sorted(m for m in sys.modules if m.startswith("kcache"))}))
''')


def env_for(cache: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # timed processes read bytecode
    env.update(KCACHE_DIR=os.path.join(cache, "kcache"), NUMBA_CACHE_DIR=os.path.join(cache, "numba"))
    return env


def measure(runs: int, modes=("kcache", "numba")) -> dict:
    """{mode: [doc, ...]} for ``modes`` ("kcache", "numba"): ``runs`` fresh processes per
    mode, alternating, after one untimed process per mode that writes the bytecode."""
    out = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="kcache-bench-import-") as tmp:
        script = os.path.join(tmp, "child.py")
        with open(script, "w") as f:
            f.write(CHILD)
        env = env_for(tmp)

        def one(mode):
            done = subprocess.run([sys.executable, script, mode], capture_output=True, text=True,
                                  env=env, cwd=tmp, timeout=300)
            if done.returncode != 0:
                raise RuntimeError(f"import child ({mode}) failed:\n{done.stderr[-3000:]}")
            return json.loads(done.stdout.strip().splitlines()[-1])

        for mode in out:
            one(mode)  # writes the bytecode
        for _ in range(runs):
            for mode in out:
                out[mode].append(one(mode))
    return out


if __name__ == "__main__":
    res = measure(int(sys.argv[1]) if len(sys.argv) > 1 else 9)
    for mode, docs in res.items():
        imp = sorted(d["import_ms"] for d in docs)
        dfn = sorted(d["define_ms"] for d in docs)
        print(f"{mode}: import {imp[len(imp) // 2]:.1f} ms ({imp[0]:.1f} - {imp[-1]:.1f}), "
              f"first definition {dfn[len(dfn) // 2]:.1f} ms ({dfn[0]:.1f} - {dfn[-1]:.1f})")

"""Helpers of the numba-cuda-mlir tests: kernel modules, a compiled cubin, child processes
that stand in for a GPU of a given cc (numba-cuda-mlir asks the device's cc through
``tools.get_gpu_compute_capability``, which answers ``tools._cached_cc`` once set: nothing
else of the compile needs a device)."""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

#: A kernel module: a device function in another module, a module constant, a global.
KERNELS = textwrap.dedent("""\
    from numba_cuda_mlir import cuda

    import mathbits

    SCALE = 2.0


    @cuda.jit
    def axpy(x, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = mathbits.twice(x[i]) * SCALE + mathbits.OFFSET


    @cuda.jit("void(float32[::1])")
    def eager(out):
        out[0] = 1.0
    """)
MATHBITS = textwrap.dedent("""\
    from numba_cuda_mlir import cuda

    OFFSET = 1.0


    @cuda.jit(device=True)
    def twice(x):
        return x + x
    """)
SIG = "void(float32[::1], float32[::1])"


def write(directory: Path, files: dict | None = None) -> Path:
    """Write the kernel modules (``kernels``, ``mathbits``, or ``files``) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, source in (files or {"kernels": KERNELS, "mathbits": MATHBITS}).items():
        (directory / f"{name}.py").write_text(source)
    return directory


#: What every child runs first: a stand-in for a GPU of cc CC (argv[1]), the modules' folder
#: on sys.path (argv[2]).
PRELUDE = textwrap.dedent("""\
    import json, os, sys
    cc = tuple(int(p) for p in sys.argv[1].split("."))
    if cc != (0, 0):
        import numba_cuda_mlir.tools as _tools
        _tools._cached_cc = cc  # as the device would answer
    sys.path.insert(0, sys.argv[2])
    """)


def run(script: str, directory: Path, root: Path, cc: str = "9.0", env: dict | None = None,
        cwd: Path | None = None) -> dict:
    """Run ``PRELUDE + script`` in a fresh interpreter with ``KCACHE_DIR=root``; the last
    line it prints is JSON, returned."""
    path = directory / "_child.py"
    path.write_text(PRELUDE + textwrap.dedent(script))
    full = dict(os.environ, KCACHE_DIR=str(root), PYTHONDONTWRITEBYTECODE="1")
    full.pop("KCACHE_ENABLE", None)
    full.update(env or {})
    proc = subprocess.run([sys.executable, str(path), cc, str(directory)], env=full,
                          cwd=str(cwd or directory), capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@functools.cache
def cubin() -> bytes:
    """A cubin numba-cuda-mlir compiled for sm_90 (without a GPU)."""
    from numba_cuda_mlir import cuda

    from kcache.dispatcher.frontends.numba_cuda_mlir import offline

    def one(a):
        a[0] = 1.0

    with offline.offline_target((9, 0)):
        return bytes(cuda.jit(one).compile("void(float32[::1])").metadata["cubin"])

"""GPU tests of numba-cuda-mlir kernels (marker ``gpu``; docs/mlir.md): served from the cache in
fresh processes, launched and checked against NumPy. Skipped with a reason without a GPU.

Each scenario runs in fresh processes sharing one cache root: the first compiles, the next
must load (hits, no compile) and compute the same results.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba_cuda_mlir")


def _gpu() -> bool:
    try:
        from cuda.bindings import driver
        err, = driver.cuInit(0)[:1]
        if int(err) != 0:
            return False
        err, count = driver.cuDeviceGetCount()
        return int(err) == 0 and count > 0
    except Exception:
        return False


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _gpu(), reason="needs a CUDA GPU and driver")]

KERNELS = textwrap.dedent("""\
    import numpy as np
    from numba_cuda_mlir import cuda

    import mathbits

    @cuda.jit(cache=True)
    def axpy(a, x, y, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = mathbits.fma(a, x[i], y[i])

    @cuda.jit(cache=True)
    def reduce_sum(x, out):
        i = cuda.grid(1)
        if i < x.size:
            cuda.atomic.add(out, 0, x[i])

    @cuda.jit(cache=True)
    def scale(a, s):
        i = cuda.grid(1)
        if i < a.size:
            a[i] *= s

    def run_all():
        n = 4096
        x = np.arange(n, dtype=np.float32)
        y = np.ones(n, dtype=np.float32)
        out = np.zeros(n, dtype=np.float32)
        axpy[(n + 255) // 256, 256](np.float32(2.0), x, y, out)
        assert np.allclose(out, 2 * x + 1)
        acc = np.zeros(1, dtype=np.float32)
        reduce_sum[(n + 255) // 256, 256](y, acc)
        assert acc[0] == n
        scale[(n + 255) // 256, 256](out, np.float32(0.5))
        assert np.allclose(out, x + 0.5)
        return {"axpy": axpy, "reduce_sum": reduce_sum, "scale": scale}
    """)
MATHBITS = textwrap.dedent("""\
    from numba_cuda_mlir import cuda

    @cuda.jit(device=True)
    def fma(a, x, y):
        return a * x + y
    """)
RUN = textwrap.dedent("""\
    import json
    import kernels
    import kcache.dispatcher
    disps = kernels.run_all()
    print(json.dumps({"rows": {n: [type(d).__name__, sum(d.stats.cache_hits.values()),
                                   d.stats.compiles] for n, d in disps.items()},
                      "counts": dict(kcache.dispatcher.process_counts())}))
    """)


def _write(tmp_path):
    (tmp_path / "kernels.py").write_text(KERNELS)
    (tmp_path / "mathbits.py").write_text(MATHBITS)
    (tmp_path / "run.py").write_text(RUN)


def _run(tmp_path, env_extra=None, stdin=None):
    env = dict(os.environ, KCACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
               NUMBA_CACHE_DIR=str(tmp_path / "own"))
    env.pop("KCACHE_ENABLE", None)
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, str(tmp_path / "run.py")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, input=stdin)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_kernels_launch_from_a_hit_in_a_fresh_process(tmp_path):
    _write(tmp_path)
    first = _run(tmp_path, {"KCACHE_ENABLE": "1"})
    second = _run(tmp_path, {"KCACHE_ENABLE": "1"})
    assert all(row == ["KCacheMLIRDispatcher", 0, 1] for row in first["rows"].values()), first
    assert all(row == ["KCacheMLIRDispatcher", 1, 0] for row in second["rows"].values()), second


def test_every_kernel_twice_under_kcache_enable_all(tmp_path):
    _write(tmp_path)
    (tmp_path / "kernels.py").write_text(KERNELS.replace("(cache=True)", ""))
    _run(tmp_path, {"KCACHE_ENABLE": "all"})
    second = _run(tmp_path, {"KCACHE_ENABLE": "all"})
    assert second["counts"].get("compiles", 0) == 0 and second["counts"].get("misses", 0) == 0


def test_warmed_without_a_gpu_then_launched(tmp_path):
    """Entries compile_for stored for the device's cc (no device used) are all hits."""
    _write(tmp_path)
    warm = textwrap.dedent("""\
        import json, kcache, kernels
        from numba_cuda_mlir.numba_cuda import get_current_device
        cc = tuple(get_current_device().compute_capability)
        sigs = {kernels.axpy: "void(float32, float32[::1], float32[::1], float32[::1])",
                kernels.reduce_sum: "void(float32[::1], float32[::1])",
                kernels.scale: "void(float32[::1], float32)"}
        for k, s in sigs.items():
            kcache.compile_for(k, s, cc=cc)
        print(json.dumps("ok"))
        """)
    (tmp_path / "warm.py").write_text(warm)
    env = dict(os.environ, KCACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
               KCACHE_ENABLE="1")
    subprocess.run([sys.executable, str(tmp_path / "warm.py")], env=env, cwd=tmp_path,
                   check=True, capture_output=True, timeout=600)
    got = _run(tmp_path, {"KCACHE_ENABLE": "1"})
    assert all(row[1:] == [1, 0] for row in got["rows"].values()), got


def test_processes_starting_together_compile_each_kernel_once(tmp_path):
    _write(tmp_path)
    env = dict(os.environ, KCACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
               KCACHE_ENABLE="1")
    procs = [subprocess.Popen([sys.executable, str(tmp_path / "run.py")], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(8)]
    outs = [p.communicate(timeout=900) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _o, err in outs]
    compiles = sum(json.loads(o.strip().splitlines()[-1])["counts"].get("compiles", 0)
                   for o, _e in outs)
    assert compiles == 3

"""Example kernels: each calls a device function of examples/mathbits.py or reads a
module-level constant, so the key covers code in two modules and a global value.

``SIGNATURES`` lists the signature each kernel is compiled for by ``compile_for`` (the main
job without a GPU) and launched with by ``examples/main.py``.
"""
import numpy as np
from numba import cuda

from examples import mathbits

SCALE = np.float32(2.5)
LIMIT = 10.0
BLOCK = 128


@cuda.jit(cache=True)
def scaled_add(x, y, out):
    """out = SCALE * x + y."""
    i = cuda.grid(1)
    if i < out.size:
        out[i] = mathbits.axpy(SCALE, x[i], y[i])


@cuda.jit(cache=True)
def clamp_square(a):
    """a = min(a*a, LIMIT) in place."""
    i = cuda.grid(1)
    if i < a.size:
        a[i] = mathbits.clamp(a[i] * a[i], 0.0, LIMIT)


@cuda.jit(cache=True)
def block_sum(x, partial):
    """partial[b] = sum of block b's BLOCK elements of x (shared-memory tree reduction)."""
    buf = cuda.shared.array(BLOCK, np.float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[t] = x[i] if i < x.size else np.float32(0)
    cuda.syncthreads()
    step = BLOCK // 2
    while step > 0:
        if t < step:
            buf[t] += buf[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = buf[0]


SIGNATURES = {
    scaled_add: ["void(float32[::1], float32[::1], float32[::1])"],
    clamp_square: ["void(float64[::1])"],
    block_sum: ["void(float32[::1], float32[::1])"],
}


def run_all(n=1 << 16):
    """Launch every kernel on fresh data and check the results against NumPy; returns
    {kernel name: dispatcher}. Raises AssertionError on a wrong result."""
    rng = np.random.default_rng(0)
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    out = np.zeros_like(x)
    blocks = (n + BLOCK - 1) // BLOCK
    scaled_add[blocks, BLOCK](x, y, out)
    np.testing.assert_allclose(out, SCALE * x + y, rtol=1e-6)

    a = rng.random(n) * 5
    expect = np.minimum(a * a, LIMIT)
    clamp_square[blocks, BLOCK](a)
    np.testing.assert_allclose(a, expect)

    partial = np.zeros(blocks, dtype=np.float32)
    block_sum[blocks, BLOCK](x, partial)
    np.testing.assert_allclose(partial, x.reshape(blocks, BLOCK).sum(axis=1), rtol=1e-5)
    return {"scaled_add": scaled_add, "clamp_square": clamp_square, "block_sum": block_sum}

"""Device functions used by examples/kernels.py (a second module on purpose: a change here
must change the key of every kernel that calls them)."""
from numba import cuda


@cuda.jit(device=True)
def axpy(a, x, y):
    """a * x + y for scalars."""
    return a * x + y


@cuda.jit(device=True)
def clamp(x, lo, hi):
    """x limited to [lo, hi]."""
    return min(max(x, lo), hi)

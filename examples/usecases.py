"""Launches of numba-cuda's own module-level test kernels (``cache_usecases``), for the main job.

``numba/cuda/tests/cudapy/cache_usecases.py`` holds the kernels numba-cuda's cache tests use;
``examples/cache_usecases.sigs`` lists the signatures ``kcache warm`` compiles for them.
:func:`cases` gives, for each line of that file, the kernel and host arguments of one launch
with exactly those argument types (so a process that launches them computes the warmed
keys); :func:`launch_all` launches each on the GPU and checks its result.

``cache_usecases`` is imported inside the functions, not here: ``kcache warm examples`` imports
this module, and ``cache_usecases`` needs the ``filecheck`` package (numba.cuda.testing
imports it), which the test extra installs but a plain ``.[cu13]`` install does not.
"""
import numpy as np

MODULE = "numba.cuda.tests.cudapy.cache_usecases"


def usecases():
    """The ``cache_usecases`` module. Raises ImportError when it cannot be imported (e.g.
    ``filecheck`` is not installed)."""
    from numba.cuda.tests.cudapy import cache_usecases
    return cache_usecases


def cases():
    """``[(name, kernel, args, expected, result)]``: one launch per signature of
    examples/cache_usecases.sigs. ``args`` are host arguments (0-d arrays, record arrays,
    Python ints) whose numba types are that signature; after a launch ``result()`` returns
    what the kernel wrote, to compare with ``expected`` (None: nothing to check)."""
    cu = usecases()
    x, y = np.array(2.0, np.float64), np.array(3.0, np.float64)  # 0-d float64 arrays

    def f64_case(name, kernel, expected, n_in=2):
        r = np.zeros((), np.float64)
        return (name, kernel, (r, x.copy(), y.copy())[:1 + n_in], expected,
                lambda: float(r[()]))

    def record_case(name, arr):
        r = np.zeros((), arr.dtype)
        return (name, cu.record_return, (r, arr, 1), (2, 43.5), lambda: tuple(r[()].tolist()))

    i_out, i_in = np.zeros((), np.int64), np.array(7, np.int64)
    return [
        f64_case("add_usecase_kernel", cu.add_usecase_kernel, 2.0 + 3.0 + cu.Z),
        f64_case("add_nocache_usecase_kernel", cu.add_nocache_usecase_kernel, 2.0 + 3.0 + cu.Z),
        # inner(-y, x) = -y + x + Z
        f64_case("outer_kernel", cu.outer_kernel, -3.0 + 2.0 + cu.Z),
        f64_case("outer_uncached_kernel", cu.outer_uncached_kernel, -3.0 + 2.0 + cu.Z),
        record_case("record_return (packed)", cu.packed_arr),
        record_case("record_return (aligned)", cu.aligned_arr),
        # the module attribute is the second definition: x + 6
        f64_case("ambiguous_function", cu.ambiguous_function, 2.0 + 6, n_in=1),
        ("many_locals", cu.many_locals, (), None, lambda: None),
        ("simple_usecase_kernel", cu.simple_usecase_kernel, (i_out, i_in), 7,
         lambda: int(i_out[()])),
    ]


def launch_all() -> dict:
    """Launch every case on one thread of the GPU and check what it wrote; returns
    ``{case name: kernel dispatcher}``. Raises AssertionError on a wrong result, ImportError
    as :func:`usecases`."""
    launched = {}
    for name, kernel, args, expected, result in cases():
        kernel[1, 1](*args)
        if expected is not None:
            got = result()
            assert got == expected, f"{name}: got {got!r}, expected {expected!r}"
        launched[name] = kernel
    return launched

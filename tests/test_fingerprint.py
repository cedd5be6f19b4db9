"""fingerprint(): part names, content encoding, caching that never goes stale."""

import math
import sys

import numpy as np
import pytest

from kcache.dispatcher import fingerprint as _fingerprint
from kcache.dispatcher.fingerprint import Fingerprint, Uncacheable

from fixtures_keys import import_from, write_modules

cuda = pytest.importorskip("numba.cuda")

from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND  # noqa: E402

REGISTRIES = FRONTEND.registries()


def fingerprint(py_func):
    return _fingerprint.fingerprint(py_func, REGISTRIES)


def value_digest(value, where="value"):
    return _fingerprint.value_digest(value, where, registries=REGISTRIES)

pytestmark = pytest.mark.compat  # runs in every leg of tests/compat/run.sh (docs/compat.md)

LIMIT = 3


def plain_helper(x):
    return x + LIMIT


def test_part_names():
    k = 2.0

    @cuda.jit(device=True)
    def dev(x):
        return x * k

    def f(out, a, scale=1.5, *, bias=0.0):
        out[0] = dev(a[0]) * scale + bias + math.pi + LIMIT + plain_helper(k)

    fp = fingerprint(f)
    assert isinstance(fp, Fingerprint) and len(fp.digest) == 64
    assert set(fp.parts) == {
        "code", "closure:0", "closure:1", "default:scale", "default:bias", "attr:math.pi",
        "global:LIMIT", f"dep:{__name__}.plain_helper",
    }
    assert all(len(v) == 32 for v in fp.parts.values())
    assert fp.opaque == []


def test_a_first_fingerprint_keeps_no_analysis_of_its_code():
    # Most functions are fingerprinted once (a kernel's first lookup): neither the result nor
    # its code's analysis is kept then; the second fingerprint keeps both, with the same digest.
    from kcache.dispatcher.process import STATE

    def f(out):
        out[0] = LIMIT

    first = fingerprint(f)
    assert f.__code__ not in STATE.code_info
    second = fingerprint(f)
    assert f.__code__ in STATE.code_info
    assert second.digest == first.digest and second.parts == first.parts


def test_dispatcher_and_py_func_agree():
    @cuda.jit
    def kern(out):
        out[0] = LIMIT

    assert fingerprint(kern) == fingerprint(kern.py_func)


def test_rejects_non_functions():
    for bad in (42, len, "f", np.add):
        with pytest.raises(TypeError, match="Python function"):
            fingerprint(bad)


def test_library_functions_are_identified_by_name_not_walked():
    def f(out, a):
        out[0] = np.sqrt(a[0]) + math.sqrt(a[1]) + cuda.grid(1)

    fp = fingerprint(f)
    assert {"attr:numpy.sqrt", "attr:math.sqrt", "attr:numba.cuda.grid"} <= set(fp.parts)
    assert not any(p.startswith("dep:") for p in fp.parts)


def test_value_encoding_distinguishes_types_and_is_stable():
    values = [1, 1.0, True, "1", b"1", (1,), [1], np.int32(1), np.float32(1),
              np.array([1], dtype=np.int32), np.dtype("i4"), None, 1 + 0j, 2**70]
    digests = [value_digest(v) for v in values]
    assert len(set(digests)) == len(values)
    assert digests == [value_digest(v) for v in values]
    assert value_digest({"b": 1, "a": 2}) == value_digest({"a": 2, "b": 1})
    assert value_digest(frozenset({"x", "y", "z"})) == value_digest(frozenset({"z", "y", "x"}))


def test_non_contiguous_array_hashes_its_values():
    a = np.arange(10.0)
    assert value_digest(a[::2]) == value_digest(np.ascontiguousarray(a[::2]))
    assert value_digest(a[::2]) != value_digest(a[1::2])


def test_device_array_in_a_container_is_uncacheable():
    class Dev:
        __cuda_array_interface__ = {}

    with pytest.raises(Uncacheable, match="device array"):
        value_digest((1, Dev()), "global ARRS")


def test_numpy_functions_captured_by_a_kernel_are_told_apart():
    # numpy's functions are _ArrayFunctionDispatcher objects, not Python functions: they were
    # identified by their type only, so a kernel made for np.min and one for np.max had one
    # key and one was served for the other (numba-cuda-mlir's suite on the H200: max(...)
    # gave the min). A library's object its module names is identified by that name.
    np = pytest.importorskip("numpy")

    def make(func):
        def kernel(out, case):
            out[0] = func(case)
        return kernel

    fps = [fingerprint(make(f)) for f in (np.min, np.max, np.nanmax, np.min)]
    assert len({fp.digest for fp in fps[:3]}) == 3
    assert fps[0].digest == fps[3].digest
    assert all(fp.opaque == [] for fp in fps)


def test_opaque_repr_with_address_is_not_used():
    class Thing:
        pass

    def f():
        return THING  # noqa: F821 - resolved through globals below

    g = {"THING": Thing(), "__builtins__": __builtins__}
    f1 = type(f)(f.__code__, g)
    g2 = {"THING": Thing(), "__builtins__": __builtins__}
    f2 = type(f)(f.__code__, g2)
    fp1, fp2 = fingerprint(f1), fingerprint(f2)
    assert fp1.digest == fp2.digest  # identity by type, not by id()
    assert len(fp1.opaque) == 1 and "type only" in fp1.opaque[0]


def test_warm_call_returns_cached_result_and_sees_rebinding(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    d = write_modules(tmp_path, {"m_cache": """
        from numba import cuda
        import math
        N = 4

        @cuda.jit(device=True)
        def dev(x):
            return x + N

        @cuda.jit
        def kern(out):
            out[0] = dev(math.e)
    """})
    try:
        mod = import_from(d, "m_cache")
        first = fingerprint(mod.kern)
        # A function's first fingerprint is not remembered (most kernels have one lookup);
        # the second is, and is reused while nothing it read has changed.
        second = fingerprint(mod.kern)
        assert second == first and second is not first
        assert fingerprint(mod.kern) is second
        mod.N = 5  # a global of the *dependency* rebound
        assert fingerprint(mod.kern).digest != first.digest
        mod.N = 4
        assert fingerprint(mod.kern).digest == first.digest
        original = mod.dev
        mod.dev = cuda.jit(device=True)(lambda x: x)
        assert fingerprint(mod.kern).digest != first.digest
        mod.dev = original
        mod.dev.py_func.__code__ = (lambda x: x - 1).__code__
        assert fingerprint(mod.kern).digest != first.digest
    finally:
        sys.modules.pop("m_cache", None)


def test_module_attribute_chain_through_submodules():
    import os.path

    def f():
        return os.path.sep

    assert "attr:os.path.sep" in fingerprint(f).parts


def test_declare_device_name_and_signature_count():
    f32 = cuda.declare_device("kc_test_ext_a", "float32(float32)")
    g32 = cuda.declare_device("kc_test_ext_b", "float32(float32)")
    f64 = cuda.declare_device("kc_test_ext_a", "float64(float64)")
    digests = {value_digest(v) for v in (f32, g32, f64)}
    assert len(digests) == 3
    assert value_digest(cuda.declare_device("kc_test_ext_a", "float32(float32)")) == \
        value_digest(f32)


def test_cache_does_not_keep_functions_alive():
    import gc
    import weakref

    def make(k):
        def f(out):
            out[0] = k + LIMIT

        return f

    refs = []
    for k in range(3):
        f = make(float(k))
        fingerprint(f)
        assert fingerprint(f) is fingerprint(f)  # cached while alive
        refs.append(weakref.ref(f))
    del f
    gc.collect()
    assert all(r() is None for r in refs)


def test_device_functions_made_at_run_time_are_not_kept_alive_by_the_memo():
    """A device function's remembered digest (FingerprintMemo.dependencies, keyed weakly by
    its dispatcher) must not hold the dispatcher itself: one made inside a function (a
    factory's, a test helper's) is freed with the kernel that used it."""
    import gc
    import weakref

    from numba import cuda

    def make():
        @cuda.jit(device=True)
        def dev(x):
            return x + 1

        @cuda.jit
        def kern(a):
            a[0] = dev(a[0])
        return kern, dev

    kern, dev = make()
    digests = {fingerprint(kern).digest for _ in range(3)}  # the memo filled, then used
    assert len(digests) == 1
    refs = weakref.ref(dev), weakref.ref(kern)
    del kern, dev
    gc.collect()
    assert [r() for r in refs] == [None, None]

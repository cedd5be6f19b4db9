"""KCacheDispatcher's compile path on a machine without a GPU.

``fake_gpu(cc)`` stands in for the device where numba-cuda asks it for its cc
(the bridge's ``offline_target``) and replaces ``_Kernel.bind`` (which loads the cubin into a CUDA
context) by a cubin build, so ``KCacheDispatcher.compile`` runs its real miss and hit paths:
key, store lookup, single-flight compile, entry encoding, rebuild from the entry. Other test
modules import ``fake_gpu`` from here.
"""
import contextlib

import pytest

pytest.importorskip("numba.cuda")

pytestmark = pytest.mark.compat  # runs in every leg of tests/compat/run.sh (docs/compat.md)

import kcache  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda import internals as _nc_internals
from kcache.dispatcher.frontends.numba_cuda import offline as _nc_offline
from kcache.dispatcher.frontends.numba_cuda import patching as _nc_patching
from kcache.dispatcher.frontends.numba_cuda import rebuild as _nc_rebuild
from kcache.dispatcher.frontends.numba_cuda import signatures as _nc_signatures



@contextlib.contextmanager
def fake_gpu(cc=(9, 0)):
    """Patch numba-cuda so kernels compile and 'bind' for ``cc`` without a device."""
    mp = pytest.MonkeyPatch()
    bound = []

    def bind(self):
        bound.append(self)
        self._codelibrary.get_cubin()  # what bind() forces: codegen down to a cubin

    with _nc_offline.offline_target(cc):
        mp.setattr(_nc_signatures, "current_cc", lambda: tuple(cc))
        mp.setattr(_nc_internals.Kernel, "bind", bind)
        try:
            yield bound
        finally:
            mp.undo()


@pytest.fixture
def store(tmp_path):
    return kcache.Store(tmp_path / "cache")


def _kernels(store, cache_key=None):
    from numba import cuda

    from kcache.dispatcher import jit

    @cuda.jit(device=True)
    def twice(x):
        return 2 * x

    @jit(store=store, cache_key=cache_key)
    def k(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = twice(a[i])

    return k


def test_miss_then_hit_in_a_new_dispatcher(store):
    from numba.cuda import types
    sig = (types.float32[::1],)
    with fake_gpu((9, 0)):
        k1 = _kernels(store)
        kern1 = k1.compile(sig)
        assert k1.stats.cache_misses[sig] == 1 and k1.stats.compiles == 1
        k2 = _kernels(store)
        kern2 = k2.compile(sig)
    assert k2.stats.cache_hits[sig] == 1 and k2.stats.compiles == 0
    assert k2.stats.keys[sig] == k1.stats.keys[sig]
    assert kern2 is not kern1
    assert kern2._codelibrary._cubin_cache[(9, 0, "a")].code == kern1._codelibrary.get_cubin(cc=(9, 0, "a")).code
    assert kern2.entry_name == kern1.entry_name
    assert k2.overloads[sig] is kern2
    assert store.stats()["compiles"] == 1


def test_a_served_kernel_is_what_this_numba_cuda_builds(store):
    """Launch-configuration sensitivity (numba-cuda 0.30) only where numba-cuda has it: a
    served kernel has the fields a compiled one has, with the same values."""
    from numba.cuda import types
    sig = (types.float32[::1],)
    with fake_gpu((9, 0)):
        compiled = _kernels(store).compile(sig)
        served_by = _kernels(store)
        served = served_by.compile(sig)
    assert served_by.stats.cache_hits[sig] == 1
    for field in ("launch_config_sensitive", "shared_memory_carveout", "cooperative"):
        assert hasattr(served, field) == hasattr(compiled, field), field
        assert getattr(served, field, None) == getattr(compiled, field, None), field
    assert hasattr(compiled, "launch_config_sensitive") == _nc_internals.LAUNCH_CONFIGS
    assert _nc_signatures.current_launch_config() is None  # no launch under way


def test_a_launch_config_sensitive_entry_is_refused_without_launch_configs(store, monkeypatch):
    from numba.cuda import types
    sig = (types.float32[::1],)
    with fake_gpu((9, 0)):
        kernel = _kernels(store).compile(sig)
        state = _nc_rebuild.kernel_state(kernel, (9, 0, "a"))
    state["launch_config_sensitive"] = True
    monkeypatch.setattr(_nc_internals, "LAUNCH_CONFIGS", False)
    with pytest.raises(ValueError, match="launch-config sensitive"):
        _nc_rebuild.rebuild_kernel(state, sig, (9, 0, "a"), extensions=[], exceptions={})
    assert _nc_patching.launch_config_key(None, None) == _nc_internals.NO_LAUNCH_CONFIG


SCALE = 2.0  # read by _scaled's kernel: a test rebinds it


def _scaled(store):
    from numba import cuda

    from kcache.dispatcher import jit

    @jit(store=store)
    def k(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = a[i] * SCALE

    return k


def test_a_hit_keeps_its_components_only_as_their_encoding(store, monkeypatch):
    # The components serve a miss only (explain, store the compile): a served kernel keeps
    # them as bytes, not as dicts and lists the garbage collector goes through; kcache_key()
    # still answers with the key and components the kernel was served by.
    from numba.cuda import types

    from kcache import keys
    sig = (types.float32[::1],)
    with fake_gpu((9, 0)):
        missed = _scaled(store)
        missed.compile(sig)
        served = _scaled(store)
        served.compile(sig)
        assert served.stats.cache_hits[sig] == 1
        (known,) = [v for m, v in served._kcache_keys.items() if m[0] == sig]
        assert known[1] is None and type(known[2]) is bytes
        monkeypatch.setitem(globals(), "SCALE", 3.0)  # a later key would differ
        key, components = served.kcache_key(sig, (9, 0))
        assert key == served.stats.keys[sig] == missed.kcache_key(sig, (9, 0))[0]
        assert keys.canonical_bytes(components) == keys.canonical_bytes(
            missed.kcache_key(sig, (9, 0))[1])
        assert keys.make_key(components) == key
        fresh = _scaled(store)
        assert fresh.kcache_key(sig, (9, 0))[0] != key  # SCALE is in the key


def test_kcache_key_while_another_thread_serves_the_signature(store):
    # A hit (under numba-cuda's compiler lock) keeps only the encoding of the components
    # while kcache_key(), which takes no lock, is between working them out and returning.
    import threading

    from numba.cuda import types
    sig = (types.float32[::1],)
    with fake_gpu((9, 0)):
        _scaled(store).compile(sig)
        k = _scaled(store)

        def serve_in_another_thread(memo):
            other = threading.Thread(target=k._kcache_forget_components, args=(memo[0],))
            other.start()
            other.join()

        class Interleaved(dict):  # the other thread runs right after the entry is stored
            def setdefault(self, memo, value):
                found = super().setdefault(memo, value)
                serve_in_another_thread(memo)
                return found

            def __setitem__(self, memo, value):
                super().__setitem__(memo, value)
                serve_in_another_thread(memo)

        k._kcache_keys = Interleaved()
        key, components = k.kcache_key(sig, (9, 0))
    assert components["kernel"].endswith("_scaled.<locals>.k") and len(key) == 64


def test_own_phases_after_lookups(store):
    from numba.cuda import types

    from kcache.dispatcher import own_phases
    sig = (types.float32[::1],)
    before = len(own_phases())
    with fake_gpu((9, 0)):
        _kernels(store).compile(sig)  # a miss
        _kernels(store).compile(sig)  # a hit
    miss, hit = own_phases()[before:]
    assert (miss["hit"], hit["hit"]) == (False, True)
    assert miss["kernel"] == hit["kernel"] and miss["kernel"].endswith("_kernels.<locals>.k")
    assert miss["compile"] > 0 and hit["compile"] == 0
    for phases in (miss, hit):
        assert phases["own"] == pytest.approx(phases["total"] - phases["load"] - phases["compile"])
        assert 0 < phases["key"] <= phases["total"]


def test_cache_key_and_cc_change_the_key(store):
    from numba.cuda import types
    sig = (types.int32[::1],)
    with fake_gpu((9, 0)):
        a = _kernels(store)
        a.compile(sig)
        b = _kernels(store, cache_key="release-2")
        b.compile(sig)
    with fake_gpu((8, 0)):
        c = _kernels(store)
        c.compile(sig)
    keys = {a.stats.keys[sig], b.stats.keys[sig], c.stats.keys[sig]}
    assert len(keys) == 3
    assert c.stats.compiles == 1


def test_eager_signature_goes_through_the_store(store):
    from numba import cuda

    from kcache.dispatcher import KCacheDispatcher, jit

    def body(a):
        a[0] = 1

    with fake_gpu((9, 0)):
        k = jit("void(int64[::1])", store=store)(body)
        k2 = jit("void(int64[::1])", store=store)(body)
    assert isinstance(k, KCacheDispatcher) and k.specialized
    assert sum(k.stats.cache_misses.values()) == 1
    assert sum(k2.stats.cache_hits.values()) == 1
    assert isinstance(cuda.jit(body), _nc_internals.CUDADispatcher)


def test_uncacheable_kernel_runs_uncached_and_explains(store):
    """A kernel capturing a global device-array stand-in is compiled, not stored."""
    import numpy as np
    from numba import cuda
    from numba.cuda import types

    from kcache.dispatcher import explain, jit

    class FakeDeviceArray:  # what fingerprint checks: the CUDA array interface
        __cuda_array_interface__ = {"shape": (1,), "typestr": "<f4", "data": (0, False),
                                    "version": 3}

    captured = FakeDeviceArray()

    def body(a):
        a[0] = np.float32(len(captured.__class__.__name__))

    k = jit(store=store)(body)
    sig = (types.float32[::1],)
    with fake_gpu((9, 0)):
        try:
            k.compile(sig)
        except Exception:
            pass  # numba may refuse to type the stand-in; the decision came first
    assert sig in k.stats.uncached
    assert "device array" in k.stats.uncached[sig]
    assert any("device array" in line for line in explain(k))
    assert list(store.entries()) == []


def test_store_failure_is_a_miss_not_an_error(store, monkeypatch):
    from numba.cuda import types

    def broken(*a, **k):
        raise OSError("disk on fire")

    monkeypatch.setattr(type(store), "get_or_create", broken)
    sig = (types.float32[::1],)
    with fake_gpu((9, 0)), pytest.warns(Warning, match="disk on fire"):
        k = _kernels(store)
        k.compile(sig)
    assert k.stats.store_errors == 1 and k.stats.compiles == 1
    assert k.stats.cache_misses[sig] == 1


def test_compile_error_reaches_the_user_unchanged(store):
    from numba.cuda.core.errors import TypingError
    from numba.cuda import types

    from kcache.dispatcher import jit

    def bad(a):
        a[0] = undefined_name  # noqa: F821

    k = jit(store=store)(bad)
    with fake_gpu((9, 0)), pytest.raises(TypingError):
        k.compile((types.float32[::1],))
    assert list(store.entries()) == []


def test_specialize_is_cached(store):
    import numpy as np

    from kcache.dispatcher import KCacheDispatcher
    with fake_gpu((9, 0)):
        k = _kernels(store)
        s1 = k.specialize(np.zeros(4, np.float32))
        s2 = _kernels(store).specialize(np.zeros(4, np.float32))
    assert isinstance(s1, KCacheDispatcher) and s1.specialized
    assert sum(s1.stats.cache_misses.values()) == 1
    assert sum(s2.stats.cache_hits.values()) == 1


def test_explain_names_the_changed_component(store):
    from numba.cuda import types

    from kcache.dispatcher import explain
    sig = (types.float32[::1],)
    explain(True)
    try:
        with fake_gpu((9, 0)):
            _kernels(store, cache_key="a").compile(sig)
            k = _kernels(store, cache_key="b")
            k.compile(sig)
    finally:
        explain(False)
    lines = explain(k)
    assert lines and any("cache_key" in line for line in lines), lines
    # the line names the arch, as compile_for's do (two ccs in one process are told apart)
    assert all(" for sm_90a: " in line for line in lines), lines


def test_debug_exception_table_round_trips(store):
    """A debug kernel's exception table is stored by class name and resolved on load."""
    from numba import cuda
    from numba.cuda import types

    from kcache.dispatcher import jit

    def body(a):
        if a[0] < 0:
            raise ValueError("negative input")
        a[0] = 1

    sig = (types.float32[::1],)
    with fake_gpu((9, 0)):
        k1 = jit(store=store, debug=True, opt=False)(body)
        kern1 = k1.compile(sig)
        kern2 = jit(store=store, debug=True, opt=False)(body).compile(sig)
    table1 = kern1.call_helper.exceptions
    table2 = kern2.call_helper.exceptions
    assert table1 and set(table1) == set(table2)
    for code, (cls, args, loc) in table2.items():
        assert cls is ValueError and args == ("negative input",)
        assert loc == tuple(table1[code][2])
    assert kern2.debug is True
    del cuda


@pytest.mark.parametrize("ptx_loads", [True, False])
def test_driver_refusing_the_cached_cubin(store, monkeypatch, ptx_loads):
    """The driver refuses a cached cubin (e.g. an entry compiled elsewhere): the PTX is tried
    (``fallbacks``); when the PTX is refused too (its ISA newer than this driver, as CUDA 13.0
    drivers with PTX ISA 9.5 from newer wheels), the kernel is compiled for this process:
    counted as a miss, uncached with the reason, no error."""
    from numba.cuda import types

    from kcache.dispatcher.frontends.numba_cuda import dispatcher as dispatcher_mod
    sig = (types.float32[::1],)
    with fake_gpu((9, 0)):
        _kernels(store).compile(sig)  # the entry
    rebuilt = {}
    real_entry_to_kernel = dispatcher_mod.entry_to_kernel

    def entry_to_kernel(*args, use="cubin", **kwargs):
        kernel = real_entry_to_kernel(*args, use=use, **kwargs)
        rebuilt[id(kernel)] = use
        return kernel

    monkeypatch.setattr(dispatcher_mod, "entry_to_kernel", entry_to_kernel)
    with fake_gpu((9, 0)) as bound:
        fake_bind = _nc_internals.Kernel.bind

        def refusing_bind(self):
            use = rebuilt.get(id(self))
            if use == "cubin" or (use == "ptx" and not ptx_loads):
                raise RuntimeError(f"CUDA_ERROR_UNSUPPORTED_PTX_VERSION ({use})")
            fake_bind(self)

        inner = pytest.MonkeyPatch()  # undone before fake_gpu restores numba-cuda's bind
        inner.setattr(_nc_internals.Kernel, "bind", refusing_bind)
        try:
            k = _kernels(store)
            with pytest.warns(Warning) as warned:
                kern = k.compile(sig)
        finally:
            inner.undo()
    s = k.stats
    assert s.fallbacks == 1
    assert any("refused a cached cubin" in str(w.message) for w in warned)
    if ptx_loads:
        assert (s.cache_hits[sig], s.cache_misses[sig], s.compiles) == (1, 0, 0)
        assert rebuilt[id(kern)] == "ptx"
    else:
        assert (s.cache_hits[sig], s.cache_misses[sig], s.compiles) == (0, 1, 1)
        assert id(kern) not in rebuilt and kern in bound  # a fresh compile, bound
        assert "refused the cached cubin" in s.uncached[sig] and "its PTX" in s.uncached[sig]
    assert k.overloads[sig] is kern

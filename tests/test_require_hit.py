"""KCACHE_REQUIRE_HIT on a fake GPU: a kernel call that would compile raises
kcache.CacheMissError (1) or warns once per kernel and compiles (warn), wherever the compile
comes from; compile_for is unaffected."""
import pytest

import kcache
from kcache.warn import KcacheWarning

pytest.importorskip("numba.cuda")

from kcache.dispatcher import compile_for, install, uninstall  # noqa: E402
from kcache.dispatcher import jit as kjit  # noqa: E402

from test_dispatcher_fakegpu import _kernels, fake_gpu  # noqa: E402


def _sig():
    from numba.cuda import types
    return (types.float32[::1],)


@pytest.fixture
def strict(monkeypatch):
    monkeypatch.setenv("KCACHE_REQUIRE_HIT", "1")


def test_a_miss_raises_naming_kernel_signature_cc_and_reason(store, strict):
    k = _kernels(store)
    with fake_gpu((9, 0)) as bound:
        with pytest.raises(kcache.CacheMissError) as info:
            k.compile(_sig())
    err = info.value
    assert isinstance(err, kcache.KcacheError) and isinstance(err, RuntimeError)
    msg = str(err)
    assert "test_dispatcher_fakegpu:_kernels.<locals>.k" in msg and "float32" in msg
    assert "cc 9.0 (sm_90" in msg and "no entry of this kernel yet" in msg
    assert "KCACHE_REQUIRE_HIT" in msg and "kcache warm" in msg
    assert (err.cc, err.kernel) == ((9, 0), "test_dispatcher_fakegpu:_kernels.<locals>.k")
    assert bound == [] and list(store.entries()) == []  # nothing compiled, nothing stored


def test_compile_for_is_unaffected_and_then_the_call_hits(store, strict):
    k = _kernels(store)
    compile_for(k, [_sig()], cc=(9, 0), store=store)
    with fake_gpu((9, 0)):
        k.compile(_sig())
    assert k.stats.cache_hits[_sig()] == 1 and k.stats.compiles == 0


def test_the_nearest_entry_is_named(store, strict):
    compile_for(_kernels(store), [_sig()], cc=(9, 0), store=store)
    other = _kernels(store, cache_key="release-2")
    with fake_gpu((9, 0)), pytest.raises(kcache.CacheMissError, match="cache_key"):
        other.compile(_sig())


def test_warn_compiles_and_warns_once_per_kernel(store, monkeypatch):
    monkeypatch.setenv("KCACHE_REQUIRE_HIT", "warn")
    k = _kernels(store)
    with fake_gpu((9, 0)):
        with pytest.warns(KcacheWarning, match="KCACHE_REQUIRE_HIT=warn: compiling .*no entry"):
            k.compile(_sig())
        from numba.cuda import types
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error", KcacheWarning)
            k.compile((types.int32[::1],))  # same kernel: not warned again
    assert k.stats.compiles == 2 and len(list(store.entries())) == 2


def test_an_uncacheable_kernel_raises_too(store, strict):
    k = kjit(cache=False, store=store)(lambda a: None)
    with fake_gpu((9, 0)), pytest.raises(kcache.CacheMissError, match="not cached: caching is off"):
        k.compile(_sig())


def test_a_broken_cache_raises_too(tmp_path, strict, monkeypatch):
    store = kcache.Store(tmp_path / "cache")

    def broken(*args, **kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(store, "get_or_create", broken)
    k = _kernels(store)
    with fake_gpu((9, 0)), pytest.warns(KcacheWarning, match="cache store failed"):
        with pytest.raises(kcache.CacheMissError):
            k.compile(_sig())


def test_an_unopenable_cache_raises_too(tmp_path, strict, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("KCACHE_DIR", str(tmp_path / "file"))  # a file: no store opens
    from kcache.dispatcher import Options
    Options.reset_process_store()
    try:
        k = kjit(lambda a: None)
        with fake_gpu((9, 0)), pytest.warns(KcacheWarning, match="cannot open the cache"):
            with pytest.raises(kcache.CacheMissError, match="not cached"):
                k.compile(_sig())
    finally:
        Options.reset_process_store()


def test_install_require_hit_and_uninstall(store, monkeypatch):
    from numba import cuda
    install(store=store, require_hit=True)
    try:
        @cuda.jit(cache=True)
        def k(a):
            a[0] = 1
        with fake_gpu((9, 0)), pytest.raises(kcache.CacheMissError):
            k.compile(_sig())
        install(store=store, require_hit=False)  # explicit: off, whatever the variable says
        monkeypatch.setenv("KCACHE_REQUIRE_HIT", "1")
        with fake_gpu((9, 0)):
            k.compile(_sig())
    finally:
        uninstall()
    with pytest.raises(ValueError, match="require_hit must be True, False, 'warn' or None"):
        install(require_hit="always")
    uninstall()


def test_a_value_not_understood_is_warned_and_strict(store, monkeypatch):
    monkeypatch.setenv("KCACHE_REQUIRE_HIT", "always")
    k = _kernels(store)
    with fake_gpu((9, 0)), pytest.warns(KcacheWarning, match="not understood"):
        with pytest.raises(kcache.CacheMissError):
            k.compile(_sig())

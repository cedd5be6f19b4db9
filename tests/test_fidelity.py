"""A served kernel is the kernel numba-cuda would have built (issue: numba-cuda's own suite).

Without a GPU (``fake_gpu``): a kernel served from an entry answers ``inspect_llvm``,
``inspect_asm``, ``inspect_types`` and its type annotation as the compiled one does (compiled
on demand, counted apart, never replacing the served kernel); carries the attributes
numba-cuda's dispatcher reads (``objectmode``); says again what its compile warned; is compiled
instead of served while a numba dump setting is on; ``recompile()`` sees changed globals; and
``@overload(strict=...)`` is in the key; a function made at run time in a library module
(numba-cuda's test helpers) is keyed by content, not by its name; a ``numba.cuda.jit(cache=True)``
kernel under transparent mode gets numba-cuda's cache refusals (``link=``, device arrays). The
launch of each class is in tests/test_gpu.py.
"""
import io
import warnings

import pytest

pytest.importorskip("numba.cuda")

pytestmark = pytest.mark.compat  # runs in every leg of tests/compat/run.sh (docs/compat.md)

from tests.test_dispatcher_fakegpu import fake_gpu  # noqa: E402

import kcache  # noqa: E402
from kcache.dispatcher import compile_warnings  # noqa: E402

Z = 1


def _define(store):
    from numba import cuda

    from kcache.dispatcher import jit

    @jit(store=store)
    def k(a, x):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = x * 2.0 + Z

    return k


@pytest.fixture
def store(tmp_path):
    return kcache.Store(tmp_path / "cache")


def _plain(text):
    import re
    # numba tags unique names "B<digits>v<n>B": the digit count changes at 10, 100, 1000 compiles
    return re.sub(r"B\d+v\d+B", "BNvNB", re.sub(r"\$\d+", "$N", text))


def _served_and_compiled(store):
    from numba.cuda import types
    sig = (types.float32[::1], types.float32)
    with fake_gpu((9, 0)):
        compiled = _define(store)
        compiled.compile(sig)
        served = _define(store)
        served.compile(sig)
    assert served.stats.cache_hits[sig] == 1 and served.stats.compiles == 0
    return compiled, served, sig


def test_served_kernel_answers_inspection_as_the_compiled_one(store):
    compiled, served, sig = _served_and_compiled(store)
    kernel = served.overloads[sig]
    with fake_gpu((9, 0)):
        # equal but for numba's per-compile unique suffixes ("k$1" / "k$2")
        assert _plain(served.inspect_llvm(sig)) == _plain(compiled.inspect_llvm(sig))
        assert _plain(served.inspect_asm(sig)) == _plain(compiled.inspect_asm(sig))
        assert served.overloads[sig].type_annotation.typemap.keys() == \
            compiled.overloads[sig].type_annotation.typemap.keys()
        out = io.StringIO()
        served.inspect_types(file=out)
        assert "float32" in out.getvalue() and "---" in out.getvalue()
    # compiled once for all the questions, never a miss, and the served kernel stays in place
    assert served.stats.inspect_compiles == 1
    assert sum(served.stats.cache_misses.values()) == 0 and served.stats.compiles == 0
    assert served.overloads[sig] is kernel


def test_served_kernel_ptx_for_its_own_cc_comes_from_the_entry(store):
    _compiled, served, sig = _served_and_compiled(store)
    lib = served.overloads[sig]._codelibrary
    with fake_gpu((9, 0)):
        ptx = lib.get_asm_str(cc=(9, 0, "a"))
    assert ".target sm_90a" in ptx
    assert served.stats.inspect_compiles == 0  # the entry held it


def test_served_kernel_has_what_the_dispatcher_reads(store):
    _compiled, served, sig = _served_and_compiled(store)
    kernel = served.overloads[sig]
    assert kernel.objectmode is False and kernel.entry_point is None
    assert served.nopython_signatures  # _DispatcherBase reads .objectmode of each overload
    assert kernel.argument_types == sig
    assert not hasattr(kernel, "target_context")  # bind() must not compile


def _chatty(store):
    """A kernel whose compile warns (print() of 33 items: NumbaWarning), defined anew."""
    from numba import cuda

    from kcache.dispatcher import jit

    @jit(store=store)
    def chatty(a):
        print(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
              21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33)
        a[0] = cuda.grid(1)
    return chatty


def test_compile_warnings_are_said_again_on_a_hit(store):
    from numba.cuda import types
    from numba.cuda.core.errors import NumbaWarning

    def define():
        return _chatty(store)

    sig = (types.int32[::1],)
    with fake_gpu((9, 0)):
        with pytest.warns(NumbaWarning, match="more than 32 items") as first:
            define().compile(sig)
        served = define()
        with pytest.warns(NumbaWarning, match="more than 32 items") as again:
            served.compile(sig)
    assert served.stats.cache_hits[sig] == 1
    [w1] = [w for w in first if "32 items" in str(w.message)]
    [w2] = [w for w in again if "32 items" in str(w.message)]
    assert (str(w2.message), w2.filename, w2.lineno) == (str(w1.message), w1.filename, w1.lineno)
    entry = next(iter(store.entries()))
    # The class by where it is defined: numba.cuda.core.errors (numba-cuda 0.30), or
    # numba.core.errors, which 0.26's numba.cuda.core.errors re-exports.
    where = f"{NumbaWarning.__module__}:{NumbaWarning.__qualname__}"
    assert where in ("numba.cuda.core.errors:NumbaWarning", "numba.core.errors:NumbaWarning")
    assert store.load(entry.key).meta["warnings"][0][0] == where


def test_only_the_compiling_thread_s_warnings_go_into_an_entry():
    import threading

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with compile_warnings.captured() as said:
            other = threading.Thread(target=warnings.warn, args=("another thread's",))
            other.start()
            other.join()
            warnings.warn("the compile's", UserWarning)
    assert [str(w.message) for w in said] == ["the compile's"]
    # neither is lost: both said to the program once the block ends, in their order
    assert [str(w.message) for w in shown] == ["another thread's", "the compile's"]


def test_a_block_that_raises_still_says_its_warnings():
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with pytest.raises(ZeroDivisionError):
            with compile_warnings.captured():
                warnings.warn("said before the error", UserWarning)
                1 / 0
    assert [str(w.message) for w in shown] == ["said before the error"]


def test_a_failed_compile_says_its_warnings_as_numba_cuda_does(store):
    """numba-cuda shows what a compile warned before it failed (here an @overload's typing
    warns, then typing fails): kcache's compile must not swallow it."""
    from numba import cuda
    from numba.core.errors import TypingError
    from numba.cuda import types
    from numba.cuda.extending import overload

    from kcache.dispatcher import jit

    def make_body():  # a new function each time: numba keeps an overload's typing
        def noisy(x):
            pass

        @overload(noisy, target="cuda")
        def _noisy(x):
            warnings.warn("warned while typing", UserWarning)
            return lambda x: x

        def body(a):
            noisy(a[0])
            a[0] = a[0] + (1, 2)  # a typing error after noisy() was typed
        return body

    sig = (types.float32[::1],)
    shown = {}
    with fake_gpu((9, 0)):
        for name, decorate in (("numba-cuda", cuda.jit), ("kcache", jit(store=store))):
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                with pytest.raises(TypingError):
                    decorate(make_body()).compile(sig)
            shown[name] = [str(w.message) for w in seen if "typing" in str(w.message)]
    assert shown["numba-cuda"] == ["warned while typing"]
    assert shown["kcache"] == shown["numba-cuda"]


def test_warning_categories_are_resolved_without_imports(tmp_path, monkeypatch):
    import sys
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "planted.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n"
                                         "class W(Warning): pass\n")
    records = [["planted:W", "from a planted module", "f.py", 3],
               ["builtins:DeprecationWarning", "builtin", "f.py", 4],
               ["builtins:SystemExit", "not a warning", "f.py", 5],
               ["numba.cuda.core.errors:NumbaPerformanceWarning", "perf", "f.py", 6],
               "garbage", ["x:y", 1, 2, 3], ["x:y", "long" * 5000, "f.py", 1]]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        said = compile_warnings.replay(records)
    from numba.cuda.core.errors import NumbaPerformanceWarning, NumbaWarning
    assert said == 4
    assert [w.category for w in seen] == [NumbaWarning, DeprecationWarning, NumbaWarning,
                                          NumbaPerformanceWarning]
    assert "planted" not in sys.modules and not (tmp_path / "ran").exists()
    assert compile_warnings.replay({"not": "a list"}) == 0


def test_dump_settings_compile_instead_of_serving(store, monkeypatch, capsys):
    from numba.cuda.core import config
    _compiled, _served, sig = _served_and_compiled(store)
    monkeypatch.setattr(config, "DUMP_IR", 1)
    with fake_gpu((9, 0)):
        third = _define(store)
        third.compile(sig)
    assert third.stats.compiles == 1 and sum(third.stats.cache_hits.values()) == 0
    assert "NUMBA_DUMP_IR" in third.stats.bypassed[sig]
    assert "IR DUMP" in capsys.readouterr().out
    assert kcache.dispatcher.process_counts()["bypasses"] >= 1


def test_recompile_sees_a_changed_global(store, monkeypatch):
    _compiled, served, sig = _served_and_compiled(store)
    before = served.stats.keys[sig]
    monkeypatch.setattr(__import__(__name__), "Z", 10, raising=False)
    monkeypatch.setitem(globals(), "Z", 10)
    with fake_gpu((9, 0)):
        served.recompile()
    assert served.stats.compiles == 1  # a new key: compiled, not the old entry served again
    assert served.kcache_key(sig, (9, 0))[0] != before


def test_overload_strictness_is_in_the_key(store):
    from numba.cuda import types
    from numba.cuda.extending import overload

    from kcache.dispatcher import jit

    def gen(strict):
        def target(a):
            pass

        def impl(a):
            def body(a):
                a[0] = 1
            return body

        overload(target, strict=strict)(impl)

        @jit(store=store)
        def k(a):
            target(a)
        return k

    sig = (types.int32[::1],)
    with fake_gpu((9, 0)):
        lax, strict = gen(False), gen(True)
        keys = {lax.kcache_key(sig, (9, 0))[0], strict.kcache_key(sig, (9, 0))[0]}
    assert len(keys) == 2


def test_a_warning_naming_the_function_names_this_process_s_function():
    def foo():
        pass

    class Seen:  # stands in for warnings.WarningMessage
        category, filename, lineno = UserWarning, "f.py", 1
        message = f"Could not find source for function: {foo!r}."

    [record] = compile_warnings.encode([Seen], repr(foo))
    assert repr(foo) not in record[1]

    def foo():  # another function object: another address
        pass

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        compile_warnings.replay([record], repr(foo))
    assert str(seen[0].message) == f"Could not find source for function: {foo!r}."


def _overloaded_kernel(store, strict, module=None):
    """numba-cuda's test_extending pattern: a helper makes a new function to overload, with
    the same qualname each time, and a kernel calling it (closure cell)."""
    from numba.cuda.extending import overload

    from kcache.dispatcher import jit

    def gen():
        def myoverload(a, kw=None):
            pass

        def ol(a, **kws):  # **kws in the typing function: strict=True refuses it
            def impl(a, kw=10):
                return a
            return impl

        if module is not None:  # as if defined inside a numba-cuda test module
            myoverload.__module__ = ol.__module__ = module
        overload(myoverload, strict=strict)(ol)

        @jit(store=store)
        def foo(a, b):
            myoverload(a, kw=11)
        return foo

    return gen()


@pytest.mark.parametrize("module", [None, "numba.cuda.tests.cudapy.test_extending"])
def test_a_function_made_at_run_time_in_a_library_module_is_keyed_by_content(store, module):
    # numba-cuda's own TestHighLevelExtending.test_typing_vs_impl_signature_mismatch_
    # handling_var_keyword: functions local to a library module were keyed by their name
    # alone, so the strict=True kernel hit the strict=False one's entry and no TypingError
    # was raised.
    from numba.core import errors
    from numba.cuda import types
    sig = (types.int64, types.int64)
    with fake_gpu((9, 0)):
        lax = _overloaded_kernel(store, False, module)
        lax.compile(sig)
        strict = _overloaded_kernel(store, True, module)
        assert strict.kcache_key(sig, (9, 0))[0] != lax.stats.keys[sig]
        with pytest.raises(errors.TypingError, match="VAR_KEYWORD"):
            strict.compile(sig)
        again = _overloaded_kernel(store, False, module)
        again.compile(sig)
    assert again.stats.cache_hits[sig] == 1  # the same content still hits


def test_run_time_closures_of_a_library_module_are_hashed_not_named():
    from kcache.dispatcher.fingerprint import fingerprint as fingerprint_of
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND

    def fingerprint(fn):
        return fingerprint_of(fn, FRONTEND.registries())

    def make(n):
        def dev(x):
            return x + n
        dev.__module__ = "numba.cuda.tests.fixture"

        def kern(a):
            a[0] = dev(a[0])
        return kern

    assert fingerprint(make(1)).digest != fingerprint(make(2)).digest
    assert fingerprint(make(1)).digest == fingerprint(make(1)).digest


def _cpu_function_kernel(store, signature):
    """numba-cuda's TestDeviceFunc._check_cpu_dispatcher: a kernel calling a CPU ``@jit``
    function, made by a helper (the same qualname each time)."""
    import numba

    from kcache.dispatcher import jit

    def make():
        def add(a, b):
            return a + b
        cpu = numba.jit(signature)(add) if signature else numba.jit(add)

        @jit(store=store)
        def add_kernel(ary):
            ary[0] = cpu(ary[0], 1)
        return add_kernel
    return make()


def test_a_cpu_function_with_explicit_signatures_is_another_dependency(store):
    # numba-cuda's own TestDeviceFunc.test_cpu_dispatcher_invalid: a CPU function given
    # explicit signatures cannot be compiled for the device (TypingError); keyed by its body
    # alone, its kernel hit the entry of the same body without signatures.
    from numba.cuda.core import errors
    from numba.cuda import types
    sig = (types.int64[::1],)
    with fake_gpu((9, 0)):
        lazy = _cpu_function_kernel(store, None)
        lazy.compile(sig)
        fixed = _cpu_function_kernel(store, "(i4, i4)")
        assert fixed.kcache_key(sig, (9, 0))[0] != lazy.stats.keys[sig]
        with pytest.raises(errors.TypingError, match="using cpu function on device"):
            fixed.compile(sig)


def _jitlink_ptx():
    from pathlib import Path

    from numba import cuda
    path = Path(cuda.__file__).parent / "tests" / "data" / "jitlink.ptx"
    if not path.exists():
        pytest.skip("numba-cuda's tests/data/jitlink.ptx is not installed")
    return str(path)


class FakeDeviceArray:
    """A device array as numba-cuda types and lowers a captured one (no device needed)."""
    __cuda_array_interface__ = {"shape": (3,), "typestr": "<f4", "data": (0x10000, False),
                                "version": 3, "strides": None}


CAPTURED = FakeDeviceArray()


@pytest.fixture(params=["cache", "all"])
def transparent(request, store):
    from kcache.dispatcher import install, uninstall
    install(request.param, store=store)
    yield request.param
    uninstall()


def test_cache_true_link_kernel_is_refused_as_numba_cuda_refuses_it(transparent, store):
    # numba-cuda's test_caching.test_cannot_cache_linking_libraries, under KCACHE_ENABLE
    from numba import cuda
    link = _jitlink_ptx()
    with fake_gpu((9, 0)):
        with pytest.raises(RuntimeError, match="Cannot pickle CUDACodeLibrary with linking files"):
            @cuda.jit("void()", cache=True, link=[link])
            def f():
                pass

        @cuda.jit("void()", link=[link])  # no cache=True: numba-cuda runs it, uncached
        def g():
            pass
    if transparent == "all":
        assert g.stats.compiles == 1 and not g.stats.uncached  # kcache caches it


def test_a_cache_true_link_kernel_is_not_served_from_a_kcache_jit_entry(store):
    from kcache.dispatcher import install, jit, uninstall
    link = _jitlink_ptx()

    def body():
        pass

    with fake_gpu((9, 0)):
        first = jit("void()", store=store, link=[link])(body)  # kcache.jit caches link= kernels
        assert first.stats.compiles == 1 and store.stats()["entries"] == 1
        install("cache", store=store)
        try:
            from numba import cuda
            with pytest.raises(RuntimeError, match="linking files"):
                cuda.jit("void()", cache=True, link=[link])(body)
        finally:
            uninstall()


def test_cache_true_kernel_capturing_a_device_array_is_refused(transparent, store, caplog):
    # numba-cuda's test_cannot_cache_captured/global_device_array, under KCACHE_ENABLE
    from pickle import PicklingError  # the class numba-cuda raises; nothing is pickled

    from numba import cuda
    from numba.cuda import types
    sig = (types.float32[::1],)
    captured = FakeDeviceArray()
    kcache.explain(True)
    try:
        with fake_gpu((9, 0)):
            @cuda.jit(cache=True)
            def closure_kernel(out):
                out[0] = captured[0] * 2.0

            @cuda.jit(cache=True)
            def global_kernel(out):
                out[0] = CAPTURED[0] * 2.0

            for kern in (closure_kernel, global_kernel):
                with pytest.raises(PicklingError, match="global device arrays"):
                    kern.compile(sig)
                assert sig not in kern.overloads

            @cuda.jit  # without cache=True numba-cuda runs it (uncached); so does kcache
            def plain(out):
                out[0] = CAPTURED[0] * 2.0
            plain.compile(sig)
    finally:
        kcache.explain(False)
    assert any("refuses it" in r.getMessage() for r in caplog.records)
    assert store.stats()["entries"] == 0
    if transparent == "all":
        assert "device array" in plain.stats.uncached[sig]


def test_replayed_warnings_are_bounded_and_escaped():
    """An entry's warnings may come from a bundle or another machine: a line number no file
    has is skipped (it made warn_explicit raise, taken for a refused cubin), and an escape
    sequence never reaches the terminal raw."""
    records = [["builtins:UserWarning", "huge line", "f.py", 2 ** 63],
               ["builtins:UserWarning", "red \x1b[31mtext\x1b[0m\nnext line", "f\x1b].py", 7]]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert compile_warnings.replay(records) == 1
    (w,) = seen
    assert str(w.message) == "red \\x1b[31mtext\\x1b[0m\nnext line"
    assert (w.filename, w.lineno) == ("f\\x1b].py", 7)


def test_a_replayed_warning_made_an_error_by_the_filters_is_raised_not_a_fallback(store):
    from numba.cuda import types
    from numba.cuda.core.errors import NumbaWarning

    def define():
        return _chatty(store)

    sig = (types.int32[::1],)
    with fake_gpu((9, 0)):
        with pytest.warns(NumbaWarning):
            define().compile(sig)
        served = define()
        with warnings.catch_warnings():
            warnings.simplefilter("error", NumbaWarning)  # as numba-cuda's compile would raise
            with pytest.raises(NumbaWarning, match="more than 32 items"):
                served.compile(sig)
    assert served.stats.fallbacks == 0


def test_a_failed_compile_counts_a_miss_and_raises_numba_cuda_s_error_alone(store):
    """numba-cuda counts the miss before it compiles, and its error carries no context."""
    from numba import cuda
    from numba.core.errors import TypingError
    from numba.cuda import types

    from kcache.dispatcher import jit

    def bad(a):
        a[0] = a[0] + (1, 2)

    sig = (types.float32[::1],)
    seen = {}
    with fake_gpu((9, 0)):
        for name, decorate in (("numba-cuda", cuda.jit), ("kcache", jit(store=store))):
            dispatcher = decorate(bad)
            with pytest.raises(TypingError) as info:
                dispatcher.compile(sig)
            seen[name] = (info.value.__context__, sum(dispatcher.stats.cache_misses.values()))
    assert seen["kcache"] == seen["numba-cuda"] == (None, 1)
    broken = kcache.Store(store.root)  # a store that fails: the compile still runs, the same
    broken.get_or_create = lambda *a, **k: (_ for _ in ()).throw(OSError("store broke"))
    with fake_gpu((9, 0)), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dispatcher = jit(store=broken)(bad)
        with pytest.raises(TypingError) as info:
            dispatcher.compile(sig)
    assert (info.value.__context__, sum(dispatcher.stats.cache_misses.values())) == (None, 1)

"""A served kernel is the kernel numba-cuda would have built (issue: numba-cuda's own suite).

Without a GPU (``fake_gpu``): a kernel served from an entry answers ``inspect_llvm``,
``inspect_asm``, ``inspect_types`` and its type annotation as the compiled one does (compiled
on demand, counted apart, never replacing the served kernel); carries the attributes
numba-cuda's dispatcher reads (``objectmode``); says again what its compile warned; is compiled
instead of served while a numba dump setting is on; ``recompile()`` sees changed globals; and
``@overload(strict=...)`` is in the key. The launch of each class is in tests/test_gpu.py.
"""
import io
import warnings

import pytest

pytest.importorskip("numba.cuda")

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
    return re.sub(r"B(\d+)v\d+B", r"B\1vNB", re.sub(r"\$\d+", "$N", text))


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


def test_compile_warnings_are_said_again_on_a_hit(store):
    from numba import cuda
    from numba.cuda import types
    from numba.cuda.core.errors import NumbaWarning

    from kcache.dispatcher import jit

    def define():
        @jit(store=store)
        def chatty(a):
            print(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
                  21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33)
            a[0] = cuda.grid(1)
        return chatty

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
    assert store.load(entry.key).meta["warnings"][0][0] == "numba.cuda.core.errors:NumbaWarning"


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

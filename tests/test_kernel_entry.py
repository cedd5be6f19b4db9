"""Exception classes named in an entry (debug kernels): resolved only from modules already
imported, never imported, no module ``__getattr__`` run, and only ``Exception`` subclasses."""
import json
import subprocess
import sys
import textwrap
import warnings

import pytest

pytest.importorskip("numba.cuda")

pytestmark = pytest.mark.compat  # runs in every leg of tests/compat/run.sh (docs/compat.md)

import kcache  # noqa: E402
from kcache import Entry  # noqa: E402
from kcache.dispatcher.kernel_entry import (  # noqa: E402
    NotStorable, class_name, decode_exceptions, encode_exceptions, entry_to_kernel,
    resolve_class)

from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND  # noqa: E402
from test_dispatcher_fakegpu import fake_gpu  # noqa: E402


class Custom(ValueError):
    class Nested(KeyError):
        pass


def test_loaded_exception_classes_resolve():
    assert resolve_class("builtins:ValueError") is ValueError
    assert resolve_class(f"{__name__}:Custom") is Custom
    assert resolve_class(f"{__name__}:Custom.Nested") is Custom.Nested
    assert resolve_class(class_name(Custom.Nested)) is Custom.Nested
    from numba.core.errors import NumbaError  # an exception class of a loaded library
    assert resolve_class(class_name(NumbaError)) is NumbaError


@pytest.mark.parametrize("name", [
    "builtins:SystemExit", "builtins:KeyboardInterrupt", "builtins:BaseException",
    "builtins:GeneratorExit", "builtins:int", "builtins:print", "os:system",
    "subprocess:Popen", f"{__name__}:Custom.__init__", "builtins:", "builtins",
    "builtins:ValueError.__class__", "builtins:ValueError.mro",
])
def test_anything_but_a_loaded_exception_class_is_refused(name):
    with pytest.raises(NotStorable):
        resolve_class(name)


@pytest.mark.parametrize("name", [None, 3, b"builtins:ValueError", "x" * 100_000])
def test_names_that_are_not_short_strings_are_refused(name):
    with pytest.raises(NotStorable):
        resolve_class(name)


def test_classes_that_could_not_be_resolved_are_never_stored():
    with pytest.raises(NotStorable, match="not an Exception subclass"):
        encode_exceptions({1: (SystemExit, None, None)})
    with pytest.raises(NotStorable, match="not an Exception subclass"):
        encode_exceptions({1: (KeyboardInterrupt, ("x",), None)})
    table = encode_exceptions({1: (Custom, ("bad",), ("f.py", 3))})
    assert decode_exceptions(table) == {1: (Custom, ("bad",), ("f.py", 3))}


_ATTACK = textwrap.dedent("""
    import json, sys
    import numpy
    from kcache.dispatcher.kernel_entry import NotStorable, decode_exceptions, resolve_class
    out = {"f2py_before": "numpy.f2py" in sys.modules,
           "unloaded_before": "xml.dom.minidom" in sys.modules}
    refused = []
    for name in ("numpy:f2py.X", "numpy:f2py.f2py2e.Error", "xml.dom.minidom:Node",
                 "numpy:testing.KnownFailureException"):
        try:
            resolve_class(name)
        except NotStorable:
            refused.append(name)
    try:
        decode_exceptions({"1": ["numpy:f2py.X", None, None]})
    except NotStorable:
        refused.append("table")
    out["refused"] = refused
    out["f2py_after"] = "numpy.f2py" in sys.modules
    out["unloaded_after"] = "xml.dom.minidom" in sys.modules
    out["testing_after"] = "numpy.testing" in sys.modules
    getattr(numpy, "f2py")  # what a getattr-based lookup does: the attack is real
    out["f2py_by_getattr"] = "numpy.f2py" in sys.modules
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_a_name_never_imports_a_module_nor_runs_a_module_getattr():
    """numpy's module ``__getattr__`` imports ``numpy.f2py`` for ``numpy.f2py``: an entry
    naming "numpy:f2py.X" must not trigger it; an unloaded module is not imported either."""
    proc = subprocess.run([sys.executable, "-c", _ATTACK], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["f2py_before"] is False and out["unloaded_before"] is False
    assert out["refused"] == ["numpy:f2py.X", "numpy:f2py.f2py2e.Error", "xml.dom.minidom:Node",
                              "numpy:testing.KnownFailureException", "table"]
    assert out["f2py_after"] is False and out["unloaded_after"] is False
    assert out["testing_after"] is False
    assert out["f2py_by_getattr"] is True


def test_a_poisoned_entry_is_compiled_over_not_loaded(tmp_path):
    """A debug kernel's entry whose exception table names SystemExit: the hit cannot be
    used, the kernel compiles instead (with its real table), its entry replaces the poisoned
    one (quarantined: a miss, a corrupt entry) and the call still works."""
    from numba.cuda import types

    from kcache.dispatcher import jit

    store = kcache.Store(tmp_path / "cache")

    def body(a):
        if a[0] < 0:
            raise ValueError("negative input")
        a[0] = 1

    sig = (types.float32[::1],)
    with fake_gpu((9, 0)):
        first = jit(store=store, debug=True, opt=False)(body)
        first.compile(sig)
    (key,) = first.stats.keys.values()
    entry = store.load(key)
    poisoned = {code: ["builtins:SystemExit", args, loc]
                for code, (_name, args, loc) in entry.meta["exceptions"].items()}
    assert poisoned
    header = store.header(key)
    assert store.remove(key)
    assert store.put(key, Entry(artifacts=entry.artifacts,
                                meta=dict(entry.meta, exceptions=poisoned)),
                     components=header.components)
    with pytest.raises(NotStorable, match="SystemExit"):
        entry_to_kernel(FRONTEND, store.load(key), sig, (9, 0, "a"), extensions=[])
    with fake_gpu((9, 0)), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        second = jit(store=store, debug=True, opt=False)(body)
        kernel = second.compile(sig)
    assert second.stats.compiles == 1
    assert {cls for cls, _a, _l in kernel.call_helper.exceptions.values()} == {ValueError}
    assert not second.stats.uncached and second.stats.cache_misses[sig] == 1
    stats = store.stats()
    assert (stats.hits, stats.misses, stats.corrupt, stats.quarantine_files) == (0, 2, 1, 1)
    assert store.load(key).meta["exceptions"] == entry.meta["exceptions"]  # replaced

"""A device function compiled before a global it reads changed is reused by numba-cuda for
later kernels: such a kernel's compile must not be stored under the key of the new globals
(kcache.dispatcher.dep_guard). Without a GPU (``fake_gpu``)."""
import re
import sys
import types as pytypes

import pytest

pytest.importorskip("numba.cuda")

import kcache  # noqa: E402
from tests.test_dispatcher_fakegpu import fake_gpu  # noqa: E402

SOURCE = '''
from numba import cuda
Z = 1.0

@cuda.jit(device=True)
def add_z(x):
    return x + Z

def kern(a):
    a[0] = add_z(a[0])

def other(a):
    a[0] = add_z(a[0]) * 2.0
'''


def _module(name: str, source: str):
    """A module of its own, as a program's would be; removed from sys.modules afterwards."""
    m = pytypes.ModuleType(name)
    sys.modules[name] = m
    exec(compile(source, f"{name}.py", "exec"), m.__dict__)
    yield m
    del sys.modules[name]


@pytest.fixture
def mod():
    """A device function reading a global."""
    yield from _module("dep_guard_kernels", SOURCE)


def _sig():
    from numba.cuda import types
    return (types.float32[::1],)


def _added(kernel) -> list:
    return re.findall(r"add\.f32[^;]*;", kernel._codelibrary.get_asm_str(cc=(9, 0, "a")))


def test_a_kernel_reusing_a_device_function_compiled_under_other_globals_is_not_stored(
        tmp_path, mod):
    from kcache.dispatcher import jit
    store = kcache.Store(tmp_path / "cache")
    with fake_gpu((9, 0)):
        jit(store=store)(mod.kern).compile(_sig())       # add_z compiled with Z = 1.0
        mod.Z = 10.0
        second = jit(store=store)(mod.kern)
        kernel = second.compile(_sig())                  # numba-cuda reuses add_z (Z = 1.0)
    assert "0f3F800000" in " ".join(_added(kernel))       # what numba-cuda runs: 1.0
    assert "compiled before a global it reads changed" in second.stats.uncached[_sig()]
    assert len(list(store.entries())) == 1               # only the Z = 1.0 key's entry
    # A process where Z is 10.0 from the start (add_z not yet compiled) misses and compiles
    # the 10.0 code; it is stored, and served next.
    mod.add_z.overloads.clear()
    with fake_gpu((9, 0)):
        fresh = jit(store=store)(mod.kern)
        assert "0f41200000" in " ".join(_added(fresh.compile(_sig())))
        assert fresh.stats.compiles == 1 and not fresh.stats.uncached
        served = jit(store=store)(mod.kern)
        served.compile(_sig())
    assert served.stats.cache_hits[_sig()] == 1


def test_kernels_sharing_a_device_function_are_all_stored(tmp_path, mod):
    from kcache.dispatcher import jit
    store = kcache.Store(tmp_path / "cache")
    with fake_gpu((9, 0)):
        first, second = jit(store=store)(mod.kern), jit(store=store)(mod.other)
        first.compile(_sig())
        second.compile(_sig())                           # reuses add_z: same globals
    assert not first.stats.uncached and not second.stats.uncached
    assert len(list(store.entries())) == 2


def test_compile_for_compiles_device_functions_afresh(tmp_path, mod):
    """compile_for (offline_target) never reuses a device function's compile: its entry holds
    the code of the globals as they are."""
    from kcache.dispatcher import compile_for, jit
    store = kcache.Store(tmp_path / "cache")
    with fake_gpu((9, 0)):
        jit(store=store)(mod.kern).compile(_sig())       # add_z compiled with Z = 1.0
    mod.Z = 10.0
    (key,) = compile_for(jit(store=store)(mod.other), "void(float32[::1])", cc=(9, 0),
                         store=store)
    ptx = store.load(key).artifacts["ptx"].decode()
    assert "4024000000000000" in ptx and "3FF0000000000000" not in ptx  # 10.0, not 1.0


OVERLOADED = '''
from numba.cuda.extending import overload, register_jitable
Z = 1.5

def foo(x):
    pass

@overload(foo)
def _foo(x):
    def impl(x):
        return x + Z
    return impl

@register_jitable
def bar(x):
    return x + Z

def k1(a):
    a[0] = foo(a[0]) + bar(a[0])

def k2(a):
    a[0] = (foo(a[0]) + bar(a[0])) * 2.0
'''


@pytest.fixture
def overloaded():
    """An @overload implementation and a register_jitable function reading a global."""
    yield from _module("dep_guard_overloaded", OVERLOADED)


def test_overload_and_register_jitable_compiles_made_under_other_globals_are_not_stored(
        tmp_path, overloaded):
    """numba-cuda compiles an @overload implementation (register_jitable's too) once per
    argument types and reuses it: a kernel reaching one after a global it reads changed is
    not stored (the key says Z = 10.0, numba-cuda's code holds 1.5)."""
    from kcache.dispatcher import jit
    store = kcache.Store(tmp_path / "cache")
    with fake_gpu((9, 0)):
        jit(store=store)(overloaded.k1).compile(_sig())
        overloaded.Z = 10.0
        second = jit(store=store)(overloaded.k2)
        second.compile(_sig())
    assert "compiled before a global it reads changed" in second.stats.uncached[_sig()]
    assert len(list(store.entries())) == 1


def test_kernels_reaching_the_same_overloads_are_all_stored(tmp_path, overloaded):
    from kcache.dispatcher import jit
    store = kcache.Store(tmp_path / "cache")
    with fake_gpu((9, 0)):
        first, second = jit(store=store)(overloaded.k1), jit(store=store)(overloaded.k2)
        first.compile(_sig())
        second.compile(_sig())
    assert not first.stats.uncached and not second.stats.uncached
    assert len(list(store.entries())) == 2

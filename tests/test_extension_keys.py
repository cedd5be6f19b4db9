"""User extension registrations are in every kernel's key (dispatcher/extensions.py,
docs/keys.md "Extensions"): an ``@overload`` of an operator, ``overload_method``,
``overload_attribute``, an ``@overload`` of a numpy function, ``type_callable`` +
``lower_builtin``, ``typeof_impl``, a data model and a rewrite pass, none of which the kernel's
bytecode names. Keys are computed in fresh processes (a module edited in place), no GPU."""

import json
import os
import subprocess
import sys

import pytest

from fixtures_keys import key_in_subprocess, write_modules

pytest.importorskip("numba.cuda")

pytestmark = [pytest.mark.slow,  # keys computed in fresh processes
              pytest.mark.compat]  # runs in every leg of tests/compat/run.sh (docs/compat.md)

KERNELS = """
    from numba import cuda

    import ext  # registers the extensions; the kernel reaches them through + and .twice()

    @cuda.jit
    def kern(out, a):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + a.twice()
"""

EXT = """
    import operator

    import numpy as np
    from numba.cuda import types
    from numba.cuda.core.rewrites import Rewrite, register_rewrite
    from numba.cuda.extending import (lower_builtin, models, overload, overload_attribute,
                                      overload_method, register_model, type_callable,
                                      typeof_impl)


    class Point:
        pass


    class PointType(types.Type):
        def __init__(self):
            super().__init__(name="Point")


    @typeof_impl.register(Point)
    def typeof_point(val, c):
        return PointType()


    @register_model(PointType)
    class PointModel(models.StructModel):
        def __init__(self, dmm, fe_type):
            super().__init__(dmm, fe_type, [("x", types.float32)])


    def scale():
        return 3


    @overload(operator.add)
    def add_points(a, b):
        if isinstance(a, PointType) and isinstance(b, PointType):
            def impl(a, b):
                return a.x + b.x * scale()
            return impl


    @overload_method(types.Array, "twice")
    def array_twice(arr):
        def impl(arr):
            return arr[0] * 2
        return impl


    @overload_attribute(PointType, "y")
    def point_y(p):
        def get(p):
            return p.x
        return get


    @overload(np.sinc)
    def my_sinc(x):
        def impl(x):
            return x + 0
        return impl


    def mything(x):
        pass


    @type_callable(mything)
    def type_mything(context):
        def typer(x):
            return x
        return typer


    @lower_builtin(mything, types.Float)
    def lower_mything(context, builder, sig, args):
        return args[0]


    @register_rewrite("before-inference")
    class NoRewrite(Rewrite):
        def match(self, func_ir, block, typemap, calltypes):
            return False

        def apply(self):
            return self.crnt_block
"""

# One edit per kind of registration: the body of its implementation (or of a function it
# calls), never anything the kernel names.
EDITS = {
    "operator overload": ("return a.x + b.x * scale()", "return a.x - b.x * scale()"),
    "function the overload calls": ("return 3", "return 4"),
    "overload_method": ("return arr[0] * 2", "return arr[0] * 3"),
    "overload_attribute": ("return p.x\n", "return -p.x\n"),
    "numpy function overload": ("return x + 0", "return x + 1"),
    "type_callable": ("return typer", "return None"),
    "lower_builtin": ("return args[0]", "return args[-1]"),
    "typeof_impl": ("return PointType()", "return types.float32"),
    "data model": ('[("x", types.float32)]', '[("x", types.float64)]'),
    "rewrite pass": ("return False", "return None"),
}


def project(directory, ext=EXT):
    return write_modules(directory, {"kernels": KERNELS, "ext": ext})


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    directory = project(tmp_path_factory.mktemp("ext") / "proj")
    return key_in_subprocess(directory, "kernels", "kern")


def test_the_registrations_are_in_the_key(baseline):
    extensions = baseline["components"]["extensions"]
    assert list(extensions) == ["ext"]  # grouped by the module that registered them
    assert baseline["compiled"] == 0


@pytest.mark.parametrize("what", sorted(EDITS))
def test_editing_an_extension_changes_the_key(baseline, tmp_path, what):
    old, new = EDITS[what]
    assert EXT.count(old) == 1, what
    directory = write_modules(tmp_path / "proj", {"kernels": KERNELS,
                                                  "ext": EXT.replace(old, new)})
    edited = key_in_subprocess(directory, "kernels", "kern")
    assert edited["key"] != baseline["key"]
    assert edited["components"]["source"] == baseline["components"]["source"]
    assert edited["components"]["extensions"] != baseline["components"]["extensions"]


def test_same_extensions_elsewhere_under_another_hash_seed_same_key(baseline, tmp_path):
    directory = project(tmp_path / "moved" / "deeper")
    again = key_in_subprocess(directory, "kernels", "kern", env={"PYTHONHASHSEED": "77"})
    assert again["key"] == baseline["key"]


# --- no user registration: keys as before ---------------------------------------------------

PLAIN = """
    import operator

    from numba import cuda


    @cuda.jit(device=True)
    def helper(x):
        return x * 2.0


    @cuda.jit
    def kern(out, a):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = operator.add(helper(a[i]), 1.0)
"""

# make_key of PLAIN's components, computed before the extensions component existed.
PINNED = "dcff1487bf2b1e68618c9f447989b12d0afe27ce8fd61aef35ecd9d27eded6f7"


def test_without_user_registrations_the_key_is_the_one_before(tmp_path):
    from importlib import metadata

    directory = write_modules(tmp_path / "plain", {"pinmod": PLAIN})
    result = key_in_subprocess(directory, "pinmod", "kern", toolchain={"numba": "0.68.1"},
                               config={"CUDA_ENABLE_NRT": False})
    assert "extensions" not in result["components"]
    assert result["components"]["opaque"] == []
    # The code digest is of this Python's bytecode, the options those numba-cuda gives.
    if sys.version_info[:2] != (3, 11) or metadata.version("numba-cuda") != "0.30.4":
        pytest.skip("the pinned key is of CPython 3.11 and numba-cuda 0.30.4")
    assert result["key"] == PINNED


def test_overloads_of_user_functions_stay_in_the_fingerprint(tmp_path):
    # register_jitable / @overload(user function): the fingerprint of a kernel that calls the
    # function carries them (docs/keys.md); they add no extensions component.
    helpers = """
        from numba.cuda.extending import overload, register_jitable

        @register_jitable
        def clamp(x):
            return min(x, 1.0)

        def twice(x):
            raise NotImplementedError

        @overload(twice)
        def _twice(x):
            def impl(x):
                return x * 2
            return impl
    """
    kern = """
        from numba import cuda
        import helpers

        @cuda.jit
        def kern(out, a):
            out[0] = helpers.clamp(a[0]) + helpers.twice(a[1])
    """
    directory = write_modules(tmp_path / "p", {"helpers": helpers, "kern": kern})
    result = key_in_subprocess(directory, "kern", "kern")
    assert "extensions" not in result["components"]
    assert "dep:helpers.twice" in result["components"]["source"]


CPU_RNG = """
    import numpy as np
    from numba import njit

    import plainkern

    @njit
    def draw(rng):
        return rng.random()

    draw(np.random.default_rng(1))  # numba's CPU target types a numpy Generator
    kern = plainkern.kern
"""


def test_numba_typing_a_numpy_generator_leaves_the_key_as_it_was(tmp_path):
    # numba's CPU target registers numpy's Generator methods (Cython functions) when it types
    # one: a library's registrations, so no extensions component and the same key. They were
    # taken for user code of module "_cython_3_x" (Python >= 3.11), and on Python 3.10, where
    # the Cython function type's __module__ is a member descriptor, every key raised TypeError.
    directory = write_modules(tmp_path / "p", {"plainkern": PLAIN, "cpurng": CPU_RNG})
    plain = key_in_subprocess(directory, "plainkern", "kern")
    after_rng = key_in_subprocess(directory, "cpurng", "kern")
    assert "extensions" not in after_rng["components"]
    assert after_rng["key"] == plain["key"]


# A library's own typeof of another package's class, registered as numba-cuda-mlir's typing
# context registers cupy.ndarray's and torch.Tensor's when it refreshes for a compile: the
# function lives in a library module (made here by exec under such a module name).
LIBRARY_TYPEOF = """
    from numba.cuda.typing.typeof import typeof_impl

    import plainkern
    import thirdparty

    import sys, types
    library = types.ModuleType("numba.cuda.kcache_test_integration")
    sys.modules[library.__name__] = library
    source = ("def typeof_tensor(val, c):\\n"
              "    from numba.cuda import types\\n"
              "    return types.float32[::1]\\n")
    exec(source, library.__dict__)
    namespace = library.__dict__
    typeof_impl.register(thirdparty.Tensor)({impl})
    kern = plainkern.kern
"""
THIRDPARTY = """
    class Tensor:
        pass
"""


@pytest.mark.parametrize("impl, counted", [("namespace['typeof_tensor']", False),
                                           ("lambda val, c: None", True)])
def test_a_librarys_own_typeof_of_another_packages_class_is_not_a_user_extension(
        tmp_path, impl, counted):
    # A key must not depend on whether the process compiled before (the registration is
    # made by the front-end's refresh): seen on the H200 with numba-cuda-mlir, cupy, torch.
    # The control: the same class registered with user code is an extension of the key.
    directory = write_modules(tmp_path / "p", {"plainkern": PLAIN, "thirdparty": THIRDPARTY,
                                               "integ": LIBRARY_TYPEOF.replace("{impl}", impl)})
    plain = key_in_subprocess(directory, "plainkern", "kern")
    after = key_in_subprocess(directory, "integ", "kern")
    assert ("extensions" in after["components"]) is counted
    assert (after["key"] != plain["key"]) is counted


def test_objects_of_cython_function_type_are_judged_by_their_own_module():
    import numpy as np

    from kcache.dispatcher import extensions

    method = np.random.Generator.random  # cython_function_or_method of numpy.random._generator
    assert extensions._user_objects([(method, np.random.default_rng, type(method))]) == {}


def test_a_module_that_is_not_a_str_is_a_user_module_of_no_name():
    from kcache.dispatcher import extensions

    Odd = type("Odd", (), {"__module__": 5})  # a class body may set __module__ to anything
    NoModule = type("NoModule", (), {"__module__": None})

    def fn():
        pass

    fn.__module__ = 7  # falls back on its globals' __name__ (this test module)
    parts = [(Odd(),), (NoModule,), (fn,), (Odd,)]
    found = extensions._user_objects(parts)
    assert found == {id(parts[0][0]): "?", id(NoModule): "?", id(fn): __name__, id(Odd): "?"}


# --- in one process -------------------------------------------------------------------------

_STABLE_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
import kcache
from kcache.dispatcher.frontends.numba_cuda import internals as _nc_internals
from kcache.dispatcher.frontends.numba_cuda import offline as _nc_offline
from kcache.dispatcher.frontends.numba_cuda import registries as _nc_registries
from kcache.dispatcher.components import kernel_components
from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
from numba.cuda import types
import usemeth

def key():
    return kcache.make_key(kernel_components(
        usemeth.kern, frontend=FRONTEND, signature="sig", cc=(9, 0),
        targetoptions=usemeth.kern.targetoptions, toolchain={}, config={}))

before = key()
_nc_internals.Kernel.bind = lambda self: None  # compiled down to LLVM, never loaded: no GPU
with _nc_offline.offline_target((9, 0)):
    usemeth.kern.compile((types.float32[::1], types.float32[::1]))
after = key()
import ext2  # a new user registration after the first key is seen too
print(json.dumps([before, after, key(), len(usemeth.kern.overloads)]))
"""

USEMETH = """
    from numba import cuda
    from numba.cuda import types
    from numba.cuda.extending import intrinsic, overload_method

    @overload_method(types.Array, "twice")
    def array_twice(arr):
        def impl(arr):
            return arr[0] * 2
        return impl

    @intrinsic
    def ident(typingctx, x):
        def codegen(context, builder, signature, args):
            return args[0]
        return x(x), codegen

    @cuda.jit
    def kern(out, a):
        out[0] = a.twice() + ident(a[1])
"""

EXT2 = """
    import operator
    from numba.cuda.extending import overload

    @overload(operator.sub)
    def sub(a, b):
        return None
"""


def test_compiling_registers_nothing_that_changes_later_keys(tmp_path):
    # Typing registers lowerings of its own (an intrinsic's, an overload_method's): a process
    # that compiled must keep computing the keys of one that only served from the cache.
    directory = write_modules(tmp_path / "m", {"usemeth": USEMETH, "ext2": EXT2})
    proc = subprocess.run([sys.executable, "-c", _STABLE_CHILD, str(directory)],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    before, after, with_ext2, compiled = json.loads(proc.stdout.strip().splitlines()[-1])
    assert compiled == 1
    assert before == after
    assert with_ext2 != after


def test_the_registries_read_are_those_the_cuda_contexts_install():
    # An upgrade of numba-cuda that installs another registry must fail here, not leave a
    # stale-kernel hole (dispatcher/frontends/numba_cuda/registries.py, _TYPING_REGISTRIES /
    # _LOWERING_REGISTRIES).
    from kcache.dispatcher.frontends.numba_cuda import internals as _nc_internals
    from kcache.dispatcher.frontends.numba_cuda import offline as _nc_offline
    from kcache.dispatcher.frontends.numba_cuda import registries as _nc_registries

    known, installed = _nc_registries.known_and_installed_registries()
    missing = [name for name, registry in installed if id(registry) not in known]
    assert not missing
    assert len(installed) >= 40


def test_explain_names_the_module_whose_extensions_changed():
    from kcache.dispatcher.misses import diff_components

    old = {"extensions": {"app.ext": "a" * 32}}
    assert diff_components(old, {"extensions": {"app.ext": "b" * 32}}) == [
        "extensions registered by app.ext changed"]
    assert diff_components({}, old) == ["new extensions registered by app.ext"]
    assert diff_components(old, {}) == ["extensions registered by app.ext removed"]

"""Keys of numba-cuda-mlir kernels (docs/mlir.md, "What is keyed"): the content fingerprint
applied to numba-cuda-mlir's vendored numba (callees in other modules, globals, closures,
defaults), the front-end's name and toolchain, the target chip and every jit option that
changes code, ``link=`` contents; never a path. The stale-kernel cases the numba-cuda key
matrix (tests/test_key_matrix.py) has, for numba-cuda-mlir kernels. No GPU: kernels are
decorated and fingerprinted, not compiled."""
import sys
import textwrap

import pytest

import kcache
from kcache.dispatcher.components import kernel_components

pytest.importorskip("numba_cuda_mlir")

from numba_cuda_mlir import cuda  # noqa: E402

from fixtures_keys import import_from, write_modules  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda_mlir.bridge import FRONTEND  # noqa: E402

pytestmark = pytest.mark.compat

SIG = "(array(float32, 1d, C), array(float32, 1d, C))"
TOOLCHAIN = {"numba": "0.68.1", "numba-cuda": "0.30.4", "llvmlite": "0.50.0", "nvvm": "13.0",
             "nvjitlink": "13.0", "cuda_runtime": "13.0", "python": "3.11.7",
             "kcache-format": "1", "numpy": "2.4.6", "cuda-bindings": "13.0.0"}

BASE = textwrap.dedent("""
    import math
    from numba_cuda_mlir import cuda
    import consts
    import helpers

    SCALE = 2.0

    @cuda.jit(device=True)
    def local(x):
        return x * SCALE

    @cuda.jit
    def kern(out, a):
        # a comment
        i = cuda.grid(1)
        if i < out.size:
            out[i] = local(a[i]) + helpers.shift(a[i]) + consts.OFFSET + math.pi
""")
CONSTS = "OFFSET = 1.0\n"
HELPERS = textwrap.dedent("""
    from numba_cuda_mlir import cuda

    @cuda.jit(device=True)
    def shift(x):
        return x + 1.0
""")


@pytest.fixture(autouse=True)
def _no_bytecode(monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    yield
    for name in ("kmod", "consts", "helpers"):
        sys.modules.pop(name, None)


def load(tmp_path, tag, source=BASE, consts=CONSTS, helpers=HELPERS):
    directory = write_modules(tmp_path / tag, {"kmod": source, "consts": consts,
                                               "helpers": helpers})
    import_from(directory, "consts")
    import_from(directory, "helpers")
    return import_from(directory, "kmod")


def components(kernel, **overrides):
    args = dict(frontend=FRONTEND, signature=SIG, cc=(9, 0),
                targetoptions=FRONTEND.key_targetoptions(kernel),
                toolchain=FRONTEND.key_toolchain(dict(TOOLCHAIN)))
    args.update(overrides)
    return kernel_components(kernel, **args)


def key(kernel, **overrides):
    return kcache.make_key(components(kernel, **overrides))


@pytest.mark.parametrize("old, new", [
    ("out[i] = local(a[i]) +", "out[i] = local(a[i]) -"),  # the kernel's code
    ("SCALE = 2.0", "SCALE = 2.5"),  # a global a device function reads
    ("return x * SCALE", "return x * SCALE * x"),  # a device function's body
])
def test_a_source_change_changes_the_key(tmp_path, old, new):
    assert old in BASE
    assert key(load(tmp_path, "a").kern) != key(load(tmp_path, "b", BASE.replace(old, new)).kern)


def test_a_callee_in_another_module_changed_changes_the_key(tmp_path):
    base = components(load(tmp_path, "a").kern)
    edited = components(load(tmp_path, "b", helpers=HELPERS.replace("x + 1.0", "x + 2.0")).kern)
    assert kcache.make_key(base) != kcache.make_key(edited)
    assert [k for k in base["source"] if base["source"][k] != edited["source"].get(k)] == [
        "dep:helpers.shift"]


def test_a_module_attribute_value_changes_the_key(tmp_path):
    base = components(load(tmp_path, "a").kern)
    edited = components(load(tmp_path, "b", consts="OFFSET = 1.5\n").kern)
    assert [k for k in base["source"] if base["source"][k] != edited["source"][k]] == [
        "attr:consts.OFFSET"]


def test_a_global_rebound_at_run_time_is_seen(tmp_path):
    mod = load(tmp_path, "a")
    before = key(mod.kern)
    mod.SCALE = 4.0
    assert key(mod.kern) != before
    mod.SCALE = 2.0
    assert key(mod.kern) == before


@pytest.mark.parametrize("old, new", [
    ("# a comment", "# another, longer comment"),
    ("SCALE = 2.0\n", "SCALE = 2.0\n\n\n# shifted\n\n"),
])
def test_comments_and_blank_lines_keep_the_key(tmp_path, old, new):
    assert key(load(tmp_path, "a").kern) == key(load(tmp_path, "b", BASE.replace(old, new)).kern)


def test_a_moved_folder_keeps_the_key(tmp_path):
    a, b = load(tmp_path, "one/place").kern, load(tmp_path, "another/deeper/place").kern
    assert a.py_func.__code__.co_filename != b.py_func.__code__.co_filename
    assert key(a) == key(b)


def test_closures_and_defaults():
    def make(k):
        @cuda.jit
        def scaled(out, a):
            out[0] = a[0] * k
        return scaled

    kernels = [make(k) for k in (1.0, 2.0, 3.0)]
    assert len({key(k) for k in kernels}) == 3 and key(make(2.0)) == key(kernels[1])

    def with_default(s):
        def f(out, a, scale=s):
            out[0] = a[0] * scale
        return cuda.jit(f)

    assert key(with_default(2.0)) != key(with_default(3.0))

    c = 1.0

    @cuda.jit
    def cell(out, a):
        out[0] = a[0] * c

    before = key(cell)
    c = 5.0  # noqa: F841 - rebinding the cell is the point
    assert key(cell) != before


#: jit options that change code -> a second value.
OPTION_CHANGES = {
    "fastmath": True, "lineinfo": True, "opt_level": 1, "max_registers": 32, "lto": True,
    "chip": "sm_80", "features": "+ptx80", "ptxas_options": "-O1", "launch_bounds": 128,
    "capi": True, "experimental_ast_transforms": True, "forceinline": True,
    "shared_memory_carveout": 50, "abi": "c",
}


def _kernel(**options):
    def body(out, a):
        out[0] = a[0]
    return cuda.jit(**options)(body)


@pytest.mark.parametrize("name", sorted(OPTION_CHANGES))
def test_each_code_option_changes_the_key(name):
    assert key(_kernel()) != key(_kernel(**{name: OPTION_CHANGES[name]}))


@pytest.mark.parametrize("options", [{"cache": True}, {"dump_ptx": True},
                                     {"print_after_all": True}, {"profile_jit": True}])
def test_what_is_no_code_is_not_in_the_key(options):
    assert key(_kernel()) == key(_kernel(**options))


def test_a_user_inline_cost_model_counts_by_content_the_default_by_name(monkeypatch):
    # The default cost model (a library function) is remembered by its name with the other
    # options (encoded once, not at each key); a user's is encoded by its content, every
    # time, so an edit of its body is seen.
    from kcache.dispatcher import components
    registries = FRONTEND.registries()
    plain = FRONTEND.key_targetoptions(_kernel())
    first = components._options(plain, registries)
    encoded = []
    real = components.encode_options
    monkeypatch.setattr(components, "encode_options",
                        lambda *a: encoded.append(1) or real(*a))
    assert components._options(plain, registries) is first and encoded == []
    ns: dict = {}
    exec("def cost(expr, caller, callee):\n    return True\n", ns)
    first = key(_kernel(inline=ns["cost"]))
    exec("def cost(expr, caller, callee):\n    return False\n", ns)
    assert key(_kernel(inline=ns["cost"])) != first != key(_kernel())


def test_the_chip_numba_cuda_mlir_resolved_is_not_the_one_keyed():
    """``_resolve_target_options`` writes the device's chip into targetoptions at each
    compile, and later compiles read it there (as without kcache, it stays): the key takes
    the chip the user gave (none), so a compile for sm_80 does not make the kernel's key for
    sm_90 that of sm_80."""
    kern = kcache.jit(_kernel().py_func, frontend="numba-cuda-mlir")
    before = key(kern)
    kern.targetoptions["chip"] = "sm_80"  # as numba-cuda-mlir leaves it after a compile
    kern._kcache_restore_chip()
    assert kern.targetoptions["chip"] == "sm_80" and key(kern) == before
    given = kcache.jit(_kernel().py_func, frontend="numba-cuda-mlir", chip="sm_90")
    given.targetoptions["chip"] = "sm_80"
    given._kcache_restore_chip()  # a chip the user gave is put back
    assert given.targetoptions["chip"] == "sm_90"


@pytest.mark.parametrize("field, value", [("numba-cuda-mlir", "0.6.1"), ("nvvm", "13.1"),
                                          ("nvjitlink", "13.1"), ("cuda-bindings", "13.1.0")])
def test_a_toolchain_upgrade_changes_the_key(field, value, monkeypatch):
    kern = _kernel()
    before = key(kern)
    if field == "numba-cuda-mlir":
        monkeypatch.setattr(FRONTEND, "version", lambda: value)
        assert key(kern) != before
        return
    assert key(kern, toolchain=FRONTEND.key_toolchain({**TOOLCHAIN, field: value})) != before


@pytest.mark.parametrize("field", ["numba", "numba-cuda", "llvmlite"])
def test_numba_cuda_s_toolchain_is_not_in_the_key(field):
    """numba-cuda-mlir vendors numba and compiles through its bundled MLIR: an upgrade of
    numba, numba-cuda or llvmlite beside it does not change its kernels."""
    kern = _kernel()
    assert key(kern, toolchain=FRONTEND.key_toolchain({**TOOLCHAIN, field: "9.9"})) == key(kern)
    assert field not in components(kern)["toolchain"]


def test_link_file_contents_count_not_their_folder(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for sub, text in (("a", "x"), ("b", "x")):
        (tmp_path / sub / "lib.ptx").write_text(text)
    one = key(_kernel(link=[str(tmp_path / "a" / "lib.ptx")]))
    assert one == key(_kernel(link=[str(tmp_path / "b" / "lib.ptx")]))
    (tmp_path / "b" / "lib.ptx").write_text("y")
    assert one != key(_kernel(link=[str(tmp_path / "b" / "lib.ptx")]))


def test_a_captured_device_array_is_uncacheable():
    class DeviceArray:  # what the fingerprint looks at: the CUDA array interface
        __cuda_array_interface__ = {"shape": (1,), "typestr": "<f4", "data": (0, False),
                                    "version": 3}

    held = DeviceArray()

    @cuda.jit
    def kern(out):
        out[0] = held[0]

    with pytest.raises(kcache.dispatcher.Uncacheable, match="device array"):
        components(kern)


def test_the_two_front_ends_never_share_a_key(tmp_path):
    """The same kernel source compiled by numba-cuda and by numba-cuda-mlir: their keys differ
    (the ``frontend`` component, and each its own toolchain), so neither serves the other."""
    ncuda = pytest.importorskip("numba.cuda")
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND as NUMBA_CUDA

    def body(out, a):
        out[0] = a[0]

    mlir = components(cuda.jit(body))
    theirs = kernel_components(ncuda.jit(body), frontend=NUMBA_CUDA, signature=SIG, cc=(9, 0),
                               targetoptions=ncuda.jit(body).targetoptions,
                               toolchain=dict(TOOLCHAIN))
    assert mlir["frontend"] == "numba-cuda-mlir" and "frontend" not in theirs
    assert mlir["source"] == theirs["source"]  # one fingerprint, numba's or the vendored one
    assert kcache.make_key(mlir) != kcache.make_key(theirs)

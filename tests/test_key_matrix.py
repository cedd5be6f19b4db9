"""The key matrix (in-process): every relevant change changes the kernel key, every irrelevant
change keeps it.  No GPU: kernels are decorated, fingerprinted and never compiled."""

import io
import sys
from textwrap import dedent

import pytest

import kcache
from kcache.dispatcher.components import (
    Uncacheable,
    arch_name,
    kernel_components,
    toolchain_components,
)

from fixtures_keys import SIG, import_from, write_modules

cuda = pytest.importorskip("numba.cuda")

pytestmark = pytest.mark.compat  # runs in every leg of tests/compat/run.sh (docs/compat.md)

TOOLCHAIN = {"numba": "0.68.1", "numba-cuda": "0.30.4", "llvmlite": "0.50.0", "nvvm": "2.0",
             "nvjitlink": "13.0", "cuda_runtime": "13.0", "python": "3.11.7",
             "kcache-format": "1", "numpy": "2.4.6"}

BASE = dedent("""
    import math
    from numba import cuda
    import consts

    SCALE = 2.0

    @cuda.jit(device=True)
    def helper(x):
        return x * SCALE

    @cuda.jit
    def kern(out, a):
        # a comment
        i = cuda.grid(1)
        if i < out.size:
            out[i] = helper(a[i]) + consts.OFFSET + math.pi
""")

CONSTS = "OFFSET = 1.0\n"


@pytest.fixture(autouse=True)
def _no_bytecode(monkeypatch):
    # Modules are re-written under one name; stale .pyc files would hide edits.
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    yield
    for name in ("kmod", "consts", "mathbits", "helpers", "ovl"):  # the modules load() writes
        sys.modules.pop(name, None)


def components(kernel, **overrides):
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
    args = dict(frontend=FRONTEND, signature=SIG, cc=(9, 0), targetoptions=kernel.targetoptions,
                toolchain=TOOLCHAIN)
    args.update(overrides)
    return kernel_components(kernel, **args)


def key(kernel, **overrides):
    return kcache.make_key(components(kernel, **overrides))


def load(tmp_path, tag, source=BASE, consts=CONSTS, extra=None):
    """Write the kernel module (name ``kmod``) and ``consts`` under tmp_path/tag, import."""
    files = {"kmod": source, "consts": consts, **(extra or {})}
    directory = write_modules(tmp_path / tag, files)
    import_from(directory, "consts")
    for name in extra or {}:
        import_from(directory, name)
    return import_from(directory, "kmod")


# --- source changes -----------------------------------------------------------------------

SOURCE_CHANGES = {
    "code": ("out[i] = helper(a[i]) +", "out[i] = helper(a[i]) -"),
    "constant": ("if i < out.size:", "if i + 0 < out.size:"),
    "global constant": ("SCALE = 2.0", "SCALE = 2.5"),
    "device function body": ("return x * SCALE", "return x * SCALE * x"),
    "module attribute name": ("consts.OFFSET", "consts.OFFSET2"),
}


@pytest.mark.parametrize("change", sorted(SOURCE_CHANGES))
def test_source_change_changes_key(tmp_path, change):
    old, new = SOURCE_CHANGES[change]
    assert old in BASE
    base = load(tmp_path, "a").kern
    edited = load(tmp_path, "b", BASE.replace(old, new), consts=CONSTS + "OFFSET2 = 3.0\n").kern
    assert key(base) != key(edited)


def test_module_attribute_value_changes_key(tmp_path):
    base = load(tmp_path, "a").kern
    edited = load(tmp_path, "b", consts="OFFSET = 1.5\n").kern
    c1, c2 = components(base), components(edited)
    assert kcache.make_key(c1) != kcache.make_key(c2)
    assert [k for k in c1["source"] if c1["source"][k] != c2["source"][k]] == [
        "attr:consts.OFFSET"
    ]


IRRELEVANT = {
    "comment": ("# a comment", "# another, longer comment"),
    "whitespace": ("out[i] = helper(a[i]) + consts", "out[i]  =  helper( a[i] ) + consts"),
    "blank lines": ("SCALE = 2.0\n", "SCALE = 2.0\n\n\n\n# shifted\n\n"),
}


@pytest.mark.parametrize("change", sorted(IRRELEVANT))
def test_irrelevant_change_keeps_key(tmp_path, change):
    old, new = IRRELEVANT[change]
    assert old in BASE
    base = load(tmp_path, "a").kern
    edited = load(tmp_path, "b", BASE.replace(old, new)).kern
    assert edited.py_func.__code__.co_firstlineno >= base.py_func.__code__.co_firstlineno
    assert key(base) == key(edited)


def test_blank_lines_change_key_of_lineinfo_kernel(tmp_path):
    # Line tables are in the cubin of debug/lineinfo kernels: there, shifted lines miss.
    old, new = IRRELEVANT["blank lines"]
    base = load(tmp_path, "a").kern
    edited = load(tmp_path, "b", BASE.replace(old, new)).kern
    opts = dict(base.targetoptions, lineinfo=True)
    assert key(base, targetoptions=opts) != key(edited, targetoptions=opts)
    assert "lines" in components(base, targetoptions=opts)["source"]


def test_moved_directory_keeps_key(tmp_path):
    a = load(tmp_path, "one/place").kern
    b = load(tmp_path, "another/deeper/place").kern
    assert a.py_func.__code__.co_filename != b.py_func.__code__.co_filename
    assert key(a) == key(b)


def test_closures_made_in_a_loop_get_distinct_keys():
    def make(k):
        @cuda.jit
        def scaled(out, a):
            out[0] = a[0] * k

        return scaled

    kernels = [make(k) for k in (1.0, 2.0, 3.0)]
    keys = {key(k) for k in kernels}
    assert len(keys) == 3
    assert key(make(2.0)) == key(kernels[1])


def test_default_value_changes_key():
    def make(s):
        def f(out, a, scale=s):
            out[0] = a[0] * scale

        return cuda.jit(f)

    assert key(make(2.0)) != key(make(3.0))
    assert "default:scale" in components(make(2.0))["source"]


def test_global_rebound_at_runtime_is_seen(tmp_path):
    mod = load(tmp_path, "a")
    before = key(mod.kern)
    assert key(mod.kern) == before  # warm (cached) path
    mod.SCALE = 4.0
    assert key(mod.kern) != before
    mod.SCALE = 2.0
    assert key(mod.kern) == before


def test_closure_cell_rebound_is_seen():
    k = 1.0

    @cuda.jit
    def kern(out, a):
        out[0] = a[0] * k

    before = key(kern)
    k = 5.0  # noqa: F841 - rebinding the cell is the point
    assert key(kern) != before


# --- values of globals ---------------------------------------------------------------------

VALUE_CASES = {
    "int": ("3", "4"),
    "huge int": ("10 ** 5000", "10 ** 5000 + 1"),  # beyond str()'s 4,300-digit limit
    "float vs int": ("3", "3.0"),
    "bool vs int": ("1", "True"),
    "string": ("'a'", "'b'"),
    "bytes": ("b'a'", "b'b'"),
    "tuple": ("(1, 2)", "(1, 3)"),
    "nested tuple": ("((1, 2), 3)", "((1, 2), 4)"),
    "numpy array content": ("np.arange(4.0)", "np.arange(4.0) * 2"),
    "numpy array dtype": ("np.arange(4, dtype=np.float32)", "np.arange(4, dtype=np.float64)"),
    "numpy array shape": ("np.zeros((2, 2))", "np.zeros(4)"),
    "numpy scalar": ("np.float32(1)", "np.float64(1)"),
    "dtype": ("np.dtype(np.int32)", "np.dtype(np.int64)"),
    "record dtype": ("np.dtype([('x', np.float32), ('y', np.int32)])",
                     "np.dtype([('x', np.float32), ('y', np.int64)])"),
    "aligned record dtype": ("np.dtype([('x', np.int8), ('y', np.int32)])",
                             "np.dtype([('x', np.int8), ('y', np.int32)], align=True)"),
    "enum member": ("Color.RED", "Color.BLUE"),
    "numba type": ("types.float32", "types.float64"),
}

VALUE_MODULE = dedent("""
    import enum
    import numpy as np
    from numba import cuda
    from numba.core import types

    class Color(enum.IntEnum):
        RED = 1
        BLUE = 2

    VALUE = {value}

    @cuda.jit
    def kern(out, a):
        out[0] = VALUE
""")


@pytest.mark.parametrize("case", sorted(VALUE_CASES))
def test_global_value_changes_key(tmp_path, case):
    old, new = VALUE_CASES[case]
    a = load(tmp_path, "a", VALUE_MODULE.format(value=old)).kern
    a_again = load(tmp_path, "a2", VALUE_MODULE.format(value=old)).kern
    b = load(tmp_path, "b", VALUE_MODULE.format(value=new)).kern
    assert key(a) == key(a_again)
    assert key(a) != key(b)


def test_enum_class_member_value_changes_key(tmp_path):
    src = VALUE_MODULE.format(value="0").replace("out[0] = VALUE", "out[0] = Color.RED")
    a = load(tmp_path, "a", src).kern
    b = load(tmp_path, "b", src.replace("RED = 1", "RED = 7")).kern
    assert key(a) != key(b)


def test_numpy_array_mutated_in_place_is_seen(tmp_path):
    mod = load(tmp_path, "a", VALUE_MODULE.format(value="np.zeros(3)"))
    before = key(mod.kern)
    mod.VALUE[1] = 5.0
    assert key(mod.kern) != before


# --- dependencies ----------------------------------------------------------------------------

DEP_KERNEL = dedent("""
    from numba import cuda
    import mathbits

    @cuda.jit
    def kern(out, a):
        out[0] = mathbits.step(a[0])
""")

MATHBITS = dedent("""
    from numba import cuda

    LIMIT = 1.0

    @cuda.jit(device=True)
    def step(x):
        return x if x < LIMIT else LIMIT
""")


@pytest.mark.parametrize("old,new", [
    ("return x if x < LIMIT else LIMIT", "return x if x <= LIMIT else LIMIT"),
    ("LIMIT = 1.0", "LIMIT = 2.0"),
    ("@cuda.jit(device=True)", "@cuda.jit(device=True, fastmath=True)"),
])
def test_device_function_in_other_module_changes_key(tmp_path, old, new):
    a = load(tmp_path, "a", DEP_KERNEL, extra={"mathbits": MATHBITS}).kern
    b = load(tmp_path, "b", DEP_KERNEL, extra={"mathbits": MATHBITS.replace(old, new)}).kern
    ca, cb = components(a), components(b)
    assert kcache.make_key(ca) != kcache.make_key(cb)
    changed = [k for k in ca["source"] if ca["source"][k] != cb["source"].get(k)]
    assert changed == ["dep:mathbits.step"]


def test_register_jitable_function_changes_key(tmp_path):
    helper = """
        from numba.cuda.extending import register_jitable

        @register_jitable
        def clamp(x):
            return min(x, 1.0)
    """
    kern = DEP_KERNEL.replace("mathbits.step", "helpers.clamp").replace("import mathbits",
                                                                         "import helpers")
    a = load(tmp_path, "a", kern, extra={"helpers": helper}).kern
    b = load(tmp_path, "b", kern, extra={"helpers": helper.replace("1.0", "2.0")}).kern
    assert "dep:helpers.clamp" in components(a)["source"]
    assert key(a) != key(b)


def test_overload_implementation_changes_key(tmp_path):
    helper = """
        from numba.cuda.extending import overload

        def twice(x):
            raise NotImplementedError

        @overload(twice)
        def _twice(x):
            def impl(x):
                return x * 2
            return impl
    """
    kern = DEP_KERNEL.replace("mathbits.step", "ovl.twice").replace("import mathbits",
                                                                    "import ovl")
    a = load(tmp_path, "a", kern, extra={"ovl": helper}).kern
    b = load(tmp_path, "b", kern, extra={"ovl": helper.replace("x * 2", "x * 3")}).kern
    assert key(a) != key(b)


def test_recursive_device_functions_terminate_and_agree(tmp_path):
    src = """
        from numba import cuda

        @cuda.jit(device=True)
        def ping(n):
            return 0 if n <= 0 else pong(n - 1)

        @cuda.jit(device=True)
        def pong(n):
            return 1 if n <= 0 else ping(n - 1)

        @cuda.jit
        def kern(out, a):
            out[0] = ping(3)
    """
    from kcache.dispatcher.fingerprint import fingerprint as fingerprint_of
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND

    def fingerprint(fn):
        return fingerprint_of(fn, FRONTEND.registries())

    m1 = load(tmp_path, "a", src)
    order1 = (fingerprint(m1.ping).digest, fingerprint(m1.pong).digest)
    m2 = load(tmp_path, "b", src)
    order2 = (fingerprint(m2.ping).digest, fingerprint(m2.pong).digest)
    m3 = load(tmp_path, "c", src)
    pong_first = fingerprint(m3.pong).digest
    assert order1 == order2
    assert pong_first == order1[1]  # independent of which function was fingerprinted first
    m4 = load(tmp_path, "d", src.replace("return 1 if", "return 2 if"))
    assert fingerprint(m4.ping).digest != order1[0]


# --- opaque and uncacheable values ------------------------------------------------------------


class _FakeDeviceArray:
    __cuda_array_interface__ = {"shape": (1,), "typestr": "<f4", "data": (0, False),
                                "version": 3}


def test_captured_device_array_is_uncacheable():
    darr = _FakeDeviceArray()

    @cuda.jit
    def kern(out, a):
        out[0] = darr[0]

    with pytest.raises(Uncacheable, match="device array"):
        components(kern)


class Knob:
    """An arbitrary object: hashed by identity (type + deterministic repr) and reported."""

    def __repr__(self):
        return "Knob(3)"


KNOB = Knob()


def test_opaque_global_is_reported():
    @cuda.jit
    def kern(out, a):
        out[0] = KNOB

    comps = components(kern)
    assert any("Knob" in reason for reason in comps["opaque"])
    assert comps == components(kern)


COST_MODEL = dedent("""
    from numba import cuda

    LIMIT = 3

    def cost(expr, caller, callee):
        return LIMIT > 2

    @cuda.jit(device=True, inline=cost)
    def helper(x):
        return x + 1

    @cuda.jit
    def kern(out, a):
        out[0] = helper(a[0])
""")


def test_function_held_by_a_device_function_option_is_followed(tmp_path):
    # An inline= cost model is code that decides the kernel's code: a global it reads counts,
    # also after the key was computed (and the fingerprint cached) once.
    mod = load(tmp_path, "a", COST_MODEL)
    before = key(mod.kern)
    assert key(mod.kern) == before
    mod.LIMIT = 1
    assert key(mod.kern) != before
    mod.LIMIT = 3
    assert key(mod.kern) == before


# --- non-source components --------------------------------------------------------------------


def _simple_kernel():
    @cuda.jit
    def kern(out, a):
        out[0] = a[0]

    return kern


OPTION_CHANGES = {
    "debug": True, "lineinfo": True, "fastmath": True, "opt": False, "max_registers": 32,
    "lto": False, "inline": "always", "forceinline": True, "launch_bounds": (128, 2),
    "shared_memory_carveout": "MaxL1", "some_future_option": 3, "cache_hints": "ld.cg",
}


@pytest.mark.parametrize("name", sorted(OPTION_CHANGES))
def test_each_option_changes_key(name):
    kern = _simple_kernel()
    opts = dict(kern.targetoptions)
    changed = dict(opts, **{name: OPTION_CHANGES[name]})
    assert key(kern, targetoptions=opts) != key(kern, targetoptions=changed)


def test_extensions_identity_and_fastmath_flags_change_key():
    class ExtA:
        pass

    class ExtB:
        pass

    kern = _simple_kernel()
    opts = dict(kern.targetoptions)
    keys = {key(kern, targetoptions=dict(opts, extensions=[ext])) for ext in (ExtA(), ExtB())}
    assert len(keys) == 2
    assert key(kern, targetoptions=dict(opts, extensions=[ExtA()])) in keys  # identity by type
    assert (key(kern, targetoptions=dict(opts, fastmath={"nsz"}))
            != key(kern, targetoptions=dict(opts, fastmath={"nsz", "arcp"})))


def test_debug_zero_equals_debug_false():
    kern = _simple_kernel()
    opts = dict(kern.targetoptions)
    zero, false = dict(opts, debug=0), dict(opts, debug=False)
    assert key(kern, targetoptions=zero) == key(kern, targetoptions=false)


@pytest.mark.parametrize("field,a,b", [
    ("signature", SIG, "(array(float32, 1d, A), array(float32, 1d, C))"),
    ("cc", (8, 0), (9, 0)),
    ("cc", (8, 0), (8, 6)),
    ("cc", (9, 0), (10, 0)),
    ("output", "cubin", "ptx"),
    ("cache_key", None, "release-1"),
    ("cache_key", "a", "b"),
    ("launch_config", None, [[1, 1, 1], [128, 1, 1], 0]),
    ("launch_config", [[1, 1, 1], [128, 1, 1], 0], [[1, 1, 1], [64, 1, 1], 0]),
])
def test_target_and_user_components_change_key(field, a, b):
    kern = _simple_kernel()
    assert key(kern, **{field: a}) != key(kern, **{field: b})


@pytest.mark.parametrize("field", sorted(TOOLCHAIN))
def test_each_toolchain_field_changes_key(field):
    kern = _simple_kernel()
    changed = dict(TOOLCHAIN, **{field: TOOLCHAIN[field] + ".1"})
    assert key(kern) != key(kern, toolchain=changed)


# numba-cuda's own spellings of cc 9.0; it compiles every one of them as sm_90a
# (CUDACodeLibrary._ensure_cc adds "a" for cc >= 9.0), so they must share one key.
CC_90_FORMS = [(9, 0), (9, 0, "a"), (9, 0, ""), [9, 0], "9.0", "9.0a", "sm_90", "sm_90a",
               "compute_90", "90", 90]


def test_every_form_of_cc_90_gives_one_key():
    kern = _simple_kernel()
    keys = {key(kern, cc=form) for form in CC_90_FORMS}
    assert len(keys) == 1
    assert components(kern, cc="sm_90")["target"]["cc"] == "sm_90a"
    assert key(kern, cc="8.0") == key(kern, cc=(8, 0)) == key(kern, cc=80) != keys.pop()


def test_arch_names():
    assert arch_name((8, 0)) == "sm_80"
    assert arch_name((8, 6)) == "sm_86"
    assert arch_name((9, 0)) == "sm_90a"
    assert arch_name((9, 0, "a")) == "sm_90a"
    assert arch_name((9, 0, "")) == "sm_90a"  # "" = no suffix given: numba-cuda adds "a"
    assert arch_name((10, 0)) == "sm_100a"
    for bad in ((9,), (9, 0, "x"), (9.0, 0), None, (8, 0, "a")):
        with pytest.raises(ValueError, match="compute capability"):
            arch_name(bad)


def test_toolchain_components_include_compiler_versions():
    tc = toolchain_components()
    for name in ("numba", "numba-cuda", "llvmlite", "python", "kcache-format", "nvvm",
                 "nvjitlink", "numpy"):
        assert isinstance(tc.get(name), str) and tc[name], name
    assert toolchain_components() == tc and toolchain_components() is not tc


# --- link= ---------------------------------------------------------------------------------


def test_link_file_content_counts_not_its_directory(tmp_path):
    kern = _simple_kernel()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        (tmp_path / d / "ext.ptx").write_text("// ptx v1\n")
    opts = dict(kern.targetoptions)
    k_a = key(kern, targetoptions=dict(opts, link=[str(tmp_path / "a" / "ext.ptx")]))
    k_b = key(kern, targetoptions=dict(opts, link=[str(tmp_path / "b" / "ext.ptx")]))
    assert k_a == k_b
    (tmp_path / "b" / "ext.ptx").write_text("// ptx v2\n")
    assert key(kern, targetoptions=dict(opts, link=[str(tmp_path / "b" / "ext.ptx")])) != k_a
    assert k_a != key(kern, targetoptions=opts)


def test_unreadable_link_file_is_uncacheable(tmp_path):
    kern = _simple_kernel()
    opts = dict(kern.targetoptions, link=[str(tmp_path / "missing.cu")])
    with pytest.raises(Uncacheable, match="missing.cu"):
        components(kern, targetoptions=opts)


def test_headers_a_linked_cu_source_includes_count(tmp_path, monkeypatch):
    """NVRTC finds a quoted header in the working directory: an edited header is another key
    (it served the cubin of the old header); a source without headers keeps its old key."""
    from numba.cuda import CUSource
    kern = _simple_kernel()
    opts = dict(kern.targetoptions)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain.cu").write_text('extern "C" __device__ int f(int* r) { return 0; }\n')
    plain = key(kern, targetoptions=dict(opts, link=[str(tmp_path / "plain.cu")]))
    (tmp_path / "h.cuh").write_text("#define MAGIC 7\n")
    (tmp_path / "sub.cuh").write_text('#include "h.cuh"\n')
    source = '#include "sub.cuh"\n  #  include <cuda_fp16.h>\nextern "C" __device__ int f();\n'
    (tmp_path / "f.cu").write_text(source)
    link = dict(opts, link=[str(tmp_path / "f.cu")])
    as_object = dict(opts, link=[CUSource(source.encode())])
    k7, o7 = key(kern, targetoptions=link), key(kern, targetoptions=as_object)
    (tmp_path / "h.cuh").write_text("#define MAGIC 9\n")  # included through sub.cuh
    assert key(kern, targetoptions=link) != k7
    assert key(kern, targetoptions=as_object) != o7
    (tmp_path / "h.cuh").write_text("#define MAGIC 7\n")
    assert key(kern, targetoptions=link) == k7
    # the key of a source without headers is the one made before headers counted
    (tmp_path / "plain.cu").write_text('extern "C" __device__ int f(int* r) { return 0; }\n')
    assert plain == key(kern, targetoptions=dict(opts, link=[str(tmp_path / "plain.cu")]))
    from kcache.dispatcher.components import link_digests
    digest = link_digests([str(tmp_path / "plain.cu")])["plain.cu"]
    assert digest == __import__("hashlib").blake2b((tmp_path / "plain.cu").read_bytes(),
                                                   digest_size=16).hexdigest()
    # a quoted header found nowhere here is the toolkit's (NVRTC's -I paths), or in #if 0:
    # such a source keeps the key it had before headers counted
    (tmp_path / "toolkit.cu").write_text('#include "cuda_fp16.h"\n#if 0\n#include "dbg.h"\n'
                                         '#endif\nextern "C" __device__ int f();\n')
    digest = link_digests([str(tmp_path / "toolkit.cu")])["toolkit.cu"]
    assert digest == __import__("hashlib").blake2b((tmp_path / "toolkit.cu").read_bytes(),
                                                   digest_size=16).hexdigest()


def test_a_header_included_through_a_symlinked_folder_is_looked_up_beside_the_link(
        tmp_path, monkeypatch):
    """NVRTC opens lnk/h1.h and looks for its "h2.h" in lnk/, not beside the link's target."""
    from kcache.dispatcher.components import link_digests
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real").mkdir()
    (tmp_path / "lnk").mkdir()
    (tmp_path / "real" / "h1.h").write_text('#include "h2.h"\n')
    (tmp_path / "lnk" / "h1.h").symlink_to(tmp_path / "real" / "h1.h")
    (tmp_path / "lnk" / "h2.h").write_text("#define V 1\n")
    (tmp_path / "top.cu").write_text('#include "lnk/h1.h"\n')
    before = link_digests([str(tmp_path / "top.cu")])
    (tmp_path / "lnk" / "h2.h").write_text("#define V 2\n")
    assert link_digests([str(tmp_path / "top.cu")]) != before


def test_linkable_code_objects():
    from numba.cuda import PTXSource

    kern = _simple_kernel()
    opts = dict(kern.targetoptions)
    k1 = key(kern, targetoptions=dict(opts, link=[PTXSource(b"// a", name="x")]))
    assert k1 == key(kern, targetoptions=dict(opts, link=[PTXSource(io.BytesIO(b"// a"),
                                                                    name="x")]))
    assert k1 != key(kern, targetoptions=dict(opts, link=[PTXSource(b"// b", name="x")]))
    with pytest.raises(Uncacheable, match="callbacks"):
        components(kern, targetoptions=dict(
            opts, link=[PTXSource(b"// a", name="x", setup_callback=lambda m: None)]))


def test_fingerprinting_does_not_compile(tmp_path):
    mod = load(tmp_path, "a")
    components(mod.kern)
    assert len(mod.kern.overloads) == 0
    assert len(mod.helper.overloads) == 0

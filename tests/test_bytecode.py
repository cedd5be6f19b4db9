"""dispatcher/bytecode.references reads co_code directly; it must find exactly what a walk with
``dis.get_instructions`` finds, on every code object we can lay hands on."""
import dis
import itertools
import os
import sys
import types

import pytest

from kcache.dispatcher.bytecode import references

pytestmark = pytest.mark.compat  # runs in every leg of tests/compat/run.sh (docs/compat.md)


def reference(code):
    """The same analysis through ``dis`` (EXTENDED_ARG is a prefix, never a chain break)."""
    found, current = [], None
    for ins in dis.get_instructions(code):
        if ins.opname == "EXTENDED_ARG":
            continue
        if ins.opname == "LOAD_GLOBAL":
            current = [ins.argval]
            found.append(("g", current))
        elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and current is not None:
            current.append(ins.argval)
        elif ins.opname == "LOAD_DEREF" and ins.argval in code.co_freevars:
            current = [ins.argval]
            found.append(("d", current))
        else:
            current = None
    return [(kind, chain[0], tuple(chain[1:])) for kind, chain in found]


def _all_code(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _all_code(const)


def _corpus(per_root=2500):
    """Code objects of the standard library's top-level modules and of numba-cuda's (the first
    ``per_root`` of each, in file name order)."""
    roots = [os.path.dirname(os.__file__)]
    try:
        import numba.cuda
        roots.append(os.path.dirname(numba.cuda.__file__))
    except ImportError:
        pass
    for root in roots:
        yield from itertools.islice(_codes_under(root), per_root)


def _codes_under(root):
    for name in sorted(os.listdir(root)):
        if not name.endswith(".py"):
            continue
        path = os.path.join(root, name)
        try:
            with open(path, encoding="utf-8") as f:
                top = compile(f.read(), path, "exec")
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        yield from _all_code(top)


@pytest.mark.slow
def test_same_references_as_dis_on_the_stdlib_and_numba_cuda():
    checked = 0
    for code in _corpus():
        assert references(code) == reference(code), (code.co_filename, code.co_name)
        checked += 1
    assert checked >= 2500


def _synthetic():
    # > 256 names forces EXTENDED_ARG in front of LOAD_GLOBAL / LOAD_ATTR; closures over
    # arguments (cells that share a local's slot) and over locals; methods and attributes.
    names = ", ".join(f"g{i}" for i in range(300))
    body = "\n    ".join(f"g{i}.a{i}.b" for i in range(300))
    source = (f"def wide():\n    global {names}\n    {body}\n    return late.x.y(1)\n"
              "def outer(arg):\n    loc = 1\n    def inner():\n"
              "        return arg.real, loc.imag.real, arg.bit_length(), glob.attr\n"
              "    return inner\n")
    namespace = {}
    exec(compile(source, "<synthetic>", "exec"), namespace)
    return namespace


def test_extended_args_and_closures():
    ns = _synthetic()
    wide = references(ns["wide"].__code__)
    assert wide[0] == ("g", "g0", ("a0", "b")) and wide[299] == ("g", "g299", ("a299", "b"))
    assert wide[-1] == ("g", "late", ("x", "y"))
    inner = references(ns["outer"](2).__code__)
    assert ("d", "arg", ("real",)) in inner and ("d", "loc", ("imag", "real")) in inner
    assert ("d", "arg", ("bit_length",)) in inner and ("g", "glob", ("attr",)) in inner
    for fn in (ns["wide"], ns["outer"], ns["outer"](2)):
        assert references(fn.__code__) == reference(fn.__code__)


def test_nested_code_is_not_entered():
    def outer():
        def nested():
            return hidden.x
        return visible.y

    assert references(outer.__code__) == [("g", "visible", ("y",))]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="no inline caches before 3.11")
def test_inline_caches_do_not_break_chains():
    def f():
        return mod.a.b.c.d  # noqa: F821 - each LOAD_ATTR is followed by CACHE entries

    assert references(f.__code__) == [("g", "mod", ("a", "b", "c", "d"))]

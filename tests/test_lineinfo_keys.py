"""Line numbers in keys: in the key exactly where numba-cuda puts them in the code.

A kernel compiled with ``lineinfo``/``debug`` carries PTX ``.loc`` lines (and ``.file`` paths)
for itself and for every device function compiled with line information that it calls, in any
module, directly or through functions compiled without it. Shifting lines there must change
the key; shifting lines anywhere else must not. Real modules are written to a temp dir and
rewritten in place (same path), and ``compile_for`` checks the PTX of the served entries.
"""
import re
import sys

import pytest

pytest.importorskip("numba.cuda")

import kcache  # noqa: E402
from kcache.dispatcher import compile_for_report  # noqa: E402
from kcache.dispatcher.components import kernel_components  # noqa: E402

from fixtures_keys import import_from, write_modules  # noqa: E402

pytestmark = pytest.mark.compat  # runs in every leg of tests/compat/run.sh (docs/compat.md)

SIG = "void(float32[::1], float32[::1])"
SHIFT = 7  # lines inserted at the top of a module

INNER = """
    from numba import cuda

    @cuda.jit(device=True, lineinfo=True)
    def inner(x):
        y = x * 2.0
        return y + 1.0

    @cuda.jit(device=True)
    def plain(x):
        return x * 3.0
"""

OUTER = """
    from numba import cuda
    import innermod

    @cuda.jit(device=True)
    def outer(x):
        return innermod.inner(x) * 5.0
"""

KERNELS = """
    from numba import cuda
    import innermod
    import outermod

    @cuda.jit(lineinfo=True)
    def li_direct(out, a):
        i = cuda.grid(1)
        out[i] = innermod.inner(a[i])

    @cuda.jit(lineinfo=True)
    def li_through(out, a):
        i = cuda.grid(1)
        out[i] = outermod.outer(a[i])

    @cuda.jit(lineinfo=True)
    def li_plain(out, a):
        i = cuda.grid(1)
        out[i] = innermod.plain(a[i])

    @cuda.jit(debug=True, opt=False)
    def dbg_direct(out, a):
        i = cuda.grid(1)
        out[i] = innermod.inner(a[i])

    @cuda.jit
    def no_li(out, a):
        i = cuda.grid(1)
        out[i] = innermod.inner(a[i])
"""


@pytest.fixture(autouse=True)
def _fresh_modules(monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # rewritten files, one path
    yield
    for name in ("innermod", "outermod", "kernmod"):
        sys.modules.pop(name, None)


def _shifted(source: str) -> str:
    return "\n" * SHIFT + source


def load(directory, inner=INNER, outer=OUTER):
    """(Re)write the three modules in ``directory`` and import them afresh."""
    write_modules(directory, {"innermod": inner, "outermod": outer, "kernmod": KERNELS})
    import_from(directory, "innermod")
    import_from(directory, "outermod")
    return import_from(directory, "kernmod")


def components(kernel):
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
    return kernel_components(kernel, frontend=FRONTEND,
                             signature="(array(float32, 1d, C), array(float32, 1d, C))",
                             cc=(9, 0), targetoptions=kernel.targetoptions,
                             toolchain={"numba-cuda": "0.30.4"})


def keys_of(mod):
    return {name: kcache.make_key(components(getattr(mod, name)))
            for name in ("li_direct", "li_through", "li_plain", "dbg_direct", "no_li")}


def test_shifting_a_lineinfo_device_function_changes_exactly_the_kernels_that_carry_its_lines(
        tmp_path):
    directory = tmp_path / "proj"
    before = keys_of(load(directory))
    after = keys_of(load(directory, inner=_shifted(INNER)))
    changed = {name for name in before if before[name] != after[name]}
    # inner (lineinfo) is in the PTX of lineinfo/debug kernels calling it, directly or
    # through outer (compiled without line info); plain has no line info; a kernel without
    # line info has no .loc lines at all.
    assert changed == {"li_direct", "li_through", "dbg_direct"}


def test_the_changed_part_names_the_device_function(tmp_path):
    directory = tmp_path / "proj"
    base = components(load(directory).li_through)
    moved = components(load(directory, inner=_shifted(INNER)).li_through)
    assert "lines:innermod.inner" in base["source"]
    assert "lines:outermod.outer" not in base["source"]  # compiled without line info
    diff = [k for k in base["source"] if base["source"][k] != moved["source"].get(k)]
    assert diff == ["lines:innermod.inner"]
    from kcache.dispatcher.misses import diff_components
    assert diff_components(base, moved) == [
        "line numbers of innermod.inner (compiled with line info) changed"]


def test_shifting_a_module_without_line_info_keeps_every_key(tmp_path):
    directory = tmp_path / "proj"
    before = keys_of(load(directory))
    after = keys_of(load(directory, outer=_shifted(OUTER)))
    # outer is compiled without line info: its lines are in no PTX.
    assert before == after


def test_editing_inside_a_line_keeps_the_key(tmp_path):
    # Columns are not in numba-cuda's line table: whitespace inside a line keeps the key.
    directory = tmp_path / "proj"
    before = keys_of(load(directory))
    after = keys_of(load(directory, inner=INNER.replace("y = x * 2.0", "y  =  x*2.0")))
    assert before == after


def test_moving_a_lineinfo_project_changes_its_key_only(tmp_path):
    # .file directives name the source path: a line-info kernel's code names its location.
    a = keys_of(load(tmp_path / "one"))
    b = keys_of(load(tmp_path / "two" / "deeper"))
    assert a["no_li"] == b["no_li"]
    assert a["li_direct"] != b["li_direct"] and a["li_plain"] != b["li_plain"]


def _loc_lines(entry, filename):
    ptx = entry.artifacts["ptx"].decode()
    files = dict(re.findall(r'^\s*\.file\s+(\d+)\s+"([^"]+)"', ptx, re.M))
    numbers = [n for n, path in files.items() if path.endswith(filename)]
    assert len(numbers) == 1, files
    return {int(line) for f, line in re.findall(r"^\s*\.loc\s+(\d+)\s+(\d+)", ptx, re.M)
            if f == numbers[0]}


def _function_lines(fn):
    """Line numbers of ``fn``'s body as Python reports them."""
    return {line for _s, _e, line in fn.__code__.co_lines() if line is not None}


@pytest.mark.slow
def test_served_entries_carry_the_loc_lines_of_their_source(tmp_path):
    """compile_for before and after the shift: the second is compiled (not served from the
    first's entry) and each entry's .loc lines for innermod.py are those of its source."""
    directory, store = tmp_path / "proj", kcache.Store(tmp_path / "cache")
    entries = []
    for inner in (INNER, _shifted(INNER)):
        mod = load(directory, inner=inner)
        (report,) = compile_for_report(mod.li_through, SIG, cc=(9, 0), store=store)
        assert not report.cached
        entry = store.load(report.key)
        lines = _loc_lines(entry, "innermod.py")
        inner_fn = sys.modules["innermod"].inner.py_func
        assert lines and lines <= _function_lines(inner_fn) | {inner_fn.__code__.co_firstlineno}
        entries.append(lines)
        (again,) = compile_for_report(mod.li_through, SIG, cc=(9, 0), store=store)
        assert again.cached and again.key == report.key
    before, after = entries
    assert after == {line + SHIFT for line in before}

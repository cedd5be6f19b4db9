"""Terminal tables fit the terminal without breaking a word (issue 8, "Output a person can
read"), run as real ``kcache`` subprocesses on a pseudo-terminal of 80 and 60 columns."""
from __future__ import annotations

import os
import re

import pytest
from hypothesis import given, settings, strategies as st

from kcache import Entry, Store, make_key
from test_cli import on_terminal

LONG = "pkg.very.deep.module.path.for.kernels:a_really_long_kernel_function_name"
KERNELS = {
    "examples.kernels:blockwise_lock_sum": "(array(float32, 1d, C), array(float32, 1d, C), int64)",
    "examples.kernels:saxpy": "(float32[::1],)",
    LONG: "(array(float64, 2d, A), array(float64, 2d, A), array(float64, 2d, A), float64)",
}
HEADERS = {"Key", "Kernel", "Signature", "Arch", "Size", "Hits", "Last used", "Compile time"}
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's styles


@pytest.fixture(scope="module")
def long_names(tmp_path_factory):
    root = tmp_path_factory.mktemp("long") / "cache"
    store = Store(root)
    for kernel, signature in KERNELS.items():
        comps = {"kernel": kernel}
        store.put(make_key(comps), Entry({"cubin": os.urandom(2000)},
                                         {"kernel": kernel, "signature": signature,
                                          "arch": "sm_90a", "compile_seconds": 0.83}),
                  components=comps)
    store.flush()
    return root


def screen(*args: str, columns: int) -> list[str]:
    """The lines the command printed on a terminal of ``columns`` columns, styles removed."""
    status, text, err = on_terminal(*args, columns=columns)
    assert status == 0 and "Traceback" not in err, err
    return SGR.sub("", text).replace("\r\n", "\n").splitlines()


def cells(line: str) -> list[str]:
    """A table line split into its cells (columns are at least two spaces apart)."""
    return [c for c in re.split(r" {2,}", line.strip()) if c]


@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 60])
def test_ls_fits_and_never_breaks_a_word(long_names, columns):
    lines = screen("ls", "--dir", str(long_names), columns=columns)
    assert all(len(line.rstrip()) <= columns for line in lines), lines
    header = cells(lines[0])
    assert header[:2] == ["Key", "Kernel"] and set(header) <= HEADERS, header  # whole words
    rows = lines[1:1 + len(KERNELS)]
    assert all(len(cells(row)) == len(header) for row in rows), rows  # one line per entry
    assert all(re.fullmatch(r"[0-9a-f]{12}", cells(row)[0]) for row in rows), rows
    kernels = {cells(row)[1] for row in rows}
    assert "examples.kernels:saxpy" in kernels  # short names whole
    cut = [k for k in kernels if "…" in k]  # long ones keep their end: the qualname
    assert cut and all(k in KERNELS for k in kernels - set(cut))
    for text in cut:
        head, tail = text.split("…")
        assert head == "" and len(tail) >= 15, text
        assert any(k.endswith(tail) for k in KERNELS), text
    hidden = [h for h in HEADERS if h not in header]
    caption = " ".join(lines[1 + len(KERNELS):])
    assert hidden and all(h in caption for h in hidden) and "--wide" in caption


@pytest.mark.slow
def test_ls_wide_shows_everything(long_names):
    lines = screen("ls", "--wide", "--dir", str(long_names), columns=60)
    assert set(cells(lines[0])) == HEADERS
    text = "\n".join(lines)
    assert all(k in text and s in text for k, s in KERNELS.items())
    assert len(lines) == 1 + len(KERNELS) and "…" not in text


@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 60])
@pytest.mark.parametrize("args", [["show", "KEY"], ["stats"], ["config"], ["dir"],
                                  ["prune", "--dry-run", "--max-size", "1"], ["verify"]],
                         ids=" ".join)
def test_every_table_fits(long_names, columns, args):
    if args == ["show", "KEY"]:
        key = Store(long_names).find("")[0].key
        args = ["show", key[:8]]
    if args == ["verify"]:  # a bad entry, so that verify draws its table (path, problem)
        bad = long_names.parent / "bad"
        path = bad / "v1" / "entries" / "ab" / ("ab" * 32 + ".kce")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"garbage")
        status, text, err = on_terminal("verify", "--dir", str(bad), columns=columns)
        assert status == 1 and "Traceback" not in err
        lines = SGR.sub("", text).replace("\r\n", "\n").splitlines()
        assert cells(lines[0])[:3] == ["Key", "Problem", "Quarantined"], lines
    else:
        lines = screen(*args, "--dir", str(long_names), columns=columns)
    if args[0] == "show":
        fields = show_fields(lines)
        assert fields["kernel"] in KERNELS  # never cut (issue 35)
        assert fields["key"].startswith(args[1]) and len(fields["key"]) == 64
        # a value shown whole (and longer than the width) is a line of its own, unindented
        lines = [line for line in lines if line not in fields.values()]
    assert lines and all(len(line.rstrip()) <= columns for line in lines), lines


@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 60])
def test_prune_keeps_last_used_on_a_narrow_terminal(long_names, columns):
    """Last used is what --older-than and the least recently used order choose by: the
    signature and the size give way to it."""
    lines = screen("prune", "--dry-run", "--max-size", "1", "--dir", str(long_names),
                   columns=columns)
    header = cells(lines[0])
    assert header[0] == "Key" and header[-1] == "Last used", lines
    rows = lines[1:1 + len(KERNELS)]
    assert all(cells(row)[-1] in ("just now", "a moment ago") or cells(row)[-1].endswith("ago")
               for row in rows), rows
    if columns == 80:
        assert "Size" in header, lines


@pytest.mark.slow
def test_prune_keeps_the_signature_of_two_overloads(tmp_path):
    """Two overloads of one kernel and arch differ only by signature: prune keeps it."""
    store = Store(tmp_path)
    for signature in ("(float32[::1],)", "(float64[::1],)"):
        comps = {"kernel": LONG, "signature": signature}
        store.put(make_key(comps), Entry({"cubin": os.urandom(2000)},
                                         {"kernel": LONG, "signature": signature,
                                          "arch": "sm_90a"}), components=comps)
    store.flush()
    lines = screen("prune", "--dry-run", "--max-size", "1", "--dir", str(tmp_path), columns=80)
    assert "Signature" in cells(lines[0]) and "Last used" in cells(lines[0]), lines
    assert all(len(line.rstrip()) <= 80 for line in lines), lines


def show_fields(lines: list[str]) -> dict[str, str]:
    """The fields ``kcache show`` drew: ``name  value`` lines, and names alone followed by
    their value on the next line: whole and unindented for a field never cut (one line as
    written, however long: the terminal wraps it), else indented."""
    from kcache.cli.cmd_show import is_whole
    fields, alone = {}, None
    for line in lines[1:]:
        if alone is not None:
            fields[alone] = line if is_whole(alone) else line.strip()
            alone = None
            continue
        parts = cells(line)
        if len(parts) == 1 and line == line.rstrip() and not line.startswith(" "):
            alone = parts[0]
        elif parts:
            fields[parts[0]] = parts[1] if len(parts) > 1 else ""
    return fields


@pytest.mark.slow
def test_show_wide_prints_the_full_key_and_path(long_names):
    info = Store(long_names).find("")[0]
    lines = screen("show", info.key[:8], "--wide", "--dir", str(long_names), columns=60)
    text = "\n".join(lines)
    assert info.key in text and str(info.path) in text


# ------------------------------------------------------------------------------ in process

def test_shorten_keeps_both_ends_and_counts_wide_characters():
    from kcache.cli.table import cell_len, shorten
    cut = shorten("examples.kernels:blockwise_lock_sum", 20)
    assert cut.startswith("examples.") and cut.endswith("lock_sum") and "…" in cut
    assert cell_len(cut) == 20
    wide = "核函数" * 10  # 2 cells each
    assert cell_len(shorten(wide, 11)) <= 11
    assert shorten("short", 20) == "short"


def test_layout_hides_by_rank_before_cutting_below_keep():
    from kcache.cli.table import Column, layout
    columns = [Column("Key"), Column("Kernel", shrink=8, keep=20), Column("Extra", drop=1),
               Column("More", drop=2)]
    rows = [["k" * 12, "x" * 40, "e" * 10, "m" * 10]]
    shown, widths = layout(columns, rows, 200)
    assert shown == [0, 1, 2, 3] and widths[1] == 40  # fits: natural widths
    shown, widths = layout(columns, rows, 12 + 2 + 20 + 2 + 10)
    assert shown == [0, 1, 2] and widths[1] == 20  # "More" (rank 2) hidden first
    shown, widths = layout(columns, rows, 12 + 2 + 12)
    assert shown == [0, 1] and widths[1] == 12  # all hidden, then cut below keep
    shown, widths = layout(columns, rows, 10, wide=True)
    assert shown == [0, 1, 2, 3] and widths[1] == 40  # --wide: everything


def test_layout_lowers_the_largest_keep_first_once_every_column_is_hidden():
    """issue 35: a signature that wants 48 cells beside a kernel name that keeps 24 gets the
    rest of the line, rather than both being cut to one level (28 and 28)."""
    from kcache.cli.table import Column, layout
    columns = [Column("Key"), Column("Kernel", shrink=16, keep=24),
               Column("Signature", shrink=12, keep=48), Column("Arch"),
               Column("Size", right=True, drop=1)]
    rows = [["k" * 12, "x" * 72, "s" * 52, "sm_90a", "1.5 KiB"]]
    shown, widths = layout(columns, rows, 80)
    assert shown == [0, 1, 2, 3] and (widths[1], widths[2]) == (24, 32)
    shown, widths = layout(columns, [["k" * 12, "x" * 7, "s" * 42, "sm_90a", "1.5 KiB"]], 80)
    assert shown == [0, 1, 2, 3] and widths[2] == 42  # Size goes before the signature is cut
    shown, widths = layout(columns, rows, 40)  # very narrow: down to the minimums
    assert shown == [0, 1, 2, 3] and (widths[1], widths[2]) == (16, 12)


def test_a_difference_near_the_start_keeps_the_start():
    from kcache.cli.table import cut_cells, Column
    column = Column("Signature", shrink=12, cut="distinct")
    sigs = ["(float32[::1, :], float32[::1], int32)", "(float32[:, ::1], float32[::1], int32)",
            "(float64[::1], float32[::1], int32)", "(float32[::1], float32[::1], int32)"]
    cut = cut_cells(column, sigs, 32, ["mid:mix"] * 4)
    assert cut == [s[:31] + "…" for s in sigs]
    ends = ["(float64[:, :], float64[:, :], float64[:, :], " + t + ")"
            for t in ("int32", "int64", "float32", "float64")]
    cut = cut_cells(column, ends, 32, ["k"] * 4)
    assert [c.rpartition("…")[2] for c in cut] == ["int32)", "int64)", "float32)", "float64)"]
    assert all(len(c) <= 32 for c in cut)


# ------------------------------------------------------------------------------ 80 columns

USECASES = "numba.cuda.tests.cudapy.cache_usecases"
SAME_SIG = "(array(float64, 0d, C), array(float64, 0d, C), array(float64, 0d, C))"


def drawn(monkeypatch, capsys, columns, rows, width=80) -> list[str]:
    """``rows`` drawn by kcache.cli.table.draw at ``width`` columns: the table's lines."""
    from kcache.cli.table import draw
    monkeypatch.setenv("COLUMNS", str(width))
    draw(columns, rows)
    return capsys.readouterr().out.splitlines()


def test_rows_that_differ_only_at_the_end_stay_apart_at_80_columns(monkeypatch, capsys):
    """issue 18: warming cache_usecases, every row read `numba.cuda.te…ecase_kernel
    (array(float6…t64, 0d, C))`: the end of the qualified name tells the kernels apart."""
    from kcache.cli.cmd_warm import COLUMNS
    names = [f"{USECASES}:{n}" for n in ("add_usecase_kernel", "add_nocache_usecase_kernel",
                                        "simple_usecase_kernel", "outer_uncached_kernel")]
    rows = [[name, SAME_SIG, arch, "already cached", ""] for name in names
            for arch in ("sm_80", "sm_90a")]
    lines = drawn(monkeypatch, capsys, COLUMNS, rows)
    assert all(len(line.rstrip()) <= 80 for line in lines), lines
    kernels = [cells(line)[0] for line in lines[1:1 + len(rows)]]
    assert len(set(kernels)) == len(names), kernels
    for name, shown in zip([n for n in names for _ in (0, 1)], kernels):
        assert name.endswith(shown.lstrip("…")) and len(shown) >= 20, shown


def test_overloads_keep_the_part_of_the_signature_that_differs(monkeypatch, capsys):
    from kcache.cli.cmd_ls import COLUMNS, columns_for
    sigs = ["(array(float64, 1d, C), array(float64, 1d, C), array(float64, 1d, C), int64)",
            "(array(float32, 1d, C), array(float32, 1d, C), array(float32, 1d, C), int64)",
            "(array(int16, 2d, A), array(int16, 2d, A), array(int16, 2d, A), int64)"]
    rows = [["0123456789ab", f"{USECASES}:record_return", sig, "sm_90a", "18.3 KiB", "0",
             "1 h ago", "0.22 s"] for sig in sigs]

    class View:  # what columns_for reads of an entry
        def __init__(self, sig):
            self.kernel, self.arch, self.signature = f"{USECASES}:record_return", "sm_90a", sig

    columns = columns_for([View(s) for s in sigs])
    assert columns is not COLUMNS  # two rows of one kernel and arch: Signature is kept
    lines = drawn(monkeypatch, capsys, columns, rows)
    assert all(len(line.rstrip()) <= 80 for line in lines), lines
    assert "Signature" in cells(lines[0])
    shown = [cells(line)[2] for line in lines[1:4]]
    assert len(set(shown)) == 3, shown
    for sig, cut in zip(sigs, shown):
        kind = sig[len("(array("):].split(",")[0]  # float64, float32, int16
        assert kind[-2:] in cut, (cut, sig)


def test_ls_hides_the_signature_last_and_only_when_rows_stay_apart():
    """Signature is droppable (last), but keeps SIGNATURE_KEEP cells before it goes."""
    from kcache.cli.cmd_ls import COLUMNS
    order = sorted((c for c in COLUMNS if c.drop), key=lambda c: -c.drop)
    assert [c.header for c in order] == ["Compile time", "Hits", "Last used", "Size",
                                         "Signature"]


def test_the_progress_bar_keeps_its_counters_whole(monkeypatch):
    """issue 18: `warm ━╺ 1… 0… compiled` at 80 columns; the counters and the time stay."""
    import io

    from rich.console import Console

    from kcache.cli.output import counting_progress
    monkeypatch.setenv("COLUMNS", "80")
    bar = counting_progress("warm", 124, transient=True)
    task = bar.add_task("", total=124)
    bar.update(task, advance=17,
               description=bar.describe("already cached", f"{USECASES}:add_nocache_usecase_kernel"))
    out = io.StringIO()
    Console(file=out, width=80).print(bar.make_tasks_table(bar.tasks))
    text = out.getvalue()
    assert " 17/124 " in text and "0:00:0" in text and text.startswith("warm "), text
    assert "add_nocache_usecase_kernel" in text, text
    assert all(len(line) <= 80 for line in text.splitlines())


def test_no_color_and_NO_COLOR_are_accepted_on_a_terminal(long_names):
    for args, env in ((["--no-color", "ls"], None), (["ls"], {"NO_COLOR": "1"})):
        status, text, err = on_terminal(*args, "--dir", str(long_names), columns=80, env=env)
        assert status == 0 and "Traceback" not in err, err
        assert not re.search(r"\x1b\[[0-9;]*3[0-9]", text)  # no foreground colour


def _ls_rows(pairs):
    return [["0123456789ab", kernel, sig, "sm_90a", "18.3 KiB", "0", "1 h ago", "0.22 s"]
            for kernel, sig in pairs]


def test_ls_gives_the_signature_its_width_before_size_hits_and_last_used(monkeypatch, capsys):
    """issue 35: with two rows that need no Signature to stay apart (`ls --limit 2`, or one
    `--signature` match), the Signature was cut to `(float32[::…oat32[::1])` beside Size,
    Hits and Last used; it keeps its width first, whatever the number of rows."""
    from kcache.cli.cmd_ls import COLUMNS
    sig = "(float32[::1], float64[::1])"
    for pairs in ([("examples.kernels:saxpy", sig)],
                  [("examples.kernels:saxpy", sig), ("examples.kernels:axpy", "(float32[::1],)")]):
        lines = drawn(monkeypatch, capsys, COLUMNS, _ls_rows(pairs))
        assert all(len(line.rstrip()) <= 80 for line in lines), lines
        assert cells(lines[1])[2] == sig, lines
        assert "Size" not in cells(lines[0]) and "Hits" not in cells(lines[0]), lines


def test_ls_cuts_a_signature_before_hiding_it(monkeypatch, capsys):
    from kcache.cli.cmd_ls import COLUMNS
    sig = "(array(float64, 2d, A), array(float64, 2d, A), array(float64, 2d, A), float64)"
    lines = drawn(monkeypatch, capsys, COLUMNS, _ls_rows([(LONG, sig)]), width=60)
    assert "Signature" in cells(lines[0]) and len(cells(lines[1])[2]) >= 12, lines
    assert all(len(line.rstrip()) <= 60 for line in lines), lines


@pytest.mark.parametrize("width", [80, 60])
def test_the_hint_line_fits_the_width(monkeypatch, capsys, width):
    """issue 35: `(not shown for lack of width: …; --wide shows all)` was 81 characters at
    80 columns."""
    from kcache.cli.cmd_ls import COLUMNS
    sig = "(array(float64, 2d, A), array(float64, 2d, A), array(float64, 2d, A), float64)"
    lines = drawn(monkeypatch, capsys, COLUMNS, _ls_rows([(LONG, sig)] * 2), width=width)
    hint = " ".join(line.strip() for line in lines[3:])
    assert "Compile time" in hint and "--wide shows all" in hint, lines
    assert all(len(line.rstrip()) <= width for line in lines[3:]), lines


def test_the_front_end_column_goes_first_when_every_row_has_the_same():
    """A cache of numba-cuda-mlir kernels only: `mlir` on every row tells no row apart, so
    it is hidden before Size, Hits or Last used; with both front-ends it stays."""
    from kcache.cli.cmd_ls import columns_for
    from kcache.cli.table import layout

    class View:  # what columns_for reads of an entry
        def __init__(self, name, frontend):
            self.kernel, self.arch, self.frontend = name, "sm_90", frontend

    def front_end(views):
        return next(c for c in columns_for(views) if c.header == "Front-end")
    alike = [View("app:a", "numba-cuda-mlir"), View("app:b", "numba-cuda-mlir")]
    mixed = [View("app:a", "numba-cuda-mlir"), View("app:b", "numba-cuda")]
    assert front_end(mixed).drop == 0
    columns = columns_for(alike)
    assert front_end(alike).drop > max(c.drop for c in columns if c.header != "Front-end")
    row = ["0123456789ab", "app:a", "(float32[::1],)", "sm_90", "mlir", "18.3 KiB", "0",
           "1 h ago", "0.22 s"]
    shown, _ = layout(columns, [row, row], 80)
    headers = [columns[i].header for i in shown]
    assert "Front-end" not in headers and {"Hits", "Last used", "Size"} <= set(headers), headers


def test_piped_listings_end_with_the_front_end_when_one_is_not_numba_cuda():
    from kcache.cli.entries import plain_table

    class View:
        def __init__(self, frontend):
            self.key, self.frontend = "k", frontend
    plain = lambda v: (v.key,)  # noqa: E731
    classic = plain_table(("short_key",), plain, [View("numba-cuda")])
    assert classic["names"] == ("short_key",) and classic["plain"](View("numba-cuda")) == ("k",)
    both = plain_table(("short_key",), plain, [View("numba-cuda"), View("numba-cuda-mlir")])
    assert both["names"] == ("short_key", "frontend")
    assert [both["plain"](v) for v in (View("numba-cuda"), View("numba-cuda-mlir"))] == [
        ("k", "numba-cuda"), ("k", "numba-cuda-mlir")]

"""Overloads told apart at 80 columns (issue 35): ``ls``, ``rm``, ``prune --dry-run``,
``show`` and ``stats`` run as real ``kcache`` processes on a pseudo-terminal of 80 columns
(stdout and stderr both on it, as a person sees them), with overloads of one kernel that
differ in one argument: every entry on one line, no line over 80 columns, each overload's
signature (numba's short form) recognisable, ``show``'s path and signature whole, each
on one line of its own."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import ptykit
from kcache import Entry, Store
from test_cli_select import OVERLOADS

LONG = "pkg.very.deep.module.path.for.kernels:a_really_long_kernel_function_name"
_ARRAYS = "(array(float64, 2d, A), array(float64, 2d, A), array(float64, 2d, A), "
_SHORT = "(float64[:, :], float64[:, :], float64[:, :], "
#: A long kernel name with overloads that differ only in the last argument.
LAST_DIFFERS = {("e" + str(n)) + str(n) * 62: (_ARRAYS + last + ")", _SHORT + last + ")")
                for n, last in enumerate(("int32", "int64", "float32", "float64"), 1)}
KERNEL_OF = {**{k: "mid:mix" for k in OVERLOADS}, **{k: LONG for k in LAST_DIFFERS}}
SIGNATURES = {**OVERLOADS, **LAST_DIFFERS}
COLUMNS = 80
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("overloads") / "cache"
    store = Store(root)
    for key, (signature, _short) in SIGNATURES.items():
        store.put(key, Entry({"cubin": os.urandom(1500)},
                             {"kernel": KERNEL_OF[key], "signature": signature,
                              "arch": "sm_90a", "compile_seconds": 0.4}),
                  components={"kernel": KERNEL_OF[key]})
    store.flush()
    return root


def terminal(*args: str, answer: str | None = None) -> tuple[int, list[str]]:
    """``python -m kcache ARGS`` with stdin, stdout and stderr on one 80-column terminal:
    (exit status, the lines shown, styles removed)."""
    master, slave = ptykit.open_terminal(COLUMNS)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")
           and not k.startswith("KCACHE_")}
    env["COLUMNS"] = str(COLUMNS)
    proc = subprocess.Popen([sys.executable, "-m", "kcache", *args], stdin=slave,
                            stdout=slave, stderr=slave, env=env)
    os.close(slave)
    if answer is not None:
        os.write(master, answer.encode())
    shown = ptykit.drain(master).decode()
    status = proc.wait(timeout=60)
    lines = ANSI.sub("", shown).replace("\r\n", "\n").splitlines()
    assert "Traceback" not in shown, shown
    return status, lines


def cells(line: str) -> list[str]:
    return [c for c in re.split(r" {2,}", line.strip()) if c]


def check_rows(lines: list[str], keys) -> None:
    """Each entry of ``keys`` on exactly one line, which fits, and whose Signature cell
    is its own short signature or a cut of it (the pieces around ``…``, in order); the
    cells of one kernel's overloads all differ."""
    assert all(len(line) <= COLUMNS for line in lines), [len(x) for x in lines]
    header = next(i for i, line in enumerate(lines) if cells(line)[:2] == ["Key", "Kernel"])
    names = cells(lines[header])
    assert "Signature" in names, names
    where = names.index("Signature")
    shown: dict[str, list[str]] = {}
    for key in keys:
        rows = [line for line in lines if key[:12] in line]
        assert len(rows) == 1, (key, rows)
        row = cells(rows[0])
        assert len(row) == len(names), (names, row)
        cell, short = row[where], SIGNATURES[key][1]
        at = 0
        for piece in cell.split("…"):
            found = short.find(piece, at)
            assert found >= 0, (cell, short)
            at = found + len(piece)
        shown.setdefault(KERNEL_OF[key], []).append(cell)
    for kernel, signatures in shown.items():
        assert len(set(signatures)) == len(signatures), (kernel, signatures)


@pytest.mark.slow
def test_ls_shows_each_overload_on_one_line_in_the_short_form(root):
    status, lines = terminal("ls", "--dir", str(root))
    assert status == 0
    check_rows(lines, SIGNATURES)
    status, lines = terminal("ls", "--kernel", "mid:mix", "--dir", str(root))
    assert status == 0
    check_rows(lines, OVERLOADS)
    for key in OVERLOADS:  # with a short kernel name, the short signatures fit whole
        row = cells(next(x for x in lines if key[:12] in x))
        assert row[1:4] == ["mid:mix", OVERLOADS[key][1], "sm_90a"], row


@pytest.mark.slow
def test_prune_dry_run_lists_the_signatures(root):
    status, lines = terminal("prune", "--dry-run", "--max-size", "1", "--dir", str(root))
    assert status == 0 and any("would remove 8 entries" in line for line in lines), lines
    check_rows(lines, SIGNATURES)


@pytest.mark.slow
def test_rm_lists_the_entries_before_asking(root):
    status, lines = terminal("rm", "--kernel", "mid:mix", "--dir", str(root), answer="n\n")
    assert status == 1
    asked = next(i for i, line in enumerate(lines) if "Remove 4 entries? [y/N]" in line)
    check_rows(lines[:asked], OVERLOADS)  # the table came first
    assert all(key[:12] not in line for key in SIGNATURES for line in lines[asked:])
    assert len(list(Store(root).entries())) == 8  # answered no: nothing removed


@pytest.mark.slow
def test_rm_with_stdout_in_a_file_lists_the_entries_where_the_question_is(root, tmp_path):
    """``kcache rm --kernel mid:mix > out`` at a terminal: the person answering sees the
    list on stderr before the question; the file gets the usual output only."""
    master, slave = ptykit.open_terminal(COLUMNS)
    out = tmp_path / "out"
    with open(out, "wb") as stdout:
        proc = subprocess.Popen([sys.executable, "-m", "kcache", "rm", "--kernel", "mid:mix",
                                 "--dir", str(root)], stdin=slave, stdout=stdout,
                                stderr=slave, env=dict(os.environ, COLUMNS=str(COLUMNS)))
    os.close(slave)
    os.write(master, b"n\n")
    shown = ANSI.sub("", ptykit.drain(master).decode()).replace("\r\n", "\n")
    assert proc.wait(timeout=60) == 1
    asked = shown.index("Remove 4 entries? [y/N]")
    for key, (_full, short) in OVERLOADS.items():
        assert 0 <= shown.index(f"{key[:12]} mid:mix {short} sm_90a") < asked, shown
    assert out.read_bytes() == b""  # answered no: nothing removed, nothing printed there


@pytest.mark.slow
def test_rm_of_one_overload_by_signature(tmp_path, root):
    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    status, lines = terminal("rm", "--signature", "*float32[::1, :]*", "--dir", str(copy))
    assert status == 0 and not any("[y/N]" in line for line in lines)  # one entry: not asked
    [gone] = [k for k, (_s, short) in OVERLOADS.items() if "float32[::1, :]" in short]
    check_rows(lines, [gone])
    assert {e.key for e in Store(copy).entries()} == set(SIGNATURES) - {gone}


@pytest.mark.slow
def test_show_prints_the_path_and_both_signatures_whole(root):
    key = next(k for k in LAST_DIFFERS)
    info = Store(root).header(key)
    status, lines = terminal("show", key[:8], "--dir", str(root))
    assert status == 0
    assert not any("…" in line for line in lines), lines
    from test_cli_terminal import show_fields
    fields = show_fields(lines)
    # the path is written whole on one line of its own, unindented, with no line break in
    # it (the terminal soft-wraps it: selected there, it is copied in one piece)
    assert str(info.path) in lines and len(str(info.path)) > COLUMNS
    assert fields["path"] == str(info.path)
    long_values = {fields["path"], fields["signature"], fields["short_signature"]}
    assert all(len(line) <= COLUMNS for line in lines if line not in long_values), lines
    assert fields["key"] == key
    assert (fields["signature"], fields["short_signature"]) == SIGNATURES[key]
    assert fields["kernel"] == LONG


@pytest.mark.slow
@pytest.mark.parametrize("args", [["stats"], ["stats", "--short"]], ids=" ".join)
def test_stats_fits(root, args):
    status, lines = terminal(*args, "--dir", str(root))
    assert status == 0 and all(len(line) <= COLUMNS for line in lines), lines
    if "--short" in args:
        assert len(lines) <= 8
        assert cells(lines[0]) == ["root", str(root)]
        assert cells(lines[1]) == ["entries", "8"]


@pytest.mark.slow
def test_warm_shows_the_short_signature(tmp_path):
    """issue 35: `mid:mix  (array(float32, 1d, C)…array(float32, 1d, C))  sm_90a  compiled`:
    warm's table (and --recache's) now shows numba's short form; --json keeps the full one."""
    (tmp_path / "kern.py").write_text(
        "from numba import cuda\n\n@cuda.jit\ndef double(x, y):\n"
        "    i = cuda.grid(1)\n    if i < x.size:\n        x[i] = 2 * y[i, 0]\n")
    (tmp_path / "k.sigs").write_text("kern:double  void(float32[::1], float64[:, ::1])\n")
    args = ("warm", str(tmp_path / "kern.py"), "--signatures", str(tmp_path / "k.sigs"),
            "--cc", "9.0", "--dir", str(tmp_path / "cache"))
    for extra in ((), ("--recache",)):
        status, lines = terminal(*args, *extra)
        assert status == 0, lines
        [row] = [line for line in lines if line.startswith("kern:double")]
        assert cells(row)[:3] == ["kern:double", "(float32[::1], float64[:, ::1])", "sm_90a"], row
        assert not any("array(" in line for line in lines), lines
        assert all(len(line) <= COLUMNS for line in lines), lines
    done = subprocess.run([sys.executable, "-m", "kcache", *args, "--json"],
                          capture_output=True, text=True, timeout=300)
    assert "array(float32, 1d, C)" in done.stdout, done.stdout
def test_show_prints_a_layers_path_whole(root, tmp_path):
    # The layer serving an entry is a path (a folder or a bundle file) copied as is: shown
    # whole as the root and path are, not cut in its middle at 80 columns.
    import shutil
    layer = tmp_path / ("layers-" + "x" * 70) / "layer"
    shutil.copytree(root, layer)
    own = tmp_path / "own"
    assert subprocess.run([sys.executable, "-m", "kcache", "--dir", str(own), "config", "set",
                           "readonly_dirs", str(layer)], capture_output=True).returncode == 0
    key = next(k for k in LAST_DIFFERS)
    status, lines = terminal("show", key[:8], "--dir", str(own))
    assert status == 0
    from test_cli_terminal import show_fields
    fields = show_fields(lines)
    assert len(str(layer)) > COLUMNS and fields["layer"] == str(layer), lines
    assert fields["layer_kind"] == "directory"

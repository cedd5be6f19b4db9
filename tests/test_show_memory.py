"""``kcache show`` of an entry holding hostile text, in real processes, peak memory measured
(``wait4``): a 15 MiB header field of ESC characters (escaping built one string per character:
1.2 GB and 8 s), shown piped, on a terminal and with ``--wide`` (rich padded every row to the
widest cell: 3.4 GB), and a PTX of 16 MiB of ESC shown with ``--ptx``. The bound promised in
docs/security.md is 400 MB; the output is what it was, every character escaped."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import pytest

import ptykit
from kcache import Entry, Store, make_key
from kcache.text import escape
from test_bundle_hostile import _LAUNCHER, measured  # the launcher reports kcache's own peak

pytestmark = pytest.mark.exec_children  # peak memory of a fresh interpreter

MiB = 1 << 20
MAX_RSS = 400 * MiB  # bytes: the promise (docs/security.md, "Limits")
FIELD = "\x1b" * (15 * MiB)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """(root, key) of an entry whose meta holds FIELD and whose PTX is 16 MiB of ESC."""
    root = tmp_path_factory.mktemp("show-memory") / "root"
    key = make_key({"show": "memory"})
    assert Store(root).put(key, Entry({"cubin": b"\x7fELF" + bytes(100), "ptx": b"\x1b" * (16 * MiB)},
                                      {"kernel": "pkg.mod:k", "arch": "sm_90", "note": FIELD}))
    return root, key


def test_show_piped_prints_the_whole_field_escaped_in_bounded_memory(hostile):
    root, key = hostile
    status, out, err, rss, _s = measured(["--dir", root, "show", key[:12]])
    assert status == 0 and err == "", err
    fields = dict(line.split("\t", 1) for line in out.splitlines())
    assert fields["meta.note"] == "\\x1b" * (15 * MiB)  # whole: piped output is for programs
    assert rss <= MAX_RSS, f"peak {rss >> 20} MiB"


def test_show_ptx_is_escaped_in_bounded_memory(hostile):
    root, key = hostile
    status, out, err, rss, _s = measured(["--dir", root, "show", key[:12], "--ptx"])
    assert status == 0 and err == "", err
    assert out.endswith("\n# PTX\n" + "\\x1b" * (16 * MiB) + "\n")
    assert rss <= MAX_RSS, f"peak {rss >> 20} MiB"


def on_a_terminal(args, columns=100) -> tuple[int, bytes, int]:
    """``kcache ARGS`` with a terminal as stdin, stdout and stderr: (exit status, what it
    wrote there, peak RSS bytes of the kcache process)."""
    report = tempfile.NamedTemporaryFile(prefix="kcache-rss-", delete=False)
    report.close()
    master, slave = ptykit.open_terminal(columns)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    try:
        proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, report.name, *map(str, args)],
                                stdin=slave, stdout=slave, stderr=slave, env=env)
        os.close(slave)
        text = ptykit.drain(master)
        status = proc.wait(timeout=120)
        rss = int(open(report.name).read() or 0) * 1024
    finally:
        os.unlink(report.name)
    return status, text, rss


@pytest.mark.parametrize("wide", [False, True], ids=["fitted", "wide"])
def test_show_on_a_terminal_is_bounded(hostile, wide):
    root, key = hostile
    status, text, rss = on_a_terminal(["--dir", root, "show", key[:12]] + (["--wide"] if wide else []))
    assert status == 0 and b"Traceback" not in text
    shown = re.sub(r"\x1b\[[0-9;]*m", "", text.decode())  # rich's own styles (bold names)
    row = next(line for line in shown.splitlines() if "meta.note" in line)
    assert "\\x1b\\x1b" in row and "\x1b\x1b" not in row and "…" in row  # escaped; its middle cut
    assert len(row) <= (70_000 if wide else 100), len(row)
    assert rss <= MAX_RSS, f"peak {rss >> 20} MiB"
    assert len(text) < 2 * MiB  # every row was padded to the widest cell: 1.1 GB


def test_escape_is_linear_and_unchanged():
    """Pieces of any size give the text the per-character rule gives (kcache/text.py)."""
    samples = ["\x1b[31mred\x1b[0m", "tab\there\nnl", "\u202eevil", "é中文\u200b", "\udc80",
               "\U0001F600\U000E0001", "\x7f\x80\x9f\xa0", "\u2028"]
    text = "".join(samples) * 20_000  # several pieces, ASCII and not
    expected = "".join(c if c.isprintable() else
                       {"\t": "\\t", "\n": "\\n", "\r": "\\r"}.get(c) or
                       (f"\\x{ord(c):02x}" if ord(c) < 0x100 else
                        f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}")
                       for c in text)
    assert escape(text) == expected
    assert escape(text, keep="\n\t") == expected.replace("\\n", "\n").replace("\\t", "\t")

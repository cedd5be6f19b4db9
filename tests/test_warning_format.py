"""kcache's warnings print as their message alone on one line (``kcache: ...``), stay
``KcacheWarning``s for filters, ``-W`` and ``pytest.warns``, and leave every other warning's
format alone (kcache/warn.py). Real interpreters, real stderr."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import warnings

import pytest

from kcache import warn
from kcache.warn import KcacheWarning

#: A warning from another package, then kcache's, then another again.
SCRIPT = textwrap.dedent("""
    import warnings
    import kcache.warn as w
    warnings.warn("before", DeprecationWarning)
    w.warn_once("demo", "kcache: the cache is demonstrating")
    w.warn_once("demo2", "no prefix\\non two lines")
    warnings.warn("after", UserWarning)
""")


def run(code: str, *args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    full.update(env or {})
    return subprocess.run([sys.executable, *args, "-c", code], capture_output=True, text=True,
                          env=full, cwd=cwd, timeout=300)


def test_a_kcache_warning_is_one_line_and_others_keep_their_format():
    done = run(SCRIPT, "-W", "default")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == "<string>:4: DeprecationWarning: before"
    assert lines[1:3] == ["kcache: the cache is demonstrating", "kcache: no prefix on two lines"]
    assert lines[3] == "<string>:7: UserWarning: after"
    assert len(lines) == 4
    assert "warn.py" not in done.stderr and "KcacheWarning" not in done.stderr


def test_filters_still_apply_to_kcache_warnings():
    """``-W error::UserWarning`` (KcacheWarning is one) raises it, as does a filter naming
    KcacheWarning."""
    done = run(SCRIPT, "-W", "error::UserWarning")
    assert done.returncode == 1
    assert "kcache.warn.KcacheWarning: kcache: the cache is demonstrating" in done.stderr
    code = ("import warnings; from kcache.warn import KcacheWarning, warn_once\n"
            "warnings.simplefilter('error', KcacheWarning)\n"
            "try:\n    warn_once('k', 'kcache: raised')\n"
            "except KcacheWarning as exc:\n    print('caught', exc)\n")
    done = run(code)
    assert done.stdout == "caught kcache: raised\n" and done.stderr == ""


def test_a_program_s_own_formatwarning_is_kept():
    code = ("import warnings\n"
            "warnings.formatwarning = lambda m, c, f, l, line=None: f'MINE {c.__name__} {m}\\n'\n"
            "import kcache.warn as w\n"
            "w.warn_once('k', 'kcache: hello')\n"
            "warnings.warn('x')\n")
    done = run(code)
    assert done.stderr == "MINE KcacheWarning kcache: hello\nMINE UserWarning x\n"


def test_logging_capture_gets_the_short_line():
    code = ("import logging, warnings\n"
            "logging.basicConfig(format='LOG %(message)s')\n"
            "logging.captureWarnings(True)\n"
            "import kcache.warn as w\n"
            "w.warn_once('k', 'kcache: logged')\n")
    done = run(code)
    assert done.stderr.strip() == "LOG kcache: logged"


def test_pytest_warns_still_records_them():
    warn.reset()
    with pytest.warns(KcacheWarning, match="recorded here"):
        warn.warn_once("test-format-recorded", "kcache: recorded here")
    # the format is put back: another category formats as the standard function does
    assert warnings.formatwarning("m", UserWarning, "f.py", 3, "") == "f.py:3: UserWarning: m\n"
    assert warnings.formatwarning.__module__ in ("warnings", "_py_warnings")


def test_one_line_formats():
    assert warn.one_line("kcache: a") == "kcache: a"
    assert warn.one_line("a\nb") == "kcache: a b"


def test_one_line_escapes_control_characters_once_and_bounds():
    raw = "kcache: layer /x\x1b]0;pwn\x07 \u202e not trusted"
    escaped = warn.one_line(raw)
    assert escaped == "kcache: layer /x\\x1b]0;pwn\\x07 \\u202e not trusted"
    assert warn.one_line(escaped) == escaped  # text escaped already passes unchanged
    assert warn.one_line("kcache: C:\\dir\\x1b") == "kcache: C:\\dir\\x1b"  # backslashes kept
    long = warn.one_line("kcache: " + "\x1b" * 5_000_000 + " the advice")
    assert long.endswith(" the advice") and " … " in long and "\x1b" not in long
    assert len(long) < 10 * warn.WARNING_LIMIT


def test_a_layer_path_with_escape_sequences_reaches_stderr_escaped(tmp_path):
    """A planted config.json names a read-only layer whose path holds ESC ]0;pwn BEL (a
    terminal title change): the program's warning about it carries no control byte."""
    layer = tmp_path / "layer\x1b]0;pwn\x07"
    layer.mkdir()
    layer.chmod(0o777)  # writable by every user: not trusted, so warned about
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    (root / "config.json").write_text(json.dumps({"readonly_dirs": [str(layer)]}))
    done = subprocess.run([sys.executable, "-c", "import kcache; kcache.Store().get('0' * 64)"],
                          capture_output=True, timeout=300,
                          env={**{k: v for k, v in os.environ.items()
                                  if not k.startswith("KCACHE_")}, "KCACHE_DIR": str(root)})
    assert done.returncode == 0, done.stderr
    assert b"pwn" in done.stderr and b"\\x1b]0;pwn\\x07" in done.stderr, done.stderr
    assert not any(b < 0x20 and b != 0x0A or b == 0x7F for b in done.stderr), done.stderr


@pytest.mark.slow
def test_a_dead_remote_costs_a_compile_for_two_lines(tmp_path):
    """A remote that refuses every connection: one ``compile_for`` prints at most two lines
    on stderr, each kcache's one line, and still stores the entry."""
    pytest.importorskip("redis")
    (tmp_path / "kern.py").write_text(textwrap.dedent("""
        from numba import cuda
        import kcache

        @kcache.jit
        def double(x):
            i = cuda.grid(1)
            if i < x.size:
                x[i] *= 2
    """))
    with socket.socket() as closed:  # bound, never listening: every connect is refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        done = run("import kcache, kern\n"
                   "print(len(kcache.compile_for(kern.double, ['void(float32[::1])'], cc='9.0')))",
                   env={"KCACHE_DIR": str(tmp_path / "cache"),
                        "KCACHE_REMOTE": f"redis://127.0.0.1:{port}/0",
                        "KCACHE_REMOTE_TIMEOUT": "5"}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "1\n"
    lines = done.stderr.splitlines()
    assert 1 <= len(lines) <= 2, done.stderr
    assert all(l.startswith("kcache: ") for l in lines), done.stderr
    assert "refused" in lines[0] or "error" in lines[0]
    # issue 35: each line was ~200 characters naming the URL three times
    url = f"redis://127.0.0.1:{port}/0"
    assert all(line.count(url) == 1 and len(line) <= 160 for line in lines), done.stderr
    if len(lines) == 2:
        assert "switched off for this process" in lines[1], lines
        assert "kcache remote check" in lines[1], lines

"""The ``kcache`` command on caches filled through the store API (no GPU, no numba import).

Most tests are about what a command prints and returns: they run it in this process as a
fresh process would (tests/clikit.py, ~0.3 s less a call). The real ``python -m kcache``
process runs where the process matters: the usage and help of the entry point (exit status
2 and 0), every command on a terminal (its exit status 0, and 1 where ``rm``/``clear`` are
answered no), a traceback for a real bug, imports at start-up, ``sitecustomize`` shims."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from kcache import Entry, Store, make_key
from kcache.toolchain import package_versions
import clikit
import ptykit
from trustkit import READONLY_SHIM

NOW = time.time()
DAY = 86400.0

# Hand-picked keys so prefixes are predictable: K_AXPY_90 and K_AXPY_90A share "a1".
K_AXPY_90 = "a1" + "0" * 62
K_AXPY_90A = "a1" + "f" * 62
K_SAXPY_80 = "b2" + "1" * 62
K_STALE = "c3" + "2" * 62

SPECS = {
    # key: (kernel, arch, payload bytes, last used (days ago), stale toolchain?)
    K_AXPY_90: ("pkg.linalg:axpy", "sm_90", 4000, 1.0, False),
    K_AXPY_90A: ("pkg.linalg:axpy", "sm_90a", 3000, 2.0, False),
    K_SAXPY_80: ("pkg.blas:saxpy", "sm_80", 2000, 3.0, False),
    K_STALE: ("pkg.old:kern", "sm_80", 1000, 10.0, True),
}


def components(kernel: str, arch: str, stale: bool) -> dict:
    toolchain = package_versions()
    if stale:
        toolchain = dict(toolchain, **{"numba-cuda": "0.0.1"})
    return {"format": 1, "kernel": kernel, "source": {"code": "00" * 16},
            "signature": "(float32[::1],)", "target": {"cc": arch, "output": "cubin"},
            "toolchain": toolchain, "options": {"debug": False}, "link": {},
            "launch_config": None, "cache_key": None}


def fill(root: Path) -> dict[str, Path]:
    """Put the SPECS entries in a store at ``root``; set their mtimes; return key -> path."""
    store = Store(root)
    for key, (kernel, arch, size, _, stale) in SPECS.items():
        entry = Entry({"cubin": bytes([7]) * size, "ptx": f"// ptx of {kernel}\n".encode()},
                      {"kernel": kernel, "signature": "(float32[::1],)", "arch": arch,
                       "compile_seconds": 0.5, "entry_name": "_Z4axpy"})
        assert store.put(key, entry, components=components(kernel, arch, stale))
    paths = {}
    for key, (_, _, _, days, _) in SPECS.items():
        info = store.header(key)
        os.utime(info.path, (NOW - days * DAY, NOW - days * DAY))
        paths[key] = Path(info.path)
    store.flush()
    return paths


@pytest.fixture
def cache(tmp_path):
    root = tmp_path / "cache"
    paths = fill(root)
    return root, paths


def kc(*args: str, root: Path | None = None, env: dict | None = None,
       stdin: str | None = None, process: bool = False) -> subprocess.CompletedProcess:
    """Run ``kcache ARGS`` (with ``--dir root``) and capture text output: in this process
    (tests/clikit.py) unless ``process`` or ``env`` sets ``PYTHONPATH`` (a ``sitecustomize``
    shim acts at interpreter start), then as ``python -m kcache`` in a subprocess."""
    argv = [*args, *(["--dir", str(root)] if root is not None else [])]
    if not process and "PYTHONPATH" not in (env or {}):
        return clikit.run(argv, env=env, stdin=stdin or "")
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "kcache", *argv], capture_output=True,
                          text=True, env=full_env, input=stdin if stdin is not None else "",
                          timeout=120)


def kc_json(*args: str, root: Path, **kw):
    done = kc(*args, "--json", root=root, **kw)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def one_line_error(done: subprocess.CompletedProcess, status: int = 2) -> str:
    """Assert the run failed with ``status`` and exactly one line on stderr; return it."""
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def is_iso(text: str) -> bool:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).tzinfo is not None


ENTRY_FIELDS = {"key": str, "short_key": str, "kernel": str, "signature": str, "arch": str,
                "file_size": int, "sizes": dict, "hits": int, "created": str,
                "last_used": str, "compile_seconds": float, "root": str, "readonly": bool,
                "path": str}


def assert_entry_schema(record: dict) -> None:
    for name, kind in ENTRY_FIELDS.items():
        assert isinstance(record[name], kind), (name, record[name])
    assert len(record["key"]) == 64 and record["key"].startswith(record["short_key"])
    assert is_iso(record["created"]) and is_iso(record["last_used"])
    assert all(isinstance(v, int) for v in record["sizes"].values())


# ------------------------------------------------------------------------------ basics

@pytest.mark.slow
def test_help_lists_every_command_and_bare_kcache_prints_the_usage():
    # real processes: the entry point's own exit statuses (SystemExit of argparse)
    done = kc("--help", process=True)
    assert done.returncode == 0
    for name in ("dir", "ls", "stats", "show", "prune", "rm", "clear", "verify", "config"):
        assert name in done.stdout
    bare = kc(process=True)  # as `pip` alone: the help on stdout, exit 0
    assert bare.returncode == 0 and bare.stdout == done.stdout and bare.stderr == ""
    # options without a command: usage error
    assert "COMMAND" in one_line_error(kc("--json", process=True))
    assert kc("--help").stdout == done.stdout  # in this process (the other tests) the same


def test_dash_v_prints_the_version_as_ccache_uv_and_pip_do():
    from kcache import __version__
    for flag in ("--version", "-V"):
        done = kc(flag, process=True)
        assert done.returncode == 0 and done.stdout == f"kcache {__version__}\n", done


def test_a_mistyped_command_gets_a_suggestion():
    assert "did you mean 'ls'?" in one_line_error(kc("lss"))
    assert "did you mean 'stats'?" in one_line_error(kc("stat"))
    assert "did you mean" not in one_line_error(kc("zzzzzz"))
    assert "did you mean 'show'?" in one_line_error(kc("config", "shwo"))


def test_help_epilog_never_breaks_a_word_of_a_default():
    """The variables' lines wrap between words only: a default too long for one line (the
    platform cache dir, ``~/.cache/kcache``) was cut inside its path (``(~/.`` / ``cache/...``)."""
    from kcache.cli import env
    text = kc("--help").stdout
    assert max(len(line) for line in text.splitlines()) <= 79
    joined = " ".join(line.strip() for line in text.split("environment (")[1].splitlines())
    for v in env.VARIABLES:
        assert f"[default: {v.default}]" in joined, v.name


def test_an_unknown_flag_of_a_command_points_to_that_command_and_its_closest_flag():
    """argparse reported a subcommand's unknown flag from the top parser: ``kcache: error:
    unrecognized arguments: --kernl (see 'kcache --help')``, whose help does not list it."""
    assert one_line_error(kc("ls", "--kernl", "x")) == (
        "kcache ls: error: unrecognized arguments: --kernl x; did you mean '--kernel'? "
        "(see 'kcache ls --help')")
    assert one_line_error(kc("warm", "--cc", "9.0", "--record")) == (
        "kcache warm: error: unrecognized arguments: --record (see 'kcache warm --help')")
    line = one_line_error(kc("--dir", "/tmp", "stats", "--zeor"))
    assert line.startswith("kcache stats: error: unrecognized arguments: --zeor; did you "
                           "mean '--zero'?")
    assert one_line_error(kc("ls", "extra")) == (
        "kcache ls: error: unrecognized arguments: extra (see 'kcache ls --help')")


def test_cache_dir_is_an_alias_of_dir_and_no_color_is_accepted(cache):
    root, _ = cache
    done = kc("--cache-dir", str(root), "ls", "--json", "--no-color")
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["entries"]) == 4
    done = kc("ls", "--cache-dir", str(root), "--json")
    assert done.returncode == 0 and len(json.loads(done.stdout)["entries"]) == 4


def test_completion_refuses_json():
    assert "--json is not accepted" in one_line_error(kc("completion", "bash", "--json"))


def test_rm_of_several_entries_needs_yes_off_a_terminal(cache):
    root, paths = cache
    line = one_line_error(kc("rm", "--kernel", "*", root=root))
    assert "--yes" in line and all(p.exists() for p in paths.values())
    line = one_line_error(kc("rm", "b2", "c3", "--json", root=root))
    assert "--yes" in line and all(p.exists() for p in paths.values())
    # a dry run lists what would go and removes nothing, without --yes
    for flag in ("--dry-run", "-n"):
        doc = kc_json("rm", "--kernel", "*", flag, root=root)
        assert doc["dry_run"] is True and len(doc["removed"]) == 4
        assert doc["bytes_freed"] == sum(p.stat().st_size for p in paths.values())
    done = kc("rm", "--kernel", "*", "-n", root=root)
    assert done.returncode == 0 and "would remove 4 entries" in done.stderr
    assert all(p.exists() for p in paths.values())
    assert kc_json("rm", "b2", root=root)["dry_run"] is False  # one entry: no --yes needed
    assert len(kc_json("rm", "--kernel", "*", "-y", root=root)["removed"]) == 3
    assert not any(p.exists() for p in paths.values())


def test_rm_asks_on_a_terminal_before_removing_several(cache):
    root, paths = cache
    status, _, err = on_terminal("rm", "--kernel", "pkg.linalg:*", "--dir", str(root),
                                 answer="n\n")
    assert status == 1 and "Remove 2 entries? [y/N]" in err
    assert all(p.exists() for p in paths.values())
    status, _, err = on_terminal("rm", "--kernel", "pkg.linalg:*", "--dir", str(root),
                                 answer="y\n")
    assert status == 0, err
    assert [k for k, p in paths.items() if p.exists()] == [K_SAXPY_80, K_STALE]


@pytest.mark.exec_children  # what a fresh interpreter imports
def test_cli_never_imports_numba_or_rich_for_plain_output(cache):
    root, _ = cache
    probe = ("import sys, runpy; sys.argv=['kcache','ls','--dir',sys.argv[1]];"
             "from kcache.cli import main; rc = main();"
             "bad = [m for m in ('numba', 'rich', 'kcache.dispatcher') if m in sys.modules];"
             "print('LOADED', bad, file=sys.stderr); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", probe, str(root)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "LOADED []" in done.stderr


@pytest.mark.slow
def test_dir_json_and_plain(cache, tmp_path):
    root, _ = cache
    layer = tmp_path / "layer"
    layer.mkdir()
    doc = kc_json("dir", root=root, env={"KCACHE_READONLY_DIRS": str(layer)})
    assert doc == {"root": str(root), "writable": True, "readonly_dirs": [str(layer)],
                   "readonly_roots": [str(layer)],  # the old name, kept for scripts
                   "config_file": str(root / "config.json"), "trusted": True, "untrusted": {},
                   "remote": None, "remote_readonly": None, "remote_namespace": None,
                   "remote_signed": None}
    done = kc("dir", root=root)
    assert done.stdout.splitlines()[0] == str(root)
    # KCACHE_DIR is used when --dir is absent
    assert kc_json_env("dir", env={"KCACHE_DIR": str(root)})["root"] == str(root)


def test_dir_of_a_root_not_made_yet_warns_of_no_layer(tmp_path):
    # the writable root is made on first write: its absence is no missing read-only layer
    root = tmp_path / "not-yet"
    done = kc("dir", root=root, process=True)
    assert done.returncode == 0 and done.stdout.splitlines()[0] == str(root)
    assert "read-only layer" not in done.stderr, done.stderr


def kc_json_env(*args, env):
    done = kc(*args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# ------------------------------------------------------------------------------ ls

@pytest.mark.slow
def test_ls_json_schema_sort_and_filters(cache):
    root, _ = cache
    entries = kc_json("ls", root=root)["entries"]
    assert [e["key"] for e in entries] == [K_AXPY_90, K_AXPY_90A, K_SAXPY_80, K_STALE]
    for e in entries:
        assert_entry_schema(e)
        assert isinstance(e["stale"], bool)
    assert [e["stale"] for e in entries] == [False, False, False, True]
    assert entries[0]["kernel"] == "pkg.linalg:axpy" and entries[0]["arch"] == "sm_90"

    by_size = kc_json("ls", "--sort", "size", root=root)["entries"]
    assert [e["key"] for e in by_size] == [K_AXPY_90, K_AXPY_90A, K_SAXPY_80, K_STALE]
    by_name = kc_json("ls", "--sort", "name", "--limit", "1", root=root)["entries"]
    assert [e["kernel"] for e in by_name] == ["pkg.blas:saxpy"]

    cc90 = kc_json("ls", "--cc", "9.0", root=root)["entries"]
    assert sorted(e["arch"] for e in cc90) == ["sm_90", "sm_90a"]
    assert [e["arch"] for e in kc_json("ls", "--cc", "sm_90a", root=root)["entries"]] == [
        "sm_90a"]
    both = kc_json("ls", "--cc", "8.0", "--cc", "sm_90a", root=root)["entries"]  # repeatable
    assert sorted(e["arch"] for e in both) == sorted(
        e["arch"] for e in kc_json("ls", root=root)["entries"] if e["arch"] in ("sm_80", "sm_90a"))
    assert {e["arch"] for e in both} == {"sm_80", "sm_90a"}
    axpy = kc_json("ls", "--kernel", "axpy", root=root)["entries"]
    assert {e["key"] for e in axpy} == {K_AXPY_90, K_AXPY_90A}
    stale = kc_json("ls", "--stale", root=root)["entries"]
    assert [e["key"] for e in stale] == [K_STALE]


def test_ls_piped_is_tab_separated_with_exact_bytes(cache):
    root, paths = cache
    done = kc("ls", root=root)
    # the count and total size (as `pip cache list` ends) on stderr: stdout holds rows only
    from kcache.config import format_size
    total = format_size(sum(p.stat().st_size for p in paths.values()))
    assert done.returncode == 0 and done.stderr == f"kcache: 4 entries, {total}\n"
    lines = done.stdout.splitlines()
    assert len(lines) == 5
    # The header names are the JSON field names; compile seconds rounded (exact in JSON).
    assert lines[0].split("\t") == ["short_key", "kernel", "signature", "arch", "file_size",
                                    "hits", "last_used", "compile_seconds"]
    first = lines[1].split("\t")
    assert first[7] == "0.50"
    assert first[0] == K_AXPY_90[:12] and first[1] == "pkg.linalg:axpy"
    assert int(first[4]) == paths[K_AXPY_90].stat().st_size
    assert is_iso(first[6])



def test_ls_with_both_streams_on_one_pipe_ends_with_its_summary(cache):
    """`kcache ls 2>&1 | less`: the rows (stdout, block-buffered on a pipe) come before the
    summary line (stderr), as on a terminal and as docs/cli.md says ls ends."""
    root, _paths = cache
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KCACHE_") and k != "PYTHONUNBUFFERED"}  # stdout buffered
    done = subprocess.run([sys.executable, "-m", "kcache", "ls", "--dir", str(root)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env, timeout=120)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == 6, done.stdout
    assert lines[0].startswith("short_key\t") and lines[-1].startswith("kcache: 4 entries, ")

def on_terminal(*args: str, answer: str | None = None, columns: int = 200,
                env: dict | None = None) -> tuple[int, str, str]:
    """Run ``python -m kcache ARGS`` with stdin and stdout on a pseudo-terminal of
    ``columns`` columns (also in $COLUMNS, which rich reads first).

    ``answer`` is typed on the terminal. Returns (status, terminal output, stderr)."""
    master, slave = ptykit.open_terminal(columns)
    full_env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")
                and not k.startswith("KCACHE_")}
    full_env.update(env or {}, COLUMNS=str(columns))
    proc = subprocess.Popen([sys.executable, "-m", "kcache", *args], stdin=slave,
                            stdout=slave, stderr=subprocess.PIPE, env=full_env)
    os.close(slave)
    if answer is not None:
        os.write(master, answer.encode())
    shown = ptykit.drain(master)
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    return proc.wait(timeout=60), shown.decode(), stderr


@pytest.mark.slow
def test_ls_on_a_terminal_draws_a_table_with_human_units(cache):
    root, _ = cache
    status, text, err = on_terminal("ls", "--dir", str(root))
    assert status == 0, err
    assert "1 d ago" in text and "KiB" in text and "pkg.linalg:axpy" in text
    assert K_AXPY_90[:12] in text and "\t" not in text


@pytest.mark.slow
@pytest.mark.parametrize("args", [["dir"], ["stats"], ["show", "b2"], ["verify"],
                                  ["config"], ["prune", "--dry-run", "--max-size", "1"],
                                  ["config", "get", "max_size"]])
def test_every_command_works_on_a_terminal(cache, args):
    root, _ = cache
    status, text, err = on_terminal(*args, "--dir", str(root))
    assert status == 0 and "Traceback" not in err + text, err + text
    assert (text + err).strip()


@pytest.mark.slow
def test_clear_asks_on_a_terminal(cache):
    root, paths = cache
    status, _, err = on_terminal("clear", "--dir", str(root), answer="n\n")
    assert status == 1 and "[y/N]" in err
    assert all(p.exists() for p in paths.values())
    status, _, err = on_terminal("clear", "--dir", str(root), answer="y\n")
    assert status == 0, err
    assert not any(p.exists() for p in paths.values())


# ------------------------------------------------------------------------------ stats

STATS_FIELDS = {"hits": int, "misses": int, "compiles": int, "puts": int, "evictions": int,
                "corrupt": int, "lock_waits": int, "lock_timeouts": int, "lock_stale": int,
                "artifacts_refused": int,
                "bytes_written": int, "compile_seconds": float, "seconds_saved": float,
                "entries": int, "bytes": int, "max_size": int, "recounted": bool}


@pytest.mark.parametrize("files,shown", [(0, "0 files, 0 B"), (1, "1 file, 1.2 KiB"),
                                          (2, "2 files, 1.2 KiB")])
def test_stats_on_a_terminal_counts_quarantined_files_in_words(tmp_path, files, shown):
    """``quarantine  1 file, 16.2 KiB``, as the code analyses' row says it (a user trial saw
    ``1 files``)."""
    from kcache.cli.cmd_stats import terminal_rows
    (tmp_path / "cache").mkdir()
    doc = kc_json("stats", root=tmp_path / "cache")
    doc.update(quarantine_files=files, quarantine_bytes=1234 if files else 0)
    [row] = [r for r in terminal_rows(doc, remote=False) if r[0] == "quarantine"]
    assert row[1] == shown


@pytest.mark.slow
def test_stats_json_zero_and_recount(cache):
    root, paths = cache
    store = Store(root)
    assert store.get(K_AXPY_90) is not None
    assert store.get(K_AXPY_90A) is not None
    assert store.get("d4" + "0" * 62) is None
    store.record(compiles=1, compile_seconds=0.8)
    store.flush()
    doc = kc_json("stats", root=root)
    for name, kind in STATS_FIELDS.items():
        assert isinstance(doc[name], kind), (name, doc)
    assert (doc["hits"], doc["misses"], doc["compiles"]) == (2, 1, 1)
    assert doc["hit_rate"] == pytest.approx(2 / 3)
    assert doc["seconds_saved"] == pytest.approx(1.0)
    assert doc["recounted"] is False

    # A file the store did not write: stats alone never scans, so only --recount sees it.
    stray = root / "v1" / "entries" / "ee" / ("ee" * 32 + ".kce")
    stray.parent.mkdir()
    stray.write_bytes(paths[K_STALE].read_bytes())
    assert doc["entries"] == 4 and kc_json("stats", root=root)["entries"] == 4
    recounted = kc_json("stats", "--recount", root=root)
    assert recounted["entries"] == 5
    assert recounted["bytes"] == sum(p.stat().st_size for p in [*paths.values(), stray])
    assert recounted["recounted"] is True

    zeroed = kc_json("stats", "--zero", root=root)
    assert (zeroed["hits"], zeroed["misses"], zeroed["compiles"]) == (0, 0, 0)
    assert zeroed["hit_rate"] is None
    assert kc_json("stats", "-z", root=root)["hits"] == 0  # ccache's short form
    plain = kc("stats", root=root)
    assert plain.returncode == 0
    assert "hits\t0" in plain.stdout.splitlines()


@pytest.mark.slow
def test_plain_seconds_are_rounded_and_json_keeps_them_exact(cache):
    root, _ = cache
    store = Store(root)
    store.record(compiles=1, compile_seconds=1 / 3)
    store.flush()
    plain = dict(line.split("\t") for line in kc("stats", root=root).stdout.splitlines())
    assert plain["compile_seconds"] == "0.33" and plain["seconds_saved"] == "0.00"
    assert kc_json("stats", root=root)["compile_seconds"] == pytest.approx(1 / 3, abs=1e-12)
    fields = dict(line.split("\t", 1) for line in kc("show", "b2", root=root).stdout.splitlines())
    assert fields["compile_seconds"] == "0.50" and fields["meta.compile_seconds"] == "0.50"


# ------------------------------------------------------------------------------ show

@pytest.mark.slow
def test_show_json_ptx_extract(cache, tmp_path):
    root, _ = cache
    out = tmp_path / "out"
    doc = kc_json("show", "b2", "--ptx", "--extract", str(out), root=root)
    assert_entry_schema(doc)
    assert doc["key"] == K_SAXPY_80
    assert doc["components"]["target"] == {"cc": "sm_80", "output": "cubin"}
    assert doc["components"]["toolchain"] == package_versions()
    assert doc["meta"]["entry_name"] == "_Z4axpy"
    assert doc["ptx"] == "// ptx of pkg.blas:saxpy\n"
    cubin = out / "pkg.blas_saxpy.sm_80.cubin"
    assert sorted(doc["extracted"]) == sorted([str(cubin), str(out / "pkg.blas_saxpy.sm_80.ptx")])
    assert cubin.read_bytes() == bytes([7]) * 2000

    plain = kc("show", K_SAXPY_80[:12], root=root)
    assert plain.returncode == 0
    fields = dict(line.split("\t", 1) for line in plain.stdout.splitlines())
    assert fields["key"] == K_SAXPY_80 and fields["components.target.cc"] == "sm_80"
    # every field of the entry object that has a value (docs/cli.md), the front-end included
    shown = {name for name, value in doc.items() if value not in (None, [], {})}
    shown -= {"short_key", "sizes", "components", "meta", "ptx", "extracted"}
    assert shown <= set(fields), shown - set(fields)
    assert fields["frontend"] == "numba-cuda"


@pytest.mark.slow
def test_show_sass_uses_a_disassembler_on_path_or_says_none_is_there(cache, tmp_path):
    root, _ = cache
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    line = one_line_error(kc("show", "b2", "--sass", root=root, env={"PATH": str(empty)}), 1)
    assert "nvdisasm" in line and "cuobjdump" in line

    fake = tmp_path / "bin"
    fake.mkdir()
    tool = fake / "nvdisasm"
    tool.write_text('#!/bin/sh\necho "SASS of $(wc -c < "$1") bytes"\n')
    tool.chmod(0o755)
    doc = kc_json("show", "b2", "--sass", root=root,
                  env={"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"})
    assert doc["sass"].split() == ["SASS", "of", "2000", "bytes"]


# ------------------------------------------------------------------------------ bad input

@pytest.mark.parametrize("args, needle", [
    (["prune", "--max-size", "2Q"], "2Q"),
    (["prune", "--older-than", "-3d"], "sign"),
    (["prune", "--max-size", "-1G"], "sign"),
    (["prune", "--max-size", "-0"], "sign"),
    (["prune", "--max-size", "9" * 400 + "T"], "too large"),
    (["prune", "--older-than", "9" * 400 + "w"], "too large"),
    (["rm", "--kernel", ""], "glob pattern"),
    (["show", "b2", "--extract", ""], "--extract"),
    (["prune", "--older-than", "soon"], "soon"),
    (["ls", "--sort", "bogus"], "last-used"),
    (["ls", "--cc", "nine"], "compute capability"),
    (["ls", "--limit", "0"], "1 or more"),
    (["show", "zz"], "hex"),
    (["show", "a1"], "ambiguous"),
    (["ls", "--kernel", ""], "glob pattern"),
    (["ls", "--kernel", " "], "glob pattern"),
    (["rm"], "--kernel"),
    (["config", "get", "colour"], "max_size"),
    (["config", "set", "colour", "red"], "max_size"),
    (["config", "set", "max_size", "2Q"], "2Q"),
    (["clear"], "--yes"),
    (["frobnicate"], "frobnicate"),
])
def test_bad_input_is_one_line_and_exit_2(cache, args, needle):
    root, paths = cache
    before = {p: p.read_bytes() for p in paths.values()}
    line = one_line_error(kc(*args, root=root))
    assert needle in line
    assert {p: p.read_bytes() for p in paths.values()} == before  # nothing touched


HUGE = "9" * 5000  # past int()'s 4,300-digit limit: must be bounded before any conversion


@pytest.mark.parametrize("args, needle", [
    (["ls", "--limit", HUGE], "too large"),
    (["ls", "--limit", "9223372036854775808"], "too large"),
    (["prune", "--max-size", HUGE], "too large"),
    (["prune", "--max-size", HUGE + "G"], "too large"),
    (["prune", "--older-than", HUGE], "too large"),
    (["prune", "--older-than", "1." + HUGE + "d"], "too large"),
    (["config", "set", "max_size", HUGE], "too large"),
    (["config", "set", "lock_timeout", HUGE], "too large"),
    (["ls", "--cc", HUGE + "."], "compute capability"),
    (["show", HUGE], "key prefix"),
    (["ls", "--sort", HUGE], "sort key"),
])
def test_huge_numbers_are_one_short_line_and_exit_2(cache, args, needle):
    root, _ = cache
    line = one_line_error(kc(*args, root=root))
    assert needle in line and len(line) < 1000, line
    assert not (root / "config.json").exists()


def test_limit_accepts_leading_zeros_without_converting_them_all(cache):
    root, _ = cache
    assert len(kc_json("ls", "--limit", "0" * 5000 + "2", root=root)["entries"]) == 2


@pytest.mark.slow
def test_readonly_dirs_is_the_one_name(cache, tmp_path):
    root, _ = cache
    layer = tmp_path / "layer"
    layer.mkdir()
    done = kc("config", "set", "readonly_dirs", str(layer), root=root)
    assert done.returncode == 0 and done.stderr.count("\n") == 1, done.stderr  # no warning
    assert kc_json("config", "get", "readonly_dirs", root=root) == {
        "key": "readonly_dirs", "value": [str(layer)], "origin": f"config {root / 'config.json'}"}
    plain = kc("config", root=root).stdout
    assert "readonly_dirs\t" in plain and "readonly_roots" not in plain
    # The old name still works as input, with a note; JSON keeps the old field.
    done = kc("config", "get", "readonly_roots", "--json", root=root)
    assert done.returncode == 0 and "old name" in done.stderr
    assert json.loads(done.stdout)["value"] == [str(layer)]
    done = kc("config", "set", "readonly_roots", str(layer), root=root)
    assert done.returncode == 0 and "old name" in done.stderr
    assert json.loads((root / "config.json").read_text()) == {"readonly_dirs": [str(layer)]}
    status, text, _ = on_terminal("dir", "--dir", str(root))
    assert status == 0 and "read-only dir" in text and "layer " not in text
    bundle = tmp_path / "layer.kcb"  # a bundle file served in place is named as such
    assert kc("export", str(bundle), root=root).returncode == 0
    done = kc("config", "set", "readonly_dirs", f"{layer}{os.pathsep}{bundle}", root=root)
    status, text, _ = on_terminal("dir", "--dir", str(root))
    assert status == 0 and text.count("read-only dir") == 1 and "read-only bundle" in text


def test_config_set_readonly_dirs_to_a_missing_folder_warns_and_sets(cache, tmp_path):
    root, _ = cache
    missing = tmp_path / "nonexistent"
    done = kc("config", "set", "readonly_dirs", str(missing), root=root)
    assert done.returncode == 0, done.stderr
    [warning] = [line for line in done.stderr.splitlines() if "warning" in line]
    assert str(missing) in warning and "does not exist" in warning
    assert json.loads((root / "config.json").read_text()) == {"readonly_dirs": [str(missing)]}


@pytest.mark.slow
def test_unknown_and_ambiguous_prefixes_name_the_candidates(cache):
    root, paths = cache
    # A well-formed prefix that no key has is "not found" (1), not a usage error (2).
    line = one_line_error(kc("show", "a2", root=root), 1)
    assert "no entry" in line
    assert K_AXPY_90[:12] in line or K_AXPY_90A[:12] in line  # nearest keys
    before = {p: p.read_bytes() for p in paths.values()}
    line = one_line_error(kc("rm", "b2", "a2", root=root), 1)  # nothing removed
    assert "no entry with key prefix 'a2'" in line
    assert {p: p.read_bytes() for p in paths.values()} == before
    line = one_line_error(kc("rm", "a1", root=root))
    assert K_AXPY_90[:12] in line and K_AXPY_90A[:12] in line


def test_a_prefix_no_key_starts_like_names_no_nearest_key(cache):
    """issue 35: `rm deadbeef` said `nearest keys: f38f8025ea44, …`, near in no sense."""
    root, _ = cache
    line = one_line_error(kc("rm", "deadbeef", root=root), 1)
    assert "no entry's key starts with 'd'" in line and "nearest" not in line, line
    assert all(k[:12] not in line for k in (K_AXPY_90, K_SAXPY_80, K_STALE)), line
    line = one_line_error(kc("show", "a1f0", root=root), 1)  # the keys sharing 'a1f'
    assert "keys starting with 'a1f': " + K_AXPY_90A[:12] in line, line
    assert K_AXPY_90[:12] not in line, line


@pytest.mark.slow
def test_bad_environment_and_config_file_are_one_line(cache, tmp_path):
    root, _ = cache
    afile = tmp_path / "afile"
    afile.write_text("x")
    line = one_line_error(kc("ls", env={"KCACHE_DIR": str(afile)}))
    assert "KCACHE_DIR" in line
    line = one_line_error(kc("stats", root=root, env={"KCACHE_MAX_SIZE": "lots"}))
    assert "KCACHE_MAX_SIZE" in line
    # A broken config.json is a warning everywhere (its settings ignored), and config set
    # replaces it, keeping the old text as config.json.bad.
    (root / "config.json").write_text("{not json")
    done = kc("ls", root=root)
    assert done.returncode == 0 and done.stdout
    [line, total] = done.stderr.strip().splitlines()
    assert total.startswith("kcache: 4 entries, ")
    assert "config.json" in line and "ignored" in line
    done = kc("config", "show", root=root)
    assert done.returncode == 1 and line in done.stderr  # the same words
    assert kc("config", "set", "max_size", "1G", root=root).returncode == 0
    assert (root / "config.json.bad").read_text() == "{not json"
    assert json.loads((root / "config.json").read_text()) == {"max_size": 2**30}


@pytest.mark.slow
def test_a_named_root_that_does_not_exist_is_said_and_not_created(tmp_path):
    root = tmp_path / "nowhere"
    for args in (["ls"], ["stats"], ["prune"], ["verify"], ["show", "ab"], ["ls", "--json"]):
        line = one_line_error(kc(*args, root=root), 1)
        assert f"{root} (from --dir) does not exist" in line, line
        line = one_line_error(kc(*args, env={"KCACHE_DIR": str(root)}), 1)
        assert "(from KCACHE_DIR) does not exist" in line, line
    assert not root.exists()
    # with a read-only dir there is something to read: the entries there are listed
    layer = tmp_path / "layer"
    fill(layer)
    assert len(kc_json("ls", root=root, env={"KCACHE_READONLY_DIRS": str(layer)})["entries"]) == 4


def test_the_default_root_before_its_first_use_reads_as_empty(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path / "home")}
    for args in (["ls"], ["stats"], ["prune"], ["verify"]):
        done = kc(*args, "--json", env=env)
        assert done.returncode == 0, done.stderr
    assert json.loads(kc("ls", "--json", env=env).stdout) == {"entries": []}
    assert not (tmp_path / "xdg" / "kcache").exists()


@pytest.mark.slow
def test_readonly_layer_entries_are_listed_but_not_removed(cache, tmp_path):
    root, _ = cache
    writable = tmp_path / "mine"
    env = {"KCACHE_READONLY_DIRS": str(root)}
    entries = kc_json("ls", root=writable, env=env)["entries"]
    assert len(entries) == 4 and all(e["readonly"] for e in entries)
    done = kc("rm", "b2", "--json", root=writable, env=env)
    assert done.returncode == 1 and "read-only" in done.stderr
    assert [e["key"] for e in json.loads(done.stdout)["not_removed"]] == [K_SAXPY_80]
    assert Store(root).header(K_SAXPY_80) is not None


def test_a_bad_entry_of_a_layer_is_not_offered_to_verify_fix_or_rm(cache, tmp_path):
    # No command changes a read-only layer: ls, show and verify say so, never "verify --fix"
    # or "rm", which could not remove it.
    root, paths = cache
    path = paths[K_SAXPY_80]
    path.write_bytes(path.read_bytes()[:60])  # truncated
    writable = tmp_path / "mine"
    env = {"KCACHE_READONLY_DIRS": str(root)}
    listed = kc("ls", root=writable, env=env)
    assert listed.returncode == 0
    assert "never changes a read-only layer" in listed.stderr
    assert "verify --fix" not in listed.stderr and "kcache rm" not in listed.stderr
    shown = kc("show", K_SAXPY_80[:12], root=writable, env=env)
    line = one_line_error(shown, 1)  # as for a bad entry of the root
    assert "read-only layer" in line and "verify --fix" not in line
    checked = kc("verify", root=writable, env=env)
    assert checked.returncode == 1  # a bad entry remains
    assert "never changes a read-only layer" in checked.stderr
    assert "run 'kcache verify --fix'" not in checked.stderr


def test_show_checks_the_copy_it_shows_not_a_layers(cache, tmp_path):
    # The root's copy is corrupt, a layer's is sound: show named the root's file and said
    # nothing was wrong (its check read the layer's copy).
    import shutil
    root, paths = cache
    layer = tmp_path / "layer"
    shutil.copytree(root, layer)
    path = paths[K_SAXPY_80]
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # in the payload: the header still reads, the checksum fails
    path.write_bytes(bytes(data))
    env = {"KCACHE_READONLY_DIRS": str(layer)}
    shown = kc("show", K_SAXPY_80[:12], root=root, env=env)
    assert shown.returncode == 1 and "corrupt" in shown.stderr, (shown.stdout, shown.stderr)
    assert "read-only layer" not in shown.stderr  # the root's entry: verify --fix offered
    assert kc("show", K_SAXPY_80[:12], root=root).returncode == 1  # no layer: the same


def test_a_real_bug_keeps_its_traceback(cache, tmp_path):
    root, _ = cache
    shim = tmp_path / "bug"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import kcache.store\n"
        "def entries(self, **kw):\n"
        "    raise RuntimeError('injected bug')\n"
        "kcache.store.Store.entries = entries\n")
    done = kc("ls", root=root, env={"PYTHONPATH": str(shim)})
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "RuntimeError: injected bug" in done.stderr


@pytest.mark.slow
def test_dir_that_is_a_file(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for args in (["ls"], ["stats"], ["prune"], ["config"]):
        line = one_line_error(kc(*args, root=afile))
        assert str(afile) in line
    assert afile.read_text() == "x"


@pytest.mark.slow
def test_newer_format_entry_is_reported_and_left_untouched(cache):
    root, paths = cache
    path = paths[K_SAXPY_80]
    data = bytearray(path.read_bytes())
    # As a newer kcache would write it (layout in kcache/entry.py): version field 99, and a
    # valid trailing BLAKE2b-256 checksum so only the version tells it apart.
    data[8:10] = (99).to_bytes(2, "big")
    data[-32:] = hashlib.blake2b(bytes(data[:-32]), digest_size=32).digest()
    path.write_bytes(bytes(data))
    for args in (["show", "b2", "--ptx"], ["rm", "b2"], ["prune", "--max-size", "1"],
                 ["clear", "--yes"]):
        line = one_line_error(kc(*args, root=root))
        assert "newer" in line.lower(), line
        assert "1 entries" not in line, line
    # The dry run previews the same refusal, word for word.
    assert one_line_error(kc("prune", "--max-size", "1", "--dry-run", root=root)) == \
        one_line_error(kc("prune", "--max-size", "1", root=root))
    done = kc("verify", "--fix", "--json", root=root)
    assert done.returncode == 0 and json.loads(done.stdout)["newer"] == [str(path)]
    assert path.read_bytes() == bytes(data)


@pytest.mark.slow
def test_a_large_newer_format_file_is_judged_in_bounded_memory(tmp_path):
    """prune and clear tell a newer kcache's entry by its whole-file checksum; a 256 MiB one
    (sparse) must not be read into memory whole (a 4 GiB one took 4 GiB)."""
    import struct
    root = tmp_path / "root"
    Store(root).put(make_key({"x": 1}), Entry({"blob": b"x"}, {"kernel": "m:k"}))
    size = 256 << 20
    path = root / "v1" / "entries" / "ab" / ("ab" + "0" * 62 + ".kce")
    path.parent.mkdir(mode=0o700, exist_ok=True)
    with open(path, "wb") as f:  # version 2, lengths that agree with the size, sum that holds
        f.write(struct.pack(">8sHHIQ16s", b"KCACHE\x00E", 2, 0, 0, size - 72, bytes(16)))
        f.truncate(size - 32)
    h = hashlib.blake2b(digest_size=32)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    with open(path, "ab") as f:
        f.write(h.digest())
    path.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    proc = subprocess.Popen([sys.executable, "-m", "kcache", "prune", "--dry-run", "--dir",
                             str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)  # this child's own peak (its output is a line)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read()
    proc.stdout.close(), proc.stderr.close()
    peak_kib = usage.ru_maxrss
    assert proc.returncode == 2 and b"newer" in err, err
    assert peak_kib < 150 << 10, f"peak {peak_kib >> 10} MiB for a {size >> 20} MiB file"


# ------------------------------------------------------------------------------ prune / rm

@pytest.mark.slow
def test_prune_removes_exactly_the_least_recently_used(cache):
    root, paths = cache
    sizes = {k: p.stat().st_size for k, p in paths.items()}
    keep = sizes[K_AXPY_90] + sizes[K_AXPY_90A]  # the two most recently used
    snapshot = {p: (p.read_bytes(), p.stat().st_mtime) for p in paths.values()}

    dry = kc_json("prune", "--max-size", str(keep), "--dry-run", root=root)
    assert dry["dry_run"] is True
    assert {e["key"] for e in dry["removed"]} == {K_SAXPY_80, K_STALE}
    assert dry["bytes_freed"] == sizes[K_SAXPY_80] + sizes[K_STALE]
    assert {p: (p.read_bytes(), p.stat().st_mtime) for p in paths.values()} == snapshot

    done = kc("prune", "--max-size", str(keep), root=root)
    assert done.returncode == 0, done.stderr
    assert {line.split("\t")[0] for line in done.stdout.splitlines()[1:]} == {
        K_SAXPY_80[:12], K_STALE[:12]}
    assert str(sizes[K_SAXPY_80] + sizes[K_STALE]) in done.stderr
    assert {k for k, p in paths.items() if p.exists()} == {K_AXPY_90, K_AXPY_90A}


@pytest.mark.slow
def test_prune_older_than_and_stale(cache):
    root, paths = cache
    doc = kc_json("prune", "--older-than", "5d", "--dry-run", root=root)
    assert [e["key"] for e in doc["removed"]] == [K_STALE]
    doc = kc_json("prune", "--stale", root=root)
    assert [e["key"] for e in doc["removed"]] == [K_STALE]
    assert not paths[K_STALE].exists() and paths[K_SAXPY_80].exists()


def test_prune_without_flags_applies_the_configured_cap(cache):
    root, paths = cache
    assert kc("config", "set", "max_size", str(paths[K_AXPY_90].stat().st_size),
              root=root).returncode == 0
    doc = kc_json("prune", root=root)
    assert {e["key"] for e in doc["removed"]} == {K_AXPY_90A, K_SAXPY_80, K_STALE}
    assert [k for k, p in paths.items() if p.exists()] == [K_AXPY_90]


@pytest.mark.slow
def test_rm_by_prefix_and_by_kernel(cache):
    root, paths = cache
    doc = kc_json("rm", "b2", K_STALE[:8], "--yes", root=root)
    assert {e["key"] for e in doc["removed"]} == {K_SAXPY_80, K_STALE}
    assert doc["bytes_freed"] == sum(e["file_size"] for e in doc["removed"])
    doc = kc_json("rm", "--kernel", "pkg.linalg:*", "--yes", root=root)
    assert {e["key"] for e in doc["removed"]} == {K_AXPY_90, K_AXPY_90A}
    assert not any(p.exists() for p in paths.values())


@pytest.mark.slow
def test_clear_needs_yes_when_not_on_a_terminal(cache):
    root, paths = cache
    one_line_error(kc("clear", root=root))
    assert all(p.exists() for p in paths.values())
    size = sum(p.stat().st_size for p in paths.values())
    assert kc_json("clear", "--yes", root=root) == {
        "root": str(root), "removed": 4, "bytes_freed": size, "not_removed": [],
        "code_memos_removed": 0, "code_memo_bytes_freed": 0}
    assert not any(p.exists() for p in paths.values())
    assert kc_json("ls", root=root) == {"entries": []}


# ------------------------------------------------------------------------------ verify

@pytest.mark.slow
def test_verify_reports_then_quarantines_a_corrupt_entry(cache):
    root, paths = cache
    assert kc_json("verify", root=root) == {"checked": 4, "ok": True, "bad": [], "newer": []}
    path = paths[K_AXPY_90A]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the cubin payload: only the checksum can tell
    path.write_bytes(bytes(data))

    done = kc("verify", "--json", root=root)
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["ok"] is False and doc["checked"] == 4
    assert [b["key"] for b in doc["bad"]] == [K_AXPY_90A]
    assert doc["bad"][0]["quarantined"] is False and doc["bad"][0]["problem"]
    assert path.exists()

    # KCACHE_DISABLE keeps programs off the cache, not the maintenance asked for here
    fixed = kc("verify", "--fix", root=root, env={"KCACHE_DISABLE": "1"})
    assert fixed.returncode == 0, fixed.stderr
    assert K_AXPY_90A[:12] in fixed.stdout
    assert not path.exists()
    assert any((root / "v1" / "quarantine").iterdir())
    assert kc("verify", root=root).returncode == 0
    assert K_AXPY_90A not in {e["key"] for e in kc_json("ls", root=root)["entries"]}


# ------------------------------------------------------------------------------ config

@pytest.mark.slow
def test_every_config_json_setting_can_be_seen_and_fixed(tmp_path):
    """max_entry_size and quarantine_age are config.json keys too: a bad value there stops
    every command, so config show reports it (exit 1) and config unset fixes it."""
    root = tmp_path / "root"
    assert kc("config", "set", "quarantine_age", "7d", root=root).returncode == 0
    assert kc("config", "get", "quarantine_age", root=root).stdout.strip() == str(7 * 86400.0)
    (root / "config.json").write_text('{"max_entry_size": "lots"}')
    assert kc("ls", root=root).returncode == 2
    shown = kc("config", "show", "--json", root=root)
    assert shown.returncode == 1
    (error,) = json.loads(shown.stdout)["errors"]
    assert error.startswith("max_entry_size in ") and "is not a size" in error
    assert kc("config", "unset", "max_entry_size", root=root).returncode == 0
    assert kc("ls", root=root).returncode == 0


def test_config_show_get_set(cache):
    root, _ = cache
    doc = kc_json("config", root=root, env={"KCACHE_LOCK_TIMEOUT": "90s"})
    assert doc["root"] == str(root) and doc["config_file"] == str(root / "config.json")
    settings = doc["settings"]
    assert set(settings) == {"root", "max_size", "readonly_dirs", "readonly_roots",
                             "lock_timeout", "lock_stale", "disabled", "shared",
                             "max_entry_size", "quarantine_age", "remote",
                             "remote_namespace",
                             "remote_readonly", "remote_timeout", "remote_ttl", "remote_wait"}
    assert settings["max_entry_size"] == {"value": 256 << 20, "origin": "default"}
    assert settings["readonly_roots"] == settings["readonly_dirs"]  # old name, same content
    assert settings["root"] == {"value": str(root), "origin": "argument"}
    assert settings["lock_timeout"] == {"value": 90.0, "origin": "env KCACHE_LOCK_TIMEOUT"}
    assert settings["max_size"]["origin"] == "default"

    done = kc("config", "set", "max_size", "10G", root=root)
    assert done.returncode == 0, done.stderr
    assert json.loads((root / "config.json").read_text())["max_size"] == 10 << 30
    got = kc_json("config", "get", "max_size", root=root)
    assert got == {"key": "max_size", "value": 10 << 30,
                   "origin": f"config {root / 'config.json'}"}
    assert kc("config", "get", "max_size", root=root).stdout.strip() == str(10 << 30)
    assert kc_json("stats", root=root)["max_size"] == 10 << 30


def test_config_set_of_a_setting_shown_but_not_in_config_json_names_its_source(cache):
    """``config show`` lists lock_stale, disabled and root; ``config set`` of one of them said
    ``unknown setting 'lock_stale'`` while ``config get lock_stale`` answered: it names where
    the setting comes from instead."""
    root, _ = cache
    for name, source in (("lock_stale", "KCACHE_LOCK_STALE"), ("disabled", "KCACHE_DISABLE"),
                         ("root", "KCACHE_DIR")):
        assert kc("config", "get", name, root=root).returncode == 0
        for action in (("set", name, "1"), ("unset", name)):
            line = one_line_error(kc("config", *action, root=root))
            assert "unknown setting" not in line and source in line, line
            assert "config.json" in line and "accepted: max_size" in line, line
    assert not (root / "config.json").exists()
    assert "unknown setting 'nope'" in one_line_error(kc("config", "set", "nope", "1",
                                                         root=root))


# ------------------------------------------------------------------------------ read-only root
# Tests run as root, where chmod does not stop writes, so a read-only mount is simulated: the
# subprocess gets trustkit.READONLY_SHIM as its ``sitecustomize`` (through PYTHONPATH), which
# makes every write under $KCACHE_TEST_READONLY fail with EROFS while reads work.


@pytest.fixture
def readonly(tmp_path):
    root = tmp_path / "cache"
    paths = fill(root)
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(READONLY_SHIM)
    env = {"PYTHONPATH": str(shim), "KCACHE_TEST_READONLY": str(root)}
    snapshot = {p: (p.read_bytes(), p.stat().st_mtime) for p in paths.values()}
    yield root, env
    assert {p: (p.read_bytes(), p.stat().st_mtime) for p in paths.values()} == snapshot


def test_the_shim_really_blocks_writes(readonly):
    root, env = readonly
    done = kc("config", "set", "max_size", "1G", root=root, env=env)
    assert done.returncode == 1 and "Read-only file system" in done.stderr
    assert not (root / "config.json").exists()


@pytest.mark.slow
def test_ls_stats_and_dry_run_work_read_only(readonly):
    root, env = readonly
    done = kc("dir", "--json", root=root, env=env)
    assert done.returncode == 0 and json.loads(done.stdout)["writable"] is False
    done = kc("ls", "--json", root=root, env=env)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["entries"]) == len(SPECS)
    done = kc("stats", "--json", root=root, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["max_size"] > 0
    done = kc("prune", "--max-size", "1", "--dry-run", "--json", root=root, env=env)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["removed"]) == len(SPECS)


@pytest.mark.parametrize("args", [["prune", "--max-size", "1"], ["rm", K_AXPY_90[:6]],
                                  ["clear", "--yes"], ["stats", "--zero"]])
def test_writes_report_that_the_root_cannot_be_written(readonly, args):
    root, env = readonly
    line = one_line_error(kc(*args, root=root, env=env), status=1)
    assert str(root) in line or "Read-only" in line


def test_config_set_on_a_read_only_root_says_what_was_not_done(readonly):
    """As prune, rm, clear and stats --zero do: the file, the reason and that the setting
    was not written (was the bare ``kcache: .../config.json: Read-only file system``)."""
    root, env = readonly
    assert kc("config", "set", "lock_timeout", "5m", root=root).returncode == 0  # writable here
    for action, done_word in ((("set", "max_size", "1G"), "not set"),
                              (("unset", "lock_timeout"), "not unset")):
        line = one_line_error(kc("config", *action, root=root, env=env), status=1)
        assert line.startswith(f"kcache: cannot write {root / 'config.json'} (Read-only file "
                               "system (EROFS))"), line
        assert line.endswith(f"{action[1]} {done_word}"), line


def test_config_set_with_its_lock_file_planted_as_a_symlink_follows_nothing(tmp_path):
    """``config set`` takes ``<root>/.config.json.lock``: one planted there as a symlink is
    never followed (filelock opens it O_NOFOLLOW); one line names it; the file it points to
    and config.json are as they were."""
    root = tmp_path / "root"
    assert kc("config", "set", "lock_timeout", "5m", root=root).returncode == 0
    before = (root / "config.json").read_bytes()
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not kcache's")
    (root / ".config.json.lock").unlink()
    (root / ".config.json.lock").symlink_to(outside)
    line = one_line_error(kc("config", "set", "max_size", "1G", root=root), status=1)
    assert line == (f"kcache: cannot write {root / '.config.json.lock'} (Too many levels of "
                    "symbolic links (ELOOP)): max_size not set"), line
    assert outside.read_bytes() == b"not kcache's" and outside.stat().st_mode & 0o777 != 0o600
    assert (root / "config.json").read_bytes() == before


# ------------------------------------------------------------------------------ trial fixes
# Problems a fresh user met (trial report of 2026-12-01), one test each.

@pytest.fixture
def held_lock():
    """``hold(root, key)`` makes another process hold ``key``'s lock until the test ends."""
    procs = []

    def hold(root: Path, key: str) -> None:
        code = ("import sys; from kcache import Store\n"
                "with Store(sys.argv[1]).lock(sys.argv[2]):\n"
                "    print('held', flush=True); sys.stdin.read()\n")
        proc = subprocess.Popen([sys.executable, "-c", code, str(root), key],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"  # blocks until the lock is taken

    yield hold
    for proc in procs:
        proc.stdin.close()  # the holder's read returns: it releases the lock and exits
        proc.wait(timeout=60)


FAST_LOCKS = {"KCACHE_LOCK_TIMEOUT": "0.2"}


@pytest.mark.slow
def test_prune_reports_what_it_removed_when_an_entry_is_busy(cache, held_lock):
    root, paths = cache
    held_lock(root, K_AXPY_90)
    done = kc("prune", "--max-size", "0", "--json", root=root, env=FAST_LOCKS)
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)  # the document is printed although an entry was left
    assert {e["key"] for e in doc["removed"]} == {K_AXPY_90A, K_SAXPY_80, K_STALE}
    assert doc["entries_removed"] == 3
    assert doc["bytes_freed"] == sum(e["file_size"] for e in doc["removed"])
    [left] = doc["not_removed"]
    assert left["key"] == K_AXPY_90 and "busy" in left["reason"] and ".lock" in left["reason"]
    line = done.stderr.strip().splitlines()[-1]
    assert K_AXPY_90[:12] in line and "lock" in line
    assert "read-only" not in done.stderr and "nothing was removed" not in done.stderr
    assert [k for k, p in paths.items() if p.exists()] == [K_AXPY_90]


@pytest.mark.slow
def test_clear_and_rm_name_the_busy_entry_and_count_the_rest(cache, held_lock):
    root, paths = cache
    held_lock(root, K_AXPY_90)
    done = kc("rm", K_AXPY_90[:6], root=root, env=FAST_LOCKS)
    line = one_line_error(done, 1)
    assert "lock" in line and "read-only" not in line
    done = kc("clear", "--yes", root=root, env=FAST_LOCKS)
    assert done.returncode == 1
    assert "removed 3 entries" in done.stderr and "lock" in done.stderr
    assert "not cleared" not in done.stderr
    assert [k for k, p in paths.items() if p.exists()] == [K_AXPY_90]


def test_clear_reports_an_entry_that_is_not_a_file(cache):
    root, paths = cache
    odd = root / "v1" / "entries" / "dd" / ("dd" * 32 + ".kce")
    odd.mkdir(parents=True)
    size = sum(p.stat().st_size for p in paths.values())
    done = kc("clear", "--yes", "--json", root=root)
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["removed"] == 4
    assert doc["bytes_freed"] == size
    assert doc["not_removed"] == [{"key": "dd" * 32, "path": str(odd),
                                   "reason": "not a regular file"}]
    assert not any(p.exists() for p in paths.values()) and odd.is_dir()


@pytest.mark.slow
def test_empty_dir_option_is_a_usage_error_and_paths_are_absolute(tmp_path):
    work = tmp_path / "project"
    work.mkdir()
    for args in (["--dir", "", "stats", "--zero"], ["config", "set", "max_size", "1G", "--dir", " "],
                 ["ls", "--dir", ""]):
        done = subprocess.run([sys.executable, "-m", "kcache", *args], cwd=work,
                              capture_output=True, text=True, timeout=60)
        assert "--dir" in one_line_error(done)
    assert list(work.iterdir()) == []  # no CACHEDIR.TAG, v1/ or config.json in the project
    done = subprocess.run([sys.executable, "-m", "kcache", "dir", "--json", "--dir", "rel"],
                          cwd=work, capture_output=True, text=True, timeout=60)
    assert json.loads(done.stdout)["root"] == str(work / "rel")


@pytest.mark.slow
def test_show_checks_the_checksum(cache):
    root, paths = cache
    path = paths[K_SAXPY_80]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the cubin: only the checksum can tell
    path.write_bytes(bytes(data))
    done = kc("show", "b2", "--json", root=root)
    assert done.returncode == 1
    doc = json.loads(done.stdout)  # what can be shown still is, with the problem named
    assert doc["key"] == K_SAXPY_80 and "checksum" in doc["problem"]
    assert "corrupt" in done.stderr and "verify --fix" in done.stderr
    plain = kc("show", "b2", root=root)
    assert plain.returncode == 1 and "problem\tchecksum mismatch" in plain.stdout
    line = one_line_error(kc("show", "b2", "--ptx", root=root), 1)
    assert "corrupt" in line


@pytest.mark.slow
def test_unreadable_entries_are_listed_shown_and_removable(cache):
    root, paths = cache
    paths[K_SAXPY_80].write_bytes(paths[K_SAXPY_80].read_bytes()[:40])  # truncated
    paths[K_STALE].write_bytes(b"")  # zero-length
    done = kc("ls", "--json", root=root)
    assert done.returncode == 0
    problems = {e["key"]: e["problem"] for e in json.loads(done.stdout)["entries"]}
    assert problems[K_AXPY_90] is None
    assert problems[K_SAXPY_80] and problems[K_STALE]
    assert "2 entries cannot be read" in done.stderr and "verify --fix" in done.stderr
    assert "unreadable" in kc("ls", root=root).stdout

    done = kc("show", "c3", "--json", root=root)
    assert done.returncode == 1 and json.loads(done.stdout)["problem"]
    doc = kc_json("rm", "c3", "b2", "--yes", root=root)
    assert {e["key"] for e in doc["removed"]} == {K_SAXPY_80, K_STALE}
    assert not paths[K_SAXPY_80].exists() and not paths[K_STALE].exists()


@pytest.mark.slow
def test_root_under_a_file_is_reported_unwritable(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    env = {"KCACHE_DIR": str(afile / "sub")}
    assert kc_json_env("dir", env=env)["writable"] is False
    line = one_line_error(kc("stats", "--zero", env=env), 1)
    assert "does not exist" in line  # a root under a file cannot exist (and is not made)
    assert afile.read_text() == "x"


def test_verify_fix_on_a_read_only_root_says_nothing_was_moved(tmp_path):
    root = tmp_path / "cache"
    paths = fill(root)
    path = paths[K_AXPY_90A]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(READONLY_SHIM)
    env = {"PYTHONPATH": str(shim), "KCACHE_TEST_READONLY": str(root)}
    done = kc("verify", "--fix", "--json", root=root, env=env)
    assert done.returncode == 1
    [bad] = json.loads(done.stdout)["bad"]
    assert bad["quarantined"] is False and "EROFS" in bad["reason"]
    done = kc("verify", "--fix", root=root, env=env)
    assert "0 quarantined, 1 left in place" in done.stderr
    assert "moved to" not in done.stderr and "kernels still" not in done.stderr
    assert path.exists()


@pytest.mark.slow
def test_prune_dry_run_previews_the_real_prune(cache):
    root, paths = cache
    paths[K_STALE].write_bytes(b"garbage")  # a broken entry: removed and counted like others
    dry = kc_json("prune", "--max-size", "0", "--dry-run", root=root)
    real = kc_json("prune", "--max-size", "0", root=root)
    for doc in (dry, real):
        assert doc["entries_removed"] == len(doc["removed"]) == 4
        assert doc["bytes_freed"] == sum(e["file_size"] for e in doc["removed"])
    assert dry["bytes_freed"] == real["bytes_freed"]
    status, text, err = on_terminal("prune", "--dry-run", "--dir", str(root))
    assert status == 0 and "nothing to remove" in err and "Key" not in text


@pytest.mark.slow
def test_a_bad_setting_does_not_block_dir_or_config(cache):
    root, _ = cache
    env = {"KCACHE_MAX_SIZE": "9" * 400, "KCACHE_LOCK_TIMEOUT": "90s"}
    done = kc("dir", root=root, env=env)
    assert done.returncode == 0 and done.stdout.splitlines()[0] == str(root)
    assert "KCACHE_MAX_SIZE" in done.stderr
    done = kc("config", "--json", root=root, env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    settings = json.loads(done.stdout)["settings"]
    assert settings["max_size"]["origin"] == "env KCACHE_MAX_SIZE"
    assert settings["max_size"]["value"] == "9" * 400 and "too large" in settings["max_size"]["error"]
    assert settings["lock_timeout"] == {"value": 90.0, "origin": "env KCACHE_LOCK_TIMEOUT"}

    (root / "config.json").write_text('{"max_size": "lots"}')
    line = one_line_error(kc("ls", root=root))
    assert "lots" in line
    done = kc("config", "--json", root=root)
    assert json.loads(done.stdout)["settings"]["max_size"]["origin"].startswith("config ")
    assert kc("config", "set", "max_size", "1G", root=root).returncode == 0  # fixed by the CLI
    assert kc("ls", root=root).returncode == 0
    assert kc("config", "unset", "max_size", root=root).returncode == 0
    assert json.loads((root / "config.json").read_text()) == {}


@pytest.mark.slow
def test_plain_output_uses_json_names_and_spellings(cache, tmp_path):
    root, _ = cache
    fields = dict(line.split("\t", 1) for line in kc("show", "b2", root=root).stdout.splitlines())
    assert fields["readonly"] == "false" and fields["compile_seconds"] == "0.50"
    assert fields["file_size"].isdigit() and fields["sizes.cubin"] == "2000"
    assert not {"read-only_layer", "compile_time"} & set(fields)
    assert not {"True", "False", "None"} & set(fields.values())
    stats = dict(line.split("\t") for line in kc("stats", root=root).stdout.splitlines())
    assert stats["recounted"] == "false"
    a, b = tmp_path / "a", tmp_path / "b"
    done = kc("config", "set", "readonly_dirs", f"{a}{os.pathsep}{b}", root=root)
    assert f"{a}{os.pathsep}{b}" in done.stderr and "[" not in done.stderr
    done = kc("rm", "b2", root=root)
    assert "removed 1 entry," in done.stderr


def test_library_warnings_are_printed_once(cache):
    root, _ = cache
    (root / "config.json").write_text('{"max_sise": "1G"}')  # a typo: warned, then ignored
    done = kc("ls", root=root)
    assert done.returncode == 0
    assert done.stderr.count("max_sise") == 1, done.stderr


# ------------------------------------------------------------------------------ trial 2

@pytest.mark.slow
def test_entry_path_that_is_a_directory_is_left_to_verify_fix(cache):
    root, paths = cache
    path = paths[K_SAXPY_80]
    path.unlink()
    path.mkdir()  # an entry path that is a directory
    (path / "inside").write_text("x")
    ls = kc("ls", root=root)
    assert "verify --fix" in ls.stderr and "kcache rm" not in ls.stderr, ls.stderr
    line = one_line_error(kc("rm", "b2", root=root), 1)
    assert "not a regular file" in line and "kcache verify --fix" in line, line
    assert (path / "inside").read_text() == "x"  # rm never deletes a directory
    line = one_line_error(kc("show", "b2", root=root), 1)
    assert "verify --fix" in line and "kcache rm" not in line, line
    done = kc("verify", "--fix", "--json", root=root)
    [bad] = json.loads(done.stdout)["bad"]
    assert bad["quarantined"] and not path.exists(), done.stdout


@pytest.mark.slow
def test_prune_and_rm_plain_headers_are_json_names(cache):
    root, _ = cache
    done = kc("prune", "--max-size", "0", "--dry-run", root=root)
    # signature (issue 35) came last: cut -f1-5 of a script still gets the same columns
    assert done.stdout.splitlines()[0].split("\t") == ["short_key", "kernel", "arch",
                                                       "file_size", "last_used", "signature"]
    done = kc("rm", "b2", root=root)
    assert done.stdout.splitlines()[0].split("\t") == ["short_key", "kernel", "arch",
                                                       "file_size", "signature"]
    assert done.stdout.splitlines()[1].split("\t")[4] == "(float32[::1],)"


@pytest.mark.slow
def test_one_wording_per_problem_in_ls_show_and_verify(cache):
    root, paths = cache
    full = paths[K_SAXPY_80].stat().st_size
    paths[K_SAXPY_80].write_bytes(paths[K_SAXPY_80].read_bytes()[:40])
    paths[K_STALE].write_bytes(b"")
    want = {K_SAXPY_80: f"truncated: 40 of {full} bytes", K_STALE: "truncated: 0 bytes"}
    ls = {e["key"]: e["problem"] for e in kc_json("ls", root=root)["entries"]}
    assert {k: ls[k] for k in want} == want
    for key, text in want.items():
        done = kc("show", key[:2], "--json", root=root)
        assert json.loads(done.stdout)["problem"] == text
    done = kc("verify", "--json", root=root)
    assert {b["key"]: b["problem"] for b in json.loads(done.stdout)["bad"]} == want
    done = kc("verify", "--fix", "--json", root=root)  # read back from the quarantined copy
    assert {b["key"]: b["problem"] for b in json.loads(done.stdout)["bad"]} == want


def test_show_sass_checks_the_prefix_before_the_disassembler(cache):
    root, _ = cache
    line = one_line_error(kc("show", "48ad", "--sass", root=root, env={"PATH": ""}), 1)
    assert "no entry with key prefix '48ad'" in line, line


def test_config_unset_of_a_key_not_set_says_so(cache):
    root, _ = cache
    done = kc("config", "unset", "max_size", root=root)
    assert done.returncode == 0
    assert done.stderr.strip() == (f"kcache: max_size was not set in {root / 'config.json'}; "
                                   "nothing changed")
    assert not (root / "config.json").exists()


def test_config_show_json_lists_unknown_keys_as_warnings(cache):
    root, _ = cache
    (root / "config.json").write_text('{"max_sise": 5}')
    doc = kc_json("config", "show", root=root)
    assert doc["errors"] == []
    [warning] = doc["warnings"]
    assert "unknown setting 'max_sise' ignored" in warning


def test_config_json_directory_message_has_one_hint(cache):
    root, _ = cache
    (root / "config.json").mkdir()
    done = kc("config", "show", root=root)
    assert done.returncode == 1
    [line] = [x for x in done.stderr.splitlines() if "is a directory" in x]
    assert line.count("(") == 1, line


def test_show_help_mentions_ltoir():
    assert ".ltoir" in kc("show", "--help").stdout

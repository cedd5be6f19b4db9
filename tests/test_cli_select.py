"""Choosing entries by what users know (issue 35): ``--signature GLOB``, ``--older-than`` and
``--since`` on ``ls``, ``rm`` and ``export``; ``rm`` of a selection that matches nothing;
``ls --limit``'s count; ``stats --short``; the short signature in JSON and plain output."""
from __future__ import annotations

import json
import os
import sys

import pytest

from kcache import Entry, Store
from test_cli import (DAY, K_AXPY_90, K_AXPY_90A, K_SAXPY_80, K_STALE, NOW, cache, kc,  # noqa: F401
                      kc_json, one_line_error)

#: Overloads of one kernel that differ in one argument, as numba prints them, with the short
#: form ``kcache ls`` shows; last used 1, 2, 3 and 4 days ago.
OVERLOADS = {
    "d1" + "1" * 62: ("(array(float32, 1d, C), array(float32, 1d, C), int32)",
                      "(float32[::1], float32[::1], int32)"),
    "d2" + "2" * 62: ("(array(float64, 1d, C), array(float32, 1d, C), int32)",
                      "(float64[::1], float32[::1], int32)"),
    "d3" + "3" * 62: ("(array(float32, 2d, C), array(float32, 1d, C), int32)",
                      "(float32[:, ::1], float32[::1], int32)"),
    "d4" + "4" * 62: ("(array(float32, 2d, F), array(float32, 1d, C), int32)",
                      "(float32[::1, :], float32[::1], int32)"),
}


@pytest.fixture
def overloads(tmp_path):
    root = tmp_path / "overloads"
    store = Store(root)
    for n, (key, (signature, _short)) in enumerate(OVERLOADS.items(), 1):
        store.put(key, Entry({"cubin": bytes(1000 * n)},
                             {"kernel": "mid:mix", "signature": signature, "arch": "sm_90"}),
                  components={"kernel": "mid:mix"})
        path = store.header(key).path
        os.utime(path, (NOW - n * DAY, NOW - n * DAY))
    store.flush()
    return root


def keys_of(doc: dict, field: str = "entries") -> set[str]:
    return {e["key"] for e in doc[field]}


# ------------------------------------------------------------------------------ --signature

@pytest.mark.parametrize("pattern, chosen", [
    ("float64[::1], *", {"d2"}),                      # short form, no parentheses
    ("(float32[:, ::1], float32[::1], int32)", {"d3"}),  # short form, whole
    ("float32[:,::1],*", {"d3"}),                     # spaces do not matter
    ("*float32[::1, :]*", {"d4"}),                    # brackets are literal
    ("*array(float32, 2d, *", {"d3", "d4"}),          # the full form
    ("*, int32", {"d1", "d2", "d3", "d4"}),
    ("*int64*", set()),
])
def test_ls_signature_matches_the_short_and_the_full_form(overloads, pattern, chosen):
    done = kc("ls", "--signature", pattern, "--json", root=overloads)
    assert done.returncode == 0, done.stderr
    assert {k[:2] for k in keys_of(json.loads(done.stdout))} == chosen


def test_json_entry_objects_carry_the_short_signature_beside_the_full_one(overloads):
    for entry in kc_json("ls", root=overloads)["entries"]:
        assert (entry["signature"], entry["short_signature"]) == OVERLOADS[entry["key"]]
    shown = kc_json("show", "d3", root=overloads)
    assert shown["short_signature"] == "(float32[:, ::1], float32[::1], int32)"


def test_plain_ls_keeps_the_full_signature_for_scripts(overloads):
    lines = kc("ls", "--sort", "name", root=overloads).stdout.splitlines()
    assert lines[0].split("\t")[2] == "signature"
    assert {line.split("\t")[2] for line in lines[1:]} == {s for s, _ in OVERLOADS.values()}


# ------------------------------------------------------------------------------ by age

@pytest.mark.parametrize("switches, chosen", [
    (["--since", "36h"], {K_AXPY_90}),                       # used 1 day ago
    (["--older-than", "5d"], {K_STALE}),                     # used 10 days ago
    (["--older-than", "36h", "--since", "5d"], {K_AXPY_90A, K_SAXPY_80}),  # a window
    (["--older-than", "1w", "--kernel", "pkg.old:*"], {K_STALE}),
    (["--since", "2w", "--cc", "8.0"], {K_SAXPY_80, K_STALE}),
    (["--older-than", "3w"], set()),
])
def test_ls_by_last_use(cache, switches, chosen):
    root, _ = cache
    assert keys_of(kc_json("ls", *switches, root=root)) == chosen


def test_rm_by_age_and_signature_removes_only_what_is_chosen(cache, overloads):
    root, paths = cache
    doc = kc_json("rm", "--older-than", "5d", root=root)  # one entry: no --yes needed
    assert keys_of(doc, "removed") == {K_STALE} and not paths[K_STALE].exists()
    assert all(p.exists() for k, p in paths.items() if k != K_STALE)
    doc = kc_json("rm", "--signature", "float32[:, ::1], *", root=overloads)
    assert [e["key"][:2] for e in doc["removed"]] == ["d3"]
    doc = kc_json("rm", "--since", "3d", "--signature", "*float32[::1], int32)", "--yes",
                  root=overloads)  # used 1 and 2 days ago (d3 is gone)
    assert {e["key"][:2] for e in doc["removed"]} == {"d1", "d2"}
    assert [e["key"][:2] for e in kc_json("ls", root=overloads)["entries"]] == ["d4"]


def test_rm_of_several_chosen_entries_still_needs_yes_off_a_terminal(overloads):
    line = one_line_error(kc("rm", "--signature", "*", root=overloads))
    assert "--yes" in line and len(kc_json("ls", root=overloads)["entries"]) == 4


def test_export_takes_the_same_switches(cache, tmp_path):
    root, _ = cache
    out = tmp_path / "b.kcb"
    doc = kc_json("export", str(out), "--since", "60h", "--signature", "float32[::1]",
                  root=root)
    assert set(doc["keys"]) == {K_AXPY_90, K_AXPY_90A}
    doc = kc_json("export", str(out), "--older-than", "36h", "--kernel", "axpy", root=root)
    assert doc["keys"] == [K_AXPY_90A]
    done = kc("export", str(out), "--signature", "*float64*", root=root)
    assert done.returncode == 1 and "no entries match" in done.stderr


@pytest.mark.parametrize("args, words", [
    (["ls", "--since", "7x"], "--since: duration='7x' is not a duration"),
    (["ls", "--older-than", "-1d"], "--older-than: duration='-1d' is not a duration"),
    (["rm", "--older-than", "forever"], "is not a duration"),
    (["export", "out.kcb", "--since", "99999999d"], "is too large"),
    (["rm", "--signature", " "], "--signature needs a glob pattern"),
    (["ls", "--signature", ""], "--signature needs a glob pattern"),
    (["rm", "--since", "1d", "a1"], "give KEY-PREFIX... or a selection"),
])
def test_bad_selection_values_are_one_line_and_exit_2(cache, args, words):
    root, paths = cache
    line = one_line_error(kc(*args, root=root), 2)
    assert words in line, line
    assert all(p.exists() for p in paths.values())


# ------------------------------------------------------------------------------ rm: no match

@pytest.mark.parametrize("switches", [["--kernel", "nonexist*"], ["--signature", "*int8*"],
                                      ["--older-than", "30d"], ["--kernel", "nonexist*", "-n"]])
def test_rm_of_a_selection_matching_nothing_is_one_line_exit_1_as_a_missing_key(cache, switches):
    root, paths = cache
    line = one_line_error(kc("rm", *switches, root=root), 1)
    assert line.startswith("kcache: no entry matches ") and "nothing removed" in line, line
    assert switches[1] in line
    assert one_line_error(kc("rm", "deadbeef", root=root), 1).startswith("kcache: no entry")
    assert kc("rm", *switches, "--json", root=root).stdout == ""  # no document either
    assert all(p.exists() for p in paths.values())


# ------------------------------------------------------------------------------ ls --limit

def test_ls_limit_says_how_many_of_how_many(cache):
    root, paths = cache
    done = kc("ls", "--limit", "3", root=root)
    assert len(done.stdout.splitlines()) == 1 + 3
    assert done.stderr.startswith("kcache: 3 of 4 entries, "), done.stderr
    total = sum(p.stat().st_size for p in paths.values())
    assert done.stderr.rstrip().endswith(f" of {total / 1024:.1f} KiB"), done.stderr
    # a limit that leaves nothing out: the count alone, as before
    assert kc("ls", "--limit", "4", root=root).stderr.startswith("kcache: 4 entries, ")
    assert kc("ls", "--limit", "1", "--kernel", "axpy", root=root).stderr.startswith(
        "kcache: 1 of 2 entries, ")


# ------------------------------------------------------------------------------ stats --short

def test_stats_short_is_at_most_8_lines_with_the_json_names(cache):
    root, _ = cache
    store = Store(root)
    assert store.get(K_AXPY_90) is not None and store.get("ee" * 32) is None
    store.flush()  # one hit, one miss
    done = kc("stats", "--short", root=root)
    assert done.returncode == 0 and done.stderr == ""
    rows = dict(line.split("\t") for line in done.stdout.splitlines())
    assert list(rows) == ["root", "entries", "bytes", "max_size", "hits", "misses", "hit_rate"]
    full = dict(line.split("\t") for line in kc("stats", root=root).stdout.splitlines())
    assert all(full[name] == value for name, value in rows.items() if name != "root")
    assert rows["root"] == str(root) and rows["entries"] == "4"
    assert (rows["hits"], rows["misses"], rows["hit_rate"]) == ("1", "1", "0.5000")
    remote = kc("stats", "-s", root=root, env={"KCACHE_REMOTE": "redis://u:secret@h:6379/0"})
    lines = remote.stdout.splitlines()
    assert len(lines) == 8 and lines[-1] == "remote\tredis://h:6379/0"
    assert "secret" not in remote.stdout + remote.stderr
    assert json.loads(kc("stats", "--short", "--json", root=root).stdout) == \
        json.loads(kc("stats", "--json", root=root).stdout)  # --json: the whole document


def test_stats_short_names_each_read_only_layer_by_its_path(cache, tmp_path):
    # Two folder layers read "folder" alike: the path tells them apart, on a terminal (a
    # row of its own) and piped (a `layer` line each, as `stats` prints them).
    import shutil
    root, _ = cache
    first, second = tmp_path / "first", tmp_path / "second"
    shutil.copytree(root, first)
    shutil.copytree(root, second)
    env = {"KCACHE_READONLY_DIRS": f"{first}{os.pathsep}{second}"}
    lines = kc("stats", "-s", root=tmp_path / "mine", env=env).stdout.splitlines()
    assert [l for l in lines if l.startswith("layer\t")] == [
        f"layer\t{first} (folder)", f"layer\t{second} (folder)"]


def test_stats_short_on_a_terminal_counts_in_words(cache):
    # "1 hit, 1 miss", not "1 hits, 1 misses"
    import re
    import subprocess
    import ptykit
    root, _ = cache
    store = Store(root)
    assert store.get(K_AXPY_90) is not None and store.get("ee" * 32) is None
    store.flush()
    master, slave = ptykit.open_terminal(80)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    proc = subprocess.Popen([sys.executable, "-m", "kcache", "--dir", str(root), "stats", "-s"],
                            stdin=slave, stdout=slave, stderr=slave, env=dict(env, COLUMNS="80"))
    os.close(slave)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", ptykit.drain(master).decode())
    assert proc.wait(timeout=60) == 0
    assert "(1 hit, 1 miss)" in shown, shown

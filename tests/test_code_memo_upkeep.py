"""The files of remembered code analyses (``<root>/v1/code/``, docs/keys.md) are counted by
``Store.stats()`` / ``kcache stats`` and pruned by ``prune --older-than`` by their mtime (a
memo is rewritten only when a process made analyses it lacked). Real files, mtimes set with
os.utime; the real writer's file is in tests/test_code_memo.py."""
import os
from pathlib import Path

import pytest

from kcache import Store
from kcache.disk.layout import code_memo_name
from kcache.store.reports import PruneReport
from test_cli import DAY, NOW, cache, kc, kc_json, on_terminal  # noqa: F401 (cache: fixture)


def plant(root: Path, source: str, size: int, days: float) -> Path:
    """A memo file as kcache names it, of ``size`` bytes, last written ``days`` ago."""
    path = root / "v1" / "code" / code_memo_name(source, "tag")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x80" * size)
    os.utime(path, (NOW - days * DAY, NOW - days * DAY))
    return path


@pytest.fixture
def memos(cache):
    """The CLI's four entries plus an old memo (10 days), a fresh one (an hour) and a file
    in v1/code that kcache did not name (never counted, never removed)."""
    root, paths = cache
    old = plant(root, "/src/old.py", 300, 10)
    fresh = plant(root, "/src/fresh.py", 40, 1 / 24)
    stray = root / "v1" / "code" / "notes.txt"
    stray.write_bytes(b"x" * 1000)
    os.utime(stray, (NOW - 30 * DAY, NOW - 30 * DAY))
    return root, paths, old, fresh, stray


def snapshot(*files: Path) -> dict:
    return {f: (f.read_bytes(), f.stat().st_mtime_ns) for f in files}


def test_stats_counts_the_memo_files(memos):
    root, _paths, *_ = memos
    st = Store(root).stats()
    assert (st.code_memo_files, st.code_memo_bytes) == (2, 340)
    doc = kc_json("stats", root=root)
    names = list(doc)
    # appended where docs/cli.md lets a newer store's counters go: the order before is kept
    at = names.index("remote_wait_seconds")
    assert names[at + 1:] == ["code_memo_files", "code_memo_bytes", "hit_rate", "recounted"]
    assert (doc["code_memo_files"], doc["code_memo_bytes"]) == (2, 340)
    assert doc["quarantine_files"] == 0  # not mixed into the quarantine's
    piped = dict(line.split("\t", 1) for line in kc("stats", root=root).stdout.splitlines())
    assert (piped["code_memo_files"], piped["code_memo_bytes"]) == ("2", "340")


def test_stats_of_a_root_without_memos_says_zero(cache):
    root, _ = cache
    doc = kc_json("stats", root=root)
    assert (doc["code_memo_files"], doc["code_memo_bytes"]) == (0, 0)


@pytest.mark.slow
def test_stats_on_a_terminal_shows_the_row_only_when_there_are_files(memos):
    root, _paths, old, fresh, _stray = memos
    status, text, err = on_terminal("stats", "--dir", str(root))
    assert status == 0, err
    [row] = [line for line in text.splitlines() if "code analyses" in line]
    assert "2 files, 340 B" in row
    old.unlink()
    fresh.unlink()
    status, text, err = on_terminal("stats", "--dir", str(root))
    assert status == 0, err
    assert "code analyses" not in text and "code memo" not in text


def test_prune_older_than_removes_old_memo_files_and_keeps_fresh_ones(memos):
    root, paths, old, fresh, stray = memos
    kept = snapshot(fresh, stray)
    doc = kc_json("prune", "--older-than", "5d", root=root)
    assert (doc["code_memos_removed"], doc["code_memo_bytes_freed"]) == (1, 300)
    assert not old.exists() and snapshot(fresh, stray) == kept
    # bytes_freed stays the entries': the memo is counted apart
    assert doc["bytes_freed"] == sum(e["file_size"] for e in doc["removed"]) > 0
    assert list(doc)[-3:] == ["not_removed", "code_memos_removed", "code_memo_bytes_freed"]
    assert (Store(root).stats().code_memo_files, Store(root).stats().code_memo_bytes) == (1, 40)


def test_prune_dry_run_counts_the_memo_files_and_removes_nothing(memos):
    root, paths, old, fresh, stray = memos
    before = snapshot(old, fresh, stray, *paths.values())
    doc = kc_json("prune", "--older-than", "5d", "--dry-run", root=root)
    assert (doc["code_memos_removed"], doc["code_memo_bytes_freed"]) == (1, 300)
    assert snapshot(old, fresh, stray, *paths.values()) == before
    report = Store(root).prune(older_than="5d", dry_run=True)
    assert report.code_memos == (1, 300) and old.exists()


@pytest.mark.parametrize("args", [[], ["--max-size", "0"], ["--stale"]], ids=" ".join)
def test_prune_without_older_than_leaves_the_memo_files(memos, args):
    root, _paths, old, fresh, stray = memos
    before = snapshot(old, fresh, stray)
    doc = kc_json("prune", *args, root=root)
    assert (doc["code_memos_removed"], doc["code_memo_bytes_freed"]) == (0, 0)
    assert snapshot(old, fresh, stray) == before


def test_prune_says_the_memo_files_only_when_it_removes_some(memos):
    root, _paths, old, fresh, _stray = memos
    done = kc("prune", "--older-than", "5d", "--dry-run", root=root)
    assert done.returncode == 0, done.stderr
    assert ", and 1 file of remembered code analyses (300 B)" in done.stderr
    assert "would remove" in done.stderr
    done = kc("prune", "--older-than", "5d", root=root)
    assert ", and 1 file of remembered code analyses (300 B)" in done.stderr
    assert not old.exists() and fresh.exists()
    done = kc("prune", "--older-than", "5d", root=root)  # nothing old is left
    assert done.returncode == 0 and "remembered code analyses" not in done.stderr
    assert "nothing to remove" in done.stderr
    stamp = fresh.stat().st_mtime - 10 * 86400  # a memo alone to remove: no "0 B (0 bytes)"
    os.utime(fresh, (stamp, stamp))
    done = kc("prune", "--older-than", "5d", root=root)
    assert "kcache: removed 0 entries, and 1 file of remembered code analyses" in done.stderr


def test_a_root_holding_only_old_memo_files_is_pruned_of_them(tmp_path):
    root = tmp_path / "root"
    old = plant(root, "/src/old.py", 64, 3)  # no entry was ever stored
    assert PruneReport().code_memos == (0, 0)
    report = Store(root).prune(older_than=2 * DAY)
    assert report.code_memos == (1, 64) and not old.exists()
    assert (report.removed, report.bytes_freed) == ([], 0)

"""Maintenance operations on awkward roots: partial clear/prune/remove (busy locks, a
directory named like an entry), stray files, broken entries, writability probes, the
disabled store, and warnings printed once."""
import errno
import os
import re
import subprocess
import sys
import textwrap
import warnings

import pytest

from kcache import Entry, KcacheError, Store, make_key
from kcache.store.reports import BUSY, NEWER, NOT_REGULAR, RemoveReport
from kcache.warn import KcacheWarning


def key(i) -> str:
    return make_key({"i": i})


def entry(i: int = 0, size: int = 300) -> Entry:
    return Entry({"cubin": bytes([i % 256]) * size}, {"kernel": f"m:k{i}", "compile_seconds": 1.0})


def fill(store, n: int) -> list[str]:
    keys = [key(i) for i in range(n)]
    for i, k in enumerate(keys):
        assert store.put(k, entry(i, 300 + i))
    return keys


def disk_totals(store) -> tuple[int, int]:
    """(count, bytes) of the real entry files: entries/<ab>/<ab...64 hex>.kce, regular."""
    files = [p for p in (store.root / "v1" / "entries").rglob("*.kce")
             if p.is_file() and re.fullmatch(r"[0-9a-f]{64}\.kce", p.name) and p.name[:2] == p.parent.name]
    return len(files), sum(p.stat().st_size for p in files)


@pytest.fixture
def lock_holder(root):
    """Start a real process holding the lock of a key; yields start(key). Released at exit."""
    procs = []

    def start(k: str) -> None:
        code = textwrap.dedent(f"""
            import sys
            from kcache import Store
            with Store({str(root)!r}).lock({k!r}):
                print("ready", flush=True)
                sys.stdin.read()
        """)
        p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout.readline().strip() == "ready"  # blocks until the lock is held

    yield start
    for p in procs:
        p.stdin.close()
        p.wait(timeout=30)


# -- item 1: partial clear / prune / remove ----------------------------------------------------
def test_clear_goes_on_past_a_busy_entry_and_says_why(root, lock_holder):
    s = Store(root, lock_timeout=0.2)
    keys = fill(s, 6)
    lock_holder(keys[2])
    kept_size = s._layout.entry(keys[2]).stat().st_size
    report = s.clear()
    assert isinstance(report, RemoveReport) and report == 5 and len(report.removed) == 5
    assert [(f.key, f.reason.startswith(BUSY)) for f in report.failed] == [(keys[2], True)]
    assert "KCACHE_LOCK_TIMEOUT" in report.failed[0].reason
    assert s.writable and s.write_problem is None  # a held lock is not a read-only root
    st = s.stats()
    assert (st.entries, st.bytes) == (1, kept_size) == disk_totals(s)
    assert report.bytes_freed == st.bytes_written - kept_size  # every put was a new key


def test_prune_goes_on_past_a_busy_entry(root, lock_holder):
    s = Store(root, lock_timeout=0.2)
    keys = fill(s, 8)
    lock_holder(keys[0])
    report = s.prune(max_size=0)
    assert len(report.removed) == 7 and [f.key for f in report.failed] == [keys[0]]
    assert report.failed[0].reason.startswith(BUSY)
    st = s.stats()
    assert st.evictions == 7 and (st.entries, st.bytes) == disk_totals(s) == (1, report.bytes_left)
    assert report.entries_left == 1
    assert report.bytes_freed == sum(i.file_size for i in report.removed)


def test_remove_many_reports_busy_and_absent(root, lock_holder):
    s = Store(root, lock_timeout=0.2)
    keys = fill(s, 3)
    lock_holder(keys[1])
    report = s.remove_many([keys[0], keys[1], key(99)])
    assert report.removed == [keys[0]]
    assert {f.key: f.reason.split(";")[0] for f in report.failed} == {keys[1]: BUSY, key(99): "no such entry"}
    assert s.remove(keys[1]) is False and s.writable
    assert (s.stats().entries, s.stats().bytes) == disk_totals(s)


def test_clear_reports_a_directory_named_like_an_entry(root):
    s = Store(root)
    keys = fill(s, 3)
    path = s._layout.entry(keys[1])
    s.remove(keys[1])
    path.mkdir()
    report = s.clear()
    assert report == 2 and [(f.key, f.reason) for f in report.failed] == [(keys[1], NOT_REGULAR)]
    assert path.is_dir() and (s.stats().entries, s.stats().bytes) == (0, 0)
    assert s.writable  # one odd entry is not a read-only root
    assert [i.problem for i in s.entries(include_broken=True)] == [NOT_REGULAR]
    with pytest.warns(KcacheWarning, match="not a regular file.*moved to"):
        v = s.verify(fix=True)
    assert v.corrupt == [(path, NOT_REGULAR)] and v.quarantined == 1 and not path.exists()
    assert s.put(keys[1], entry(1)) and s.get(keys[1]) == entry(1)  # the key works again


def test_removal_on_a_readonly_root_names_the_os_error(root, monkeypatch):
    s = Store(root)
    keys = fill(s, 2)

    def deny(*a, **kw):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(os, "unlink", deny)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = s.clear()
    assert report == 0 and sorted(f.key for f in report.failed) == sorted(keys)
    assert all(f.reason == "Read-only file system (EROFS)" for f in report.failed)


def test_newer_format_entry_is_reported_not_deleted(root):
    s = Store(root)
    keys = fill(s, 2)
    path = s._layout.entry(keys[0])
    data = bytearray(path.read_bytes())
    data[8:10] = (2).to_bytes(2, "big")
    path.write_bytes(bytes(data))
    dry = s.prune(max_size=0, dry_run=True)
    assert [(f.key, f.reason) for f in dry.failed] == [(keys[0], NEWER)] and len(dry.removed) == 1
    report = s.clear()
    assert report == 1 and [(f.key, f.reason) for f in report.failed] == [(keys[0], NEWER)]
    assert path.exists()


# -- item 2: stray files -------------------------------------------------------------------------
def _strays(s) -> list:
    ent = s._layout.entries
    k = key(1000)  # not in the store
    wrong_shard = "00" if k[:2] != "00" else "01"
    strays = [ent / "ab" / "notakey.kce", ent / "zz" / f"{k}.kce", ent / wrong_shard / f"{k}.kce",
              ent / k[:2] / f"{k.upper()}.kce", ent / "readme.txt", ent / k[:2] / f"{k}.kce.bak"]
    for p in strays:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("junk")
    return strays


def test_stray_files_are_ignored_by_every_scan(root):
    s = Store(root)
    keys = fill(s, 3)
    before = s.stats()
    strays = _strays(s)
    assert sorted(i.key for i in s.entries(include_broken=True)) == sorted(keys)
    assert s.find("", include_broken=True) == s.find("") and len(s.find("")) == 3
    assert s.find(key(1000)[:8], include_broken=True) == []
    st = s.recount()
    assert (st.entries, st.bytes) == (before.entries, before.bytes) == (3, disk_totals(s)[1])
    v = s.verify(fix=True)
    assert (v.checked, v.ok, v.corrupt, v.quarantined) == (3, 3, [], 0)
    dry = s.prune(max_size=0, dry_run=True)
    assert sorted(i.key for i in dry.removed) == sorted(keys)
    assert dry.bytes_freed == s.stats().bytes
    report = s.prune(max_size=0)
    assert len(report.removed) == 3 and report.failed == []
    assert (s.stats().entries, s.stats().bytes) == (0, 0)
    fill(s, 2)
    assert s.clear() == 2 and (s.stats().entries, s.stats().bytes) == (0, 0)
    assert all(p.read_text() == "junk" for p in strays)  # never deleted
    assert s.recount().entries == 0


# -- broken entries: listed on request, removable -------------------------------------------------
def test_broken_entries_are_listed_with_their_problem_and_removable(root):
    s = Store(root)
    keys = fill(s, 4)
    paths = [s._layout.entry(k) for k in keys]
    paths[0].write_bytes(b"")
    paths[1].write_bytes(paths[1].read_bytes()[:30])
    paths[2].write_bytes(b"garbage" * 40)
    assert [i.key for i in s.entries()] == [keys[3]]  # default: readable ones only
    broken = {i.key: i for i in s.entries(include_broken=True)}
    assert set(broken) == set(keys)
    assert broken[keys[3]].problem is None
    assert "truncated" in broken[keys[0]].problem and broken[keys[0]].file_size == 0
    assert "truncated" in broken[keys[1]].problem and broken[keys[2]].problem == "bad magic"
    assert all(broken[k].kernel is None and broken[k].sizes == {} for k in keys[:3])
    assert s.find(keys[0][:6]) == [] and [i.key for i in s.find(keys[0][:6], include_broken=True)] == [keys[0]]
    assert s.remove(keys[0]) and not paths[0].exists()
    pr = s.prune(max_size=0)
    assert sorted(i.key for i in pr.removed) == sorted(keys[1:])
    assert pr.bytes_freed == sum(i.file_size for i in pr.removed) > 0


# -- item 7: writability, zero_stats, verify --fix truthfulness --------------------------------------
def test_check_writable_before_any_write(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    under_file = Store(afile / "sub")
    assert under_file.writable  # nothing tried yet
    reason = under_file.check_writable()
    assert "ENOTDIR" in reason and str(afile) in reason and under_file.writable is False
    proc = Store("/proc/kcache-test")
    assert proc.check_writable() is not None and proc.writable is False
    fresh = Store(tmp_path / "new" / "deep")
    assert fresh.check_writable() is None and fresh.writable
    assert list(tmp_path.iterdir()) == [afile]  # the probe leaves nothing behind


def test_check_writable_on_a_readonly_mount(root, monkeypatch):
    Store(root).put(key(1), entry(1))
    s = Store(root)
    real_open = os.open

    def deny_open(path, flags, *a, **kw):
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(os, "open", deny_open)
    assert s.check_writable() == "Read-only file system (EROFS)"
    assert s.writable is False and s.write_problem == "Read-only file system (EROFS)"


def test_zero_stats_raises_when_nothing_was_zeroed(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    s = Store(afile / "sub")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(OSError, match="not zeroed.*ENOTDIR"):
            s.zero_stats()
    ok = Store(tmp_path / "ok")
    ok.record(compiles=3)
    ok.zero_stats()
    assert ok.stats().compiles == 0


def test_verify_fix_says_truthfully_what_was_not_quarantined(root, monkeypatch):
    s = Store(root)
    keys = fill(s, 2)
    path = s._layout.entry(keys[0])
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))  # checksum mismatch, whatever the byte

    real_rename = os.rename

    def deny(src, dst, *a, **kw):
        # Only the move into quarantine fails (it renames into the quarantine folder's
        # descriptor): a stats flush due meanwhile must still work, or the store would turn
        # read-only and fail differently.
        fd = kw.get("dst_dir_fd")
        where = os.readlink(f"/proc/self/fd/{fd}") if fd is not None else str(dst)
        if "quarantine" in where:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real_rename(src, dst, *a, **kw)

    monkeypatch.setattr(os, "rename", deny)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        report = s.verify(fix=True)
    assert report.quarantined == 0 and path.exists()
    assert report.not_quarantined == [(path, "cannot move it: Read-only file system (EROFS)")]
    corrupt = [str(w.message) for w in rec if "corrupt cache entry" in str(w.message)]
    assert len(corrupt) == 1 and "left in place" in corrupt[0] and "moved to" not in corrupt[0]


def test_unwritable_warning_suits_a_maintenance_command(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    s = Store(afile / "sub")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert s.put(key(1), entry(1)) is False
    (msg,) = [str(w.message) for w in rec]
    assert "ENOTDIR" in msg and "no longer cached" not in msg and "writes nothing more" in msg


# -- item 5: KCACHE_DISABLE touches nothing on disk --------------------------------------------------
def test_disabled_store_touches_nothing_on_disk(tmp_path):
    root = tmp_path / "c"
    code = textwrap.dedent(f"""
        from kcache import Entry, Store, make_key
        s = Store({str(root)!r})
        k = make_key({{"x": 1}})
        assert s.get(k) is None and s.put(k, Entry({{"cubin": b"1"}})) is False
        assert s.get_or_create(k, lambda: Entry({{"cubin": b"1"}}))[1] is False
        with s.lock(k):
            pass
        s.record(compiles=1, compile_seconds=2.0)
        s.flush()
        assert s.stats().compiles == 1  # counted in memory only
    """)
    env = {**os.environ, "KCACHE_DISABLE": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not root.exists()  # not even CACHEDIR.TAG or v1/, also after the exit-time flush


def test_disabled_zero_stats_says_so(root, monkeypatch):
    monkeypatch.setenv("KCACHE_DISABLE", "1")
    with pytest.raises(KcacheError, match="KCACHE_DISABLE"):
        Store(root).zero_stats()
    assert not root.exists()


# -- item 11: warnings printed once ------------------------------------------------------------------
@pytest.mark.parametrize("setup", ["", "import logging; logging.basicConfig()",
                                   "import warnings; from kcache.warn import KcacheWarning; "
                                   "warnings.simplefilter('ignore', KcacheWarning)"])
def test_a_warning_is_printed_once(tmp_path, setup):
    afile = tmp_path / "afile"
    afile.write_text("x")
    code = f"{setup}\nfrom kcache import Entry, Store, make_key\n" \
           f"Store({str(afile / 'sub')!r}).put(make_key({{}}), Entry({{}}))\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr.count("cannot write to the cache") == 1, done.stderr

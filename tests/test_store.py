"""Store basics: round trips, counters, layout, layers, eviction, prune, verify."""
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kcache
from kcache import Entry, NewerFormat, Store, make_key
from kcache.entry import format as fmt

META = {"kernel": "pkg.mod:axpy", "signature": "(float32[::1],)", "arch": "sm_90a",
        "compile_seconds": 0.75, "entry_name": "_Z4axpy", "cooperative": False,
        "exceptions": {"1": ["builtins:ValueError", ["bad"], "axpy.py:3"]}, "max_registers": None,
        "nvvm_options": {"opt": 3}, "launch_config": [[1], [128], 0]}


def key(i) -> str:
    return make_key({"i": i})


def entry(i: int = 0, size: int = 64) -> Entry:
    return Entry({"cubin": bytes([i % 256]) * size, "ptx": f"// ptx {i}".encode()}, {"kernel": f"m:k{i}"})


def test_round_trip_every_artifact_kind(store):
    k = key(1)
    arts = {"cubin": os.urandom(5000), "ptx": ".version 8.5\n.target sm_90a\n".encode(),
            "ltoir": os.urandom(777), "empty": b""}
    comps = {"kernel": "pkg.mod:axpy", "toolchain": {"numba": "0.68.1"}}
    assert store.put(k, Entry(arts, META), components=comps) is True
    got = store.get(k)
    assert got.artifacts == arts and got.meta == META
    assert store.load(k) == got
    info = store.header(k)
    assert (info.key, info.kernel, info.signature, info.arch, info.compile_seconds) == (
        k, "pkg.mod:axpy", "(float32[::1],)", "sm_90a", 0.75)
    assert info.components == comps and info.meta == META and info.readonly is False
    assert info.sizes == {n: len(b) for n, b in arts.items()}
    assert info.file_size == info.path.stat().st_size and info.hits == 1
    assert info.path == store.root / "v1" / "entries" / k[:2] / f"{k}.kce"
    assert [e.key for e in store.entries()] == [k]
    assert [e.key for e in store.find(k[:5])] == [k] and store.find("0" * 64 if k[0] != "0" else "f" * 64) == []


def test_entry_validates_types():
    with pytest.raises(TypeError, match="'cubin' must be bytes"):
        Entry({"cubin": "text"}, {})
    with pytest.raises(TypeError, match="meta must be a dict"):
        Entry({}, [1])
    assert Entry({"a": bytearray(b"x")}, {}).artifacts == {"a": b"x"}


def test_unencodable_meta_is_a_type_error(store):
    with pytest.raises(TypeError, match="msgpack"):
        store.put(key(1), Entry({}, {"x": object()}))
    assert not list(store.entries())


@pytest.mark.parametrize("bad", ["../../etc/passwd", "ABCDEF0123", "abc", 5, "g" * 64])
def test_bad_keys_rejected(store, bad):
    with pytest.raises(ValueError, match="bad cache key"):
        store.get(bad)


def test_counters(store):
    k = key(1)
    assert store.get(k) is None
    store.put(k, Entry({"cubin": b"x"}, {"compile_seconds": 2.5}))
    store.get(k)
    store.get(k)
    store.record(compiles=1, compile_seconds=2.5)
    s = store.stats()
    size = store.header(k).file_size
    assert (s.hits, s.misses, s.puts, s.compiles, s.entries, s.bytes, s.bytes_written) == (2, 1, 1, 1, 1, size, size)
    assert s.seconds_saved == 5.0 and s.compile_seconds == 2.5 and s.max_size == store.max_size
    assert s["hits"] == 2 and s.as_dict()["misses"] == 1
    # another process sees the same counters
    out = subprocess.run([sys.executable, "-c", f"import kcache; print(kcache.Store({str(store.root)!r}).stats().hits)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2"
    with pytest.raises(TypeError, match="unknown counter 'bogus'"):
        store.record(bogus=1)


def test_replace_keeps_totals_exact(store):
    k = key(1)
    store.put(k, entry(1, 100))
    store.put(k, entry(1, 5000))
    s = store.stats()
    assert (s.entries, s.bytes, s.puts) == (1, store.header(k).file_size, 2)
    assert store.remove(k) is True and store.remove(k) is False
    s = store.stats()
    assert (s.entries, s.bytes) == (0, 0)


def test_clear_zero_stats_recount(store):
    for i in range(20):
        store.put(key(i), entry(i))
    store.get(key(0))
    store.zero_stats()
    s = store.stats()
    assert (s.hits, s.puts, s.entries) == (0, 0, 20)
    next(iter(store.entries())).path.unlink()  # behind the store's back
    assert store.stats().entries == 20
    assert store.recount().entries == 19
    assert store.clear() == 19
    assert (store.stats().entries, store.stats().bytes, list(store.entries())) == (0, 0, [])


def test_layout_tag_and_private_mode(store):
    store.put(key(1), entry())
    assert (store.root / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700
    assert stat.S_IMODE(store.header(key(1)).path.stat().st_mode) == 0o600
    for d in ("entries", "locks", "stats", "quarantine"):
        assert (store.root / "v1" / d).is_dir()


def test_shared_mode(root, monkeypatch):
    monkeypatch.setenv("KCACHE_SHARED", "1")
    s = Store(root)
    s.put(key(1), entry())
    assert stat.S_IMODE(root.stat().st_mode) == 0o2770
    assert stat.S_IMODE((root / "v1" / "entries" / key(1)[:2]).stat().st_mode) == 0o2770
    assert stat.S_IMODE(s.header(key(1)).path.stat().st_mode) == 0o660


def test_hit_touches_mtime(store):
    k = key(1)
    store.put(k, entry())
    path = store.header(k).path
    os.utime(path, (1000, 1000))
    store.get(k)
    assert path.stat().st_mtime == 1000  # a hit writes nothing itself...
    store.flush()
    assert path.stat().st_mtime > time.time() - 60  # ...its use is written with the counters


def test_hit_use_is_written_before_eviction(root):
    s = Store(root, max_size=10**9)
    for i in (1, 2):
        s.put(key(i), entry(i))
        os.utime(s.header(key(i)).path, (1000 + i, 1000 + i))
    assert s.get(key(1)) == entry(1)  # the older one is used, not yet written
    report = s.prune(max_size=s.stats().bytes - 1, dry_run=True)
    assert [i.key for i in report.removed] == [key(2)]  # LRU order as of the hit


def test_disable(root, monkeypatch):
    Store(root).put(key(1), entry())
    monkeypatch.setenv("KCACHE_DISABLE", "1")
    s = Store(root)
    assert s.get(key(1)) is None
    assert s.put(key(2), entry()) is False
    assert s.header(key(2)) is None
    calls = []
    assert s.get_or_create(key(1), lambda: calls.append(1) or entry(9)) == (entry(9), False)
    assert calls == [1]


def test_readonly_roots_consulted_after_writable(tmp_path):
    ro_root, rw_root = tmp_path / "image", tmp_path / "user"
    Store(ro_root).put(key(1), entry(1))
    Store(ro_root).put(key(2), entry(2))
    path = Store(ro_root).header(key(1)).path
    os.utime(path, (1000, 1000))
    s = Store(rw_root, readonly_roots=[ro_root])
    s.put(key(2), entry(22))
    assert s.get(key(1)) == entry(1)
    assert s.get(key(2)) == entry(22)  # the writable root wins
    assert path.stat().st_mtime == 1000  # read-only roots are never touched
    assert s.stats().hits == 2
    infos = {(e.key, e.readonly) for e in s.entries()}
    assert infos == {(key(2), False), (key(1), True), (key(2), True)}
    assert {e.key for e in s.entries(readonly=False)} == {key(2)}
    assert s.load(key(1)) == entry(1)
    s.clear()
    assert s.get(key(2)) == entry(2)


def _write_newer(store, k):
    data = bytearray(fmt.encode(k, entry()))
    data[8:10] = (fmt.FORMAT_VERSION + 1).to_bytes(2, "big")
    import hashlib
    data[-32:] = hashlib.blake2b(bytes(data[:-32]), digest_size=32).digest()
    path = store.root / "v1" / "entries" / k[:2] / f"{k}.kce"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(data))
    return path, bytes(data)


def test_newer_format_left_untouched(store):
    store.put(key(9), entry())  # creates the layout
    path, data = _write_newer(store, key(1))
    with pytest.warns(kcache.warn.KcacheWarning, match="newer kcache"):
        assert store.get(key(1)) is None
    with pytest.raises(NewerFormat):
        store.load(key(1))
    assert path.read_bytes() == data
    assert list((store.root / "v1" / "quarantine").iterdir()) == []
    assert store.stats().corrupt == 0
    rep = store.verify(fix=True)
    assert rep.newer == [path] and rep.corrupt == [] and path.exists()
    store.prune(max_size=0)  # LRU down to nothing...
    store.clear()
    assert path.read_bytes() == data  # ...but a newer kcache's entry is never deleted
    assert store.get(key(9)) is None


def test_load_missing_is_key_error(store):
    with pytest.raises(KeyError):
        store.load(key(1))
    assert store.header(key(1)) is None


def test_size_cap_evicts_lru_down_to_90_percent(root):
    one = len(fmt.encode(key(0), entry(0, 1000)))
    s = Store(root, max_size=one * 10 + one // 2)
    for i in range(10):
        s.put(key(i), entry(i, 1000))
        os.utime(s.header(key(i)).path, (1000 + i, 1000 + i))  # deterministic LRU order
    s.get(key(0))  # most recently used now
    assert s.stats().evictions == 0
    s.put(key(10), entry(10, 1000))  # crosses the cap
    left = {e.key for e in s.entries()}
    st = s.stats()
    assert st.bytes <= 0.9 * s.max_size and st.entries == len(left) == 9
    assert st.evictions == 2
    assert key(0) in left and key(10) in left and key(1) not in left and key(2) not in left


def test_eviction_sweeps_old_lock_files_of_absent_entries(root):
    """A root kept under its cap by eviction alone (no 'kcache prune') kept the lock file of
    every key it ever stored: one more file per kernel compiled, without bound."""
    one = len(fmt.encode(key(0), entry(0, 1000)))
    s = Store(root, max_size=one * 5 + one // 2)
    for i in range(20):
        assert s.put(key(i), entry(i, 1000))
    locks = root / "v1" / "locks"
    assert len(list(locks.glob("??/*.lock"))) == 20  # evicted keys' too
    old = time.time() - 7200  # untouched for two hours: no holder
    for p in locks.glob("??/*.lock"):
        os.utime(p, (old, old))
    before = s.stats().evictions
    assert s.put(key(20), entry(20, 1000)) and s.put(key(21), entry(21, 1000))
    assert s.stats().evictions > before  # crossed the cap: an eviction pass
    left = {e.key for e in s.entries()}
    names = {p.name[:-len(".lock")] for p in locks.glob("??/*.lock")}
    assert len(left) <= 5 and key(21) in left
    # what is left: the entries' own and those of the entries this pass removed
    assert left <= names and len(names) <= len(left) + s.stats().evictions - before


def test_a_sweep_leaves_the_lock_file_its_own_thread_holds(root, monkeypatch):
    """A thread holding the lock of a key without an entry (Store.lock) whose file is old
    (no heartbeat yet: the first comes after BEAT s) and putting other keys past the cap:
    its eviction's sweep found the lock free (holds are reentrant) and unlinked the file
    under it, so another process took the same key's lock at the same time."""
    from kcache.disk import locks as locks_mod

    class NoBeatYet:  # the hold's first heartbeat has not come: the file keeps its old mtime
        def add(self, name): pass
        def discard(self, name): pass
    monkeypatch.setattr(locks_mod, "HEARTBEATS", NoBeatYet())
    one = len(fmt.encode(key(0), entry(0, 1000)))
    s = Store(root, max_size=one * 3 + one // 2)
    k = key(99)
    with s.lock(k):
        pass
    path = root / "v1" / "locks" / k[:2] / f"{k}.lock"
    old = time.time() - 7200
    os.utime(path, (old, old))
    other = ("import sys, kcache\ntry:\n"
             "    with kcache.Store(sys.argv[1]).lock(sys.argv[2], timeout=0):\n"
             "        print('held')\nexcept kcache.LockTimeout:\n    print('busy')")
    env = {n: v for n, v in os.environ.items() if not n.startswith("KCACHE_")}
    with s.lock(k):
        before = s.stats().evictions
        for i in range(6):
            assert s.put(key(i), entry(i, 1000))
        assert s.stats().evictions > before  # crossed the cap: an eviction pass swept
        assert s.prune().lock_files == 0  # prune's sweep likewise
        out = subprocess.run([sys.executable, "-c", other, str(root), k], env=env,
                             capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "busy" and path.exists()


def test_an_entry_larger_than_the_cap_is_warned_about_once(root):
    """max_size smaller than an entry (KCACHE_MAX_SIZE=1K): each put is evicted at once, so a
    program compiles every kernel on every run. That is said once, naming the sizes, not
    silently (compile_for and kcache warm report it as an entry not kept)."""
    from kcache.warn import KcacheWarning
    one = len(fmt.encode(key(0), entry(0, 4000)))
    s = Store(root, max_size=1024)
    with pytest.warns(KcacheWarning, match="larger than the cache.s size cap keeps") as said:
        assert s.put(key(0), entry(0, 4000))
        assert s.put(key(1), entry(1, 4000))
    lines = [str(w.message) for w in said if "size cap" in str(w.message)]
    assert len(lines) == 1 and f"{one} bytes" in lines[0] and "max_size 1024" in lines[0], lines
    assert "KCACHE_MAX_SIZE" in lines[0]
    assert s.stats().entries == 0
    # an entry that fits is never warned about, however full the root
    big = Store(root.parent / "big", max_size=one * 2)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", KcacheWarning)
        for i in range(5):
            assert big.put(key(i), entry(i, 4000))


def test_an_entry_no_eviction_keeps_is_warned_about_when_stored(root):
    """An entry above EVICT_TARGET of the cap, stored into a root it does not take over the
    cap: no eviction runs then, but the next one removes it (evicting down to EVICT_TARGET),
    so it is said when it is stored; one just under EVICT_TARGET is not."""
    import warnings
    from kcache.store.maintenance import EVICT_TARGET
    from kcache.warn import KcacheWarning
    one = len(fmt.encode(key(0), entry(0, 4000)))
    s = Store(root, max_size=int(one / (EVICT_TARGET + 0.05)))
    with pytest.warns(KcacheWarning, match="the next eviction removes it"):
        assert s.put(key(0), entry(0, 4000))
    assert s.stats().entries == 1  # stored: the cap is not crossed yet
    kept = Store(root.parent / "kept", max_size=int(one / (EVICT_TARGET - 0.05)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", KcacheWarning)
        assert kept.put(key(0), entry(0, 4000))


def test_eviction_skipped_while_another_process_evicts(root):
    import multiprocessing as mp

    one = len(fmt.encode(key(0), entry(0, 1000)))
    s = Store(root, max_size=one * 3)
    for i in range(3):
        s.put(key(i), entry(i, 1000))
    ctx = mp.get_context("fork")
    held, done = ctx.Event(), ctx.Event()

    def hold():
        import filelock
        with filelock.FileLock(str(root / "v1" / "locks" / "evict.lock")):
            held.set()
            done.wait(30)

    p = ctx.Process(target=hold)
    p.start()
    try:
        assert held.wait(30)
        s.put(key(3), entry(3, 1000))
        assert s.stats().entries == 4 and s.stats().evictions == 0
    finally:
        done.set()
        p.join(30)
    s.put(key(4), entry(4, 1000))
    assert s.stats().entries <= 2 and s.stats().evictions >= 3


def test_prune_age_predicate_dry_run_and_temp_sweep(store):
    now = time.time()
    for i in range(6):
        store.put(key(i), Entry({"cubin": b"x" * 100}, {"kernel": f"m:k{i}", "arch": "sm_80" if i % 2 else "sm_90"}))
        os.utime(store.header(key(i)).path, (now - i * 86400 - 3600,) * 2)  # i days and an hour ago
    shard = store.header(key(0)).path.parent
    from kcache.disk.fsio import temp_name
    old_tmp, new_tmp = shard / temp_name(f"{key(0)}.kce"), shard / temp_name(f"{key(0)}.kce")
    foreign = shard / ".dead.1.tmp"  # not kcache's temp-name pattern: never swept
    for p in (old_tmp, new_tmp, foreign):
        p.write_bytes(b"partial")
    os.utime(old_tmp, (now - 7200, now - 7200))
    os.utime(foreign, (now - 7200, now - 7200))

    rep = store.prune(older_than="3d", dry_run=True)
    assert {e.key for e in rep.removed} == {key(3), key(4), key(5)} and rep.dry_run and rep.temp_files == 1
    assert len(list(store.entries())) == 6 and old_tmp.exists()

    rep = store.prune(older_than=3 * 86400)
    assert {e.key for e in rep.removed} == {key(3), key(4), key(5)} and rep.entries_left == 3
    assert not old_tmp.exists() and new_tmp.exists() and rep.temp_files == 1 and foreign.exists()

    rep = store.prune(where=lambda e: e.arch == "sm_80")
    assert {e.key for e in rep.removed} == {key(1)}

    size = store.header(key(0)).file_size
    rep = store.prune(max_size=size)  # LRU: keep only the most recent
    assert {e.key for e in rep.removed} == {key(2)} and rep.bytes_freed == size
    st = store.stats()
    assert [e.key for e in store.entries()] == [key(0)] and (st.entries, st.bytes, st.evictions) == (1, size, 5)


def test_verify_reports_and_fixes(store):
    for i in range(5):
        store.put(key(i), entry(i))
    p = store.header(key(3)).path
    data = bytearray(p.read_bytes())
    data[-40] ^= 0xFF
    p.write_bytes(bytes(data))
    seen = []
    rep = store.verify(progress=lambda done, total: seen.append((done, total)))
    assert (rep.checked, rep.ok, [c[0] for c in rep.corrupt]) == (5, 4, [p]) and seen[-1] == (5, 5)
    assert p.exists()
    with pytest.warns(kcache.warn.KcacheWarning, match="corrupt cache entry"):
        rep = store.verify(fix=True)
    assert rep.quarantined == 1 and not p.exists()
    assert len(list((store.root / "v1" / "quarantine").iterdir())) == 1
    assert store.stats().entries == 4 and store.stats().corrupt == 1


def test_package_never_uses_pickle_family():
    src = Path(kcache.__file__).parent
    for f in src.glob("*.py"):
        text = f.read_text()
        for mod in ("pickle", "marshal", "dill", "cloudpickle", "shelve"):
            assert f"import {mod}" not in text and f"from {mod}" not in text, (f, mod)


@pytest.mark.exec_children  # what a fresh interpreter imports
def test_import_is_cheap():
    code = ("import sys, kcache; bad = [m for m in ('numba', 'pickle', '_pickle', 'rich') if m in sys.modules]; "
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_prune_sweeps_old_lock_files_of_absent_entries(store):
    store.put(key(1), entry(1))
    store.put(key(2), entry(2))
    store.remove(key(2))
    locks = {k: store.root / "v1" / "locks" / k[:2] / f"{k}.lock" for k in (key(1), key(2))}
    assert all(p.exists() for p in locks.values())
    assert store.prune().lock_files == 0  # too recent: may be in use
    old = time.time() - 7200
    for p in locks.values():
        os.utime(p, (old, old))
    assert store.prune(dry_run=True).lock_files == 0
    assert store.prune().lock_files == 1
    assert locks[key(1)].exists() and not locks[key(2)].exists()
    assert store.put(key(2), entry(2)) and store.get(key(2)) == entry(2)


def test_a_first_read_that_misses_walks_the_folders_again_only_under_the_lock(store, monkeypatch):
    # get_or_create reads again under the key's lock; only that read checks the folders'
    # descriptors (a stat of each), which would cost a layer's hit behind an empty root more
    # than the miss itself.
    from kcache.disk.paths import RootDirs
    checks = []
    real = RootDirs.check
    monkeypatch.setattr(RootDirs, "check", lambda self, rel=None: checks.append(rel or "") or real(self, rel))
    assert store.get_or_create(key(1), lambda: entry(1)) == (entry(1), False)
    # the read under the lock and the publish; not the first read
    assert [rel for rel in checks if rel.startswith("v1/entries/")] == ["v1/entries/c9"] * 2
    checks.clear()
    assert store.get(key(2)) is None and checks == [f"v1/entries/{key(2)[:2]}"]  # as before


def test_root_deleted_while_running_is_recreated(store):
    import shutil

    store.put(key(1), entry(1))
    shutil.rmtree(store.root)
    assert store.get(key(1)) is None
    store.put(key(2), entry(2))  # may be lost while the layout is rebuilt, but never raises
    assert store.put(key(3), entry(3)) and store.get(key(3)) == entry(3)
    assert store.writable and (store.root / "CACHEDIR.TAG").exists()
    assert store.recount().entries == len(list(store.entries()))


def test_header_reads_the_hits_of_its_keys_shard_only(tmp_path, monkeypatch):
    # One entry's header (kcache warm's existence check of each task) reads its hit count
    # from the shard of its key: not the 16 shards' hit files, each up to its size limit.
    from kcache.store import stats as stats_mod
    store = Store(tmp_path / "c")
    keys = [make_key({"kernel": f"k{i}"}) for i in range(40)]
    for k in keys:
        store.put(k, Entry(artifacts={"cubin": b"x"}, meta={}))
    key = keys[0]
    for _ in range(3):
        assert store.get(key) is not None
    store.flush()
    loaded = []
    real = stats_mod.StatsBook._load
    monkeypatch.setattr(stats_mod.StatsBook, "_load",
                        lambda self, path: loaded.append(path.name) or real(self, path))
    assert store.header(key).hits == 3
    assert [n for n in loaded if n.endswith(".hits.msgpack")] == [f"{key[0]}.hits.msgpack"]
    assert store.header(keys[1]).hits == 0


def test_find_by_a_prefix_reads_the_hits_of_its_shard_only(tmp_path, monkeypatch):
    # `kcache rm P1 P2 ...` and `show P` find each prefix: as header, a prefix of one hex digit
    # or more reads that shard's hit counts, not the 16 shards' hit files for every prefix.
    from kcache.store import stats as stats_mod
    store = Store(tmp_path / "c")
    keys = [make_key({"kernel": f"k{i}"}) for i in range(40)]
    for k in keys:
        store.put(k, Entry(artifacts={"cubin": b"x"}, meta={}))
    assert store.get(keys[0]) is not None
    store.flush()
    loaded = []
    real = stats_mod.StatsBook._load
    monkeypatch.setattr(stats_mod.StatsBook, "_load",
                        lambda self, path: loaded.append(path.name) or real(self, path))
    def hits_files():
        return [n for n in loaded if n.endswith(".hits.msgpack")]

    for prefix in (keys[0][:1], keys[0][:6], keys[0]):
        loaded.clear()
        [found] = [i for i in store.find(prefix) if i.key == keys[0]]
        assert found.hits == 1 and hits_files() == [f"{keys[0][0]}.hits.msgpack"]
    loaded.clear()
    assert len(store.find("")) == 40 and len(hits_files()) == 16

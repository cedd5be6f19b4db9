"""The totals (entries, bytes) when files change behind the store's back, and after a process
is killed in the middle of a bulk removal (docs/store.md, "Totals")."""
import os
import shutil
import subprocess
import sys
import textwrap
import warnings

import pytest

from kcache import Entry, Store, make_key
from kcache.store import DELTA_BATCH
from kcache.warn import KcacheWarning


def key(i) -> str:
    return make_key({"totals": i})


def entry(i: int, size: int = 300) -> Entry:
    return Entry({"cubin": bytes([i % 256]) * size}, {"kernel": f"m:k{i}"})


def fill(store, n: int, first: int = 0, size: int = 300) -> list[str]:
    keys = [key(i) for i in range(first, first + n)]
    for i, k in enumerate(keys, first):
        assert store.put(k, entry(i, size))
    return keys


def disk(store) -> tuple[int, int]:
    """(count, bytes) of the entry files on disk."""
    files = [p for p in (store.root / "v1" / "entries").rglob("*.kce") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def totals(store) -> tuple[int, int]:
    st = store.stats()
    return st.entries, st.bytes


def copy_in(src: Store, dest_root) -> None:
    """Seed ``dest_root`` by copying ``src``'s entries, as `cp -a` would."""
    shutil.copytree(src.root / "v1" / "entries", dest_root / "v1" / "entries", dirs_exist_ok=True)


@pytest.fixture
def warmed(tmp_path):
    s = Store(tmp_path / "warmed")
    fill(s, 3, first=100)
    return s


@pytest.mark.parametrize("removal", ["clear", "prune", "remove_many"])
def test_removing_uncounted_files_never_makes_totals_negative(root, warmed, removal):
    copy_in(warmed, root)
    s = Store(root)
    assert totals(s) == (0, 0)  # copied in behind the store's back: not counted (docs)
    if removal == "clear":
        assert s.clear() == 3
    elif removal == "prune":
        assert len(s.prune(max_size=0).removed) == 3
    else:
        assert s.remove_many([key(100), key(101), key(102)]) == 3
    assert disk(s) == (0, 0)
    assert totals(s) == (0, 0)  # not (-3, -bytes)
    fill(s, 2)
    assert totals(s) == disk(s)  # and later puts count from the truth, not from below it


def test_garbage_file_named_like_an_entry_removed_by_prune(root):
    s = Store(root)
    fill(s, 3)
    garbage = s.root / "v1" / "entries" / "ab" / (("ab" + "c" * 62) + ".kce")
    garbage.parent.mkdir(exist_ok=True)
    garbage.write_bytes(os.urandom(9000))
    s.prune(max_size=0)
    assert disk(s) == (0, 0) and totals(s) == (0, 0)


def test_recount_seeds_a_copied_in_cache_and_then_the_cap_holds(root, warmed):
    copy_in(warmed, root)
    size = disk(warmed)[1]
    s = Store(root, max_size=size)  # the copied files alone fill the cap
    s.recount()
    assert totals(s) == disk(s) == disk(warmed)
    with warnings.catch_warnings():  # the new entry alone is over 90 % of this tiny cap
        warnings.simplefilter("ignore", KcacheWarning)
        fill(s, 1, size=2000)  # crosses the cap: eviction sees the copied files too
    assert disk(s)[1] <= size and totals(s) == disk(s)


def test_verify_fix_does_not_recount(root, warmed):
    """Quarantining adjusts the totals itself; a recount would race with live writers, so
    verify never recounts: a copied-in (uncounted) file stays uncounted."""
    s = Store(root)
    keys = fill(s, 3)
    bad = s.root / "v1" / "entries" / keys[0][:2] / f"{keys[0]}.kce"
    data = bytearray(bad.read_bytes())
    data[-1] ^= 0xFF  # same size, bad checksum
    bad.write_bytes(bytes(data))
    copy_in(warmed, root)
    counted = totals(s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KcacheWarning)
        report = s.verify(fix=True)
    assert report.quarantined == 1
    assert totals(s) == (counted[0] - 1, counted[1] - len(data))
    assert disk(s)[0] == counted[0] - 1 + 3  # a recount would have said this


KILLED = textwrap.dedent("""
    import os, sys
    from kcache import Store
    from kcache.tiers.local import LocalTier as S

    root, what, stop = sys.argv[1], sys.argv[2], int(sys.argv[3])
    real, done = S.unlink, [0]

    def remove(self, *a, **k):
        if done[0] == stop:
            os._exit(0)  # like kill -9: no finally, no atexit
        done[0] += 1
        return real(self, *a, **k)

    S.unlink = remove
    s = Store(root)
    if what == "prune":
        s.prune(max_size=0)
    elif what == "clear":
        s.clear()
    else:
        s._evict(0)
    os._exit(3)  # not reached
""")


@pytest.mark.slow
@pytest.mark.parametrize("what", ["prune", "clear", "evict"])
def test_killed_bulk_removal_leaves_totals_off_by_at_most_one_batch(root, what):
    s = Store(root)
    n, stop = DELTA_BATCH * 2 + 20, DELTA_BATCH + 40  # killed in the middle of the 2nd batch
    fill(s, n, size=50)
    proc = subprocess.run([sys.executable, "-c", KILLED, str(root), what, str(stop)], timeout=120)
    assert proc.returncode == 0
    on_disk = disk(s)
    assert on_disk[0] == n - stop  # the process really was killed in the middle
    entries, nbytes = totals(s)
    assert on_disk[0] <= entries <= on_disk[0] + DELTA_BATCH  # not off by every removal (stop)
    assert on_disk[1] <= nbytes
    s.recount()
    assert totals(s) == on_disk


@pytest.mark.slow
def test_an_eviction_pass_lowers_totals_that_count_more_than_is_on_disk(root, monkeypatch):
    """Issue 32: writers killed in bulk removals left `stats` counting 496 entries against 27
    on disk, and every later put ran an eviction pass until recount(). The next pass finds
    less on disk than counted and lowers the totals (once per pass); then puts stop evicting."""
    from kcache.store import maintenance

    s = Store(root)
    n, stop = DELTA_BATCH * 2 + 20, DELTA_BATCH + 40  # killed with 40 removals uncounted
    fill(s, n, size=50)
    proc = subprocess.run([sys.executable, "-c", KILLED, str(root), "prune", str(stop)], timeout=120)
    assert proc.returncode == 0
    on_disk, counted = disk(s), totals(s)
    assert counted[0] == on_disk[0] + 40 and counted[1] > on_disk[1]  # the drift
    per_entry = on_disk[1] // on_disk[0]
    cap = (on_disk[0] + 16) * per_entry  # counted is over it; what is on disk, and one more, is not
    assert counted[1] > cap and (on_disk[0] + 1) * per_entry < maintenance.EVICT_TARGET * cap
    passes = []
    real = maintenance.evict
    monkeypatch.setattr(maintenance, "evict", lambda house, target: (passes.append(target), real(house, target)))
    s = Store(root, max_size=cap)
    evicted = s.stats().evictions  # the killed prune's first batch
    assert s.put(key("after"), entry(1000, 50))
    assert passes and totals(s) == disk(s) == (on_disk[0] + 1, disk(s)[1])  # corrected, no recount()
    assert s.stats().evictions == evicted  # nothing on disk had to go
    passes.clear()
    for i in range(3):
        s._totals_at = 0.0  # each put looks at the totals afresh (as after a second)
        assert s.put(key(("more", i)), entry(2000 + i, 50))
    assert passes == [] and totals(s) == disk(s)  # no more eviction passes


def test_two_passes_lowering_the_same_drift_lower_it_once(root):
    """Two eviction passes that read the totals before either lowered them (evict.lock passed
    or unusable) never take the totals below what their scans found."""
    from kcache.store import maintenance
    from kcache.store.stats import SHARDS

    s = Store(root)
    fill(s, 20, size=50)
    for shard in range(SHARDS):
        s._stats.add(shard, now=True, entries=3, bytes=1000)  # as killed writers leave them
    house = s._housekeeping()
    counted = [house.stats.shard_totals(i) for i in range(SHARDS)]
    files = list(house.local.scan())
    maintenance.lower_drift(house, files, counted)
    maintenance.lower_drift(house, files, counted)  # the second pass, with what it read before
    assert totals(s) == disk(s)


def test_huge_counters_in_every_shard_still_sum_to_a_64_bit_integer(tmp_path):
    """Each shard may hold up to 2**58 (a larger value, as NaN, reads as 0): the sum of the 16
    that ``kcache stats --json`` prints stays below 2**63, what int64 readers take."""
    import json
    import msgpack
    from kcache.store.stats import SHARDS
    store = Store(tmp_path)
    store.put(make_key({"n": 1}), Entry({"cubin": b"\x07" * 100}, {"kernel": "m:k"}))
    store.flush()
    layout = store.local.layout
    for shard in range(SHARDS):
        path = layout.stats_files(shard)[0]
        path.write_bytes(msgpack.packb({"hits": 1 << 58, "misses": (1 << 58) + 1}))
    done = subprocess.run([sys.executable, "-m", "kcache", "stats", "--json", "--dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=120)
    doc = json.loads(done.stdout)
    assert doc["hits"] == SHARDS << 58 and doc["hits"] < 1 << 63
    assert doc["misses"] == 0  # above the cap: not a count kcache wrote

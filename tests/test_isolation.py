"""Trust rules 5, 6, 7 and 9 (issue 7, docs/security.md), with real files and processes.

Rule 5, fault isolation: a fault on one key or one auxiliary file affects that key or that
feature only; the size cap holds without its lock; counters never become NaN or infinite;
get and put never raise.
Rule 6: quarantine names never collide; quarantine is pruned after quarantine_age and counted.
Rule 7: temp files of killed writers are swept by eviction too, and counted.
Rule 9: every integer or size the user gives is bounded before conversion.
Also: a bad file in a read-only layer is read once, and decoding a hostile entry costs a
small multiple of its size in memory.
"""
from __future__ import annotations

import hashlib
import json
import math
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import warnings

import msgpack
import pytest

from kcache import Store
from kcache.disk import fsio
from kcache.entry import format as fmt
from kcache.disk.layout import QUARANTINE_RE, Layout
from kcache.store.stats import SHARDS, shard_of
from kcache.warn import KcacheWarning
from trustkit import (DAY, IS_ROOT, age, child_env, entry, json_out, key, no_traceback, run_cli,
                      run_py, strict_json)

CTX = mp.get_context("fork")


def _kcache_warnings(rec) -> list[str]:
    return [str(w.message) for w in rec if issubclass(w.category, KcacheWarning)]


@pytest.fixture
def rec():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def _disk_bytes(root) -> int:
    return sum(p.stat().st_size for p in Layout(root).entries.rglob("*.kce") if p.is_file())


# -- rule 5: fault isolation -----------------------------------------------------------------------

def test_folder_named_like_an_entry_fails_that_put_only(root, rec):
    s = Store(root)
    assert s.put(key(100), entry(100))
    path = Layout(root).entry(key(0))
    path.mkdir(parents=True)
    assert s.put(key(0), entry(0)) is False
    assert all(s.put(key(i), entry(i)) for i in range(1, 21))  # later puts of other keys
    assert s.writable and s.write_problem is None
    assert all(s.get(key(i)) == entry(i) for i in range(1, 21))
    st = s.stats()
    assert (st.write_errors_other, st.write_errors_permission, st.write_errors_no_space) == (1, 0, 0)
    assert st.puts == 21
    msgs = _kcache_warnings(rec)
    assert not [m for m in msgs if "cannot write to the cache" in m], msgs
    assert len([m for m in msgs if str(path) in m]) == 1, msgs
    # the folder is that key's fault: a get quarantines it, then the key can be stored again
    assert s.get(key(0)) is None and not path.exists()
    assert s.put(key(0), entry(0)) and s.get(key(0)) == entry(0)


def _shard_path_broken(lay, shard, which):
    """Make counter shard ``shard``'s counters file (0) or lock file (2) a folder."""
    p = lay.stats_files(shard)[which]
    if p.exists():
        p.unlink()
    p.mkdir()
    return p


@pytest.mark.parametrize("which", [0, 2], ids=["shard file", "shard lock"])
def test_stats_shard_that_is_a_folder_keeps_only_that_shard_in_memory(root, rec, which):
    s = Store(root)
    assert s.put(key(100), entry(100))
    s.flush()
    broken = shard_of(key(0))
    bad = _shard_path_broken(Layout(root), broken, which)
    s2 = Store(root)
    keys = [key(i) for i in range(40)]
    assert all(s2.put(k, entry(i)) for i, k in enumerate(keys))
    assert all(s2.get(k) == entry(i) for i, k in enumerate(keys))
    s2.flush()
    assert s2.writable
    mine = s2.stats()
    assert (mine.puts, mine.hits, mine.entries) == (41, 40, 41)  # this process: all of them
    # another process sees every shard but the broken one
    other = json_out(run_py("import json, sys\nfrom kcache import Store\n"
                            "print(json.dumps(Store(sys.argv[1]).stats().as_dict()))", root))
    in_broken = sum(1 for k in keys if shard_of(k) == broken)
    assert in_broken > 0
    assert other["puts"] == 41 - in_broken and other["hits"] == 40 - in_broken
    assert bad.is_dir()
    msgs = _kcache_warnings(rec)
    assert len([m for m in msgs if "statistics shard" in m]) == 1, msgs
    assert not [m for m in msgs if "cannot write to the cache" in m], msgs


def test_stats_folder_that_is_a_file_counts_in_memory_and_keeps_the_cap(root, rec):
    lay = Layout(root)
    Store(root).flush()
    lay.bucket.mkdir(parents=True)
    lay.stats.write_bytes(b"not a folder")
    s = Store(root, max_size=20_000)
    assert all(s.put(key(i), entry(i, 1000)) for i in range(60))
    assert all(s.get(key(i)) is not None for i in range(55, 60))  # the newest are kept
    st = s.stats()
    assert st.puts == 60 and st.hits == 5 and st.evictions > 0
    assert _disk_bytes(root) <= 20_000  # the size cap holds on what this process stored
    assert s.writable and lay.stats.read_bytes() == b"not a folder"
    msgs = _kcache_warnings(rec)
    assert len([m for m in msgs if "statistics" in m]) == 1, msgs


@pytest.mark.slow
def test_evict_lock_that_is_a_folder_still_enforces_the_cap(root, rec):
    lay = Layout(root)
    lay.evict_lock.mkdir(parents=True)
    s = Store(root, max_size=20_000)
    assert all(s.put(key(i), entry(i, 1000)) for i in range(100))
    st = s.stats()
    assert st.evictions >= 80
    assert _disk_bytes(root) <= 20_000 and st.bytes <= 20_000
    msgs = _kcache_warnings(rec)
    assert len([m for m in msgs if str(lay.evict_lock) in m]) == 1, msgs
    assert lay.evict_lock.is_dir()


#: In a process whose v1/quarantine is another file system: a corrupt entry is met 3 times,
#: then other keys are stored.
EXDEV_CHILD = r"""
import json, os, sys, warnings
from kcache import Store
from kcache.disk import fsio
from kcache.disk.layout import Layout
from trustkit import key, entry
warnings.simplefilter("always")
root, how = sys.argv[1], sys.argv[2]
if how == "simulated":  # os.rename fails with EXDEV for a move into the quarantine only
    import errno, os
    from kcache.disk.layout import QUARANTINE_RE
    real_rename = os.rename
    def rename(src, dst, **kw):
        if QUARANTINE_RE.fullmatch(os.fsdecode(dst)):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        return real_rename(src, dst, **kw)
    os.rename = rename
bad = Layout(root).entry(key(0))
bad_ino = bad.stat().st_ino
reads = []  # reads from the bad file
real = fsio.read_upto
fsio.read_upto = lambda fd, n: (os.fstat(fd).st_ino == bad_ino and reads.append(n)) or real(fd, n)
s = Store(root)
gets = [s.get(key(0)) for _ in range(3)]
read_bad = len(reads)
puts = [s.put(key(i), entry(i)) for i in range(1, 11)]
st = s.stats()
print(json.dumps({"gets": [g is not None for g in gets], "puts": puts, "in_place": bad.exists(),
                  "corrupt": st.corrupt, "writable": s.writable, "reads_of_bad": read_bad}))
"""


def _can_mount(where) -> bool:
    """True when a tmpfs can be mounted on ``where`` in a private mount namespace."""
    if not IS_ROOT or not shutil.which("unshare"):
        return False
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "mount", "-t", "tmpfs",
                           "kcache-probe", str(where)], capture_output=True)
    return done.returncode == 0


@pytest.mark.parametrize("how", ["tmpfs mount", "simulated"])
def test_quarantine_on_another_file_system(root, how):
    """A real tmpfs mounted on v1/quarantine (root, in a private mount namespace that dies
    with the process), else os.rename failing with EXDEV for the quarantine move only."""
    s = Store(root)
    assert s.put(key(50), entry(50))  # makes v1/quarantine
    bad = Layout(root).entry(key(0))
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_bytes(b"\0" * 4096)
    command = [sys.executable, "-c", EXDEV_CHILD, str(root), how]
    if how == "tmpfs mount":
        if not _can_mount(Layout(root).quarantine):
            pytest.skip("mounting a tmpfs in a private mount namespace needs root and unshare")
        command = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                   'mount -t tmpfs -o size=1m kcache-test "$1" && shift && exec "$@"', "sh",
                   str(Layout(root).quarantine), *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=child_env())
    no_traceback(done)
    out = json_out(done)
    assert out["gets"] == [False] * 3
    assert out["in_place"] is True  # left in place, never copied-and-deleted across devices
    assert out["corrupt"] == 1  # counted once
    assert out["puts"] == [True] * 10 and out["writable"] is True
    assert out["reads_of_bad"] == 1  # its prefix, once: not re-read while unchanged
    assert done.stderr.count("EXDEV") == 1, done.stderr
    assert bad.exists() and not list(Layout(root).quarantine.iterdir())


def _hostile_shards(root) -> None:
    """Every counter shard holds NaN, infinities, 1e308 and integers at msgpack's limits."""
    lay = Layout(root)
    for i in range(SHARDS):
        lay.stats_files(i)[0].write_bytes(msgpack.packb({
            "hits": 2**64 - 1, "misses": -2**63, "puts": float("nan"), "corrupt": float("inf"),
            "compile_seconds": 1e308, "seconds_saved": 1.7e308, "entries": 2**64 - 1,
            "bytes": float("-inf"), "lock_waits": "many", "temp_swept": True}))


def test_hostile_counter_shards_never_give_nan_or_infinity(root):
    s = Store(root)
    assert s.put(key(0), entry(0))
    s.flush()
    _hostile_shards(root)
    s2 = Store(root)
    assert s2.put(key(1), entry(1)) and s2.get(key(1)) == entry(1) and s2.get(key(2)) is None
    s2.record(compiles=1, compile_seconds=2.5)
    s2.flush()
    st = s2.stats().as_dict()
    for name, value in st.items():
        assert isinstance(value, (int, float)) and math.isfinite(value) and value >= 0, (name, value)
        assert value < 2**64, (name, value)
    assert st["compile_seconds"] == 2.5 and st["compiles"] == 1 and st["hits"] == 1
    done = run_cli("--dir", root, "stats", "--json")
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    doc = strict_json(done.stdout)
    assert all(v is None or isinstance(v, bool) or math.isfinite(v) for v in doc.values()), doc


# -- rule 6: quarantine ---------------------------------------------------------------------------

def _corrupt_copy(root, k, i: int) -> int:
    """Write corrupt copy ``i`` of ``k``'s entry (a distinct size each); returns its size."""
    path = Layout(root).entry(k)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"corrupt %d " % i + b"x" * i
    path.write_bytes(data)
    return len(data)


def _quarantine_worker(root: str, k: str, first: int, n: int, barrier, results) -> None:
    s = Store(root)
    sizes = []
    barrier.wait()
    for i in range(first, first + n):
        with s.lock(k):  # one writer of the key at a time: each copy is met by its writer
            sizes.append(_corrupt_copy(root, k, i))
            assert s.get(k) is None
    s.flush()
    results.put(sizes)


@pytest.mark.slow
def test_fifty_corrupt_copies_leave_fifty_quarantined_files(root, monkeypatch, rec):
    k = key(0)
    s = Store(root)
    monkeypatch.setattr("time.time_ns", lambda: 1_700_000_000_000_000_000)  # one nanosecond
    sizes = []
    for i in range(25):
        sizes.append(_corrupt_copy(root, k, i))
        assert s.get(k) is None
    monkeypatch.undo()
    barrier, results = CTX.Barrier(5), CTX.Queue()
    procs = [CTX.Process(target=_quarantine_worker, args=(str(root), k, 25 + 5 * w, 5, barrier, results))
             for w in range(5)]
    for p in procs:
        p.start()
    for p in procs:
        sizes += results.get(timeout=120)
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    q = Layout(root).quarantine
    names = sorted(os.listdir(q))
    assert len(names) == 50 and all(QUARANTINE_RE.fullmatch(n) for n in names)
    assert sorted(p.stat().st_size for p in q.iterdir()) == sorted(sizes)
    st = Store(root).stats()
    assert (st.quarantine_files, st.quarantine_bytes) == (50, sum(sizes))
    assert st.corrupt == 50


@pytest.mark.slow
def test_prune_removes_quarantined_files_older_than_quarantine_age(root, rec):
    k = key(0)
    s = Store(root)
    assert s.put(key(1), entry(1))
    for i in range(12):
        _corrupt_copy(root, k, i)
        assert s.get(k) is None
    q = sorted(Layout(root).quarantine.iterdir())
    assert len(q) == 12
    for p in q[:4]:
        age(p, 31 * DAY)  # older than the default 30 days
    for p in q[4:8]:
        age(p, 2 * 3600)
    done = run_cli("--dir", root, "prune")
    assert done.returncode == 0, done.stderr
    assert sorted(Layout(root).quarantine.iterdir()) == q[4:]
    assert Store(root).stats().quarantine_files == 8
    done = run_cli("--dir", root, "prune", env={"KCACHE_QUARANTINE_AGE": "1h"})
    assert done.returncode == 0, done.stderr
    assert sorted(Layout(root).quarantine.iterdir()) == q[8:]
    report = Store(root).prune()
    assert report.quarantine_files == 0
    assert Store(root).get(key(1)) == entry(1)  # entries are not touched


# -- rule 7: temp files of killed writers -----------------------------------------------------------

KILLED_WRITER = r"""
import os, sys
from kcache import Store
from trustkit import key, entry
root, ready, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
real = os.rename
def rename(*a, **kw):  # the temp file is written and fsync'ed: say so, then wait to be killed
    os.write(ready, b"r")
    os.read(hold, 1)
    return real(*a, **kw)
os.rename = rename
Store(root).put(key(0), entry(0, 50_000))
"""


@pytest.mark.slow
def test_temp_files_of_killed_writers_are_swept_by_eviction(root):
    s = Store(root)
    assert s.put(key(100), entry(100))
    s.flush()
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(root), str(ready_w), str(hold_r)],
                            pass_fds=(ready_w, hold_r), env=child_env())
    os.close(ready_w)
    os.close(hold_r)
    try:
        assert os.read(ready_r, 1) == b"r"  # mid-put: after the temp file, before the rename
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(60) == -signal.SIGKILL
    finally:
        os.close(ready_r)
        os.close(hold_w)
    lay = Layout(root)
    left = [p for p in (lay.entries / key(0)[:2]).iterdir() if fsio.TEMP_RE.fullmatch(p.name)]
    assert len(left) == 1 and left[0].stat().st_size > 50_000
    assert not lay.entry(key(0)).exists()
    crafted = [lay.stats / fsio.temp_name("3.msgpack"), lay.bucket / fsio.temp_name("toolchain.msgpack"),
               root / fsio.temp_name("config.json")]
    fresh = lay.entries / key(0)[:2] / fsio.temp_name(f"{key(0)}.kce")  # a put running now
    for p in crafted + [fresh]:
        p.write_bytes(b"partial")
    for p in left + crafted:
        age(p, 2 * 3600)  # no writer takes an hour
    # no prune: a program whose put crosses the size cap
    done = run_py("import sys\nfrom kcache import Store\nfrom trustkit import key, entry\n"
                  "s = Store(sys.argv[1], max_size=1)\nassert s.put(key(1), entry(1))\n", root)
    assert done.returncode == 0, done.stderr
    assert not any(p.exists() for p in left + crafted)
    assert fresh.exists()
    st = Store(root).stats()
    assert st.temp_swept == 4 and st.evictions >= 1


# -- rule 9: bounded numbers ---------------------------------------------------------------------------

BIG = "9" * 5000
BOUNDED = {
    "KCACHE_MAX_SIZE": ({"KCACHE_MAX_SIZE": BIG}, None, ("stats",)),
    "KCACHE_LOCK_TIMEOUT": ({"KCACHE_LOCK_TIMEOUT": BIG}, None, ("stats",)),
    "KCACHE_MAX_ENTRY_SIZE": ({"KCACHE_MAX_ENTRY_SIZE": BIG}, None, ("ls",)),
    "KCACHE_QUARANTINE_AGE": ({"KCACHE_QUARANTINE_AGE": BIG + "d"}, None, ("prune",)),
    "KCACHE_SHARED": ({"KCACHE_SHARED": BIG}, None, ("stats",)),
    "config.json max_size (number)": ({}, '{"max_size": %s}' % BIG, ("stats",)),
    "config.json max_size (text)": ({}, '{"max_size": "%s"}' % BIG, ("stats",)),
    "config.json lock_timeout": ({}, '{"lock_timeout": %s}' % BIG, ("ls",)),
    "config.json max_size (float)": ({}, '{"max_size": %s.5e99999}' % BIG, ("stats",)),
    "prune --max-size": ({}, None, ("prune", "--max-size", BIG)),
    "prune --older-than": ({}, None, ("prune", "--older-than", BIG + "d")),
    "config set max_size": ({}, None, ("config", "set", "max_size", BIG)),
    "config set lock_timeout": ({}, None, ("config", "set", "lock_timeout", BIG)),
}


@pytest.mark.parametrize("case", list(BOUNDED))
def test_huge_numbers_give_one_clear_line_and_exit_2(root, case):
    env, conf, args = BOUNDED[case]
    root.mkdir()
    if conf is not None:
        (root / "config.json").write_text(conf)
    done = run_cli("--dir", root, *args, env=env)
    no_traceback(done)
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    assert len(lines[0]) < 600, lines[0][:200]  # the value is quoted shortened, never whole
    assert "too large" in lines[0] or "not a" in lines[0], lines[0]
    assert BIG[:20] in lines[0] or "inf" in lines[0], lines[0]  # the value, quoted (shortened)
    assert "4300" not in lines[0] and "set_int_max_str_digits" not in lines[0]


@pytest.mark.parametrize("arg", ["max_size", "lock_timeout"])
def test_huge_int_arguments_raise_config_error(root, arg):
    from kcache import ConfigError
    for value in (10**5000, -10**5000, BIG):
        with pytest.raises(ConfigError, match=f"{arg}=.*(too large|negative)") as info:
            Store(root, **{arg: value})
        assert len(str(info.value)) < 600


# -- a bad file in a read-only layer is read once ------------------------------------------------------

def _bad_entry_file(path, size: int) -> None:
    """A sparse file of ``size`` bytes whose prefix is valid and matches its size: judged only
    by its checksum, after a full read."""
    hlen = 16
    prefix = fmt._PREFIX.pack(fmt.MAGIC, fmt.FORMAT_VERSION, 0, hlen,
                              size - fmt.PREFIX_SIZE - hlen - fmt.SUM_SIZE, b"\0" * 16)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(prefix)
        f.truncate(size)


@pytest.mark.slow
def test_bad_layer_file_is_read_once(tmp_path, monkeypatch, rec):
    layer = tmp_path / "layer"
    size = 100 << 20
    Store(layer).flush()
    path = Layout(layer).entry(key(0))
    _bad_entry_file(path, size)
    read = []  # bytes asked of the bad file (large files are read into one buffer)
    real, real_into = fsio.read_upto, fsio._read_into

    def counting(fd, n):
        if os.fstat(fd).st_ino == path.stat().st_ino:
            read.append(n)
        return real(fd, n)

    def counting_into(fd, view):
        if os.fstat(fd).st_ino == path.stat().st_ino:
            read.append(len(view))
        return real_into(fd, view)

    monkeypatch.setattr(fsio, "read_upto", counting)
    monkeypatch.setattr(fsio, "_read_into", counting_into)
    s = Store(tmp_path / "cache", readonly_roots=[layer])
    assert all(s.get(key(0)) is None for _ in range(50))
    assert size <= sum(read) < size + 4096  # read whole once (the checksum), never again
    assert s.stats().corrupt == 1 and s.stats().misses == 50
    assert path.exists()  # a layer is never changed
    assert len([m for m in _kcache_warnings(rec) if "corrupt" in m]) == 1
    os.utime(path, (1, 1))  # a changed file (new identity) is judged again, once
    read.clear()
    assert all(s.get(key(0)) is None for _ in range(5))
    assert size <= sum(read) < size + 4096


# -- peak memory of a hostile entry ------------------------------------------------------------------

def _empty_maps_entry(root) -> tuple[str, int]:
    """A valid entry (checksums and lengths right) whose meta holds ~16 MiB of empty maps; it
    must be refused as corrupt (decoding limits). Returns (key, file size)."""
    k = key("bomb")
    n = fmt.MAX_HEADER - 4096
    header = {"key": k, "components": {}, "created": 1.0, "sizes": {"cubin": 1},
              "meta": {"x": [{}] * n}, "kernel": "m:k", "signature": None, "arch": None,
              "compile_seconds": None}
    h = msgpack.packb(header, use_bin_type=True)
    body = msgpack.packb({"cubin": b"c"}, use_bin_type=True)
    prefix = fmt._PREFIX.pack(fmt.MAGIC, fmt.FORMAT_VERSION, 0, len(h), len(body),
                              hashlib.blake2b(h, digest_size=16).digest())
    data = prefix + h + body
    data += hashlib.blake2b(data, digest_size=fmt.SUM_SIZE).digest()
    path = Layout(root).entry(k)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return k, len(data)


#: Run one operation under an address-space limit of (what the process has mapped after its
#: imports) + ``allowance`` bytes; print {"ok": ...}. MemoryError fails the test.
UNDER_LIMIT = r"""
import importlib, io, json, os, resource, sys, contextlib
from kcache import Store
cli = importlib.import_module("kcache.cli.main")
cli.build_parser()
def vm_size():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
op, root, k, allowance = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
limit = vm_size() + allowance
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
out = io.StringIO()
with contextlib.redirect_stdout(out):
    if op == "get":
        result = Store(root).get(k) is None
    else:
        args = op.split() + ([k[:16]] if op == "show" else [])
        result = cli.main(["--dir", root, "--json", *args])
print(json.dumps({"result": result, "stdout": out.getvalue()[-2000:]}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc (Linux)")
@pytest.mark.parametrize("op", ["get", "ls", "show", "verify", "verify --fix"])
def test_peak_memory_on_a_valid_entry_of_empty_maps(root, op):
    """The issue's 1.3 GiB per get: now the file's bytes twice (read, joined) plus a constant.
    Address space, not RSS, is limited: a preallocated list would count."""
    assert Store(root).put(key(1), entry(1))
    k, size = _empty_maps_entry(root)
    allowance = 4 * size + (64 << 20)
    done = run_py(UNDER_LIMIT, op, root, k, allowance, env={"MALLOC_ARENA_MAX": "1"})
    no_traceback(done)
    out = json_out(done)
    if op == "get":
        assert out["result"] is True  # a miss, not a hit
        assert "elements" in done.stderr  # refused by the decoding limits
    elif op == "ls":  # listed as an entry that cannot be read, with why
        listed = {e["key"]: e["problem"] for e in json.loads(out["stdout"])["entries"]}
        assert listed[key(1)] is None and "elements" in listed[k]
    elif op == "show":
        assert out["result"] in (0, 1) and "elements" in out["stdout"]
    else:
        doc = json.loads(out["stdout"])
        assert [b["key"] for b in doc["bad"]] == [k] and "elements" in doc["bad"][0]["problem"]
        assert doc["bad"][0]["quarantined"] is (op == "verify --fix")

"""Failure modes: read-only / missing / full roots, corruption, hostile entries."""
import errno
import hashlib
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kcache import CorruptEntry, Entry, Store, make_key
from kcache import warn
from kcache.entry import format as fmt
from kcache.warn import KcacheWarning


def key(i) -> str:
    return make_key({"i": i})


def entry(i: int = 0, size: int = 200) -> Entry:
    return Entry({"cubin": bytes([i % 256]) * size, "ptx": b"// ptx"}, {"kernel": f"m:k{i}", "compile_seconds": 1.0})


def _kcache_warnings(rec) -> list[str]:
    return [str(w.message) for w in rec if issubclass(w.category, KcacheWarning)]


def _fail_writes(monkeypatch, err: int) -> None:
    """Make every write path of this process fail with ``err``, as a read-only mount
    (EROFS) or a permission problem (EACCES) would; reads (builtin open) keep working."""
    real_open = os.open

    def deny_open(path, flags, *a, **kw):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(err, os.strerror(err), str(path))
        return real_open(path, flags, *a, **kw)

    def deny(*a, **kw):
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(os, "open", deny_open)
    for name in ("replace", "utime", "mkdir", "unlink"):
        monkeypatch.setattr(os, name, deny)


@pytest.mark.parametrize("err", [errno.EROFS, errno.EACCES])
def test_readonly_root_keeps_serving(root, monkeypatch, err):
    Store(root).put(key(1), entry(1))
    s = Store(root)
    _fail_writes(monkeypatch, err)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert s.get(key(1)) == entry(1)  # touch fails quietly... once
        for i in range(5):
            assert s.put(key(10 + i), entry(i)) is False
            assert s.get(key(1)) == entry(1)
            assert s.get(key(2)) is None
        s.flush()
        st = s.stats()  # in-memory counters go on
    assert s.writable is False
    assert (st.hits, st.misses, st.puts) == (6, 5, 1)
    msgs = _kcache_warnings(rec)
    assert len([m for m in msgs if "cannot write" in m]) == 1, msgs
    assert all(msgs.count(m) == 1 for m in msgs)
    monkeypatch.undo()
    assert sorted(e.key for e in Store(root).entries()) == [key(1)]


def test_readonly_root_get_or_create_still_creates(root, monkeypatch):
    s = Store(root)
    _fail_writes(monkeypatch, errno.EROFS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ent, hit = s.get_or_create(key(1), lambda: entry(1))
    assert (ent, hit) == (entry(1), False)


def test_missing_root_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    s = Store(blocker / "cache")  # its parent is a file: mkdir fails with ENOTDIR
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert s.get(key(1)) is None
        assert s.put(key(1), entry()) is False
        assert s.put(key(2), entry()) is False
        assert s.get_or_create(key(3), lambda: entry(3)) == (entry(3), False)
        assert list(s.entries()) == [] and s.find("ab") == [] and s.clear() == 0
        assert s.stats().misses == 2 and s.prune().removed == []
    assert len([m for m in _kcache_warnings(rec) if "cannot write" in m]) == 1


def test_missing_root_is_created_on_first_put(root):
    s = Store(root)
    assert s.get(key(1)) is None and not root.exists()  # gets never create anything
    assert s.put(key(1), entry()) and s.get(key(1)) == entry()


def test_disk_full_on_put(root, monkeypatch):
    s = Store(root)
    s.put(key(1), entry(1))
    before = s.stats()
    real_write = os.write

    def full(fd, data):
        if len(data) > 100:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert s.put(key(2), entry(2, 5000)) is False
        assert s.put(key(3), entry(3, 5000)) is False
        assert s.get(key(1)) == entry(1)
    monkeypatch.undo()
    assert len([m for m in _kcache_warnings(rec) if "ENOSPC" in m]) == 1
    leftovers = [p for p in root.rglob("*.tmp")]
    assert leftovers == []
    after = Store(root).stats()
    assert (after.entries, after.bytes) == (before.entries, before.bytes)
    assert [e.key for e in Store(root).entries()] == [key(1)]


#: Fills the root (argv[1], on a 256 KiB tmpfs) with 40 puts of ~20 KB, hits the stored ones,
#: prints what it saw as JSON.
_FILL = """
import json, os, sys, warnings
from kcache import Entry, Store, make_key
s = Store(sys.argv[1])
with warnings.catch_warnings(record=True) as rec:
    warnings.simplefilter("always")
    stored = [i for i in range(40)
              if s.put(make_key({"fill": i}), Entry({"ptx": os.urandom(20000)}, {"kernel": "k"}))]
    hits = sum(s.get(make_key({"fill": i})) is not None for i in stored)
st = s.stats()
print(json.dumps({"stored": len(stored), "hits": hits, "warnings": [str(w.message) for w in rec],
                  "no_space": st.write_errors_no_space, "permission": st.write_errors_permission,
                  "other": st.write_errors_other}))
"""


def test_a_full_file_system_counts_every_failed_put_as_no_space(tmp_path):
    """A root on a real 256 KiB tmpfs (its own mount namespace): the puts past the first
    ENOSPC are counted as no space, not as permission (37 of 37 were: the root's first error
    stopped the writes and every later put was counted as a permission error); one warning;
    the stored entries still hit."""
    import shutil
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a tmpfs of its own needs root and unshare -m")
    folder = tmp_path / "small"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                           'mount -t tmpfs -o size=256k tmpfs "$1" && shift && exec "$@"', "sh",
                           str(folder), sys.executable, "-c", _FILL, str(folder / "root")],
                          capture_output=True, text=True, env=env, timeout=120)
    if done.returncode != 0 and "mount" in done.stderr:
        pytest.skip(f"no tmpfs mount here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr[-2000:]
    seen = __import__("json").loads(done.stdout)
    failed = 40 - seen["stored"]
    assert 0 < seen["stored"] < 40 and seen["hits"] == seen["stored"]
    assert len(seen["warnings"]) == 1 and "ENOSPC" in seen["warnings"][0], seen["warnings"]
    assert (seen["no_space"], seen["permission"], seen["other"]) == (failed, 0, 0)


# -- corruption ---------------------------------------------------------------------------

@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 10**9), st.integers(0, 7)), min_size=1, max_size=12))
def test_random_flips_and_truncations_are_detected(damage):
    with tempfile.TemporaryDirectory() as d:
        s = Store(Path(d) / "c")
        n = 16
        artifacts = {}
        for i in range(n):
            artifacts[key(i)] = {"cubin": os.urandom(300 + i), "ltoir": os.urandom(50)}
            s.put(key(i), Entry(dict(artifacts[key(i)]), {"kernel": f"m:k{i}"}))
        damaged, trailer_only = set(), set()
        warn.reset()  # one warning per example, as if each were a fresh process
        for j, (truncate, pos, bit) in enumerate(damage):
            k = key(j % n)
            p = Path(d) / "c" / "v1" / "entries" / k[:2] / f"{k}.kce"
            if k in damaged:
                continue
            data = bytearray(p.read_bytes())
            if truncate:
                data = data[: pos % len(data)]
            else:
                data[pos % len(data)] ^= 1 << bit
                if pos % len(data) >= len(data) - fmt.SUM_SIZE:
                    trailer_only.add(k)  # the trailing checksum alone: every byte served intact
            p.write_bytes(bytes(data))
            damaged.add(k)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            for i in range(n):
                got = s.get(key(i))
                if key(i) in trailer_only:
                    # A hit checks what it serves (header and artifact sums, kcache.entry);
                    # the whole-file check of load and verify still finds the damage.
                    assert got.artifacts == artifacts[key(i)]
                    with pytest.raises(CorruptEntry, match="checksum mismatch"):
                        s.load(key(i))
                    continue
                assert (got is None) == (key(i) in damaged)
                with pytest.raises(KeyError) if key(i) in damaged else _nullcontext():
                    s.load(key(i))
        quarantined = list((Path(d) / "c" / "v1" / "quarantine").iterdir())
        st_ = s.stats()
        caught = damaged - trailer_only
        assert len(quarantined) == len(caught) == st_.corrupt
        assert st_.entries == n - len(caught) == len(list(s.entries()))
        assert len(_kcache_warnings(rec)) == (1 if caught else 0)  # warned once
        assert {Path(p).stem for p, _why in s.verify().corrupt} == trailer_only


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


# -- hostile entries (valid checksums) --------------------------------------------------------

PICKLE_MARKER_PAYLOAD = "cposix\nsystem\n(S'touch {marker}'\ntR."  # protocol-0 pickle, hand-written


def _forge(root: Path, k: str, header_bytes: bytes, body_bytes: bytes, hlen=None, blen=None,
           version=fmt.FORMAT_VERSION) -> Path:
    """Write an entry file with arbitrary header/body and a *valid* checksum."""
    hsum = hashlib.blake2b(header_bytes, digest_size=16).digest()
    prefix = fmt._PREFIX.pack(fmt.MAGIC, version, 0, len(header_bytes) if hlen is None else hlen,
                              len(body_bytes) if blen is None else blen, hsum)
    data = prefix + header_bytes + body_bytes
    data += hashlib.blake2b(data, digest_size=32).digest()
    path = root / "v1" / "entries" / k[:2] / f"{k}.kce"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _header(k, **over):
    h = {"key": k, "components": {}, "created": 1.0, "sizes": {"cubin": 3}, "meta": {},
         "kernel": None, "signature": None, "arch": None, "compile_seconds": None}
    h.update(over)
    return msgpack.packb(h, use_bin_type=True)


GOOD_BODY = msgpack.packb({"cubin": b"abc"}, use_bin_type=True)

HOSTILE = {
    "absurd header length": lambda k: (_header(k), GOOD_BODY, {"hlen": 2**32 - 1}),
    "absurd body length": lambda k: (_header(k), GOOD_BODY, {"blen": 2**63}),
    "bin32 claiming 4 GiB": lambda k: (b"\xc6\xff\xff\xff\xff" + b"x" * 10, GOOD_BODY, {}),
    "array32 claiming 4G items": lambda k: (b"\xdd\xff\xff\xff\xff", GOOD_BODY, {}),
    "deep nesting": lambda k: (b"\x91" * 100000 + b"\xc0", GOOD_BODY, {}),
    "header not a map": lambda k: (msgpack.packb([1, 2]), GOOD_BODY, {}),
    "wrong key": lambda k: (_header("0" * 64), GOOD_BODY, {}),
    "created is a string": lambda k: (_header(k, created="yesterday"), GOOD_BODY, {}),
    "meta is a list": lambda k: (_header(k, meta=[1]), GOOD_BODY, {}),
    "negative size": lambda k: (_header(k, sizes={"cubin": -1}), GOOD_BODY, {}),
    "kernel is an int": lambda k: (_header(k, kernel=5), GOOD_BODY, {}),
    "artifact is a str": lambda k: (_header(k), msgpack.packb({"cubin": "abc"}), {}),
    "artifact is an int": lambda k: (_header(k, sizes={"cubin": 1}), msgpack.packb({"cubin": 7}), {}),
    "sizes disagree": lambda k: (_header(k, sizes={"cubin": 4}), GOOD_BODY, {}),
    "ext type in meta": lambda k: (_header(k, meta={"x": msgpack.ExtType(5, b"evil")}), GOOD_BODY, {}),
    "timestamp in meta": lambda k: (_header(k, meta={"t": msgpack.Timestamp(1, 0)}), GOOD_BODY, {}),
    "int map key": lambda k: (msgpack.packb({1: 2}), GOOD_BODY, {}),
    "trailing garbage in body": lambda k: (_header(k), GOOD_BODY + b"\x00", {}),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_entries_rejected(store, name):
    store.put(key(99), entry())  # layout exists
    k = key(1)
    hb, bb, lens = HOSTILE[name](k)
    path = _forge(store.root, k, hb, bb, **lens)
    with pytest.raises(CorruptEntry):
        store.load(k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert store.get(k) is None
        assert store.header(k) is None
    assert not path.exists() and store.stats().corrupt == 1
    assert [e.key for e in store.entries()] == [key(99)]


_CHILD = r"""
import sys, pathlib
import kcache
s = kcache.Store(sys.argv[1])
e = s.get(sys.argv[2])
assert e is not None
assert isinstance(e.artifacts["cubin"], bytes) and isinstance(e.meta["blob"], bytes)
assert e.artifacts["cubin"].startswith(b"cposix")
print([m for m in ("pickle", "_pickle", "cloudpickle", "dill") if m in sys.modules])
"""


@pytest.mark.exec_children  # what a fresh interpreter imports
def test_pickle_payload_is_inert_bytes(store, tmp_path):
    marker = tmp_path / "pwned"
    payload = PICKLE_MARKER_PAYLOAD.format(marker=marker).encode()
    k = key(1)
    assert store.put(k, Entry({"cubin": payload}, {"blob": payload}))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(store.root), k], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert not marker.exists()
    # and a forged header whose meta is the pickle too
    k2 = key(2)
    _forge(store.root, k2, _header(k2, meta={"blob": payload}), GOOD_BODY)
    got = store.get(k2)
    assert got.meta == {"blob": payload} and not marker.exists()


# A hit-only process takes no lock until its exit flush, where filelock is imported. filelock
# 3.32 (the GPU image's) imports concurrent.futures.thread, whose threading exit hook cannot be
# registered once shutdown began: the store imports that module when it opens, so the flush
# still works ("at-exit"). A lock library whose own import registers such a hook cannot be
# helped: its counts are said to be lost, never silently ("hook").
_EXIT_CHILD = r"""
import importlib.abc, sys, threading

class LikeFilelock(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "filelock":
            if sys.argv[3] == "hook":
                threading._register_atexit(lambda: None)  # raises after shutdown began
            import concurrent.futures.thread  # noqa: F401  (what filelock 3.32 imports)
        return None

sys.meta_path.insert(0, LikeFilelock())
if sys.argv[3] == "early":
    import filelock  # noqa: F401
import kcache
assert kcache.Store(sys.argv[1]).get(sys.argv[2]) is not None
"""


@pytest.mark.parametrize("when", ["early", "at-exit", "hook"])
def test_counts_of_an_exit_flush_that_cannot_import_its_lock_are_said(store, when):
    k = key(1)
    assert store.put(k, entry(1))
    done = subprocess.run([sys.executable, "-c", _EXIT_CHILD, str(store.root), k, when],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    hits = Store(store.root).stats().hits
    if when != "hook":
        assert hits == 1 and "could not be written" not in done.stderr, done.stderr
    else:
        assert hits == 0, done.stderr
        assert "counters of this process (hits=1, seconds_saved=1) could not be written" in done.stderr
        assert "can't register atexit after shutdown" in done.stderr

"""Hostile bundles named as a read-only layer, in real processes (issue 36): every bundle that
``kcache import`` is tested against (tests/test_bundle_hostile.py), version-3 ones of their
own, and a layer truncated, rewritten or replaced while a process serves from it. Each gives
misses (or the layer refused) and one warning, never a traceback, never a crash or a SIGBUS,
in memory bounded by the file's size (peak RSS measured with ``wait4``)."""
import hashlib
import os
import random
import subprocess
import sys
import tempfile

import msgpack
import pytest

from kcache import Store
from kcache.tiers.bundle import v3
from kcache.tiers.bundle.v2 import write_bundle
from test_bundle_hostile import HOSTILE, MAX_RSS, MiB, SECRET, fill, zeros_zstd

zstandard = pytest.importorskip("zstandard")
pytestmark = pytest.mark.exec_children  # peak memory of a fresh interpreter

#: A program served from a layer: its gets, what they found, and exit 0 whatever the layer is.
_CHILD = """
import json, sys
from kcache import Store
keys = sys.argv[2:]
store = Store(sys.argv[1])
found = [store.get(k) is not None for k in keys]
print(json.dumps({"found": found, "misses": store.stats().misses}))
"""

# Run the program between the test and kcache (as test_bundle_hostile's launcher): the peak RSS
# recorded is the program's own.
_LAUNCHER = """
import os, subprocess, sys
proc = subprocess.Popen([sys.executable, "-c", sys.argv[2], *sys.argv[3:]])
_pid, status, usage = os.wait4(proc.pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def served(layer, keys, root, *, env=None):
    """(exit status, stdout, stderr, peak RSS bytes) of a program reading ``keys`` with the
    layer ``layer`` and the writable root ``root``."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    e.update({"KCACHE_READONLY_DIRS": str(layer)}, **(env or {}))
    report = tempfile.NamedTemporaryFile(prefix="kcache-rss-", delete=False)
    report.close()
    try:
        done = subprocess.run([sys.executable, "-c", _LAUNCHER, report.name, _CHILD, str(root), *keys],
                              env=e, capture_output=True, text=True, timeout=120)
        rss = int(open(report.name).read() or 0) * 1024
    finally:
        os.unlink(report.name)
    return done.returncode, done.stdout, done.stderr, rss


def v3_bytes(records, frames: bytes = b"", *, head: dict | None = None, index: bytes | None = None,
             flags: int = 0) -> bytes:
    """A version-3 bundle of ``records`` and ``frames`` with a valid checksum tag."""
    header = msgpack.packb(head if head is not None else {
        "format": "kcache-bundle", "version": 3, "entries": len(records), "digest": "sha256"})
    index = index if index is not None else msgpack.packb(records)
    body = v3.PREFIX.pack(b"KCACHEBN", 3, flags, len(header), len(index)) + header + index
    return body + hashlib.blake2b(body, digest_size=32).digest() + frames


def record(key, frame: bytes, size: int, *, zstd=True, offset=0, digest=bytes(32)):
    return {"key": key, "offset": offset, "length": len(frame), "size": size, "sha256": digest,
            "zstd": zstd}


KEY = "ab" * 32
V3_HOSTILE = {
    # name: (bytes maker, what the one warning says)
    "v3-index-of-2^62-bytes": (lambda: v3.PREFIX.pack(b"KCACHEBN", 3, 0, 10, 1 << 62) + bytes(100),
                               "is truncated or damaged"),
    "v3-index-not-an-array": (lambda: v3_bytes([], index=b"\x80"), "its index is not a msgpack array"),
    "v3-index-3000-deep": (lambda: v3_bytes([], index=b"\x91" * 3000), "not a msgpack record"),
    "v3-100001-records": (lambda: v3_bytes([], index=b"\xdd" + (100_001).to_bytes(4, "big")),
                          "holds more than 100000 records"),
    "v3-header-not-kcache": (lambda: v3_bytes([], head={"format": "x"}), "is not a kcache bundle header"),
    "v3-frame-outside-the-file": (lambda: v3_bytes([record(KEY, bytes(10), 10, zstd=False, offset=1 << 40)]),
                                  "its frame is not inside the bundle"),
    "v3-bad-checksum": (lambda: v3_bytes([])[:-1] + b"\0", "checksum does not match"),
    "v3-truncated-prefix": (lambda: v3_bytes([])[:12], "is truncated"),
    # a frame declaring 2^40 bytes, an index saying 100: refused before anything is allocated
    "v3-frame-declaring-2^40": (lambda: _frame_case(declared=1 << 40, size=100), "its frame declares"),
    # a zstd bomb: 64 MiB of zeros in a frame the index says is 64 MiB: more than 32 x its
    # frame + 16 MiB, refused with the index (never inflated)
    "v3-frame-bomb": (lambda: _frame_case(size=64 * MiB, bomb=True), "more than its frame can hold"),
    "v3-frame-garbage": (lambda: _frame_case(garbage=True, size=1000), "cannot be read"),
    # an index claiming 2^64-1 bytes of one small frame: refused with the index, so that `ls`
    # and `stats` never add up sizes no frame can hold (they said 16 EiB, JSON bytes > 2^64)
    "v3-size-2^64": (lambda: _frame_case(size=(1 << 64) - 1, plain=True), "more than its frame can hold"),
}


def _frame_case(*, size, declared=None, bomb=False, garbage=False, plain=False):
    if plain:
        frame = zstandard.ZstdCompressor().compress(bytes(100))
    elif bomb:
        frame = zeros_zstd(size)
    elif garbage:
        # (not os.urandom: a random frame header often declares a size, another warning)
        frame = b"\x28\xb5\x2f\xfd\x08" + random.Random(36).randbytes(199)  # a reserved bit set
    else:
        frame = zstandard.ZstdCompressor().compress(bytes(100))
        # rewrite the declared content size (1 byte field for 100) to an 8-byte one
        frame = frame[:4] + bytes([0xE0 | frame[4] & 0x1F]) + declared.to_bytes(8, "little") + frame[6:]
    return v3_bytes([record(KEY, frame, size)], frame)


@pytest.fixture(scope="module")
def hostile_layers(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile-layers")
    for name, (make, _why) in {**HOSTILE, **V3_HOSTILE}.items():
        (base / f"{name}.kcb").write_bytes(make())
        (base / f"{name}.kcb").chmod(0o644)
    return base


@pytest.mark.parametrize("secret", [False, True], ids=["no-secret", "secret"])
@pytest.mark.parametrize("name", list(HOSTILE) + list(V3_HOSTILE))
def test_hostile_bundle_as_a_layer_is_misses_and_one_warning(hostile_layers, tmp_path, name, secret):
    path = hostile_layers / f"{name}.kcb"
    env = {"KCACHE_SECRET": SECRET, "KCACHE_MAX_ENTRY_SIZE": "16M"} if secret else {
        "KCACHE_MAX_ENTRY_SIZE": "16M"}
    status, out, err, rss = served(path, [KEY, "cd" * 32], tmp_path / "root", env=env)
    assert status == 0 and "Traceback" not in err, (status, err)
    assert out.strip().endswith('{"found": [false, false], "misses": 2}'), out
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith((  # the layer refused, or that entry alone
        f"kcache: the read-only layer {path}", f"kcache: corrupt cache entry of {KEY} in {path} (")), err
    if not secret:
        assert HOSTILE.get(name, V3_HOSTILE.get(name))[1].split(" (")[0] in err, err
    elif not name.startswith(("v3-frame", "v3-truncated", "v3-index-of")):
        assert "is not signed, and a secret is set" in err or "version-1 bundle" in err, err
    assert rss <= MAX_RSS, f"{name}: peak {rss >> 20} MiB"
    assert not (tmp_path / "root").exists() or not list((tmp_path / "root").rglob("*.kce"))


def test_a_frame_longer_than_its_entry_is_refused_unread(tmp_path):
    """An index record of a 100-byte entry whose zstd frame is 1 GiB (a sparse file: 4 KiB on
    disk): the frame was read whole before anything was inflated, 1 GiB for an entry that the
    entry size limit allows 16 MiB of (an index naming a 1 TiB frame: the process killed for
    memory). Refused with the index, never read: as a layer and by ``kcache import``."""
    from test_bundle_hostile import measured
    path = tmp_path / "long-frame.kcb"
    path.write_bytes(v3_bytes([record(KEY, b"", 100) | {"length": 1 << 30}]))
    os.truncate(path, path.stat().st_size + (1 << 30))
    path.chmod(0o644)
    env = {"KCACHE_MAX_ENTRY_SIZE": "16M"}
    status, out, err, rss = served(path, [KEY], tmp_path / "root", env=env)
    assert status == 0 and "Traceback" not in err, err
    assert rss <= MAX_RSS, f"peak {rss >> 20} MiB"
    assert out.strip().endswith('{"found": [false], "misses": 1}'), out
    assert err.count("\n") == 1 and "is longer than its entry" in err, err
    status, _out, err, rss, _s = measured(["import", path, "--into", tmp_path / "dst"], env=env)
    assert status == 1 and "Traceback" not in err, err
    assert rss <= MAX_RSS, f"peak {rss >> 20} MiB"
    assert "is longer than its entry" in err, err


# -- a layer that changes while a process serves from it -----------------------------------------

_SERVING = """
import json, os, sys
from kcache import Store
keys = sys.argv[2:]
store = Store(sys.argv[1])
first = store.get(keys[0]) is not None
os.write(1, b"ready\\n")
sys.stdin.buffer.read(1)  # the parent changes the layer, then closes the pipe
rest = [store.get(k) is not None for k in keys]
print(json.dumps({"first": first, "rest": rest}), flush=True)
"""


def serving(layer, keys, root, change):
    """A process serves ``keys[0]`` from ``layer``, ``change()`` runs, then it reads every
    key: (exit status, its report, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env["KCACHE_READONLY_DIRS"] = str(layer)
    proc = subprocess.Popen([sys.executable, "-c", _SERVING, str(root), *keys], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    change()
    out, err = proc.communicate(b"", timeout=120)
    import json
    return proc.returncode, json.loads(out.decode().strip().splitlines()[-1]), err.decode()


@pytest.fixture
def layer_file(tmp_path):
    keys = fill(tmp_path / "src", 20)
    store = Store(tmp_path / "src")
    path = tmp_path / "layer.kcb"
    write_bundle(path, [({"key": k}, store.entry_bytes(k)) for k in keys], version=3, compress=False)
    path.chmod(0o644)
    return path, keys


def test_a_layer_truncated_while_open_gives_misses_and_one_warning(layer_file, tmp_path):
    path, keys = layer_file
    status, report, err = serving(path, keys, tmp_path / "root", lambda: os.truncate(path, 300))
    assert status == 0 and "Traceback" not in err, err
    assert report == {"first": True, "rest": [False] * len(keys)}
    assert err.count("\n") == 1 and f"the read-only layer {path} changed while in use" in err, err


def test_a_layer_rewritten_in_place_gives_misses_and_one_warning(layer_file, tmp_path):
    path, keys = layer_file
    size = path.stat().st_size

    def rewrite():
        with open(path, "r+b") as f:  # same size, other bytes
            f.write(os.urandom(size))

    status, report, err = serving(path, keys, tmp_path / "root", rewrite)
    assert status == 0 and "Traceback" not in err, err
    assert report["first"] and not any(report["rest"])
    assert err.count("\n") == 1 and "changed while in use" in err, err


def test_a_layer_replaced_while_open_keeps_serving_what_was_opened(layer_file, tmp_path):
    """A rename over the layer's path (how an image or a deploy replaces a file) leaves the
    open file as it was: the process serves what it checked; the next process opens the new
    file (here garbage: refused, one warning)."""
    path, keys = layer_file

    def replace():
        other = tmp_path / "other.kcb"
        other.write_bytes(os.urandom(4096))
        os.replace(other, path)

    status, report, err = serving(path, keys, tmp_path / "root", replace)
    assert status == 0 and err == "", err
    assert report == {"first": True, "rest": [True] * len(keys)}
    status, out, err, _rss = served(path, keys[:1], tmp_path / "root")
    assert status == 0 and '"found": [false]' in out and err.count("\n") == 1, err
    assert not list((tmp_path / "root").rglob("*.kce"))


# -- a signed layer rewritten in place by someone without the secret -------------------------------

_TWICE = """
import os, sys
from kcache import Store
store, key = Store(sys.argv[1]), sys.argv[2]
print(store.get(key).artifacts["cubin"][:1].decode(), flush=True)
sys.stdin.buffer.read(1)  # the parent rewrites the layer, then closes the pipe
again = store.get(key)
print("miss" if again is None else again.artifacts["cubin"][:1].decode(), flush=True)
"""


def _same_size_entries(tmp_path):
    """(key, its entry's bytes, a forged entry of that key of the same length: other cubin)."""
    from kcache import Entry, make_key
    key = make_key({"rewritten": 1})
    meta = {"kernel": "m:k", "signature": "(float32,)", "arch": "sm_90"}
    Store(tmp_path / "good").put(key, Entry({"cubin": b"A" * 3000}, meta))
    Store(tmp_path / "forged").put(key, Entry({"cubin": b"B" * 3000}, meta))
    good, forged = (Store(tmp_path / n).entry_bytes(key) for n in ("good", "forged"))
    assert len(good) == len(forged) and good != forged
    return key, good, forged


def test_a_signed_layer_rewritten_in_place_with_its_times_restored_serves_no_forged_entry(tmp_path):
    """Whoever can write the file but lacks the secret rewrites an entry's frame in place with
    another entry of that key (same length) after the process checked it, and puts the file's
    mtime back: the process never serves the forged entry (one warning, no traceback)."""
    key, good, forged = _same_size_entries(tmp_path)
    path = tmp_path / "signed.kcb"
    write_bundle(path, [({"key": key}, good)], version=3, compress=False, secret=SECRET.encode())
    path.chmod(0o644)
    at = path.read_bytes().index(good)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env.update(KCACHE_READONLY_DIRS=str(path), KCACHE_SECRET=SECRET)
    proc = subprocess.Popen([sys.executable, "-c", _TWICE, str(tmp_path / "root"), key], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b"A\n"
    before = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(forged)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == before.st_mtime_ns
    out, err = proc.communicate(b"", timeout=120)
    assert proc.returncode == 0 and "Traceback" not in err.decode(), err
    assert out == b"miss\n", (out, err)  # the forged one would say B
    assert err.decode().count("\n") == 1 and str(path) in err.decode(), err


def test_a_signed_layer_checks_every_serve_against_its_signed_index(tmp_path, monkeypatch):
    """A rewrite that the fstat before a read cannot see (between it and the read, or within
    the file system's timestamp granularity): the bytes of a signed layer are still compared
    with the signed index's digest on every serve, not only the first."""
    from kcache.warn import KcacheWarning
    key, good, forged = _same_size_entries(tmp_path)
    path = tmp_path / "signed.kcb"
    write_bundle(path, [({"key": key}, good)], version=3, compress=False, secret=SECRET.encode())
    path.chmod(0o644)
    at = path.read_bytes().index(good)
    monkeypatch.setenv("KCACHE_SECRET", SECRET)
    store = Store(tmp_path / "root", readonly_dirs=[path])
    assert store.get(key).artifacts["cubin"] == b"A" * 3000
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(forged)
    store.layers[0]._st = os.stat(path)  # a change the fstat compared before each read misses
    with pytest.warns(KcacheWarning, match="differs from the bundle's index"):
        assert store.get(key) is None


# -- a layer path that is no bundle file: refused with one warning, never waited on ---------------

@pytest.mark.parametrize("kind", ["fifo", "device", "other-owner"])
def test_a_layer_that_is_no_regular_file_of_ours_is_refused_with_one_warning(tmp_path, kind, layer_file):
    """A FIFO (its open must not block), a device, a bundle owned by another user: one
    warning naming it and what is accepted, misses, the program runs on."""
    path, keys = layer_file
    if kind == "fifo":
        bad, why = tmp_path / "fifo.kcb", "is not a regular file"
        os.mkfifo(bad)
    elif kind == "device":
        bad, why = "/dev/null", "is not a regular file"
    else:
        if os.geteuid() != 0:
            pytest.skip("chown to another user needs root")
        bad, why = path, "is owned by another user"
        os.chown(path, 54321, 54321)
    status, out, err, _rss = served(bad, keys[:2], tmp_path / "root")
    assert status == 0 and "Traceback" not in err, err
    assert out.strip().endswith('{"found": [false, false], "misses": 2}'), out
    assert err.count("\n") == 1 and f"read-only layer {bad} is not trusted" in err and why in err \
        and "accepted: a bundle file written by 'kcache export'" in err, err

"""A bundle file named as a read-only layer (issue 36): bundle format version 3 written and read,
entries served in place (nothing unpacked, nothing written into the layer or backfilled into
the root), opened once and lazily, old formats served from memory, the secret, the trust
checks of a layer, and what ``kcache export``/``ls``/``stats`` say about it."""
import json
import os
import subprocess
import sys

import pytest

from kcache import Entry, Store, make_key, warn
from kcache.tiers.bundle import v3
from kcache.tiers.bundle.layer import BundleLayer
from kcache.tiers.bundle.v2 import BundleTier, write_bundle
from kcache.warn import KcacheWarning

SECRET = "bundle layer test secret 0123456789"


def fill(root, n, size=3000):
    store = Store(root)
    keys = [make_key({"layer": i}) for i in range(n)]
    for i, k in enumerate(keys):
        store.put(k, Entry({"cubin": bytes([i % 256]) * size + i.to_bytes(4, "big")},
                           {"kernel": f"pkg.mod:k{i}", "signature": "(float32,)", "arch": "sm_90"}))
    return keys


def items(root, keys):
    store = Store(root)
    return [({"key": k, "kernel": "pkg.mod:k", "arch": "sm_90"}, store.entry_bytes(k)) for k in keys]


@pytest.fixture
def src(tmp_path):
    return tmp_path / "src", fill(tmp_path / "src", 12)


def kce_files(root):
    return sorted(p.name for p in root.rglob("*.kce"))


@pytest.mark.parametrize("version,compress", [(3, True), (3, False), (2, True), (2, False)])
def test_a_bundle_layer_serves_every_entry_and_writes_nothing(src, tmp_path, version, compress):
    root, keys = src
    path = tmp_path / "b.kcb"
    rep = write_bundle(path, items(root, keys), compress=compress, version=version)
    assert rep.version == version
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    store = Store(tmp_path / "dst", readonly_dirs=[path])
    assert isinstance(store.layers[0], BundleLayer) and not store.layers[0]._opened  # lazy
    for k in keys:
        assert store.get(k).artifacts == Store(root).get(k).artifacts
    assert store.get("ab" * 32) is None
    assert store.layers[0].version == version
    assert store.stats().hits == len(keys) and store.stats().misses == 1
    assert kce_files(tmp_path / "dst") == []  # a layer hit is not backfilled into the root
    new = make_key({"new": 1})
    assert store.put(new, Entry({"cubin": b"x" * 100}, {"kernel": "m:n", "arch": "sm_90"}))
    assert kce_files(tmp_path / "dst") == [f"{new}.kce"]  # new entries go to the root
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before  # never written
    assert [e.key for e in store.entries() if e.readonly] == sorted(keys)


def test_version_3_is_an_index_and_a_frame_per_entry(src, tmp_path):
    root, keys = src
    path = tmp_path / "b.kcb"
    write_bundle(path, items(root, keys), version=3)
    raw = path.read_bytes()
    magic, version, flags, hlen, ilen = v3.PREFIX.unpack(raw[:v3.PREFIX.size])
    assert (magic, version, flags) == (b"KCACHEBN", 3, 2)
    fd = os.open(path, os.O_RDONLY)
    try:
        index = v3.open_index(path, fd, len(raw), None)
        assert sorted(index.entries) == sorted(keys) and not index.refused
        for k in keys:  # each frame alone: one read, decompressed, its digest checked
            offset, length, size, digest, packed = index.entries[k]
            assert packed and length < size
            assert v3.read_entry(index, k, 1 << 20) == Store(root).entry_bytes(k)
        with pytest.raises(Exception, match="too large"):
            v3.read_entry(index, keys[0], 100)
    finally:
        os.close(fd)
    # import reads version 3 as it reads 1 and 2
    with BundleTier(path, max_entry_size=1 << 20) as tier:
        assert tier.version == 3 and sorted(tier.keys()) == sorted(keys)
        assert Store(tmp_path / "imp").copy_in(tier).copied


def test_a_miss_in_a_bundle_layer_reads_nothing(src, tmp_path, monkeypatch):
    root, keys = src
    path = tmp_path / "b.kcb"
    write_bundle(path, items(root, keys), version=3)
    store = Store(tmp_path / "dst", readonly_dirs=[path])
    assert store.get(keys[0]) is not None  # opened
    reads = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda *a: reads.append(a) or real(*a))
    for i in range(50):
        assert store.get(make_key({"absent": i})) is None
    assert reads == []
    assert store.get(keys[1]) is not None and len(reads) == 1  # a hit: one positioned read


def test_a_first_serve_hashes_each_byte_of_an_entry_once(src, tmp_path, monkeypatch):
    # The index's SHA-256, compared on the first serve, establishes the bytes are undamaged:
    # the entry's own checksums (BLAKE2b-256, the artifacts' SHA-256) are not computed again
    # (schema and artifacts are checked as ever). A later serve, unchecked against the index
    # (unsigned), is checked by those sums.
    import hashlib
    from kcache.store.verified import VERIFIED
    root, keys = src
    path = tmp_path / "b.kcb"
    write_bundle(path, items(root, keys), version=3)
    store = Store(tmp_path / "dst", readonly_dirs=[path])
    hashed: list = []
    for name in ("sha256", "blake2b"):
        real = getattr(hashlib, name)
        monkeypatch.setattr(hashlib, name, lambda data=b"", *a, _real=real, **k:
                            hashed.append(len(data)) or _real(data, *a, **k))
    size, want = len(Store(root).entry_bytes(keys[0])), Store(root).get(keys[0]).artifacts
    VERIFIED.clear()  # this process verified these bytes above: their verdict is remembered
    hashed.clear()
    assert store.get(keys[0]).artifacts == want
    assert sum(n for n in hashed if n > 1000) == size  # once: the index's digest
    # a verdict without the entry's own sums is not remembered for other reads of the key
    assert keys[0] not in VERIFIED._noted and keys[0] not in VERIFIED._kept
    hashed.clear()
    assert store.get(keys[0]) is not None
    assert 3000 <= sum(n for n in hashed if n > 1000) < size  # the cubin's own sum


def test_a_refused_layer_says_what_is_accepted_once(src, tmp_path):
    root, keys = src
    path = tmp_path / "b.kcb"
    write_bundle(path, items(root, keys), version=3)
    with open(path, "r+b") as f:  # its index no longer fits: refused when opened
        f.truncate(200)
    warn.reset()
    with pytest.warns(KcacheWarning) as caught:
        assert Store(tmp_path / "dst", readonly_dirs=[path]).get(keys[0]) is None
    [line] = [str(w.message) for w in caught if "is not used" in str(w.message)]
    assert "truncated or damaged" in line and line.count("accepted:") == 1, line


def test_signed_bundle_layer_and_the_secret(src, tmp_path, monkeypatch):
    root, keys = src
    signed, unsigned = tmp_path / "s.kcb", tmp_path / "u.kcb"
    write_bundle(signed, items(root, keys), secret=SECRET.encode(), version=3)
    write_bundle(unsigned, items(root, keys), version=3)
    monkeypatch.setenv("KCACHE_SECRET", SECRET)
    assert Store(tmp_path / "a", readonly_dirs=[signed]).get(keys[0]) is not None
    store = Store(tmp_path / "b", readonly_dirs=[unsigned])
    with pytest.warns(KcacheWarning, match=f"layer {unsigned} is not used: {unsigned} is not "
                      "signed, and a secret is set: refused"):
        assert store.get(keys[0]) is None
    monkeypatch.setenv("KCACHE_SECRET", "another secret, long enough 0123")
    store = Store(tmp_path / "c", readonly_dirs=[signed])
    with pytest.warns(KcacheWarning, match="has a wrong signature for this secret"):
        assert store.get(keys[0]) is None
    monkeypatch.delenv("KCACHE_SECRET")  # no secret: a signed bundle is served, each entry checked
    assert Store(tmp_path / "d", readonly_dirs=[signed]).get(keys[0]) is not None


def test_a_layer_that_can_serve_nothing_is_said_once(src, tmp_path):
    """The folder of a bundle named instead of the file, and a symlink to nothing, would
    serve nothing without a word: each is warned once, naming it; a cache folder is not."""
    root, keys = src
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    write_bundle(bundles / "app.kcb", items(root, keys), version=3)
    dangling = tmp_path / "gone"
    dangling.symlink_to(tmp_path / "nowhere")
    warn.reset()
    with pytest.warns(KcacheWarning) as caught:
        store = Store(tmp_path / "dst", readonly_dirs=[bundles, dangling, root])
        assert store.get(keys[0]) is not None  # the cache folder serves
        assert store.get(keys[0]) is not None
    said = [str(w.message) for w in caught]
    [folder] = [m for m in said if str(bundles) in m]
    assert "without kcache entries" in folder and "named itself" in folder, folder
    [link] = [m for m in said if str(dangling) in m]
    assert "does not exist" in link, link
    assert not [m for m in said if f"layer {root} " in m], said


def test_a_bundle_layer_passes_a_layers_trust_checks(src, tmp_path):
    root, keys = src
    path = tmp_path / "b.kcb"
    write_bundle(path, items(root, keys), version=3)
    link = tmp_path / "link.kcb"
    link.symlink_to(path)
    path.chmod(0o644)
    for bad, mode, why in [(link, None, "is a symlink"),
                           (path, 0o666, "writable by every user \\(mode 666\\)"),
                           (path, 0o646, "writable by every user \\(mode 646\\)")]:
        if mode is not None:
            path.chmod(mode)
        warn.reset()  # each case warns once in its own process
        with pytest.warns(KcacheWarning, match=f"read-only layer {bad} is not trusted and not used: "
                          f".*{why}.*accepted: a bundle file written by 'kcache export'"):
            store = Store(tmp_path / "dst", readonly_dirs=[bad])
        assert store.get(keys[0]) is None and store.untrusted
        path.chmod(0o644)
    assert Store(tmp_path / "dst", readonly_dirs=[path]).get(keys[0]) is not None


def test_an_entry_that_differs_from_its_digest_is_a_miss_of_that_key_alone(src, tmp_path):
    root, keys = src
    path = tmp_path / "b.kcb"
    write_bundle(path, items(root, keys), version=3, compress=False)
    store = Store(tmp_path / "dst", readonly_dirs=[path])
    layer = store.layers[0]
    assert layer._open()
    offset, length, *_ = layer._index.entries[keys[3]]
    with open(path, "r+b") as f:  # a bit flipped in one frame, before the process reads it
        f.seek(offset + length // 2)
        byte = f.read(1)
        f.seek(offset + length // 2)
        f.write(bytes([byte[0] ^ 1]))
    layer._st = os.stat(path)  # as if the file had been opened after the change
    with pytest.warns(KcacheWarning, match=f"corrupt cache entry of {keys[3]} in {path}.*differs "
                      "from the bundle's index"):
        assert store.get(keys[3]) is None
    assert store.get(keys[3]) is None  # remembered: not read, not counted again
    assert store.stats().corrupt == 1
    assert all(store.get(k) is not None for k in keys if k != keys[3])


def _cli(*args, env=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "kcache", *map(str, args)], env=e,
                          capture_output=True, text=True, timeout=120)


def test_export_says_which_version_and_ls_stats_list_the_layer(src, tmp_path):
    root, keys = src
    path = tmp_path / "k.kcb"
    done = _cli("--dir", root, "--json", "export", path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["format_version"] == 3
    done = _cli("--dir", root, "export", tmp_path / "old.kcb", "--format", "2")
    assert done.returncode == 0 and "bundle format 2, zstd, unsigned)" in done.stderr, done.stderr
    assert BundleTier(tmp_path / "old.kcb", max_entry_size=1 << 20).version == 2
    env = {"KCACHE_DIR": str(tmp_path / "run"), "KCACHE_READONLY_DIRS": str(path)}
    done = _cli("--json", "ls", env=env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert {(e["layer"], e["layer_kind"], e["readonly"]) for e in doc["entries"]} == {
        (str(path), "bundle", True)}
    assert sorted(e["key"] for e in doc["entries"]) == sorted(keys)
    layer = {"path": str(path), "kind": "bundle", "format_version": 3, "entries": len(keys),
             "bytes": sum(len(d) for _r, d in items(root, keys)), "signed": False, "problem": None}
    assert doc["layers"] == [layer]
    done = _cli("ls", env=env)
    assert f"kcache: 12 of them from the read-only layer {path} (bundle format 3, 12 entries)" \
        in done.stderr, done.stderr
    done = _cli("--json", "stats", env=env)
    assert json.loads(done.stdout)["layers"] == [layer]
    done = _cli("stats", env=env)  # piped: name<TAB>value lines
    assert f"layer\t{path} (bundle format 3: 12 entries, " in done.stdout, done.stdout
    # the writable root is untouched by all of it
    assert kce_files(tmp_path / "run") == []


def test_verify_fix_leaves_a_bad_bundle_layer_entry_and_says_so(src, tmp_path):
    """``kcache verify --fix`` cannot quarantine an entry of a bundle layer (nothing is written
    into a layer): it says so, with the entry's key, and exits 1 while it remains."""
    root, keys = src
    path = tmp_path / "b.kcb"
    write_bundle(path, items(root, keys), compress=False, version=3)
    raw = bytearray(path.read_bytes())
    raw[-100] ^= 1  # a bit of the last frame
    path.write_bytes(bytes(raw))
    path.chmod(0o644)
    env = {"KCACHE_DIR": str(tmp_path / "run"), "KCACHE_READONLY_DIRS": str(path)}
    for fix in ([], ["--fix"]):
        done = _cli("--json", "verify", *fix, env=env)
        assert done.returncode == 1, (fix, done.stdout, done.stderr)
        doc = json.loads(done.stdout)
        (bad,) = doc["bad"]
        assert not doc["ok"] and bad["quarantined"] is False, doc
        assert bad["key"] in keys and bad["path"] == f"{path}#{bad['key']}", bad
        assert bad["reason"] == (f"in the read-only layer {path}" if fix else None), bad
    done = _cli("verify", "--fix", env=env)
    assert done.returncode == 1 and "1 bad, 0 quarantined, 1 left in place" in done.stderr, done.stderr
    assert "never changes a read-only layer" in done.stderr
    done = _cli("verify", env=env)  # not offered --fix, which could not move it
    assert "run 'kcache verify --fix'" not in done.stderr, done.stderr
    assert path.read_bytes() == bytes(raw)


def test_importing_a_bundle_that_is_also_a_layer_says_the_layer_serves_it(src, tmp_path):
    root, keys = src
    path = tmp_path / "b.kcb"
    assert _cli("--dir", root, "export", path).returncode == 0
    env = {"KCACHE_READONLY_DIRS": str(path)}
    done = _cli("--dir", tmp_path / "run", "import", path, env=env)
    assert done.returncode == 0, done.stderr
    assert "imported 0 entries" in done.stderr and \
        "12 already there (12 served by read-only layers, not copied)" in done.stderr, done.stderr
    done = _cli("--dir", tmp_path / "other", "import", path)  # no layer: copied
    assert "imported 12 entries" in done.stderr and "already there" not in done.stderr


def test_an_entry_that_compresses_beyond_the_readers_bound_is_exported_stored(tmp_path):
    """An entry of 17 MiB of zeros compresses to a frame far smaller than 1/32 of it: the
    reader refuses such a frame (over 32 x its size + 16 MiB: a zstd bomb), so the writer
    stores that entry as it is, and the bundle serves it (it was written unservable)."""
    key = make_key({"zeros": 17})
    Store(tmp_path / "src").put(key, Entry({"blob": bytes(17 << 20)}, {"kernel": "m:z"}))
    path = tmp_path / "z.kcb"
    write_bundle(path, items(tmp_path / "src", [key]), version=3, compress=True)
    path.chmod(0o644)
    fd = os.open(path, os.O_RDONLY)
    try:
        index = v3.open_index(path, fd, path.stat().st_size, None)
    finally:
        os.close(fd)
    assert not index.refused and index.entries[key][4] is False  # stored, not zstd
    store = Store(tmp_path / "dst", readonly_dirs=[path])
    assert store.get(key).artifacts["blob"] == bytes(17 << 20)


def test_ls_shows_a_layer_entrys_hits_and_no_use_time(src, tmp_path):
    # A layer's hits are recorded in the writable root's counters: ls shows them; its entry
    # files are never touched, so a terminal shows no "Last used" made up from their time.
    import re
    import ptykit
    root, keys = src
    path = tmp_path / "k.kcb"
    assert _cli("--dir", root, "export", path).returncode == 0
    run = tmp_path / "run"
    store = Store(run, readonly_dirs=[path])
    for _ in range(3):
        assert store.get(keys[0]) is not None
    store.flush()
    env = {"KCACHE_DIR": str(run), "KCACHE_READONLY_DIRS": str(path)}
    doc = json.loads(_cli("--json", "ls", env=env).stdout)
    assert {e["key"]: e["hits"] for e in doc["entries"]}[keys[0]] == 3
    master, slave = ptykit.open_terminal(200)
    e = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    proc = subprocess.Popen([sys.executable, "-m", "kcache", "ls", "--wide"], stdin=slave,
                            stdout=slave, stderr=slave, env=dict(e, COLUMNS="200", **env))
    os.close(slave)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", ptykit.drain(master).decode())
    assert proc.wait(timeout=60) == 0
    [row] = [line for line in shown.splitlines() if line.startswith(keys[0][:12])]
    assert " 3 " in row and "ago" not in row and " - " in row, row


def test_piped_ls_tells_a_layers_row_from_the_roots_for_one_key(src, tmp_path):
    # A key in the writable root and in a layer is two entries: piped, a `layer` column
    # (last) says which row is the layer's; a root without layers lists as it always did.
    root, keys = src
    path = tmp_path / "k.kcb"
    assert _cli("--dir", root, "export", path).returncode == 0
    plain = _cli("ls", env={"KCACHE_DIR": str(root)}).stdout.splitlines()
    assert plain[0].split("\t")[-1] == "compile_seconds"
    lines = _cli("ls", env={"KCACHE_DIR": str(root),
                            "KCACHE_READONLY_DIRS": str(path)}).stdout.splitlines()
    header = lines[0].split("\t")
    assert header[-1] == "layer" and header[:-1] == plain[0].split("\t")
    rows = [line.split("\t") for line in lines[1:] if line.startswith(keys[0][:12])]
    assert sorted(r[-1] for r in rows) == ["", str(path)]


def test_rm_of_a_layer_entry_names_the_bundle_it_is_in(src, tmp_path):
    # rm cannot remove what a read-only layer serves: the line names the layer as what it is
    # (it said "in the read-only dir <bundle file>").
    root, keys = src
    path = tmp_path / "k.kcb"
    assert _cli("--dir", root, "export", path).returncode == 0
    done = _cli("rm", keys[0][:12], env={"KCACHE_DIR": str(tmp_path / "run"),
                                         "KCACHE_READONLY_DIRS": str(path)})
    assert done.returncode == 1
    assert f"{keys[0][:12]}: in the read-only bundle {path}" in done.stderr, done.stderr


def test_stats_on_an_80_column_terminal_keeps_the_layers_name_and_what_it_holds(src, tmp_path):
    import re
    import ptykit
    root, keys = src
    folder = tmp_path / ("a-long-folder-name-" * 3)
    folder.mkdir()
    path = folder / "kernels-of-the-image.kcb"
    assert _cli("--dir", root, "export", path).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env.update(COLUMNS="80", KCACHE_DIR=str(tmp_path / "run"), KCACHE_READONLY_DIRS=str(path))
    for args in (["stats"], ["stats", "--short"]):
        master, slave = ptykit.open_terminal(80)
        proc = subprocess.Popen([sys.executable, "-m", "kcache", *args], stdin=slave,
                                stdout=slave, stderr=slave, env=env)
        os.close(slave)
        shown = re.sub(r"\x1b\[[0-9;]*m", "", ptykit.drain(master).decode()).splitlines()
        assert proc.wait(timeout=60) == 0
        table = [line for line in shown if not line.startswith("kcache: ")]
        assert all(len(line.rstrip()) <= 80 for line in table), shown
        assert any("bundle format 3: 12 entries, " in line for line in shown), shown
        if args == ["stats"]:  # the path cut in its middle, its file name kept
            assert any(line.startswith("read-only layer") and
                       line.rstrip().endswith("kernels-of-the-image.kcb") for line in shown), shown


def test_a_named_root_not_made_yet_beside_a_layer_is_said_by_what_reports_on_the_root(src, tmp_path):
    root, keys = src
    path = tmp_path / "k.kcb"
    assert _cli("--dir", root, "export", path).returncode == 0
    env = {"KCACHE_DIR": str(tmp_path / "nope"), "KCACHE_READONLY_DIRS": str(path)}
    said = f"the cache root {tmp_path / 'nope'} (from KCACHE_DIR) does not exist yet"
    for args in (["clear", "--yes"], ["stats"], ["prune", "--dry-run"]):
        done = _cli(*args, env=env)
        assert done.returncode == 0 and said in done.stderr, (args, done.stderr)
    done = _cli("ls", env=env)  # the layer's entries are what it lists
    assert done.returncode == 0 and said not in done.stderr and keys[0][:12] in done.stdout
    assert not (tmp_path / "nope").exists()


# A program that makes a store per call (as compile_for does for a kernel of no kcache
# dispatcher), under a limit of 128 open files.
_STORE_PER_CALL = """
import gc, json, os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from kcache import Store
root, key = sys.argv[1], sys.argv[2]
before = len(os.listdir("/proc/self/fd"))
hits = 0
for _ in range(150):
    store = Store(root)
    hits += store.get(key) is not None
    store.flush()
    del store
    gc.collect()
open(os.devnull).close()  # the program's own files still open
print(json.dumps({"hits": hits, "more_fds": len(os.listdir("/proc/self/fd")) - before}))
"""


def test_a_dropped_store_closes_its_bundle_layers(src, tmp_path):
    """Each store opened its bundle layers on its first read and never closed them: a
    descriptor per store of a version-3 bundle, two of a version-2 one (its inflated copy in
    memory too, a memfd), so 150 stores made call by call ran the program out of descriptors
    (EMFILE in its own opens) and kept 150 copies of the bundle in memory. A store that is
    collected closes them."""
    root, keys = src
    layers = []
    for version in (2, 3):
        layers.append(tmp_path / f"v{version}.kcb")
        write_bundle(layers[-1], items(root, keys[:1 if version == 2 else None]), version=version)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env["KCACHE_READONLY_DIRS"] = os.pathsep.join(map(str, layers))
    done = subprocess.run([sys.executable, "-c", _STORE_PER_CALL, str(tmp_path / "dst"), keys[1]],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["hits"] == 150 and report["more_fds"] <= 5, report

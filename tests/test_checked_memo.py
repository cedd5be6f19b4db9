"""Entries checked by an earlier process are remembered in the writable root
(kcache.store.checked): a later process's hit of the same bytes skips the schema and artifact
checks, and only then. Every case runs real processes on real files: one that hits (and
writes the memo at exit), then one that counts the checks it makes."""
import json
import os
import subprocess
import sys
import textwrap

import msgpack
import pytest

from kcache import Entry, Store, make_key
from kcache.disk.layout import CODE
from kcache.store import checked
from kcache.tiers.bundle.v2 import write_bundle

# A process that gets KEYS from the store at ROOT (layers in LAYERS) and says, per key,
# whether it was served, and how many header schema and artifact checks it made.
CHILD = textwrap.dedent("""
    import json, os, sys
    from kcache import Store
    from kcache.entry import artifacts, format as fmt
    calls = {"schema": 0, "artifacts": 0}
    real_header, real_problem = fmt.check_header, artifacts.problem
    def header(*a, **k):
        calls["schema"] += 1
        return real_header(*a, **k)
    def problem(*a, **k):
        calls["artifacts"] += 1
        return real_problem(*a, **k)
    fmt.check_header, artifacts.problem = header, problem
    layers = [p for p in os.environ.get("LAYERS", "").split(os.pathsep) if p]
    store = Store(os.environ["ROOT"], readonly_dirs=layers)
    got = {k: store.get(k) for k in json.loads(os.environ["KEYS"])}
    print(json.dumps({"served": {k: e is not None and e.artifacts["cubin"].hex()
                                 for k, e in got.items()},
                      "corrupt": store.stats().corrupt, **calls}))
""")


def run(root, keys, layers=()) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env.update(ROOT=str(root), KEYS=json.dumps(keys), LAYERS=os.pathsep.join(map(str, layers)))
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def fill(root, n=3, salt=0):
    store = Store(root)
    keys = [make_key({"checked": i}) for i in range(n)]
    for i, k in enumerate(keys):
        store.put(k, Entry({"cubin": bytes([i + salt]) * 2000}, {"kernel": f"m:k{i}",
                                                                 "arch": "sm_90"}))
    return keys


def memo_files(root):
    folder = root / CODE
    return sorted(folder.iterdir()) if folder.is_dir() else []


def test_a_later_process_skips_the_checks_of_bytes_checked_before(tmp_path):
    root = tmp_path / "cache"
    keys = fill(root)
    first = run(root, keys)
    assert first["schema"] >= len(keys) and first["artifacts"] == len(keys)
    assert len(memo_files(root)) == 1
    second = run(root, keys)
    assert second["served"] == first["served"] and all(second["served"].values())
    assert second["schema"] == 0 and second["artifacts"] == 0
    before = memo_files(root)[0].stat().st_mtime_ns
    run(root, keys)  # nothing new checked: the file is not written again
    assert memo_files(root)[0].stat().st_mtime_ns == before


def test_a_bundle_layer_entry_checked_before_is_not_checked_again(tmp_path):
    src = tmp_path / "src"
    keys = fill(src)
    store = Store(src)
    layer = tmp_path / "b.kcb"
    write_bundle(layer, [({"key": k}, store.entry_bytes(k)) for k in keys], version=3)
    root = tmp_path / "cache"
    first = run(root, keys, [layer])
    assert first["artifacts"] == len(keys) and all(first["served"].values())
    # that process's counts made the root, after the memo's turn at exit: the next one
    # writes it (the memo never makes a root)
    assert not memo_files(root) and run(root, keys, [layer])["artifacts"] == len(keys)
    second = run(root, keys, [layer])
    assert second["served"] == first["served"]
    assert second["schema"] == 0 and second["artifacts"] == 0
    assert not list((tmp_path).glob("b.kcb*/**"))  # nothing written beside or into the layer


def test_other_bytes_under_the_same_key_are_checked_again(tmp_path):
    root = tmp_path / "cache"
    keys = fill(root)
    run(root, keys)
    Store(root).put(keys[0], Entry({"cubin": b"\x09" * 2000}, {"kernel": "m:k0", "arch": "sm_90"}))
    again = run(root, keys)
    assert again["served"][keys[0]] == "09" * 2000
    assert again["schema"] >= 1 and again["artifacts"] == 1  # only the new bytes


def test_a_header_changed_behind_its_stated_sum_is_refused(tmp_path):
    # The memo holds the digest of the header's stated BLAKE2b-128: bytes that state the same
    # sum but whose header differs fail the sum, and go through every check (corrupt).
    root = tmp_path / "cache"
    keys = fill(root, 1)
    run(root, keys)
    path = Store(root).layout.entry(keys[0])
    data = bytearray(path.read_bytes())
    at = data.find(b"m:k0")
    data[at:at + 4] = b"m:kX"
    path.write_bytes(bytes(data))
    res = run(root, keys)
    assert res["served"][keys[0]] is False and res["corrupt"] == 1


def test_a_memo_is_never_read_from_a_layer(tmp_path):
    # A layer (a directory) holding a memo file that names its entries: its entries are
    # checked all the same, as the memo of the writable root is empty.
    layer = tmp_path / "layer"
    keys = fill(layer)
    run(layer, keys)  # the layer's own memo written, as if planted
    assert len(memo_files(layer)) == 1
    res = run(tmp_path / "cache", keys, [layer])
    assert all(res["served"].values()) and res["artifacts"] == len(keys)


@pytest.mark.parametrize("content", [b"not msgpack", msgpack.packb({"tag": "x", "digests": b""}),
                                     msgpack.packb({"tag": None, "digests": b"\0" * 15})])
def test_a_damaged_or_foreign_memo_is_an_empty_one(tmp_path, content):
    root = tmp_path / "cache"
    keys = fill(root)
    run(root, keys)
    [path] = memo_files(root)
    path.write_bytes(content)
    res = run(root, keys)
    assert all(res["served"].values()) and res["artifacts"] == len(keys)


def test_a_symlinked_memo_is_not_followed(tmp_path):
    root = tmp_path / "cache"
    keys = fill(root)
    run(root, keys)
    [path] = memo_files(root)
    outside = tmp_path / "outside.msgpack"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)
    res = run(root, keys)
    assert res["artifacts"] == len(keys)  # checked: the link is not read
    assert path.is_symlink() or path.exists()


def test_the_file_keeps_the_newest_digests(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    fill(root, 1)  # the root exists
    monkeypatch.setattr(checked, "MAX_KEPT", 4)
    for batch in ([0, 1, 2], [3, 4]):  # two processes' digests, the file's oldest dropped
        memo = checked.CheckedMemo(Store(root).local)
        assert not memo.known(bytes([batch[0]]) * 16)
        for i in batch:
            memo.add(bytes([i]) * 16)
        memo.flush()
    fresh = checked.CheckedMemo(Store(root).local)
    assert [fresh.known(bytes([i]) * 16) for i in range(5)] == [False] + [True] * 4

"""Bundles (kcache export / import): a bundle is one more tier behind the verification path."""
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kcache import Entry, Store, make_key
from kcache import entry as fmt
from kcache.bundle import MANIFEST, BundleError, BundleTier, digest, have_zstd, sign, write_bundle

MiB = 1 << 20


def key(i) -> str:
    return make_key({"bundle": i})


def fill(store, n=4):
    for i in range(n):
        store.put(key(i), Entry({"cubin": bytes([i]) * 500, "ptx": b"// ptx"},
                                {"kernel": f"pkg.mod:k{i}", "signature": "(float32,)",
                                 "arch": "sm_90a" if i % 2 else "sm_80", "compile_seconds": 0.5}))
    return [key(i) for i in range(n)]


def kc(*args, env=None, check=None):
    e = dict(os.environ)
    e.update(env or {})
    done = subprocess.run([sys.executable, "-m", "kcache", *args], capture_output=True, text=True,
                          env=e, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    if check is not None:
        assert done.returncode == check, (done.returncode, done.stdout, done.stderr)
    return done


def items_of(store):
    return [({"key": i.key, "kernel": i.kernel}, store.entry_bytes(i.key)) for i in store.entries()]


def raw_tar(path: Path, members):
    """A tar written by hand: members are (TarInfo-like dict, bytes)."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for spec, data in members:
            info = tarfile.TarInfo(spec["name"])
            info.type = spec.get("type", tarfile.REGTYPE)
            info.linkname = spec.get("linkname", "")
            info.size = len(data) if info.type == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)


def manifest_for(pairs):
    return json.dumps({"format": "kcache-bundle", "version": 1, "entries": [
        {"key": k, "blake2b": digest(d)} for k, d in pairs]}).encode()


@pytest.mark.parametrize("compress", [False, pytest.param(True, marks=pytest.mark.skipif(
    not have_zstd(), reason="zstandard not installed"))])
def test_export_import_round_trip_twice_changes_nothing(tmp_path, compress):
    src = Store(tmp_path / "src")
    keys = fill(src)
    rep = write_bundle(tmp_path / "b.kcb", items_of(src), compress=compress)
    assert rep.entries == 4 and rep.compressed is compress
    dst = Store(tmp_path / "dst")
    with BundleTier(tmp_path / "b.kcb", max_entry_size=MiB) as tier:
        first = dst.copy_in(tier)
        assert sorted(first.copied) == sorted(keys) and first.failed == []
        mtimes = {k: dst.header(k).path.stat().st_mtime_ns for k in keys}
        second = dst.copy_in(tier)
    assert second.copied == [] and sorted(second.present) == sorted(keys)
    assert {k: dst.header(k).path.stat().st_mtime_ns for k in keys} == mtimes
    for k in keys:
        assert dst.get(k) == src.get(k)


def test_signed_bundle_needs_the_right_secret(tmp_path):
    src = Store(tmp_path / "src")
    fill(src)
    write_bundle(tmp_path / "s.kcb", items_of(src), secret=b"right", compress=False)
    write_bundle(tmp_path / "u.kcb", items_of(src), compress=False)
    BundleTier(tmp_path / "s.kcb", secret=b"right", max_entry_size=MiB).close()
    with pytest.raises(BundleError, match="wrong signature"):
        BundleTier(tmp_path / "s.kcb", secret=b"wrong", max_entry_size=MiB)
    with pytest.raises(BundleError, match="not signed"):
        BundleTier(tmp_path / "u.kcb", secret=b"right", max_entry_size=MiB)


def test_tampered_entry_is_refused_and_named(tmp_path):
    src = Store(tmp_path / "src")
    keys = fill(src, 3)
    pairs = [(k, src.entry_bytes(k)) for k in keys]
    bad = bytearray(pairs[1][1])
    bad[-40] ^= 1  # inside the body: the manifest digest no longer matches
    members = [({"name": MANIFEST}, manifest_for(pairs))]
    members += [({"name": f"entries/{k}.kce"}, bytes(bad) if k == keys[1] else d) for k, d in pairs]
    raw_tar(tmp_path / "t.tar", members)
    dst = Store(tmp_path / "dst")
    with BundleTier(tmp_path / "t.tar", max_entry_size=MiB) as tier:
        rep = dst.copy_in(tier)
    assert sorted(rep.copied) == sorted([keys[0], keys[2]])
    assert rep.failed == [(keys[1], "refused: differs from the bundle's manifest")]
    assert dst.header(keys[1]) is None


def test_manifest_consistent_but_entry_corrupt_is_refused_by_the_store(tmp_path):
    """A forged bundle whose manifest digests match corrupt bytes: the store's checks refuse it."""
    k = key(7)
    forged = fmt.encode(k, Entry({"cubin": b"x" * 64}, {"kernel": "m:k"}))
    forged = forged[:-1] + bytes([forged[-1] ^ 0xFF])  # checksum broken
    raw_tar(tmp_path / "f.tar", [({"name": MANIFEST}, manifest_for([(k, forged)])),
                                 ({"name": f"entries/{k}.kce"}, forged)])
    dst = Store(tmp_path / "dst")
    with BundleTier(tmp_path / "f.tar", max_entry_size=MiB) as tier:
        rep = dst.copy_in(tier)
    assert rep.copied == [] and rep.failed == [(k, "refused: checksum mismatch")]


def test_member_names_are_never_trusted(tmp_path):
    src = Store(tmp_path / "src")
    (k,) = fill(src, 1)
    data = src.entry_bytes(k)
    outside = tmp_path / "outside"
    outside.mkdir()
    members = [({"name": MANIFEST}, manifest_for([(k, data)])),
               ({"name": f"../outside/{k}.kce"}, data),
               ({"name": f"/{outside}/abs.kce"}, data),
               ({"name": "entries/evil.kce", "type": tarfile.SYMTYPE, "linkname": "/etc/passwd"}, b""),
               ({"name": f"entries/{key(9)}.kce", "type": tarfile.LNKTYPE, "linkname": "manifest.json"}, b""),
               ({"name": f"entries/{k}.kce"}, data)]
    raw_tar(tmp_path / "n.tar", members)
    dst = Store(tmp_path / "dst")
    with BundleTier(tmp_path / "n.tar", max_entry_size=MiB) as tier:
        rep = dst.copy_in(tier)
        problems = dict(tier.problems)
    assert rep.copied == [k] and list(outside.iterdir()) == []
    assert problems[key(9)].startswith("not a regular member")
    assert any("never read" in why for name, why in problems.items() if "outside" in name)


def test_duplicate_members_refuse_that_key(tmp_path):
    src = Store(tmp_path / "src")
    (k,) = fill(src, 1)
    data = src.entry_bytes(k)
    raw_tar(tmp_path / "d.tar", [({"name": MANIFEST}, manifest_for([(k, data)])),
                                 ({"name": f"entries/{k}.kce"}, data),
                                 ({"name": f"entries/{k}.kce"}, data)])
    dst = Store(tmp_path / "dst")
    with BundleTier(tmp_path / "d.tar", max_entry_size=MiB) as tier:
        rep = dst.copy_in(tier)
        assert tier.problems[k].startswith("appears twice")
    assert rep.copied == [] and dst.header(k) is None
    done = kc("import", str(tmp_path / "d.tar"), "--into", str(tmp_path / "dst"), check=1)
    assert "appears twice" in done.stderr


def test_oversized_member_is_not_read(tmp_path):
    k = key(3)
    big = b"\0" * (2 * MiB)
    raw_tar(tmp_path / "o.tar", [({"name": MANIFEST}, manifest_for([(k, big)])),
                                 ({"name": f"entries/{k}.kce"}, big)])
    dst = Store(tmp_path / "dst")
    with BundleTier(tmp_path / "o.tar", max_entry_size=MiB) as tier:
        rep = dst.copy_in(tier)
    assert rep.failed and rep.failed[0][1].startswith("refused: file too large")


@pytest.mark.parametrize("content", [b"", b"not a tar at all" * 100, b"\x28\xb5\x2f\xfd" + b"\0" * 50])
def test_not_a_bundle_is_one_error(tmp_path, content):
    (tmp_path / "x.kcb").write_bytes(content)
    with pytest.raises(BundleError):
        BundleTier(tmp_path / "x.kcb", max_entry_size=MiB)


def test_fifo_as_bundle_does_not_hang(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    done = kc("import", str(tmp_path / "fifo"), "--into", str(tmp_path / "dst"), check=1)
    assert "not a regular file" in done.stderr


@pytest.mark.slow
def test_cli_export_import_json_and_filters(tmp_path):
    src = tmp_path / "src"
    keys = fill(Store(src))
    doc = json.loads(kc("--dir", str(src), "export", str(tmp_path / "b.kcb"), "--cc", "9.0",
                        "--json", check=0).stdout)
    assert doc["entries"] == 2 and sorted(doc["keys"]) == sorted([keys[1], keys[3]])
    out = json.loads(kc("import", str(tmp_path / "b.kcb"), "--into", str(tmp_path / "dst"),
                        "--json", check=0).stdout)
    assert sorted(out["imported"]) == sorted(doc["keys"]) and out["failed"] == []
    again = json.loads(kc("import", str(tmp_path / "b.kcb"), "--into", str(tmp_path / "dst"),
                          "--json", check=0).stdout)
    assert again["imported"] == [] and sorted(again["present"]) == sorted(doc["keys"])
    kc("--dir", str(src), "export", str(tmp_path / "none.kcb"), "--kernel", "nomatch*", check=1)
    assert not (tmp_path / "none.kcb").exists()


@pytest.mark.slow
def test_cli_signing_with_secret_file_and_env(tmp_path):
    src = tmp_path / "src"
    fill(Store(src), 2)
    (tmp_path / "secret").write_text("s3cret\n")
    kc("--dir", str(src), "export", str(tmp_path / "s.kcb"), "--secret-file", str(tmp_path / "secret"), check=0)
    done = kc("import", str(tmp_path / "s.kcb"), "--into", str(tmp_path / "d1"), env={"KCACHE_SECRET": "other"}, check=1)
    assert "wrong signature" in done.stderr and "nothing imported" in done.stderr
    kc("import", str(tmp_path / "s.kcb"), "--into", str(tmp_path / "d1"), env={"KCACHE_SECRET": "s3cret"}, check=0)
    assert len(list(Store(tmp_path / "d1").entries())) == 2


@pytest.mark.slow
def test_imported_bundle_is_self_contained_in_a_fresh_process(tmp_path):
    src = tmp_path / "src"
    keys = fill(Store(src), 3)
    kc("--dir", str(src), "export", str(tmp_path / "b.kcb"), check=0)
    kc("import", str(tmp_path / "b.kcb"), "--into", str(tmp_path / "fresh"), check=0)
    code = ("import sys; from kcache import Store; s = Store(sys.argv[1]); "
            "print(sum(s.get(k) is not None for k in sys.argv[2:]))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "fresh"), *keys],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "3"


def test_signature_covers_the_entries_through_the_manifest(tmp_path):
    src = Store(tmp_path / "src")
    keys = fill(src, 2)
    pairs = [(k, src.entry_bytes(k)) for k in keys]
    manifest = manifest_for(pairs)
    other = fmt.encode(keys[0], Entry({"cubin": b"planted"}, {"kernel": "m:evil"}))
    members = [({"name": MANIFEST}, manifest), ({"name": "manifest.hmac"}, sign(b"k", manifest).encode()),
               ({"name": f"entries/{keys[0]}.kce"}, other), ({"name": f"entries/{keys[1]}.kce"}, pairs[1][1])]
    raw_tar(tmp_path / "p.tar", members)
    dst = Store(tmp_path / "dst")
    with BundleTier(tmp_path / "p.tar", secret=b"k", max_entry_size=MiB) as tier:
        rep = dst.copy_in(tier)
    assert rep.copied == [keys[1]] and rep.failed[0][0] == keys[0]  # a valid entry, but not the signed one

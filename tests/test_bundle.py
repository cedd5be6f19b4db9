"""Bundles (kcache export / import): a bundle is one more tier behind the verification path."""
import hashlib
import hmac
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import clikit

from kcache import Entry, Store, make_key
from kcache.entry import format as fmt
from kcache.tiers.bundle.v2 import BundleError, BundleTier, digest, have_zstd, write_bundle
from kcache.tiers.bundle.v1 import MANIFEST

MiB = 1 << 20
SECRET = b"bundle test secret 0123456789"


def sign(secret: bytes, manifest: bytes) -> str:
    """A version-1 bundle's ``manifest.hmac``."""
    return hmac.new(secret, manifest, hashlib.sha256).hexdigest()


def key(i) -> str:
    return make_key({"bundle": i})


def fill(store, n=4):
    for i in range(n):
        store.put(key(i), Entry({"cubin": bytes([i]) * 500, "ptx": b"// ptx"},
                                {"kernel": f"pkg.mod:k{i}", "signature": "(float32,)",
                                 "arch": "sm_90a" if i % 2 else "sm_80", "compile_seconds": 0.5}))
    return [key(i) for i in range(n)]


def kc(*args, env=None, check=None, process=False):
    """``kcache ARGS``, in this process as a fresh one runs it (tests/clikit.py), or with
    ``process`` as ``python -m kcache`` (a hang is then a timeout, not a stuck suite)."""
    e = {**os.environ, **(env or {})}
    if process:
        done = subprocess.run([sys.executable, "-m", "kcache", *args], capture_output=True,
                              text=True, env=e, timeout=120)
    else:
        done = clikit.run([str(a) for a in args], environ=e)
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
    write_bundle(tmp_path / "s.kcb", items_of(src), secret=SECRET, compress=False)
    write_bundle(tmp_path / "u.kcb", items_of(src), compress=False)
    with BundleTier(tmp_path / "s.kcb", secret=SECRET, max_entry_size=MiB) as tier:
        assert tier.signed and tier.checked and len(list(tier.keys())) == 4
    with BundleTier(tmp_path / "s.kcb", max_entry_size=MiB) as tier:
        assert tier.signed and not tier.checked
    with pytest.raises(BundleError, match="wrong signature"):
        BundleTier(tmp_path / "s.kcb", secret=SECRET + b"x", max_entry_size=MiB)
    with pytest.raises(BundleError, match="not signed"):
        BundleTier(tmp_path / "u.kcb", secret=SECRET, max_entry_size=MiB)
    data = bytearray((tmp_path / "s.kcb").read_bytes())
    for at in (20, len(data) // 2, len(data) - 1):  # header, an entry, the trailer
        flipped = bytearray(data)
        flipped[at] ^= 1
        (tmp_path / "f.kcb").write_bytes(bytes(flipped))
        with pytest.raises(BundleError, match="wrong signature"):
            BundleTier(tmp_path / "f.kcb", secret=SECRET, max_entry_size=MiB)


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
    done = kc("import", str(tmp_path / "fifo"), "--into", str(tmp_path / "dst"), check=1,
              process=True)
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
    for out, said in ((tmp_path / "no" / "b.kcb", f"the folder {tmp_path / 'no'} does not"),
                      ("-", "not to standard output")):
        bad = kc("--dir", str(src), "export", str(out), check=2)
        assert said in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert not Path("-").exists()
    (tmp_path / "afile").write_text("x")  # the flag the user typed is the one named
    bad = kc("import", str(tmp_path / "b.kcb"), "--into", str(tmp_path / "afile"), check=2)
    assert bad.stderr.strip().startswith(f"kcache: --into {tmp_path / 'afile'}: is a file")


@pytest.mark.slow
def test_cli_signing_with_secret_file_and_env(tmp_path):
    src = tmp_path / "src"
    fill(Store(src), 2)
    (tmp_path / "secret").write_text(SECRET.decode() + "\n")
    kc("--dir", str(src), "export", str(tmp_path / "s.kcb"), "--secret-file", str(tmp_path / "secret"), check=0)
    done = kc("import", str(tmp_path / "s.kcb"), "--into", str(tmp_path / "d1"),
              env={"KCACHE_SECRET": "another secret of 24 bytes"}, check=1)
    assert "wrong signature" in done.stderr and "nothing imported" in done.stderr
    done = kc("import", str(tmp_path / "s.kcb"), "--into", str(tmp_path / "d1"),
              env={"KCACHE_SECRET": SECRET.decode()}, check=0)
    assert done.stderr.endswith("signature checked\n")
    assert len(list(Store(tmp_path / "d1").entries())) == 2
    # no secret: imported, and one line says the signature was not checked
    done = kc("import", str(tmp_path / "s.kcb"), "--into", str(tmp_path / "d2"), "--json",
              env={"KCACHE_SECRET": ""}, check=0)
    doc = json.loads(done.stdout)
    assert doc["signed"] is True and doc["signature_checked"] is False and len(doc["imported"]) == 2
    assert done.stderr.count("\n") == 1 and "signature was not checked" in done.stderr


@pytest.mark.parametrize("how", ["env", "file"])
@pytest.mark.parametrize("command", ["export", "import"])
def test_short_secret_is_refused_and_never_echoed(tmp_path, how, command):
    src = tmp_path / "src"
    fill(Store(src), 1)
    kc("--dir", str(src), "export", str(tmp_path / "b.kcb"), check=0)
    short = "Sh0rtSecret9"  # 12 bytes
    (tmp_path / "secret").write_text(short)
    env = {"KCACHE_SECRET": short} if how == "env" else {"KCACHE_SECRET": ""}
    args = ["--secret-file", str(tmp_path / "secret")] if how == "file" else []
    target = (["--dir", str(src), "export", str(tmp_path / "s.kcb")] if command == "export"
              else ["import", str(tmp_path / "b.kcb"), "--into", str(tmp_path / "d")])
    done = kc(*target, *args, env=env, check=2)
    assert done.stderr.count("\n") == 1 and "too short for a signing secret (12 bytes)" in done.stderr
    assert short not in done.stderr + done.stdout
    assert not (tmp_path / "s.kcb").exists() and not (tmp_path / "d").exists()


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


def test_version_1_bundles_import_without_a_secret_and_are_refused_with_one(tmp_path):
    """A version-1 bundle's signature is a tar member: it cannot be checked before the tar is
    parsed, so with a secret the bundle is refused unread; without one it imports."""
    src = Store(tmp_path / "src")
    keys = fill(src, 2)
    pairs = [(k, src.entry_bytes(k)) for k in keys]
    manifest = manifest_for(pairs)
    members = [({"name": MANIFEST}, manifest), ({"name": "manifest.hmac"}, sign(SECRET, manifest).encode())]
    raw_tar(tmp_path / "p.tar", members + [({"name": f"entries/{k}.kce"}, d) for k, d in pairs])
    with pytest.raises(BundleError, match="version-1 bundle.*a secret is set: refused"):
        BundleTier(tmp_path / "p.tar", secret=SECRET, max_entry_size=MiB)
    dst = Store(tmp_path / "dst")
    with BundleTier(tmp_path / "p.tar", max_entry_size=MiB) as tier:
        assert tier.version == 1 and tier.signed and not tier.checked
        assert sorted(dst.copy_in(tier).copied) == sorted(keys)


def test_a_bad_record_is_one_refused_entry(tmp_path):
    """Version 2: a record with a bad key or digest is refused and named; the others import."""
    import msgpack
    from kcache.tiers.bundle import v2 as bundle
    src = Store(tmp_path / "src")
    keys = fill(src, 3)
    write_bundle(tmp_path / "b.kcb", items_of(src), compress=False)
    raw = (tmp_path / "b.kcb").read_bytes()
    # rewrite the record of keys[1] with a 'digest' of text, then fix the checksum trailer
    data = src.entry_bytes(keys[1])
    at = raw.index(data)
    head_at = raw.rindex(msgpack.packb("key"), 0, at) - 1
    rec = msgpack.unpackb(raw[head_at:at])
    rec["blake2b"] = "é" * 64
    body = raw[:head_at] + msgpack.packb(rec) + raw[at:-32]
    hdr_len = bundle.PREFIX.unpack(body[:bundle.PREFIX.size])[3]
    header = msgpack.unpackb(body[bundle.PREFIX.size:bundle.PREFIX.size + hdr_len])
    header["plain_bytes"] += len(msgpack.packb(rec)) - (at - head_at)
    new_header = msgpack.packb(header)
    body = (bundle.PREFIX.pack(bundle.MAGIC, 2, 0, len(new_header)) + new_header
            + body[bundle.PREFIX.size + hdr_len:])
    (tmp_path / "r.kcb").write_bytes(body + hashlib.blake2b(body, digest_size=32).digest())
    done = kc("import", str(tmp_path / "r.kcb"), "--into", str(tmp_path / "dst"), "--json", check=1)
    doc = json.loads(done.stdout)
    assert sorted(doc["imported"]) == sorted([keys[0], keys[2]])
    assert doc["failed"] == [{"key": keys[1], "reason": "its BLAKE2b digest is not 32 bytes"}]
    assert done.stderr.count("\n") == 1 and keys[1][:12] in done.stderr


def test_version_1_record_with_a_non_ascii_digest_is_one_refused_entry(tmp_path):
    src = Store(tmp_path / "src")
    keys = fill(src, 3)
    pairs = [(k, src.entry_bytes(k)) for k in keys]
    doc = json.loads(manifest_for(pairs))
    doc["entries"][1]["blake2b"] = "\u00e9" * 64
    doc["entries"].append({"key": "../not-a-key"})
    raw_tar(tmp_path / "a.tar", [({"name": MANIFEST}, json.dumps(doc).encode())]
            + [({"name": f"entries/{k}.kce"}, d) for k, d in pairs])
    done = kc("import", str(tmp_path / "a.tar"), "--into", str(tmp_path / "dst"), "--json", check=1)
    out = json.loads(done.stdout)
    assert sorted(out["imported"]) == sorted([keys[0], keys[2]])
    assert out["failed"] == [
        {"key": keys[1], "reason": "its blake2b digest in the manifest is not 64 hex digits"},
        {"key": "record 4", "reason": "its key is not a kcache key (8-128 lowercase hex digits)"}]
    assert done.stderr.count("\n") == 1 and "2 entries of" in done.stderr


def test_a_secret_of_blanks_only_is_refused_an_empty_one_is_no_secret(tmp_path):
    src = tmp_path / "src"
    fill(Store(src), 1)
    done = kc("--dir", str(src), "export", str(tmp_path / "b.kcb"), env={"KCACHE_SECRET": "   "},
              check=2)
    assert "KCACHE_SECRET holds only blanks" in done.stderr and not (tmp_path / "b.kcb").exists()
    kc("--dir", str(src), "export", str(tmp_path / "b.kcb"), env={"KCACHE_SECRET": ""}, check=0)

"""Hostile bundles against a real ``kcache import`` process: every stage bounded by the file's
size (its peak memory measured with ``wait4``), one line and exit 1, never a traceback; with a
secret the signature is checked before anything is parsed. Also: concurrent importers count
each entry once, the bundle path a user typed, and progress on a terminal."""
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time

import msgpack
import pytest

from kcache import Entry, Store, make_key
from kcache.tiers.bundle import v2 as bundle
from test_cli_remote import all_on_a_terminal

zstandard = pytest.importorskip("zstandard")
pytestmark = pytest.mark.exec_children  # peak memory of a fresh interpreter

MiB = 1 << 20
SECRET = "hostile bundle test secret 0123456789"
MAX_RSS = 200 * MiB  # bytes: ~100 MB plus the interpreter, for any hostile bundle


def fill(root, n):
    store = Store(root)
    keys = [make_key({"hostile": i}) for i in range(n)]
    for i, k in enumerate(keys):
        store.put(k, Entry({"cubin": bytes([i % 256]) * 300 + i.to_bytes(4, "big")},
                           {"kernel": f"pkg.mod:k{i}", "signature": "(float32,)", "arch": "sm_90"}))
    return keys


# A launcher between the test and kcache: Linux records the RSS a process had before exec in
# its peak, so a kcache started from the (large) test process would report the test's peak.
_LAUNCHER = """
import os, subprocess, sys
proc = subprocess.Popen([sys.executable, "-m", "kcache", *sys.argv[2:]])
_pid, status, usage = os.wait4(proc.pid, 0)
with open(sys.argv[1], "w") as report:
    report.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def measured(args, *, env=None, cwd=None, limit=120.0):
    """Run ``kcache ARGS`` to its end: (exit status, stdout, stderr, peak RSS bytes of the
    kcache process, seconds)."""
    e = {k: v for k, v in os.environ.items() if k != "KCACHE_SECRET"}
    e.update(env or {})
    report = tempfile.NamedTemporaryFile(prefix="kcache-rss-", delete=False)
    report.close()
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", _LAUNCHER, report.name, *map(str, args)],
                              env=e, cwd=cwd, capture_output=True, text=True, timeout=limit)
        rss = int(open(report.name).read() or 0) * 1024
    finally:
        os.unlink(report.name)
    return done.returncode, done.stdout, done.stderr, rss, time.monotonic() - start


# -- crafting ----------------------------------------------------------------------------------

def tar_of(members, fmt=tarfile.USTAR_FORMAT) -> bytes:
    """A tar of (TarInfo, bytes) members."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def member(name, data, kind=tarfile.REGTYPE):
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, len(data)
    return info, data


def v1_manifest(entries) -> bytes:
    return json.dumps({"format": "kcache-bundle", "version": 1, "entries": entries}).encode()


def zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=10).compress(data)


def v2(payload: bytes, *, plain: int | None = None, flags=0, head: bytes | None = None) -> bytes:
    """A version-2 bundle around ``payload`` (header: ``head`` bytes, else a valid one) with
    a valid checksum trailer."""
    head = head if head is not None else msgpack.packb({
        "format": "kcache-bundle", "version": 2, "entries": 1,
        "plain_bytes": len(payload) if plain is None else plain})
    body = bundle.PREFIX.pack(bundle.MAGIC, 2, flags, len(head)) + head + payload
    return body + hashlib.blake2b(body, digest_size=32).digest()


def zeros_zstd(n: int) -> bytes:
    comp = zstandard.ZstdCompressor(level=1).compressobj()
    chunk, parts = bytes(MiB), []
    for _ in range(n // MiB):
        parts.append(comp.compress(chunk))
    return b"".join(parts) + comp.flush()


def pax_tar() -> bytes:
    """CVE-2024-6232's shape: a 134 KB pax header of repeated records."""
    return tar_of([member("././@PaxHeader", b"4 aa" * 33_500, tarfile.XHDTYPE),
                   member("manifest.json", v1_manifest([]))])


def ustar_header(name: bytes, kind: bytes = tarfile.REGTYPE, size: int = 0, *, prefix: bytes = b"",
                 linkname: bytes = b"", owner: bytes = b"") -> bytes:
    """One 512-byte USTAR header made by hand (tarfile will not write every hostile shape)."""
    h = bytearray(512)
    sized = b"%011o" % size if size < 8 ** 11 else b"\x80" + size.to_bytes(11, "big")  # GNU base-256
    for at, field, width in [(0, name, 100), (100, b"0000644", 8), (108, b"0", 8), (116, b"0", 8),
                             (124, sized, 12), (136, b"0", 12), (157, linkname, 100),
                             (257, b"ustar\x0000", 8), (265, owner, 32), (297, owner, 32),
                             (345, prefix, 155)]:
        h[at:at + width] = field.ljust(width, b"\0")[:width]
    h[156:157] = kind
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def manifest_member() -> bytes:
    return ustar_header(b"manifest.json", size=len(v1_manifest([]))) + padded(v1_manifest([]))


END_OF_TAR = bytes(1024)
CVE_PAX = b"4 aa" * 16_384 + b"="  # tarfile parsed it in 535 MiB, 1 s; 131,072 of them: 2.1 GB


def hidden_header(kind: bytes) -> bytes:
    """An extended header of CVE_PAX, for a member whose data it is in the file's true layout."""
    return ustar_header(b"././@PaxHeader", kind, len(CVE_PAX)) + padded(CVE_PAX) + manifest_member()


def folder_hiding_a_header() -> bytes:
    """A member of type '\\0' named "d/", which tarfile takes for a folder (no data): the
    data it declares is read by tarfile as the next header, a Solaris one of CVE_PAX."""
    hidden = hidden_header(tarfile.SOLARIS_XHDTYPE)
    return zstd(ustar_header(b"d/", tarfile.AREGTYPE, len(hidden)) + hidden + END_OF_TAR)


def pax_size_hiding_a_header() -> bytes:
    """A 10-byte pax header saying the next member's size is 0: its data is read as a header."""
    hidden = hidden_header(tarfile.SOLARIS_XHDTYPE)
    rec = b"10 size=0\n"
    return zstd(ustar_header(b"././@PaxHeader", tarfile.XHDTYPE, len(rec)) + padded(rec)
                + ustar_header(b"f", size=len(hidden)) + hidden + END_OF_TAR)


def gnu_sparse(blocks: int) -> bytes:
    """A GNU sparse member with ``blocks`` extension blocks of 21 regions each (tarfile keeps a
    tuple per region)."""
    head = bytearray(ustar_header(b"s", tarfile.GNUTYPE_SPARSE))
    head[482] = 1  # extended: an extension block follows
    head[148:156] = b" " * 8
    head[148:156] = b"%06o\0 " % sum(head)
    ext = bytearray(512)
    for i in range(21):
        ext[i * 24:i * 24 + 24] = b"%011o\0%011o\0" % (i + 1, 1)
    ext[504] = 1
    return bytes(head) + bytes(ext) * blocks + bytes(512) + manifest_member() + END_OF_TAR


def fat_members(n: int) -> bytes:
    """``n`` empty members each with the longest names a header holds (255 + 100 + 64 bytes
    that decode to surrogates: ~2 KB of text per member once parsed)."""
    def tag(i):
        return bytes([0x80 + (i >> 14) % 128, 0x80 + (i >> 7) % 128, 0x80 + i % 128])
    return b"".join(ustar_header(b"\xff" * 100, prefix=tag(i) + b"\xfe" * 152, linkname=b"\xfd" * 100,
                                 owner=b"\xfc" * 32) for i in range(n)) + manifest_member() + END_OF_TAR


def zstd_declaring(size: int, *, single_segment: bool) -> bytes:
    """A zstd frame of a small tar whose header declares ``size`` bytes of content; with
    ``single_segment`` the decoder's window is that size (zstd's frame format, RFC 8878)."""
    frame = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    frame = frame.compress(pax_tar()) + frame.flush()
    descriptor, window, blocks = frame[4], frame[5:6], frame[6:]
    assert descriptor & 0xE3 == 0  # no content size, no single segment, no dictionary
    if single_segment:  # 8-byte content size, single segment: no window byte
        return frame[:4] + bytes([0xE0 | descriptor]) + size.to_bytes(8, "little") + blocks
    return frame[:4] + bytes([0xC0 | descriptor]) + window + size.to_bytes(8, "little") + blocks


def huge_member_tar() -> bytes:
    info = tarfile.TarInfo("entries/" + "ab" * 16 + ".kce")
    info.size = 1 << 62
    return info.tobuf(tarfile.GNU_FORMAT) + tar_of([member("manifest.json", v1_manifest([]))])


def many_records() -> bytes:
    rec = b"".join(msgpack.packb({"key": f"{i:08x}", "size": 0, "blake2b": bytes(32)})
                   for i in range(bundle.MAX_ENTRIES + 1))
    return v2(rec)


HOSTILE = {
    # name: (bytes maker, what the one line says without a secret)
    "pax-header": (pax_tar, "member '././@PaxHeader' (byte 0) is a pax extended header, which kcache "
                            "never writes (accepted: USTAR files, links, folders): refused"),
    "pax-header-zstd": (lambda: zstd(pax_tar()), "is a pax extended header"),
    # every type tarfile parses as more than its own block is refused, whatever its size
    "solaris-header-zstd": (lambda: zstd(hidden_header(tarfile.SOLARIS_XHDTYPE) + END_OF_TAR),
                            "member '././@PaxHeader' (byte 0) is a Solaris extended header"),
    "pax-global-header": (lambda: zstd(hidden_header(tarfile.XGLTYPE) + END_OF_TAR), "is a pax global header"),
    "pax-header-of-10-bytes": (pax_size_hiding_a_header, "(byte 0) is a pax extended header"),
    "folder-hiding-a-header": (folder_hiding_a_header, "(byte 512) is a Solaris extended header"),
    "gnu-long-name-of-2^40-bytes": (lambda: ustar_header(b"././@LongLink", tarfile.GNUTYPE_LONGNAME, 1 << 40)
                                    + END_OF_TAR, "is a GNU long-name header"),
    "gnu-long-link": (lambda: ustar_header(b"././@LongLink", tarfile.GNUTYPE_LONGLINK, 100) + bytes(512)
                      + manifest_member() + END_OF_TAR, "is a GNU long-link header"),
    "gnu-sparse": (lambda: gnu_sparse(1000), "member 's' (byte 0) is a GNU sparse file"),
    "unknown-member-type": (lambda: ustar_header(b"z", b"Z", 10) + bytes(512) + manifest_member() + END_OF_TAR,
                            "member 'z' (byte 0) is of tar type b'Z'"),
    "zstd-declaring-2^62-bytes": (lambda: zstd_declaring(1 << 62, single_segment=False),
                                  "zstd stream cannot be read"),
    "zstd-single-segment-of-1GiB": (lambda: zstd_declaring(1 << 30, single_segment=True),
                                    "zstd stream cannot be read (zstd decompress error: Frame requires too much memory"),
    "100003-members": (lambda: b"".join(ustar_header(b"m%d" % i) for i in range(100_003)) + END_OF_TAR,
                       "has more than 100002 tar members: refused"),
    "manifest-60MiB-of-{}": (lambda: zstd(tar_of([member("manifest.json", b"[" + b"{}," * (20 * MiB) + b"{}]")])),
                             "decompresses to more than"),
    "manifest-4MiB-of-{}": (lambda: tar_of([member("manifest.json", b"[" + b"{}," * (4 * MiB // 3 - 2) + b"{}]")]),
                            "JSON objects and arrays: refused"),
    "manifest-of-strings": (lambda: tar_of([member("manifest.json", b'{"entries": [' + b'"ab",' * (bundle_v1_limit() // 5 - 8)
                                                   + b'"ab"]}')]), "is not a kcache bundle manifest"),
    "manifest-200000-deep": (lambda: tar_of([member("manifest.json", b"[" * 200_000)]), "nested too deeply"),
    "member-of-2^62-bytes": (huge_member_tar, "declares 4611686018427387904 bytes, more than"),
    "zstd-bomb-v1": (lambda: zeros_zstd(64 * MiB), "decompresses to more than"),
    "zstd-bomb-v2": (lambda: v2(zeros_zstd(64 * MiB), plain=4096, flags=bundle.ZSTD), "decompresses to more than 4096"),
    "zstd-bomb-v2-declared": (lambda: v2(zeros_zstd(64 * MiB), plain=64 * MiB, flags=bundle.ZSTD),
                              "says it decompresses to 67108864 bytes"),
    "header-60MiB-of-{}": (lambda: v2(b"", head=b"\xdd\x03\xc0\x00\x00" + b"\x80" * (60 * MiB)), "does not fit its"),
    "header-not-msgpack": (lambda: v2(b"", head=b"\xc1"),
                           "its header is not a msgpack map (bytes that are not msgpack): refused"),
    "header-an-integer": (lambda: v2(b"", head=b"\x01"), "its header is not a msgpack map (it is an integer)"),
    "header-two-values": (lambda: v2(b"", head=b"\x80\x80"),
                          "its header is not a msgpack map (more than one msgpack value)"),
    "record-not-msgpack": (lambda: v2(b"\xc1" * 10), "record 1: not a msgpack record (bytes that are not msgpack)"),
    "record-3000-deep": (lambda: v2(b"\x91" * 3000), "record 1: not a msgpack record (nested too deeply)"),
    "record-of-{}": (lambda: v2(b"\x80" * (8 * MiB)), "record 1: declares None bytes"),
    "100001-records": (many_records, "holds more than 100000 records"),
    "huge-zstd-window": (lambda: v2(zstandard.ZstdCompressor(compression_params=zstandard.ZstdCompressionParameters(
        window_log=27)).compress(os.urandom(12 * MiB)), plain=12 * MiB, flags=bundle.ZSTD), "zstd stream cannot be read"),
}


def bundle_v1_limit() -> int:
    from kcache.tiers.bundle.v1 import MAX_MANIFEST
    return MAX_MANIFEST


@pytest.fixture(scope="module")
def hostile_files(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile-bundles")
    for name, (make, _why) in HOSTILE.items():
        (base / f"{name}.kcb").write_bytes(make())
    return base


@pytest.mark.parametrize("secret", [False, True], ids=["no-secret", "secret"])
@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_bundle_is_one_line_and_bounded(hostile_files, tmp_path, name, secret):
    path = hostile_files / f"{name}.kcb"
    env = {"KCACHE_SECRET": SECRET} if secret else {}
    status, out, err, rss, seconds = measured(["import", path, "--into", tmp_path / "dst"], env=env)
    assert status == 1, (status, out, err)
    lines = err.splitlines()
    if name.startswith("record") and not secret:  # the bundle is usable, its records are not
        assert lines[0] == f"kcache: imported 0 entries into {tmp_path / 'dst'}"
        lines = lines[1:]
        assert lines[0].startswith(f"kcache: 1 entry of {path} refused: ")
    else:
        assert lines[0].startswith(f"kcache: {path}")
    assert "Traceback" not in err and len(lines) == 1, err
    if not secret:
        expected = HOSTILE[name][1]
    elif name.startswith(("record", "100001", "header", "zstd-bomb-v2", "huge-zstd")):
        expected = "is not signed, and a secret is set: refused"
    else:
        expected = "version-1 bundle"
    assert expected in err, err
    assert rss <= MAX_RSS, f"{name}: peak {rss >> 20} MiB"
    assert seconds < 60
    assert list(Store(tmp_path / "dst").entries()) == []


def test_members_never_read_are_counted_not_held(tmp_path):
    """100,000 members with the longest names a header holds (a 51 MB tar): each parsed header
    was held at once (221 MB; 401 MB with --json listing them); the first 1,000 are named,
    the rest counted, and each header is dropped once looked at."""
    path = tmp_path / "fat.kcb"
    path.write_bytes(fat_members(100_000))
    status, out, err, rss, _s = measured(["--json", "import", path, "--into", tmp_path / "dst"])
    assert status == 0 and "Traceback" not in err, err
    ignored = json.loads(out)["ignored"]
    assert len(ignored) == 1001, len(ignored)
    assert ignored[-1] == {"member": "99000 more members",
                           "reason": "never read either (the first 1000 are named)"}
    assert rss <= MAX_RSS, f"peak {rss >> 20} MiB"


def test_signed_hostile_bundle_is_refused_before_it_is_parsed(tmp_path):
    """A bundle that says it is signed carries hostile records and a bomb: with a secret the
    HMAC over its bytes fails first, in bounded memory, whatever the rest holds."""
    for i, payload in enumerate([b"\x80" * (60 * MiB), zeros_zstd(64 * MiB)]):
        path = tmp_path / f"s{i}.kcb"
        path.write_bytes(v2(payload, flags=bundle.SIGNED | (bundle.ZSTD if i else 0), plain=4096))
        status, _out, err, rss, _s = measured(["import", path, "--into", tmp_path / "dst"],
                                              env={"KCACHE_SECRET": SECRET})
        assert status == 1 and err.count("\n") == 1 and "wrong signature" in err, err
        assert rss <= MAX_RSS


def test_truncated_bundles_say_truncated(tmp_path):
    keys = fill(tmp_path / "src", 20)
    store = Store(tmp_path / "src")
    good = tmp_path / "good.kcb"
    bundle.write_bundle(good, [({"key": k}, store.entry_bytes(k)) for k in keys])
    raw = good.read_bytes()
    entries = [member(f"entries/{k}.kce", store.entry_bytes(k)) for k in keys]
    old = zstd(tar_of([member("manifest.json", v1_manifest([{"key": k, "blake2b": bundle.digest(
        store.entry_bytes(k))} for k in keys]))] + entries))
    (tmp_path / "whole-v1.kcb").write_bytes(old)  # a whole version-1 zstd bundle still imports
    status, _out, err, _rss, _s = measured(["import", tmp_path / "whole-v1.kcb", "--into", tmp_path / "v1"])
    assert status == 0 and err == f"kcache: imported 20 entries into {tmp_path / 'v1'}\n", err
    cases = {"v2": (raw[: len(raw) // 2], "is damaged: its checksum does not match (truncated"),
             "v2-prefix": (raw[:10], "is truncated"),
             "v1-zstd": (old[: len(old) // 2], "is truncated: its tar ends at byte")}
    for name, (data, expected) in cases.items():
        path = tmp_path / f"{name}.kcb"
        path.write_bytes(data)
        status, _out, err, _rss, _s = measured(["import", path, "--into", tmp_path / "dst"])
        assert status == 1 and err.count("\n") == 1 and err.startswith(f"kcache: {path}"), err
        assert expected in err and "empty file" not in err, err


def test_bundle_paths_the_user_typed(tmp_path):
    keys = fill(tmp_path / "src", 3)
    good = tmp_path / "good.kcb"
    status, *_ = measured(["--dir", tmp_path / "src", "export", good])
    assert status == 0
    (tmp_path / "link.kcb").symlink_to(good)  # the user's own link: followed
    status, _out, err, *_ = measured(["import", tmp_path / "link.kcb", "--into", tmp_path / "a"])
    assert status == 0 and "imported 3 entries" in err, err
    (tmp_path / "dangling.kcb").symlink_to(tmp_path / "nowhere.kcb")
    (tmp_path / "folder.kcb").mkdir()
    os.mkfifo(tmp_path / "fifo.kcb")
    for name, expected in [("dangling.kcb", f"{tmp_path / 'nowhere.kcb'}: no such file"),
                           ("folder.kcb", f"{tmp_path / 'folder.kcb'} is not a regular file"),
                           ("fifo.kcb", f"{tmp_path / 'fifo.kcb'} is not a regular file"),
                           ("absent.kcb", f"{tmp_path / 'absent.kcb'}: no such file")]:
        status, _out, err, *_ = measured(["import", tmp_path / name, "--into", tmp_path / "b"])
        assert status == 1 and err.count("\n") == 1 and expected in err, err
    # export through the user's link writes the file it names
    status, *_ = measured(["--dir", tmp_path / "src", "export", tmp_path / "link.kcb", "--compress", "none"])
    assert status == 0 and (tmp_path / "link.kcb").is_symlink()
    assert bundle.PREFIX.unpack(good.read_bytes()[:bundle.PREFIX.size])[2] == 0  # uncompressed now
    assert len(keys) == 3


_IMPORTER = """
import sys
sys.stdin.buffer.read(1)  # the barrier: returns when the parent closes the pipe
from kcache.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_concurrent_imports_count_each_entry_once(tmp_path):
    keys = fill(tmp_path / "src", 300)
    store = Store(tmp_path / "src")
    path = tmp_path / "b.kcb"
    bundle.write_bundle(path, [({"key": k}, store.entry_bytes(k)) for k in keys])
    env = {k: v for k, v in os.environ.items() if k != "KCACHE_SECRET"}
    gate, release = os.pipe()  # the barrier: each importer blocks reading it until it closes
    procs = [subprocess.Popen([sys.executable, "-c", _IMPORTER, "import", str(path), "--into",
                               str(tmp_path / "dst"), "--json"], stdin=gate,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
             for _ in range(4)]
    os.close(gate)
    os.close(release)  # all four started: let them go at once
    docs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and b"Traceback" not in err, err
        docs.append(json.loads(out))
    assert sum(len(d["imported"]) for d in docs) == len(keys)
    assert sum(len(d["present"]) for d in docs) == 3 * len(keys)
    assert sorted(k for d in docs for k in d["imported"]) == sorted(keys)
    assert len(list(Store(tmp_path / "dst").entries())) == len(keys)


def test_export_and_import_show_progress_on_a_terminal_only(tmp_path):
    fill(tmp_path / "src", 40)
    status, text = all_on_a_terminal("--dir", str(tmp_path / "src"), "export", str(tmp_path / "b.kcb"), env={})
    assert status == 0 and "exporting" in text and "100%" in text and "exported 40 entries" in text, text
    status, text = all_on_a_terminal("import", str(tmp_path / "b.kcb"), "--into", str(tmp_path / "dst"), env={})
    assert status == 0 and "importing" in text and "100%" in text and "imported 40 entries" in text, text
    # piped: the summary line only
    status, out, err, *_ = measured(["import", tmp_path / "b.kcb", "--into", tmp_path / "d2"])
    assert status == 0 and out == "" and err == f"kcache: imported 40 entries into {tmp_path / 'd2'}\n"

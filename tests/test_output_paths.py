"""Paths a user names as an output, against real ``kcache`` processes and real nodes made in a
private folder (never a real /dev node): ``export OUT`` never replaces a device, FIFO or
socket (one line, exit 1, the node untouched, no temp file left); ``show --artifact -o FILE``
writes into what FILE names, as ``cp`` does, but never waits for a FIFO's reader;
``show --extract DIR`` writes only regular files under the names it makes (a symlink there is
not followed, a FIFO not opened for writing)."""
from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys

import pytest

from kcache import Entry, Store, make_key
from kcache.tiers import bundle

ACCEPTED = "left as it is, nothing written (accepted: a new file, or a regular file to replace)"


def kcache(*args, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    return subprocess.run([sys.executable, "-m", "kcache", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def src(tmp_path):
    root = tmp_path / "src"
    store = Store(root)
    for i in range(2):
        store.put(make_key({"paths": i}), Entry({"cubin": b"\x7fELF" + bytes([i]) * 300},
                                                {"kernel": "pkg.mod:k", "signature": "(int32,)",
                                                 "arch": "sm_90"}))
    return root


@pytest.fixture
def nodes(tmp_path):
    """A private folder holding a FIFO, a socket and, as root, a character device (1, 3: what
    /dev/null is), a symlink to the FIFO and one to the device."""
    folder = tmp_path / "nodes"
    folder.mkdir(mode=0o700)
    os.mkfifo(folder / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(folder / "sock"))
    sock.close()
    (folder / "link-to-fifo").symlink_to(folder / "fifo")
    if os.geteuid() == 0:
        os.mknod(folder / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        (folder / "link-to-null").symlink_to(folder / "null")
    return folder


def snapshot(folder):
    """{name: (mode, device, inode)} of every node in ``folder``, links not followed."""
    return {p.name: (st.st_mode, st.st_rdev, st.st_ino)
            for p in folder.iterdir() for st in [os.lstat(p)]}


def test_export_never_replaces_a_device_fifo_or_socket(src, nodes):
    before = snapshot(nodes)
    what = {"fifo": "a FIFO", "sock": "a socket", "null": "a character device"}
    for name in sorted(before):
        target = nodes / name.removeprefix("link-to-")  # the user's link: the node it names
        for compress in ("zstd", "none"):
            done = kcache("--dir", src, "export", nodes / name, "--compress", compress)
            assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
            assert done.stderr == (f"kcache: export: {target} is {what[target.name]}: "
                                   f"{ACCEPTED}\n"), done.stderr
    assert snapshot(nodes) == before  # every node as it was, and no temp file beside them


def test_write_bundle_refuses_a_node_swapped_in_while_it_writes(src, tmp_path):
    """The check is made again just before the rename: a FIFO put where the bundle goes while
    the entries are written is left there, and the temp file is removed."""
    store = Store(src)
    items = [({"key": e.key}, store.entry_bytes(e.key)) for e in store.entries()]
    out = tmp_path / "out" / "b.kcb"
    out.parent.mkdir()
    out.write_bytes(b"an older bundle")

    def swap(done, total):
        if done == total:
            out.unlink()
            os.mkfifo(out)
    with pytest.raises(bundle.BundleError, match="is a FIFO: left as it is, nothing written"):
        bundle.write_bundle(out, items, progress=swap)
    assert stat.S_ISFIFO(os.lstat(out).st_mode) and os.listdir(out.parent) == ["b.kcb"]


def test_export_reports_the_format_it_wrote(src, tmp_path):
    done = kcache("--dir", src, "export", tmp_path / "b.kcb", "--compress", "none")
    assert done.returncode == 0 and done.stderr.endswith(", uncompressed, unsigned)\n"), done.stderr
    assert "tar" not in done.stderr
    done = kcache("--dir", src, "export", tmp_path / "b.kcb", "--compress", "zstd")
    assert done.returncode == 0 and done.stderr.endswith(", zstd, unsigned)\n"), done.stderr


def test_export_output_folders_that_cannot_be(src, tmp_path, nodes):
    (nodes / "loop").symlink_to(nodes / "loop")
    cases = [(nodes / "fifo" / "b.kcb", 2, f"export: {nodes / 'fifo'} is not a folder"),
             (tmp_path / "absent" / "b.kcb", 2, f"export: the folder {tmp_path / 'absent'} does not exist"),
             (tmp_path, 2, f"export: {tmp_path} is a folder"),
             (f"{tmp_path}/new.kcb/", 2, f"export: {tmp_path}/new.kcb/ is a folder"),
             (nodes / "loop", 1, f"export: cannot look at {nodes / 'loop'} (Too many levels of symbolic links)"),
             ("/proc/kcache-test.kcb", 1, "export: cannot write /proc/kcache-test.kcb (")]
    for out, status, expected in cases:
        done = kcache("--dir", src, "export", out)
        assert done.returncode == status and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"kcache: {expected}"), done.stderr
        assert ".tmp" not in done.stderr  # named by OUT, not by the temp file
    assert not (tmp_path / "new.kcb").exists()


def key_of(root) -> str:
    return min(e.key for e in Store(root).entries())


def cubin_of(root) -> bytes:
    return bytes(Store(root).load(key_of(root)).artifacts["cubin"])


def test_show_output_never_waits_for_a_fifo_reader(src, nodes):
    key = key_of(src)[:12]
    done = kcache("--dir", src, "show", key, "--artifact", "cubin", "-o", nodes / "fifo", timeout=30)
    assert done.returncode == 1 and done.stderr == (
        f"kcache: cannot write {nodes / 'fifo'}: a FIFO no process is reading: nothing "
        "written\n"), done.stderr
    done = kcache("--dir", src, "show", key, "--artifact", "cubin", "-o", nodes / "sock", timeout=30)
    assert done.returncode == 1 and done.stderr == (
        f"kcache: cannot write {nodes / 'sock'}: a socket, not a file: nothing written\n"), done.stderr
    # with a reader, the bytes go to it, as `cp` would send them (they fit the pipe's buffer)
    reader = os.open(nodes / "fifo", os.O_RDONLY | os.O_NONBLOCK)  # open before kcache starts
    try:
        done = kcache("--dir", src, "show", key, "--artifact", "cubin", "-o", nodes / "link-to-fifo",
                      timeout=30)
        got = os.read(reader, 1 << 16)
    finally:
        os.close(reader)
    assert done.returncode == 0 and got == cubin_of(src), done.stderr
    assert stat.S_ISFIFO(os.lstat(nodes / "fifo").st_mode)


def test_show_extract_writes_only_regular_files_under_its_names(src, tmp_path):
    key = key_of(src)[:12]
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    name = out / "pkg.mod_k.sm_90.cubin"  # the name show makes from the entry
    name.symlink_to(victim)
    done = kcache("--dir", src, "show", key, "--extract", out)
    assert done.returncode == 1 and done.stderr == (
        f"kcache: cannot write {name}: a symlink, not followed for a name kcache made: "
        "nothing written\n"), done.stderr
    assert victim.read_bytes() == b"keep me" and name.is_symlink()
    name.unlink()
    os.mkfifo(name)
    done = kcache("--dir", src, "show", key, "--extract", out, timeout=30)
    assert done.returncode == 1 and "a FIFO no process is reading" in done.stderr, done.stderr
    assert stat.S_ISFIFO(os.lstat(name).st_mode)
    name.unlink()
    name.write_bytes(b"an older cubin, longer than the new one" * 100)
    done = kcache("--dir", src, "show", key, "--extract", out)
    assert done.returncode == 0, done.stderr
    assert name.read_bytes() == cubin_of(src)

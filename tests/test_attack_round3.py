"""Attack review of issue 32's fixes (round 3): defects found by attacking the merged code
with real files and processes, each pinned by a test that failed before its fix."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("numba.cuda")

from kcache.dispatcher.components import LinkUnread, link_digests  # noqa: E402

#: A regular file (``stat``: S_IFREG, size 0) whose read fails: EIO at offset 0.
FAILING = "/proc/self/mem"


@pytest.mark.skipif(not os.path.exists(FAILING), reason="needs Linux /proc")
def test_a_regular_link_file_whose_read_fails_is_refused_not_raised():
    """A link= file that stat calls regular but whose read raises (EIO) made the key
    computation raise OSError into the kernel call; it is a LinkUnread (runs uncached)."""
    with pytest.raises(LinkUnread, match="cannot be read"):
        link_digests([FAILING])


@pytest.mark.skipif(not os.path.exists(FAILING), reason="needs Linux /proc")
def test_a_header_whose_read_fails_is_refused_not_raised(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text(f'#include "{FAILING}"\nextern "C" __device__ int f(int x) {{ return x; }}\n')
    with pytest.raises(LinkUnread, match="cannot be read"):
        link_digests([str(source)])


# --- kcache export OUT: a symlink planted in /tmp ------------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0, reason="planting a link owned by another user needs root")
def test_export_never_follows_a_symlink_another_user_planted_in_a_sticky_folder(tmp_path):
    """As root, ``kcache export /tmp/b.kcb`` where user nobody planted ``b.kcb -> victim``
    replaced the victim with the bundle (realpath resolves the link past the kernel's
    fs.protected_symlinks check); refused now: one line, exit 1, victim untouched."""
    import subprocess
    import sys

    from kcache import Entry, Store, make_key
    root = tmp_path / "root"
    Store(root).put(make_key({"attack": "planted-link"}), Entry({"x": b"data"}, {}))
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    planted = sticky / "b.kcb"
    planted.symlink_to(victim)
    os.lchown(planted, 65534, 65534)  # nobody's link
    env = dict(os.environ, KCACHE_DIR=str(root))
    done = subprocess.run([sys.executable, "-m", "kcache", "export", str(planted)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "symlink owned by another user" in done.stderr and len(done.stderr.splitlines()) == 1
    assert victim.read_bytes() == b"precious\n"
    assert os.path.islink(planted) and sorted(os.listdir(sticky)) == ["b.kcb"]
    # the user's own link is theirs to follow, as before
    mine = sticky / "mine.kcb"
    mine.symlink_to(tmp_path / "out.kcb")
    done = subprocess.run([sys.executable, "-m", "kcache", "export", str(mine)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.kcb").stat().st_size > 0


# --- KCACHE_RECORD behind a stopped recorder ---------------------------------------------------

def test_record_behind_a_stopped_holder_of_its_lock_waits_once_not_per_kernel(tmp_path, monkeypatch):
    """A process stopped (SIGSTOP) while holding the signatures file's lock made every new
    kernel of a recording program wait LOCK_TIMEOUT (30 s each, measured 3 x 30.0 s), though
    the warning said the run's signatures are not recorded; recording now stops there."""
    import signal
    import subprocess
    import sys
    import warnings

    from kcache.dispatcher import record
    sigs = tmp_path / "sigs.txt"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import filelock, sys, time\n"
         f"held = filelock.FileLock({str(sigs) + '.lock'!r})\nheld.acquire()\n"
         "print('held', flush=True)\n"
         "time.sleep(600)\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        os.kill(holder.pid, signal.SIGSTOP)
        monkeypatch.setattr(record, "LOCK_TIMEOUT", 0.5)
        record.start(sigs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            record._append(str(sigs), "mod:k0", "void(float32[::1])")
        assert record.path() is None  # later kernels are not held behind the stopped holder
    finally:
        record.stop()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        holder.stdout.close()

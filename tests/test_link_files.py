"""``link=`` files and the headers they include, as the key reads them (issue 32, item 8).

A linked file is read only if it is a regular file (``stat`` before it is opened, ``fstat``
after an ``O_NONBLOCK`` open), one at a time, digested as it is read, at most 16 MiB each and
64 MiB for one kernel; a file read once (N symlinks to one header) is read once. Otherwise
the kernel runs uncached with one warning. FIFOs, devices (made with ``mknod`` in a private
folder of the test, never a real ``/dev`` node) and large headers are real files; the bounds
of time and memory are measured in child processes (``ru_maxrss``), with a memory limit so
that an unbounded read fails instead of taking the machine.
"""
from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import pytest

import kcache
from kcache.warn import KcacheWarning

pytest.importorskip("numba.cuda")

from kcache.dispatcher.components import LinkUnread, link_digests  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
MIB = 1 << 20
#: The child's memory limit (RLIMIT_DATA): a read of /dev/zero or 200 x 16 MiB fails within it.
CHILD_MEMORY = 1536 * MIB

#: Computes the link digests of sys.argv[2:] in sys.argv[1] (the working folder NVRTC would
#: search), then prints what it cost: the peak resident memory over what importing took.
DIGESTS = textwrap.dedent("""
    import json, os, resource, sys, time
    from kcache.dispatcher.components import link_digests
    os.chdir(sys.argv[1])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    try:
        out = {"digests": link_digests(sys.argv[2:])}
    except Exception as exc:
        out = {"error": type(exc).__name__, "message": str(exc)}
    out["seconds"] = time.perf_counter() - start
    out["peak_mib"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    print(json.dumps(out))
""")


def digests_in_a_child(folder: Path, *links, timeout: float = 120) -> dict:
    """:data:`DIGESTS` run in a child with :data:`CHILD_MEMORY`; its JSON answer."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_DATA, (CHILD_MEMORY, CHILD_MEMORY))

    done = subprocess.run([sys.executable, "-c", DIGESTS, str(folder), *map(str, links)],
                          capture_output=True, text=True, timeout=timeout, preexec_fn=limit)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def private(tmp_path) -> Path:
    """A folder only this user can enter (devices made with mknod live there)."""
    folder = tmp_path / "private"
    folder.mkdir(mode=0o700)
    return folder


def char_device(folder: Path, name: str, minor: int) -> Path:
    """A character device node like /dev/null (minor 3) or /dev/zero (5), in ``folder``."""
    path = folder / name
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("mknod needs root (CAP_MKNOD)")
    return path


# --- the key: what is read, and what it costs -------------------------------------------------

def test_a_fifo_link_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "gen.cu"
    os.mkfifo(fifo)  # no writer: an open for reading without O_NONBLOCK waits for ever
    out = digests_in_a_child(tmp_path, fifo, timeout=60)
    assert out["error"] == "LinkUnread" and "is not a regular file" in out["message"], out
    assert "gen.cu" in out["message"]


@pytest.mark.parametrize("how", ["device node", "symlink to /dev/zero"])
def test_a_device_link_file_is_refused_unread(private, how):
    if how == "device node":
        path = char_device(private, "zero.cu", 5)
    else:
        path = private / "zero.ptx"
        path.symlink_to("/dev/zero")  # stat follows it: a device, never opened
    out = digests_in_a_child(private, path, timeout=60)
    assert out["error"] == "LinkUnread" and "is not a regular file" in out["message"], out
    assert out["peak_mib"] < 64, out


def test_a_fifo_or_device_header_is_refused_too(private):
    os.mkfifo(private / "pipe.cuh")
    char_device(private, "dev.cuh", 5)
    for header in ("pipe.cuh", "dev.cuh"):
        (private / "top.cu").write_text(f'#include "{header}"\n')
        out = digests_in_a_child(private, private / "top.cu", timeout=60)
        assert out.get("error") == "LinkUnread", out
        assert f"header '{private / header}'" in out["message"], out


def big_header(path: Path, size: int, fill: str = "x") -> None:
    """A header of ``size`` bytes of comment lines (what a generated table may look like)."""
    line = "// " + fill * 76 + "\n"
    with open(path, "w") as f:
        for _ in range(size // len(line)):
            f.write(line)


def test_200_symlinks_to_one_16_mib_header_cost_one_read(tmp_path):
    """Issue 32: 200 links to one 16 MiB header were each read and held at once (3.3 GB,
    30 s). Now the header is read once: the key is computed, in bounded time and memory."""
    big_header(tmp_path / "table.cuh", 16 * MIB - 1000)
    includes = []
    for n in range(200):
        (tmp_path / f"t{n}.cuh").symlink_to(tmp_path / "table.cuh")
        includes.append(f'#include "t{n}.cuh"\n')
    (tmp_path / "k.cu").write_text("".join(includes))
    out = digests_in_a_child(tmp_path, tmp_path / "k.cu")
    assert "digests" in out, out
    assert out["peak_mib"] < 64 and out["seconds"] < 10, out
    # the same key as one header read from a regular file: the content counts, not the links
    os.replace(tmp_path / "t0.cuh", tmp_path / "moved")
    (tmp_path / "t0.cuh").write_bytes((tmp_path / "table.cuh").read_bytes())
    assert digests_in_a_child(tmp_path, tmp_path / "k.cu")["digests"] == out["digests"]


def test_headers_over_the_total_of_one_kernel_are_refused(tmp_path):
    """Five distinct 15 MiB headers are 75 MiB, more than the 64 MiB one kernel may read:
    refused before the fifth is read, in bounded memory."""
    for n in range(5):
        big_header(tmp_path / f"h{n}.cuh", 15 * MIB, fill=str(n))
    (tmp_path / "k.cu").write_text("".join(f'#include "h{n}.cuh"\n' for n in range(5)))
    out = digests_in_a_child(tmp_path, tmp_path / "k.cu")
    assert out.get("error") == "LinkUnread" and "more than 64 MiB" in out["message"], out
    assert out["peak_mib"] < 64, out


def test_a_link_file_over_16_mib_is_refused(tmp_path):
    path = tmp_path / "big.ptx"
    with open(path, "wb") as f:
        f.truncate(16 * MIB + 1)
    with pytest.raises(LinkUnread, match="big.ptx' is larger than 16 MiB"):
        link_digests([str(path)])
    with open(path, "wb") as f:
        f.truncate(16 * MIB)  # at the bound: read, streamed
    assert list(link_digests([str(path)])) == ["big.ptx"]


def test_link_digests_are_those_of_before(tmp_path, monkeypatch):
    """Read in chunks and memoised, a file's digest is still blake2b-128 of its bytes, and a
    source's headers count as before: keys made before this change still hit."""
    import hashlib

    from kcache.dispatcher.fingerprint import digest_of
    monkeypatch.chdir(tmp_path)
    data = os.urandom(3 * MIB + 7)
    (tmp_path / "lib.ltoir").write_bytes(data)
    (tmp_path / "h.cuh").write_text("#define A 1\n")
    (tmp_path / "k.cu").write_text('#include "h.cuh"\n')
    got = link_digests([str(tmp_path / "lib.ltoir"), str(tmp_path / "k.cu")])
    b2 = lambda b: hashlib.blake2b(b, digest_size=16).hexdigest()  # noqa: E731
    assert got == {"lib.ltoir": b2(data),
                   "k.cu": digest_of([b2(b'#include "h.cuh"\n'), [["h.cuh", b2(b"#define A 1\n")]]])}


# --- the kernel: runs uncached, one warning -------------------------------------------------------

@contextlib.contextmanager
def fifo_serving(path: Path, text: bytes):
    """A FIFO at ``path`` that gives ``text`` to one more reader each time the yielded
    function is called (as a generator process would), waiting for that reader to open it."""
    os.mkfifo(path)
    turn, stop = threading.Semaphore(0), threading.Event()

    def serve():
        while turn.acquire() and not stop.is_set():
            with contextlib.suppress(BrokenPipeError), open(path, "wb") as f:  # waits for a reader
                f.write(text)

    def next_reader() -> None:
        turn.release()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield next_reader
    finally:
        stop.set()
        turn.release()
        with contextlib.suppress(OSError):  # releases a writer waiting for a reader
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        thread.join(30)
        assert not thread.is_alive()


def _linked_kernel(store, link):
    from numba import cuda

    from kcache.dispatcher import jit
    add_one = cuda.declare_device("add_one", "int32(int32)")

    @jit(store=store, link=[str(link)])
    def k(a):
        a[0] = add_one(a[0])

    return k


def test_a_fifo_link_file_runs_the_kernel_uncached_with_one_warning(store, tmp_path):
    from numba.cuda import types

    from test_dispatcher_fakegpu import fake_gpu
    with fifo_serving(tmp_path / "gen.cu", (DATA / "add_one.cu").read_bytes()) as next_reader:
        k = _linked_kernel(store, tmp_path / "gen.cu")
        # Were the FIFO read for the key, numba-cuda's read would wait for ever: a guard
        # then serves more readers, so the test ends (and fails) instead of hanging.
        guard = threading.Timer(60, lambda: [next_reader() for _ in range(8)])
        guard.start()
        try:
            with fake_gpu((9, 0)), warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                for sig in ((types.int32[::1],), (types.int64[::1],)):
                    next_reader()  # numba-cuda's compile reads it, as any link= file
                    k.compile(sig)
        finally:
            guard.cancel()
    mine = [str(w.message) for w in said if issubclass(w.category, KcacheWarning)]
    assert len(mine) == 1 and "gen.cu' is not a regular file" in mine[0], mine
    assert "runs uncached" in mine[0]
    assert k.stats.compiles == 2 and len(k.stats.uncached) == 2  # numba-cuda read it
    assert list(store.entries()) == []


def test_a_device_link_file_runs_the_kernel_uncached_with_one_warning(store, private):
    from numba.cuda import types

    from kcache.dispatcher import jit
    from test_dispatcher_fakegpu import fake_gpu
    null = char_device(private, "null.cu", 3)  # numba-cuda reads it: an empty source

    with fake_gpu((9, 0)), pytest.warns(KcacheWarning, match="null.cu' is not a regular"):
        @jit(store=store, link=[str(null)])
        def k(a):
            a[0] = 1

        k.compile((types.int32[::1],))
    assert k.stats.compiles == 1 and list(store.entries()) == []
    assert "is not a regular file" in kcache.dispatcher.explain(k)[0]

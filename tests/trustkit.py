"""Helpers of the trust-rule tests (test_trust.py, test_isolation.py, test_shared_mode.py):
entries, subprocess runs of the store and the CLI, and snapshots of folders that must stay
untouched."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import clikit
from kcache import Entry, make_key

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
OTHER_UID = 54321  # a uid that owns nothing here; chown to it needs root
DAY = 86400.0


def key(i) -> str:
    return make_key({"trust": i})


def entry(i: int = 0, size: int = 100) -> Entry:
    return Entry({"cubin": bytes([i % 256]) * size}, {"kernel": f"m:k{i}", "compile_seconds": 0.5})


def same_shard_keys(n: int, shard: str, start: int = 0) -> list[str]:
    """``n`` keys whose entry shard (first two hex digits) is ``shard``."""
    out, i = [], start
    while len(out) < n:
        k = key(i)
        if k.startswith(shard):
            out.append(k)
        i += 1
    return out


TESTS = Path(__file__).resolve().parent


def child_env(env: dict | None = None) -> dict:
    """The caller's environment plus ``env``, with this folder importable (``trustkit``)."""
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **(env or {})}


def run_py(code: str, *args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` with ``args`` (``sys.argv[1:]``) in a fresh interpreter."""
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                          text=True, env=child_env(env), timeout=timeout)


def run_cli(*args: str, env: dict | None = None, timeout: float = 120,
            process: bool = False) -> subprocess.CompletedProcess:
    """``kcache ARGS`` (stdout piped: plain output), as a fresh interpreter runs it: in this
    process (tests/clikit.py) unless ``process``, then ``python -m kcache``."""
    if not process:
        return clikit.run([str(a) for a in args], environ=child_env(env))
    return subprocess.run([sys.executable, "-m", "kcache", *map(str, args)], capture_output=True,
                          text=True, env=child_env(env), timeout=timeout, stdin=subprocess.DEVNULL)


def json_out(done: subprocess.CompletedProcess):
    """The last stdout line of a child as JSON (children print one result line last)."""
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def strict_json(text: str):
    """JSON that must not hold NaN or Infinity (Python's json accepts them by default)."""
    def refuse(name):
        raise ValueError(f"not valid JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def snapshot(folder: Path) -> dict:
    """Everything under ``folder`` (never following symlinks): relative path -> (inode, mode,
    uid, size, mtime_ns, sha256 of a regular file's bytes)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else None
            out[str(p.relative_to(folder))] = (st.st_ino, st.st_mode, st.st_uid, st.st_size,
                                               st.st_mtime_ns, digest)
    return out


def age(path: Path, seconds: float) -> None:
    """Set ``path``'s atime and mtime ``seconds`` in the past (not following a symlink)."""
    import time
    t = time.time() - seconds
    os.utime(path, (t, t), follow_symlinks=False)


def no_traceback(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert "Traceback" not in done.stdout, done.stdout


# A ``sitecustomize`` for subprocesses that must see a read-only file system where a real
# read-only mount cannot be made (tests run as root, for whom permission bits do not stop
# writes): see :func:`readonly_env`.
READONLY_SHIM = '''\
"""A ``sitecustomize`` for tests: makes every write under $KCACHE_TEST_READONLY fail.

Tests run as root, for whom permission bits do not stop writes, so a read-only file system
(EROFS) is simulated instead: this file is copied as ``sitecustomize.py`` into a folder put on
the subprocess's PYTHONPATH, and wraps the ``os`` / ``io`` calls that create, change or delete
files so that they raise ``OSError(EROFS)`` for paths under that root, also when the path is
given relative to a folder descriptor (``dir_fd``) or as a file descriptor (``os.utime(fd)``):
those are resolved through /proc/self/fd. Reads are unaffected.
"""
import builtins
import errno
import io
import os

_ROOT = os.path.realpath(os.environ["KCACHE_TEST_READONLY"])
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _fd_path(fd):
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _inside(path, dir_fd=None) -> bool:
    try:
        if isinstance(path, int):
            full = _fd_path(path)
        else:
            full = os.fsdecode(path)
            if dir_fd is not None and not os.path.isabs(full):
                base = _fd_path(dir_fd)
                full = None if base is None else os.path.join(base, full)
        if full is None:
            return False
        full = os.path.realpath(full)
    except (TypeError, ValueError):
        return False
    return full == _ROOT or full.startswith(_ROOT + os.sep)


def _refuse(path):
    raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))


_DIR_FDS = ("dir_fd", "src_dir_fd", "dst_dir_fd")


def _guard_path(func, nargs=1):
    def wrapper(*args, **kwargs):
        fds = [kwargs.get(k) for k in _DIR_FDS if k in kwargs] or [kwargs.get("dir_fd")]
        for i, path in enumerate(args[:nargs]):
            if _inside(path, fds[min(i, len(fds) - 1)]):
                _refuse(path)
        return func(*args, **kwargs)
    return wrapper


_os_open = os.open


def _open(path, flags, *args, **kwargs):
    if flags & _WRITE_FLAGS and _inside(path, kwargs.get("dir_fd")):
        _refuse(path)
    return _os_open(path, flags, *args, **kwargs)


os.open = _open
for _name, _n in (("unlink", 1), ("remove", 1), ("rmdir", 1), ("mkdir", 1), ("utime", 1),
                  ("rename", 2), ("replace", 2), ("link", 2), ("symlink", 2),
                  ("chmod", 1), ("truncate", 1)):
    setattr(os, _name, _guard_path(getattr(os, _name), _n))

_io_open = io.open


def _open_file(file, mode="r", *args, **kwargs):
    if any(c in mode for c in "wax+") and _inside(file):
        _refuse(file)
    return _io_open(file, mode, *args, **kwargs)


builtins.open = _open_file
io.open = _open_file
'''


def readonly_env(shim_dir: Path, root: Path) -> dict:
    """Environment for a subprocess in which every write under ``root`` fails with EROFS:
    writes READONLY_SHIM as ``shim_dir/sitecustomize.py`` (``shim_dir`` is created)."""
    shim_dir.mkdir(parents=True, exist_ok=True)
    (shim_dir / "sitecustomize.py").write_text(READONLY_SHIM)
    return {"PYTHONPATH": str(shim_dir), "KCACHE_TEST_READONLY": str(root)}

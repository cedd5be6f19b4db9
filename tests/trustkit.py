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


def run_cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m kcache ARGS`` in a fresh interpreter (stdout piped: plain output)."""
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

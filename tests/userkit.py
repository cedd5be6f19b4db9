"""Run commands as other real users, made by the test: the "another user runs the image" half of
tests/test_containers.py and tests/test_relocation.py.

Needs root and ``useradd`` (CI runs the tests as root); :func:`users` skips with the reason
otherwise. A command runs as the user in a fresh process (``exec``, not ``fork``), so it gets
its own ``HOME``, ``PYTHONHASHSEED`` and everything else from ``env``.

The interpreter and its virtual environment may live where other users cannot go (a 0700
``/root`` holding pyenv). Then the command runs in a private mount namespace (``unshare -m``,
gone with the process) in which each such folder is covered by an empty tmpfs (mode 0755)
holding only the entries the interpreter needs, bind-mounted from the real ones: the other
user reaches the interpreter and nothing else of that folder; the real file system is not
changed. :func:`probe` tells whether a user can run the interpreter at all (skip otherwise).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import pwd
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
REPO = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int


@contextlib.contextmanager
def users(*roles: str):
    """Create one user per role (``useradd --user-group``, no home folder, no login shell);
    yield {role: User}; delete them afterwards. Skips unless root with useradd."""
    if not IS_ROOT or not shutil.which("useradd"):
        pytest.skip("running as another user needs root and useradd (CI runs as root)")
    made: list[str] = []
    try:
        out = {}
        for role in roles:
            name = f"kc{role[:8]}{os.getpid() % 100000}"
            subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell",
                            "/usr/sbin/nologin", name], check=True, capture_output=True)
            made.append(name)
            pw = pwd.getpwnam(name)
            out[role] = User(name, pw.pw_uid, pw.pw_gid)
        yield out
    finally:
        for name in made:
            subprocess.run(["userdel", name], capture_output=True)


def shared_base(prefix: str) -> Path:
    """A new folder in /tmp that every user can enter (mode 0711; pytest's tmp_path is 0700).
    The caller removes it. Skips when /tmp itself cannot be reached by others."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp" if os.path.isdir("/tmp") else None))
    if not all(os.stat(d).st_mode & stat.S_IXOTH for d in path.parents):
        shutil.rmtree(path)
        pytest.skip(f"{path.parent} cannot be reached by other users")
    os.chmod(path, 0o711)
    return path


def _needed_paths() -> list[Path]:
    """What a Python process of this environment reads: the interpreter, its prefixes and the
    kcache checkout (an editable install)."""
    paths = {Path(os.path.realpath(sys.executable)), Path(sys.prefix), Path(sys.base_prefix),
             Path(os.path.realpath(sys.base_prefix)), REPO}
    return sorted(paths)


def _covers() -> dict[Path, set[str]]:
    """{folder others cannot enter: names of its entries the interpreter needs}, for the
    first such folder above each needed path."""
    covers: dict[Path, set[str]] = {}
    for path in _needed_paths():
        parts = path.parts
        for i in range(1, len(parts) - 1):
            folder = Path(*parts[:i + 1])
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                covers.setdefault(folder, set()).add(parts[i + 1])
                break
    return covers


def _namespace_script(covers: dict[Path, set[str]], marks: Path) -> str:
    """sh commands that cover each folder with a tmpfs re-exposing only the needed entries."""
    lines = ["set -e"]
    n = 0
    for folder, names in covers.items():
        binds = []
        for name in sorted(names):
            real = folder / name
            mark = marks / f"s{n}"
            n += 1
            mark.mkdir() if real.is_dir() else mark.touch()
            lines.append(f"mount --bind {shlex.quote(str(real))} {shlex.quote(str(mark))}")
            binds.append((real, mark))
        lines.append(f"mount -t tmpfs -o mode=0755 kcache-cover {shlex.quote(str(folder))}")
        for real, mark in binds:
            make = "mkdir" if mark.is_dir() else "touch"
            lines.append(f"{make} {shlex.quote(str(real))}")
            lines.append(f"mount --bind {shlex.quote(str(mark))} {shlex.quote(str(real))}")
    return "\n".join(lines)


def command(user: User, argv: list[str], stage: Path) -> list[str]:
    """``argv`` wrapped to run as ``user`` (see the module docstring); ``stage`` is a folder
    of the test's (root only) where the mount points are made."""
    drop = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--"]
    covers = _covers()
    if not covers:
        return [*drop, *argv]
    if not shutil.which("unshare"):
        pytest.skip(f"{', '.join(map(str, covers))} cannot be entered by other users and "
                    "unshare is missing")
    marks = Path(tempfile.mkdtemp(dir=stage, prefix="mounts-"))
    script = _namespace_script(covers, marks) + '\numask 022\nexec "$@"'
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *drop, *argv]


def run_as(user: User, argv: list, *, env: dict, cwd, stage: Path, timeout: float = 300,
           input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``argv`` as ``user`` in a fresh process with exactly ``env`` (add HOME yourself)."""
    return subprocess.run(command(user, [str(a) for a in argv], stage), env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, input=input,
                          stdin=None if input is not None else subprocess.DEVNULL)


def probe(user: User, stage: Path, env: dict) -> None:
    """Skip unless ``user`` can run this interpreter and import kcache's dispatcher."""
    done = run_as(user, [sys.executable, "-c", "import kcache.dispatcher, kcache.cli.main"],
                  env=env, cwd="/", stage=stage, timeout=120)
    if done.returncode != 0:
        pytest.skip(f"another user cannot run {sys.executable} here: "
                    f"{(done.stderr.strip().splitlines() or ['?'])[-1]}")

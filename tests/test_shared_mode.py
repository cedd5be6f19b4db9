"""Shared mode (trust rule 4) with two real users of one group, created by the test.

Needs root (CI runs the tests as root): the test creates a group and two users with
groupadd/useradd, and removes them afterwards. Each user's part runs in a real process with
that user's uid, gid and groups (``os.setgroups``/``setgid``/``setuid`` in a forked child).
The child is forked, not exec'ed: the interpreter and the venv may live where other users
cannot read them (a 0700 home such as /root), so every module the child needs is imported
before the fork and the child never opens a Python file as the other user.
"""
from __future__ import annotations

import grp
import multiprocessing as mp
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import fractions  # noqa: F401 (kcache.config imports it on first use; a child cannot read /root)
import traceback
from pathlib import Path

import pytest

from kcache import LockTimeout, Store, config
import importlib
from kcache.disk.layout import Layout
from trustkit import IS_ROOT, age, entry, key, snapshot

pytestmark = [pytest.mark.skipif(not IS_ROOT or not shutil.which("useradd"),
                                 reason="creating two users needs root and useradd/groupadd"),
              pytest.mark.slow]  # processes of two users

CTX = mp.get_context("fork")
cli_main = importlib.import_module("kcache.cli.main")
cli_main.build_parser()  # imports every command module now, before any fork


class Users:
    """Group ``team`` and users ``a`` and ``b`` (each with a private group of its own name,
    ``team`` as a supplementary group), as created by :func:`users`."""

    def __init__(self, team: str, a: str, b: str):
        self.team, self.a, self.b = team, a, b
        self.team_gid = grp.getgrnam(team).gr_gid


def _cmd(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def users():
    tag = f"kct{os.getpid() % 100000}"
    team, a, b = f"{tag}g", f"{tag}a", f"{tag}b"
    made: list[tuple[str, str]] = []
    try:
        _cmd("groupadd", team)
        made.append(("groupdel", team))
        for name in (a, b):
            _cmd("useradd", "--no-create-home", "--user-group", "--groups", team,
                 "--shell", "/usr/sbin/nologin", name)
            made.insert(0, ("userdel", name))  # users before their groups
        yield Users(team, a, b)
    finally:
        for tool, name in made:
            subprocess.run([tool, name], capture_output=True)


@pytest.fixture
def base(users):
    """A folder every user can reach (tmp_path's parents are 0700), setgid with group
    ``team``: what an admin prepares for a team (``chgrp team D; chmod 2775 D``), so that
    a cache created inside belongs to the team."""
    # /tmp rather than $TMPDIR, which may be private to this user
    path = Path(tempfile.mkdtemp(prefix="kcache-shared-", dir="/tmp" if os.path.isdir("/tmp") else None))
    if not all(os.stat(d).st_mode & stat.S_IXOTH for d in path.parents):
        shutil.rmtree(path)
        pytest.skip(f"{path.parent} cannot be reached by other users")
    try:
        os.chmod(path, 0o711)
        shared = path / "team"
        shared.mkdir()
        os.chown(shared, 0, users.team_gid)
        os.chmod(shared, 0o2775)
        yield shared
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _as_user(name: str, env: dict, fn, args, results, started=None, release=None) -> None:
    """Child body: become ``name`` (its groups, gid, uid), set ``env``, run ``fn(*args)``;
    put ("ok", value) or ("error", traceback text) on ``results``."""
    try:
        pw = pwd.getpwnam(name)
        os.setgroups(os.getgrouplist(name, pw.pw_gid))
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
        assert os.getuid() == pw.pw_uid and os.geteuid() == pw.pw_uid
        os.umask(0o022)
        for k in [k for k in os.environ if k.startswith("KCACHE_")]:
            del os.environ[k]
        os.environ.update(env)
        if started is not None:
            value = fn(*args, started, release)
        else:
            value = fn(*args)
        results.put(("ok", value))
    except BaseException:
        results.put(("error", traceback.format_exc()))


def run_as(name: str, fn, *args, env=None):
    """Run ``fn(*args)`` in a child process as user ``name``; return its value."""
    results = CTX.Queue()
    proc = CTX.Process(target=_as_user, args=(name, {"KCACHE_SHARED": "1"} if env is None else env, fn, args, results))
    proc.start()
    status, value = results.get(timeout=120)
    proc.join(30)
    assert status == "ok", value
    assert proc.exitcode == 0
    return value


def _modes(root: str) -> dict:
    out = {}
    for p in [Path(root), *Path(root).rglob("*")]:
        st = p.lstat()
        out[str(p.relative_to(root))] = (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
    return out


# -- each user's part (run in the child, as that user) ---------------------------------------------

def a_creates(root: str) -> dict:
    """User A: set the team's settings, then store and read three entries."""
    assert cli_main.main(["--dir", root, "config", "set", "max_size", "123456789"]) == 0
    assert cli_main.main(["--dir", root, "config", "set", "lock_timeout", "7s"]) == 0
    s = Store(root)
    assert s.trusted, s.untrusted
    puts = [s.put(key(i), entry(i)) for i in range(3)]
    with s.lock(key(50)):  # a lock file of A's, in a lock folder of A's
        pass
    hits = [s.get(key(i)) == entry(i) for i in range(3)]
    s.flush()
    return {"puts": puts, "hits": hits, "modes": _modes(root)}


def b_uses(root: str) -> dict:
    """User B: read A's entries and settings, write its own, take locks in A's lock folders,
    remove one of A's entries (eviction must be able to), count."""
    s = Store(root)
    out = {"trusted": s.trusted, "untrusted": s.untrusted, "max_size": s.max_size,
           "lock_timeout": s.lock_timeout, "config": config.read_config(Path(root))}
    out["hits"] = [s.get(key(i)) == entry(i) for i in range(3)]
    out["put"] = s.put(key(10), entry(10))
    with s.lock(key(50)) as held_a:  # A's lock file
        pass
    with s.lock(key(51)) as held_new:
        pass
    out["held"] = [held_a, held_new]
    out["removed"] = s.remove(key(2))
    s.flush()
    st = s.stats()
    out["stats"] = {"hits": st.hits, "puts": st.puts, "entries": st.entries}
    out["writable"] = s.writable
    return out


def a_reads_b(root: str) -> dict:
    s = Store(root)
    got = s.get(key(10))
    s.flush()
    return {"hit": got == entry(10), "stats": s.stats().as_dict()}


def hold_lock(root: str, k: str, started, release) -> bool:
    """Hold ``k``'s lock until ``release`` is set (tells ``started`` once held)."""
    s = Store(root)
    with s.lock(k) as held:
        started.set()
        assert release.wait(60)
    return bool(held)


def b_waits(root: str, k: str) -> str:
    try:
        with Store(root).lock(k, timeout=0.3):
            return "acquired"
    except LockTimeout:
        return "timed out"


def b_private(root: str) -> dict:
    """User B without KCACHE_SHARED: A's cache is another user's, not to be used."""
    import warnings

    from kcache.warn import KcacheWarning
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        s = Store(root)
        got = s.get(key(0))
        put = s.put(key(20), entry(20))
    return {"get": got is not None, "put": put, "trusted": s.trusted,
            "warnings": [str(w.message) for w in rec if issubclass(w.category, KcacheWarning)]}


# -- the test --------------------------------------------------------------------------------------

def test_two_users_share_one_cache(users, base):
    root = str(base / "cache")
    a = run_as(users.a, a_creates, root)
    assert a["puts"] == [True] * 3 and a["hits"] == [True] * 3
    a_uid, b_uid = pwd.getpwnam(users.a).pw_uid, pwd.getpwnam(users.b).pw_uid
    modes = a["modes"]
    for rel, (mode, uid, gid) in modes.items():
        assert uid == a_uid and gid == users.team_gid, rel
        if (Path(root) / rel).is_dir():
            assert mode == 0o2770, (rel, oct(mode))  # setgid: new files get the team's group
        else:
            assert mode == 0o660, (rel, oct(mode))  # group-readable config.json, lock files too
    assert {".", "config.json", "v1/locks", f"v1/locks/{key(50)[:2]}"} <= set(modes)

    b = run_as(users.b, b_uses, root)
    assert b["trusted"] and b["untrusted"] == {}
    assert b["config"] == {"max_size": 123456789, "lock_timeout": 7.0}
    assert (b["max_size"], b["lock_timeout"]) == (123456789, 7.0)  # A's settings apply to B
    assert b["hits"] == [True] * 3
    assert b["put"] is True and b["writable"] is True
    assert b["held"] == [True, True]  # real locks, not no-op ones
    assert b["removed"] is True
    assert b["stats"]["entries"] == 3  # 3 of A's + 1 of B's - 1 removed: one set of totals

    b_entry = Layout(Path(root)).entry(key(10))
    st = b_entry.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (b_uid, users.team_gid, 0o660)

    back = run_as(users.a, a_reads_b, root)
    assert back["hit"] is True
    assert back["stats"]["hits"] == 3 + 3 + 1 and back["stats"]["puts"] == 3 + 1


def test_a_lock_held_by_one_user_blocks_the_other(users, base):
    """Lock files are shared for real: B waits for (and times out on) a lock A holds."""
    root = str(base / "cache")
    run_as(users.a, a_creates, root)
    started, release, results = CTX.Event(), CTX.Event(), CTX.Queue()
    holder = CTX.Process(target=_as_user, args=(users.a, {"KCACHE_SHARED": "1"}, hold_lock,
                                               (root, key(0)), results, started, release))
    holder.start()
    try:
        assert started.wait(60)
        assert run_as(users.b, b_waits, root, key(0)) == "timed out"
    finally:
        release.set()
        holder.join(60)
    assert results.get(timeout=10) == ("ok", True)
    assert run_as(users.b, b_waits, root, key(0)) == "acquired"


def test_without_shared_mode_another_users_cache_is_not_used(users, base):
    root = str(base / "cache")
    run_as(users.a, a_creates, root)
    out = run_as(users.b, b_private, root, env={})
    assert out["get"] is False and out["put"] is False and out["trusted"] is False
    untrusted = [w for w in out["warnings"] if "is not trusted" in w]
    assert len(untrusted) == 1 and "owned by another user" in untrusted[0], out["warnings"]
    assert "KCACHE_SHARED=1" in untrusted[0]


def test_config_set_first_creates_a_shared_root(users, base):
    """``kcache config set`` as the first command in shared mode creates the root with the
    store's modes (02770), so the group can use it."""
    root = str(base / "fresh")

    def set_only(root: str) -> dict:
        assert cli_main.main(["--dir", root, "config", "set", "max_size", "1G"]) == 0
        return _modes(root)

    modes = run_as(users.a, set_only, root)
    assert modes["."][0] == 0o2770 and modes["config.json"][0] == 0o660
    assert run_as(users.b, b_uses, root)["trusted"]


# -- a swap below the shared root while a process runs (issue 17, item 2) -------------------------

def a_private(private: str) -> dict:
    """User A's private cache (no KCACHE_SHARED): three entries, used long ago."""
    s = Store(private)
    puts = [s.put(key(100 + i), entry(100 + i)) for i in range(3)]
    s.flush()
    for _k, path, _st in s.local.scan():
        age(path, 90 * 86400)
    return {"puts": puts}


def a_long_run(root: str, started, go) -> dict:
    """User A, shared mode: open the store and use it (descriptors of its folders are kept),
    wait for ``go`` (the swap happens meanwhile), then prune, put, get, lock, verify, flush."""
    s = Store(root)
    assert s.get(key(0)) == entry(0) and s.put(key(1), entry(1))
    s.flush()
    started.set()
    assert go.wait(60)
    out = {}
    rep = s.prune(max_size=1)
    out["pruned"] = sorted(i.key for i in rep.removed)
    out["put"] = s.put(key(2), entry(2))
    out["get"] = s.get(key(100)) is not None  # a key of the private cache
    with s.lock(key(101)):
        pass
    out["verify"] = s.verify(fix=True).checked
    out["cleared"] = int(s.clear())
    s.record(compiles=1)
    s.flush()
    out["stats"] = s.stats().as_dict()["puts"]
    return out


def b_swaps(root: str, private: str) -> None:
    """User B (group member): rename <root>/v1 and put a symlink to A's private bucket."""
    os.rename(os.path.join(root, "v1"), os.path.join(root, "v1.old"))
    os.symlink(os.path.join(private, "v1"), os.path.join(root, "v1"))


def test_a_swap_below_the_shared_root_reaches_nothing_outside_it(users, base, tmp_path):
    """While A's process runs on the shared root, B renames v1 and symlinks A's private
    cache in its place: A's prune, put, get, lock, verify, clear and counters never touch
    the private cache (no entry deleted or read, no lock or stats file written there)."""
    root = str(base / "cache")
    home = base.parent / "a-home"  # A's own folder, out of B's reach
    home.mkdir()
    a_pw = pwd.getpwnam(users.a)
    os.chown(home, a_pw.pw_uid, a_pw.pw_gid)
    os.chmod(home, 0o711)  # B may name paths inside (a symlink target), not list or write
    private = str(home / "private")
    assert run_as(users.a, a_private, private, env={})["puts"] == [True] * 3
    assert run_as(users.a, a_creates, root)["puts"] == [True] * 3
    before = snapshot(Path(private))
    assert any(p.endswith(".kce") for p in before)

    started, go, results = CTX.Event(), CTX.Event(), CTX.Queue()
    runner = CTX.Process(target=_as_user, args=(users.a, {"KCACHE_SHARED": "1"}, a_long_run,
                                               (root,), results, started, go))
    runner.start()
    try:
        assert started.wait(60)
        run_as(users.b, b_swaps, root, private)
        assert os.path.islink(os.path.join(root, "v1"))
    finally:
        go.set()
        runner.join(120)
    status, value = results.get(timeout=10)
    assert status == "ok", value
    assert runner.exitcode == 0
    assert value["get"] is False  # the private entry is never served through the swap
    assert not set(value["pruned"]) & {key(100 + i) for i in range(3)}
    assert snapshot(Path(private)) == before  # same files, inodes, sizes, mtimes, bytes

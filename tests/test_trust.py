"""Trust rules 3 and 4 (issue 7, docs/security.md), with real files and real processes.

Rule 3: nothing outside the root is ever deleted, moved or written: a symlinked shard, lock,
stats or quarantine folder is skipped (one warning naming it), and only kcache's own temp
files of the current user are swept.
Rule 4: a root or read-only layer owned by another user, or writable by others (by its group
too, unless shared mode or the user's private group) is not trusted: one warning, not used.
Roots are created 0700.
"""
from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import stat
import warnings
from pathlib import Path

import pytest

from kcache import Store, entry as fmt
from kcache.disk.fsio import TEMP_RE, temp_name
from kcache.disk.layout import Layout
from kcache.warn import KcacheWarning
from trustkit import (DAY, IS_ROOT, OTHER_UID, age, entry, json_out, key, no_traceback, run_cli,
                      run_py, same_shard_keys, snapshot)

# -- rule 3: symlinked folders inside the root ---------------------------------------------------

#: A program's life in one process: gets, puts, a corrupt entry met (quarantine), and puts
#: under a 1-byte cap (eviction, with its sweep of old temp files).
WORKLOAD = r"""
import json, sys
from kcache import Store
from trustkit import entry
root, keys, bad, fresh = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
s = Store(root)
served = [s.get(k) for k in keys]
puts = [s.put(k, entry(i)) for i, k in enumerate(keys)]
s.get(bad)
tiny = Store(root, max_size=1)
evicting = [tiny.put(k, entry(i)) for i, k in enumerate(fresh)]
s.flush(); tiny.flush()
print(json.dumps({"served": [e.artifacts["cubin"].hex() if e else None for e in served],
                  "puts": puts, "evictions": tiny.stats().evictions}))
"""

LINKED = {  # which folder of the root becomes a symlink to the canary folder outside it
    "entry shard": lambda lay, k: lay.entries / k[:2],
    "lock shard": lambda lay, k: lay.locks / k[:2],
    "locks": lambda lay, k: lay.locks,
    "stats": lambda lay, k: lay.stats,
    "quarantine": lambda lay, k: lay.quarantine,
}
CANARY_CUBIN = b"CANARY" * 20


def _fill_canary(canary, shard_keys) -> None:
    """Files kcache would read, lock, sweep, move or delete if it followed a symlink into
    ``canary``: entry-, lock-, stats-, quarantine- and temp-named, all 60 days old (older than
    every sweep's age), at the top and in a sub-folder named like the shard."""
    t, t2, t3 = shard_keys
    for folder in (canary, canary / t[:2]):
        folder.mkdir(parents=True, exist_ok=True)
        files = {
            f"{t}.kce": fmt.encode(t, fmt.Entry({"cubin": CANARY_CUBIN}, {})),  # valid: never served
            f"{t2}.kce": b"garbage named like an entry",  # verify --fix would move it
            f"{t3}.lock": b"", f"{t}.lock": b"", "evict.lock": b"",  # lock sweep would delete t3's
            "0.msgpack": b"\x81\xa4hits\xcd\x03\x09", "0.hits.msgpack": b"\x80", "0.lock": b"",
            f"{t}.1700000000000000000.1.abcdef01.kce": b"quarantined long ago",
            temp_name(f"{t}.kce"): b"temp", ".0.msgpack.abcdefgh.tmp": b"temp",
            temp_name("config.json"): b"{}", ".probe.0123abcd.tmp": b"",
            "notes.txt": b"not kcache's",
        }
        for name, data in files.items():
            (folder / name).write_bytes(data)
            age(folder / name, 60 * DAY)


@pytest.mark.slow
@pytest.mark.parametrize("which", list(LINKED))
def test_nothing_outside_the_root_is_deleted_moved_or_written(tmp_path, which):
    root, canary = tmp_path / "cache", tmp_path / "canary"
    lay = Layout(root)
    t, t2, t3 = same_shard_keys(3, key(0)[:2])
    others = [k for k in (key(i) for i in range(100, 112)) if k[:2] != t[:2]]
    bad = others.pop()
    s = Store(root)
    for i, k in enumerate([t, t2, *others]):
        assert s.put(k, entry(i))
    with s.lock(t3):  # its lock folder exists
        pass
    lay.entry(bad).parent.mkdir(parents=True, exist_ok=True)
    lay.entry(bad).write_bytes(b"corrupt entry")
    s.flush()
    _fill_canary(canary, (t, t2, t3))
    link = LINKED[which](lay, t)
    shutil.rmtree(link)
    link.symlink_to(canary, target_is_directory=True)
    before = snapshot(canary)
    keys = json.dumps([t, t2, *others])
    fresh = json.dumps([key(i) for i in range(200, 206)])  # new keys: their sizes are counted

    runs = [run_py(WORKLOAD, root, keys, bad, fresh),
            run_cli("--dir", root, "verify", "--fix"),
            run_cli("--dir", root, "stats", "--recount"),
            run_cli("--dir", root, "rm", "--yes", t[:20], others[0][:20]),
            run_cli("--dir", root, "prune", "--max-size", "1"),
            run_py(WORKLOAD, root, keys, bad, fresh),
            run_cli("--dir", root, "clear", "--yes")]

    assert snapshot(canary) == before
    assert link.is_symlink()
    for done in runs:
        no_traceback(done)
        assert done.returncode in (0, 1, 2), done.stderr
        # one warning per process at most, naming the symlink
        assert done.stderr.count(f"{link} is a symlink") <= 1, done.stderr
    assert any(f"{link} is a symlink" in done.stderr for done in runs), [d.stderr for d in runs]
    assert "hits\t777\n" not in runs[2].stdout  # the canary's counter shard is never read
    for result in (json_out(runs[0]), json_out(runs[5])):
        assert CANARY_CUBIN.hex() not in result["served"]
        assert result["evictions"] > 0  # eviction ran (and swept) with the symlink in place
        assert result["puts"][2:] == [True] * len(others)  # other keys are unaffected
        if which == "entry shard":
            assert result["served"][:2] == [None, None]
            assert result["puts"][:2] == [False, False]  # that shard's keys only


#: A shared root's process: puts under a 1-byte cap (eviction), gets, counters written.
LOCKING = r"""
import json, sys
from kcache import Store
from trustkit import entry, key
s = Store(sys.argv[1], max_size=1)
puts = [s.put(key(i), entry(i)) for i in range(1, 12)]
s.get(key(1)); s.flush()
print(json.dumps({"puts": puts}))
"""


@pytest.mark.parametrize("shared", [False, True], ids=["private", "shared"])
def test_lock_files_planted_as_symlinks_reach_nothing_outside_the_root(tmp_path, shared):
    """A group member of a shared root puts symlinks to another member's file where the
    counter shards' locks, ``evict.lock`` and a key's lock belong. filelock opened a lock file
    ``O_RDWR | O_TRUNC`` through a symlink (and ``fchmod``-ed it 0660) before 3.20.1
    (CVE-2025-68146): the file outside the root was emptied by the next put. Now nothing
    outside the root changes (bytes, mode, times), and the puts go on."""
    root, outside = tmp_path / "cache", tmp_path / "home"
    lay = Layout(root)
    env = {"KCACHE_SHARED": "1"} if shared else {}
    json_out(run_py(LOCKING, root, env=env))  # every lock file and folder made
    outside.mkdir()
    victim = outside / "notes.txt"
    victim.write_bytes(b"precious")
    victim.chmod(0o600)
    planted = [lay.stats_files(shard)[2] for shard in range(16)] + [lay.evict_lock, lay.lock(key(5))]
    for lock in planted:
        lock.unlink(missing_ok=True)
        lock.symlink_to(victim)
    before = snapshot(outside)
    done = run_py(LOCKING, root, env=env)
    no_traceback(done)
    assert json_out(done)["puts"] == [True] * 11
    assert snapshot(outside) == before and victim.read_bytes() == b"precious"
    assert all(lock.is_symlink() for lock in planted)


def test_filelock_is_one_that_never_opens_a_lock_file_through_a_symlink():
    """kcache's lock files rely on filelock's ``O_NOFOLLOW`` (see the test above): the
    requirement excludes the releases without it (before 3.20.1, CVE-2025-68146)."""
    import re
    from importlib.metadata import version

    def release(text):
        return tuple(int(part) for part in text.split(".")[:3])

    floor = re.findall(r'"filelock>=([0-9.]+)"', (Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert len(floor) == 1 and release(floor[0]) >= (3, 20, 1), floor
    assert release(version("filelock")) >= (3, 20, 1)


def _temp_files(root):
    """Temp-like files in each folder kcache sweeps, for :func:`test_only_own_kcache_temp_files_are_swept`:
    {"ours_old": [...], "ours_new": [...], "theirs": [...], "foreign": [...]}."""
    lay = Layout(root)
    k = key(0)
    targets = {root: "config.json", lay.bucket: "toolchain.msgpack",
               lay.entries / k[:2]: f"{k}.kce", lay.stats: "0.msgpack"}
    files = {"ours_old": [], "ours_new": [], "theirs": [], "foreign": []}
    for folder, target in targets.items():
        for kind in ("ours_old", "ours_new", "theirs"):
            p = folder / temp_name(target)
            assert TEMP_RE.fullmatch(p.name)
            files[kind].append(p)
        for name in (f".{target}.tmp", f".{target}.ZZZZZZZZ.tmp", f".x.{'0' * 16}.tmp",
                     f"{target}.{'0' * 16}.tmp", f".{target}.{'0' * 16}.tmp.bak"):
            assert not TEMP_RE.fullmatch(name)
            files["foreign"].append(folder / name)
    for kind, paths in files.items():
        for p in paths:
            p.write_bytes(b"temp")
            if kind == "theirs":
                os.chown(p, OTHER_UID, OTHER_UID)
            age(p, 60 if kind == "ours_new" else 7200)
    return files


SWEEPERS = {
    "eviction": lambda root: run_py("from kcache import Store; from trustkit import key, entry\n"
                                    "assert Store(max_size=1).put(key(1), entry(1))",
                                    env={"KCACHE_DIR": str(root)}),
    "prune": lambda root: run_cli("prune", env={"KCACHE_DIR": str(root)}),
    "clear": lambda root: run_cli("clear", "--yes", env={"KCACHE_DIR": str(root)}),
}


@pytest.mark.skipif(not IS_ROOT, reason="files of another user need chown (root)")
@pytest.mark.parametrize("how", list(SWEEPERS))
def test_only_own_kcache_temp_files_are_swept(tmp_path, how):
    """KCACHE_DIR at a folder that also holds other users' files and other programs' .tmp
    files: only kcache's own temp-name pattern, owned by this user, older than an hour, is
    removed, and counted."""
    root = tmp_path / "scratch"
    s = Store(root)
    assert s.put(key(0), entry(0))
    s.flush()
    files = _temp_files(root)
    done = SWEEPERS[how](root)
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    assert not any(p.exists() for p in files["ours_old"])
    for kind in ("ours_new", "theirs", "foreign"):
        assert all(p.exists() for p in files[kind]), kind
    assert all(p.stat().st_uid == OTHER_UID for p in files["theirs"])
    assert Store(root).stats().temp_swept == len(files["ours_old"])


# -- rule 4: ownership ------------------------------------------------------------------------------

def _other_gid_not_private() -> int:
    """A gid that is not this user's private group (none of that name exists)."""
    gid = 54322
    with pytest.raises(KeyError):
        grp.getgrgid(gid)
    return gid


#: How a folder (the root, v1 or v1/entries) is made untrusted; None: needs no root.
UNTRUSTED = {
    "writable by others": (False, lambda p: os.chmod(p, 0o777)),
    "writable by others, sticky": (False, lambda p: os.chmod(p, 0o1777)),
    "owned by another user": (True, lambda p: os.chown(p, OTHER_UID, -1)),
    "owned by another user, 0755": (True, lambda p: (os.chown(p, OTHER_UID, OTHER_UID), os.chmod(p, 0o755))),
    "writable by a group, not shared": (True, lambda p: (os.chown(p, -1, _other_gid_not_private()),
                                                         os.chmod(p, 0o770))),
}
FOLDERS = {"root": lambda lay: lay.root, "v1": lambda lay: lay.bucket,
           "v1/entries": lambda lay: lay.entries}


def _planted(path, i=7):
    """A cache at ``path`` holding a valid entry (checksum and all) for ``key(i)``."""
    s = Store(path)
    assert s.put(key(i), entry(i))
    s.flush()


#: In one process: what a program gets from an untrusted root or layer.
PROGRAM = r"""
import json, sys, warnings
from kcache import Store
from trustkit import key, entry
warnings.simplefilter("always")
root, layer = sys.argv[1], sys.argv[2]
s = Store(root, readonly_roots=[layer] if layer else None)
created = []
def create():
    created.append(1)
    return entry(99)
got = s.get(key(7))
e, hit = s.get_or_create(key(7), create)
print(json.dumps({"get": got is not None, "hit": hit, "created": len(created),
                  "put": s.put(key(8), entry(8)), "trusted": s.trusted, "untrusted": s.untrusted}))
"""


def _untrusted_lines(stderr: str, path) -> list[str]:
    return [line for line in stderr.splitlines() if f"{path} is not trusted" in line]


@pytest.mark.slow
@pytest.mark.parametrize("where", list(FOLDERS))
@pytest.mark.parametrize("how", list(UNTRUSTED))
def test_untrusted_root_is_not_used(tmp_path, how, where):
    needs_root, make = UNTRUSTED[how]
    if needs_root and not IS_ROOT:
        pytest.skip("chown to another user or group needs root")
    root = tmp_path / "cache"
    _planted(root)
    make(FOLDERS[where](Layout(root)))
    before = snapshot(root)
    done = run_py(PROGRAM, root, "")
    no_traceback(done)
    out = json_out(done)
    assert out["get"] is False and out["hit"] is False and out["created"] == 1  # runs uncached
    assert out["put"] is False and out["trusted"] is False
    assert list(out["untrusted"]) == [str(root)]
    assert len(_untrusted_lines(done.stderr, root)) == 1, done.stderr
    assert snapshot(root) == before  # nothing read was counted, touched or written there
    if where != "root":
        return
    # the CLI says so in one line and exits 1 (never "checked 0 entries", exit 0), listing
    # nothing from it
    for args in (("ls",), ("stats",), ("verify",), ("ls", "--json"), ("verify", "--json"),
                 ("show", key(7)[:12]), ("prune",), ("export", str(root.parent / "b.kcb"))):
        cli = run_cli("--dir", root, *args)
        no_traceback(cli)
        assert cli.returncode == 1, (args, cli.returncode, cli.stderr)
        assert len(cli.stderr.splitlines()) == 1, (args, cli.stderr)
        assert len(_untrusted_lines(cli.stderr, root)) == 1, (args, cli.stderr)
        assert key(7)[:12] not in cli.stdout, (args, cli.stdout)
    dir_doc = json.loads(run_cli("--dir", root, "dir", "--json").stdout)
    assert dir_doc["trusted"] is False and dir_doc["writable"] is False
    assert str(root) in dir_doc["untrusted"]
    assert snapshot(root) == before


@pytest.mark.slow
@pytest.mark.parametrize("where", list(FOLDERS))
@pytest.mark.parametrize("how", list(UNTRUSTED))
def test_untrusted_readonly_layer_is_not_used(tmp_path, how, where):
    needs_root, make = UNTRUSTED[how]
    if needs_root and not IS_ROOT:
        pytest.skip("chown to another user or group needs root")
    layer, root = tmp_path / "layer", tmp_path / "cache"
    _planted(layer)
    make(FOLDERS[where](Layout(layer)))
    before = snapshot(layer)
    done = run_py(PROGRAM, root, layer)
    no_traceback(done)
    out = json_out(done)
    assert out["get"] is False and out["hit"] is False and out["created"] == 1
    assert out["put"] is True and out["trusted"] is True  # the writable root is fine
    assert list(out["untrusted"]) == [str(layer)]
    assert len(_untrusted_lines(done.stderr, layer)) == 1, done.stderr
    assert snapshot(layer) == before
    if where != "root":
        return
    cli = run_cli("--dir", root, "ls", "--json", env={"KCACHE_READONLY_DIRS": str(layer)})
    no_traceback(cli)
    assert len(_untrusted_lines(cli.stderr, layer)) == 1, cli.stderr
    listed = json.loads(cli.stdout)["entries"]
    assert listed and all(e["root"] == str(root) for e in listed)  # the layer lists nothing


def test_trusted_layer_serves_its_entries(tmp_path):
    """The control of the two tests above: the same planted entry, in a layer that is ours and
    not writable by others, is served."""
    layer = tmp_path / "layer"
    _planted(layer)
    out = json_out(run_py(PROGRAM, tmp_path / "cache", layer))
    assert out["get"] is True and out["hit"] is True and out["created"] == 0
    assert out["untrusted"] == {}


@pytest.mark.skipif(not IS_ROOT, reason="root-owned layers are made by root")
def test_root_owned_layer_not_writable_by_others_is_trusted(tmp_path):
    """A layer as a Docker COPY leaves it (root-owned, 0755) is trusted by any user; the
    same layer made group-writable by a group that is not the user's private group is not."""
    layer = tmp_path / "layer"
    _planted(layer)
    for p in [layer, *layer.rglob("*")]:
        os.chown(p, 0, 0)
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    with warnings.catch_warnings():
        warnings.simplefilter("error", KcacheWarning)
        assert Store(tmp_path / "cache", readonly_roots=[layer]).get(key(7)) == entry(7)
    os.chown(layer, 0, _other_gid_not_private())
    os.chmod(layer, 0o775)
    with pytest.warns(KcacheWarning, match="writable by its group"):
        assert Store(tmp_path / "cache2", readonly_roots=[layer]).get(key(7)) is None


@pytest.mark.skipif(not IS_ROOT, reason="changing a folder's group needs root")
def test_group_writable_private_group_is_trusted(tmp_path):
    """A group-writable root whose group is the user's private group (same name, no other
    members) is trusted: on such systems umask 002 makes every folder so."""
    me = pwd.getpwuid(os.geteuid())
    try:
        group = grp.getgrnam(me.pw_name)
    except KeyError:
        pytest.skip(f"no private group named {me.pw_name}")
    if set(group.gr_mem) - {me.pw_name}:
        pytest.skip(f"group {me.pw_name} has other members")
    root = tmp_path / "cache"
    _planted(root)
    os.chown(root, -1, group.gr_gid)
    os.chmod(root, 0o770)
    out = json_out(run_py(PROGRAM, root, ""))
    assert out["get"] is True and out["put"] is True and out["untrusted"] == {}


def test_roots_are_created_0700(tmp_path):
    """Whatever the umask, a new root and everything in it is this user's only (0700 folders,
    0600 files), so nobody else can plant an entry."""
    code = ("import os, sys\nos.umask(0)\nfrom kcache import Store\nfrom trustkit import key, entry\n"
            "s = Store(sys.argv[1]); assert s.put(key(1), entry(1))\n"
            "with s.lock(key(2)): pass\ns.flush()\ns.get(key(3))\n")
    root = tmp_path / "deep" / "cache"
    done = run_py(code, root)
    assert done.returncode == 0, done.stderr
    seen = {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in [root, *root.rglob("*")]}
    assert {"v1/entries", "v1/locks", "v1/stats", "v1/quarantine"} <= set(seen)
    for name, mode in seen.items():
        want = 0o700 if (root / name).is_dir() else 0o600
        assert mode == want, (name, oct(mode))


# -- what an untrusted root cannot reach: its config.json, its counters; file modes ----------------

@pytest.mark.skipif(not IS_ROOT, reason="a root of another user needs chown (root)")
def test_foreign_root_cannot_switch_shared_mode_on_through_its_config(tmp_path, monkeypatch):
    """A root owned by another user, group-shared with us, whose own config.json says
    shared: true (and a tiny max_size): without KCACHE_SHARED in our environment it is not
    trusted, its config.json is never read, and its planted entry is never served."""
    root = tmp_path / "foreign"
    _planted(root)
    (root / "config.json").write_text(json.dumps({"shared": True, "max_size": 1}))
    gid = os.getegid()
    for path in [root, *root.rglob("*")]:
        os.chown(path, OTHER_UID, gid, follow_symlinks=False)
        os.chmod(path, 0o2770 if path.is_dir() else 0o660)
    monkeypatch.delenv("KCACHE_SHARED", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KcacheWarning)
        s = Store(root)
        assert not s.trusted and s.get(key(7)) is None
    assert s.settings.shared is False and s.settings.max_size != 1  # config.json not read
    monkeypatch.setenv("KCACHE_SHARED", "1")  # the user's own choice: then it is shared
    assert Store(root).trusted


@pytest.mark.skipif(not IS_ROOT, reason="a root of another user needs chown (root)")
def test_untrusted_root_counters_are_not_read(tmp_path):
    root = tmp_path / "foreign"
    _planted(root)
    assert Store(root).stats().puts == 1
    os.chown(root, OTHER_UID, -1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KcacheWarning)
        st = Store(root).stats()
    assert st.puts == 0 and st.entries == 0  # its files are not this process's to read


@pytest.mark.parametrize("mode", [0o666, 0o646])
def test_entry_file_writable_by_others_is_not_served(tmp_path, mode):
    layer = tmp_path / "layer"
    _planted(layer)
    path = Store(layer).header(key(7)).path
    os.chmod(path, mode)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        s = Store(tmp_path / "root", readonly_roots=[layer])
        assert s.get(key(7)) is None
    assert any("writable by every user" in str(w.message) for w in rec)


def test_verify_names_the_real_problem_of_a_file_already_found_bad(tmp_path):
    layer = tmp_path / "layer"
    Store(layer).put(key(2), entry(2))
    Store(layer).header(key(2)).path.write_bytes(b"garbage" * 20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KcacheWarning)
        s2 = Store(tmp_path / "other", readonly_roots=[layer])
        assert s2.get(key(2)) is None  # found bad (and remembered) in this process
        report = s2.verify()
    assert [reason for _p, reason in report.corrupt] == ["bad magic"]


def test_a_refused_files_reason_says_who_may_write_it():
    """Every user (o+w), its group (g+w outside shared mode, a group not the user's own) or
    another owner: the reason names the one that applies, and a fix for the group case."""
    from kcache.disk.fsio import Trust
    uid = os.geteuid()
    others = [g.gr_gid for g in grp.getgrall() if g.gr_name != pwd.getpwuid(uid).pw_name]
    if not others:
        pytest.skip("no group other than the user's own")

    def st(mode, owner=uid, gid=others[0]):
        return os.stat_result((stat.S_IFREG | mode, 0, 0, 1, owner, gid, 0, 0, 0, 0))

    trust = Trust()
    assert trust.file_problem(st(0o646)) == "writable by every user (mode 646)"
    why = trust.file_problem(st(0o664))
    assert why.startswith("writable by its group ") and "(mode 664; set KCACHE_SHARED=1" in why
    assert not trust.file_ok(st(0o664))
    assert trust.file_problem(st(0o644, owner=uid + 12345)).startswith("owned by another user")


def test_a_private_layer_another_user_cannot_enter_gets_one_warning_that_says_why(tmp_path):
    """A layer copied without the chmod of docs/containers.md (kcache's 0700/0600 modes, owned
    by root) read by another user: one warning, ``.../v1 cannot be examined: Permission
    denied``. ``v1/`` could not be stat-ed, and a second warning said the folder has ``no v1/
    in it``, which is not so."""
    import subprocess
    import sys

    import userkit
    base = userkit.shared_base("kcache-private-layer-")
    try:
        with userkit.users("app") as users:
            stage = base / "mounts"
            stage.mkdir(mode=0o700)
            env = {"PATH": os.environ.get("PATH", ""), "HOME": str(base / "home")}
            (base / "home").mkdir(mode=0o777)
            userkit.probe(users["app"], stage, env)
            layer = base / "layer"
            _planted(layer)  # root's, private: 0700 folders
            env["KCACHE_READONLY_DIRS"] = str(layer)
            done = userkit.run_as(users["app"], [sys.executable, "-m", "kcache", "--dir",
                                                 base / "home" / "cache", "ls"],
                                  env=env, cwd="/", stage=stage, timeout=120)
            assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
            said = [line for line in done.stderr.splitlines() if str(layer) in line]
            assert said == [f"kcache: the read-only layer {layer} is not trusted and not used: "
                            f"{layer}/v1 cannot be examined: Permission denied"], said
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)

"""Path resolution below a root (kcache.paths): a folder swapped for a symlink while a store
is open leads nowhere. (With two real users and a shared root: test_shared_mode.py.)"""
import errno
import os

import pytest

from kcache import Store
from kcache.disk.paths import RootDirs
from trustkit import age, entry, key, snapshot


def _victim(tmp_path):
    victim = tmp_path / "victim"
    v = Store(victim)
    for i in range(3):
        assert v.put(key(100 + i), entry(100 + i))
    v.flush()
    for _k, path, _st in v.local.scan():
        age(path, 90 * 86400)
    return victim


@pytest.mark.filterwarnings("ignore::kcache.warn.KcacheWarning")  # warned: a symlink, skipped
def test_a_bucket_swapped_mid_run_is_never_followed(tmp_path):
    victim = _victim(tmp_path)
    before = snapshot(victim)
    root = tmp_path / "cache"
    s = Store(root)
    assert s.put(key(0), entry(0)) and s.get(key(0)) == entry(0)
    s.flush()
    os.rename(root / "v1", root / "v1.old")
    os.symlink(victim / "v1", root / "v1")
    report = s.prune(max_size=1)
    assert not {i.key for i in report.removed} & {key(100 + i) for i in range(3)}
    assert s.get(key(100)) is None  # never served through the symlink
    s.put(key(1), entry(1))
    with s.lock(key(101)):
        pass
    s.verify(fix=True)
    s.clear()
    s.record(compiles=1)
    s.flush()
    s.stats()
    assert snapshot(victim) == before


def test_check_drops_a_swapped_folder_and_its_descendants(tmp_path):
    root = tmp_path / "r"
    dirs = RootDirs(root)
    shard = dirs.folder("v1/entries/ab", create=True)
    assert dirs.folder("v1/entries/ab") == shard  # kept: a hit walks nothing
    assert dirs.check() is False
    os.rename(root / "v1", root / "v1.old")
    (root / "elsewhere").mkdir()
    os.symlink(root / "elsewhere", root / "v1")
    assert dirs.check("v1/entries/ab") is True
    try:
        dirs.folder("v1/entries/ab")
    except OSError as exc:
        assert exc.errno == errno.ELOOP
    else:
        raise AssertionError("walked through a symlink")
    assert not os.listdir(root / "elsewhere")


def test_a_missing_folder_is_named_and_found_once_made(tmp_path):
    """folder() walks from the deepest folder it holds: an absent one on the way raises
    ENOENT naming that folder (not the one asked for), nothing absent is remembered, a
    symlink on the way is ELOOP, and once made the folder is reached."""
    root = tmp_path / "root"
    (root / "v1").mkdir(parents=True)
    dirs = RootDirs(root)
    assert dirs.folder("v1") >= 0  # held: the next walk starts from it
    with pytest.raises(FileNotFoundError) as caught:
        dirs.folder("v1/entries/ab")
    assert caught.value.filename == str(root / "v1" / "entries")
    (root / "v1" / "entries" / "ab").mkdir(parents=True)
    fd = dirs.folder("v1/entries/ab")
    assert os.path.samestat(os.fstat(fd), os.stat(root / "v1" / "entries" / "ab"))
    assert dirs.folder("v1/entries") == dirs.folder("v1/entries")  # kept on the way
    (root / "v1" / "elsewhere").mkdir()
    os.symlink(root / "v1" / "elsewhere", root / "v1" / "link")
    with pytest.raises(OSError) as caught:
        dirs.folder("v1/link/ab")
    assert caught.value.errno == errno.ELOOP
    made = RootDirs(tmp_path / "new")
    fd = made.folder("v1/entries", create=True)
    assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "new" / "v1" / "entries"))

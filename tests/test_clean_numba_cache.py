"""``kcache clean-numba-cache DIR... [--dry-run]``: numba's own cache files (``*.nbi``,
``*.nbc``, ``*.lcs`` named as numba names them) found, listed and removed; never a link
followed, never anything else removed, one line for a bad DIR. Real files, real links, and
the files a real numba writes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from clikit import run

CACHE_FILES = ["__pycache__/kernels.axpy-7.py311.nbi", "__pycache__/kernels.axpy-7.py311.0.nbc",
               "__pycache__/kernels.axpy-7.py311.12.nbc", "__pycache__/kernels.axpy-7.py311.lcs",
               "sub/__pycache__/mod.Outer.k-30.py310.nbi", "cache/x.f-1.py313t.0.nbc"]
KEPT = ["__pycache__/kernels.cpython-311.pyc", "notes.nbi", "__pycache__/a.nbc",
        "__pycache__/kernels.axpy-7.nbi", "kernels.py", "__pycache__/k-1.py311.nbi.bak"]


def tree(tmp_path: Path) -> tuple[Path, Path]:
    """A project folder with numba cache files, files that only look alike, a link named
    like a cache file to a file outside, and a link to a folder outside holding cache files."""
    app, outside = tmp_path / "app", tmp_path / "outside"
    for rel in CACHE_FILES + KEPT:
        (app / rel).parent.mkdir(parents=True, exist_ok=True)
        (app / rel).write_bytes(b"x" * (len(rel) + 1))
    (outside / "__pycache__").mkdir(parents=True)
    (outside / "__pycache__" / "o.k-1.py311.nbi").write_bytes(b"outside")
    (outside / "precious.txt").write_bytes(b"precious")
    (app / "__pycache__" / "evil.k-1.py311.nbi").symlink_to(outside / "precious.txt")
    (app / "linked").symlink_to(outside, target_is_directory=True)
    return app, outside


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() or p.is_symlink())


def test_dry_run_lists_and_removes_nothing_then_the_run_removes_only_those(tmp_path):
    app, outside = tree(tmp_path)
    before = listing(app)
    done = run(["clean-numba-cache", str(app), "--dry-run", "--json"])
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    expected = sorted(str(app / rel) for rel in CACHE_FILES)
    assert sorted(f["path"] for f in doc["files"]) == expected
    assert doc["count"] == len(CACHE_FILES) and doc["dry_run"] is True
    assert doc["bytes"] == sum(len(rel) + 1 for rel in CACHE_FILES)
    assert doc["dirs"] == [str(app)] and doc["not_removed"] == doc["unreadable"] == []
    assert listing(app) == before
    done = run(["clean-numba-cache", str(app)])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "path\tsize" and sorted(l.split("\t")[0] for l in lines[1:]) == expected
    assert done.stderr == f"kcache: removed {len(CACHE_FILES)} numba cache files " \
                          f"({sum(len(r) + 1 for r in CACHE_FILES)} B) under {app}\n"
    left = listing(app)
    assert [rel for rel in CACHE_FILES if rel in left] == []
    assert all(rel in left for rel in KEPT)
    # the link named like a cache file is left, and so is what it points to; the linked
    # folder was not entered
    assert os.path.islink(app / "__pycache__" / "evil.k-1.py311.nbi")
    assert (outside / "precious.txt").read_bytes() == b"precious"
    assert (outside / "__pycache__" / "o.k-1.py311.nbi").exists()
    again = run(["clean-numba-cache", str(app)])
    assert again.returncode == 0 and again.stdout == "path\tsize\n"
    assert again.stderr == f"kcache: no numba cache files under {app}\n"


@pytest.mark.parametrize("bad, said", [
    ("missing", "does not exist"),
    ("app/kernels.py", "is not a folder"),
    ("linked-app", "is a symbolic link, never followed"),
    ("", "an empty DIR"),
])
def test_a_bad_dir_is_one_line_and_nothing_is_removed(tmp_path, bad, said):
    app, _outside = tree(tmp_path)
    (tmp_path / "linked-app").symlink_to(app, target_is_directory=True)
    before = listing(app)
    target = str(tmp_path / bad) if bad else ""
    done = run(["clean-numba-cache", str(app), target])  # the good DIR first: still untouched
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1 and said in done.stderr, done.stderr
    assert done.stdout == "" and listing(app) == before


def test_function_globs_keep_other_functions_files(tmp_path):
    """--function 'kernels.*': the files of kernels.py's functions only (a project with
    numba CPU caches of other modules keeps those)."""
    app, _outside = tree(tmp_path)
    done = run(["clean-numba-cache", str(app), "--function", "kernels.*", "--function",
                "nothing*", "--json"])
    assert done.returncode == 0, done.stderr
    assert sorted(f["path"] for f in json.loads(done.stdout)["files"]) == sorted(
        str(app / rel) for rel in CACHE_FILES if "kernels." in rel)
    assert (app / "sub/__pycache__/mod.Outer.k-30.py310.nbi").exists()
    blank = run(["clean-numba-cache", str(app), "--function", " "])
    assert blank.returncode == 2 and "--function needs a value" in blank.stderr


def test_nested_dirs_name_each_file_once(tmp_path):
    app, _outside = tree(tmp_path)
    doc = json.loads(run(["clean-numba-cache", str(app), str(app / "sub"), "-n", "--json"]).stdout)
    paths = [f["path"] for f in doc["files"]]
    assert len(paths) == len(set(paths)) == len(CACHE_FILES)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root removes files from a read-only folder")
def test_a_file_that_cannot_be_removed_is_named_and_the_rest_go(tmp_path):
    app, _outside = tree(tmp_path)
    locked = app / "sub" / "__pycache__"
    locked.chmod(0o555)
    try:
        done = run(["clean-numba-cache", str(app)])
    finally:
        locked.chmod(0o755)
    assert done.returncode == 1
    assert f"cannot remove {locked}/mod.Outer.k-30.py310.nbi" in done.stderr
    assert not (app / "__pycache__" / "kernels.axpy-7.py311.nbi").exists()


def test_a_refused_removal_is_named_and_the_rest_go_as_root_too(tmp_path, monkeypatch):
    """The same as root (which a read-only folder does not stop): the file system refusing
    one removal (EPERM, as an immutable file does)."""
    app, _outside = tree(tmp_path)
    real_unlink = os.unlink

    def unlink(path, *args, **kwargs):
        if str(path).endswith("mod.Outer.k-30.py310.nbi"):
            raise PermissionError(1, "Operation not permitted")
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    done = run(["clean-numba-cache", str(app), "--json"])
    assert done.returncode == 1
    doc = json.loads(done.stdout)
    locked = str(app / "sub" / "__pycache__" / "mod.Outer.k-30.py310.nbi")
    assert doc["not_removed"] == [{"path": locked, "reason": "Operation not permitted"}]
    assert doc["count"] == len(CACHE_FILES) - 1 and locked not in [f["path"] for f in doc["files"]]
    assert done.stderr == f"kcache: cannot remove {locked}: Operation not permitted\n"
    assert os.path.exists(locked)


def test_the_files_a_real_numba_writes_are_found(tmp_path):
    """numba's own cache=True (a CPU function: the same cache files and names as
    numba-cuda's; numba-cuda's need a GPU to be written) in a real process; then
    clean-numba-cache finds exactly what it wrote, and numba-cuda's names match too."""
    pytest.importorskip("numba")
    (tmp_path / "cpu.py").write_text(textwrap.dedent("""
        import numba

        @numba.njit(cache=True)
        def add(a, b):
            return a + b
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    done = subprocess.run([sys.executable, "-c", "import cpu; print(cpu.add(1, 2))"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout == "3\n", done.stderr
    written = sorted(str(p) for p in (tmp_path / "__pycache__").iterdir()
                     if p.suffix in (".nbi", ".nbc"))
    assert len(written) >= 2
    doc = json.loads(run(["clean-numba-cache", str(tmp_path), "--json"]).stdout)
    assert sorted(f["path"] for f in doc["files"]) == written
    assert (tmp_path / "__pycache__").is_dir()  # the folder stays

    from kcache.cli.cmd_clean_numba_cache import NAME
    cuda_dispatcher = pytest.importorskip("numba.cuda.dispatcher")
    sys.path.insert(0, str(tmp_path))
    try:
        (tmp_path / "kern.py").write_text("def kern(x):\n    x[0] = 1\n")
        import kern
        cache = cuda_dispatcher.CUDACache(kern.kern)
        base = cache._impl.filename_base
    except AttributeError:
        pytest.skip("this numba-cuda names its cache elsewhere")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("kern", None)
    for name in (f"{base}.nbi", f"{base}.0.nbc", f"{base}.lcs"):
        assert NAME.fullmatch(name), name


@pytest.fixture
def deep_tree(tmp_path):
    """make(depth): a chain of ``depth`` nested folders with a cache file (and a kept file)
    at levels 1, depth // 2 and depth -> (top, cache files). Built and removed one level at
    a time (pathlib's rglob and shutil.rmtree, pytest's clean-up, recurse)."""
    made = []

    def make(depth: int) -> tuple[Path, list[Path]]:
        top = tmp_path / f"deep{depth}"
        folder, files = top, []
        made.append((top, depth))
        for level in range(1, depth + 1):
            folder = folder / "d"
            folder.mkdir(parents=True)
            if level in (1, depth // 2, depth):
                (folder / f"m.k{level}-1.py311.nbi").write_bytes(b"x" * level)
                (folder / "kept.py").write_bytes(b"kept")
                files.append(folder / f"m.k{level}-1.py311.nbi")
        return top, files

    yield make
    for top, depth in made:
        for level in range(depth, -1, -1):
            folder = os.path.join(top, *["d"] * level)
            for name in os.listdir(folder) if os.path.isdir(folder) else []:
                if name != "d":
                    os.unlink(os.path.join(folder, name))
            if os.path.isdir(folder):
                os.rmdir(folder)


def test_a_tree_deeper_than_the_recursion_limit_is_walked(deep_tree):
    top, files = deep_tree(1500)
    done = run(["clean-numba-cache", str(top), "--dry-run", "--json"])
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert sorted(f["path"] for f in doc["files"]) == sorted(map(str, files))
    assert all(f.exists() for f in files)
    done = run(["clean-numba-cache", str(top)])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == f"kcache: removed 3 numba cache files (2.2 KiB) under {top}\n"
    assert not any(f.exists() for f in files)
    assert all((f.parent / "kept.py").exists() for f in files)


def test_a_low_limit_of_open_files_does_not_stop_the_walk(deep_tree):
    """``ulimit -n 64`` in a real process: the walk holds a descriptor or two, not one per
    level (os.fwalk's stopped mid-removal with 'Too many open files')."""
    import resource

    top, files = deep_tree(200)

    def low_limit():
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        limit = 64 if hard == resource.RLIM_INFINITY else min(64, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    done = subprocess.run([sys.executable, "-m", "kcache", "clean-numba-cache", str(top)],
                          env=env, capture_output=True, text=True, timeout=120,
                          preexec_fn=low_limit)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == f"kcache: removed 3 numba cache files (301 B) under {top}\n"
    assert not any(f.exists() for f in files)


def after_listing(monkeypatch, folder: Path, action) -> None:
    """``action()`` once, right after the walk lists ``folder`` (os.scandir on its
    descriptor): another process changing the tree during the walk, at a known point."""
    ident = (folder.stat().st_dev, folder.stat().st_ino)
    real_scandir, done = os.scandir, []

    class Listed(list):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def scandir(target="."):
        if not isinstance(target, int):
            return real_scandir(target)
        st = os.fstat(target)
        with real_scandir(target) as entries:
            listed = Listed(entries)
        if (st.st_dev, st.st_ino) == ident and not done:
            done.append(action())
        return listed

    monkeypatch.setattr(os, "scandir", scandir)


def test_a_folder_gone_during_the_walk_is_skipped_silently(tmp_path, monkeypatch):
    """A folder listed, then removed (another process cleaning too) before the walk enters
    it: skipped as a file gone meanwhile is, not reported as unreadable."""
    import shutil

    app, _outside = tree(tmp_path)
    gone = app / "gone" / "__pycache__"
    gone.mkdir(parents=True)
    (gone / "g.k-1.py311.nbi").write_bytes(b"g")
    after_listing(monkeypatch, app, lambda: shutil.rmtree(app / "gone"))
    done = run(["clean-numba-cache", str(app), "--json"])
    assert not (app / "gone").exists()
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["unreadable"] == [] and doc["count"] == len(CACHE_FILES)


def test_a_folder_moved_during_the_walk_is_found_again_from_the_top(tmp_path, monkeypatch):
    """app/a/b moved to app/z/b while the walk is in app/a/b/c: going back up, ``..`` of b
    is no longer a, so a is opened again from the DIR; z (and b in it) is walked after,
    each file noted once."""
    app, _outside = tree(tmp_path)
    leaf = app / "a" / "b" / "c"
    leaf.mkdir(parents=True)
    (app / "z").mkdir()
    (leaf / "c.k-1.py311.nbi").write_bytes(b"c")
    (app / "a" / "b" / "b.k-1.py311.nbi").write_bytes(b"b")
    (app / "a" / "a.k-1.py311.nbi").write_bytes(b"a")
    (app / "a" / "later").mkdir()  # walked after b ("b" < "later")
    (app / "a" / "later" / "l.k-1.py311.nbi").write_bytes(b"l")
    after_listing(monkeypatch, leaf, lambda: os.rename(app / "a" / "b", app / "z" / "b"))
    done = run(["clean-numba-cache", str(app), "--dry-run", "--json"])
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    names = sorted(os.path.basename(f["path"]) for f in doc["files"])
    assert doc["unreadable"] == [] and doc["count"] == len(CACHE_FILES) + 4
    assert [n for n in names if n[0] in "abcl" and n[1] == "."] == [
        "a.k-1.py311.nbi", "b.k-1.py311.nbi", "c.k-1.py311.nbi", "l.k-1.py311.nbi"]


def test_an_unreadable_folder_is_one_line_and_the_walk_goes_on(tmp_path, monkeypatch):
    """A folder the walk may not open (EACCES; as root too: the open refused here) is named
    once and the rest is walked and removed."""
    app, _outside = tree(tmp_path)
    (app / "locked" / "__pycache__").mkdir(parents=True)
    (app / "locked" / "__pycache__" / "l.k-1.py311.nbi").write_bytes(b"l")
    real_open = os.open

    def refusing_open(path, *args, **kwargs):
        if path == "locked" or str(path).endswith("/locked"):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    done = run(["clean-numba-cache", str(app), "--json"])
    assert done.returncode == 1
    doc = json.loads(done.stdout)
    assert doc["unreadable"] == [{"path": str(app / "locked"), "reason": "Permission denied"}]
    assert doc["count"] == len(CACHE_FILES)
    assert done.stderr == f"kcache: cannot read {app / 'locked'}: Permission denied\n"
    assert (app / "locked" / "__pycache__" / "l.k-1.py311.nbi").exists()

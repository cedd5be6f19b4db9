"""From the folder holding a clone named ``kcache``, ``import kcache`` is the installed
package, not the clone's folder as an empty namespace package (``kcache.jit`` was an
AttributeError there): _kcache_clone_guard.py, installed with an editable install (setup.py);
a regular install needs nothing. Real interpreters in a real folder."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def installed(tmp_path) -> Path:
    """The installed package's folder, as an interpreter started elsewhere finds it."""
    done = python("import kcache; print(kcache.__file__)", tmp_path)
    if done.returncode != 0:
        pytest.skip("kcache is not installed in this environment")
    return Path(done.stdout.strip()).parent


def test_the_folder_holding_a_clone_named_kcache(tmp_path, installed):
    clone = tmp_path / "kcache"  # what `git clone URL kcache` makes: no __init__.py at its top
    for name in ("README.md", "pyproject.toml", "setup.py"):
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        (clone / name).write_bytes((REPO / name).read_bytes())
    (clone / "dispatcher").mkdir()
    (clone / "dispatcher" / "__init__.py").write_text("raise SystemExit('the clone was imported')\n")
    done = python("import kcache, kcache.dispatcher; print(kcache.__file__); print(kcache.jit)",
                  tmp_path)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.splitlines()[0]).parent == installed
    assert "function jit" in done.stdout
    # python -m kcache from there: the installed command
    done = subprocess.run([sys.executable, "-m", "kcache", "--version"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("kcache "), done.stderr


def test_a_regular_package_in_the_current_folder_still_wins(tmp_path, installed):
    """The guard only replaces a namespace package: a folder ``kcache`` with an __init__.py
    (Python started inside a clone, say) is imported as Python always does."""
    (tmp_path / "kcache").mkdir()
    (tmp_path / "kcache" / "__init__.py").write_text("WHO = 'local'\n")
    done = python("import kcache; print(kcache.WHO)", tmp_path)
    assert done.returncode == 0 and done.stdout == "local\n", done.stderr


def test_the_guard_answers_for_kcache_only():
    if importlib.util.find_spec("_kcache_clone_guard") is None:
        pytest.skip("not an editable install: the guard is not installed (nor needed)")
    import _kcache_clone_guard as guard
    assert guard.CloneFolderFinder.find_spec("numpy") is None
    assert guard.CloneFolderFinder.find_spec("kcache", path=["x"]) is None
    assert sum(getattr(f, "__name__", "") == "CloneFolderFinder" for f in sys.meta_path) == 1

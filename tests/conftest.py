"""Shared fixtures: a clean kcache environment and a store in a temp dir; how the tests are
spread over pytest-xdist's workers (pyproject.toml runs the suite with ``-n auto``)."""
import ast
import functools
import os
from pathlib import Path

import pytest

import forkserver
from kcache import warn

# The thousands of Python processes the tests start (the CLI, children, servers) import kcache
# as a user's install does, from bytecode: with PYTHONDONTWRITEBYTECODE set (as some machines
# have it) every one of them would compile kcache's modules from source again (~0.5 s each).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


#: Free space a RAM-backed folder needs to hold the run's temporary folders.
RAM_TEMP_FREE = 1 << 30


def ram_temp_root() -> str | None:
    """``/dev/shm`` (a tmpfs on Linux) when writable with :data:`RAM_TEMP_FREE` free, else None."""
    try:
        vfs = os.statvfs("/dev/shm")
    except OSError:
        return None
    if vfs.f_bavail * vfs.f_frsize >= RAM_TEMP_FREE and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """The run's ``tmp_path`` folders go in RAM (``/dev/shm``) when there is one: every
    ``Store.put`` fsyncs its entry, ~3 ms on an ext4 disk and ~0.03 ms on a tmpfs (the
    8-process store test spends 3x the system time on disk; tests/hostile/harness.py builds
    its corpus there for the same reason). Same file semantics either way. ``--basetemp`` or
    ``PYTEST_DEBUG_TEMPROOT`` (pytest's own override of the parent folder, read when the
    first temp folder is made) still win; xdist's workers get folders under the controller's."""
    if os.environ.get("PYTEST_XDIST_WORKER") or config.option.basetemp:
        return
    if "PYTEST_DEBUG_TEMPROOT" not in os.environ and (ram := ram_temp_root()):
        os.environ["PYTEST_DEBUG_TEMPROOT"] = ram


@functools.lru_cache(maxsize=None)
def shares_a_fixture(path: str) -> bool:
    """Whether the test module at ``path`` defines a fixture of a scope wider than a function
    (``@pytest.fixture(scope="module")``, ``"session"``, ...), read from its source."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        scopes = [kw.value for kw in node.keywords if kw.arg == "scope"]
        if name == "fixture" and scopes and getattr(scopes[0], "value", None) != "function":
            return True
    return False


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``-n N`` (xdist's ``--dist load``), except that the tests of a module defining a module-
    or session-scoped fixture run on one worker: the fixture is built once, as in a serial run
    (the main job, the container recipe, the relocated cache, the hostile corpus), never by two
    workers at once. Every other test goes to whichever worker is free. (``xdist_group`` marks
    are not used: with pytest 9.2 and xdist 3.8 they group nothing, pytest-xdist issue 1386.)
    Any other ``--dist`` is xdist's own."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if shares_a_fixture(str(config.rootpath / module)) else nodeid

    return SharedFixtureScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """On an xdist worker, ``slow`` tests come first (otherwise in collection order): the long
    tests start early and the last ones to finish are short. A module that shares a fixture
    still runs as one unit (the scheduler above), so no module fixture is built twice."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path_factory):
    """No KCACHE_* from the caller's environment; default root inside a temp dir; fresh
    warn-once state."""
    for name in list(os.environ):
        if name.startswith("KCACHE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg")))
    warn.reset()
    yield
    warn.reset()


@pytest.fixture(autouse=True)
def fork_children(request):
    """Python children fork from the suite's fork server (tests/forkserver.py), except those
    of a test marked ``exec_children``: one that checks what a fresh interpreter does."""
    forkserver.install()  # here, not at configure: xdist's controller starts its workers
    forkserver.enabled = request.node.get_closest_marker("exec_children") is None
    yield
    forkserver.enabled = True


@pytest.fixture
def root(tmp_path):
    return tmp_path / "cache"


@pytest.fixture
def store(root):
    from kcache import Store

    return Store(root)

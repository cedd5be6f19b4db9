"""Shared fixtures: a clean kcache environment and a store in a temp dir; the suite's layout
on pytest-xdist's workers (pyproject.toml runs it with ``-n auto``)."""
import os

import pytest

from kcache import warn


def _shared_fixture_modules(item) -> set[str]:
    """Modules (their ``__name__``) that define a module-, package- or session-scoped fixture
    ``item`` uses; fixtures imported from a helper (servers.redis_url) count for the helper."""
    info = getattr(item, "_fixtureinfo", None)
    modules = set()
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        for fixturedef in defs:
            if fixturedef.scope != "function":
                modules.add(getattr(fixturedef.func, "__module__", "") or "")
    return modules


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Under xdist (``--dist loadgroup``), the tests that share a module- or session-scoped
    fixture of a test module run on one worker: the fixture is built once, as in a serial run
    (the main job, the container recipe, the relocated cache, the hostile corpus), and never
    by two workers at once. Helpers' session fixtures (servers: a Redis URL, an S3 endpoint)
    are cheap and shared by every worker; they group nothing. A test's own ``xdist_group``
    mark wins.

    On a worker, the modules holding ``slow`` tests are collected first (each module's own
    order kept), so the long tests start early and the last ones to finish are short."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        module = _module_name(item)
        if module and module in _shared_fixture_modules(item):
            item.add_marker(pytest.mark.xdist_group(name=module))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        slow = {_module_name(item) for item in items if item.get_closest_marker("slow")}
        items.sort(key=lambda item: _module_name(item) not in slow)  # stable


def _module_name(item):
    return getattr(getattr(item, "module", None), "__name__", None)


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


@pytest.fixture
def root(tmp_path):
    return tmp_path / "cache"


@pytest.fixture
def store(root):
    from kcache import Store

    return Store(root)

"""Shared fixtures: a clean kcache environment and a store in a temp dir."""
import pytest

from kcache import warn


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path_factory):
    """No KCACHE_* from the caller's environment; default root inside a temp dir; fresh
    warn-once state."""
    import os

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

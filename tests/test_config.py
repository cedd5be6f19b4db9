import json
import os

import platformdirs
import pytest

from kcache import ConfigError, Store
from kcache.config import (DEFAULT_LOCK_TIMEOUT, DEFAULT_MAX_SIZE, format_size, parse_duration,
                           parse_size, resolve, write_setting)


@pytest.mark.parametrize("text, value", [
    ("1048576", 1048576), (4096, 4096), ("500M", 500 << 20), ("2G", 2 << 30), ("2GiB", 2 << 30),
    ("2GB", 2 * 10**9), ("1.5K", 1536), ("10kb", 10000), ("3 MiB", 3 << 20), ("1T", 1 << 40), ("0", 0),
])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["2Q", "", "G", "-1", "1e9", "two", "2 G B", True, -5])
def test_parse_size_rejects(text):
    with pytest.raises(ConfigError, match="accepted: bytes"):
        parse_size(text, "KCACHE_MAX_SIZE")


@pytest.mark.parametrize("text, value", [
    ("90s", 90), ("30m", 1800), ("12h", 43200), ("7d", 604800), ("2w", 1209600), ("1.5", 1.5),
    (10, 10.0), ("0", 0.0), (" 5 M ", 300),
])
def test_parse_duration(text, value):
    assert parse_duration(text) == value


@pytest.mark.parametrize("text", ["-1", -1, "1y", "abc", "", float("inf"), float("nan"), False])
def test_parse_duration_rejects(text):
    with pytest.raises(ConfigError, match="KCACHE_LOCK_TIMEOUT"):
        parse_duration(text, "KCACHE_LOCK_TIMEOUT")


def test_format_size():
    assert format_size(512) == "512 B"
    assert format_size(1536) == "1.5 KiB"
    assert format_size(2 << 30) == "2.0 GiB"


def test_defaults():
    s = resolve()
    assert s.root == __import__("pathlib").Path(platformdirs.user_cache_dir("kcache", appauthor=False))
    assert (s.max_size, s.lock_timeout, s.readonly_roots, s.disabled, s.shared) == (
        DEFAULT_MAX_SIZE, DEFAULT_LOCK_TIMEOUT, (), False, False)
    assert set(s.origins.values()) == {"default"}


def test_precedence_argument_env_config_default(tmp_path, monkeypatch):
    root = tmp_path / "c"
    write_setting(root, "max_size", "1G")
    write_setting(root, "lock_timeout", "5m")
    write_setting(root, "readonly_dirs", ["/ro/conf"])
    cfg = root / "config.json"

    s = resolve(root)
    assert (s.max_size, s.lock_timeout, s.readonly_roots) == (1 << 30, 300.0, (tmp_path.__class__("/ro/conf"),))
    assert s.origins["max_size"] == f"config {cfg}" and s.origins["root"] == "argument"

    monkeypatch.setenv("KCACHE_MAX_SIZE", "100M")
    monkeypatch.setenv("KCACHE_LOCK_TIMEOUT", "7")
    monkeypatch.setenv("KCACHE_READONLY_DIRS", os.pathsep.join(["/ro/a", "", "/ro/b"]))
    s = resolve(root)
    assert (s.max_size, s.lock_timeout) == (100 << 20, 7.0)
    assert [str(p) for p in s.readonly_roots] == ["/ro/a", "/ro/b"]
    assert s.origins["max_size"] == "env KCACHE_MAX_SIZE"
    assert s.origins["readonly_roots"] == "env KCACHE_READONLY_DIRS"

    s = resolve(root, max_size="3G", lock_timeout=1, readonly_roots=["/x"])
    assert (s.max_size, s.lock_timeout, [str(p) for p in s.readonly_roots]) == (3 << 30, 1.0, ["/x"])
    assert s.origins["max_size"] == s.origins["lock_timeout"] == "argument"


def test_root_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("KCACHE_DIR", str(tmp_path / "envroot"))
    s = resolve()
    assert s.root == tmp_path / "envroot" and s.origins["root"] == "env KCACHE_DIR"
    assert resolve(tmp_path / "arg").root == tmp_path / "arg"


@pytest.mark.parametrize("var, value, accepted", [
    ("KCACHE_MAX_SIZE", "2Q", "accepted: bytes"),
    ("KCACHE_MAX_SIZE", "0", "greater than 0"),
    ("KCACHE_LOCK_TIMEOUT", "-1", "accepted: seconds"),
    ("KCACHE_LOCK_TIMEOUT", "soon", "accepted: seconds"),
    ("KCACHE_DISABLE", "maybe", "accepted: 1/0"),
    ("KCACHE_SHARED", "2", "accepted: 1/0"),
])
def test_bad_environment_values_name_the_variable(monkeypatch, tmp_path, var, value, accepted):
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as info:
        Store(tmp_path / "c")
    assert var in str(info.value) and accepted in str(info.value) and repr(value) in str(info.value)


def test_root_that_is_a_file(tmp_path, monkeypatch):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        Store(f)
    monkeypatch.setenv("KCACHE_DIR", str(f))
    with pytest.raises(ConfigError, match="KCACHE_DIR"):
        Store()


@pytest.mark.parametrize("content, match", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ('{"max_size": "lots"}', "max_size in"),
    ('{"max_size": -3}', "max_size in"),
    ('{"lock_timeout": "-1h"}', "lock_timeout in"),
    ('{"readonly_dirs": 5}', "readonly_dirs in"),
    ('{"shared": "perhaps"}', "shared in"),
])
def test_bad_config_file(tmp_path, content, match):
    root = tmp_path / "c"
    root.mkdir()
    (root / "config.json").write_text(content)
    with pytest.raises(ConfigError, match=match):
        resolve(root)


def test_write_setting_validates_and_removes(tmp_path):
    root = tmp_path / "c"
    with pytest.raises(ConfigError, match="unknown setting 'colour'"):
        write_setting(root, "colour", "red")
    with pytest.raises(ConfigError, match="accepted"):
        write_setting(root, "max_size", "huge")
    path = write_setting(root, "max_size", "2GiB")
    assert json.loads(path.read_text()) == {"max_size": 2 << 30}
    write_setting(root, "shared", "yes")
    assert json.loads(path.read_text()) == {"max_size": 2 << 30, "shared": True}
    write_setting(root, "max_size", None)
    assert json.loads(path.read_text()) == {"shared": True}
    assert resolve(root).shared is True and resolve(root).origins["shared"].startswith("config ")


def test_disable_values(monkeypatch, tmp_path):
    for text, value in [("1", True), ("true", True), ("ON", True), ("0", False), ("no", False)]:
        monkeypatch.setenv("KCACHE_DISABLE", text)
        assert resolve(tmp_path).disabled is value

import json
import os

import platformdirs
import pytest

from kcache import ConfigError, Store
from kcache.config import (DEFAULT_LOCK_TIMEOUT, DEFAULT_MAX_SIZE, format_size, parse_duration,
                           parse_size, resolve, write_setting)


@pytest.mark.parametrize("text, value", [
    ("1048576", 1048576), (4096, 4096), ("500M", 500 << 20), ("2G", 2 << 30), ("2GiB", 2 << 30),
    ("2GB", 2 * 10**9), ("1.5K", 1536), ("10KB", 10000), ("1.5G", 3 << 29), (" 7 B ", 7), ("3 MiB", 3 << 20), ("1T", 1 << 40), ("0", 0),
])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["2Q", "", "G", "-1", "1e9", "two", "2 G B", True, -5,
                                  "\u0665", "1\u0660K", "\uff15M", "5m", "10kb", "2gib"])
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


@pytest.mark.parametrize("content, match", [("{not json", "not valid JSON"), ("[1, 2]", "JSON object")])
def test_broken_config_file_is_ignored_with_a_warning(tmp_path, content, match):
    from kcache.warn import KcacheWarning

    root = tmp_path / "c"
    root.mkdir()
    (root / "config.json").write_text(content)
    with pytest.warns(KcacheWarning, match=match) as rec:
        s = resolve(root)
    assert str(root / "config.json") in str(rec[0].message) and "ignored" in str(rec[0].message)
    assert s.max_size == DEFAULT_MAX_SIZE and s.origins["max_size"] == "default"
    store = Store(root)  # a broken cache never stops the program
    assert store.stats().entries == 0 and list(store.entries()) == []


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '"1G"'])
def test_write_setting_replaces_a_broken_config_file_keeping_a_backup(tmp_path, content):
    from kcache.warn import KcacheWarning

    root = tmp_path / "c"
    root.mkdir()
    (root / "config.json").write_text(content)
    with pytest.warns(KcacheWarning, match="config.json.bad"):
        path = write_setting(root, "max_size", "1G")
    assert json.loads(path.read_text()) == {"max_size": 1 << 30}
    assert (root / "config.json.bad").read_text() == content
    assert resolve(root).max_size == 1 << 30


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


# -- huge, non-finite and signed numbers: one ConfigError quoting the value typed ----------------
NINES = "9" * 400


@pytest.mark.parametrize("text", [NINES, NINES + "T", NINES + ".5", "9" * 30 + "G", 2**63, "1e99",
                                  "inf", "nan", "-0", "+5G", 1.5, float("inf")])
def test_parse_size_rejects_huge_and_odd_values(text):
    with pytest.raises(ConfigError) as info:
        parse_size(text, "KCACHE_MAX_SIZE")
    msg = str(info.value)
    assert msg.startswith(f"KCACHE_MAX_SIZE={text!r} ") and "at most 2**63-1 bytes" in msg


def test_parse_size_limit_is_exact():
    assert parse_size(2**63 - 1) == 2**63 - 1 == parse_size(str(2**63 - 1))
    assert parse_size("2.5K") == 2560 and parse_size("0.5K") == 512


@pytest.mark.parametrize("text", ["0.5", "1.5", "1.9999999999999999999999K", "0.1K", "1.0000000001GB"])
def test_parse_size_refuses_fractions_of_a_byte(text):
    with pytest.raises(ConfigError, match="sizes are whole bytes"):
        parse_size(text, "KCACHE_MAX_SIZE")


def test_parse_size_names_the_unit_spelling():
    with pytest.raises(ConfigError, match="units are spelled 'M', not 'm'"):
        parse_size("5m", "max_size")


def test_durations_accept_ascii_digits_only():
    with pytest.raises(ConfigError, match="not a duration"):
        parse_duration("\u0665m", "older_than")


def test_roots_are_normalised_without_creating_missing_parents(tmp_path):
    root = tmp_path / "nonexist" / ".." / "x"
    s = resolve(root, readonly_roots=[tmp_path / "a" / ".." / "ro"])
    assert s.root == tmp_path / "x" and s.readonly_roots == (tmp_path / "ro",)
    path = write_setting(root, "max_size", "1G")
    assert path == tmp_path / "x" / "config.json" and path.is_file()
    assert not (tmp_path / "nonexist").exists()


@pytest.mark.parametrize("text", [NINES, NINES + "w", "inf", "nan", "1e99", "-0", float("inf"),
                                  float("nan"), 1e300, 10**400, "36526d"])
def test_parse_duration_rejects_huge_and_odd_values(text):
    with pytest.raises(ConfigError) as info:
        parse_duration(text, "KCACHE_LOCK_TIMEOUT")
    msg = str(info.value)
    assert msg.startswith(f"KCACHE_LOCK_TIMEOUT={text!r} ") and "at most 36525d" in msg


def test_parse_duration_negative_zero_and_limit():
    assert str(parse_duration(-0.0)) == "0.0" and parse_duration("36525d") == 36525 * 86400


@pytest.mark.parametrize("where", ["env", "argument", "config", "write_setting"])
def test_huge_max_size_everywhere_is_a_config_error(tmp_path, monkeypatch, where):
    root = tmp_path / "c"
    value = NINES + "T"
    with pytest.raises(ConfigError, match="too large"):
        if where == "env":
            monkeypatch.setenv("KCACHE_MAX_SIZE", value)
            resolve(root)
        elif where == "argument":
            resolve(root, max_size=value)
        elif where == "config":
            root.mkdir()
            (root / "config.json").write_text(json.dumps({"max_size": value}))
            resolve(root)
        else:
            write_setting(root, "max_size", value)


def test_huge_lock_timeout_env_is_rejected_like_inf(tmp_path, monkeypatch):
    for value in (NINES, "inf"):
        monkeypatch.setenv("KCACHE_LOCK_TIMEOUT", value)
        with pytest.raises(ConfigError, match=f"KCACHE_LOCK_TIMEOUT={value!r}"):
            resolve(tmp_path)


# -- roots: empty, blank, relative, duplicates, files --------------------------------------------
@pytest.mark.parametrize("value", ["", "   ", "\t"])
def test_blank_kcache_dir_means_unset(monkeypatch, value):
    monkeypatch.setenv("KCACHE_DIR", value)
    s = resolve()
    assert s.root == __import__("pathlib").Path(platformdirs.user_cache_dir("kcache", appauthor=False))
    assert s.origins["root"] == "default"


@pytest.mark.parametrize("value", ["", "  "])
def test_empty_root_argument_is_an_error(tmp_path, monkeypatch, value):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="is empty"):
        Store(value)
    assert list(tmp_path.iterdir()) == []


def test_paths_are_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KCACHE_DIR", "relcache")
    monkeypatch.setenv("KCACHE_READONLY_DIRS", os.pathsep.join(["ro", "~/img"]))
    s = resolve()
    assert s.root == tmp_path / "relcache" and s.root.is_absolute()
    assert s.readonly_roots == (tmp_path / "ro", __import__("pathlib").Path("~/img").expanduser())
    assert resolve("other").root == tmp_path / "other"


def test_readonly_dirs_blank_duplicate_and_root_dropped(tmp_path, monkeypatch):
    root, a, b = tmp_path / "c", tmp_path / "a", tmp_path / "b"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KCACHE_READONLY_DIRS", os.pathsep.join([str(a), " ", "a", str(b), str(a) + "/", str(root), "c"]))
    assert resolve(root).readonly_roots == (a, b)


def test_readonly_dir_that_is_a_file_is_a_bundle_layer(tmp_path, monkeypatch):
    """A file named in KCACHE_READONLY_DIRS is a bundle layer (issue 36), no longer a
    ConfigError: one that is not a bundle is warned once, naming it and what is accepted,
    and the program runs on without it."""
    from kcache.warn import KcacheWarning
    f = tmp_path / "file"
    f.write_text("x")
    f.chmod(0o644)
    monkeypatch.setenv("KCACHE_READONLY_DIRS", str(f))
    assert resolve(tmp_path / "c").readonly_roots == (f,)
    store = Store(tmp_path / "c")
    with pytest.warns(KcacheWarning, match=f"read-only layer {f} is not used: {f} is not a kcache "
                      "bundle.*accepted: a bundle file written by 'kcache export'"):
        assert store.get("ab" * 32) is None
    assert store.layers[0].problem is not None


# -- config.json: unknown keys, wrong types, a directory --------------------------------------------
def test_unknown_config_key_warns_with_the_accepted_keys(tmp_path):
    from kcache.warn import KcacheWarning
    root = tmp_path / "c"
    root.mkdir()
    (root / "config.json").write_text('{"max_sise": "1G", "shared": true}')
    with pytest.warns(KcacheWarning) as rec:
        s = resolve(root)
    (msg,) = [str(w.message) for w in rec]
    assert "'max_sise'" in msg and "max_size, readonly_dirs, lock_timeout, shared" in msg and "config.json" in msg
    assert s.shared is True and s.max_size == DEFAULT_MAX_SIZE


@pytest.mark.parametrize("content", ['{"max_size": 1.5}', '{"max_size": true}', '{"max_size": [1]}',
                                     '{"lock_timeout": [5]}', '{"readonly_dirs": [1]}'])
def test_wrong_types_in_config_name_file_and_key(tmp_path, content):
    root = tmp_path / "c"
    root.mkdir()
    (root / "config.json").write_text(content)
    name = next(iter(json.loads(content)))
    with pytest.raises(ConfigError, match=f"{name} in {root / 'config.json'}"):
        resolve(root)


def test_config_json_that_is_a_directory(tmp_path):
    from kcache.warn import KcacheWarning

    root = tmp_path / "c"
    (root / "config.json").mkdir(parents=True)
    with pytest.raises(ConfigError) as info:  # never replaced: it may hold anything
        write_setting(root, "max_size", "1G")
    assert f"{root / 'config.json'} is a directory" in str(info.value) and ".tmp" not in str(info.value)
    with pytest.warns(KcacheWarning, match="is a directory"):  # ignored by everything else
        assert resolve(root).max_size == DEFAULT_MAX_SIZE


# -- resolve_each: one setting's error spoils no other -----------------------------------------

def test_resolve_each_reports_every_setting_and_resolve_raises_the_first(tmp_path, monkeypatch):
    from kcache.config import resolve, resolve_each

    root = tmp_path / "c"
    root.mkdir()
    (root / "config.json").write_text('{"max_size": "1G"}')
    monkeypatch.setenv("KCACHE_LOCK_TIMEOUT", "soon")
    monkeypatch.setenv("KCACHE_MAX_SIZE", "2Q")
    reports = resolve_each(root=root)
    assert reports["root"].value == root and reports["root"].error is None
    assert reports["max_size"].error is not None and "KCACHE_MAX_SIZE" in str(reports["max_size"].error)
    assert reports["max_size"].origin == "env KCACHE_MAX_SIZE" and reports["max_size"].raw == "2Q"
    assert reports["lock_timeout"].error is not None
    assert reports["shared"].error is None  # the bad ones spoil no other
    with pytest.raises(ConfigError) as exc:
        resolve(root=root)
    assert str(exc.value) == str(reports["max_size"].error)  # checked before lock_timeout


def test_resolve_each_leaves_config_unread_under_a_bad_root(tmp_path):
    from kcache.config import CONFIG_FILE, resolve_each

    afile = tmp_path / "afile"
    afile.write_text("x")
    reports = resolve_each(root=afile)
    assert reports["root"].error is not None
    assert reports[CONFIG_FILE].value is None


def test_probe_writable(tmp_path):
    from kcache.store import probe_writable

    assert probe_writable(tmp_path / "new" / "cache") is None
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert "ENOTDIR" in probe_writable(afile / "sub")
    assert list(tmp_path.iterdir()) == [afile]  # the probe leaves nothing behind


def test_config_show_on_a_terminal_states_durations_as_the_docs_do(tmp_path):
    """quarantine_age's default is "30 d" (docs: 30 days), not "720.0 h"; lock_timeout
    "600 s"; a value set as 90m is "1.5 h"; piped output keeps the seconds."""
    import re

    from test_cli import on_terminal
    status, text, err = on_terminal("config", "show", "--dir", str(tmp_path / "c"),
                                    env={"KCACHE_LOCK_STALE": "90m"})
    assert status == 0, err
    rows = {cells[0]: cells[1] for cells in
            (re.split(r" {2,}", re.sub(r"\x1b\[[0-9;]*m", "", l).strip())
             for l in text.splitlines()) if len(cells) >= 2}
    assert rows["quarantine_age"] == "30 d" and rows["lock_timeout"] == "600 s"
    assert rows["lock_stale"] == "1.5 h" and rows["remote_wait"] == "60 s"
    assert rows["remote_timeout"] == "1 s"
    from clikit import run
    piped = run(["config", "get", "quarantine_age", "--dir", str(tmp_path / "c")])
    assert piped.stdout == "2592000.0\n"


def test_human_duration():
    from kcache.cli.fmt import human_duration
    assert [human_duration(v) for v in (2592000.0, 600.0, 5400, 131400.0, 0.25, 0, 604800)] == [
        "30 d", "600 s", "1.5 h", "36.5 h", "0.25 s", "0 s", "7 d"]
    assert [human_duration(v) for v in (None, float("nan"), -1, 1e300, "x")] == [
        "-", "-", "-", "100+ y", "-"]


def test_a_config_file_of_many_unknown_keys_is_one_bounded_warning(tmp_path):
    """A planted config.json of 20,000 unknown keys, one 500 KB long (and one with ESC):
    a program, ``kcache ls`` and ``kcache config show`` each say one short line about them,
    naming a few and counting the rest (before: 20,001 lines, 5.6 MB, in every program)."""
    import subprocess
    import sys

    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    keys = {"k" * 500_000: 1, "esc\x1b]0;pwn\x07": 2, **{f"unknown{i}": i for i in range(20_000)}}
    (root / "config.json").write_text(json.dumps(keys))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")},
           "KCACHE_DIR": str(root)}
    for argv in (["-c", "import kcache; kcache.Store().get('0' * 64)"],
                 ["-m", "kcache", "ls"], ["-m", "kcache", "config", "show"]):
        done = subprocess.run([sys.executable, *argv], capture_output=True, env=env,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        said = [line for line in (done.stdout + done.stderr).splitlines()
                if b"unknown" in line]
        assert len(said) == 1, (argv, len(said))
        assert len(said[0]) < 1500 and len(done.stderr) < 4000, argv
        assert b"and 19999 more" in said[0] and b"'esc\\x1b]0;pwn\\x07'" in said[0], said[0]
        assert not any(b < 0x20 and b != 0x0A for b in done.stderr), argv


#: A setting each writer sets, and its value as config.json keeps it.
_CONCURRENT = {"max_size": ("5G", 5 << 30), "lock_timeout": ("30", 30.0),
               "max_entry_size": ("100M", 100 << 20), "quarantine_age": ("7d", 7 * 86400.0),
               "remote_namespace": ("ns", "ns"), "remote_timeout": ("2", 2.0),
               "remote_ttl": ("1d", 86400.0), "remote_wait": ("10", 10.0)}


def test_concurrent_config_set_keeps_every_setting(tmp_path):
    """Eight ``kcache config set`` processes, each a different setting, at once: config.json
    holds all eight (each read it, changed it and wrote it back unlocked: 4 of 8 lost per round,
    every command exiting 0)."""
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    for round_ in range(3):
        root = tmp_path / f"root{round_}"
        root.mkdir(mode=0o700)
        writers = [subprocess.Popen([sys.executable, "-m", "kcache", "config", "set", name, text],
                                    env={**env, "KCACHE_DIR": str(root)}, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
                   for name, (text, _) in _CONCURRENT.items()]
        errors = [w.communicate(timeout=120)[1] for w in writers]
        assert [w.returncode for w in writers] == [0] * len(writers), errors
        conf = json.loads((root / "config.json").read_text())
        assert conf == {name: value for name, (_, value) in _CONCURRENT.items()}

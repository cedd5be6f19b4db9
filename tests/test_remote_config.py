"""Remote settings (KCACHE_REMOTE*), open_remote's checks, a missing client library, names
without secrets, and `import kcache` staying free of the client libraries."""
import subprocess
import sys
import textwrap

import pytest

from kcache import ConfigError
from kcache.tiers.remote import (DEFAULT_MAX_WAIT, DEFAULT_NAMESPACE, DEFAULT_TIMEOUT, MissingClient,
                           RemoteSettings, open_configured, open_remote, redact, remote_settings)
from kcache.warn import KcacheWarning

SECRET = "s3cr3t-signing-key-0123456789"


def test_unset_or_blank_means_no_remote():
    assert remote_settings({}) is None
    assert remote_settings({"KCACHE_REMOTE": "  "}) is None
    assert remote_settings({"KCACHE_REMOTE_NAMESPACE": "x"}) is None
    assert open_configured({}) == (None, None)


def test_defaults():
    s = remote_settings({"KCACHE_REMOTE": "redis://127.0.0.1:6379/0"})
    assert s == RemoteSettings(url="redis://127.0.0.1:6379/0")
    assert (s.namespace, s.readonly, s.timeout, s.ttl, s.max_wait, s.password, s.secret) == \
        (DEFAULT_NAMESPACE, False, DEFAULT_TIMEOUT, None, DEFAULT_MAX_WAIT, None, None)
    assert DEFAULT_TIMEOUT <= 1.0  # a soft tier: at most 1 s per wait by default


def test_every_variable():
    s = remote_settings({
        "KCACHE_REMOTE": " rediss://cache.example:6380/2 ", "KCACHE_REMOTE_NAMESPACE": "team.a-1",
        "KCACHE_REMOTE_READONLY": "yes", "KCACHE_REMOTE_TIMEOUT": "0.25",
        "KCACHE_REMOTE_TTL": "7d", "KCACHE_REMOTE_WAIT": "2m", "KCACHE_REMOTE_PASSWORD": "pw",
        "KCACHE_REMOTE_SECRET": SECRET})
    assert (s.url, s.namespace, s.readonly, s.timeout, s.ttl, s.max_wait, s.password, s.secret) == \
        ("rediss://cache.example:6380/2", "team.a-1", True, 0.25, 7 * 86400.0, 120.0, "pw", SECRET.encode())
    assert remote_settings({"KCACHE_REMOTE": "s3://b/p", "KCACHE_REMOTE_TTL": "0"}).ttl is None


def test_environment_wins_over_config_json():
    config = {"remote": "s3://from-config/p", "remote_namespace": "cfg", "remote_readonly": True,
              "remote_timeout": 0.5}
    s = remote_settings({}, config)
    assert (s.url, s.namespace, s.readonly, s.timeout) == ("s3://from-config/p", "cfg", True, 0.5)
    s = remote_settings({"KCACHE_REMOTE": "redis://h:1/0", "KCACHE_REMOTE_READONLY": "0"}, config)
    assert (s.url, s.namespace, s.readonly) == ("redis://h:1/0", "cfg", False)


@pytest.mark.parametrize("env, named", [
    ({"KCACHE_REMOTE": "cache.example:6379"}, "KCACHE_REMOTE"),
    ({"KCACHE_REMOTE": "/mnt/shared/cache"}, "KCACHE_REMOTE"),
    ({"KCACHE_REMOTE_NAMESPACE": "a:b"}, "KCACHE_REMOTE_NAMESPACE"),
    ({"KCACHE_REMOTE_NAMESPACE": "team*"}, "KCACHE_REMOTE_NAMESPACE"),
    ({"KCACHE_REMOTE_NAMESPACE": "a/b"}, "KCACHE_REMOTE_NAMESPACE"),
    ({"KCACHE_REMOTE_READONLY": "maybe"}, "KCACHE_REMOTE_READONLY"),
    ({"KCACHE_REMOTE_TIMEOUT": "0"}, "KCACHE_REMOTE_TIMEOUT"),
    ({"KCACHE_REMOTE_TIMEOUT": "5m"}, "KCACHE_REMOTE_TIMEOUT"),
    ({"KCACHE_REMOTE_TIMEOUT": "fast"}, "KCACHE_REMOTE_TIMEOUT"),
    ({"KCACHE_REMOTE_TTL": "-1"}, "KCACHE_REMOTE_TTL"),
    ({"KCACHE_REMOTE_WAIT": "2d"}, "KCACHE_REMOTE_WAIT"),
    ({"KCACHE_REMOTE_SECRET": "tiny-Sec"}, "KCACHE_REMOTE_SECRET"),
    ({"KCACHE_SECRET": "tiny-Sec"}, "KCACHE_SECRET"),
])
def test_bad_values_name_the_variable(env, named):
    with pytest.raises(ConfigError) as exc:
        remote_settings({"KCACHE_REMOTE": "redis://127.0.0.1:6379/0", **env})
    msg = str(exc.value)
    assert msg.startswith(named) and "accepted" in msg and "\n" not in msg
    assert "tiny-Sec" not in msg  # a secret is never quoted


def test_bad_setting_in_the_store_path_is_one_warning(recwarn):
    env = {"KCACHE_REMOTE": "redis://127.0.0.1:6379/0", "KCACHE_REMOTE_TIMEOUT": "never"}
    assert open_configured(env) == (None, None)
    assert open_configured(env) == (None, None)
    [w] = [w for w in recwarn if issubclass(w.category, KcacheWarning)]
    assert "remote tier not used" in str(w.message) and "KCACHE_REMOTE_TIMEOUT" in str(w.message)


def test_open_remote_checks_its_arguments():
    for url in ("", "redis", "127.0.0.1:6379", None):
        with pytest.raises(ConfigError, match="is not a remote URL"):
            open_remote(url)
    with pytest.raises(ConfigError, match="known neither to redis-py nor to fsspec"):
        open_remote("nosuchproto://x/y")
    with pytest.raises(ConfigError, match="namespace"):
        open_remote("memory://x", namespace="")
    with pytest.raises(ConfigError, match="timeout"):
        open_remote("memory://x", timeout=0)
    for url in ("redis://127.0.0.1:notaport/0", "redis://h:99999/0", "redis://h:6379/abc"):
        with pytest.raises(ConfigError, match=r"is not a remote URL \((its host or port|the "
                                              r"database)"):
            open_remote(url)  # and config set refuses them (kcache.config.write_setting)


def test_ttl_on_an_object_store_is_warned_once(recwarn):
    open_remote("memory://ttl", ttl=60)
    open_remote("memory://ttl", ttl=60)
    [w] = [w for w in recwarn if issubclass(w.category, KcacheWarning)]
    assert "applies to Redis only" in str(w.message)


# -- names never show secrets ---------------------------------------------------------------

@pytest.mark.parametrize("url, shown", [
    ("redis://:pw-SECRET@cache:6379/0", "redis://cache:6379/0"),
    ("redis://user:pw-SECRET@cache:6379/0", "redis://cache:6379/0"),
    ("rediss://default:pw-SECRET@cache.example:6380/1?ssl_cert_reqs=required", "rediss://cache.example:6380/1"),
    ("redis://cache:6379/0?password=pw-SECRET&db=3", "redis://cache:6379/0?db=3"),
    ("unix://:pw-SECRET@/run/redis.sock?db=2", "unix:///run/redis.sock?db=2"),
    ("redis://[::1]:6379/0", "redis://[::1]:6379/0"),
    ("s3://bucket/prefix", "s3://bucket/prefix"),
    ("s3://KEY:pw-SECRET@bucket/prefix", "s3://bucket/prefix"),
    ("https://user:pw-SECRET@host/x?sig=pw-SECRET", "https://host/x"),
    ("file:///var/cache/k", "file:///var/cache/k"),
    ("redis://:pw-SECRET@cache:notaport/0", "redis://(unparsable URL)"),
])
def test_redact(url, shown):
    assert redact(url) == shown


def test_settings_and_tiers_never_show_password_or_secret():
    env = {"KCACHE_REMOTE": "redis://:url-pw-SECRET@127.0.0.1:6379/0", "KCACHE_REMOTE_PASSWORD": "env-pw-SECRET",
           "KCACHE_REMOTE_SECRET": SECRET}
    s = remote_settings(env)
    tier, _ = open_configured(env)
    for text in (repr(s), str(s), s.name, tier.name, repr(tier)):
        assert "SECRET" not in text and SECRET not in text, text
    assert "password=set" in repr(s) and "secret=set" in repr(s)


# -- client libraries: imported only when a remote is opened ---------------------------------

def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_import_kcache_imports_no_client_library():
    out = run_python("""
        import sys
        import kcache, kcache.tiers.remote, kcache.tiers.remote.signing
        heavy = [m for m in ("redis", "fsspec", "s3fs", "botocore", "aiobotocore") if m in sys.modules]
        assert not heavy, heavy
        print("ok")
    """)
    assert out.stdout.strip() == "ok", out.stderr


@pytest.mark.parametrize("blocked, url, extra", [
    (("redis",), "redis://127.0.0.1:6379/0", "kcache-cuda[redis]"),
    (("redis",), "unix:///run/redis.sock", "kcache-cuda[redis]"),
    (("fsspec",), "s3://bucket/prefix", "kcache-cuda[s3]"),
    (("s3fs",), "s3://bucket/prefix", "kcache-cuda[s3]"),
])
def test_missing_client_library(blocked, url, extra):
    out = run_python(f"""
        import sys, warnings
        for name in {blocked!r}:
            sys.modules[name] = None  # as if not installed: importing it raises ImportError
        from kcache.remote import MissingClient, open_configured, open_remote
        try:
            open_remote({url!r})
        except MissingClient as exc:
            print("raised:", exc)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            env = {{"KCACHE_REMOTE": {url!r}}}
            assert open_configured(env) == (None, None)
            assert open_configured(env) == (None, None)  # warned once, not twice
        print("warnings:", len(caught), caught[0].message if caught else "")
    """)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("raised:") and f"pip install '{extra}'" in lines[0], out.stdout
    assert lines[1].startswith("warnings: 1 ") and f"pip install '{extra}'" in lines[1], out.stdout


def test_missing_client_is_an_import_error():
    assert issubclass(MissingClient, ImportError)


def test_config_set_refuses_a_url_no_client_can_use(tmp_path):
    from kcache.config import write_setting
    for url in ("redis://h:notaport/0", "redis://h:99999/0", "redis://h:6379/abc"):
        with pytest.raises(ConfigError, match="is not a remote URL"):
            write_setting(tmp_path / "root", "remote", url)
    assert not (tmp_path / "root" / "config.json").exists()
    write_setting(tmp_path / "root", "remote", "redis://h:6379/0")


@pytest.mark.parametrize("typed", ["0", "100", "2m"])
def test_a_timeout_out_of_range_is_shown_as_typed(typed):
    # was "KCACHE_REMOTE_TIMEOUT=0.0 is out of range" for '0', "=120.0" for '2m'
    with pytest.raises(ConfigError) as caught:
        remote_settings({"KCACHE_REMOTE": "memory://x", "KCACHE_REMOTE_TIMEOUT": typed})
    assert str(caught.value).startswith(f"KCACHE_REMOTE_TIMEOUT={typed!r} is out of range; "
                                        "accepted: more than 0 and at most 60 seconds")

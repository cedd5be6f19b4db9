"""The remote commands (``push``, ``pull``, ``remote check``) and what ``stats``, ``dir`` and
``config`` show of the remote, run as ``python -m kcache`` against real servers
(tests/servers.py): entries through Redis, S3 (moto) and ``file://``, filters, refused values,
one line per failure, and no password or secret in any output."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

import ptykit
from kcache.tiers.remote import signing
from kcache.entry import format as fmt
from kcache.disk.layout import Layout
from kcache.tiers.remote import open_remote
from servers import (SilentServer, aws_env, make_redis, redis_url, refusing_port,  # noqa: F401
                     s3_bucket, s3_endpoint, unique_namespace)
from test_cli import K_AXPY_90, K_AXPY_90A, K_SAXPY_80, K_STALE, SPECS, fill, kc, on_terminal, one_line_error

pytestmark = pytest.mark.slow  # the CLI against real servers, in processes

LIMIT = fmt.MAX_FILE + signing.OVERHEAD
SECRET = "cli-secret-0123456789abcdefgh"
REMOTE_FIELDS = {"remote_hits", "remote_misses", "remote_bad", "remote_puts", "remote_put_errors",
                 "remote_errors_timeout", "remote_errors_refused", "remote_errors_auth",
                 "remote_errors_bad_value", "remote_errors_io", "remote_errors_unavailable",
                 "remote_wait_seconds"}
STORE_FIELDS = {"write_errors_no_space", "write_errors_permission", "write_errors_other",
                "temp_swept", "quarantine_files", "quarantine_bytes"}


@pytest.fixture(params=["redis", "s3", "file"])
def remote_env(request, tmp_path) -> dict:
    """KCACHE_REMOTE* for a fresh namespace on each backend."""
    if request.param == "redis":
        pytest.importorskip("redis")
        url = request.getfixturevalue("redis_url")
    elif request.param == "s3":
        pytest.importorskip("s3fs")
        url = f"s3://{request.getfixturevalue('s3_bucket')}/cli"
    else:
        url = (tmp_path / "remote").as_uri()
    return {"KCACHE_REMOTE": url, "KCACHE_REMOTE_NAMESPACE": unique_namespace(),
            "KCACHE_REMOTE_TIMEOUT": "10"}


@pytest.fixture
def redis_env(redis_url) -> dict:
    pytest.importorskip("redis")
    return {"KCACHE_REMOTE": redis_url, "KCACHE_REMOTE_NAMESPACE": unique_namespace(),
            "KCACHE_REMOTE_TIMEOUT": "10"}


def tier_of(env: dict):
    return open_remote(env["KCACHE_REMOTE"], namespace=env["KCACHE_REMOTE_NAMESPACE"], timeout=10.0)


def run_json(*args, root, env, status: int = 0) -> dict:
    done = kc(*args, "--json", root=root, env=env)
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


def blocked(module: str, *args: str, env: dict) -> subprocess.CompletedProcess:
    """``kcache ARGS`` in an interpreter where ``import module`` fails (a missing extra)."""
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            "from kcache.cli import main\nraise SystemExit(main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=_env(env), timeout=120)


def _env(env: dict) -> dict:
    import os
    return {**{k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}, **env}


# -- push and pull ------------------------------------------------------------------------------

def test_push_then_pull_through_each_backend(tmp_path, remote_env):
    a, b = tmp_path / "a", tmp_path / "b"
    fill(a)
    doc = run_json("push", root=a, env=remote_env)
    assert sorted(doc["pushed"]) == sorted(SPECS) and doc["present"] == [] and doc["failed"] == []
    assert doc["remote"] == remote_env["KCACHE_REMOTE"] and doc["signed"] is False
    assert set(tier_of(remote_env).keys()) == set(SPECS)
    again = run_json("push", root=a, env=remote_env)
    assert again["pushed"] == [] and sorted(again["present"]) == sorted(SPECS)

    pulled = run_json("pull", root=b, env=remote_env)
    assert sorted(pulled["pulled"]) == sorted(SPECS) and pulled["failed"] == pulled["skipped"] == []
    for k in SPECS:  # the same bytes, checked on the way
        assert Layout(b).entry(k).read_bytes() == Layout(a).entry(k).read_bytes()
    assert sorted(run_json("pull", root=b, env=remote_env)["present"]) == sorted(SPECS)

    # piped: a key/outcome/reason table on stdout, the summary on stderr
    done = kc("push", root=a, env=remote_env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "key\toutcome\treason" and sorted(lines[1:]) == sorted(f"{k}\tpresent\t" for k in SPECS)
    assert done.stderr.strip() == f"kcache: pushed 0 entries to {remote_env['KCACHE_REMOTE']}; 4 already there"
    stats = run_json("stats", root=a, env=remote_env)
    assert stats["remote_puts"] == 4 and REMOTE_FIELDS | STORE_FIELDS <= set(stats)


def test_pull_filters_on_the_checked_headers(tmp_path, redis_env):
    fill(tmp_path / "a")
    run_json("push", root=tmp_path / "a", env=redis_env)
    doc = run_json("pull", "--kernel", "axpy", "--cc", "9.0", root=tmp_path / "b", env=redis_env)
    assert sorted(doc["pulled"]) == sorted([K_AXPY_90, K_AXPY_90A])  # sm_90 and sm_90a
    assert sorted(doc["skipped"]) == sorted([K_SAXPY_80, K_STALE])
    doc = run_json("pull", "--cc", "sm_80", root=tmp_path / "c", env=redis_env)
    assert sorted(doc["pulled"]) == sorted([K_SAXPY_80, K_STALE])
    doc = run_json("pull", "--cc", "sm_90a", "--cc", "8.0", root=tmp_path / "d", env=redis_env)
    assert sorted(doc["pulled"]) == sorted([K_AXPY_90A, K_SAXPY_80, K_STALE])
    assert not Layout(tmp_path / "d").entry(K_AXPY_90).exists()
    doc = run_json("push", "--kernel", "pkg.blas:*", root=tmp_path / "d", env=redis_env)
    assert doc["pushed"] == [] and doc["present"] == [K_SAXPY_80]  # push filters too


def test_pull_names_each_refused_value_and_copies_the_rest(tmp_path, redis_env):
    env = {**redis_env, "KCACHE_REMOTE_SECRET": SECRET}
    fill(tmp_path / "a")
    assert run_json("push", root=tmp_path / "a", env=env)["signed"] is True
    tier = tier_of(env)
    tampered = bytearray(tier.read(K_AXPY_90, LIMIT).data)
    tampered[-100] ^= 1
    tier.write(K_AXPY_90, bytes(tampered))
    tier.write(K_SAXPY_80, Layout(tmp_path / "a").entry(K_SAXPY_80).read_bytes())  # unsigned
    done = kc("pull", "--json", root=tmp_path / "b", env=env)
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert sorted(doc["pulled"]) == sorted([K_AXPY_90A, K_STALE]) and doc["signed"] is True
    reasons = {f["key"]: f["reason"] for f in doc["failed"]}
    assert reasons.keys() == {K_AXPY_90, K_SAXPY_80}
    assert reasons[K_AXPY_90].startswith("refused: bad signature")
    assert reasons[K_SAXPY_80].startswith("refused: unsigned value refused")
    assert not Layout(tmp_path / "b").entry(K_AXPY_90).exists()
    done = kc("pull", root=tmp_path / "c", env=env)
    assert done.returncode == 1
    summary, line = done.stderr.splitlines()  # what was done, then each failure and why
    assert summary.startswith("kcache: pulled 2 entries from ") and summary.endswith(", signatures checked")
    assert line.startswith("kcache: 2 entries not pulled: ") and K_AXPY_90[:12] in line and K_SAXPY_80[:12] in line
    assert run_json("stats", root=tmp_path / "b", env=env)["remote_bad"] == 2


def test_push_needs_a_writable_remote(tmp_path, redis_env):
    fill(tmp_path / "a")
    line = one_line_error(kc("push", root=tmp_path / "a", env={**redis_env, "KCACHE_REMOTE_READONLY": "1"}), 1)
    assert "is read-only (KCACHE_REMOTE_READONLY): nothing pushed" in line
    for command in ("push", "pull", "remote"):
        line = one_line_error(kc(command, root=tmp_path / "a"), 1)
        assert "no remote tier is configured: set KCACHE_REMOTE" in line, line


def all_on_a_terminal(*args: str, env: dict) -> tuple[int, str]:
    """``kcache ARGS`` with stdin, stdout and stderr on one pseudo-terminal; (status, text)."""
    import os
    master, slave = ptykit.open_terminal(100)
    proc = subprocess.Popen([sys.executable, "-m", "kcache", *args], stdin=slave, stdout=slave,
                            stderr=slave, env={**_env(env), "COLUMNS": "100"})
    os.close(slave)
    shown = ptykit.drain(master)
    return proc.wait(timeout=60), shown.decode()


def test_push_and_pull_on_a_terminal_draw_a_progress_bar(tmp_path, redis_env):
    fill(tmp_path / "a")
    status, text = all_on_a_terminal("push", "--dir", str(tmp_path / "a"), env=redis_env)
    assert status == 0 and "Traceback" not in text, text
    assert "pushing" in text and "100%" in text and "pushed 4 entries" in text
    assert "outcome" not in text  # the table is for pipes
    status, text = all_on_a_terminal("pull", "--dir", str(tmp_path / "b"), env=redis_env)
    assert status == 0 and "pulling" in text and "pulled 4 entries" in text, text
    # stdout on a terminal, stderr piped: no bar and no table, the summary on stderr
    status, text, err = on_terminal("pull", "--dir", str(tmp_path / "c"), env=redis_env)
    assert status == 0 and "pulled 4 entries" in err and "outcome" not in text


# -- remote check -------------------------------------------------------------------------------

def test_remote_check_ok(tmp_path, remote_env):
    done = kc("remote", "check", root=tmp_path / "a", env=remote_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{remote_env['KCACHE_REMOTE']} (read-write, namespace ")
    assert ": ok, answered in " in done.stdout
    fill(tmp_path / "a")
    run_json("push", root=tmp_path / "a", env=remote_env)  # read-only: a listing must find something
    doc = run_json("remote", root=tmp_path / "a", env={**remote_env, "KCACHE_REMOTE_READONLY": "1"})
    assert doc["ok"] is True and doc["readonly"] is True and doc["error"] is None
    assert doc["kind"] in ("redis", "fsspec") and doc["seconds"] >= 0


@pytest.mark.parametrize("case", ["refused", "timeout", "auth", "bad url", "unknown protocol", "no bucket"])
def test_remote_check_says_what_is_wrong_in_one_line(tmp_path, case, request):
    pytest.importorskip("redis")
    env = {"KCACHE_REMOTE_TIMEOUT": "0.5"}
    if case == "refused":
        # a refusal is immediate; the longer deadline keeps a loaded CI machine (where the
        # connection attempts of redis-py took over 1 s) from turning it into a timeout
        env["KCACHE_REMOTE_TIMEOUT"] = "5"
        with refusing_port() as port:
            env["KCACHE_REMOTE"] = f"redis://127.0.0.1:{port}/0"
            line = one_line_error(kc("remote", "check", env=env), 1)
        assert "connection refused or closed" in line and "(refused)" in line
    elif case == "timeout":
        with SilentServer() as silent:
            env["KCACHE_REMOTE"] = f"redis://127.0.0.1:{silent.port}/0"
            started = time.monotonic()
            line = one_line_error(kc("remote", "check", env=env), 1)
            assert time.monotonic() - started < 30  # the start of python itself, then 0.5 s
        assert "no answer in time (timeout, 0.5 s: KCACHE_REMOTE_TIMEOUT)" in line
    elif case == "auth":
        server = request.getfixturevalue("make_redis")(password="right-password-123")
        env["KCACHE_REMOTE"] = f"redis://:wrong-password-456@127.0.0.1:{server.port}/0"
        env["KCACHE_REMOTE_TIMEOUT"] = "10"
        line = one_line_error(kc("remote", "check", env=env), 1)
        assert "credentials or certificate rejected" in line and "(auth)" in line
        assert "wrong-password-456" not in line
    elif case == "bad url":
        env["KCACHE_REMOTE"] = "redis//cache:6379"
        line = one_line_error(kc("remote", "check", env=env), 1)
        assert "is not a remote URL; accepted: redis://host:port/db" in line
    elif case == "unknown protocol":
        env["KCACHE_REMOTE"] = "nosuch://cache/x"
        line = one_line_error(kc("remote", "check", env=env), 1)
        assert "protocol 'nosuch' is known neither to redis-py nor to fsspec" in line
    else:
        pytest.importorskip("s3fs")
        request.getfixturevalue("s3_bucket")  # the endpoint and credentials; another bucket
        env.update(KCACHE_REMOTE="s3://no-such-bucket-kcache/x", KCACHE_REMOTE_TIMEOUT="10")
        line = one_line_error(kc("remote", "check", env=env), 1)
        assert "(io)" in line and "NoSuchBucket" in line or "does not exist" in line, line
    assert line.startswith("kcache: ")


def test_remote_check_json_says_what_is_wrong(tmp_path):
    pytest.importorskip("redis")
    with refusing_port() as port:
        env = {"KCACHE_REMOTE": f"redis://127.0.0.1:{port}/0"}
        doc = run_json("remote", "check", root=tmp_path / "a", env=env, status=1)
    assert doc["ok"] is False and doc["error_kind"] == "refused" and doc["seconds"] is None
    assert "connection refused" in doc["error"]


@pytest.mark.parametrize("module,url,extra", [("redis", "redis://127.0.0.1:6379/0", "kcache-cuda[redis]"),
                                              ("s3fs", "s3://bucket/prefix", "kcache-cuda[s3]")])
@pytest.mark.parametrize("command", ["remote", "push", "pull"])
def test_missing_client_library_is_one_line_naming_the_extra(tmp_path, module, url, extra, command):
    fill(tmp_path / "a")
    done = blocked(module, command, "--dir", str(tmp_path / "a"), env={"KCACHE_REMOTE": url})
    line = one_line_error(done, 1)
    assert f"pip install '{extra}'" in line, line
    # the other commands work as ever
    assert blocked(module, "ls", "--dir", str(tmp_path / "a"), env={"KCACHE_REMOTE": url}).returncode == 0


# -- what stats, dir and config show ------------------------------------------------------------

def test_stats_shows_the_remote_counters(tmp_path, redis_env):
    fill(tmp_path / "a")
    run_json("push", root=tmp_path / "a", env=redis_env)
    done = kc("stats", root=tmp_path / "a", env=redis_env)
    fields = dict(line.split("\t") for line in done.stdout.splitlines())
    assert fields["remote_puts"] == "4" and fields["remote_wait_seconds"] == "0.00"
    assert REMOTE_FIELDS | STORE_FIELDS <= set(fields)
    status, text, err = on_terminal("stats", "--dir", str(tmp_path / "a"), env=redis_env)
    assert status == 0, err
    for row in ("remote puts", "remote errors", "remote bad values", "write errors", "quarantine",
                "temp files swept"):
        assert row in text, text
    # without a remote and with its counters at 0 the terminal leaves them out (JSON never does)
    (tmp_path / "b").mkdir()  # an existing empty root (a missing --dir is an error)
    status, text, err = on_terminal("stats", "--dir", str(tmp_path / "b"))
    assert status == 0 and "remote hits" not in text and "write errors" in text


def test_stats_names_the_remote_without_credentials(tmp_path, redis_env):
    """The full `kcache stats` on a terminal named the root (its title) and each read-only
    layer, and showed the remote's counters without saying which remote they were of; its
    JSON and piped forms did not name it either (only `-s` did). The URL, without the
    password, now heads the remote rows; JSON and piped carry `remote`."""
    url = redis_env["KCACHE_REMOTE"]
    env = {**redis_env, "KCACHE_REMOTE": url.replace("redis://", "redis://:pw-in-url-123@")}
    (tmp_path / "a").mkdir()
    status, text, err = on_terminal("stats", "--dir", str(tmp_path / "a"), env=env)
    assert status == 0, err
    lines = text.splitlines()
    [at] = [i for i, line in enumerate(lines) if url in line]
    assert "remote" in lines[at] and "namespace" in lines[at], text
    assert "remote hits" in lines[at + 1], text  # named before its counters
    assert run_json("stats", root=tmp_path / "a", env=env)["remote"] == url
    piped = kc("stats", root=tmp_path / "a", env=env).stdout
    assert f"remote\t{url}\n" in piped
    assert "pw-in-url-123" not in text + err + piped
    assert "remote" not in run_json("stats", root=tmp_path / "a", env={})  # none configured


def test_dir_and_config_show_the_remote_without_credentials(tmp_path, redis_env):
    env = {**redis_env, "KCACHE_REMOTE": redis_env["KCACHE_REMOTE"].replace("redis://", "redis://:pw-in-url-123@"),
           "KCACHE_REMOTE_SECRET": SECRET, "KCACHE_REMOTE_READONLY": "yes"}
    doc = run_json("dir", root=tmp_path / "a", env=env)
    assert doc["remote"] == redis_env["KCACHE_REMOTE"] and doc["remote_readonly"] is True
    assert doc["remote_signed"] is True and doc["remote_namespace"] == env["KCACHE_REMOTE_NAMESPACE"]
    assert doc["trusted"] is True and doc["untrusted"] == {}
    status, text, _err = on_terminal("dir", "--dir", str(tmp_path / "a"), env=env)
    assert f"{redis_env['KCACHE_REMOTE']} (read-only, namespace" in text and "signed" in text
    settings = run_json("config", root=tmp_path / "a", env=env)["settings"]
    assert settings["remote"] == {"value": redis_env["KCACHE_REMOTE"], "origin": "env KCACHE_REMOTE"}
    assert settings["remote_readonly"]["value"] is True
    assert settings["remote_timeout"] == {"value": 10.0, "origin": "env KCACHE_REMOTE_TIMEOUT"}
    assert settings["remote_ttl"] == {"value": None, "origin": "default"}

    root = tmp_path / "c"
    line = one_line_error(kc("config", "set", "remote", "redis://:pw-in-url-123@cache:6379/0", root=root), 2)
    assert "KCACHE_REMOTE_PASSWORD" in line and "pw-in-url-123" not in line
    assert not (root / "config.json").exists()
    done = kc("config", "set", "remote", "redis://cache:6379/2", root=root)
    assert done.returncode == 0 and "redis://cache:6379/2" in done.stderr
    assert kc("config", "set", "remote_ttl", "7d", root=root).returncode == 0
    assert json.loads((root / "config.json").read_text()) == {"remote": "redis://cache:6379/2",
                                                            "remote_ttl": 7 * 86400.0}
    doc = run_json("dir", root=root, env={})
    assert doc["remote"] == "redis://cache:6379/2" and doc["remote_readonly"] is False
    got = run_json("config", "get", "remote_ttl", root=root, env={})
    assert got == {"key": "remote_ttl", "value": 7 * 86400.0, "origin": f"config {root / 'config.json'}"}
    line = one_line_error(kc("config", "set", "remote_timeout", "99", root=root), 2)
    assert "remote_timeout" in line and "at most 60" in line
    line = one_line_error(kc("config", "set", "remote_wait", "2h", root=root), 2)
    assert "remote_wait" in line and "0 to 3600 seconds" in line
    line = one_line_error(kc("config", "set", "remote", "not a url", root=root), 2)
    assert "accepted: redis://host:port/db" in line


# -- never a password or a secret ---------------------------------------------------------------

def test_no_command_prints_a_password_or_secret(tmp_path, make_redis):
    pytest.importorskip("redis")
    password, spare, secret, bundle_secret = ("url-pw-9f3a1c7e", "env-pw-4b8d2e6f", "remote-secret-7c1e9a3b5d",
                                              "bundle-secret-2e6f8a4c0b")
    server = make_redis(password=password)
    root = tmp_path / "cache"
    fill(root)
    good = {"KCACHE_REMOTE": f"redis://:{password}@127.0.0.1:{server.port}/0",
            "KCACHE_REMOTE_PASSWORD": spare, "KCACHE_REMOTE_SECRET": secret,
            "KCACHE_SECRET": bundle_secret, "KCACHE_REMOTE_TIMEOUT": "10"}
    with refusing_port() as port:
        envs = [good,
                {**good, "KCACHE_REMOTE": f"redis://:{spare}x@127.0.0.1:{server.port}/0"},  # auth error
                {**good, "KCACHE_REMOTE": f"redis://user:{password}@127.0.0.1:{port}/0?password={password}"},
                {**good, "KCACHE_REMOTE": f"redis//:{password}@bad-url"}]
        commands = [("dir",), ("ls",), ("stats",), ("show", K_AXPY_90[:8]), ("verify",), ("config",),
                    ("config", "get", "remote"), ("export", str(tmp_path / "out.kcb")),
                    ("import", str(tmp_path / "out.kcb")), ("push",), ("pull",), ("remote", "check"),
                    ("prune", "--dry-run"), ("config", "set", "remote", good["KCACHE_REMOTE"])]
        remote_commands = [c for c in commands if c[0] in ("dir", "stats", "config", "push", "pull", "remote")]
        for env in envs:
            for command in commands if env is good else remote_commands:
                for extra in ((), ("--json",)):
                    done = kc(*command, *extra, root=root, env=env)
                    said = done.stdout + done.stderr
                    assert "Traceback" not in said, (command, said)
                    for value in (password, spare, secret, bundle_secret):
                        assert value not in said, (command, extra, env["KCACHE_REMOTE"], said)
            for command in (("dir",), ("stats",), ("config",)):
                status, text, err = on_terminal(*command, "--dir", str(root), env=env)
                assert not any(v in text + err for v in (password, spare, secret, bundle_secret)), text + err
    assert not (root / "config.json").exists()  # `config set remote` with a password was refused


@pytest.mark.parametrize("value", ["short", "too", "kcache", "a", "signing", "bytes"])
def test_a_short_secret_is_named_never_echoed_and_messages_read_whole(tmp_path, value):
    """A secret is never quoted, and no message is edited to hide one (replacing the secret's
    text wherever it occurs garbled "too short" into "too ***" and so revealed the secret):
    each command says the same with a secret of the same length that no message contains."""
    root = tmp_path / "cache"
    fill(root)
    neutral = "Q" * len(value)
    with refusing_port() as port:
        base = {"KCACHE_REMOTE": f"redis://127.0.0.1:{port}/0", "KCACHE_REMOTE_TIMEOUT": "10"}
        for command in (("remote", "check"), ("push",), ("pull",), ("dir",), ("config",)):
            said = {}
            for secret in (value, neutral):
                done = kc(*command, root=root, env={**base, "KCACHE_REMOTE_SECRET": secret})
                said[secret] = (done.returncode, done.stdout, done.stderr)
                assert "***" not in done.stdout + done.stderr and "Traceback" not in done.stderr
            assert said[value] == said[neutral], (command, said)
            assert neutral not in "".join(said[neutral][1:]), said  # so neither is `value`
    line = one_line_error(kc("remote", "check", root=root, env={**base, "KCACHE_REMOTE_SECRET": value}), 1)
    assert line.startswith(f"kcache: KCACHE_REMOTE_SECRET is too short for a signing secret ({len(value)} "
                           "bytes); accepted: at least 16 bytes"), line


@pytest.mark.parametrize("password", ["Connection", "refused", "111", "kcache", "a"])
def test_a_password_is_left_out_by_parsing_never_by_editing_text(tmp_path, password):
    """A password in the URL (or KCACHE_REMOTE_PASSWORD) that also occurs in a message: the
    URL is shown parsed, without it; a backend message that contains it is left out whole."""
    pytest.importorskip("redis")
    with refusing_port() as port:
        for env in ({"KCACHE_REMOTE": f"redis://:{password}@127.0.0.1:{port}/0"},
                    {"KCACHE_REMOTE": f"redis://127.0.0.1:{port}/0", "KCACHE_REMOTE_PASSWORD": password}):
            line = one_line_error(kc("remote", "check", root=tmp_path / "c", env=env), 1)
            head = ("kcache: remote check failed: connection refused or closed (is the server running and "
                    f"reachable there?) (refused): redis://127.0.0.1:{port}/0: check: ")
            assert line.startswith(head) and "***" not in line, line
            words = line[len(head):]
            plain = f"ConnectionError: Error 111 connecting to 127.0.0.1:{port}. Connection refused."
            left_out = "ConnectionError (its message is not shown: it may contain a credential)"
            assert words == (left_out if password in plain else plain), line


@pytest.mark.parametrize("url", ["file://shared/kcache", "file://localhost/srv/kcache", "file://"])
def test_a_file_url_without_an_absolute_path_is_refused(tmp_path, url):
    # fsspec reads what follows 'file://' as a path, relative to the current directory when it
    # does not start with '/': a mistyped 'file://nfs/kcache' (two slashes) was "ok" and pushed
    # into ./nfs/kcache, a folder of each process's own, shared with no one
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    fill(tmp_path / "root")  # entries push would publish
    env = {"KCACHE_REMOTE": url}
    full_env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("KCACHE_")}
    for command in (["remote", "check"], ["push"], ["config", "set", "remote", url]):
        done = subprocess.run([sys.executable, "-m", "kcache", *command, "--dir", str(tmp_path / "root")],
                              capture_output=True, text=True, cwd=cwd, timeout=120,
                              env={**full_env, **(env if command[0] != "config" else {})})
        line = one_line_error(done, 2 if command[0] == "config" else 1)
        assert "is not a remote URL (a file URL needs an absolute path: file:///path, three " \
               "slashes)" in line, line
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("command", ["push", "pull"])
def test_a_remote_that_cannot_be_listed_is_named_once(tmp_path, command):
    pytest.importorskip("redis")
    fill(tmp_path / "root")
    with refusing_port() as port:
        url = f"redis://127.0.0.1:{port}/0"
        line = one_line_error(kc(command, root=tmp_path / "root",
                                 env={"KCACHE_REMOTE": url, "KCACHE_REMOTE_TIMEOUT": "5"}), 1)
    # was "cannot list redis://...: redis://...: keys: ConnectionError: ..."
    assert line.startswith(f"kcache: cannot list {url}: keys: ConnectionError"), line
    assert line.count(url) == 1, line


def test_push_to_a_remote_made_read_only_in_config_json_says_where(tmp_path):
    root = tmp_path / "root"
    fill(root)
    env = {"KCACHE_REMOTE": (tmp_path / "remote").as_uri()}
    assert kc("config", "set", "remote_readonly", "1", root=root).returncode == 0
    line = one_line_error(kc("push", root=root, env=env), 1)
    # was "(KCACHE_REMOTE_READONLY)", a variable that is not set: the user looked there
    assert "is read-only (remote_readonly in config.json" in line, line
    assert "KCACHE_REMOTE_READONLY" not in line
    line = one_line_error(kc("push", root=root, env={**env, "KCACHE_REMOTE_READONLY": "yes"}), 1)
    assert "is read-only (KCACHE_REMOTE_READONLY): nothing pushed" in line, line


def test_dir_and_stats_say_where_a_bad_signing_secret_is_named(tmp_path):
    # The secret is read from the environment only, so it is no row of 'kcache config':
    # 'dir' said "(bad setting: see below)" with nothing below, and 'stats -s' sent the user
    # to 'kcache config', which does not show it
    root = tmp_path / "root"
    fill(root)
    env = {"KCACHE_REMOTE": (tmp_path / "remote").as_uri(), "KCACHE_REMOTE_SECRET": "short"}
    status, shown, err = on_terminal("dir", "--dir", str(root), env=env)
    assert status == 0 and "(bad setting: see below)" in shown, (shown, err)
    assert "KCACHE_REMOTE_SECRET is too short for a signing secret (5 bytes)" in err, err
    assert "short" not in err.replace("too short", "")  # the value is never shown
    status, shown, err = on_terminal("stats", "--short", "--dir", str(root), env=env)
    assert status == 0 and "(bad setting: see 'kcache remote check')" in shown, (shown, err)
    said = one_line_error(kc("remote", "check", root=root, env=env), 1)
    assert "KCACHE_REMOTE_SECRET is too short" in said

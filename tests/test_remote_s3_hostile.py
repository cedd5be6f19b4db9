"""A hostile S3 endpoint's answers other than floods (test_remote_s3_flood.py) and drips
(test_remote_stated_size.py): redirects, XML that botocore's parser pays for, error texts that
echo a credential, listings whose continuation token never ends.

The attacker is an HTTP server on 127.0.0.1 (a thread here) that answers every request with
what its ``answer`` function says; the lookups run in this process or, where memory is the
point, in a child process under a memory limit."""
from __future__ import annotations

import http.server
import os
import subprocess
import sys
import time

import pytest

from kcache import Store, make_key
from servers import ThreadedHTTP, aws_env, s3_lookup_in_child  # noqa: F401

pytest.importorskip("s3fs")

TOKEN = "SESSIONTOKEN-0f3c9a7e"  # the session token the client signs with (a credential)
ETAG = '"0123456789abcdef0123456789abcdef"'


class ScriptedS3(ThreadedHTTP):
    """A fake S3 endpoint: each request is answered ``answer(handler) -> (status, headers,
    body)``; ``requests``: (method, path, headers) seen."""

    def __init__(self, answer):
        owner = self
        self.requests: list[tuple[str, str, dict]] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _any(self) -> None:
                owner.requests.append((self.command, self.path, dict(self.headers)))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                status, headers, body = answer(self)
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                if not any(name.lower() == "content-length" for name, _ in headers):
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    if self.command != "HEAD":
                        self.wfile.write(body)
                except OSError:
                    self.close_connection = True

            do_GET = do_HEAD = do_PUT = do_DELETE = _any

        self.serve(Handler)


def _object(handler):
    """HEAD: an object of 1000 bytes (so that a GET follows)."""
    return 200, [("Content-Length", "1000"), ("ETag", ETAG),
                 ("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")], b""


def _error(body: str, status: int = 500):
    def answer(handler):
        if handler.command == "HEAD":
            return _object(handler)
        return status, [("Content-Type", "application/xml")], body.encode()
    return answer


def _remote(monkeypatch, endpoint: str) -> None:
    monkeypatch.setenv("KCACHE_REMOTE", "s3://bucket/cache")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)


def test_a_redirect_to_another_host_is_not_followed(aws_env, tmp_path, monkeypatch):  # noqa: F811
    # aiohttp follows a 307 by default: the HEAD went on to the other host with the signed
    # request's X-Amz-Security-Token (the Authorization header alone was dropped)
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)
    with ScriptedS3(lambda h: (200, [], b"")) as other:
        def redirect(handler):
            return 307, [("Location", f"{other.endpoint}{handler.path}")], b""

        with ScriptedS3(redirect) as server:
            _remote(monkeypatch, server.endpoint)
            store = Store(tmp_path / "root")
            assert store.get(make_key({"redirected": 1})) is None
            assert server.requests  # the attack was served
        assert other.requests == []
    st = store.stats()
    assert st.remote_errors_io == 1 and st.remote_misses == 0


@pytest.mark.parametrize("doctype", [
    # billion laughs: 10^9 'x' from 10 nested entities
    "".join(['<!DOCTYPE Error [<!ENTITY a0 "xxxxxxxxxx">']
            + [f'<!ENTITY a{i} "{f"&a{i - 1};" * 10}">' for i in range(1, 9)] + ["]>"]),
    # an external entity naming a local file
    '<!DOCTYPE Error [<!ENTITY x SYSTEM "file://{secret}">]>',
])
def test_an_xml_answer_with_entities_is_refused_unparsed(doctype, aws_env, tmp_path,  # noqa: F811
                                                         monkeypatch):
    secret = tmp_path / "local-secret.txt"
    secret.write_text("LOCAL-FILE-CONTENT-5d1e")
    entity = "&a8;" if "a8" in doctype else "&x;"
    body = (f'<?xml version="1.0"?>{doctype.format(secret=secret)}<Error><Code>NoSuchKey</Code>'
            f"<Message>{entity}</Message></Error>")
    with ScriptedS3(_error(body, 404)) as server:
        _remote(monkeypatch, server.endpoint)
        store = Store(tmp_path / "root")
        with pytest.warns(UserWarning) as said:
            assert store.get(make_key({"entities": 1})) is None
    text = " ".join(str(w.message) for w in said)
    assert "declares a DOCTYPE" in text and "LOCAL-FILE-CONTENT" not in text, text
    assert store.stats().remote_errors_bad_value == 1


CHILD_MEMORY = 1 << 30  # bytes (RLIMIT_DATA)
DEPTH = 2_300_000  # 16 MiB of nesting: within the call's allowance (the value's 1000 + 16 MiB)


@pytest.mark.parametrize("inner", ["<a>" * DEPTH + "</a>" * DEPTH, "<a/>" * 4_000_000],
                         ids=["deep", "wide"])
def test_an_xml_answer_nested_deep_or_wide_is_refused_unparsed(inner, tmp_path):
    # botocore's parser made 16 MiB of nesting a RecursionError after 2 s and 712 MB, 16 MiB
    # of empty elements 481 MB and 3.8 s (an io error, counted towards the switch-off)
    body = f'<?xml version="1.0"?><Error><Code>Weird</Code><Message>{inner}</Message></Error>'
    with ScriptedS3(_error(body)) as server:
        done, out = s3_lookup_in_child(server.endpoint, tmp_path, 3, CHILD_MEMORY)
        assert any(method == "GET" for method, _, _ in server.requests)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (out["hit"], out["bad"]) == (False, 1), (out, done.stderr)
    assert out["rss"] < 250 << 20, out
    assert "no S3 answer does" in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_a_session_token_from_a_credentials_file_echoed_by_the_server_is_not_printed(tmp_path):
    # only the environment's AWS_SESSION_TOKEN was hidden: one from the shared credentials
    # file (a profile, an instance role likewise), quoted in a listing's 403, was printed
    def echo(handler):
        quoted = handler.headers.get("X-Amz-Security-Token")
        return 403, [], (f'<?xml version="1.0"?><Error><Code>AccessDenied</Code><Message>'
                         f"token {quoted} is not welcome</Message></Error>").encode()

    creds = tmp_path / "credentials"
    creds.write_text(f"[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = "
                     f"FILESECRET\naws_session_token = {TOKEN}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KCACHE_", "AWS_"))}
    with ScriptedS3(echo) as server:
        env.update(KCACHE_REMOTE="s3://bucket/cache", AWS_ENDPOINT_URL_S3=server.endpoint,
                   AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
                   AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_SHARED_CREDENTIALS_FILE=str(creds))
        for command in (["pull"], ["remote", "check"]):
            done = subprocess.run([sys.executable, "-m", "kcache", *command, "--dir",
                                   str(tmp_path / "root")], env=env, capture_output=True,
                                  text=True, timeout=60)
            out = done.stdout + done.stderr
            assert done.returncode == 1 and TOKEN not in out, out
            assert "Traceback" not in out and out.count("\n") == 1, out
            assert "may contain a credential" in out, out
        assert any(h.get("X-Amz-Security-Token") == TOKEN for _, _, h in server.requests)


def _page(prefix: str, token: str, n: int) -> bytes:
    names = "".join(f"<Contents><Key>{prefix}ab{token}{i:058d}.kce</Key><Size>9</Size></Contents>"
                    for i in range(n))
    return (f"<ListBucketResult><Name>bucket</Name><Prefix>{prefix}</Prefix>"
            f"<IsTruncated>true</IsTruncated><NextContinuationToken>{token}"
            f"</NextContinuationToken>{names}</ListBucketResult>").encode()


@pytest.mark.parametrize("token", ["same", "new"])
def test_a_listing_whose_continuation_token_never_ends_stops_at_its_deadline(token, tmp_path):
    # a shard's listing is one call: its pages, with a token that repeats or is always new,
    # end at the call's deadline (or allowance) with one line, whatever the server keeps up
    pages = iter(range(1 << 30))

    def listing(handler):
        if handler.command == "HEAD":
            return 404, [], b""
        prefix = handler.path.split("prefix=", 1)[1].split("&", 1)[0].replace("%2F", "/")
        if prefix.count("/") == 3:  # cache/kcache/v<N>/: the shard folders
            return 200, [], (f"<ListBucketResult><Prefix>{prefix}</Prefix><IsTruncated>false"
                             f"</IsTruncated><CommonPrefixes><Prefix>{prefix}ab/</Prefix>"
                             f"</CommonPrefixes></ListBucketResult>").encode()
        return 200, [], _page(prefix, token if token == "same" else f"t{next(pages)}", 1000)

    env = {k: v for k, v in os.environ.items() if not k.startswith(("KCACHE_", "AWS_"))}
    with ScriptedS3(listing) as server:
        env.update(KCACHE_REMOTE="s3://bucket/cache", AWS_ENDPOINT_URL_S3=server.endpoint,
                   AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                   AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
                   AWS_CONFIG_FILE=str(tmp_path / "none"),
                   AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "kcache", "pull", "--dir",
                               str(tmp_path / "root")], env=env, capture_output=True,
                              text=True, timeout=60)
        took = time.monotonic() - start
        assert len(server.requests) > 3  # pages were served
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in out and out.count("\n") == 1, out
    assert "cannot list s3://bucket/cache" in out, out
    assert took < 10, took  # the 2 s deadline, the interpreter's start and botocore's client

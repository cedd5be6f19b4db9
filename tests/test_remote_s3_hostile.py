"""A hostile S3 endpoint's answers other than floods (test_remote_s3_flood.py) and drips
(test_remote_stated_size.py): redirects, XML that botocore's parser pays for, error texts that
echo a credential, listings whose continuation token never ends.

The attacker is an HTTP server on 127.0.0.1 (a thread here) that answers every request with
what its ``answer`` function says; the lookups run in this process or, where memory is the
point, in a child process under a memory limit."""
from __future__ import annotations

import http.server
import threading

import pytest

from kcache import Store, make_key
from servers import aws_env  # noqa: F401

pytest.importorskip("s3fs")

TOKEN = "SESSIONTOKEN-0f3c9a7e"  # the session token the client signs with (a credential)
ETAG = '"0123456789abcdef0123456789abcdef"'


class ScriptedS3:
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

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()


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

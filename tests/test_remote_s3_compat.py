"""kcache's S3 hooks in aiobotocore (s3_counted: ``http_session_cls``, and through it the
private ``AIOHTTPSession._get_session``) must never break S3 use when aiobotocore changes
them: an aiobotocore that calls ``_get_session`` with other arguments, or has none, still
stores and reads values (its answers' redirects then followed again, as before the hook).

Simulated by rewriting the installed ``AIOHTTPSession.send``'s one call of it; against moto's
S3 server on loopback."""
from __future__ import annotations

import inspect
import os
import textwrap

import pytest

from kcache import Entry, make_key
from kcache.entry import format as fmt
from kcache.tiers.remote import open_remote
from servers import aws_env, s3_bucket, s3_endpoint  # noqa: F401

pytest.importorskip("s3fs")
httpsession = pytest.importorskip("aiobotocore.httpsession")

CALL = "await self._get_session(proxy_url)"  # the call in aiobotocore 2.12.2 .. 3.10


def _rewrite_send(monkeypatch, call: str) -> None:
    """AIOHTTPSession.send with its ``_get_session`` call replaced by ``call``."""
    source = textwrap.dedent(inspect.getsource(httpsession.AIOHTTPSession.send))
    if CALL not in source:
        pytest.skip("this aiobotocore gets its aiohttp session otherwise")
    space: dict = {}
    exec(source.replace(CALL, call), vars(httpsession), space)  # noqa: S102 - its own source
    monkeypatch.setattr(httpsession.AIOHTTPSession, "send", space["send"])


def _round_trip(bucket: str) -> None:
    tier = open_remote(f"s3://{bucket}/compat", timeout=10.0)
    key = make_key({"compat": 1})
    data = fmt.encode(key, Entry({"cubin": os.urandom(1000)}, {"kernel": "m:f"}))
    tier.write(key, data)
    got = tier.read(key, 1 << 20)
    assert got is not None and bytes(got.data) == data
    assert list(tier.keys()) == [key]


def test_get_session_called_with_other_arguments(s3_bucket, monkeypatch):  # noqa: F811
    # a later aiobotocore passing another argument (every call failed: TypeError in the
    # override, an HTTPClientError of each request, an io error of each lookup)
    original = httpsession.AIOHTTPSession._get_session

    async def _get_session(self, proxy_url=None, *, reuse=True):
        return await original(self, proxy_url)

    monkeypatch.setattr(httpsession.AIOHTTPSession, "_get_session", _get_session)
    _rewrite_send(monkeypatch, "await self._get_session(proxy_url=proxy_url, reuse=True)")
    _round_trip(s3_bucket)


def test_no_get_session(s3_bucket, monkeypatch):  # noqa: F811
    original = httpsession.AIOHTTPSession._get_session
    monkeypatch.setattr(httpsession.AIOHTTPSession, "_session_for", original, raising=False)
    monkeypatch.delattr(httpsession.AIOHTTPSession, "_get_session")
    _rewrite_send(monkeypatch, "await self._session_for(proxy_url)")
    _round_trip(s3_bucket)


def test_a_bucket_in_another_region_is_still_reached(aws_env, monkeypatch):  # noqa: F811
    # S3 answers a request signed for the wrong region 301 PermanentRedirect naming the
    # bucket's region: botocore's region redirect signs it anew for that region (to the
    # same custom endpoint), with redirects off and the error's XML checked first
    import test_remote_s3_hostile as hostile

    key = make_key({"region": 1})
    data = fmt.encode(key, Entry({"cubin": os.urandom(1000)}, {"kernel": "m:f"}))

    def answer(handler):
        if "/eu-west-1/" not in handler.headers.get("Authorization", ""):
            body = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>PermanentRedirect'
                    b"</Code><Message>use the endpoint</Message><Endpoint>bucket.s3.eu-west-1"
                    b".amazonaws.com</Endpoint><Bucket>bucket</Bucket></Error>")
            return 301, [("x-amz-bucket-region", "eu-west-1")], body
        found = [("ETag", hostile.ETAG), ("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")]
        if handler.command == "HEAD":
            return 200, found + [("Content-Length", str(len(data)))], b""
        return 206, found + [("Content-Range", f"bytes 0-{len(data) - 1}/{len(data)}")], data

    with hostile.ScriptedS3(answer) as server:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", server.endpoint)
        tier = open_remote("s3://bucket/cache", timeout=10.0, readonly=True)
        got = tier.read(key, 1 << 20)
    assert got is not None and bytes(got.data) == data
    methods = [(method, "/eu-west-1/" in headers.get("Authorization", ""))
               for method, _, headers in server.requests]
    assert methods == [("HEAD", False), ("HEAD", True), ("GET", True)], methods


def test_a_forked_child_reads_the_remote(s3_bucket, tmp_path, monkeypatch):  # noqa: F811
    # fsspec's asynchronous file systems refuse use in a forked child ("This class is not
    # fork-safe"): every lookup of a child of a program that had used the remote (a
    # multiprocessing pool, fork being Linux's default) was an io error, then switched off
    from kcache import Store

    url = f"s3://{s3_bucket}/forked"
    key = make_key({"forked": 1})
    data = fmt.encode(key, Entry({"cubin": os.urandom(1000)}, {"kernel": "m:f"}))
    open_remote(url, timeout=10.0).write(key, data)
    monkeypatch.setenv("KCACHE_REMOTE", url)
    monkeypatch.setenv("KCACHE_REMOTE_TIMEOUT", "10")
    store = Store(tmp_path / "parent")
    assert store.get(make_key({"absent": 1})) is None  # the parent's client made, used
    pid = os.fork()
    if pid == 0:  # the child: the parent's store object and remote tier
        try:
            got = store.get(key)
            code = 0 if got is not None and store.stats().remote_errors_io == 0 else 3
        except BaseException:
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store.get(make_key({"absent": 2})) is None and store.stats().remote_errors_io == 0

"""Every byte of an S3 answer counts against the call's allowance, as for Redis.

botocore reads an answer's body whole (an error's, a listing's XML) and s3fs a value's ranged
GET whole, whatever its length: a server that ignored the Range and sent ``Content-Length: 1
TiB`` (or chunked bytes for ever) filled memory at the network's speed until the call's
deadline, 2.2 GB for one lookup at the default timeout on a 2-core machine, ~1 GB more per
second of a longer KCACHE_REMOTE_TIMEOUT. Here an S3 client's answers are read through
:class:`CountedStream`, which counts what arrives against the call's :class:`~.base.Deadline`
(``Deadline.receive``: the value's size and 16 MiB besides) and raises
:class:`~.base.Oversent` past it, as the Redis tier's counted socket does.

aiobotocore's ``AioConfig(http_session_cls=...)`` is the hook (s3fs passes ``config_kwargs``
to it); the call's deadline reaches fsspec's event loop in a context variable
(:data:`RECEIVING`), which ``asyncio.run_coroutine_threadsafe`` carries into the task.
"""
from __future__ import annotations

import inspect
import xml.parsers.expat

from aiobotocore.httpsession import AIOHTTPSession

from .base import RECEIVING, BadAnswer

PIECE = 64 << 10  # bytes: a body read "whole" is read in pieces this size, each counted
# An S3 answer's XML nests 4 deep (ListBucketResult/Contents/Owner/ID) and a listing's page holds
# 1,000 names of a few elements each; botocore's parser (ElementTree, then recursive walks) made
# 16 MiB of nesting 2.4 million deep a RecursionError after 2 s and 712 MB, 16 MiB of empty
# elements 481 MB and 3.8 s of the user's program: answers past these bounds are not parsed.
MAX_XML_DEPTH = 32
MAX_XML_ELEMENTS = 1 << 16


class CountedStream:
    """An aiohttp response body (its ``StreamReader``) whose reads are counted against
    ``deadline`` (``Deadline.receive``, which raises Oversent past its allowance); a read of
    the whole body is made piece by piece, so that it stops at the allowance. Anything else
    is the stream's own."""

    __slots__ = ("_stream", "_deadline")

    def __init__(self, stream, deadline):
        self._stream = stream
        self._deadline = deadline

    def _counted(self, data):
        self._deadline.receive(len(data))
        return data

    async def read(self, n: int = -1) -> bytes:
        if n is not None and n >= 0:
            return self._counted(await self._stream.read(n))
        parts = []
        while chunk := self._counted(await self._stream.read(PIECE)):
            parts.append(chunk)
        return b"".join(parts)

    async def readany(self) -> bytes:
        return self._counted(await self._stream.readany())

    async def readexactly(self, n: int) -> bytes:
        return self._counted(await self._stream.readexactly(n))

    async def readline(self) -> bytes:
        return self._counted(await self._stream.readline())

    async def readchunk(self):
        data, end = await self._stream.readchunk()
        return self._counted(data), end

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def check_xml(body: bytes) -> None:
    """BadAnswer when ``body``, an answer botocore is about to parse as XML, declares a DOCTYPE
    (entities: expansion, external files; S3 sends none), nests deeper than MAX_XML_DEPTH or
    holds more than MAX_XML_ELEMENTS elements. One pass of expat that builds nothing; a body
    that is no XML is botocore's to refuse."""
    parser = xml.parsers.expat.ParserCreate()
    depth = elements = 0

    def start(_name, _attrs) -> None:
        nonlocal depth, elements
        depth += 1
        elements += 1
        if depth > MAX_XML_DEPTH or elements > MAX_XML_ELEMENTS:
            raise BadAnswer(f"the server's XML answer nests deeper than {MAX_XML_DEPTH} or holds "
                            f"more than {MAX_XML_ELEMENTS} elements, which no S3 answer does")

    def end(_name) -> None:
        nonlocal depth
        depth -= 1

    def doctype(*_args) -> None:
        raise BadAnswer("the server's XML answer declares a DOCTYPE (entities), which no S3 "
                        "answer does")

    parser.StartElementHandler, parser.EndElementHandler = start, end
    parser.StartDoctypeDeclHandler = doctype
    try:
        parser.Parse(body, True)
    except xml.parsers.expat.ExpatError:
        return  # not well-formed XML: botocore says so


class NoRedirects:
    """An aiohttp ``ClientSession`` whose requests never follow a redirect: aiohttp follows a
    301/302/303/307/308 to any ``Location`` by default (botocore's own urllib3 session never
    does), so an S3 endpoint, or anyone on a plain-HTTP path to it, sent the request on to a
    host of its choosing (``http://169.254.169.254/...``, an internal service) with the
    signed request's ``X-Amz-Security-Token`` (a credential) in it. A redirect is answered to
    botocore as it came (an error; S3's region redirects are botocore's to handle, to the same
    endpoint). Anything else is the session's own."""

    __slots__ = ("_session",)

    def __init__(self, session):
        self._session = session

    def request(self, *args, **kwargs):
        return self._session.request(*args, **{**kwargs, "allow_redirects": False})

    def __getattr__(self, name: str):
        return getattr(self._session, name)


class CountedSession(AIOHTTPSession):
    """aiobotocore's aiohttp session, each answer's body read through :class:`CountedStream`
    when the request runs within a tier call (:data:`RECEIVING`); no redirect followed
    (:class:`NoRedirects`)."""

    def _get_session(self, *args, **kwargs):
        # aiobotocore's own, private (2.12.2 .. 3.10: ``await self._get_session(proxy_url)``),
        # passed whatever it is given and awaited only where it is a coroutine: one that
        # takes other arguments, or none left, must not break every S3 call (the redirects
        # are followed again then, as before this hook; the bounds above still hold)
        got = super()._get_session(*args, **kwargs)
        if not inspect.isawaitable(got):
            return NoRedirects(got)

        async def wrapped():
            return NoRedirects(await got)
        return wrapped()

    async def send(self, request):
        deadline = RECEIVING.get()
        if deadline is None:
            return await super().send(request)
        preload = not request.stream_output
        request.stream_output = True  # the body is read below, counted, not by the session
        try:
            response = await super().send(request)
        finally:
            request.stream_output = not preload
        response.raw.content = CountedStream(response.raw.content, deadline)
        if preload or response.status_code >= 300:  # what botocore parses as XML, checked first
            check_xml(await response.content)
        return response

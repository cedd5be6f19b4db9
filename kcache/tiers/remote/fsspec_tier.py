"""The object-store tier: any fsspec URL (``s3://bucket/prefix``, ``gs://...``, ``file:///path``,
``memory://...``) through fsspec and its backends (s3fs for S3).

Values are the entry bytes as the store gives them (signed when a secret is set), one object per
key at ``<prefix>/<namespace>/v<format>/<ab>/<key>.kce``. Object stores replace an object
atomically on PUT; on a local file system (``file://``) a value is written to a temp name beside
it and renamed. Imported only when such a URL is opened.
"""
from __future__ import annotations

import contextlib
import os
import posixpath
import re
import secrets
from typing import Iterator

import fsspec

from ...disk.layout import SUFFIX, entry_key
from ...text import cut
from ..tier import Blob, TierError
from .base import (RECEIVING, Deadline, Overrun, RemoteTier, causes, chunk_size, current_deadline,
                   describe, os_kind, redact, run_within, url_credentials, version_tag)

S3_PROTOCOLS = ("s3", "s3a")
# Besides the connect and read timeouts, each call is bounded as a whole (base.Deadline: 2 x
# timeout, plus 1 s per MiB sent or received): an asynchronous backend (s3fs, gcsfs, ...) runs each
# step on fsspec's loop with what is left of it, a blocking one (ftp, sftp, file) runs the call
# in a thread of its own. The read timeout alone does not bound a PUT: botocore sends "Expect:
# 100-continue" and aiohttp waits for the interim answer with no timeout at all (a server that
# accepts and never answers hangs it for good).

SHARD_RE = re.compile(r"[0-9a-f]{2}")  # a shard folder's name: a key's first two digits
# names one listing (push, pull) takes at most, as the Redis tier's redis_tier.MAX_LISTED
MAX_LISTED = 1 << 21
#: storage options naming a credential (never shown)
_CREDENTIAL_OPTIONS = ("password", "secret", "token", "key", "passphrase")
_AWS_CREDENTIALS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")

try:  # botocore comes with s3fs; other backends do without it
    import botocore.exceptions as _bx
except ImportError:  # pragma: no cover - s3fs not installed
    _bx = None

# S3 error codes that mean "these credentials are not accepted here"
_AUTH_CODES = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
               "InvalidToken", "TokenRefreshRequired", "AllAccessDisabled", "AuthorizationHeaderMalformed"}


def storage_options(protocol: str, timeout: float, given: dict | None = None) -> dict:
    """fsspec options for ``protocol``: a fresh instance without a listings cache (a listing
    must not hide a value published since), and for S3 botocore's connect and read timeouts
    (``timeout`` seconds) with one attempt (no retry storm against a dead endpoint). ``given``
    (e.g. ``endpoint_url``) wins over these defaults."""
    options = {"skip_instance_cache": True, "use_listings_cache": False}
    if protocol == "ftp":
        options["timeout"] = timeout  # ftplib's socket timeout: each connect and each read
    if protocol in S3_PROTOCOLS:
        options["config_kwargs"] = {"connect_timeout": timeout, "read_timeout": timeout,
                                    "retries": {"total_max_attempts": 1, "mode": "standard"},
                                    **_counted_session()}
    for name, value in (given or {}).items():
        if name == "config_kwargs" and "config_kwargs" in options:
            value = {**options["config_kwargs"], **value}
        options[name] = value
    return options


def _counted_session() -> dict:
    """aiobotocore's ``http_session_cls`` that counts each answer's bytes against the call's
    allowance (s3_counted), where the installed aiobotocore takes one (older ones: answers
    bounded by the deadline only)."""
    try:
        import inspect

        from aiobotocore.config import AioConfig

        from .s3_counted import CountedSession
    except ImportError:  # pragma: no cover - s3fs not installed, or an old aiobotocore
        return {}
    if "http_session_cls" not in inspect.signature(AioConfig).parameters:
        return {}  # pragma: no cover - aiobotocore older than the hook
    return {"http_session_cls": CountedSession}


class FsspecTier(RemoteTier):
    """An fsspec file system as a tier. ``url``: any fsspec URL; its path is the prefix the
    values go under. Credentials and endpoints come from the backend's usual sources (for S3
    the AWS environment variables, profiles, ``AWS_ENDPOINT_URL``) or ``options`` (fsspec
    storage options). ``timeout``: seconds for each connect and each read (applied to S3 and
    FTP; other backends use their own settings), and each call, as well as the opening (some
    backends connect in their constructor), as a whole within 2 x timeout + 1 s per MiB,
    at most 10 x timeout.
    Raises ImportError when the backend's package is missing (``open_remote`` turns it into
    MissingClient), ValueError or TypeError for options it refuses, TierError when it could
    not be opened (``open_remote`` turns it into an :class:`~kcache.remote.base.Unopened`)."""

    kind = "fsspec"

    def __init__(self, url: str, *, namespace: str, readonly: bool, timeout: float,
                 options: dict | None = None):
        protocol = fsspec.core.split_protocol(url)[0] or "file"
        options = storage_options(protocol, timeout, options)
        hidden = url_credentials(url) + tuple(v for k, v in options.items()
                                              if k in _CREDENTIAL_OPTIONS and isinstance(v, str) and v)
        if protocol in S3_PROTOCOLS:
            hidden += tuple(v for v in map(os.environ.get, _AWS_CREDENTIALS) if v)
        super().__init__(redact(url), readonly=readonly, timeout=timeout, hidden=hidden)
        self._url, self._options = url, options
        root = self._use(*self._open(url, options))
        self._root = root
        self._local = "file" in _protocols(self._fs)
        self.threaded = not getattr(self._fs, "async_impl", False)
        self._base = posixpath.join(root, namespace, version_tag()) if root else f"{namespace}/{version_tag()}"

    def _open(self, url: str, options: dict):
        """``fsspec.core.url_to_fs(url, **options)`` within one call's deadline (FTP, SFTP,
        SMB connect in their constructor). ImportError, ValueError, TypeError pass; any other
        failure is a TierError of its kind."""
        deadline = Deadline(self.timeout)
        try:
            return run_within(lambda: fsspec.core.url_to_fs(url, **options), deadline, "kcache-remote-open")
        except (ImportError, ValueError, TypeError):
            raise
        except Exception as exc:  # refused, timed out, rejected: the program goes on without it
            if isinstance(exc, Overrun) or deadline.left() <= 0:
                raise self._overrun_error("open", deadline) from None
            err = self._classify(exc)
            err.args = (f"{self.name}: open: {err}",)
            raise err from None

    def _use(self, fs, root: str) -> str:
        """Make ``fs`` this tier's file system (as opened in this process); ``root``."""
        if set(_protocols(fs)) & set(S3_PROTOCOLS):
            fs.retries = 1  # s3fs's own retry loop (5 attempts with back-off by default)
        self._fs = fs
        self._session = not hasattr(fs, "set_session")  # s3fs: client made on first use
        # last: another thread of a forked child that sees this process's pid finds the
        # file system and its session state already this process's own
        self._pid = os.getpid()
        return root

    # -- names --------------------------------------------------------------------
    def path(self, key: str) -> str:
        """Where ``key``'s value lives: ``<prefix>/<namespace>/v<format>/<ab>/<key>.kce``."""
        key = self._key(key)
        return f"{self._base}/{key[:2]}/{key}{SUFFIX}"

    def _run(self, method: str, *args, **kwargs):
        """``fs.<method>(*args, **kwargs)``; for an asynchronous backend run on fsspec's loop
        with what is left of the call's deadline (none in a listing of unknown length: bounded
        per page by the backend)."""
        fs = self._fs
        if self.threaded:
            return getattr(fs, method)(*args, **kwargs)
        from fsspec.asyn import sync
        from fsspec.exceptions import FSTimeoutError

        deadline = current_deadline()
        left = deadline.left() if deadline is not None else None
        if left is not None and left <= 0:
            raise FSTimeoutError  # (sync() takes a timeout of 0 for none)
        token = RECEIVING.set(deadline)
        try:
            return sync(fs.loop, getattr(fs, "_" + method), *args, timeout=left, **kwargs)
        finally:
            RECEIVING.reset(token)

    def _abandon(self) -> bool:
        # an asynchronous call was cancelled at its deadline (sync's timeout), and a local
        # file system has no connection to share; a blocking backend's call left behind (ftp:
        # one connection per file system) may still be using it
        return not self.threaded or self._local

    def _prepare(self) -> None:
        if self._pid != os.getpid():
            # a forked child: fsspec's asynchronous file systems refuse its use ("This class
            # is not fork-safe": every call an io error) and a blocking one's connection is
            # the parent's; the child's own is opened (fsspec gives the child a new loop)
            self._use(*self._open(self._url, self._options))
        if not self._session:
            # s3fs builds its botocore client here: CPU work (0.3-0.6 s, reading botocore's
            # service models), no request, so it is kept out of the first call's deadline
            from fsspec.asyn import sync
            sync(self._fs.loop, self._fs.set_session)
            self._session = True
            self.hidden += _signing_credentials(self._fs, 2 * self.timeout)

    # -- the tier protocol ----------------------------------------------------------
    def read(self, key: str, limit: int) -> Blob | None:
        """``key``'s value or None. The object's size is checked first (a stated size that is
        not one of 0 .. ``limit`` bytes is TierError("bad_value"), not read; so is anything
        but a file). A value of one chunk (base.chunk_size: 1 MiB at the default timeout) is
        then read in one ranged read of at most limit + 1 bytes, so a value replaced meanwhile
        by a larger one is still refused within the bound; a larger one chunk by chunk, then
        looked at again (a value replaced while read is a miss). Each chunk that arrives adds
        1 s per MiB to the call's deadline; a size the server states adds nothing."""
        path = self.path(key)
        step = chunk_size(self.timeout)

        def op() -> Blob | None:
            try:
                info = self._run("info", path)
            except FileNotFoundError:
                return None
            if not isinstance(info, dict) or info.get("type") != "file":
                kind = info.get("type") if isinstance(info, dict) else None
                raise TierError("bad_value", f"{self.name}: value of {key} is not a regular object "
                                             f"(type {cut(repr(kind), 40)}); not read")
            size = self._stated(key, info.get("size"), limit)
            if size == 0:
                return None  # an empty object is no entry (and a ranged read of it fails)
            current_deadline().expect(size)  # what the answers may carry (S3: s3_counted)
            try:
                data = (self._cat(key, path, 0, limit + 1) if size <= step
                        else self._read_chunks(key, path, info, size, step))
            except FileNotFoundError:
                return None  # removed meanwhile
            if data is not None and len(data) > limit:
                raise self._too_large(key, f"more than {limit}", limit)
            return Blob(data) if data else None

        return self._call("read", op)

    def _cat(self, key: str, path: str, start: int, end: int) -> bytes:
        """Bytes ``start`` .. ``end`` - 1 of ``path`` (fewer at its end); the call's deadline
        grows by what arrived."""
        data = self._run("cat_file", path, start=start, end=end)
        if not isinstance(data, (bytes, bytearray)) or len(data) > end - start:
            raise TierError("bad_value", f"{self.name}: the server sent more or other than the "
                                          f"{end - start} bytes asked of the value of {key}; not read")
        current_deadline().transfer(len(data))
        return bytes(data)

    def _read_chunks(self, key: str, path: str, info: dict, size: int, step: int) -> bytes | None:
        """A value of ``size`` bytes (stated by ``info``) in ``step``-byte ranged reads; None
        when the object is not the same afterwards (size, ETag, mtime: replaced while read)."""
        parts, got = [], 0
        while got < size:
            part = self._cat(key, path, got, min(got + step, size))
            if not part:
                return None  # shrunk meanwhile
            parts.append(part)
            got += len(part)
        if got != size or _version(self._run("info", path)) != _version(info):
            return None
        return b"".join(parts)

    def write(self, key: str, data: bytes) -> None:
        """Publish ``key``'s value: one PUT (atomic on object stores); on a local file system
        a temp file beside it renamed over it."""
        path = self.path(key)
        self._check_writable("write")
        self._call("write", lambda: self._put(path, data), nbytes=len(data))

    def _put(self, path: str, data: bytes) -> None:
        if not self._local:
            self._run("pipe_file", path, data)
            return
        parent = posixpath.dirname(path)
        self._below_base(parent, "write")  # (realpath resolves the part that exists)
        self._fs.makedirs(parent, exist_ok=True)  # never through a symlink found above
        self._below_base(parent, "write")
        tmp = f"{parent}/.{posixpath.basename(path)}.{secrets.token_hex(8)}.tmp"
        try:
            self._fs.pipe_file(tmp, data)
            self._fs.mv(tmp, path)
        except BaseException:
            with contextlib.suppress(Exception):
                self._fs.rm_file(tmp)
            raise

    def _below_base(self, folder: str, what: str) -> None:
        """A ``file://`` remote writes and removes only in its own folders: one below its base
        that a symlink replaced (any writer of a shared folder can) would send a value, or a
        removal, elsewhere. TierError("io") when ``folder`` is not where it seems. Checked
        from the root the URL names (a symlink there is the user's choice), not from the base:
        the namespace and version folders below the root are the shared folder's too, and a
        symlink put there would move the base with it."""
        root = self._root or os.curdir
        below = os.path.normpath(os.path.join(os.path.realpath(root),
                                              posixpath.relpath(folder, root)))
        if os.path.realpath(folder) != below:
            raise TierError("io", f"{self.name}: {what}: {folder} is a symlink or lies under "
                                  "one; nothing is written or removed through it")

    def remove(self, key: str) -> bool:
        """Remove ``key``'s value; True if it existed (checked first: S3 deletes of a missing
        object succeed)."""
        path = self.path(key)
        self._check_writable("remove")

        def op() -> bool:
            try:
                self._run("info", path)
                if self._local:
                    self._below_base(posixpath.dirname(path), "remove")
                self._run("rm_file", path)
            except FileNotFoundError:
                return False
            return True

        return self._call("remove", op)

    def keys(self) -> Iterator[str]:
        """Every key under ``<prefix>/<namespace>/v<format>/``: the shard folders listed (one
        ``ls``), then each shard (one ``ls`` each), every listing one call within its deadline;
        names that are not ``<ab>/<key>.kce`` are skipped. TierError("bad_value") once the
        listings have named MAX_LISTED entries: one fsspec ``find`` of the whole namespace,
        of unknown length and under no deadline, let a huge or hostile bucket hold the
        command for as long and in as much memory as it liked."""
        listed = 0

        def names(folder: str) -> list[str]:
            nonlocal listed
            found = self._call("keys", lambda: self._names(folder))
            listed += len(found)
            if listed > MAX_LISTED:
                raise TierError("bad_value", f"{self.name}: keys: the listing went on past "
                                             f"{MAX_LISTED} names; stopped")
            return found

        shards = sorted({name for name in names(self._base) if SHARD_RE.fullmatch(name)})
        for shard in shards:
            for name in names(f"{self._base}/{shard}"):
                key = entry_key(shard, name)
                if key is not None:
                    yield key

    def _names(self, folder: str) -> list[str]:
        """The last parts of the names ``folder`` holds (none when it does not exist)."""
        try:
            found = self._run("ls", folder, detail=False)
        except FileNotFoundError:
            return []
        return [posixpath.basename(str(path).rstrip("/")) for path in found]

    def check(self) -> None:
        """One bounded round trip that says whether the tier works: when writable a probe
        object written and removed (the bucket exists, the credentials may write), else a
        listing of the prefix (something is there to read). Raises TierError."""
        def op() -> None:
            if self.writable:
                probe = f"{self._base}/.check-{secrets.token_hex(8)}.tmp"
                self._put(probe, b"kcache remote check")
                self._run("rm_file", probe)
                return
            try:
                self._run("ls", self._root, detail=False)
            except FileNotFoundError:
                raise TierError("io", f"{self.name}: nothing there (no such bucket, prefix or "
                                      "folder)") from None

        self._call("check", op)

    def close(self) -> None:
        """Nothing to release beyond what fsspec manages (its event loop is shared)."""

    def _classify(self, exc: BaseException) -> TierError:
        return TierError(_kind(exc), describe(exc, self.hidden))


def _signing_credentials(fs, timeout: float) -> tuple[str, ...]:
    """The secret key and session token an s3fs client signs with, wherever botocore found them
    (AWS_PROFILE, the shared credentials file, an instance role): a server's error text may
    echo a token (a listing's 403 quoting its X-Amz-Security-Token was printed by kcache pull),
    and only those from the environment or the options were known to be hidden. Resolved
    once, when the client is made (botocore has resolved them then: no request); empty for
    an anonymous client, one given its credentials in the options (hidden already), or any
    failure. Another backend: empty."""
    session = getattr(fs, "session", None)
    if (session is None or not hasattr(session, "get_credentials") or getattr(fs, "anon", False)
            or any(getattr(fs, name, None) for name in ("key", "secret", "token"))):
        return ()

    async def frozen():
        found = await session.get_credentials()
        return None if found is None else await found.get_frozen_credentials()

    try:
        from fsspec.asyn import sync
        got = sync(fs.loop, frozen, timeout=timeout)
    except Exception:  # no credentials to hide is no reason to stop: the lookup goes on
        return ()
    return tuple(v for v in (getattr(got, "secret_key", None), getattr(got, "token", None))
                 if isinstance(v, str) and v)


def _version(info) -> tuple:
    """What tells one version of an object from another in an fsspec ``info``: its size,
    ETag (S3, GCS) and modification time, whichever the backend gives."""
    if not isinstance(info, dict):
        return (None,)
    return tuple(repr(info.get(k)) for k in ("size", "ETag", "etag", "mtime", "LastModified", "updated",
                                             "created", "ino"))


def _protocols(fs) -> tuple:
    proto = fs.protocol
    return (proto,) if isinstance(proto, str) else tuple(proto)


def _kind(exc: BaseException) -> str:
    """The TierError kind of an fsspec/s3fs/botocore exception."""
    if _bx is not None:
        for e in causes(exc):
            if isinstance(e, (_bx.ConnectTimeoutError, _bx.ReadTimeoutError)):
                return "timeout"
            if isinstance(e, (_bx.NoCredentialsError, _bx.PartialCredentialsError)):
                return "auth"
            if isinstance(e, _bx.ClientError) and e.response.get("Error", {}).get("Code") in _AUTH_CODES:
                return "auth"
            if isinstance(e, (_bx.EndpointConnectionError, _bx.ConnectionClosedError)):
                return "refused"
    return os_kind(exc) or "io"

"""The object-store tier: any fsspec URL (``s3://bucket/prefix``, ``gs://...``, ``file:///path``,
``memory://...``) through fsspec and its backends (s3fs for S3).

Values are the entry bytes as the store gives them (signed when a secret is set), one object per
key at ``<prefix>/<namespace>/v<format>/<ab>/<key>.kce``. Object stores replace an object
atomically on PUT; on a local file system (``file://``) a value is written to a temp name beside
it and renamed. Imported only when such a URL is opened.
"""
from __future__ import annotations

import contextlib
import posixpath
import secrets
from typing import Iterator

import fsspec

from ..layout import SUFFIX, entry_key
from ..tier import Blob, TierError
from .base import RemoteTier, causes, describe, os_kind, redact, version_tag

S3_PROTOCOLS = ("s3", "s3a")
# Besides the connect and read timeouts, each call to an asynchronous backend (s3fs, gcsfs, ...)
# is bounded as a whole: 2 x timeout, plus 1 s per MiB transferred. The read timeout alone does
# not bound a PUT: botocore sends "Expect: 100-continue" and aiohttp waits for the interim
# answer with no timeout at all (a server that accepts and never answers hangs it for good).
TRANSFER_RATE = 1 << 20  # bytes per second assumed at worst for the whole-call bound

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
    if protocol in S3_PROTOCOLS:
        options["config_kwargs"] = {"connect_timeout": timeout, "read_timeout": timeout,
                                    "retries": {"total_max_attempts": 1, "mode": "standard"}}
    for name, value in (given or {}).items():
        if name == "config_kwargs" and "config_kwargs" in options:
            value = {**options["config_kwargs"], **value}
        options[name] = value
    return options


class FsspecTier(RemoteTier):
    """An fsspec file system as a tier. ``url``: any fsspec URL; its path is the prefix the
    values go under. Credentials and endpoints come from the backend's usual sources (for S3
    the AWS environment variables, profiles, ``AWS_ENDPOINT_URL``) or ``options`` (fsspec
    storage options). ``timeout``: seconds for each connect and each read (applied to S3;
    other backends use their own settings). Raises ImportError when the backend's package
    is missing (``open_remote`` turns it into MissingClient)."""

    kind = "fsspec"

    def __init__(self, url: str, *, namespace: str, readonly: bool, timeout: float,
                 options: dict | None = None):
        super().__init__(redact(url), readonly=readonly)
        protocol = fsspec.core.split_protocol(url)[0] or "file"
        fs, root = fsspec.core.url_to_fs(url, **storage_options(protocol, timeout, options))
        if protocol in S3_PROTOCOLS:
            fs.retries = 1  # s3fs's own retry loop (5 attempts with back-off by default)
        self._fs = fs
        self._root = root
        self._timeout = timeout
        self._local = "file" in _protocols(fs)
        self._session = not hasattr(fs, "set_session")  # s3fs: client made on first use
        self._base = posixpath.join(root, namespace, version_tag()) if root else f"{namespace}/{version_tag()}"

    # -- names --------------------------------------------------------------------
    def path(self, key: str) -> str:
        """Where ``key``'s value lives: ``<prefix>/<namespace>/v<format>/<ab>/<key>.kce``."""
        key = self._key(key)
        return f"{self._base}/{key[:2]}/{key}{SUFFIX}"

    def _run(self, method: str, *args, nbytes: int = 0, bounded: bool = True, **kwargs):
        """``fs.<method>(*args, **kwargs)``; for an asynchronous backend run on fsspec's loop
        with a deadline for the whole call (2 x timeout + nbytes / TRANSFER_RATE seconds;
        ``bounded=False`` for a listing of unknown length, bounded per page by the backend)."""
        fs = self._fs
        if not getattr(fs, "async_impl", False):
            return getattr(fs, method)(*args, **kwargs)
        from fsspec.asyn import sync

        if not self._session:
            # s3fs builds its botocore client here: CPU work (0.3-0.6 s, reading botocore's
            # service models), no request, so it is kept out of the first call's deadline
            sync(fs.loop, fs.set_session)
            self._session = True
        deadline = 2 * self._timeout + nbytes / TRANSFER_RATE if bounded else None
        return sync(fs.loop, getattr(fs, "_" + method), *args, timeout=deadline, **kwargs)

    # -- the tier protocol ----------------------------------------------------------
    def read(self, key: str, limit: int) -> Blob | None:
        """``key``'s value or None. The object's size is checked first (a value above
        ``limit`` bytes is TierError("bad_value"), not read; so is anything but a file); then
        at most limit + 1 bytes are read (a ranged read), so a value replaced meanwhile by a
        larger one is still refused within the bound."""
        path = self.path(key)

        def op() -> Blob | None:
            try:
                info = self._run("info", path)
            except FileNotFoundError:
                return None
            size = info.get("size")
            if info.get("type") != "file" or not isinstance(size, int):
                raise TierError("bad_value", f"{self.name}: value of {key} is not a regular object "
                                             f"(type {info.get('type')!r}); not read")
            if size > limit:
                raise self._too_large(key, size, limit)
            if size == 0:
                return None  # an empty object is no entry (and a ranged read of it fails)
            try:
                data = self._run("cat_file", path, start=0, end=limit + 1, nbytes=size)
            except FileNotFoundError:
                return None  # removed meanwhile
            if len(data) > limit:
                raise self._too_large(key, f"more than {limit}", limit)
            return Blob(bytes(data))

        return self._call("read", op)

    def write(self, key: str, data: bytes) -> None:
        """Publish ``key``'s value: one PUT (atomic on object stores); on a local file system
        a temp file beside it renamed over it."""
        path = self.path(key)
        self._check_writable("write")
        self._call("write", lambda: self._put(path, data))

    def _put(self, path: str, data: bytes) -> None:
        if not self._local:
            self._run("pipe_file", path, data, nbytes=len(data))
            return
        parent = posixpath.dirname(path)
        self._fs.makedirs(parent, exist_ok=True)
        tmp = f"{parent}/.{posixpath.basename(path)}.{secrets.token_hex(8)}.tmp"
        try:
            self._fs.pipe_file(tmp, data)
            self._fs.mv(tmp, path)
        except BaseException:
            with contextlib.suppress(Exception):
                self._fs.rm_file(tmp)
            raise

    def remove(self, key: str) -> bool:
        """Remove ``key``'s value; True if it existed (checked first: S3 deletes of a missing
        object succeed)."""
        path = self.path(key)
        self._check_writable("remove")

        def op() -> bool:
            try:
                self._run("info", path)
                self._run("rm_file", path)
            except FileNotFoundError:
                return False
            return True

        return self._call("remove", op)

    def keys(self) -> Iterator[str]:
        """Every key under ``<prefix>/<namespace>/v<format>/`` (one listing, fsspec ``find``);
        names that are not ``<ab>/<key>.kce`` are skipped."""
        def op() -> list[str]:
            try:
                return self._run("find", self._base, bounded=False)
            except FileNotFoundError:
                return []

        prefix = self._base.rstrip("/") + "/"
        for path in self._call("keys", op):
            parts = path[len(prefix):].split("/") if path.startswith(prefix) else ()
            key = entry_key(*parts) if len(parts) == 2 else None
            if key is not None:
                yield key

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
        return TierError(_kind(exc), describe(exc))


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

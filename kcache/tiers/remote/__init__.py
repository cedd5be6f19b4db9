"""Remote tiers: share entries across machines through Redis or an object store (docs/remote.md).

``open_remote(url, ...)`` returns a :class:`~kcache.tier.Tier`: a :class:`RedisTier` for
``redis://``, ``rediss://`` and ``unix://`` URLs (redis-py), an :class:`FsspecTier` for any
other fsspec URL (``s3://bucket/prefix``, ``file:///path``, ``memory://...``). The client
libraries are imported only then (``import kcache`` and ``import kcache.remote`` never import
them); when one is missing, :class:`MissingClient` names the extra to install.

For the store: :func:`remote_settings` reads the ``KCACHE_REMOTE*`` variables (and the same
settings from config.json), :func:`open_configured` opens the configured remote or returns None
with one warning (a missing client library or a bad setting never stops the user's program);
the CLI uses :func:`remote_settings` + :func:`open_remote` to report the same problems as errors.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Mapping

from ...config.values import parse_bool, parse_duration
from ...errors import ConfigError, KcacheError, MissingExtra
from ...warn import warn_once
from ..tier import TierError
from .base import (DEFAULT_LEASE_TTL, DEFAULT_MAX_ERRORS, DEFAULT_MAX_WAIT, DEFAULT_NAMESPACE,
                   DEFAULT_TIMEOUT, NAMESPACE_ACCEPTED, NAMESPACE_RE, Flight, Unopened, describe, redact,
                   shown, url_credentials)

__all__ = ["open_remote", "open_settings", "open_configured", "remote_settings", "check_setting", "RemoteSettings", "MissingClient",
           "Flight", "redact", "DEFAULT_NAMESPACE", "DEFAULT_TIMEOUT", "DEFAULT_MAX_WAIT",
           "DEFAULT_LEASE_TTL", "DEFAULT_MAX_ERRORS", "REDIS_SCHEMES"]

REDIS_SCHEMES = ("redis", "rediss", "unix")
MAX_TIMEOUT = 60.0  # seconds: a longer wait is no longer a soft tier
MAX_WAIT = 3600.0  # seconds
URL_ACCEPTED = ("redis://host:port/db, rediss://host:port/db (TLS), unix:///path/to/socket?db=N, "
                "or an fsspec URL such as s3://bucket/prefix, gs://bucket/prefix, file:///path")
_SCHEME_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


class MissingClient(MissingExtra):
    """The client library for a remote URL is not installed; the message names the extra
    (``pip install 'kcache-cuda[redis]'`` / ``'kcache-cuda[s3]'``) or fsspec's backend package."""


@dataclasses.dataclass(frozen=True)
class RemoteSettings:
    """The remote tier's settings (see :func:`remote_settings`). ``name``: the URL without
    secrets. ``password`` and ``secret`` are never shown by repr."""

    url: str = dataclasses.field(repr=False)
    namespace: str = DEFAULT_NAMESPACE
    readonly: bool = False
    timeout: float = DEFAULT_TIMEOUT  # seconds, each connect and each read (a whole call: 2 x)
    ttl: float | None = None  # seconds a Redis value lives; None: no expiry
    max_wait: float = DEFAULT_MAX_WAIT  # seconds a waiter waits for another machine's compile
    password: str | None = dataclasses.field(default=None, repr=False)
    secret: bytes | None = dataclasses.field(default=None, repr=False)

    @property
    def name(self) -> str:
        return redact(self.url)

    def __repr__(self) -> str:
        return (f"RemoteSettings(name={self.name!r}, namespace={self.namespace!r}, "
                f"readonly={self.readonly}, timeout={self.timeout}, ttl={self.ttl}, "
                f"max_wait={self.max_wait}, password={'set' if self.password else None}, "
                f"secret={'set' if self.secret else None})")


#: setting -> (environment variable, config.json key); password and secret only from the
#: environment (config.json is readable by the group in shared mode)
VARIABLES = {
    "url": ("KCACHE_REMOTE", "remote"),
    "namespace": ("KCACHE_REMOTE_NAMESPACE", "remote_namespace"),
    "readonly": ("KCACHE_REMOTE_READONLY", "remote_readonly"),
    "timeout": ("KCACHE_REMOTE_TIMEOUT", "remote_timeout"),
    "ttl": ("KCACHE_REMOTE_TTL", "remote_ttl"),
    "max_wait": ("KCACHE_REMOTE_WAIT", "remote_wait"),
}


def remote_settings(env: Mapping[str, str] | None = None,
                    config: Mapping[str, Any] | None = None) -> RemoteSettings | None:
    """The configured remote, or None when ``KCACHE_REMOTE`` (or config.json's ``remote``)
    is unset or blank. Precedence per setting: environment > ``config`` (config.json's
    settings) > default. ``KCACHE_REMOTE_PASSWORD`` and the signing secret
    (``KCACHE_REMOTE_SECRET``, else ``KCACHE_SECRET``) come from the environment only.
    Raises ConfigError naming the variable, what was given (never a secret) and what is
    accepted."""
    from .signing import secret_from_env

    env = os.environ if env is None else env
    config = config or {}
    raw: dict[str, tuple[str, Any]] = {}
    for field, (var, key) in VARIABLES.items():
        value = env.get(var)
        if value is not None and value.strip():
            raw[field] = (var, value.strip())
        elif config.get(key) not in (None, ""):
            raw[field] = (f"config.json {key}", config[key])
    if "url" not in raw:
        return None
    out = {field: check_setting(field, value, origin) for field, (origin, value) in raw.items()}
    password = env.get("KCACHE_REMOTE_PASSWORD") or None
    return RemoteSettings(**out, password=password, secret=secret_from_env(env))


#: Each setting's default (RemoteSettings), for ``kcache config show``.
DEFAULTS = {"url": None, "namespace": DEFAULT_NAMESPACE, "readonly": False,
            "timeout": DEFAULT_TIMEOUT, "ttl": None, "max_wait": DEFAULT_MAX_WAIT}


def check_setting(field: str, value: Any, origin: str) -> Any:
    """One setting of :data:`VARIABLES` (``field``: ``url``, ``namespace``, ...) checked and
    converted as :func:`remote_settings` does (durations to seconds, a TTL of 0 to None).
    ``origin`` names the variable or config.json key in messages. Raises ConfigError."""
    if field == "url":
        return check_url(value, origin)
    if field == "namespace":
        return check_namespace(value, origin)
    if field == "readonly":
        return parse_bool(value, origin)
    if field == "timeout":
        return check_timeout(parse_duration(value, origin), origin, shown=value)
    if field == "ttl":
        return parse_duration(value, origin) or None  # 0: no expiry
    if field == "max_wait":
        wait = parse_duration(value, origin)
        if wait > MAX_WAIT:
            raise ConfigError(f"{origin}={value!r:.80} is too long; accepted: 0 to {MAX_WAIT:.0f} seconds")
        return wait
    raise ValueError(f"unknown remote setting {field!r}")


def check_url(url: Any, origin: str = "KCACHE_REMOTE") -> str:
    """``url`` if it has a ``scheme://``; ConfigError (showing it without secrets) otherwise."""
    if not isinstance(url, str) or not _SCHEME_RE.match(url.strip()):
        raise ConfigError(f"{origin}={shown(url)} is not a remote URL; accepted: {URL_ACCEPTED}")
    problem = _url_problem(url.strip())
    if problem:
        raise ConfigError(f"{origin}={shown(url)} is not a remote URL ({problem}); accepted: "
                          f"{URL_ACCEPTED}")
    return url.strip()


def _url_problem(url: str) -> str | None:
    """What no client could connect to in a URL with a scheme: a port that is not a number
    from 0 to 65535, a host that does not parse, a Redis database that is not a number, a
    ``file://`` URL whose path is not absolute (fsspec would make it relative to the current
    directory)."""
    from urllib.parse import urlsplit
    try:
        parts = urlsplit(url)
        parts.port  # raises for a port that is not a number, or out of range
    except ValueError as exc:
        return f"its host or port cannot be read: {exc}"
    if parts.scheme.lower() in ("file", "local") and not url.split("://", 1)[1].startswith("/"):
        # fsspec reads 'file://nfs/kcache' as ./nfs/kcache: a folder of each process's own
        return "a file URL needs an absolute path: file:///path, three slashes"
    db = parts.path.strip("/")
    if parts.scheme in ("redis", "rediss") and db and not (db.isascii() and db.isdigit()):
        return "the database after the host must be a number"
    return None


def check_namespace(value: Any, origin: str = "KCACHE_REMOTE_NAMESPACE") -> str:
    """``value`` if it is a valid namespace (it becomes part of Redis keys and object paths,
    so no glob characters, slashes or colons); ConfigError otherwise."""
    if not isinstance(value, str) or not NAMESPACE_RE.fullmatch(value):
        raise ConfigError(f"{origin}={value!r:.80} is not a namespace; accepted: {NAMESPACE_ACCEPTED}")
    return value


def check_timeout(value: float, origin: str = "timeout", shown: Any = None) -> float:
    """``value`` (seconds) if 0 < value <= MAX_TIMEOUT; ConfigError otherwise, showing
    ``shown`` (what the user typed, e.g. ``'2m'``) when given, else ``value``."""
    if not 0 < value <= MAX_TIMEOUT:
        raise ConfigError(f"{origin}={value if shown is None else shown!r:.80} is out of range; "
                          "accepted: more than 0 and at most "
                          f"{MAX_TIMEOUT:.0f} seconds (e.g. 0.5, 2s)")
    return value


def open_remote(url: str, *, namespace: str = DEFAULT_NAMESPACE, readonly: bool = False,
                timeout: float = DEFAULT_TIMEOUT, ttl: float | None = None,
                password: str | None = None, max_wait: float | None = None,
                options: dict | None = None):
    """The tier for ``url`` (connects lazily: nothing is sent before the first call, except
    by fsspec backends that connect when opened, such as ftp://: opened within one call's
    deadline, and when that fails a tier whose first call raises the failure as a TierError,
    switched off from then on).

    ``namespace``: prefix of every key (letters, digits, ``._-``); ``readonly``: never write
    (writes raise TierError); ``timeout``: seconds for each connect and each read (default
    1 s), and for each call as a whole 2 x timeout + 1 s per MiB it transfers, at most 10 x
    timeout; ``ttl``: seconds a Redis value lives (None: forever; object stores: use a bucket
    lifecycle rule, ignored with a warning); ``password``: Redis password when the URL has
    none; ``max_wait``: seconds a Redis single-flight waiter waits (default 60 s);
    ``options``: fsspec storage options (e.g. ``{"endpoint_url": ...}``).

    Raises ConfigError (bad URL, namespace or timeout, naming what is accepted) or
    MissingClient (the client library is not installed: the message names the extra)."""
    url = check_url(url, "url")
    check_namespace(namespace, "namespace")
    check_timeout(timeout, "timeout")
    scheme = _SCHEME_RE.match(url).group(1).lower()
    if scheme in REDIS_SCHEMES:
        try:
            from .redis_tier import RedisTier
        except ImportError as exc:
            raise MissingClient(f"remote {redact(url)} needs the Redis client (redis-py), which is "
                                f"not installed ({exc}); install it with: pip install 'kcache-cuda[redis]'") from None
        return RedisTier(url, namespace=namespace, readonly=readonly, timeout=timeout, ttl=ttl,
                         password=password, max_wait=DEFAULT_MAX_WAIT if max_wait is None else max_wait)
    return _open_fsspec(url, scheme, namespace=namespace, readonly=readonly, timeout=timeout,
                        ttl=ttl, options=options)


def _open_fsspec(url: str, scheme: str, *, namespace: str, readonly: bool, timeout: float,
                 ttl: float | None, options: dict | None):
    extra = "s3" if scheme in ("s3", "s3a") else None
    hint = f"pip install 'kcache-cuda[{extra}]'" if extra else "pip install 'kcache-cuda[s3]' and fsspec's package for it"
    try:
        import fsspec
    except ImportError as exc:
        raise MissingClient(f"remote {redact(url)} needs fsspec, which is not installed ({exc}); "
                            f"install it with: {hint}") from None
    try:
        fsspec.get_filesystem_class(scheme)
    except ValueError:
        raise ConfigError(f"remote {redact(url)}: protocol {scheme!r} is known neither to redis-py nor "
                          f"to fsspec; accepted: {URL_ACCEPTED}") from None
    except ImportError as exc:  # fsspec knows the protocol, its backend package is missing
        raise MissingClient(f"remote {redact(url)} needs fsspec's {scheme!r} backend, which is not "
                            f"installed ({str(exc).splitlines()[0] if str(exc) else exc!r}); install it with: "
                            f"{hint if extra else 'pip install <the package named above>'}") from None
    from .fsspec_tier import FsspecTier

    if ttl:
        warn_once("remote-ttl", f"kcache: KCACHE_REMOTE_TTL applies to Redis only; {redact(url)} "
                                "keeps values until removed (use the bucket's lifecycle rules)")
    try:
        return FsspecTier(url, namespace=namespace, readonly=readonly, timeout=timeout, options=options)
    except ImportError as exc:
        raise MissingClient(f"remote {redact(url)}: {exc}; install it with: {hint}") from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"remote {redact(url)} cannot be opened: "
                          f"{describe(exc, url_credentials(url))}") from None
    except TierError as err:  # refused, timed out: a tier whose first call says so, then off
        return Unopened(redact(url), FsspecTier.kind, err, readonly=readonly, timeout=timeout)


def open_settings(settings: RemoteSettings, *, options: dict | None = None):
    """``open_remote`` with ``settings``. Raises ConfigError or MissingClient."""
    return open_remote(settings.url, namespace=settings.namespace, readonly=settings.readonly,
                       timeout=settings.timeout, ttl=settings.ttl, password=settings.password,
                       max_wait=settings.max_wait, options=options)


def open_configured(env: Mapping[str, str] | None = None, config: Mapping[str, Any] | None = None):
    """For the store: ``(tier, settings)`` for the configured remote, or ``(None, None)`` when
    none is configured, or (one warning, kind ``"remote-config"``) when a setting is bad or
    the client library is missing: the program runs on without the remote. Never raises."""
    try:
        settings = remote_settings(env, config)
        if settings is None:
            return None, None
        return open_settings(settings), settings
    except (ConfigError, MissingClient) as exc:
        warn_once("remote-config", f"kcache: remote tier not used: {exc}")
        return None, None

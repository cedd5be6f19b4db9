"""Signed values: HMAC-SHA256 over entry bytes with a shared secret (docs/remote.md, "Signing").

A checksum proves a value was not damaged; it does not prove who wrote it: whoever can write a
remote server (or a bundle) can plant a cubin with a valid checksum. With a secret, kcache signs
what it publishes and refuses what is not signed with that secret.

Signed value format (all integers big-endian)::

    magic     8 bytes   b"KCACHE\\x00S"   (an entry starts with b"KCACHE\\x00E")
    version   u16       SIGN_VERSION (1: HMAC-SHA256)
    tag      32 bytes   HMAC-SHA256(secret, magic + version + entry bytes)
    entry     the entry bytes, unchanged

The tag covers the entry bytes, and an entry's header names its key, so a signed value moved to
another key fails the entry check. Tags are compared with :func:`hmac.compare_digest`.

Secret precedence (:func:`secret_from_env`): ``KCACHE_REMOTE_SECRET``, else the bundle secret
``KCACHE_SECRET``; at least MIN_SECRET bytes (UTF-8). Without a secret nothing is checked: a
signed value is accepted with its signature stripped (the reader trusts the server, as for
unsigned values); with one, an unsigned or wrongly signed value is refused
(:class:`UnsignedValue`, :class:`BadSignature`).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import struct
from typing import Mapping

from ...errors import ConfigError, CorruptEntry
from ...warn import warn_once

MAGIC = b"KCACHE\x00S"
SIGN_VERSION = 1
_HEAD = struct.Struct(">8sH")
TAG_SIZE = 32  # bytes: HMAC-SHA256
OVERHEAD = _HEAD.size + TAG_SIZE  # bytes a signed value adds to the entry: 42
MIN_SECRET = 16  # bytes: shorter secrets can be guessed offline from one signed value
SECRET_VARIABLES = ("KCACHE_REMOTE_SECRET", "KCACHE_SECRET")


class SignatureError(CorruptEntry):
    """A value failed the signature check (a CorruptEntry: counted and never served)."""


class UnsignedValue(SignatureError):
    """A secret is configured but the value carries no signature."""


class BadSignature(SignatureError):
    """The value's signature is not valid for the configured secret (tampered with, signed
    with another secret, truncated, or an unknown signature version)."""


def secret_from_env(env: Mapping[str, str] | None = None) -> bytes | None:
    """The signing secret: ``KCACHE_REMOTE_SECRET``, else ``KCACHE_SECRET``, as UTF-8 bytes;
    None when neither is set (or both are blank). Raises ConfigError naming the variable for
    a secret shorter than MIN_SECRET (16) bytes."""
    env = os.environ if env is None else env
    for name in SECRET_VARIABLES:
        value = env.get(name, "")
        if value.strip():
            return check_secret(value.encode("utf-8", "surrogateescape"), name)
    blank = [name for name in SECRET_VARIABLES if env.get(name)]
    if blank:  # blanks only: meant as a secret, yet nothing is signed or checked
        warn_once("secret-blank", f"kcache: {blank[0]} holds only blanks: nothing is signed or "
                  "checked; set a secret of at least 16 bytes, or leave it unset or empty")
    return None


def check_secret(secret: bytes, name: str = "secret") -> bytes:
    """``secret`` if it has at least MIN_SECRET bytes; ConfigError naming ``name`` otherwise
    (never quoting the secret)."""
    if not isinstance(secret, bytes) or len(secret) < MIN_SECRET:
        raise ConfigError(f"{name} is too short for a signing secret ({len(secret)} bytes); "
                          f"accepted: at least {MIN_SECRET} bytes, e.g. the output of "
                          "`python3 -c 'import secrets; print(secrets.token_hex(32))'`")
    return secret


def _tag(secret: bytes, head: bytes, data) -> bytes:
    mac = hmac.new(secret, head, hashlib.sha256)
    mac.update(data)
    return mac.digest()


def is_signed(data: bytes) -> bool:
    """True when ``data`` starts like a signed value (says nothing about its validity)."""
    return data[:len(MAGIC)] == MAGIC


def wrap(secret: bytes, data: bytes) -> bytes:
    """The signed value of entry bytes ``data`` (OVERHEAD bytes longer). ``secret``: bytes,
    at least MIN_SECRET long (ConfigError otherwise)."""
    check_secret(secret)
    head = _HEAD.pack(MAGIC, SIGN_VERSION)
    return b"".join((head, _tag(secret, head, data), data))


def unwrap(secret: bytes | None, data: bytes, require: bool = True) -> bytes:
    """The entry bytes inside ``data`` (one copy of them, never more than ``len(data)``).

    With a ``secret``: a signed value's tag must match (BadSignature otherwise); an unsigned
    value raises UnsignedValue when ``require`` (default), else is returned as is. Without a
    secret (None): a signed value is returned stripped, unchecked, and an unsigned one as is.
    Both errors are CorruptEntry subclasses whose message names the problem."""
    view = memoryview(data)
    if not is_signed(data):
        if secret is not None and require:
            raise UnsignedValue("unsigned value refused: a signing secret is configured "
                                "(KCACHE_REMOTE_SECRET or KCACHE_SECRET)")
        return data
    if len(data) < OVERHEAD:
        raise BadSignature(f"truncated signed value: {len(data)} bytes, the signature alone is {OVERHEAD}")
    _magic, version = _HEAD.unpack_from(data)
    if version != SIGN_VERSION:
        raise BadSignature(f"unknown signature version {version} (this kcache knows {SIGN_VERSION})")
    body = view[OVERHEAD:]
    if secret is not None:
        expected = _tag(secret, view[:_HEAD.size], body)
        if not hmac.compare_digest(expected, view[_HEAD.size:OVERHEAD]):
            raise BadSignature("bad signature: the value was altered or signed with another secret")
    return body.tobytes()

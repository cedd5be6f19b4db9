"""The remote tier as the commands see it (``push``, ``pull``, ``remote check``, ``dir``,
``config``): opening it with every problem in one line, wording a tier error by its kind, and
keeping every password and secret out of what is printed.

No message is edited to hide a credential: none holds one. A tier's ``name`` is its URL
parsed and shown without user name, password and query options (:func:`kcache.remote.redact`);
a backend's error text that contains a credential the tier sends is left out whole
(:func:`kcache.remote.base.describe`); settings errors never quote a password or secret.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from kcache.cli.errors import Problem

#: What each TierError kind means, for the one line of ``remote check`` and failures.
KIND_WORDS = {
    "refused": "connection refused or closed (is the server running and reachable there?)",
    "timeout": "no answer in time",
    "auth": "credentials or certificate rejected (check the password, KCACHE_REMOTE_PASSWORD, "
            "the AWS credentials, or the TLS certificate)",
    "bad_value": "the server holds something that is not a value of kcache there",
    "io": "the server answered with an error",
    "unavailable": "switched off for this process after repeated errors",
}


def open_remote(store, nothing: str):
    """The store's remote tier (``Store.require_remote``) for a command that needs it; a
    Problem (exit 1, one line ending with ``nothing``, e.g. "nothing pushed") when none is
    configured, a setting is bad or the client library is missing (the line names the extra
    to install: ``pip install 'kcache-cuda[redis]'``). The command then reports the remote's
    errors itself: the store's warnings of them are not printed."""
    from kcache.cli.main import reported_here
    from kcache.errors import KcacheError
    reported_here("remote", "remote-off", "remote-bad")  # each failure is named by the command
    try:
        return store.require_remote()
    except KcacheError as exc:  # ConfigError, MissingClient, none configured
        raise Problem(f"{one_line(exc)}; {nothing}") from None


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def tier_problem(exc, timeout: float | None = None) -> str:
    """One line for a TierError ``exc``: what its kind means, then the backend's words
    ``no answer in time (timeout, 1 s: KCACHE_REMOTE_TIMEOUT): ...``."""
    kind = getattr(exc, "kind", "io")
    words = KIND_WORDS.get(kind, kind)
    if kind == "timeout" and timeout is not None:
        label = f"timeout, {timeout:g} s: KCACHE_REMOTE_TIMEOUT"
    else:
        label = kind
    return f"{words} ({label}): {one_line(exc)}"


def configured(config: Mapping[str, Any] | None) -> tuple[Any, str | None]:
    """``(RemoteSettings or None, problem or None)`` for the remote that ``KCACHE_REMOTE*``
    and ``config`` (config.json's contents) configure; no client library is imported and
    nothing is sent. For ``dir`` and ``stats``, which show it but never connect."""
    from kcache.errors import ConfigError
    from kcache.tiers.remote import remote_settings
    try:
        return remote_settings(os.environ, config or {}), None
    except ConfigError as exc:
        return None, one_line(exc)


def summary(settings) -> dict:
    """The JSON fields describing a configured remote (never a credential): ``remote`` (its
    URL without secrets, or None), ``remote_readonly``, ``remote_namespace``,
    ``remote_signed`` (values are signed and checked: a secret is set)."""
    if settings is None:
        return {"remote": None, "remote_readonly": None, "remote_namespace": None,
                "remote_signed": None}
    return {"remote": settings.name, "remote_readonly": settings.readonly,
            "remote_namespace": settings.namespace, "remote_signed": settings.secret is not None}


def describe(settings) -> str:
    """The remote for people: ``redis://cache:6379/0 (read-write, namespace kcache, signed)``."""
    how = "read-only" if settings.readonly else "read-write"
    signed = "signed" if settings.secret is not None else "unsigned"
    return f"{settings.name} ({how}, namespace {settings.namespace}, {signed})"

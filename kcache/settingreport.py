"""``SettingReport``: one setting as :func:`kcache.config.resolve_each` found it (``kcache
config show``). Also importable from :mod:`kcache.config`.

A module of its own so that only what reports settings builds the dataclass (~0.7 ms on a
2-core machine): ``Store()`` resolves them through ``kcache.config._Row``.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .errors import ConfigError  # noqa: F401 (the annotation of ``error``)


@dataclasses.dataclass(frozen=True)
class SettingReport:
    """One setting as :func:`resolve_each` found it.

    ``value``: the parsed value (bytes, seconds, Path, tuple of Path, bool), None when bad;
    ``origin``: "argument", "env KCACHE_X", "config <path>" or "default"; ``raw``: the value
    as given, before parsing (text from the environment, a JSON value from config.json, the
    argument or the default); ``error``: the :class:`~kcache.errors.ConfigError` that
    :func:`resolve` would raise for it, or None."""

    value: Any
    origin: str
    raw: Any
    error: ConfigError | None = None

"""Warn once per kind per process.

A broken, read-only or full cache must not flood a user's program with warnings: each kind of
problem (e.g. ``"readonly"``, ``"corrupt"``) is reported once per process through
:mod:`warnings` (category :class:`KcacheWarning`) and logged at WARNING on logger ``kcache``.
"""
from __future__ import annotations

import logging
import os
import threading
import warnings

log = logging.getLogger("kcache")

_seen: set[str] = set()
_mutex = threading.Lock()


class KcacheWarning(UserWarning):
    """Category of every warning kcache emits."""


def warn_once(kind: str, message: str) -> bool:
    """Emit ``message`` unless a warning of ``kind`` was already emitted in this process.

    Returns True if the warning was emitted.
    """
    with _mutex:
        if kind in _seen:
            return False
        _seen.add(kind)
    log.warning("%s", message)
    warnings.warn(message, KcacheWarning, stacklevel=3)
    return True


def reset() -> None:
    """Forget which kinds were warned (tests; also run in a forked child)."""
    with _mutex:
        _seen.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=reset)

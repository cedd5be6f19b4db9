"""Warn once per kind per process, printed once.

A broken, read-only or full cache must not flood a user's program with warnings: each kind of
problem (e.g. ``"unwritable"``, ``"corrupt"``) is reported once per process.

Each report is printed exactly once, through one channel:

* normally through :mod:`warnings` (category :class:`KcacheWarning`), the convention for a
  library: tests can record it, ``-W`` and ``warnings.filterwarnings`` control it, and
  ``logging.captureWarnings(True)`` sends it to logging;
* when the filters ignore ``KcacheWarning`` (``warnings.simplefilter("ignore", KcacheWarning)``,
  as the ``kcache`` command does), at WARNING on logger ``"kcache"`` instead, with
  ``record.kcache_kind`` set to the kind so a handler can drop some kinds.

Before, both channels were used, and a plain script printed every warning twice (logging's
last-resort handler plus the warnings module).

Printed by the warnings module's own machinery, a kcache warning is its message alone on one
line, ``kcache: ...``: no source path, category or code line (they name kcache's code, not
the user's). :func:`warnings.formatwarning` is swapped for the duration of kcache's own
``warnings.warn`` call only (:func:`_short_format`), so every other package's warnings, and
a program's own ``formatwarning``, keep their format.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import warnings

from .text import escape

log = logging.getLogger("kcache")

_seen: set[str] = set()
_mutex = threading.Lock()


class KcacheWarning(UserWarning):
    """Category of every warning kcache emits."""


def _ignored(message: str) -> bool:
    """True when the first filter of :data:`warnings.filters` that applies to a
    KcacheWarning with ``message`` (whatever the warning's module) says "ignore"."""
    for action, msg, category, module, _lineno in warnings.filters:
        if module is not None or not issubclass(KcacheWarning, category):
            continue  # module-specific filters depend on the caller: not ours to guess
        if msg is None or msg.match(message):
            return action == "ignore"
    return warnings.defaultaction == "ignore"


def warn_once(kind: str, message: str) -> bool:
    """Emit ``message`` unless a warning of ``kind`` was already emitted in this process:
    through :func:`warnings.warn` (KcacheWarning), or on logger "kcache" when KcacheWarning
    is ignored (see the module docstring); either way on one line, escaped and bounded as
    :func:`one_line` makes it. Returns True if the warning was emitted."""
    held = getattr(_held, "kinds", None)
    if held is not None:  # work done ahead of time: the real attempt will warn
        if kind not in _seen:
            held.append(kind)
        return False
    with _mutex:
        if kind in _seen:
            return False
        _seen.add(kind)
    message = _safe(message)  # escaped here: no caller can forget
    if _ignored(message):
        log.warning("%s", message, extra={"kcache_kind": kind})
    else:
        with _short_format():
            warnings.warn(message, KcacheWarning, stacklevel=3)
    return True


#: Longest warning, in characters before escaping; a longer one keeps its start and its end
#: (the advice) around `` … ``: a warning quoting a 5 MB value from a file stays a line.
WARNING_LIMIT = 2000


def one_line(message) -> str:
    """A KcacheWarning's printed form: ``kcache: <message>`` on one line, bounded
    (:data:`WARNING_LIMIT`) and with every character ``str.isprintable`` rejects (ESC, BEL,
    bidi overrides...) escaped (:func:`kcache.text.escape`), so a path or value from a cache
    or config file cannot reach a terminal raw, whatever the caller did. Backslashes are not
    escaped: text a caller escaped already (printable) comes through unchanged."""
    text = _safe(message)
    return text if text.startswith("kcache:") else f"kcache: {text}"


def _safe(message) -> str:
    """``message`` on one line, bounded and escaped (:func:`one_line`, without the prefix)."""
    text = " ".join(str(message).splitlines())
    if len(text) > WARNING_LIMIT:
        text = f"{text[:WARNING_LIMIT - 200]} … {text[-150:]}"
    return escape(text)


_format_mutex = threading.RLock()


@contextlib.contextmanager
def _short_format():
    """Within the block, :func:`warnings.formatwarning` prints a KcacheWarning as
    :func:`one_line` and any other warning as before. Only while the standard function is
    in place: a program that replaced it gets its own format for kcache's warnings too."""
    with _format_mutex:  # one swap at a time, each putting back what it found
        standard = warnings.formatwarning
        if getattr(standard, "__module__", None) not in ("warnings", "_py_warnings"):
            yield  # a program's own, or ours already (a warning raised while printing one)
            return

        def formatwarning(message, category, filename, lineno, line=None):
            if isinstance(category, type) and issubclass(category, KcacheWarning):
                return one_line(message) + "\n"
            return standard(message, category, filename, lineno, line)

        warnings.formatwarning = formatwarning
        try:
            yield
        finally:
            if warnings.formatwarning is formatwarning:
                warnings.formatwarning = standard


def reset() -> None:
    """Forget which kinds were warned (tests; also run in a forked child)."""
    with _mutex:
        _seen.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=reset)


_held = threading.local()


@contextlib.contextmanager
def held_back():
    """Within the block (this thread), :func:`warn_once` emits nothing and marks nothing as
    seen; the block gets the list of the kinds it would have warned about. For work done
    ahead of time (the store opened when a kernel is defined): when that list is not empty,
    the caller drops the result and the real attempt later warns as it always did."""
    kinds: list[str] = []
    previous = getattr(_held, "kinds", None)
    _held.kinds = kinds
    try:
        yield kinds
    finally:
        _held.kinds = previous

"""Formatting of sizes, times, seconds and counts, for people and for plain output.

Every function takes any value (a header field may hold NaN, infinity, a huge or negative
number, text...) and gives "-" / None for what is not a sensible value, never an exception.
"""
from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from kcache.cli.values import number

_CENTURY = 36525 * 86400.0  # seconds
#: Decimals of seconds in plain output (JSON keeps full precision).
SECONDS_DECIMALS = 2


def iso(ts: Any) -> str | None:
    """Unix seconds -> ISO 8601 in UTC, e.g. ``2026-11-30T23:55:45Z``; None for None and for
    anything that is not a representable time (NaN, infinity, year beyond 9999, text)."""
    seconds = number(ts)
    if seconds is None:
        return None
    try:
        moment = datetime.fromtimestamp(seconds, timezone.utc)
    except (OverflowError, ValueError, OSError):
        return None
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def ago(ts: Any, now: float | None = None) -> str:
    """Unix seconds -> a relative time for people: ``just now``, ``5 min ago``, ``in 3 h``;
    ``-`` for no or no sensible time."""
    seconds = number(ts)
    if seconds is None:
        return "-"
    delta = (time.time() if now is None else now) - seconds
    future, delta = delta < 0, abs(delta)
    if delta >= _CENTURY:  # a header time far off: say so without a 300-digit number
        return "in 100+ y" if future else "100+ y ago"
    for unit, length in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if delta >= length:
            amount = f"{int(delta // length)} {unit}"
            return f"in {amount}" if future else f"{amount} ago"
    return "just now"


def human_size(n: Any) -> str:
    """Bytes -> ``kcache.config.format_size`` text (e.g. ``1.5 MiB``); ``-`` for a value that
    is not a whole number of bytes >= 0."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        return "-"
    from kcache.config import format_size
    return format_size(n)


def plain_seconds(s: Any) -> str | None:
    """Seconds for plain (piped) output, rounded: ``0.08`` (JSON keeps them exact)."""
    seconds = number(s)
    return None if seconds is None else f"{seconds:.{SECONDS_DECIMALS}f}"


def human_seconds(s: Any) -> str:
    """Seconds -> ``0.84 s``, ``12.3 min`` or ``4.1 h`` for people; ``-`` for no value."""
    seconds = number(s)
    if seconds is None:
        return "-"
    if abs(seconds) < 60:
        return f"{seconds:.2f} s"
    if abs(seconds) < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


#: Units of a setting's duration for people, largest first, as the docs state the defaults
#: (``30 d``, ``600 s``); below an hour, seconds.
_DURATION_UNITS = (("d", 86400), ("h", 3600))


def human_duration(s: Any) -> str:
    """A setting's seconds as the docs state them: days or hours when a whole number of them
    or with one decimal (``30 d``, ``1.5 h``), else seconds (``600 s``, ``0.25 s``); ``-`` for
    no value. (Compile times are :func:`human_seconds`.)"""
    seconds = number(s)
    if seconds is None or seconds < 0:
        return "-"
    if seconds >= _CENTURY:
        return "100+ y"
    for unit, length in _DURATION_UNITS:
        tenths = seconds * 10 / length
        if seconds >= length and tenths == int(tenths):
            return f"{tenths / 10:g} {unit}"
    return f"{seconds:g} s" if seconds < 1e6 else f"{round(seconds)} s"


def plural(n: int, one: str, many: str | None = None) -> str:
    """``1 entry``, ``2 entries``: ``n`` with the right form of the noun."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def entries_text(n: int) -> str:
    """``1 entry`` / ``N entries``."""
    return plural(n, "entry", "entries")


def code_memos_text(files: int, size: int) -> str:
    """``, and 2 files of remembered code analyses (3.1 KiB)`` (what clear and prune add to
    their summary line), or "" when ``files`` is 0."""
    return (f", and {plural(files, 'file')} of remembered code analyses ({human_size(size)})"
            if files else "")

"""Values of settings as text: sizes, durations, booleans (``parse_size``, ``parse_duration``,
``parse_bool``, ``format_size``). Each parser raises :class:`~kcache.errors.ConfigError` naming
the setting, quoting the value and saying what is accepted. Imports nothing of kcache but its
errors, so the tiers may use it (kcache.tiers.remote) below the settings (kcache.config.settings).
"""
from __future__ import annotations

import math
import re
from typing import Any

from ..errors import ConfigError

#: Characters of a number given as text: longer is refused before any conversion (Python's
#: int conversion stops at 4,300 digits with a bare ValueError).
_MAX_NUMBER_TEXT = 1000

# Units are spelled exactly as documented (docs/cli.md): "5m" is refused rather than read as
# 5 MiB, since for durations "m" means minutes.
_SIZE_UNITS = {"": 1, "B": 1}
for _i, _u in enumerate("KMGT", start=1):
    _SIZE_UNITS[_u] = 1024**_i
    _SIZE_UNITS[_u + "iB"] = 1024**_i
    _SIZE_UNITS[_u + "B"] = 1000**_i


# re.ASCII: only ASCII digits and blanks ("٥" is not a size).
_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*", re.ASCII)


MAX_SIZE_BYTES = 2**63 - 1  # the largest file offset (off_t); msgpack and JSON keep it exact
SIZE_ACCEPTED = ("bytes (a whole number, e.g. 1048576) or a number with a unit: K, M, G, T or "
                 "KiB, MiB, GiB, TiB (1024-based), KB, MB, GB, TB (1000-based), spelled so, e.g. "
                 "500M, 2G, 2GiB, 1.5G; a whole number of bytes, at most 2**63-1 bytes (8 EiB)")

_DUR_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


_DURATION_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]?)\s*", re.ASCII)


MAX_DURATION = 36525 * 86400.0  # seconds: 100 years, far beyond any lock wait or entry age
DURATION_ACCEPTED = ("seconds (e.g. 30, 1.5) or a number with a unit s, m, h, d, w (e.g. 90s, 30m, "
                     "12h, 7d, 2w); at least 0, at most 36525d (100 years)")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def parse_size(value: str | int, name: str = "size") -> int:
    """Parse a size into bytes: an int, or text like "500M", "2G", "2GiB", "1.5GB", "1048576".

    K/M/G/T and KiB/MiB/GiB/TiB are 1024-based; KB/MB/GB/TB are 1000-based; units are spelled
    exactly so ("5m" is refused: for durations "m" means minutes) and digits are ASCII only.
    The result must be a whole number of bytes ("1.5G" is; "0.5", "1.5" and "0.1K" are not). Text is read exactly (``fractions.Fraction``, never a float), so a
    400-digit number is "too large", not infinity. Raises ConfigError naming ``name`` and
    quoting ``value`` for anything else: negative, above MAX_SIZE_BYTES (2**63-1), a float or
    bool (e.g. ``{"max_size": 1.5}`` in config.json), an unknown unit, a fraction of a byte,
    not a number."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ConfigError(f"{name}={_quote(value)} is negative; accepted: {SIZE_ACCEPTED}")
        number = value
    elif isinstance(value, str):
        if len(value) > _MAX_NUMBER_TEXT:  # refused before any conversion
            raise ConfigError(f"{name}={_quote(value)} is too large; accepted: {SIZE_ACCEPTED}")
        m = _SIZE_RE.fullmatch(value)
        unit = m and _SIZE_UNITS.get(m.group(2))
        if not m or unit is None:
            raise ConfigError(f"{name}={_quote(value)} is not a size{_sign_note(value)}{_unit_note(m)}; "
                              f"accepted: {SIZE_ACCEPTED}")
        from fractions import Fraction  # exact, never a float; imported when a size is given
        exact = Fraction(m.group(1)) * unit
        if exact.denominator != 1:
            raise ConfigError(f"{name}={_quote(value)} is not a whole number of bytes (sizes are whole "
                              f"bytes); accepted: {SIZE_ACCEPTED}")
        number = int(exact)
    else:
        raise ConfigError(f"{name}={_quote(value)} is not a size; accepted: {SIZE_ACCEPTED}")
    if number > MAX_SIZE_BYTES:
        raise ConfigError(f"{name}={_quote(value)} is too large; accepted: {SIZE_ACCEPTED}")
    return number


def parse_duration(value: str | float | int, name: str = "duration") -> float:
    """Parse a duration into seconds: a number, or text like "90s", "30m", "12h", "7d", "2w".

    Text is read exactly (``fractions.Fraction``), so huge numbers are "too large", never
    infinity. Raises ConfigError naming ``name`` and quoting ``value`` for a negative,
    non-finite, too large (> MAX_DURATION, 100 years) or unparsable value. ``-0.0`` gives 0.0."""
    if isinstance(value, bool):
        raise ConfigError(f"{name}={_quote(value)} is not a duration; accepted: {DURATION_ACCEPTED}")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name}={_quote(value)} is not a finite number of seconds; accepted: {DURATION_ACCEPTED}")
        if value < 0:
            raise ConfigError(f"{name}={_quote(value)} is negative; accepted: {DURATION_ACCEPTED}")
        seconds = value  # int/float comparisons are exact: no Fraction (and no import) needed
    elif isinstance(value, str):
        if len(value) > _MAX_NUMBER_TEXT:
            raise ConfigError(f"{name}={_quote(value)} is too large; accepted: {DURATION_ACCEPTED}")
        m = _DURATION_RE.fullmatch(value)
        if not m or m.group(2).lower() not in _DUR_UNITS:
            raise ConfigError(f"{name}={_quote(value)} is not a duration{_sign_note(value)}; accepted: {DURATION_ACCEPTED}")
        from fractions import Fraction
        seconds = Fraction(m.group(1)) * _DUR_UNITS[m.group(2).lower()]
    else:
        raise ConfigError(f"{name}={_quote(value)} is not a duration; accepted: {DURATION_ACCEPTED}")
    if seconds > MAX_DURATION:
        raise ConfigError(f"{name}={_quote(value)} is too large; accepted: {DURATION_ACCEPTED}")
    return float(seconds) + 0.0  # + 0.0 turns -0.0 into 0.0


def _long(text: str) -> str:
    """A value too long to quote whole: its start and length."""
    return f"{text[:24]!r}... ({len(text)} characters)"


def _quote(value: Any) -> str:
    """``repr(value)`` for a message, shortened for a text longer than _MAX_NUMBER_TEXT and
    for a huge int (whose repr Python refuses past 4,300 digits with a bare ValueError)."""
    if isinstance(value, str) and len(value) > _MAX_NUMBER_TEXT:
        return _long(value)
    if isinstance(value, int) and value.bit_length() > 3 * _MAX_NUMBER_TEXT:
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    return repr(value)


def _unit_note(m: re.Match | None) -> str:
    # "5m", "10kb": the unit exists in another case; say which spelling is meant
    unit = m.group(2) if m else ""
    known = [u for u in _SIZE_UNITS if u and u.lower() == unit.lower()]
    return f" (units are spelled {known[0]!r}, not {unit!r})" if known else ""


def _sign_note(text: str) -> str:
    # "-0", "-5G", "+1": say why, rather than only "not a size"
    sign = text.strip()[:1]
    return " (negative: no sign is allowed)" if sign == "-" else " (no sign is allowed)" if sign == "+" else ""


def parse_bool(value: str | bool, name: str) -> bool:
    """Parse 1/0, true/false, yes/no, on/off (any case); ConfigError naming ``name`` otherwise."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{name}={_quote(value)} is not a boolean; accepted: 1/0, true/false, yes/no, on/off")


def format_size(n: int) -> str:
    """Human-readable 1024-based size: 512 -> "512 B", 1536 -> "1.5 KiB", 2**31 -> "2.0 GiB"."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")

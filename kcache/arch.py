"""Compute capabilities and arch names: the one place that parses and names them.

Used by the dispatcher (keys, ``compile_for``), the CLI (``--cc`` filters) and the examples.
Imports no numba, so the CLI stays fast.

Accepted spellings of a compute capability (numba-cuda's own forms):

* a tuple or list ``(9, 0)`` or ``(9, 0, "a")`` (``numba.cuda`` device ``compute_capability``,
  ``CUDACodeLibrary._ensure_cc``; a third element ``""`` counts as no suffix);
* a string ``"9.0"``, ``"9.0a"``, ``"90"``, ``"90a"``, ``"sm_90"``, ``"sm_90a"``,
  ``"compute_90"``, ``"compute_90a"`` (any case, surrounding blanks ignored);
* an int ``90`` (major and minor digits run together; ``100`` is 10.0, ``121`` is 12.1);
* a float ``9.0`` or ``8.6``, read as the string its repr is (``"9.0"``).

numba-cuda 0.30 compiles a device of cc 9.0 or newer for its arch-specific ``a`` variant
(``CUDACodeLibrary._ensure_cc`` adds ``"a"``), so ``9.0`` and ``9.0a`` name the same target,
``sm_90a``: :func:`full_cc` and :func:`arch_name` give the same answer for both, and so do the
keys built from them. An ``a`` suffix below 9.0 and the family suffix ``f`` (which numba-cuda
0.30 never picks for a device) are refused.
"""
from __future__ import annotations

import operator
import re

from .errors import KcacheError

__all__ = ["parse_cc", "full_cc", "arch_name", "arch_matches", "option_problem", "BadCC",
           "ACCEPTED", "OPTION_FORMS"]

#: The accepted forms, as every error message names them.
ACCEPTED = "(9, 0), (9, 0, 'a'), '9.0', '9.0a', 'sm_90', 'sm_90a', 'compute_90', 90, '90' or 9.0"
#: The same, in the words of a command-line option (``--cc``).
OPTION_FORMS = "use MAJOR.MINOR like 9.0 or sm_90 (also 90, 9.0a, sm_90a, compute_90)"


class BadCC(KcacheError, ValueError):
    """A value that is not a compute capability kcache can use: :func:`parse_cc`'s error,
    and ``compile_for``'s for a cc or list of them (a ``kcache.KcacheError`` and a
    ValueError, its message one line). ``near``: the ``(major, minor)`` the value names around a
    suffix that cannot be used (``sm_99x``, ``sm_80a``), else None; ``why``: that suffix's
    problem in a few words, else None."""

    def __init__(self, message: str, near: tuple | None = None, why: str | None = None):
        super().__init__(message)
        self.near, self.why = near, why

# Arch names have one minor digit; majors have been one or two digits (sm_121 is 12.1).
_MAX_MAJOR, _MAX_MINOR = 99, 9
_MAX_TEXT = 32  # longer strings are refused before any regex or int() sees them
_DOTTED = re.compile(r"(?:sm_|compute_)?(\d{1,2})\.(\d)([a-z]?)")
_PACKED = re.compile(r"(?:sm_|compute_)?(\d{1,2})(\d)([a-z]?)")
#: The first cc for which numba-cuda compiles the arch-specific ("a") variant.
ARCH_SPECIFIC_FROM = (9, 0)


def parse_cc(value) -> tuple:
    """``(major, minor, suffix)`` of a compute capability in any accepted form (module doc);
    ``suffix`` is ``"a"`` when one was given, else None.

    Syntax only: whether the CUDA toolkit supports it is asked elsewhere
    (``kcache.dispatcher.check_cc``). Raises ValueError with one line quoting the value
    (shortened) and naming the accepted forms."""
    if isinstance(value, str):
        return _parse_text(value)
    if isinstance(value, (tuple, list)):
        return _parse_sequence(value)
    if isinstance(value, float):  # 9.0, 8.6: the text its repr is; nan, 8.60001 refused
        try:
            return _parse_text(repr(value))
        except BadCC:
            raise _bad(value) from None
    number = _integer(value)
    if number is not None:
        if not 10 <= number <= _MAX_MAJOR * 10 + _MAX_MINOR:
            raise _bad(value)
        return _checked(number // 10, number % 10, None, value)
    raise _bad(value)


def full_cc(value) -> tuple:
    """``(major, minor, suffix)`` as numba-cuda 0.30 compiles for a device of that cc and keys
    its PTX/cubin caches (``CUDACodeLibrary._ensure_cc``): suffix ``"a"`` for cc >= 9.0, else
    ``""``. ``value`` in any accepted form; ValueError as :func:`parse_cc`."""
    major, minor, _suffix = parse_cc(value)
    return (major, minor, "a" if (major, minor) >= ARCH_SPECIFIC_FROM else "")


def arch_name(value) -> str:
    """The arch name numba-cuda compiles for: ``(8, 0)`` -> ``"sm_80"``, ``(9, 0)``,
    ``"9.0a"`` and ``"sm_90"`` -> ``"sm_90a"``. ValueError as :func:`parse_cc`."""
    major, minor, suffix = full_cc(value)
    return f"sm_{major}{minor}{suffix}"


def arch_matches(arch, cc: tuple) -> bool:
    """True when an entry's ``arch`` (a string such as ``"sm_90a"``, as stored in entries; any
    other value is no match) is compute capability ``cc`` (a :func:`parse_cc` result): same
    major and minor and, when ``cc`` names the ``a`` suffix, an ``a`` arch too. So ``9.0``
    matches ``sm_90`` and ``sm_90a``, ``sm_90a`` only ``sm_90a``."""
    if not isinstance(arch, str):
        return False
    try:
        major, minor, suffix = _parse_text(arch)
    except ValueError:
        return False
    return (major, minor) == tuple(cc[:2]) and (not cc[2] or suffix == cc[2])


def option_problem(flag: str, text: str, supported=None) -> str | None:
    """One line saying why ``flag TEXT`` (e.g. ``--cc sm_99x``) is not a compute capability
    that can be used, in a command's words (no Python tuples), or None when it is one.

    ``supported``: the ``(major, minor)`` list the toolkit compiles for (a compiling command:
    ``kcache.dispatcher.check_cc``'s list) or None (a filter, which takes any well-formed cc).
    A suggestion is only ever one that would be accepted."""
    try:
        major, minor, _suffix = parse_cc(text)
    except BadCC as exc:
        shown = f"{flag} {_echo(text)}"
        if exc.near is None:
            return f"{shown}: not a compute capability; {OPTION_FORMS}"
        return f"{shown}: {exc.why}; use {_supported_hint(exc.near, supported)}"
    if supported is not None and (major, minor) not in supported:
        return (f"{flag} {_echo(text)}: cc {major}.{minor} is not supported by the installed "
                f"CUDA toolkit (supported: {_listed(supported)})")
    return None


def _supported_hint(near: tuple, supported) -> str:
    if supported is None or tuple(near) in supported:
        return f"{near[0]}.{near[1]}"
    return f"one the installed CUDA toolkit supports: {_listed(supported)}"


def _listed(ccs) -> str:
    return ", ".join(f"{a}.{b}" for a, b in ccs)


def _echo(text: str) -> str:
    """The user's text as typed when it is short and plain, else quoted and shortened."""
    plain = text.isascii() and text.isprintable() and text.strip() and " " not in text
    if plain and len(text) <= _MAX_TEXT:
        return text
    return repr(text) if len(text) <= _MAX_TEXT else repr(text[:_MAX_TEXT - 3]) + "..."


# --- helpers ----------------------------------------------------------------------------------


def _parse_text(text: str) -> tuple:
    if len(text) > _MAX_TEXT:
        raise _bad(text)
    plain = text.strip().lower()
    match = _DOTTED.fullmatch(plain) or _PACKED.fullmatch(plain)
    if match is None:
        raise _bad(text)
    major, minor, suffix = match.groups()  # at most 2 + 1 digits: int() is cheap and safe
    return _checked(int(major), int(minor), suffix or None, text)


def _parse_sequence(seq) -> tuple:
    if len(seq) not in (2, 3):
        raise _bad(seq)
    major, minor = _integer(seq[0]), _integer(seq[1])
    suffix = seq[2] if len(seq) == 3 else None
    if major is None or minor is None or not (suffix is None or isinstance(suffix, str)):
        raise _bad(seq)
    return _checked(major, minor, suffix or None, seq)


def _checked(major: int, minor: int, suffix, given) -> tuple:
    if not (1 <= major <= _MAX_MAJOR and 0 <= minor <= _MAX_MINOR):
        raise _bad(given)
    if suffix not in (None, "a"):
        raise BadCC(f"compute capability {_shown(given)} has suffix {suffix[:8]!r}: only "
                    f"'a' (arch-specific, cc 9.0 and newer) is accepted; use e.g. "
                    f"{major}.{minor}", (major, minor),
                    f"suffix {suffix[:8]!r} is not one kcache compiles for (only 'a', "
                    "arch-specific, from cc 9.0)")
    if suffix == "a" and (major, minor) < ARCH_SPECIFIC_FROM:
        raise BadCC(f"compute capability {_shown(given)}: the 'a' suffix exists from cc "
                    f"9.0; use {major}.{minor}", (major, minor),
                    "the 'a' suffix exists from cc 9.0")
    return (major, minor, suffix)


def _integer(value):
    """``value`` as an int when it is an integer (not a bool), else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _shown(value) -> str:
    """A short, safe rendering of a user value for a message (no 4,300-digit repr)."""
    number = _integer(value)
    if number is not None and not isinstance(value, (tuple, list)):
        return repr(number) if abs(number) < 10**12 else f"<integer of {number.bit_length()} bits>"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(_shown(v) for v in list(value)[:4])
        inner += ", ..." if len(value) > 4 else ""
        return f"({inner}{',' if len(value) == 1 else ''})"
    plain = isinstance(value, (str, float, complex)) or value is None
    text = repr(value) if plain else f"<{type(value).__name__}>"
    return text if len(text) <= 40 else text[:37] + "..."


def _bad(value) -> BadCC:
    return BadCC(f"bad compute capability cc={_shown(value)}: use {ACCEPTED}")

"""Text that is safe to show: control characters escaped, user input clipped in messages.

Everything the CLI prints that came from a cache file, a path or the user passes through
:func:`escape` first, on a terminal and in plain output alike: an escape sequence in a kernel
name must never reach the terminal raw, and a tab or newline must never break a row.
"""
from __future__ import annotations

from kcache.text import escape  # noqa: F401  (the CLI's name for it; it lives in the core)


#: Longest user value echoed whole in a message; longer ones are clipped in the middle.
ECHO_LIMIT = 40


def clip(text: str, limit: int = ECHO_LIMIT) -> str:
    """``text`` quoted for a one-line message (``repr``, so escaped), clipped in the middle
    with the full length named when longer than ``limit`` characters: a 5,000-digit value
    is echoed as ``'9999999999999…9999999999' (5000 characters)``."""
    if len(text) <= limit:
        return repr(text)
    half = limit // 2
    return f"{text[:half]!r}…{text[-half:]!r} ({len(text)} characters)".replace("'…'", "…")


#: Longest message line written; longer ones (a setting's error quoting a 5,000-digit value
#: given before this CLI could bound it) keep their start and end.
LINE_LIMIT = 600


def line(text: str) -> str:
    """``text`` as one escaped line of at most about :data:`LINE_LIMIT` characters: runs of
    whitespace (newlines, tabs) become one space, other control characters are escaped, and
    an overlong middle is replaced by `` … ``."""
    text = escape(" ".join(text.split()))
    if len(text) > LINE_LIMIT:
        text = f"{text[:LINE_LIMIT - 100]} … {text[-80:]}"
    return text

"""Text from a cache that is safe to show: every character ``str.isprintable`` rejects
escaped (used by the CLI, kcache.cli.text, and by the warnings an entry says again)."""
from __future__ import annotations

from functools import lru_cache

#: Short forms for the common control characters; others become \\xNN, \\uNNNN, \\UNNNNNNNN.
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}

#: Characters escaped as one piece: the work and memory beyond the input and the result stay
#: bounded (joining one string per character cost 80 x a 15 MiB field of ESC: 1.2 GB, 7.8 s).
_PIECE = 1 << 16


def escape(text: str, keep: str = "") -> str:
    """``text`` with every character that ``str.isprintable`` rejects written as a Python
    escape: control characters (ESC -> ``\\x1b``, tab -> ``\\t``, DEL, C1 codes), format
    characters such as bidi overrides (``\\u202e``) and zero-width spaces, line and paragraph
    separators, unpaired surrogates (from undecodable file names) and unassigned code points.
    Printable text (the usual case) is returned unchanged, at the cost of one C-level check.
    Characters in ``keep`` (e.g. ``"\n\t"`` for a PTX listing) are left as they are. Linear:
    pieces of printable or ASCII text are checked or translated in C."""
    if text.isprintable():
        return text
    if len(text) <= _PIECE:
        return _escape_piece(text, keep)
    return "".join([_escape_piece(text[i:i + _PIECE], keep) for i in range(0, len(text), _PIECE)])


def _escape_piece(piece: str, keep: str) -> str:
    if piece.isprintable():
        return piece
    if piece.isascii():  # ESC, BEL, DEL...: one C-level pass
        return piece.translate(_ascii_table(keep))
    return "".join([c if c.isprintable() or c in keep else _escape_char(c) for c in piece])


@lru_cache(maxsize=8)
def _ascii_table(keep: str) -> dict:
    """``str.translate`` table of the ASCII characters ``isprintable`` rejects, but ``keep``."""
    return {code: _escape_char(chr(code)) for code in [*range(0x20), 0x7F] if chr(code) not in keep}


@lru_cache(maxsize=4096)  # a hostile text repeats a few characters; escaping each costs ~0.3 us
def _escape_char(c: str) -> str:
    named = _NAMED.get(c)
    if named:
        return named
    code = ord(c)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


#: Characters of a name or value from an entry or a server quoted in a message, a warning or
#: an exception (a kernel name, a signature, a server's error text): longer ones are cut.
QUOTE_LIMIT = 200


def cut(text, limit: int = QUOTE_LIMIT, keep: str = "") -> str:
    """``text`` (str; anything else through ``str``) :func:`escape`-d and at most ``limit``
    characters: a longer one keeps its start and ends with ``…`` and is never escaped past
    what is shown (a 10 MB name costs what its first ``limit`` characters cost). ``keep`` as
    for :func:`escape` (``"\\n\\t"`` for a compile log). For text from a cache entry, a bundle
    or a server on its way to a terminal, a log or an exception's message."""
    if not isinstance(text, str):
        text = str(text)
    shown = escape(text[:limit + 1], keep)
    if len(shown) <= limit and len(text) <= limit:
        return shown
    return shown[:limit - 1] + "…"

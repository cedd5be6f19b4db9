"""Text from a cache that is safe to show: every character ``str.isprintable`` rejects
escaped (used by the CLI, kcache.cli.text, and by the warnings an entry says again)."""
from __future__ import annotations

#: Short forms for the common control characters; others become \\xNN, \\uNNNN, \\UNNNNNNNN.
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def escape(text: str, keep: str = "") -> str:
    """``text`` with every character that ``str.isprintable`` rejects written as a Python
    escape: control characters (ESC -> ``\\x1b``, tab -> ``\\t``, DEL, C1 codes), format
    characters such as bidi overrides (``\\u202e``) and zero-width spaces, line and paragraph
    separators, unpaired surrogates (from undecodable file names) and unassigned code points.
    Printable text (the usual case) is returned unchanged, at the cost of one C-level check.
    Characters in ``keep`` (e.g. ``"\n\t"`` for a PTX listing) are left as they are."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else _escape_char(c) for c in text)


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

"""An entry's signature text in numba's short form, and signature patterns, as text alone.

Entries store the argument types as numba prints them (``meta["signature"]``,
``(array(float32, 1d, C), float32)``: ``str`` of each type, numba's ``Array.__init__`` name
``[unaligned ][readonly ]array(<dtype>, <n>d, <layout>)``). People write arrays as numba's
slice form (``float32[::1]``, the form ``numba.cuda.jit`` signatures take), which is also what
fits a terminal. :func:`short_signature` rewrites the text, never importing numba: each array
becomes ``<dtype>[<slices>]`` (C: ``[:, ::1]``, F: ``[::1, :]``, A: ``[:, :]``), with the words
``readonly``/``unaligned`` kept in front; what has no slice form (0-d arrays, a 1-d F array,
more than :data:`MAX_SLICED_NDIM` dimensions) and anything that is not an array stays as
printed. Any text is accepted (a header may hold anything): what is not understood is left
unchanged, and the work is linear in the text's length.

:func:`signature_matches` is ``--signature GLOB``: ``*`` and ``?`` are wildcards, ``[`` and
``]`` are literal (they are the slices' brackets), spaces are ignored, and the pattern may
match the short or the full form, with or without the enclosing parentheses. Matching
costs at most the text's length times the pattern's, whatever the wildcards (a 64 KiB
signature is a header's limit).
"""
from __future__ import annotations

import functools
import re

__all__ = ["short_signature", "signature_matches", "MAX_SLICED_NDIM"]

#: Most dimensions written as slices; a higher-dimensional array keeps numba's printed form
#: (``array(float32, 12d, C)`` is shorter than twelve slices).
MAX_SLICED_NDIM = 8
#: Arrays nested in an array's dtype that are rewritten (numba makes none; a header might).
_MAX_DEPTH = 8
#: An array as numba prints it, from its first word to its opening parenthesis. The word
#: must start a name: ``nestedarray(`` (a record field's type) is not an array.
_ARRAY = re.compile(r"(?<![\w.])((?:unaligned )?(?:readonly )?)array\(")
_NDIM = re.compile(r"([0-9]{1,2})d")
_PAIRS = {"(": ")", "[": "]"}


def short_signature(text):
    """``text`` (an entry's signature, numba's printed argument types) with every array in
    numba's slice form: ``(array(float32, 1d, C), array(float64, 2d, F), int32)`` ->
    ``(float32[::1], float64[::1, :], int32)``; ``readonly array(float32, 1d, A)`` ->
    ``readonly float32[:]``. Text it does not understand comes back unchanged; a value that
    is not a str (None: a program, an unreadable header) comes back as it is. Never raises."""
    if not isinstance(text, str) or "array(" not in text:
        return text
    return _remembered(text) if len(text) <= _REMEMBERED_CHARS else _short(text)


#: Longest signature remembered (4,096 of them at most: 4 MiB; a hostile 64 KiB one is not).
_REMEMBERED_CHARS = 1024


def _short(text: str) -> str:
    closing = _closing(text)
    if closing is None:  # unbalanced brackets: not numba's text; shown as it is
        return text
    return _rewrite(text, 0, len(text), closing, 0)


# a listing meets each signature once per arch and root: 20 us each, 0.1 us remembered
_remembered = functools.lru_cache(maxsize=4096)(_short)


def _closing(text: str) -> dict[int, int] | None:
    """{position of each ``(``/``[``: position of its match}, or None when the brackets
    are not balanced."""
    stack: list[int] = []
    found: dict[int, int] = {}
    for at, char in enumerate(text):
        if char in _PAIRS:
            stack.append(at)
        elif char in ")]":
            if not stack or _PAIRS[text[stack[-1]]] != char:
                return None
            found[stack.pop()] = at
    return found if not stack else None


def _rewrite(text: str, start: int, end: int, closing: dict[int, int], depth: int) -> str:
    """``text[start:end]`` with its arrays in slice form (:func:`short_signature`)."""
    out: list[str] = []
    at = start
    while True:
        found = _ARRAY.search(text, at, end)
        if found is None:
            out.append(text[at:end])
            return "".join(out)
        opening = found.end() - 1
        close = closing[opening]
        out.append(text[at:found.start()])
        out.append(_array(text, found.group(1), opening, close, closing, depth))
        at = close + 1


def _array(text: str, words: str, opening: int, close: int, closing: dict[int, int],
           depth: int) -> str:
    """One array, ``words`` + ``array(`` at ``opening`` to ``)`` at ``close``, in slice form;
    numba's printed text when it has none."""
    printed = text[opening - len("array") - len(words):close + 1]
    parts = _split(text, opening + 1, close, closing)
    if len(parts) != 3 or depth >= _MAX_DEPTH:
        return printed
    (d_start, d_end), ndim_at, layout_at = parts
    ndim = _NDIM.fullmatch(text[ndim_at[0]:ndim_at[1]].strip())
    layout = text[layout_at[0]:layout_at[1]].strip()
    slices = _slices(int(ndim.group(1)), layout) if ndim else None
    if slices is None:
        return printed
    while d_start < d_end and text[d_start] == " ":
        d_start += 1
    dtype = _rewrite(text, d_start, d_end, closing, depth + 1).rstrip()
    return f"{words}{dtype}[{slices}]" if dtype else printed


def _split(text: str, start: int, end: int, closing: dict[int, int]) -> list[tuple[int, int]]:
    """``(start, end)`` of each part of ``text[start:end]`` between top-level commas."""
    parts, part, at = [], start, start
    while at < end:
        char = text[at]
        if char in _PAIRS:
            at = closing[at]
        elif char == ",":
            parts.append((part, at))
            part = at + 1
            if len(parts) > 3:  # not an array's three parts: no need to count on
                break
        at += 1
    parts.append((part, end))
    return parts


def _slices(ndim: int, layout: str) -> str | None:
    """The slices of an ``ndim``-d array of ``layout`` (C, F or A), as numba's signatures
    write them (``numba.core.types.Array``'s ``__getitem__`` form); None without one."""
    if not 1 <= ndim <= MAX_SLICED_NDIM or layout not in ("C", "F", "A"):
        return None
    dims = [":"] * ndim
    if layout == "C":
        dims[-1] = "::1"
    elif layout == "F":
        if ndim == 1:  # [::1] is C when 1-d: a 1-d F array keeps numba's printed form
            return None
        dims[0] = "::1"
    return ", ".join(dims)


def signature_matches(signature, pattern: str) -> bool:
    """True when the glob ``pattern`` (``--signature GLOB``) matches ``signature`` (an entry's
    signature text; None never matches) in its short form (:func:`short_signature`) or as
    stored, with or without the enclosing parentheses (and a 1-tuple's trailing comma).
    ``*`` and ``?`` are wildcards; ``[``, ``]`` are literal; spaces are ignored on both
    sides, so ``float32[:,::1]`` matches ``float32[:, ::1]``."""
    if not isinstance(signature, str):
        return False
    glob = _compile(pattern)
    for form in {signature, short_signature(signature)}:
        bare = "".join(form.split())
        if _glob_matches(glob, bare):
            return True
        if bare.startswith("(") and bare.endswith(")"):
            inner = bare[1:-1]
            if _glob_matches(glob, inner) or _glob_matches(glob, inner.removesuffix(",")):
                return True
    return False


#: A pattern compiled: its pieces between ``*``, each (regex, length in characters).
_Glob = tuple[tuple[re.Pattern, int], ...]
_compiled: dict[str, _Glob] = {}


def _compile(pattern: str) -> _Glob:
    """``pattern`` with spaces dropped, split at each ``*`` into pieces: each a regex of its
    characters (``?`` any one character, everything else itself, brackets included) and its
    length (a piece matches exactly that many characters)."""
    glob = _compiled.get(pattern)
    if glob is None:
        bare = "".join(pattern.split())
        glob = tuple((re.compile("".join("." if c == "?" else re.escape(c) for c in piece),
                                 re.DOTALL), len(piece))
                     for piece in bare.split("*"))
        if len(_compiled) < 64:
            _compiled[pattern] = glob
    return glob


def _glob_matches(glob: _Glob, text: str) -> bool:
    """True when the whole of ``text`` matches ``glob`` (:func:`_compile`). The usual greedy
    glob match, not one regex: a regex of k ``.*`` backtracks ~n**k steps (18 s for three
    on 18 KB); here the first piece is matched at the start, the last at the end and each
    other at its leftmost place after the one before (leftmost is never worse, since a ``*``
    follows it): O(len(text) x len(pattern)) at worst."""
    (first, first_len), *rest = glob
    if not rest:  # no "*": the whole text, exactly
        return first.fullmatch(text) is not None
    if first.match(text) is None:
        return False
    at = first_len
    *middle, (last, last_len) = rest
    for piece, _length in middle:
        found = piece.search(text, at)
        if found is None:
            return False
        at = found.end()
    tail = len(text) - last_len
    return tail >= at and last.fullmatch(text, tail) is not None

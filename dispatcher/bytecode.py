"""Global and closure references of a code object, read straight from its bytecode.

``references(code)`` lists each ``LOAD_GLOBAL`` and each ``LOAD_DEREF`` of a free variable
with the ``LOAD_ATTR`` / ``LOAD_METHOD`` chain that follows it (``consts.SCALE`` ->
``("g", "consts", ("SCALE",))``). It reads ``co_code`` two bytes at a time instead of going
through ``dis.get_instructions``, which builds an ``Instruction`` (with its text
representation) per instruction and took most of a fresh process's key time (0.1-0.4 ms per
kernel). The opcode numbers come from ``dis.opmap`` of the running Python; what differs
between versions is spelled out below, and tests/test_bytecode.py compares the result with
``dis`` over thousands of code objects.

Per version (CPython): 3.10 has no inline caches, ``LOAD_GLOBAL``'s argument is the name
index and ``LOAD_DEREF`` indexes cell + free variables; 3.11 adds ``CACHE`` entries after some
instructions, shifts ``LOAD_GLOBAL``'s name index left by one (bit 0: push NULL) and makes
``LOAD_DEREF`` index all "fast locals" (free variables last); 3.12 does the same shift for
``LOAD_ATTR`` (bit 0: method load) and drops ``LOAD_METHOD``. ``EXTENDED_ARG`` prefixes an
argument and never ends a chain.
"""
from __future__ import annotations

import dis
import sys
import types

__all__ = ["references"]

_OP = dis.opmap
_LOAD_GLOBAL = _OP["LOAD_GLOBAL"]
_LOAD_DEREF = _OP["LOAD_DEREF"]
_LOAD_ATTR = _OP["LOAD_ATTR"]
_LOAD_METHOD = _OP.get("LOAD_METHOD", -1)  # gone in 3.12
_EXTENDED_ARG = _OP["EXTENDED_ARG"]
_CACHE = _OP.get("CACHE", -1)  # inline cache entries, 3.11+
_GLOBAL_SHIFT = 1 if sys.version_info >= (3, 11) else 0
_ATTR_SHIFT = 1 if sys.version_info >= (3, 12) else 0
_FAST_LOCALS_DEREF = sys.version_info >= (3, 11)


def references(code: types.CodeType) -> list:
    """``[(kind, name, attrs), ...]`` in bytecode order for ``code`` alone (nested code objects
    are not entered): kind ``"g"`` for a global, ``"d"`` for a free (closure) variable;
    ``attrs`` is the tuple of attribute names loaded right after it. Duplicates are kept."""
    raw = code.co_code
    names = code.co_names
    free_base, freevars = _free_base(code), code.co_freevars
    found = []
    current = None
    ext = 0
    for op, arg in zip(raw[::2], raw[1::2]):
        if op == _CACHE:
            continue
        arg |= ext
        if op == _EXTENDED_ARG:
            ext = arg << 8
            continue
        ext = 0
        if op == _LOAD_GLOBAL:
            current = [names[arg >> _GLOBAL_SHIFT]]
            found.append(("g", current))
        elif op == _LOAD_ATTR and current is not None:
            current.append(names[arg >> _ATTR_SHIFT])
        elif op == _LOAD_METHOD and current is not None:
            current.append(names[arg])
        elif op == _LOAD_DEREF and arg >= free_base:
            current = [freevars[arg - free_base]]
            found.append(("d", current))
        else:
            current = None
    return [(kind, chain[0], tuple(chain[1:])) for kind, chain in found]


def _free_base(code: types.CodeType) -> int:
    """Index of the first free variable in ``LOAD_DEREF``'s argument space."""
    cells = code.co_cellvars
    if not _FAST_LOCALS_DEREF:
        return len(cells)
    # 3.11+: fast locals are the local variables, then the cell variables that are not also
    # arguments/locals (those share the local's slot), then the free variables.
    local = code.co_varnames
    return len(local) + sum(1 for name in cells if name not in local)

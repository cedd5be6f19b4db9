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
import re
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
    ops, args = raw[::2], raw[1::2]
    names = code.co_names
    free_base, freevars = _free_base(code), code.co_freevars
    found = []
    # Only the loads that start a chain are looked at (found by the regex engine), not
    # every instruction: this loop ran over every instruction before (40 us for a matmul).
    for match in _STARTS.finditer(ops):
        i = match.start()
        op, arg = ops[i], _argument(ops, args, i)
        if op == _LOAD_GLOBAL:
            kind, name = "g", names[arg >> _GLOBAL_SHIFT]
        elif arg >= free_base:
            kind, name = "d", freevars[arg - free_base]
        else:
            continue  # a cell of this function's own
        attrs = []
        while (nxt := _NEXT.search(ops, i + 1)) is not None:  # past CACHE and EXTENDED_ARG
            i = nxt.start()
            op = ops[i]
            if op == _LOAD_ATTR:
                attrs.append(names[_argument(ops, args, i) >> _ATTR_SHIFT])
            elif op == _LOAD_METHOD:
                attrs.append(names[_argument(ops, args, i)])
            else:
                break
        found.append((kind, name, tuple(attrs)))
    return found


def _argument(ops: bytes, args: bytes, i: int) -> int:
    """The argument of instruction ``i`` with its EXTENDED_ARG prefixes."""
    arg, shift = args[i], 8
    while i > 0 and ops[i - 1] == _EXTENDED_ARG:
        i -= 1
        arg |= args[i] << shift
        shift += 8
    return arg


_STARTS = re.compile(b"[" + re.escape(bytes([_LOAD_GLOBAL, _LOAD_DEREF])) + b"]")
_NEXT = re.compile(b"[^" + re.escape(bytes([op for op in (_CACHE, _EXTENDED_ARG) if op >= 0])) + b"]")


def _free_base(code: types.CodeType) -> int:
    """Index of the first free variable in ``LOAD_DEREF``'s argument space."""
    cells = code.co_cellvars
    if not _FAST_LOCALS_DEREF:
        return len(cells)
    # 3.11+: fast locals are the local variables, then the cell variables that are not also
    # arguments/locals (those share the local's slot), then the free variables.
    local = code.co_varnames
    return len(local) + sum(1 for name in cells if name not in local)

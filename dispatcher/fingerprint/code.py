"""Code objects by content: the digest of a function's bytecode, constants and names, the
globals and attribute chains it reads, and the digest of its line table (:func:`line_digest`).
Kept per code object once it is seen a second time."""
from __future__ import annotations

import types

import msgpack

from ..bytecode import references
from ..process import STATE
from .model import digest_of


def line_digest(py_func) -> str:
    """32-hex digest of what numba-cuda's line information takes from a function: its file
    name, first line and bytecode-to-line table (``co_lines()``, no columns), with those of its
    nested code objects (inner functions and closures are compiled into it). ``py_func``: a
    Python function or anything with ``py_func``."""
    code = getattr(py_func, "py_func", py_func).__code__
    return _code_info_of(code).line_digest(code)


# ---------------------------------------------------------------------------------------
# Static analysis of code objects (a pure function of the code object: cached for good).


class _CodeInfo:
    __slots__ = ("digest", "chains", "_lines")

    def __init__(self, digest, chains):
        self.digest = digest
        self.chains = chains  # tuple of ("g"|"d", name, (attr, ...))
        self._lines: dict = {}  # (file name, first line, line table) -> line digest

    def line_digest(self, code: types.CodeType) -> str:
        # On demand: only debug/lineinfo kernels and device functions need it. Remembered per
        # file name and line table, because equal code objects (the key of STATE.code_info) may
        # come from other files, and on 3.10 may have other line tables.
        memo = (code.co_filename, code.co_firstlineno, code.co_linetable)
        digest = self._lines.get(memo)
        if digest is None:
            lines = []
            for start, end, line in code.co_lines():
                lines += (start, end, line)
            nested = [_code_info_of(c).line_digest(c) for c in code.co_consts
                      if isinstance(c, types.CodeType)]
            digest = digest_of([code.co_filename, code.co_firstlineno, lines, nested])
            self._lines[memo] = digest
        return digest


# Kept in process.STATE.code_info, keyed by the code object itself. Code objects compare by
# content (bytecode, constants, names, first line, line table; not the file name), so equal
# code shares one analysis.
def _code_info_of(code: types.CodeType) -> _CodeInfo:
    known = STATE.code_info
    info = known.get(code)
    if info is None:
        info = _CodeInfo(digest_of(_code_payload(code)), tuple(_chains(code)))
        known[code] = info
    return info


def _code_info_once(code: types.CodeType) -> _CodeInfo:
    """:func:`_code_info_of` without remembering a new analysis (nested code objects' are)."""
    info = STATE.code_info.get(code)
    return info if info is not None else _CodeInfo(digest_of(_code_payload(code)),
                                                   tuple(_chains(code)))


def _code_payload(code: types.CodeType) -> list:
    """Content of a code object without file name, first line, line table or positions."""
    consts = []
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            consts.append(["code", _code_info_of(const).digest])
        else:
            consts.append(_const_payload(const))
    return [
        code.co_name,
        code.co_argcount,
        code.co_posonlyargcount,
        code.co_kwonlyargcount,
        code.co_flags,
        code.co_code,
        consts,
        list(code.co_names),
        list(code.co_varnames),
        list(code.co_freevars),
        list(code.co_cellvars),
        getattr(code, "co_exceptiontable", b""),
    ]


def _const_payload(value):
    """Canonical payload of a code constant (None, bool, int, float, complex, str, bytes,
    tuple, frozenset, Ellipsis)."""
    exact = _EXACT_SCALARS.get(type(value))
    if exact is not None:  # most constants: what _scalar_payload gives, without its checks
        return exact(value)
    if isinstance(value, tuple):
        return ["tuple", [_const_payload(v) for v in value]]
    if isinstance(value, frozenset):
        items = [_const_payload(v) for v in value]
        return ["frozenset", sorted(items, key=_sort_key)]
    scalar = _scalar_payload(value)
    return scalar if scalar is not None else ["const", type(value).__qualname__, repr(value)]


def _scalar_payload(value):
    """Payload for None/bool/int/float/complex/str/bytes/Ellipsis; None for anything else."""
    if value is None or isinstance(value, (bool, str, bytes)):
        return [type(value).__name__, value]
    if isinstance(value, int):
        if -(2**63) <= value < 2**64:
            return ["int", int(value)]
        return ["bigint", hex(value)]  # hex: no 4,300-digit limit as with str()
    if isinstance(value, float):
        return ["float", float(value)]
    if isinstance(value, complex):
        return ["complex", value.real, value.imag]
    if value is Ellipsis:
        return ["ellipsis"]
    return None


def _exact_int(value):
    return ["int", value] if -(2**63) <= value < 2**64 else ["bigint", hex(value)]


# Exact plain types -> their payload, as _scalar_payload gives it (subclasses go the long way).
_EXACT_SCALARS = {
    float: lambda v: ["float", v],
    int: _exact_int,
    str: lambda v: ["str", v],
    bool: lambda v: ["bool", v],
    bytes: lambda v: ["bytes", v],
    type(None): lambda v: ["NoneType", None],
}


def _sort_key(payload) -> bytes:
    return msgpack.packb(payload, use_bin_type=True)


def _chains(code: types.CodeType):
    """Global (and closure) references with the attribute chain that follows them,
    e.g. ``consts.SCALE`` -> ("g", "consts", ("SCALE",)); nested code objects included."""
    out = set(references(code))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            # Nested functions resolve globals in the same module; their closure
            # references are the enclosing function's cells, hashed as closure values.
            out.update(c for c in _code_info_of(const).chains if c[0] == "g")
    return sorted(out)

"""Any value decoded from an entry header, made safe to format and to write as JSON.

Header and meta values are whatever msgpack decoded: the store checks them, but the CLI does
not rely on it (issue 7, rule 5: no file content may make the CLI print a traceback). These
functions accept any object and never raise: non-finite or non-numeric times and seconds
become None, bytes become hex, map keys become strings, nesting is cut at :data:`MAX_DEPTH`.
"""
from __future__ import annotations

import json
import math
from typing import Any, Iterator

#: Deepest nesting written out; deeper values become :data:`TOO_DEEP` (msgpack itself allows
#: 1,024 levels, more than ``json`` or ``repr`` can recurse through).
MAX_DEPTH = 64
TOO_DEEP = "(nested too deep)"
#: JSON has no NaN or infinity: non-finite floats inside meta/components are written so.
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def number(value: Any) -> float | None:
    """``value`` as a finite float, or None (None, bool, NaN, infinity, text, containers)."""
    if type(value) is float:  # the usual case, checked first: ls calls this 30,000 times
        return value if math.isfinite(value) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            result = float(value)
        except OverflowError:  # an int beyond the float range
            return None
        return result if math.isfinite(result) else None
    return None


def count(value: Any) -> int:
    """``value`` as an int >= 0 (a counter or a size); anything else is 0."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return 0


def text(value: Any) -> str | None:
    """A header field meant to be text (kernel, signature, arch) as str or None: other
    values are written as their JSON text (bytes as hex), so they show, never crash."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    return dumps(value)


def jsonable(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` that ``json.dumps(..., allow_nan=False)`` accepts: bytes as hex,
    tuples/sets as lists, map keys as str (bytes keys as hex; a key that would collide keeps
    its ``repr``), non-finite floats as "NaN"/"Infinity"/"-Infinity", other objects as their
    ``repr``, and nesting below :data:`MAX_DEPTH` levels as :data:`TOO_DEEP`."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _NON_FINITE[repr(value)]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if depth >= MAX_DEPTH:
        return TOO_DEEP
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = _key(key)
            if name in out:
                name = _key_repr(key)
            out[name] = jsonable(item, depth + 1)
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(item, depth + 1) for item in value]
    if hasattr(value, "__fspath__"):  # Path
        return str(value)
    return _key_repr(value)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, (bytes, bytearray)):
        return bytes(key).hex()
    return json.dumps(jsonable(key, MAX_DEPTH - 1))


def _key_repr(value: Any) -> str:
    try:
        return repr(value)
    except RecursionError:
        return TOO_DEEP


def dumps(value: Any, **kw: Any) -> str:
    """``value`` as JSON text (via :func:`jsonable`; never NaN, never raises)."""
    return json.dumps(jsonable(value), allow_nan=False, **kw)


def flatten(mapping: Any, limit: int) -> Iterator[tuple[str, Any]]:
    """``(dotted.name, leaf)`` pairs of nested maps, in order, at most ``limit`` of them
    (then one ``("…", None)`` pair marks the cut). Lists and other values are leaves; an
    empty map is a leaf. Iterative and bounded, so no nesting depth or size can exhaust the
    stack or the terminal."""
    if not isinstance(mapping, dict):
        return
    stack: list[Iterator] = [iter(mapping.items())]
    names: list[str] = []
    shown = 0
    while stack:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
            if names:
                names.pop()
            continue
        key, value = item
        name = ".".join([*names, _key(key)])
        if isinstance(value, dict) and value and len(stack) < MAX_DEPTH:
            stack.append(iter(value.items()))
            names.append(_key(key))
            continue
        if shown == limit:
            yield "…", None
            return
        shown += 1
        yield name, value

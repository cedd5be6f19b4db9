"""Content-addressed keys: canonical msgpack of named components -> BLAKE2b-256 hex.

The encoding is canonical so that equal components give equal keys in every process, whatever
PYTHONHASHSEED: maps are re-emitted with their keys sorted by their own msgpack encoding, tuples
and lists both become arrays, floats are always 64-bit. Only msgpack's plain types are accepted
(None, bool, int, float, str, bytes, list/tuple, dict); anything else is a TypeError naming the
component, because a silent ``repr`` would make keys depend on object identity.
"""
from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from typing import Any

import msgpack

_HEX = "0123456789abcdef"


#: A key's name: 8-128 lowercase hex digits.
KEY_RE = re.compile(r"[0-9a-f]{8,128}")


def _canonical(value: Any, path: tuple) -> Any:
    # Hot path (a kernel key has ~50 values): exact plain types first, and the component's
    # name for error messages (``path``, see _where) is only spelled out when one is raised.
    kind = type(value)
    if kind is str or kind is float or kind is bool or kind is bytes or value is None:
        return value
    if kind is int:
        if -(2**63) <= value < 2**64:
            return value
        raise TypeError(f"component {_where(path)} = {_int_text(value)}: integer out of "
                        "msgpack range")
    if kind is list or kind is tuple:
        return _canonical_list(value, path)
    if kind is dict:
        return _canonical_map(value, path)
    if kind is CanonicalMap or kind is CanonicalList:
        return value  # canonical already (made once per process for the constant components)
    return _canonical_other(value, path)


_LEAVES = frozenset({str, float, bool, bytes, type(None)})  # canonical as they are


def _canonical_list(value, path: tuple) -> list:
    if all(type(v) in _LEAVES for v in value):  # the usual list: names, digests
        return list(value)
    return [_canonical(v, (path, 1, i)) for i, v in enumerate(value)]


def _read_only(self, *args, **kwargs):
    raise TypeError("a canonical component is read-only (copy it with dict() or list())")


class _Shared:
    """What the read-only canonical containers share: copies are plain, mutable values."""

    __slots__ = ()

    def copy(self):
        return _thawed(self)

    __copy__ = copy

    def __deepcopy__(self, memo):
        return _thawed(self)

    def __reduce__(self):
        return type(_thawed(self)), (_thawed(self),)


class CanonicalMap(_Shared, dict):
    """A component value already in canonical form (made by :func:`canonical_map`), which
    :func:`make_key` encodes as it is instead of sorting it again: the components that are
    the same for every kernel of a process (toolchain, configuration, options) are put in
    canonical form once and shared, hence read-only (its lists too: :class:`CanonicalList`).
    Equal to the plain dict; copies, ``copy.deepcopy`` and pickling give plain dicts."""

    __slots__ = ()
    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _read_only
    __ior__ = _read_only


class CanonicalList(_Shared, list):
    """A list inside a :class:`CanonicalMap`: read-only, equal to the plain list."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _read_only
    append = extend = insert = pop = remove = clear = sort = reverse = _read_only


def canonical_map(value: Mapping, name: str) -> CanonicalMap:
    """``value`` (a mapping) in the canonical form :func:`make_key` encodes, as a read-only
    :class:`CanonicalMap`. Raises TypeError as :func:`make_key` does, naming ``name``."""
    return _frozen(_canonical_map(value, (None, 0, name)))


def _frozen(value):
    if type(value) is dict:
        return CanonicalMap({k: _frozen(v) for k, v in value.items()})
    if type(value) is list:
        return CanonicalList([_frozen(v) for v in value])
    return value


def _thawed(value):
    """A plain (mutable) deep copy of a canonical value."""
    if isinstance(value, dict):
        return {k: _thawed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_thawed(v) for v in value]
    return value


def _canonical_other(value: Any, path: tuple) -> Any:
    # Subclasses of the plain types (bool is an int subclass; numpy's float64 a float one),
    # bytes-like objects and other mappings.
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
            raise TypeError(f"component {_where(path)} = {_int_text(value)}: integer out of "
                            "msgpack range")
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (list, tuple)):
        return [_canonical(v, (path, 1, i)) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        return _canonical_map(value, path)
    raise TypeError(
        f"component {_where(path)} has unencodable type {type(value).__name__} ({value!r:.80}); "
        "accepted: None, bool, int, float, str, bytes, list, tuple, dict"
    )


def _canonical_map(value: Mapping, path: tuple) -> dict:
    items = []
    for k, v in value.items():
        if type(k) is str:
            packed = _packed_name(k)
        elif isinstance(k, (str, int, bytes)) and not isinstance(k, bool):
            packed = msgpack.packb(k, use_bin_type=True)
        else:
            raise TypeError(f"component {_where(path)}: map key {k!r:.80} is not str, int or bytes")
        # A leaf is canonical as it is: no path (kept for error messages) is made for it.
        items.append((packed, k, v if type(v) in _LEAVES else _canonical(v, (path, 2, k))))
    items.sort(key=_first)
    return {k: v for _, k, v in items}


def _first(item):
    return item[0]


@functools.lru_cache(maxsize=4096)
def _packed_name(name: str) -> bytes:
    """msgpack bytes of a str map key (the sort key of canonical maps); names repeat a lot."""
    return msgpack.packb(name, use_bin_type=True)


def _where(path: tuple) -> str:
    """``'source'['code']``-style name of a value from its path: (None, 0, component name) at
    the top, then (parent, 1, list index) or (parent, 2, map key)."""
    parts = []
    while path[0] is not None:
        path, kind, item = path
        parts.append(f"[{item}]" if kind == 1 else f"[{item!r:.80}]")
    parts.append(repr(path[2]))
    return "".join(reversed(parts))


def _int_text(value: int) -> str:
    return repr(value) if abs(value) < 10**30 else f"<integer of {value.bit_length()} bits>"


def canonical_bytes(components: Mapping[str, Any]) -> bytes:
    """The canonical msgpack encoding of ``components`` (what :func:`make_key` hashes)."""
    if not isinstance(components, Mapping):
        raise TypeError(f"components must be a mapping of name -> value, not {type(components).__name__}")
    for name in components:
        if not isinstance(name, str):
            raise TypeError(f"component name {name!r} is not a str")
    # The map as msgpack writes it (its header, then each name and value), with the
    # encoding of each shared canonical component made once per process (_packed).
    packer = msgpack.Packer(use_bin_type=True, use_single_float=False)  # one per call: threads
    out = [packer.pack_map_header(len(components))]
    for name in sorted(components):
        value = components[name]
        out.append(_packed_name(name))
        if type(value) is CanonicalMap:  # shared by the keys of a process: packed once
            out.append(_packed(value))
        else:
            value = _canonical(value, (None, 0, name))
            out.append(_packed(value) if type(value) is CanonicalMap else packer.pack(value))
    return b"".join(out)


_PACKED: dict = {}  # id of a CanonicalMap -> (the map, its msgpack bytes); the map is held


def packed_map(value: "CanonicalMap") -> bytes:
    """msgpack bytes of a (read-only) canonical map, as :func:`make_key` encodes it inside a
    key, remembered for the first 1,024 maps (a component shared by every key of a process
    is packed once)."""
    return _packed(value)


def _packed(value: "CanonicalMap") -> bytes:
    """msgpack bytes of a (read-only) canonical map, remembered for the first 1,024."""
    known = _PACKED.get(id(value))
    if known is not None and known[0] is value:
        return known[1]
    data = msgpack.packb(value, use_bin_type=True, use_single_float=False)
    if len(_PACKED) < 1024:
        _PACKED[id(value)] = (value, data)
    return data


def make_key(components: Mapping[str, Any]) -> str:
    """Key of an entry: BLAKE2b-256 hex digest (64 chars) of the canonical msgpack encoding
    of ``components`` (a mapping of component name -> msgpack-plain value).

    Raises TypeError naming the component whose value cannot be encoded.
    """
    return key_of_bytes(canonical_bytes(components))


def key_of_bytes(data: bytes) -> str:
    """The key of a :func:`canonical_bytes` encoding: ``make_key(c) ==
    key_of_bytes(canonical_bytes(c))``, for a caller that keeps the encoding too."""
    return hashlib.blake2b(data, digest_size=32).hexdigest()


def check_key(key: str) -> str:
    """Return ``key`` if it is 8-128 lowercase hex digits (a :func:`make_key` digest), else
    raise ValueError. Keys become file names, so nothing else is accepted."""
    # KEY_RE.fullmatch(key), without a regex: every hit checks its key
    if not isinstance(key, str) or not 8 <= len(key) <= 128 or key.strip(_HEX):
        raise ValueError(f"bad cache key {key!r}: expected lowercase hex digits as made by kcache.make_key")
    return key

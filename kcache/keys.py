"""Content-addressed keys: canonical msgpack of named components -> BLAKE2b-256 hex.

The encoding is canonical so that equal components give equal keys in every process, whatever
PYTHONHASHSEED: maps are re-emitted with their keys sorted by their own msgpack encoding, tuples
and lists both become arrays, floats are always 64-bit. Only msgpack's plain types are accepted
(None, bool, int, float, str, bytes, list/tuple, dict); anything else is a TypeError naming the
component, because a silent ``repr`` would make keys depend on object identity.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

import msgpack

KEY_RE = re.compile(r"[0-9a-f]{8,128}")


def _canonical(value: Any, where: str) -> Any:
    # bool is an int subclass; both are plain. Exact types only for containers' children.
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
            raise TypeError(f"component {where} = {value!r}: integer out of msgpack range")
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (list, tuple)):
        return [_canonical(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        items = []
        for k, v in value.items():
            if not isinstance(k, (str, int, bytes)) or isinstance(k, bool):
                raise TypeError(f"component {where}: map key {k!r} is not str, int or bytes")
            items.append((msgpack.packb(k, use_bin_type=True), k, _canonical(v, f"{where}[{k!r}]")))
        items.sort(key=lambda t: t[0])
        return {k: v for _, k, v in items}
    raise TypeError(
        f"component {where} has unencodable type {type(value).__name__} ({value!r:.80}); "
        "accepted: None, bool, int, float, str, bytes, list, tuple, dict"
    )


def canonical_bytes(components: Mapping[str, Any]) -> bytes:
    """The canonical msgpack encoding of ``components`` (what :func:`make_key` hashes)."""
    if not isinstance(components, Mapping):
        raise TypeError(f"components must be a mapping of name -> value, not {type(components).__name__}")
    for name in components:
        if not isinstance(name, str):
            raise TypeError(f"component name {name!r} is not a str")
    canon = {name: _canonical(components[name], repr(name)) for name in sorted(components)}
    return msgpack.packb(canon, use_bin_type=True, use_single_float=False)


def make_key(components: Mapping[str, Any]) -> str:
    """Key of an entry: BLAKE2b-256 hex digest (64 chars) of the canonical msgpack encoding
    of ``components`` (a mapping of component name -> msgpack-plain value).

    Raises TypeError naming the component whose value cannot be encoded.
    """
    return hashlib.blake2b(canonical_bytes(components), digest_size=32).hexdigest()


def check_key(key: str) -> str:
    """Return ``key`` if it is 8-128 lowercase hex digits (a :func:`make_key` digest), else
    raise ValueError. Keys become file names, so nothing else is accepted."""
    if not isinstance(key, str) or not KEY_RE.fullmatch(key):
        raise ValueError(f"bad cache key {key!r}: expected lowercase hex digits as made by kcache.make_key")
    return key

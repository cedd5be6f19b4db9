"""What a fingerprint is: the :class:`Fingerprint` record, :class:`Uncacheable`, and the one
digest every part uses (:func:`digest_of`: canonical msgpack, BLAKE2b)."""
from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field

import msgpack


# Top-level packages whose code is covered by the toolchain versions in the key: their
# functions and classes are identified by name, never walked.
_LIBRARY_ROOTS = frozenset(
    {"numba", "numba_cuda", "numba_cuda_mlir", "llvmlite", "numpy", "cuda", "kcache",
     "builtins", "msgpack"}
) | frozenset(getattr(sys, "stdlib_module_names", ()))

_MAX_DEPTH = 32  # nesting depth of containers before a value is treated as opaque


class Uncacheable(Exception):
    """A kernel must not be cached; ``str(exc)`` says why (shown by explain).

    Raised by :func:`fingerprint` for a captured device array and by
    ``kernel_components`` for unreadable ``link=`` files or ``LinkableCode`` objects with
    setup/teardown callbacks.
    """


@dataclass(frozen=True)
class Fingerprint:
    """Content fingerprint of one Python function.

    ``digest``: 64 hex chars (BLAKE2b-256 over the sorted parts).
    ``parts``: part name -> 32 hex chars; names are ``code``, ``closure:<i>``,
    ``default:<name>``, ``dep:<module>.<qualname>``, ``global:<name>``,
    ``attr:<module>.<name>`` (explain reports changes by these names).
    ``opaque``: sorted reasons, one per part hashed by identity rather than content.
    ``lines``: ``"module.qualname"`` -> tuple of :func:`line_digest` values (several when
    functions share a name, e.g. closures) of every dependency, direct or transitive, that
    numba-cuda compiles with ``debug`` or ``lineinfo`` (device functions by their own target
    options, ``@overload`` implementations by their ``jit_options``); not the function itself.
    """

    digest: str
    parts: dict = field(default_factory=dict)
    opaque: list = field(default_factory=list)
    lines: dict = field(default_factory=dict)


def digest_of(payload, size: int = 16) -> str:
    """BLAKE2b hex digest (``size`` bytes) of the canonical msgpack encoding of ``payload``.

    ``payload`` may hold only None, bool, int (64-bit), float, str, bytes and lists.
    """
    data = msgpack.packb(payload, use_bin_type=True)
    return hashlib.blake2b(data, digest_size=size).hexdigest()

"""A kernel compiled on a miss is stored under the key of its globals as they are now, but
numba-cuda compiles each device function once per argument types and then reuses that compile
(``CUDADispatcher.compile_device``), whatever a global it reads became since. Such a reused
compile would put old code under the new key, served to every later process whose globals are
new from the start. So a compile that reuses a device function compiled under other globals is
run (the program gets what numba-cuda gives it) but not stored.

Each device-function compile result is noted with its function's digest
(``fingerprint.dependencies``) when a kcache compile creates it, or when kcache first sees it
(one made by a plain numba-cuda kernel before: taken as made under the globals of that moment).
"""
from __future__ import annotations

import contextlib
import threading
import weakref

from . import _compat
from .fingerprint import dependencies

#: device dispatcher -> {id(compile result): (the result, the digest it was made under)}
_noted: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


@contextlib.contextmanager
def watched(py_func):
    """Watch the compile of kernel ``py_func`` in the block. Yields a list that, when the
    block ends, holds why its result must not be stored (empty: it may be)."""
    reasons: list = []
    deps = _dependencies(py_func)
    for dev, digest in deps:
        _note(dev, digest)  # what exists now, at first sight
    before = {id(dev): {id(r) for r in _compat.device_overloads(dev)} for dev, _ in deps}
    yield reasons
    for dev, digest in deps:
        for result in _compat.device_overloads(dev):
            if id(result) not in before[id(dev)]:
                _note(dev, digest, result)  # made by this compile, under today's globals
                continue
            made_under = _noted_digest(dev, result)
            if made_under is not None and made_under != digest:
                reasons.append(f"device function {_compat_name(dev)} was compiled before a "
                               "global it reads changed, and numba-cuda reuses that compile")
                break


def _dependencies(py_func) -> list:
    try:
        return dependencies(py_func)
    except Exception:  # the key could not be worked out either: nothing is stored then
        return []


def _note(dev, digest: str, result=None) -> None:
    with _lock:
        try:
            table = _noted.setdefault(dev, {})
        except TypeError:  # not weak-referenceable: not watched
            return
        for r in [result] if result is not None else _compat.device_overloads(dev):
            table.setdefault(id(r), (r, digest))


def _noted_digest(dev, result) -> str | None:
    with _lock:
        found = _noted.get(dev, {}).get(id(result))
    return found[1] if found is not None and found[0] is result else None


def _compat_name(dev) -> str:
    fn = getattr(dev, "py_func", dev)
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', '?')}"

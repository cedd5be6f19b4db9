"""A kernel compiled on a miss is stored under the key of its globals as they are now, but
numba-cuda compiles each device function once per argument types and then reuses that compile
(``CUDADispatcher.compile_device``), whatever a global it reads became since. Such a reused
compile would put old code under the new key, served to every later process whose globals are
new from the start. So a compile that reuses a device function compiled under other globals is
run (the program gets what numba-cuda gives it) but not stored.

The same holds for the implementations registered with ``@overload`` (and
``register_jitable``), which numba-cuda compiles once per argument types where kcache cannot
see the compile: a kernel reaching one whose digest moved since this process first compiled
with it is not stored.

Each device-function compile result is noted with its function's digest
(``fingerprint.dependencies``) when a kcache compile creates it, or when kcache first sees it
(one made by a plain numba-cuda kernel before: taken as made under the globals of that moment).
"""
from __future__ import annotations

import contextlib
import types

from .fingerprint import dependencies
from .process import STATE


@contextlib.contextmanager
def watched(frontend, py_func):
    """Watch the compile of kernel ``py_func`` in the block; ``frontend``: the
    ``frontends.base.Frontend`` compiling it (its ``device_overloads``). Yields a list that,
    when the block ends, holds why its result must not be stored (empty: it may be)."""
    reasons: list = []
    found = _dependencies(py_func, frontend.registries())
    devs = [(d, digest) for d, digest in found if not isinstance(d, types.FunctionType)]
    overloaded = [(f, digest) for f, digest in found if isinstance(f, types.FunctionType)]
    for dev, digest in devs:
        _note(frontend, dev, digest)  # what exists now, at first sight
    before = {id(dev): {id(r) for r in frontend.device_overloads(dev)} for dev, _ in devs}
    # numba-cuda keeps the compile of an @overload implementation (register_jitable's too) per
    # argument types where kcache cannot see it: one whose digest moved since this process
    # first compiled with it may be reused as it was (a new signature is refused too).
    for fn, digest in overloaded:
        first = _first_use(fn)
        if first is not None and first != digest:
            reasons.append(f"{_compat_name(fn)} (an @overload or register_jitable function) "
                           "was compiled before a global it reads changed, and numba-cuda "
                           "reuses that compile")
    try:
        yield reasons
    finally:  # a failed compile's device functions are noted too
        for fn, digest in overloaded:
            _note_first_use(fn, digest)
        for dev, digest in devs:
            for result in frontend.device_overloads(dev):
                if id(result) not in before[id(dev)]:
                    _note(frontend, dev, digest, result)  # made by this compile, under today's globals
                    continue
                made_under = _noted_digest(dev, result)
                if made_under is not None and made_under != digest and not reasons:
                    reasons.append(f"device function {_compat_name(dev)} was compiled before "
                                   "a global it reads changed, and numba-cuda reuses that "
                                   "compile")


def _dependencies(py_func, registries) -> list:
    try:
        return dependencies(py_func, registries)
    except Exception:  # the key could not be worked out either: nothing is stored then
        return []


def _note(frontend, dev, digest: str, result=None) -> None:
    """Note ``result`` (default: every compile result ``dev`` holds, at first sight) as made
    under ``digest``; results ``dev`` no longer holds are forgotten (the table holds them, so
    it must not outlive them: ``offline_target`` swaps a dispatcher's results out and back)."""
    live = frontend.device_overloads(dev)
    guard = STATE.guard
    with guard.lock:
        try:
            table = guard.noted.setdefault(dev, {})
        except TypeError:  # not weak-referenceable: not watched
            return
        for r in [result] if result is not None else live:
            table.setdefault(id(r), (r, digest))
        held = {id(r) for r in live}
        for gone in [k for k in table if k not in held]:
            del table[gone]


def _first_use(fn) -> str | None:
    """The digest of ``fn`` (with @overload implementations) when this process first compiled
    a kernel reaching it, or None."""
    with STATE.guard.lock:
        return STATE.guard.first.get(fn)


def _note_first_use(fn, digest: str) -> None:
    with STATE.guard.lock:
        try:
            STATE.guard.first.setdefault(fn, digest)
        except TypeError:  # not weak-referenceable: not watched
            pass


def _noted_digest(dev, result) -> str | None:
    with STATE.guard.lock:
        found = STATE.guard.noted.get(dev, {}).get(id(result))
    return found[1] if found is not None and found[0] is result else None


def _compat_name(dev) -> str:
    fn = getattr(dev, "py_func", dev)
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', '?')}"

"""Source fingerprint of a kernel or device function: its content, never paths or mtimes.

``fingerprint(py_func)`` hashes what decides the code numba-cuda generates for a Python
function:

* the code object: bytecode, constants (nested code objects recursively), names, argument
  counts and flags -- but not ``co_filename``, ``co_firstlineno``, line tables or positions,
  so editing a comment or moving the project keeps the digest;
* closure cell values and argument defaults;
* every global the bytecode reaches (``LOAD_GLOBAL`` followed by ``LOAD_ATTR`` chains, so
  ``consts.SCALE`` where ``consts`` is a module is hashed as the value of ``SCALE``): numbers,
  strings, bytes, tuples, numpy arrays (dtype, shape, bytes), numpy dtypes (record dtypes
  included), enums, numba types;
* transitively, device functions and other dispatchers (their ``py_func`` and target options),
  plain Python functions (``register_jitable`` returns the function itself), intrinsics (their
  definition function) and the Python implementations registered with numba-cuda's
  ``@overload`` for a function reached (looked up in the typing registry behind the public
  ``numba.cuda.extending.infer``).

Line numbers are not in the fingerprint's digest. ``Fingerprint.lines`` lists, for the device
functions (and ``@overload`` implementations) reached that are compiled with ``debug`` or
``lineinfo``, the digest of their line tables (:func:`line_digest`): a kernel compiled with
line info carries theirs too (docs/keys.md, "Line numbers").

Functions of library modules (numba, numpy, llvmlite, cuda-python, the standard library)
are identified by module and qualname only: their versions are in the toolchain component.
Not those made at run time inside a function (``<locals>`` in the qualname: numba-cuda's test
helpers make a new one per call under one name): they are walked like user code.
Anything else that cannot be hashed by content gets a stable identity (type module+qualname,
plus its repr when that looks deterministic) and is listed in ``Fingerprint.opaque``.
A captured device array (an object with ``__cuda_array_interface__``) raises
:class:`Uncacheable`.

Encoding: every part is a canonical msgpack document hashed with BLAKE2b, so digests are
equal in any process, on any path and under any ``PYTHONHASHSEED``.
"""
from __future__ import annotations

import types

from .code import line_digest
from .model import Fingerprint, Uncacheable, digest_of
from .libraries import (_deterministic_repr, _is_dispatcher, _is_intrinsic, _is_library,
                        _is_numba_type, _library_named, _module_level_library_class,
                        _named_by_library, _qualified, _type_name)
from ..process import STATE
from .memo import _SEEN, _validated_cache_get
from .walk import _Acc, _Walk

__all__ = ["Fingerprint", "Uncacheable", "fingerprint", "dependencies", "digest_of", "value_digest",
           "line_digest", "content_digest", "describe", "named_by_library", "is_library_module",
           "is_library_class", "named_by_its_library"]


def fingerprint(py_func, registries, *, code_memo=None) -> Fingerprint:
    """Fingerprint a Python function (a kernel's or device function's ``py_func``).

    ``py_func``: a plain Python function; a dispatcher (anything with ``py_func``) is
    accepted and its ``py_func`` used. ``registries``: the front-end's extension registries
    (``Frontend.registries()``: fixed signatures of dispatchers, ``@overload``
    implementations); ``code_memo``: where a kernel's code analysis is remembered across
    processes (``remembered.memo_of(store)``; None: nowhere). Does not compile or touch a GPU.
    Raises :class:`Uncacheable` when the function captures a device array, ``TypeError``
    when ``py_func`` is not a Python function.
    """
    fn = getattr(py_func, "py_func", py_func)
    if not isinstance(fn, types.FunctionType):
        raise TypeError(
            f"fingerprint() needs a Python function or a dispatcher, got {type(py_func).__name__}"
        )
    results = STATE.fingerprint_memo(registries).results
    entry = results.get(fn)
    if entry is None:
        # The first fingerprint of fn: most are the only one (a kernel's first lookup in a
        # process), so what would make it reusable (the checks) is not recorded; the next
        # one records them. Dependencies reached are remembered in any case.
        results[fn] = _SEEN
        return _Walk(registries, code_memo=code_memo).function(fn, record=False)[0]
    cached = _validated_cache_get(entry)
    if cached is not None:
        return cached
    fp, _acc = _Walk(registries).function(fn)
    return fp


def dependencies(py_func, registries) -> list:
    """``[(object, digest)]`` of every dispatcher (device function) and every function with
    ``@overload`` implementations (``register_jitable`` makes one) that ``py_func`` reaches,
    directly or through other functions, with its digest under the current globals, worked
    out afresh (no memo is read). For kcache.dispatcher.dep_guard. ``registries``: as
    :func:`fingerprint`'s. Raises what :func:`fingerprint` raises."""
    fn = getattr(py_func, "py_func", py_func)
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"dependencies() needs a Python function, got {type(py_func).__name__}")
    reached: dict = {}
    _Walk(registries, reached).function(fn, record=False)
    return list(reached.values())


def value_digest(value, where: str = "value", *, registries) -> str:
    """32-hex digest of one value under the fingerprint's encoding (functions and dispatchers
    by content, classes and library objects by name).  ``where`` names the value in the
    :class:`Uncacheable` message raised for a device array; ``registries``: as
    :func:`fingerprint`'s."""
    return _Walk(registries).value_digest(value, where, _Acc())


def content_digest(value, where: str = "value", *, registries) -> tuple:
    """``(32-hex digest, opaque reasons)`` of ``value`` by content, for extension
    registrations (dispatcher/extensions.py): functions, dispatchers and intrinsics as
    :func:`value_digest` gives them (a function's globals, closure cells and callees
    included); a class that is not a library's own module-level class (a user class, or one
    made at run time, e.g. by ``type()`` in numba's extension API) by its name, bases and
    members (methods by content) -- where a kernel's fingerprint names a class only; anything
    else as :func:`value_digest` encodes it (opaque objects by type and repr). ``registries``:
    as :func:`fingerprint`'s."""
    walk, acc = _Walk(registries), _Acc()
    if isinstance(value, type) and not _module_level_library_class(value):
        digest = digest_of(walk.class_payload(value, where, acc, 0))
    else:
        digest = walk.value_digest(value, where, acc)
    return digest, sorted(set(acc.opaque))


def describe(value) -> str:
    """A stable, readable name of a registration key: ``module.qualname`` of functions,
    classes and builtins, the text of strings and numba types, ``(a, b)`` of tuples, a
    deterministic repr or the type's name otherwise (never an address)."""
    if isinstance(value, str):
        return value
    if isinstance(value, tuple):
        return "(" + ", ".join(describe(v) for v in value) + ")"
    if _is_numba_type(value):
        return str(value)
    if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)) or \
            _is_dispatcher(value) or _is_intrinsic(value):
        return _qualified(getattr(value, "py_func", value))
    if callable(value) and isinstance(getattr(value, "__qualname__", None), str) and \
            isinstance(getattr(value, "__module__", None), str):
        return _qualified(value)  # numpy 2's functions (_ArrayFunctionDispatcher), ufuncs
    text = _deterministic_repr(value)
    return text if text is not None and len(text) <= 200 else f"<{_type_name(value)}>"


def named_by_library(obj) -> bool:
    """True when a kernel's fingerprint identifies ``obj`` (function, dispatcher, intrinsic,
    class) by its library name alone instead of walking it (module-level object of numba,
    numpy, the standard library, ...)."""
    return _named_by_library(obj)


def named_by_its_library(obj) -> bool:
    """True for a library's object that its module names: ``module.qualname`` leads to this
    very object (not one made at run time, by ``type()`` or in a function)."""
    return _library_named(obj)


def is_library_module(module_name) -> bool:
    """True for a module of a library package (its code is covered by the toolchain)."""
    return _is_library(module_name)


def is_library_class(cls) -> bool:
    """True for a library's own module-level class (its module names it), not one made at
    run time (by ``type()`` or inside a function)."""
    return _module_level_library_class(cls)

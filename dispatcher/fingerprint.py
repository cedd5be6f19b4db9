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

import enum
import hashlib
import reprlib
import sys
import types
import weakref
from dataclasses import dataclass, field

import msgpack

from dataclasses import _HAS_DEFAULT_FACTORY as _FACTORY  # the written-out dataclass default

from .bytecode import references

__all__ = ["Fingerprint", "Uncacheable", "fingerprint", "dependencies", "digest_of", "value_digest",
           "line_digest", "content_digest", "describe", "named_by_library", "is_library_module",
           "is_library_class"]

# Top-level packages whose code is covered by the toolchain versions in the key: their
# functions and classes are identified by name, never walked.
_LIBRARY_ROOTS = frozenset(
    {"numba", "numba_cuda", "llvmlite", "numpy", "cuda", "kcache", "builtins", "msgpack"}
) | frozenset(getattr(sys, "stdlib_module_names", ()))

_MAX_DEPTH = 32  # nesting depth of containers before a value is treated as opaque


class Uncacheable(Exception):
    """A kernel must not be cached; ``str(exc)`` says why (shown by explain).

    Raised by :func:`fingerprint` for a captured device array and by
    ``kernel_components`` for unreadable ``link=`` files or ``LinkableCode`` objects with
    setup/teardown callbacks.
    """



@dataclass(frozen=True, init=False, repr=False, eq=False)  # the methods are written out
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

    # __init__, __repr__, __eq__ and __hash__ are written out as dataclasses generates them
    # (hence init=False, repr=False, eq=False above; __setattr__ and __delattr__, which make it
    # frozen, are still generated): generating them runs exec once per method, ~0.8 ms on a
    # 2-core machine, paid by every process that defines a kernel. Still a frozen dataclass
    # (fields, asdict, replace); tests/test_dataclass_methods.py checks the methods against
    # generated ones.
    def __init__(self, digest: str, parts: dict = _FACTORY, opaque: list = _FACTORY,
                 lines: dict = _FACTORY) -> None:
        object.__setattr__(self, "digest", digest)
        object.__setattr__(self, "parts", dict() if parts is _FACTORY else parts)
        object.__setattr__(self, "opaque", list() if opaque is _FACTORY else opaque)
        object.__setattr__(self, "lines", dict() if lines is _FACTORY else lines)

    @reprlib.recursive_repr()
    def __repr__(self):
        return self.__class__.__qualname__ + (f"(digest={self.digest!r}, parts={self.parts!r}, "
                                              f"opaque={self.opaque!r}, lines={self.lines!r})")

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return ((self.digest, self.parts, self.opaque, self.lines) ==
                    (other.digest, other.parts, other.opaque, other.lines))
        return NotImplemented

    def __hash__(self):
        return hash((self.digest, self.parts, self.opaque, self.lines))


def digest_of(payload, size: int = 16) -> str:
    """BLAKE2b hex digest (``size`` bytes) of the canonical msgpack encoding of ``payload``.

    ``payload`` may hold only None, bool, int (64-bit), float, str, bytes and lists.
    """
    data = msgpack.packb(payload, use_bin_type=True)
    return hashlib.blake2b(data, digest_size=size).hexdigest()


def fingerprint(py_func) -> Fingerprint:
    """Fingerprint a Python function (a kernel's or device function's ``py_func``).

    ``py_func``: a plain Python function; a dispatcher (anything with ``py_func``) is
    accepted and its ``py_func`` used.  Does not compile or touch a GPU.
    Raises :class:`Uncacheable` when the function captures a device array, ``TypeError``
    when ``py_func`` is not a Python function.
    """
    fn = getattr(py_func, "py_func", py_func)
    if not isinstance(fn, types.FunctionType):
        raise TypeError(
            f"fingerprint() needs a Python function or a dispatcher, got {type(py_func).__name__}"
        )
    entry = _results.get(fn)
    if entry is None:
        # The first fingerprint of fn: most are the only one (a kernel's first lookup in a
        # process), so what would make it reusable (the checks) is not recorded; the next
        # one records them. Dependencies reached are remembered in any case.
        _results[fn] = _SEEN
        return _Walk().function(fn, record=False)[0]
    cached = _validated_cache_get(fn, entry)
    if cached is not None:
        return cached
    fp, _acc = _Walk().function(fn)
    return fp


def dependencies(py_func) -> list:
    """``[(object, digest)]`` of every dispatcher (device function) and every function with
    ``@overload`` implementations (``register_jitable`` makes one) that ``py_func`` reaches,
    directly or through other functions, with its digest under the current globals, worked
    out afresh (no memo is read). For kcache.dispatcher.dep_guard. Raises what
    :func:`fingerprint` raises."""
    fn = getattr(py_func, "py_func", py_func)
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"dependencies() needs a Python function, got {type(py_func).__name__}")
    reached: dict = {}
    _Walk(reached).function(fn, record=False)
    return list(reached.values())


def value_digest(value, where: str = "value") -> str:
    """32-hex digest of one value under the fingerprint's encoding (functions and dispatchers
    by content, classes and library objects by name).  ``where`` names the value in the
    :class:`Uncacheable` message raised for a device array."""
    return _Walk().value_digest(value, where, _Acc())


def content_digest(value, where: str = "value") -> tuple:
    """``(32-hex digest, opaque reasons)`` of ``value`` by content, for extension
    registrations (dispatcher/extensions.py): functions, dispatchers and intrinsics as
    :func:`value_digest` gives them (a function's globals, closure cells and callees
    included); a class that is not a library's own module-level class (a user class, or one
    made at run time, e.g. by ``type()`` in numba's extension API) by its name, bases and
    members (methods by content) -- where a kernel's fingerprint names a class only; anything
    else as :func:`value_digest` encodes it (opaque objects by type and repr)."""
    walk, acc = _Walk(), _Acc()
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


def is_library_module(module_name) -> bool:
    """True for a module of a library package (its code is covered by the toolchain)."""
    return _is_library(module_name)


def is_library_class(cls) -> bool:
    """True for a library's own module-level class (its module names it), not one made at
    run time (by ``type()`` or inside a function)."""
    return _module_level_library_class(cls)


def line_digest(py_func) -> str:
    """32-hex digest of what numba-cuda's line information takes from a function: its file
    name, first line and bytecode-to-line table (``co_lines()``, no columns), with those of its
    nested code objects (inner functions and closures are compiled into it). ``py_func``: a
    Python function or anything with ``py_func``."""
    code = getattr(py_func, "py_func", py_func).__code__
    return _code_info_of(code).line_digest(code)


# ---------------------------------------------------------------------------------------
# Result cache: a fingerprint is reused only while everything it read is still the very same
# object (identity), so a rebound global or an edited closure cell is always seen.  Mutable
# values (arrays, lists, dicts, opaque objects) make an entry uncacheable.


class _Cached:
    __slots__ = ("fp", "checks")

    def __init__(self, fp, checks):
        self.fp = fp
        # (reader, its arguments, expected object, compare by equality?): reader(*arguments)
        # is the current object. Plain functions and tuples rather than closures: a kernel's
        # checks are a few tuples, not a function and cells per global it reads.
        self.checks = checks


_results: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


#: In _results for a function fingerprinted once without recording its checks.
_SEEN = _Cached(None, ())


def _validated_cache_get(fn, entry=None):
    """The cached Fingerprint of ``fn`` if every input it read is unchanged, else None."""
    entry = entry if entry is not None else _results.get(fn)
    if entry is None or entry is _SEEN:
        return None
    return entry.fp if _checks_hold(entry.checks) else None


def _checks_hold(checks) -> bool:
    """True when every input a result read is unchanged (see _Cached)."""
    try:
        for read, args, expected, by_equality in checks:
            current = read(*args)
            if not (current == expected if by_equality else current is expected):
                return False
    except Exception:  # an input that cannot be read (or compared) any more: recompute
        return False
    return True


#: Digests of device functions reached by name (_Walk._dependency_digest): dispatcher ->
#: (where, digest, checks, opaque reasons, line digests).
_dependency_memo: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


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
        # file name and line table, because equal code objects (the key of _code_info) may
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


# Keyed by the code object itself. Code objects compare by content (bytecode, constants,
# names, first line, line table; not the file name), so equal code shares one analysis.
_code_info: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _code_info_of(code: types.CodeType) -> _CodeInfo:
    info = _code_info.get(code)
    if info is None:
        info = _CodeInfo(digest_of(_code_payload(code)), tuple(_chains(code)))
        _code_info[code] = info
    return info


def _code_info_once(code: types.CodeType) -> _CodeInfo:
    """:func:`_code_info_of` without remembering a new analysis (nested code objects' are)."""
    info = _code_info.get(code)
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


# ---------------------------------------------------------------------------------------
# The walk: resolves references and encodes values, recursing into dependencies.


def _is_library(module_name) -> bool:
    if not isinstance(module_name, str):
        return False
    return module_name.partition(".")[0] in _LIBRARY_ROOTS


def _named_by_library(obj, module_name=None) -> bool:
    """True when ``obj`` (a function, dispatcher, intrinsic or class) may be identified by its
    library name alone: it lives in a library module and is not made at run time inside a
    function (``<locals>`` in its qualname). Such a local function (a closure built by a test
    helper, a factory's product) is a new object, with other closure cells and ``@overload``
    registrations, each time the enclosing function runs, under the very same name."""
    module_name = _origin_module(obj) if module_name is None else module_name
    if not _is_library(module_name):
        return False
    inner = getattr(obj, "py_func", None) or getattr(obj, "_defn", None) or obj
    return "<locals>" not in (getattr(inner, "__qualname__", None) or "")


def _module_level_library_class(cls) -> bool:
    """A class of a library module that its module names (``module.qualname`` leads to it):
    not one made at run time by ``type()`` or inside a function."""
    if not _is_library(cls.__module__) or "<locals>" in cls.__qualname__:
        return False
    obj = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is cls


def _qualified(obj) -> str:
    module = getattr(obj, "__module__", None) or "?"
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or "?"
    return f"{module}.{qualname}"


def _type_name(obj) -> str:
    return _qualified(type(obj))


def _is_dispatcher(obj) -> bool:
    # numba-cuda's CUDADispatcher (kernels and device functions) and numba's CPU
    # dispatchers both carry the Python function and the target options.
    return (
        not isinstance(obj, type)
        and hasattr(obj, "py_func")
        and hasattr(obj, "targetoptions")
        and isinstance(getattr(obj, "py_func", None), types.FunctionType)
    )


def _is_intrinsic(obj) -> bool:
    # numba.cuda.extending.intrinsic objects keep their definition in ``_defn``.
    return not isinstance(obj, type) and isinstance(getattr(obj, "_defn", None), types.FunctionType)


def _origin_module(obj):
    """Module that defined a dispatcher's/intrinsic's Python function (or the object)."""
    for attr in ("py_func", "_defn"):
        inner = getattr(obj, attr, None)
        if isinstance(inner, types.FunctionType):
            return inner.__module__
    return getattr(obj, "__module__", None)


def _is_extern(obj) -> bool:
    # numba-cuda's compiler.ExternFunction, returned by cuda.declare_device.
    return type(obj).__name__ == "ExternFunction" and isinstance(getattr(obj, "name", None), str)


def _is_numba_type(obj) -> bool:
    for cls in type(obj).__mro__:
        if cls.__name__ == "Type" and cls.__module__ in (
            "numba.core.types.abstract",
            "numba.cuda.types.abstract",
        ):
            return True
    return False


def _has_cai(obj) -> bool:
    if isinstance(obj, type):
        return False  # e.g. the DeviceNDArray class itself: a name, not data
    try:
        return hasattr(obj, "__cuda_array_interface__")
    except Exception:
        return False


def _deterministic_repr(obj):
    try:
        text = repr(obj)
    except Exception:
        return None
    if " at 0x" in text or " object at " in text or len(text) > 4096:
        return None
    return text


class _Acc:
    """What one function's fingerprint gathered besides its parts. ``checks`` is None when
    the result will not be remembered (a function fingerprinted for the first time: see
    :func:`fingerprint`), and nothing is recorded then."""

    __slots__ = ("opaque", "checks", "cacheable", "lines")

    def __init__(self, record: bool = True):
        self.opaque: list = []
        self.checks: list | None = [] if record else None
        self.cacheable = True
        self.lines: dict = {}  # "module.qualname" -> set of line digests

    def check(self, read, args, expected, by_equality=False):
        """Remember that ``read(*args)`` must still give ``expected`` (the same object, or an
        equal one with ``by_equality``) for the result to be reused."""
        if self.checks is not None:
            self.checks.append((read, args, expected, by_equality))

    def extend(self, checks) -> None:
        if self.checks is not None:
            self.checks.extend(checks)

    def add_lines(self, name: str, digests) -> None:
        self.lines.setdefault(name, set()).update(digests)


def _with_line_info(options) -> bool:
    """True when numba-cuda compiles a function with these options (target options or
    ``@overload`` ``jit_options``) with line information (``debug`` or ``lineinfo``)."""
    return isinstance(options, dict) and bool(options.get("debug") or options.get("lineinfo"))


class _Walk:
    """One fingerprint computation: cycle protection, opaque notes, cache checks."""

    def __init__(self, reached: dict | None = None):
        self.in_progress: set[int] = set()  # id(fn) of the functions being walked
        self.cycles = 0  # back-references met so far
        self.done: dict[int, tuple] = {}  # id(fn) -> (Fingerprint, _Acc), acyclic ones only
        # dependencies(): every dispatcher met, id -> (dispatcher, digest); such a walk reads
        # nothing remembered (the memos skip what they remember, and it must see it all)
        self.reached = reached

    # -- functions -----------------------------------------------------------------------

    def function(self, fn, record: bool = True):
        """(Fingerprint, _Acc) of ``fn``; stores it in the process cache when safe and
        ``record`` is True."""
        self.in_progress.add(id(fn))
        cycles_before = self.cycles
        acc = _Acc(record)
        try:
            parts = self._function_parts(fn, acc)
        finally:
            self.in_progress.discard(id(fn))
        digest = digest_of(sorted(parts.items()), size=32)
        lines = {name: tuple(sorted(d)) for name, d in sorted(acc.lines.items())}
        fp = Fingerprint(digest, parts, sorted(set(acc.opaque)), lines)
        # Recursion below fn makes its digest depend on where the walk entered the cycle:
        # such results are neither cached (acc.cacheable is False) nor reused in this walk.
        if acc.cacheable and acc.checks is not None:
            # Dependencies reached along several paths bring the same check tuples: once each.
            _results[fn] = _Cached(fp, list({id(c): c for c in acc.checks}.values()))
        if self.cycles == cycles_before:
            self.done[id(fn)] = (fp, acc)
        return fp, acc

    def _function_parts(self, fn, acc) -> dict:
        code = fn.__code__
        # A function's first fingerprint (acc.checks is None): most are the only one, so its
        # code's analysis is not kept either (a kernel's; a device function's is kept by the
        # dependency walk, which records): objects every full collection would go through.
        info = _code_info_of(code) if acc.checks is not None else _code_info_once(code)
        parts = {"code": info.digest}
        own = weakref.ref(fn) if acc.checks is not None else None
        acc.check(_weak_attr, (own, "__code__"), code)

        closure = fn.__closure__ or ()
        for i, cell in enumerate(closure):
            try:
                value = cell.cell_contents
            except ValueError:  # empty cell
                parts[f"closure:{i}"] = digest_of(["empty-cell"])
                continue
            acc.check(_cell_value, (cell,), value)
            parts[f"closure:{i}"] = self.value_digest(value, f"closure:{i}", acc)

        acc.check(_weak_attr, (own, "__defaults__"), fn.__defaults__)
        acc.check(_weak_attr, (own, "__kwdefaults__"), fn.__kwdefaults__)
        for name, value in _defaults(fn):
            parts[f"default:{name}"] = self.value_digest(value, f"default:{name}", acc)

        freevars = code.co_freevars
        for kind, name, attrs in info.chains:
            if kind == "g":
                found, base = _lookup_global(fn, name)
                if not found:
                    continue  # an unbound name: numba reports it when compiling
                acc.check(_read_global, (fn.__globals__, name), base)
                base_part = f"global:{name}"
            else:
                if name not in freevars or not closure or not attrs:
                    continue  # a cell value itself is already a closure part
                i = freevars.index(name)
                try:
                    base = closure[i].cell_contents
                except ValueError:
                    continue
                base_part = f"closure:{i}"
            part, value = self._follow(base, attrs, base_part, acc)
            if part.startswith("dep:") or part not in parts:
                parts[part] = self.value_digest(value, part, acc)
        return parts

    def _follow(self, base, attrs, base_part, acc):
        """Walk an attribute chain through modules and (non-library) classes."""
        obj, path = base, []
        for attr in attrs:
            if not (
                isinstance(obj, types.ModuleType)
                or (isinstance(obj, type) and not _is_library(obj.__module__)
                    and not issubclass(obj, enum.Enum))
            ):
                break
            try:
                nxt = getattr(obj, attr)
            except Exception:
                break
            acc.check(getattr, (obj, attr), nxt)
            obj = nxt
            path.append(attr)
        if path:
            owner = base.__name__ if isinstance(base, types.ModuleType) else _qualified(base)
            part = f"attr:{owner}.{'.'.join(path)}"
        else:
            part = base_part
        known = _NAMED.get(id(obj))  # named by its library (cuda.grid, math.sqrt): no dependency
        if (known is None or known[0] is not obj) and self._is_dep(obj):
            part = f"dep:{_qualified(getattr(obj, 'py_func', obj))}"
        return part, obj

    def _is_dep(self, obj) -> bool:
        if _is_dispatcher(obj) or _is_intrinsic(obj):
            return not _named_by_library(obj)
        return isinstance(obj, types.FunctionType) and not _named_by_library(obj)

    # -- values --------------------------------------------------------------------------

    def value_digest(self, value, where, acc) -> str:
        known = _NAMED.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        if _is_dispatcher(value) and id(value.py_func) not in self.in_progress \
                and not _named_by_library(value):
            return self._dependency_digest(value, where, acc)
        opaque, cacheable = len(acc.opaque), acc.cacheable
        payload = self.encode(value, where, acc, 0)
        digest = digest_of(payload)
        if (payload[0] in _BY_NAME and len(acc.opaque) == opaque and acc.cacheable == cacheable
                and len(_NAMED) < 4096):
            _NAMED[id(value)] = (value, digest)
        return digest

    def _dependency_digest(self, disp, where, acc) -> str:
        """value_digest of a device function (or other dispatcher) reached by name: remembered
        per dispatcher with the checks of everything it read, and reused while they hold
        (most kernels of an application reach the same few device functions; working each
        one's digest out again took a third of a kernel's fingerprint)."""
        memo = _dependency_memo.get(disp) if self.reached is None else None
        if memo is not None and memo[0] == where and _checks_hold(memo[2]):
            _, digest, checks, opaque, lines = memo
        else:
            sub, cycles = _Acc(), self.cycles
            digest = digest_of(self.encode(disp, where, sub, 0))
            checks, opaque, lines = sub.checks, sub.opaque, sub.lines
            if sub.cacheable and self.cycles == cycles:
                try:
                    _dependency_memo[disp] = (where, digest, checks, opaque, lines)
                except TypeError:  # not weak-referenceable: just not remembered
                    pass
            else:
                acc.cacheable = False
        acc.extend(checks)
        acc.opaque.extend(opaque)
        for name, digests in lines.items():
            acc.add_lines(name, digests)
        return digest

    def encode(self, value, where, acc, depth):
        """Canonical payload of a value; dependencies return ["dep", digest]."""
        if depth > _MAX_DEPTH:
            acc.opaque.append(f"{where}: nested deeper than {_MAX_DEPTH} levels")
            acc.cacheable = False
            return ["too-deep"]
        exact = _EXACT_SCALARS.get(type(value))
        if exact is not None:  # the common case, without the isinstance chain below
            return exact(value)
        if isinstance(value, enum.Enum):
            return ["enum", _type_name(value), value.name,
                    self.encode(value.value, where, acc, depth + 1)]
        scalar = _scalar_payload(value)
        if scalar is not None:
            return scalar
        if _is_dispatcher(value):  # before the device-array probe: a dependency, the usual case
            if _named_by_library(value):
                return ["function", _qualified(value)]
            return ["dep", self._dispatcher_digest(value, where, acc)]
        if _has_cai(value):
            raise Uncacheable(
                f"{where} is a device array ({_type_name(value)}); kernels that capture device "
                "arrays are compiled and run normally but never cached"
            )
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            encoded = self._encode_numpy(numpy, value, where, acc)
            if encoded is not None:
                return encoded
        if isinstance(value, (tuple, list)):
            if isinstance(value, list):
                acc.cacheable = False  # mutable: re-read every time
            items = [self.encode(v, where, acc, depth + 1) for v in value]
            kind = type(value).__name__ if type(value) in (tuple, list) else _type_name(value)
            return [kind, items]
        if isinstance(value, (set, frozenset)):
            acc.cacheable = acc.cacheable and isinstance(value, frozenset)
            items = [self.encode(v, where, acc, depth + 1) for v in value]
            return ["set", sorted(items, key=_sort_key)]
        if isinstance(value, dict):
            acc.cacheable = False
            items = [[self.encode(k, where, acc, depth + 1), self.encode(v, where, acc, depth + 1)]
                     for k, v in value.items()]
            return ["dict", sorted(items, key=_sort_key)]
        if (_is_dispatcher(value) or _is_intrinsic(value)) and _named_by_library(value):
            return ["function", _qualified(value)]
        if _is_dispatcher(value):
            return ["dep", self._dispatcher_digest(value, where, acc)]
        if _is_intrinsic(value):
            return ["dep", digest_of(["intrinsic", self._function_digest(value._defn, acc)])]
        if isinstance(value, types.FunctionType):
            if _named_by_library(value, value.__module__):
                return ["function", _qualified(value)]
            return ["dep", self._plain_function_digest(value, acc)]
        if isinstance(value, types.ModuleType):
            return ["module", value.__name__]
        if isinstance(value, (types.BuiltinFunctionType, types.MethodWrapperType,
                              types.WrapperDescriptorType, types.MethodDescriptorType)):
            return ["builtin", _qualified(value)]
        if _is_numba_type(value):
            return ["numba-type", _type_name(value), str(value)]
        if _is_extern(value):
            # cuda.declare_device(name, sig): the foreign symbol and its signature.
            return ["extern", value.name, str(getattr(value, "sig", ""))]
        if isinstance(value, type):
            return self._encode_class(value, where, acc, depth)
        return self._encode_opaque(value, where, acc)

    def _encode_numpy(self, np, value, where, acc):
        if isinstance(value, np.ndarray):
            acc.cacheable = False  # contents may change in place
            if value.dtype.hasobject:
                acc.opaque.append(f"{where}: numpy array of Python objects")
                return ["ndarray-object", _dtype_payload(value.dtype), list(value.shape)]
            data = np.ascontiguousarray(value)
            return ["ndarray", _dtype_payload(value.dtype), list(value.shape),
                    hashlib.blake2b(data.view(np.uint8).reshape(-1) if data.size else b"",
                                    digest_size=32).digest()]
        if isinstance(value, np.generic):
            return ["npscalar", _dtype_payload(value.dtype), value.tobytes()]
        if isinstance(value, np.dtype):
            return ["dtype", _dtype_payload(value)]
        return None

    def _encode_class(self, cls, where, acc, depth):
        if issubclass(cls, enum.Enum):
            members = [[name, self.encode(member.value, where, acc, depth + 1)]
                       for name, member in cls.__members__.items()]
            return ["enum-class", _qualified(cls), members]
        if not _is_library(cls.__module__):
            acc.opaque.append(f"{where}: class {_qualified(cls)} (identified by name only)")
        return ["class", _qualified(cls)]

    def class_payload(self, cls, where, acc, depth):
        """A class by content: name, bases (by content unless a library's own class) and the
        members of its namespace: methods by content, static/class methods and properties by
        their functions, other values encoded. Line numbers and the docstring are left out."""
        if depth > _MAX_DEPTH:
            return self._encode_class(cls, where, acc, depth)
        bases = [self.class_payload(b, where, acc, depth + 1)
                 if not _module_level_library_class(b) else ["class", _qualified(b)]
                 for b in cls.__bases__]
        members = []
        for name, member in sorted(vars(cls).items()):
            if name in _CLASS_NOT_CONTENT:
                continue
            spot = f"{where}.{name}"
            if isinstance(member, (staticmethod, classmethod)):
                payload = [type(member).__name__, self.encode(member.__func__, spot, acc, depth + 1)]
            elif isinstance(member, property):
                payload = ["property"] + [self.encode(f, spot, acc, depth + 1)
                                          for f in (member.fget, member.fset, member.fdel)]
            else:
                payload = self.encode(member, spot, acc, depth + 1)
            members.append([name, payload])
        return ["class-content", _qualified(cls), bases, members]

    def _encode_opaque(self, value, where, acc):
        acc.cacheable = False
        text = _deterministic_repr(value)
        if not _is_library(type(value).__module__) or text is None:
            how = "type and repr" if text is not None else "type only"
            acc.opaque.append(f"{where}: object of type {_type_name(value)} (identified by {how})")
        return ["opaque", _type_name(value), text]

    # -- dependencies --------------------------------------------------------------------

    def _function_digest(self, fn, acc) -> str:
        key = id(fn)
        if key in self.in_progress:
            # Recursion: name the function instead of walking it again.
            self.cycles += 1
            acc.cacheable = False  # a back-reference is not a pure function of fn's inputs
            return digest_of(["cycle", _qualified(fn)])
        done = self.done.get(key)
        if done is None:
            cached = _results.get(fn) if self.reached is None else None
            if cached is not None and cached is not _SEEN and \
                    _validated_cache_get(fn, cached) is cached.fp:
                dep_acc = _Acc()
                dep_acc.checks = cached.checks
                done = self.done[key] = (cached.fp, dep_acc)
            else:
                done = self.function(fn)  # recursion members are walked again each time
        fp, dep_acc = done
        # The caller's cached fingerprint is valid only while the dependency's inputs are.
        acc.extend(dep_acc.checks)
        acc.cacheable = acc.cacheable and dep_acc.cacheable
        acc.opaque.extend(f"{_qualified(fn)} {reason}" for reason in fp.opaque)
        for name, digests in fp.lines.items():
            acc.add_lines(name, digests)
        return fp.digest

    def _plain_function_digest(self, fn, acc) -> str:
        # A plain function may be the target of @overload(fn): its typing templates hold the
        # Python implementations numba-cuda compiles instead of fn's own body.
        own = self._function_digest(fn, acc)
        registered = _overload_implementations(fn)
        # An @overload registered after this fingerprint was cached must be seen.
        acc.check(_overload_implementations, (fn,), registered, by_equality=True)
        impls = [self._overload_payload(impl, opts, acc) for impl, opts in registered]
        digest = digest_of(["overloaded", own, sorted(impls, key=_sort_key)]) if impls else own
        if self.reached is not None and registered:  # numba-cuda compiles it once per types
            self.reached[id(fn)] = (fn, digest)
        return digest

    def _overload_payload(self, impl, jit_options, acc):
        options = self.encode(jit_options, "overload options", _Acc(), 0)
        if isinstance(impl, types.FunctionType) and not _named_by_library(impl, impl.__module__):
            digest = self._function_digest(impl, acc)
            if _with_line_info(jit_options):
                acc.add_lines(_qualified(impl), (line_digest(impl),))
            return ["overload", digest, options]
        return ["overload", _qualified(impl), options]

    def _dispatcher_digest(self, disp, where, acc) -> str:
        fn = disp.py_func
        fn_digest = self._function_digest(fn, acc)
        options = getattr(disp, "targetoptions", None) or {}
        # Options hold lists (link, extensions): compare with a copy whose lists are copied
        # too, which sees a list changed in place, instead of giving up caching.
        snapshot = _copied(options)
        # Through a weak reference: these checks are remembered with disp as the key
        # (_dependency_memo), and a strong one would keep a device function made at run time
        # alive for good.
        ref = _weak(disp)
        acc.check(_target_options, (ref,), snapshot, by_equality=True)
        acc.check(_weak_attr, (ref, "py_func"), fn)
        if _with_line_info(options):
            # A device function compiled with line info brings its line table into the kernel.
            acc.add_lines(_qualified(fn), (line_digest(fn),))
        parts = ["dispatcher", fn_digest, self._options_digest(disp, options, snapshot, where, acc)]
        fixed = _fixed_signatures(disp)
        if fixed is not None:
            # @jit("(i4, i4)") types a call against these alone (or refuses it, as a CPU
            # function on the device): the same body without them is another dependency.
            parts.append(["signatures", fixed])
            acc.check(_weak_fixed_signatures, (ref,), fixed, by_equality=True)
        digest = digest_of(parts)
        if self.reached is not None:
            self.reached[id(disp)] = (disp, digest)
        return digest

    def _options_digest(self, disp, options, snapshot, where, acc) -> str:
        """Digest of a dispatcher's target options, remembered per dispatcher while they
        compare equal to the copy taken then (most kernels reach the same few device
        functions)."""
        memo = _options_memo.get(disp)
        try:
            if memo is not None and memo[0] == snapshot:
                return memo[1]
        except Exception:  # an option value whose == raises: compute afresh
            pass
        opts_acc = _Acc()
        # Option names are unique strings: sorting by name is canonical.
        items = [[k, self.encode(options[k], f"{where} option {k}", opts_acc, 1)]
                 for k in sorted(options, key=str)]
        digest = digest_of(items)
        acc.opaque.extend(opts_acc.opaque)
        # An option holding a function (an ``inline`` cost model) is a dependency: its inputs
        # must be re-checked like any other. The options' own lists are covered by the
        # snapshot comparison, so they do not make the caller uncacheable.
        acc.extend(opts_acc.checks)
        if not opts_acc.opaque and not opts_acc.checks:  # plain values: equality suffices
            try:
                _options_memo[disp] = (snapshot, digest)
            except TypeError:  # not weak-referenceable: just not remembered
                pass
        return digest


# Namespace entries of a class that are not code: its own bookkeeping, the line it starts on
# (3.13) and the docstring.
_CLASS_NOT_CONTENT = frozenset({"__dict__", "__weakref__", "__module__", "__qualname__",
                                "__doc__", "__firstlineno__", "__static_attributes__",
                                "_abc_impl"})  # _abc_impl: abc's registry and caches

_options_memo: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

# Digests of objects encoded by their name alone (library functions, modules, builtins,
# library classes: cuda.grid, np.float32, range, ...), by identity: the same object always
# has the same name, and most kernels reach the same few. The object is held, so its id is
# not reused. Only when encoding it noted nothing (no opaque reason, cacheability kept).
_NAMED: dict = {}
_BY_NAME = frozenset({"function", "module", "builtin", "class"})


def _copied(options: dict) -> dict:
    """A copy of a target options dict with its list, set and dict values copied too, so that
    comparing it with the live dict (``==``) sees a value changed in place."""
    return {k: v.copy() if type(v) in _MUTABLE else v for k, v in options.items()}


_MUTABLE = (list, set, dict)


def _dtype_payload(dtype) -> list:
    # descr spells out record fields, offsets and sub-arrays; str gives byte order and kind.
    return [dtype.str, repr(dtype.descr), dtype.itemsize, bool(dtype.isalignedstruct)]


def _defaults(fn):
    code = fn.__code__
    names = code.co_varnames[: code.co_argcount]
    defaults = fn.__defaults__ or ()
    out = list(zip(names[len(names) - len(defaults):], defaults))
    out.extend(sorted((fn.__kwdefaults__ or {}).items()))
    return out


def _lookup_global(fn, name):
    g = fn.__globals__
    if name in g:
        return True, g[name]
    builtins_ns = g.get("__builtins__", __builtins__)
    if isinstance(builtins_ns, types.ModuleType):
        builtins_ns = builtins_ns.__dict__
    if name in builtins_ns:
        return True, builtins_ns[name]
    return False, None


# Readers of the checks (see _Cached): each gives the current value of one input.

def _cell_value(cell):
    return cell.cell_contents


def _weak_attr(ref, attr):
    # The cache maps fn -> checks weakly; a check holding fn itself would keep it alive
    # forever (closures made in a loop), so it reads fn through a weak reference (a dead
    # one raises AttributeError on None: the result is recomputed).
    return getattr(ref(), attr)


def _read_global(namespace, name):
    if name in namespace:
        return namespace[name]
    builtins_ns = namespace.get("__builtins__", __builtins__)
    if isinstance(builtins_ns, types.ModuleType):
        builtins_ns = builtins_ns.__dict__
    return builtins_ns[name]


def _target_options(ref):
    return getattr(ref(), "targetoptions", None) or {}


def _weak_fixed_signatures(ref):
    return _fixed_signatures(ref())


def _weak(obj):
    """A weak reference to ``obj``, or (not weak-referenceable) a callable returning it."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def _fixed_signatures(disp) -> list | None:
    from . import _compat

    return _compat.fixed_signatures(disp)


def _overload_implementations(fn) -> list:
    """(implementation, jit options) of each numba-cuda ``@overload`` of ``fn``: read from
    numba-cuda's typing registry, an internal, hence through the compatibility module (which
    imports numba-cuda only here, so this module stays importable without it)."""
    from . import _compat

    return _compat.overload_implementations(fn)

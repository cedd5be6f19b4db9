"""Kernel signatures as text that numba-cuda parses back to equal types ("sigspecs").

A sigspec is the string form ``numba.cuda.jit`` accepts for eager compilation, e.g.
``void(float32[::1], Array(float64, 0, 'C'), int64)``. kcache writes them (``KCACHE_RECORD``,
signatures files, entry metadata) and reads them back (``kcache warm``). Three functions:

- :func:`format_signature`: argument types -> sigspec, checked to parse back to *equal* types
  (arrays keep dtype, ndim, layout, readonly and alignment; records their fields, offsets,
  size and alignment); :class:`Unexpressible` (with the reason) for anything else.
- :func:`parse_signature`: sigspec -> argument types. numba-cuda evaluates a signature string
  with Python's ``eval`` in its types namespace (``sigutils._parse_signature_string``), which
  also holds modules and builtins; a sigspec read from a file or a cache entry is therefore
  checked first with :mod:`ast` against a small grammar (numba type names, array slices, calls
  of a few type classes with literal arguments), so nothing but numba types is ever built.
- :func:`from_signature_component`: the inverse of the ``signature`` key component
  (``str`` of the types tuple, ``Frontend.signature_string``, i.e. the types' ``repr``),
  verified by printing the result again; None when it cannot be inverted exactly.

Each takes first the front-end (a ``frontends.base.Frontend``) whose numba types it writes or
reads: its ``types()``, ``signature_namespace()`` and ``normalize_signature``.
"""
from __future__ import annotations

import ast
import io
import keyword
import tokenize


__all__ = ["Unexpressible", "format_signature", "format_or_none", "parse_signature",
           "from_signature_component", "MAX_SIGNATURE_CHARS"]

#: Longest sigspec accepted (characters); record-heavy signatures stay far below this.
MAX_SIGNATURE_CHARS = 16384
_MAX_DEPTH = 24          # nesting of calls/lists/subscripts in one sigspec
_MAX_INT = 1 << 20       # array ndim, tuple counts, record offsets and sizes stay below this
_MAX_STR = 256           # record field names and titles
_MAX_NAME = 64           # a type or keyword-argument name (longer ones are not numba's)
_MAX_NUMBER = 16         # characters of one number (the whole numbers allowed have 7 digits)
#: Kernel parameters the types of one sigspec may flatten to. numba-cuda passes each element
#: of a tuple and each field of an array (5 + 2 x ndim) as a parameter of its own, and CUDA's
#: parameter space is at most 32,764 bytes (each parameter takes at least one), so more can
#: never launch; 80 characters of nested ``UniTuple(..., 1048575)`` flatten to 2**60 (a
#: compile that never ends, from a replayed entry's ``meta.sigspec``).
MAX_PARAMETERS = 1 << 15
#: Type classes a sigspec may call (their constructors only store their arguments).
_CALLABLE_CLASSES = ("Array", "Record", "NestedArray", "UniTuple", "Tuple")
_ACCEPTED = ("accepted: numba type names such as float32 or int64, arrays such as float32[::1] "
             "or float64[:, :], and Array(...), Record(...), NestedArray(...), UniTuple(...), "
             "Tuple(...) with literal arguments")


class Unexpressible(ValueError):
    """Argument types that no sigspec parses back to exactly; ``str()`` says which and why."""


# --- types -> text ----------------------------------------------------------------------------

def _scalar(frontend, t) -> str | None:
    """The namespace name of a number/boolean type that maps back to ``t`` itself."""
    T = frontend.types()
    if isinstance(t, (T.Integer, T.Float, T.Complex, T.Boolean)) and not isinstance(t, T.Literal):
        name = str(t)
        if frontend.signature_namespace().get(name) == t:
            return name
    return None


def format_type(frontend, t) -> str:
    """One numba type (of ``frontend``'s numba: a ``frontends.base.Frontend``) as sigspec
    text. Raises :class:`Unexpressible` for a type outside the grammar (see module
    docstring); the caller checks the round trip."""
    T = frontend.types()
    name = _scalar(frontend, t)
    if name is not None:
        return name
    kind = type(t)
    if kind is T.Array:
        dtype = format_type(frontend, t.dtype)
        slices = t.ndim >= 2 or (t.ndim == 1 and t.layout != "F")  # [::1] is C when 1d
        if slices and t.mutable and t.aligned and _scalar(frontend, t.dtype) is not None:
            dims = [":"] * t.ndim
            if t.layout == "C":
                dims[-1] = "::1"
            elif t.layout == "F":
                dims[0] = "::1"
            return f"{dtype}[{', '.join(dims)}]"
        extra = ("" if t.mutable else ", readonly=True") + ("" if t.aligned else ", aligned=False")
        return f"Array({dtype}, {t.ndim}, {t.layout!r}{extra})"
    if kind is T.Record:
        fields = ", ".join(_field(frontend, n, f) for n, f in t.fields.items())
        return f"Record([{fields}], {t.size}, {t.aligned})"
    if kind is T.NestedArray:
        return f"NestedArray({format_type(frontend, t.dtype)}, {tuple(t.shape)!r})"
    if kind is T.UniTuple:
        return f"UniTuple({format_type(frontend, t.dtype)}, {t.count})"
    if kind is T.Tuple:
        inner = ", ".join(format_type(frontend, x) for x in t.types)
        return f"Tuple(({inner}{',' if len(t.types) == 1 else ''}))"
    raise Unexpressible(f"type {t} ({kind.__name__}) has no signature-string form")


def _field(frontend, name: str, field) -> str:
    """A record field as ``('a', {'type': int8, 'offset': 0})`` (alignment and title only
    when set: numba-cuda's ``Record`` defaults them to None)."""
    parts = [f"'type': {format_type(frontend, field.type)}", f"'offset': {field.offset}"]
    parts += [f"{k!r}: {getattr(field, k)!r}" for k in ("alignment", "title")
              if getattr(field, k) is not None]
    return f"({name!r}, {{{', '.join(parts)}}})"


def format_signature(frontend, argtypes) -> str:
    """``argtypes`` (tuple of ``frontend``'s numba types) -> ``"void(...)"``, guaranteed to
    parse back (:func:`parse_signature`) to an equal tuple. Raises :class:`Unexpressible` naming the
    type that cannot be written, or saying the text does not parse back to the same types."""
    argtypes = tuple(argtypes)
    text = f"void({', '.join(format_type(frontend, t) for t in argtypes)})"
    shown = frontend.signature_display
    try:
        back = parse_signature(frontend, text)
    except ValueError as exc:
        raise Unexpressible(f"{shown(argtypes)}: {exc}") from None
    if back != argtypes:
        raise Unexpressible(f"{shown(argtypes)} does not parse back to the same types "
                            f"(got {shown(back)})")
    return text


def format_or_none(frontend, argtypes) -> str | None:
    """:func:`format_signature`, or None when the types cannot be written (never raises)."""
    try:
        return format_signature(frontend, argtypes)
    except Exception:  # Unexpressible, or a type whose attributes are not what we expect
        return None


# --- text -> types ----------------------------------------------------------------------------

def parse_signature(frontend, text) -> tuple:
    """A kernel sigspec (``"void(float32[::1], int64)"``, also ``"(float32[::1],)"``) -> tuple
    of ``frontend``'s numba types, as ``numba.cuda.jit`` reads it
    (``sigutils.normalize_signature``), after checking the text against the sigspec grammar
    so that evaluating it can only build numba types. Raises ValueError with one line naming
    what is wrong (syntax, a name or construct that is not allowed, a non-void return type,
    numba's own complaint)."""
    if not isinstance(text, str):
        raise ValueError(f"a signature must be text, not {type(text).__name__}")
    if len(text) > MAX_SIGNATURE_CHARS:
        raise ValueError(f"signature longer than {MAX_SIGNATURE_CHARS} characters")
    _prescan(text.strip())
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not a signature: {exc.msg}") from None
    _check(tree.body, frontend.signature_namespace(), 0, frontend.types())
    try:
        argtypes = frontend.normalize_signature(text.strip())
    except Exception as exc:  # numba raises TypeError/ValueError/KeyError from the types it builds
        said = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc  # no repr quotes
        raise ValueError(f"not a kernel signature: {' '.join(str(said).split())[:200]} "
                         "(e.g. void(float32[::1], int32); arrays: float32[:], "
                         "float32[::1], float32[:, ::1])") from None
    count = sum(_parameters(frontend.types(), t) for t in argtypes)
    if count > MAX_PARAMETERS:
        shown = f"{count}" if count < 10**12 else f"about 10**{len(str(count)) - 1}"
        raise ValueError(f"not a kernel signature: its types flatten to {shown} kernel "
                         f"parameters, more than the {MAX_PARAMETERS} a launch can pass "
                         "(tuple elements and array fields count one each)")
    return argtypes


def _parameters(T, t) -> int:
    """Kernel parameters numba-cuda flattens ``t`` into (a lower bound; an int, however
    large: the grammar bounds the nesting)."""
    if isinstance(t, T.UniTuple):
        return t.count * _parameters(T, t.dtype)
    if isinstance(t, T.BaseTuple):
        return sum(_parameters(T, x) for x in t.types)
    if isinstance(t, T.Array):  # meminfo, parent, nitems, itemsize, data, shape, strides
        return 5 + 2 * t.ndim
    return 1


_OPENERS, _CLOSERS = frozenset("([{"), frozenset(")]}")
_PUNCTUATION = frozenset(",:=")
_TERMS = (tokenize.NAME, tokenize.NUMBER, tokenize.STRING)
#: Bracket and trailer nesting the token scan lets through: above what :func:`_check`
#: accepts (a bracket and its AST node are not one level each), far below what makes
#: ``ast.parse`` recurse too deep.
_PRESCAN_DEPTH = 2 * _MAX_DEPTH
_HARMLESS = (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER)


def _prescan(text: str) -> None:
    """Raise ValueError unless ``text``'s tokens can only make an expression of bounded
    depth, before ``ast.parse`` sees it: CPython's parser recurses once per level (``-`` x
    16,000, ``not `` x 4,000, ``[:]`` x 5,000 raise MemoryError or RecursionError there).
    Reads tokens with :mod:`tokenize` (a loop, no recursion). Refused: operators other than
    brackets, ``,``, ``:``, ``=``, ``.`` and star-arguments (the grammar has none); Python
    keywords but True/False/None; two terms in a row; f-strings; over-long names and
    numbers; brackets, chained calls, subscripts and attributes more than
    ``_PRESCAN_DEPTH`` deep. What passes is then checked node by node (:func:`_check`)."""
    stack: list = []   # per open bracket: its cost (1 + the trailers before it)
    depth = chain = 0  # the sum of ``stack``; trailers applied to the current term
    prev = None        # "term", "close", "dot", "star" or None (start, opener, punctuation)
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            kind, word = tok.type, tok.string
            if kind in _HARMLESS:
                continue
            if kind in _TERMS:
                _check_term(kind, word, prev)
                chain, prev = chain if prev == "dot" else 0, "term"
            elif kind in (tokenize.INDENT, tokenize.DEDENT):
                raise ValueError("not a signature: more than one line")
            elif kind != tokenize.OP:
                raise ValueError(f"{word[:20]!r} is not allowed ({_ACCEPTED})")
            elif word in _OPENERS:
                cost = chain + 1 if prev in ("term", "close") else 1
                stack.append(cost)
                depth, chain, prev = depth + cost, 0, None
            elif word in _CLOSERS:
                cost = stack.pop() if stack else 0  # unbalanced: ast.parse says so
                depth, chain, prev = depth - cost, cost, "close"
            elif word == "." and prev in ("term", "close"):
                chain, prev = chain + 1, "dot"
            elif word in ("*", "**") and prev is None:
                prev = "star"
            elif word in _PUNCTUATION:
                chain, prev = 0, None
            else:
                raise ValueError(f"{word[:20]!r} is not allowed ({_ACCEPTED})")
            if depth + chain > _PRESCAN_DEPTH:
                raise ValueError(f"signature nested deeper than {_MAX_DEPTH} levels")
    except tokenize.TokenError:  # at the end: a bracket or a string left open
        raise ValueError("not a signature: a bracket or a string is not closed") from None
    except SyntaxError as exc:  # a bad indentation: what follows was not scanned
        raise ValueError(f"not a signature: {exc.msg}") from None


def _check_term(kind: int, word: str, prev) -> None:
    """One name, number or string token of :func:`_prescan`; ValueError if refused."""
    if kind == tokenize.NAME and keyword.iskeyword(word) and word not in ("True", "False",
                                                                          "None"):
        raise ValueError(f"{word!r} is not allowed ({_ACCEPTED})")
    if prev in ("term", "close"):
        raise ValueError(f"{word[:20]!r} follows another term without a comma ({_ACCEPTED})")
    if kind == tokenize.NAME:
        if len(word) > _MAX_NAME:
            raise ValueError(f"name {word[:20]}... longer than {_MAX_NAME} characters is "
                             f"not a numba type name ({_ACCEPTED})")
    elif kind == tokenize.NUMBER and len(word) > _MAX_NUMBER:
        raise ValueError(f"number {word[:20]}... is not allowed (whole numbers "
                         f"0..{_MAX_INT - 1})")
    elif kind == tokenize.STRING and "f" in word[:len(word) - len(word.lstrip("rRbBuUfF"))].lower():
        raise ValueError(f"f-strings are not allowed ({_ACCEPTED})")


def _check(node, ns: dict, depth: int, T) -> None:
    """Raise ValueError unless ``node`` is in the sigspec grammar (``T``: numba's types)."""
    if depth > _MAX_DEPTH:
        raise ValueError(f"signature nested deeper than {_MAX_DEPTH} levels")
    down = depth + 1
    if isinstance(node, ast.Name):
        if node.id.startswith("_") or not isinstance(ns.get(node.id), T.Type):
            raise ValueError(f"{node.id!r} is not a numba type name ({_ACCEPTED})")
    elif isinstance(node, ast.Call):
        func = node.func
        if not isinstance(func, ast.Name) or not (
                func.id in _CALLABLE_CLASSES and isinstance(ns.get(func.id), type)
                or isinstance(ns.get(func.id), T.Type) and not func.id.startswith("_")):
            raise ValueError(f"call of {ast.unparse(func)[:60]!r} is not allowed ({_ACCEPTED})")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise ValueError(f"*-arguments are not allowed ({_ACCEPTED})")
            _check(arg, ns, down, T)
        for kw in node.keywords:
            if kw.arg is None or kw.arg.startswith("_"):
                raise ValueError(f"**-arguments are not allowed ({_ACCEPTED})")
            _check(kw.value, ns, down, T)
    elif isinstance(node, ast.Subscript):
        if not isinstance(node.value, (ast.Name, ast.Call, ast.Subscript)):
            # e.g. 1[::1]: numba's eval would compile it, and Python's compiler print a
            # SyntaxWarning line of its own ("'int' object is not subscriptable")
            raise ValueError(f"{ast.unparse(node.value)[:40]} is not a type: array dimensions "
                             f"follow a numba type, e.g. float32[::1] ({_ACCEPTED})")
        _check(node.value, ns, down, T)
        dims = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for dim in dims:
            if not isinstance(dim, ast.Slice):
                raise ValueError(f"array dimensions are written ':' or '::1' ({_ACCEPTED})")
            for part in (dim.lower, dim.upper, dim.step):
                if part is not None:
                    _check(part, ns, down, T)
    elif isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or value is None:
            return
        if isinstance(value, int) and 0 <= value < _MAX_INT:
            return
        if isinstance(value, str) and len(value) <= _MAX_STR:
            return
        raise ValueError(f"constant {ast.unparse(node)[:40]} is not allowed (whole numbers "
                         f"0..{_MAX_INT - 1}, short strings, True/False/None)")
    elif isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            _check(elt, ns, down, T)
    elif isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                raise ValueError(f"dictionary keys must be strings ({_ACCEPTED})")
            _check(value, ns, down, T)
    else:
        raise ValueError(f"{type(node).__name__} expressions are not allowed ({_ACCEPTED})")


# --- the ``signature`` key component -> types -------------------------------------------------

def from_signature_component(frontend, text) -> tuple | None:
    """Argument types (``frontend``'s) from an entry's ``components["signature"]``: ``str`` of
    the types tuple (``Frontend.signature_string``), which numba writes with each type's
    ``repr``, e.g. ``"(Array(float32, 1, 'C', False, aligned=True), int64)"``. That text is
    read with :func:`parse_signature` (the same grammar check, nothing else is evaluated) and
    accepted only if the types print back to ``text`` exactly. None when it cannot be inverted
    exactly (a type whose repr is not a constructor call, e.g. ``Tuple``). Never raises."""
    if not isinstance(text, str):
        return None
    try:
        argtypes = parse_signature(frontend, text)
        return argtypes if frontend.signature_string(argtypes) == text else None
    except Exception:  # ValueError from the grammar, or a type that cannot be printed
        return None

"""The ``extensions`` key component: user extension registrations the CUDA compiler consults.

numba-cuda types and lowers a kernel with what its registries hold: ``@overload`` of operators,
builtins and numpy/numba functions, ``overload_method``/``overload_attribute``, typing templates
and ``type_callable``, ``lower_builtin``/``lower_getattr``/``lower_cast``/..., ``typeof_impl``
functions, data models and IR rewrite passes. A kernel reaches them through types and
operators, not through a global its bytecode names, so its fingerprint cannot see them.

The rule is coarse (docs/keys.md, "Extensions"): every *user* registration (one holding code of
a module outside the library packages, as the fingerprint tells them) is in every kernel's key,
grouped by that module: ``{"app.ext": digest, ...}``. Each registration counts by what it is
registered for (``overload _operator.add``, ``overload_method app.PointType.norm``, ``lower
_operator.add(app.PointType, app.PointType)``, ...) plus the content digest of its
implementation (``fingerprint.content_digest``: editing its body, or a function it calls,
changes the key). Left out: library registrations (their code is in the toolchain versions),
``@overload``s of a user function or user intrinsics (the fingerprint of a kernel that reaches
the function carries them already: ``fingerprint._plain_function_digest``), and lowerings
numba-cuda registers itself while typing (``extension_records``). With no user registration
there is no component at all, so keys are those of kcache before this component existed.

Cost: the registries are read incrementally (their lists only grow), once when a module was
imported since the last look and once when a public registry grew; a key otherwise costs a
``len`` per public registry list.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Mapping

from kcache.keys import canonical_map

from .fingerprint import (Uncacheable, content_digest, describe, digest_of, is_library_class,
                          is_library_module, named_by_its_library, named_by_library,
                          value_digest)
from .process import STATE

__all__ = ["extensions_component"]

# Library wrappers looked into for user code: closure cells of functions made at run time
# (``lower_getattr``'s wrapper -> the user's function: 1; ``type_callable``'s template -> its
# ``generic`` method -> the user's typing function: 2), members of classes made at run time
# only when they are the registration itself (depth 0).
_MAX_DEPTH = 2
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement or type()


class _State:
    """What this process has read of one front-end's registries (one instance per
    ``Frontend.registries()``, in ``process.STATE.extensions.states``)."""

    def __init__(self):
        self.modules = -1  # len(sys.modules) when the registries were last resolved
        self.hot_size = -1  # total length of the public registries then
        self.hot: list = []  # the public registries' containers (lists, dicts)
        self.all: list = []  # every registry container, as last enumerated
        self.all_size = -1  # their total length then
        self.present = None  # which registry modules were imported then (bools)
        self.read: dict = {}  # id(container) -> (container, items read so far)
        self.found: set = set()  # (module, label, digest) of each user registration
        self.opaque: set = set()
        self.failure: str | None = None  # a registration that could not be read
        self.component = None  # CanonicalMap, or None when there is no user registration
        self.opaque_list: list = []
        self.registry_modules = None  # registries.extension_registry_modules(), once


def extensions_component(registries):
    """``(component, opaque reasons)`` for this process of the extension registries
    ``registries`` reads (``Frontend.registries()``): ``component`` is None when no user
    registration exists (the key then has no ``extensions`` component), else a read-only
    ``{module: digest}``; ``opaque`` lists the registrations hashed by identity. Raises
    :class:`Uncacheable` when a user registration could not be read. O(1) per call once the
    registries were read: ``len(sys.modules)`` and the lengths of the public registries."""
    memo = STATE.extensions
    state = memo.states.get(registries)
    if state is None:
        state = memo.states.setdefault(registries, _State())
    if len(sys.modules) != state.modules or _hot_size(state.hot) != state.hot_size:
        with memo.lock:  # keys of other threads wait: a half-read registry is no answer
            if len(sys.modules) != state.modules or _hot_size(state.hot) != state.hot_size:
                _refresh(state, registries)
    if state.failure is not None:
        raise Uncacheable(state.failure)
    return state.component, state.opaque_list


def _hot_size(containers) -> int:
    return sum(map(len, containers))


def _refresh(state, registries) -> None:
    if not registries.loaded():
        state.modules, state.hot_size = len(sys.modules), 0  # nothing can be registered yet
        return

    # Most imports register nothing into a registry (a program's own modules, numpy's): when
    # no registry module appeared and no container grew (they only grow), nothing is new,
    # and the ~200 containers are not enumerated again (which cost the first kernel call
    # 0.2-0.4 ms whenever anything was imported after the first definition).
    if state.registry_modules is None:
        state.registry_modules = registries.extension_registry_modules()
    present = tuple(name in sys.modules for name in state.registry_modules)
    if present == state.present and _hot_size(state.all) == state.all_size:
        state.modules = len(sys.modules)
        return
    found = registries.extension_registries()
    before = len(state.found), len(state.opaque)
    for kind, _hot, container in found:
        _read_new(state, kind, container, registries)
    state.hot = [container for _kind, hot, container in found if hot]
    state.hot_size = _hot_size(state.hot)
    state.all = [container for _kind, _hot, container in found]
    state.all_size = _hot_size(state.all)
    state.present = present
    state.modules = len(sys.modules)
    if (len(state.found), len(state.opaque)) != before:
        _build(state)


def _read_new(state, kind, container, registries) -> None:
    """Read the items ``container`` got since the last look (registries only grow)."""
    seen = state.read.get(id(container))
    done = seen[1] if seen is not None and seen[0] is container else 0
    size = len(container)
    if size == done:
        return
    items = list(container.items() if isinstance(container, Mapping) else container)[done:size]
    state.read[id(container)] = (container, size)
    if kind == "rewrite-kinds":
        return  # the lists themselves are containers of their own
    try:
        parts = registries.extension_parts(kind, items)
        suspects = _user_objects(parts)
        if not suspects:
            return  # the usual case: only library registrations, decided in bulk
        for item, item_parts in zip(items, parts):
            modules = [suspects[id(p)] for p in item_parts if id(p) in suspects]
            if modules:
                for record in registries.extension_records(kind, item):
                    if not _libraries_own(kind, record):
                        _add(state, modules[0], record, registries)
    except Exception as exc:  # a layout this numba-cuda version should not have
        state.failure = (f"a {kind} registration could not be read "
                         f"({type(exc).__name__}: {exc})")


#: Registrations that decide types: typeof functions and typing templates (``@overload``'s too).
_TYPING_KINDS = frozenset(("typeof", "typing-functions", "typing-attributes", "typing-globals"))


def _libraries_own(kind, record) -> bool:
    """A library's own typing of another package's class or function: every object whose
    code decides it is a module-level object of a library module. numba-cuda-mlir's typing
    context, when it refreshes for a compile, types ``cupy.ndarray`` and ``torch.Tensor``
    (``type_defs.cupy_types``, ``torch_types``) where those packages are installed: counting
    them made a key depend on whether the process had compiled before (seen on the H200).
    Their code is in the toolchain component; the types they give are in the signature."""
    impls = record[2]
    return kind in _TYPING_KINDS and bool(impls) and all(named_by_its_library(i) for i in impls)


def _add(state, module, record, registries) -> None:
    what, keys, impls, options, covered_by = record
    if covered_by is not None and _walked_when_reached(covered_by):
        return  # in the fingerprint of every kernel that reaches covered_by
    label = " ".join([what, ", ".join(describe(k) for k in keys)])
    try:
        parts = [content_digest(impl, f"extension {label}", registries=registries)
                 for impl in impls]
        opts = (value_digest(options, f"extension {label} options", registries=registries)
                if options else None)
    except Uncacheable as exc:
        state.failure = f"extension {label}: {exc}"
        return
    except Exception as exc:  # never guess: a registration not read could make a key stale
        state.failure = f"extension {label} could not be read ({type(exc).__name__}: {exc})"
        return
    digest = digest_of([label, [d for d, _ in parts], opts])
    state.found.add((module, label, digest))
    for _digest, reasons in parts:
        state.opaque.update(f"extension {label}: {reason}" for reason in reasons)


def _build(state) -> None:
    groups: dict = {}
    for module, label, digest in state.found:
        groups.setdefault(module, []).append([label, digest])
    # Sorted, duplicates once: a module imported twice registers the same content twice.
    component = {module: digest_of(sorted(entries)) for module, entries in groups.items()}
    state.component = canonical_map(component, "extensions") if component else None
    state.opaque_list = sorted(state.opaque)


def _walked_when_reached(obj) -> bool:
    """The fingerprint walks ``obj`` (with the @overloads registered for it) when a kernel
    reaches it: a plain function or an intrinsic of a user module."""
    if isinstance(obj, types.FunctionType) or isinstance(getattr(obj, "_defn", None),
                                                          types.FunctionType):
        return not named_by_library(obj)
    return False


def _user_objects(parts) -> dict:
    """``{id(object): module}`` of the objects in ``parts`` (a list of tuples of objects) that
    hold user code. A registration of a library holds library objects only; a library's
    function made at run time (``<locals>``: ``lower_getattr``'s wrapper, numba's generated
    closures) and a class made by ``type()`` (``type_callable``'s template) are looked into,
    ``_MAX_DEPTH`` levels deep (closure cells, defaults, a class's methods). Level by level,
    each object once, the common library cases inline: the first key of a process reads
    about two thousand registrations, which must cost about a millisecond, not ten."""
    memo = STATE.extensions
    library_types, metaclasses = memo.library_types, memo.metaclasses
    library_classes, libraries = memo.library_classes, memo.libraries
    roots = level = {id(o): o for p in parts for o in p}
    holders: dict = {}  # id(object) -> ids of the objects one level up that hold it
    found: dict = {}
    for depth in range(_MAX_DEPTH + 1):
        deeper: dict = {}
        for key, obj in level.items():
            kind = type(obj)
            if kind in library_types or kind in metaclasses and obj in library_classes:
                continue  # None, str, numba types, ufuncs, library classes, ...
            if kind is _FUNCTION:
                # exec(): no __module__; code may also have set it to anything
                module = _name(obj.__module__) or _name(obj.__globals__.get("__name__"))
                library = libraries.get(module)
                if library is None:
                    library = libraries[module] = is_library_module(module)
                if not library:
                    found[key] = module or "?"
                    continue
                if "<locals>" not in obj.__qualname__:
                    continue  # a library's module-level function
                held = _cells(obj) + (obj.__defaults__ or ())
            else:
                module, held = _judge(obj, kind, memo)
                if module is not None:
                    found[key] = module
                    continue
            if depth < _MAX_DEPTH:
                for inner in held:
                    deeper[id(inner)] = inner
                    holders.setdefault(id(inner), []).append(key)
        level = deeper
    return _at_roots(found, holders, roots)


def _judge(obj, kind, memo):
    """(module of user code, None) or (None, the objects to look into) for an object that is
    not a function (``memo``: ``process.STATE.extensions``, what is known of the types met)."""
    if kind is staticmethod or kind is classmethod:
        return None, (obj.__func__,)
    if kind is tuple:
        return None, obj
    if isinstance(obj, type):
        memo.metaclasses.add(kind)
        if not obj.__flags__ & _HEAPTYPE or _carries_module(obj):
            # A C extension's class: numba's _box.Box; Cython's function type, a heap type
            # whose __module__ is the slot its functions keep theirs in.
            memo.library_classes.add(obj)
            return None, ()
        module = _name(obj.__module__) or "?"  # a class body may set __module__ to anything
        if not _library(module, memo):
            return module, ()
        if is_library_class(obj):
            memo.library_classes.add(obj)
            return None, ()
        # Made at run time by a library (type_callable's template): its methods and classes.
        return None, tuple(v for v in vars(obj).values() if type(v) in _CODE or
                           isinstance(v, type))
    wraps = memo.wrapping.get(kind)
    if wraps is None:  # the first object of its type: a dispatcher or an intrinsic?
        wraps = memo.wrapping[kind] = _inner(obj) is not None
        if _library(_name(kind.__module__), memo):
            if not wraps:
                memo.library_types.add(kind)
        elif _carries_module(kind):
            memo.own_module.add(kind)
    inner = _inner(obj) if wraps else None
    if inner is not None:
        return None, (inner,)
    # Objects of a non-library type that keep their own module (Cython's functions: numpy's
    # Generator methods, which numba's CPU target registers when it types a Generator) are
    # judged by it: their type's module is Cython's shared "_cython_3_x" module, or on Python
    # 3.10 the slot's descriptor itself. Any other module that is not a str counts as a user
    # module of no name ("?"), as a function made by exec() does.
    module = _name(getattr(obj, "__module__", None) if kind in memo.own_module
                   else kind.__module__)
    return (None if _library(module, memo) else module or "?"), ()


def _carries_module(cls: type) -> bool:
    """Whether ``cls`` is a C type whose objects keep their own ``__module__`` in a slot
    (a descriptor in the class's namespace: a class statement cannot make one)."""
    return isinstance(vars(cls).get("__module__"), _SLOT_DESCRIPTORS)


def _name(module):
    """``module`` when it is a module name (a non-empty str), else None."""
    return module if isinstance(module, str) and module else None


def _at_roots(found: dict, holders: dict, roots: dict) -> dict:
    """The user modules found at any level, given to the objects of ``roots`` holding them."""
    out: dict = {}
    for key, module in found.items():
        todo, seen = [key], set()
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            if current in roots:
                out.setdefault(current, module)
            todo.extend(holders.get(current, ()))
    return out


def _inner(obj):
    """The Python function of a dispatcher (``py_func``) or intrinsic (``_defn``), else None."""
    inner = getattr(obj, "py_func", None) or getattr(obj, "_defn", None)
    return inner if type(inner) is _FUNCTION else None


def _library(module, memo) -> bool:
    known = memo.libraries.get(module)
    if known is None:
        known = memo.libraries[module] = is_library_module(module)
    return known


def _cells(fn) -> tuple:
    out = []
    for cell in fn.__closure__ or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    return tuple(out)


_FUNCTION = types.FunctionType
_CODE = frozenset({types.FunctionType, staticmethod, classmethod})
_SLOT_DESCRIPTORS = (types.MemberDescriptorType, types.GetSetDescriptorType)

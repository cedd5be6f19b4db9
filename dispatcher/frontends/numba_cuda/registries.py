"""numba-cuda's extension registries and ``@overload`` implementations, read for the source
fingerprint (dispatcher/fingerprint.py, dispatcher/extensions.py)."""
from __future__ import annotations

import sys


from .internals import CUDADispatcher

# --- @overload implementations (for the source fingerprint) ---------------------------------
# numba-cuda keeps ``@overload`` templates in the typing registry behind the public
# ``numba.cuda.extending.infer`` (a bound method of that registry): ``registry.globals`` is a
# list of (function, typing Function type) pairs, each type's ``templates`` carry
# ``_overload_func`` (the Python implementation) and ``_jit_options``.
_overload_index: dict = {"n": -1, "by_id": {}}


def loaded() -> bool:
    """True once numba-cuda's typing templates are imported: before, no extension can be
    registered (``extensions.extensions_component`` reads nothing)."""
    return "numba.cuda.typing.templates" in sys.modules


def fixed_signatures(disp) -> list | None:
    """The signatures a CPU dispatcher (numba's ``@jit``) is limited to when it was given explicit ones
    (numba's ``Dispatcher._can_compile`` is False: typing picks among them, converting the
    arguments), as strings in the order given; None when it compiles on demand."""
    if getattr(disp, "_can_compile", True) or isinstance(disp, CUDADispatcher):
        # A CUDA device function's eager compile may be deferred (kcache warm's offline
        # target), so whether it is limited yet depends on the process: never keyed on it.
        return None
    return [str(sig) for sig in getattr(disp, "nopython_signatures", ())]


def overload_implementations(fn) -> list:
    """[(implementation function, jit options dict or None)] registered with numba-cuda's
    ``@overload`` for ``fn``; [] when none (or the registry is not where 0.30 keeps it).
    Indexed once per registry size, so a call costs a dict look-up."""
    registry = _typing_registry()
    if registry is None:
        return []
    entries = registry.globals
    if len(entries) != _overload_index["n"]:
        by_id: dict = {}
        for val, typ in list(entries):
            for template in getattr(typ, "templates", ()) or ():
                if hasattr(template, "_overload_func"):
                    by_id.setdefault(id(val), []).append((val, template))
        _overload_index.update(n=len(entries), by_id=by_id)
    return [(getattr(t, "_overload_func", None), _template_options(t))
            for val, t in _overload_index["by_id"].get(id(fn), ()) if val is fn]


def _template_options(template):
    """An ``@overload`` template's jit options plus the ``overload()`` arguments that change
    typing or the code (``make_overload_template``'s ``_strict``, ``_inline``,
    ``prefer_literal``), each only when it differs from ``overload()``'s default so that keys
    of overloads declared with the defaults stay as they were."""
    options = getattr(template, "_jit_options", None)
    extra = {}
    if getattr(template, "_strict", True) is not True:
        extra["__strict__"] = bool(template._strict)
    if getattr(template, "prefer_literal", False):
        extra["__prefer_literal__"] = True
    inline = getattr(getattr(template, "_inline", None), "_inline", "never")
    if inline != "never":
        extra["__inline__"] = inline if isinstance(inline, str) else \
            f"{getattr(inline, '__module__', '?')}:{getattr(inline, '__qualname__', '?')}"
    if not extra:
        return options
    return {**(options or {}), **extra}


def _typing_registry():
    ext = sys.modules.get("numba.cuda.extending")
    if ext is None:
        return None  # nothing can have been registered through it yet
    registry = getattr(getattr(ext, "infer", None), "__self__", None)
    return registry if isinstance(getattr(registry, "globals", None), list) else None


# === extension registrations (dispatcher/extensions.py) =======================================
# The registries numba-cuda 0.30's CUDA typing and target contexts install
# (CUDATypingContext.load_additional_registries + BaseContext._load_builtins; CUDATargetContext.
# load_additional_registries + BaseContext.refresh), the typeof functions (numba-cuda's
# typeof_impl, which falls back to numba's), the data model managers the target chains
# (cuda_data_manager.chain(default_manager)) and the rewrite registry the CUDA pipeline applies
# (untyped_passes: rewrite_registry.apply). tests/test_extension_keys.py checks these lists
# against the registries live contexts hold, so an upgrade cannot add one silently.
# "hot": a public extension API registers there (numba.cuda.extending, numba.core.extending,
# numba.cuda.cudadecl/cudaimpl): looked at on every key. The others are looked at whenever a
# module was imported since (registering into a library's own registry at run time, outside
# an import, is not seen: docs/keys.md, Limits).

_TYPING_REGISTRIES = (
    ("numba.cuda.typing.templates", "builtin_registry", True),
    ("numba.cuda.cudadecl", "registry", True),
    ("numba.core.typing.templates", "builtin_registry", True),
    ("numba.cuda.typing.cffi_utils", "registry", False),
    ("numba.cuda.cudamath", "registry", False),
    ("numba.cuda.typing.cmathdecl", "registry", False),
    ("numba.cuda.libdevicedecl", "registry", False),
    ("numba.cuda.typing.npydecl", "registry", False),
    ("numba.cuda.typing.enumdecl", "registry", False),
    ("numba.cuda.vector_types", "typing_registry", False),
    ("numba.cuda._internal.cuda_fp16", "typing_registry", False),
    ("numba.cuda._internal.cuda_bf16", "typing_registry", False),
    ("numba.cuda._internal.cuda_fp8", "typing_registry", False),
    ("numba.cuda.typing.builtins", "registry", False),
    ("numba.cuda.typing.collections", "registry", False),
    ("numba.cuda.typing.arraydecl", "registry", False),
    ("numba.cuda.typing.npdatetime", "registry", False),
)
_LOWERING_REGISTRIES = (
    ("numba.cuda.core.imputils", "builtin_registry", True),
    ("numba.cuda.cudaimpl", "registry", True),
    ("numba.core.imputils", "builtin_registry", True),
    ("numba.cuda.misc.cffiimpl", "registry", False),
    ("numba.cuda.printimpl", "registry", False),
    ("numba.cuda.libdeviceimpl", "registry", False),
    ("numba.cuda.cpython.cmathimpl", "registry", False),
    ("numba.cuda.cpython.mathimpl", "registry", False),
    ("numba.cuda.cpython.numbers", "registry", False),
    ("numba.cuda.core.optional", "registry", False),
    ("numba.cuda.mathimpl", "registry", False),
    ("numba.cuda.vector_types", "impl_registry", False),
    ("numba.cuda._internal.cuda_fp16", "target_registry", False),
    ("numba.cuda._internal.cuda_bf16", "target_registry", False),
    ("numba.cuda._internal.cuda_fp8", "target_registry", False),
    ("numba.cuda.cpython.slicing", "registry", False),
    ("numba.cuda.cpython.iterators", "registry", False),
    ("numba.cuda.cpython.listobj", "registry", False),
    ("numba.cuda.cpython.unicode", "registry", False),
    ("numba.cuda.cpython.charseq", "registry", False),
    ("numba.cuda.cpython.tupleobj", "registry", False),
    ("numba.cuda.cpython.rangeobj", "registry", False),
    ("numba.cuda.cpython.enumimpl", "registry", False),
    ("numba.cuda.cpython.builtins", "registry", False),
    ("numba.cuda.np.polynomial.polynomial_core", "registry", False),
    ("numba.cuda.np.npdatetime", "registry", False),
    ("numba.cuda.np.arrayobj", "registry", False),
    ("numba.cuda.np.arraymath", "registry", False),
)
_TYPEOF = (("numba.cuda.typing.typeof", "typeof_impl"), ("numba.core.typing.typeof", "typeof_impl"))
_MODEL_MANAGERS = (("numba.cuda.models", "cuda_data_manager"),
                   ("numba.cuda.datamodel.registry", "default_manager"),
                   ("numba.cuda.datamodel.cuda_registry", "default_manager"),
                   ("numba.core.datamodel.registry", "default_manager"))
_REWRITES = ("numba.cuda.core.rewrites.registry", "rewrite_registry")
_TYPING_LISTS = ("functions", "attributes", "globals")
_LOWERING_LISTS = ("functions", "getattrs", "setattrs", "casts", "constants")


def extension_registry_modules() -> tuple:
    """The names of the modules that hold the registries :func:`extension_registries` reads
    (a registry appears when its module is imported)."""
    return tuple(m for m, _a, _h in _TYPING_REGISTRIES) + \
        tuple(m for m, _a, _h in _LOWERING_REGISTRIES) + tuple(m for m, _a in _TYPEOF) + \
        tuple(m for m, _a in _MODEL_MANAGERS) + (_REWRITES[0],)


def extension_registries() -> list:
    """``[(kind, hot, container)]``: every registration container of the registries above whose
    module is imported (a registry of a module not imported holds nothing). ``kind`` names
    what its items are for :func:`extension_records`; containers are lists (append-only) or
    dicts (typeof functions, data models by type class), and the rewrite registry's dict of
    lists by pass kind is given too (a new kind grows it)."""
    out, seen = [], set()

    def add(kind, hot, container):
        if container is not None and id(container) not in seen:
            seen.add(id(container))
            out.append((kind, hot, container))

    for table, lists, prefix in ((_TYPING_REGISTRIES, _TYPING_LISTS, "typing"),
                                 (_LOWERING_REGISTRIES, _LOWERING_LISTS, "lower")):
        for module, attr, hot in table:
            registry = getattr(sys.modules.get(module), attr, None)
            for name in lists:
                add(f"{prefix}-{name}", hot, getattr(registry, name, None))
    for module, attr in _TYPEOF:
        add("typeof", True, getattr(getattr(sys.modules.get(module), attr, None), "registry", None))
    for module, attr in _MODEL_MANAGERS:
        add("model", True, getattr(getattr(sys.modules.get(module), attr, None), "_handlers", None))
    rewrites = getattr(getattr(sys.modules.get(_REWRITES[0]), _REWRITES[1], None), "rewrites", None)
    if isinstance(rewrites, dict):
        add("rewrite-kinds", True, rewrites)
        for kind, classes in list(rewrites.items()):
            add(f"rewrite {kind}", True, classes)
    return out


def known_and_installed_registries():
    """For tests/test_extension_keys.py: ``(ids of the registries of the tables above,
    [(name, registry)] of those numba-cuda's CUDA typing and target contexts hold once
    refreshed)``. Creates the contexts (no device needed)."""
    from numba.cuda.descriptor import cuda_target

    typing, target = cuda_target.typing_context, cuda_target.target_context
    typing.refresh()
    target.refresh()
    known = {id(getattr(sys.modules.get(module), attr, None))
             for module, attr, _hot in _TYPING_REGISTRIES + _LOWERING_REGISTRIES}
    installed = [(f"{type(r).__module__} registry {getattr(r, 'name', '')}", r)
                 for r in list(typing._registries) + list(target._registries)]
    return known, installed


def extension_parts(kind: str, items: list) -> list:
    """For each registration of ``items`` (items of a container of
    :func:`extension_registries`, of ``kind``), the tuple of objects that tell whose it is:
    its implementation, what it is registered for (argument types one by one), and the
    templates of a global's ``types.Function`` (an ``@overload`` template by its function,
    key and attribute). Built in bulk: the first key of a process reads every registration
    numba-cuda made (about two thousand)."""
    if kind == "lower-functions":
        return [(impl, func, *argtys) for impl, func, argtys in items]
    if kind in ("lower-casts", "lower-constants"):
        return [(impl, *sig) for impl, sig in items]
    if kind in ("lower-getattrs", "lower-setattrs"):
        return [(_decorated(impl), attr, *(sig or ())) for impl, attr, sig in items]
    if kind in ("typing-functions", "typing-attributes"):
        return [_template_parts(t) for t in items]
    if kind == "typing-globals":
        return [(val, typ, *[p for t in getattr(typ, "templates", None) or ()
                             for p in _template_parts(t)]) for val, typ in items]
    if kind in ("typeof", "model"):
        return items  # (type class, function or model class) pairs
    return [(item,) for item in items]


def _template_parts(template) -> tuple:
    namespace = getattr(template, "__dict__", {})
    for name in ("_overload_func", "_definition_func"):  # make_overload_*/intrinsic_template
        func = namespace.get(name)
        if func is not None:  # a staticmethod in the namespace
            return (getattr(func, "__func__", func), namespace.get("key"), namespace.get("_attr"))
    return (template,)


def extension_records(kind: str, item) -> list:
    """One registration as a list of records ``(what, keys, impls, options, covered_by)``,
    empty when it is not one the CUDA contexts use or one numba-cuda made itself while
    compiling (it follows from a registration that is in the key already, and would make a
    compiling process's keys differ from a serving one's). A global typed by a
    ``types.Function`` gives one record per template.

    ``what``: "overload", "overload_method", "lower", "typeof", ...; ``keys``: what it is
    registered for (a function, operator, type class, method name, argument types, ...);
    ``impls``: the objects whose code decides it (implementation functions, template, model or
    rewrite classes); ``options``: the ``@overload`` options or None; ``covered_by``: the
    function or intrinsic whose own fingerprint carries this registration when a kernel
    reaches it (:func:`overload_implementations`), else None."""
    if kind in ("typing-functions", "typing-attributes"):
        return _template_records(item, kind == "typing-attributes", None)
    if kind == "typing-globals":
        val, typ = item
        templates = getattr(typ, "templates", None)
        if not templates:
            return [("global", (val, typ), (), None, None)]
        return [r for t in templates for r in _template_records(t, False, val)]
    if kind == "lower-functions":
        impl, func, argtys = item
        if impl is func or _made_by_template(impl):  # _IntrinsicTemplate.generic's lowering
            return []
        return [("lower", (func, *argtys), (impl,), None, None)]
    if kind in ("lower-getattrs", "lower-setattrs"):
        impl, attr, sig = item
        impl = _decorated(impl)
        if _made_by_template(impl):  # _OverloadAttributeTemplate._init_once's getattr_impl
            return []
        what = "lower_getattr" if kind == "lower-getattrs" else "lower_setattr"
        return [(what, (*tuple(sig or ())[:1], attr), (impl,), None, None)]
    if kind in ("lower-casts", "lower-constants"):
        impl, sig = item
        return [("lower_cast" if kind == "lower-casts" else "lower_constant", tuple(sig),
                 (impl,), None, None)]
    if kind in ("typeof", "model"):
        cls, impl = item
        return [(kind, (cls,), (impl,), None, None)]
    if kind.startswith("rewrite "):
        return [(kind, (item,), (item,), None, None)]
    return []


def _template_records(template, attribute: bool, registered_as) -> list:
    """A typing template (registered class, or one of a global's types.Function) as records."""
    metadata = getattr(template, "metadata", None)
    target = metadata.get("target") if hasattr(metadata, "get") else None
    if target not in (None, "cuda", "generic"):  # typing.context install_registry: not for CUDA
        return []
    key = getattr(template, "key", None)
    keys = (registered_as,) if registered_as is not None else (key,)
    overload_func = getattr(template, "_overload_func", None)
    if overload_func is not None:
        names = {c.__name__ for c in type.mro(template)}
        what = ("overload_method" if "_OverloadMethodTemplate" in names else
                "overload_attribute" if "_OverloadAttributeTemplate" in names else "overload")
        if what != "overload":
            keys = (key, getattr(template, "_attr", None))
        # Only numba-cuda's own registry is read by overload_implementations().
        covered = key if what == "overload" and _in_cuda_registry(template) else None
        return [(what, keys, (overload_func,), _template_options(template), covered)]
    definition = getattr(template, "_definition_func", None)
    if definition is not None:  # make_intrinsic_template: reached through the intrinsic
        return [("intrinsic", keys, (definition,), None, key)]
    return [("typing_attribute" if attribute else "typing", keys, (template,), None, None)]


def _in_cuda_registry(template) -> bool:
    registry = _typing_registry()
    return registry is not None and template in registry.functions


def _made_by_template(fn) -> bool:
    """A lowering that a typing template registers while a kernel is typed
    (``_OverloadAttributeTemplate._init_once`` / ``_OverloadMethodTemplate._init_once``)."""
    module = getattr(fn, "__module__", "")
    return (module in ("numba.cuda.typing.templates", "numba.core.typing.templates")
            and "._init_once.<locals>." in (getattr(fn, "__qualname__", "") or ""))


def _decorated(impl):
    """The user's function behind ``imputils._decorate_getattr``/``_decorate_setattr``'s
    wrapper ``res`` (closure cell ``real_impl``)."""
    code = getattr(impl, "__code__", None)
    if code is None or "real_impl" not in code.co_freevars or not impl.__closure__:
        return impl
    try:
        return impl.__closure__[code.co_freevars.index("real_impl")].cell_contents
    except ValueError:
        return impl

"""Reading a numba front-end's extension registries and ``@overload`` implementations, for the
source fingerprint (dispatcher/fingerprint/) and the ``extensions`` key component
(dispatcher/extensions.py): numba-generic, driven by the tables a front-end bridge gives
(:class:`Tables`: which registries of which modules its typing and target contexts install).

A bridge's ``registries`` module (``Frontend.registries()``) makes one :class:`RegistryReader`
and exposes its methods as module functions: ``loaded``, ``extension_registry_modules``,
``extension_registries``, ``extension_parts``, ``extension_records``, ``fixed_signatures``,
``overload_implementations``.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable

_TYPING_LISTS = ("functions", "attributes", "globals")
_LOWERING_LISTS = ("functions", "getattrs", "setattrs", "casts", "constants")


@dataclass(frozen=True)
class Tables:
    """What a front-end's contexts read. ``typing``/``lowering``: ``(module, attribute, hot)``
    of each registry (hot: a public extension API registers there, looked at on every key);
    ``typeof``: ``(module, attribute)`` of typeof functions (``.registry``);
    ``models``: ``(module, attribute)`` of data model managers (``._handlers``); ``rewrites``:
    ``(module, attribute)`` of the rewrite registry; ``loaded_module``: imported once anything
    can be registered; ``template_modules``: where typing templates register lowerings of
    their own while a kernel is typed; ``targets``: the typing templates' ``metadata["target"]``
    values the front-end's typing context installs."""

    typing: tuple
    lowering: tuple
    typeof: tuple
    models: tuple
    rewrites: tuple
    loaded_module: str
    template_modules: tuple
    targets: tuple = (None, "cuda", "generic")


class RegistryReader:
    """The registries of one front-end, read as :class:`Tables` say. ``overload_registries``:
    () -> the typing registries whose ``globals`` hold ``@overload`` templates (those the
    public ``overload`` decorator registers into); ``is_kernel_dispatcher``: obj -> bool
    (the front-end's CUDA dispatchers are never keyed on their fixed signatures)."""

    def __init__(self, tables: Tables, overload_registries: Callable[[], list],
                 is_kernel_dispatcher: Callable[[object], bool]):
        self.tables = tables
        self._overload_registries = overload_registries
        self._is_kernel_dispatcher = is_kernel_dispatcher
        self._index: dict = {"n": None, "by_id": {}}

    # --- @overload implementations (for the source fingerprint) -----------------------------

    def loaded(self) -> bool:
        """True once the front-end's typing templates are imported: before, no extension can
        be registered (``extensions.extensions_component`` reads nothing)."""
        return self.tables.loaded_module in sys.modules

    def fixed_signatures(self, disp) -> list | None:
        """The signatures a CPU dispatcher (numba's ``@jit``) is limited to when it was given
        explicit ones (``_can_compile`` False: typing picks among them), as strings in the
        order given; None when it compiles on demand, and for the front-end's own CUDA
        dispatchers (a device function's eager compile may be deferred by ``kcache warm``)."""
        if getattr(disp, "_can_compile", True) or self._is_kernel_dispatcher(disp):
            return None
        return [str(sig) for sig in getattr(disp, "nopython_signatures", ())]

    def overload_implementations(self, fn) -> list:
        """[(implementation function, jit options dict or None)] registered with the
        front-end's ``@overload`` for ``fn``; [] when none. Indexed once per registry size,
        so a call costs a dict look-up."""
        registries = self._overload_registries()
        sizes = tuple(len(r.globals) for r in registries)
        if sizes != self._index["n"]:
            by_id: dict = {}
            for registry in registries:
                for val, typ in list(registry.globals):
                    for template in getattr(typ, "templates", ()) or ():
                        if hasattr(template, "_overload_func"):
                            by_id.setdefault(id(val), []).append((val, template))
            self._index = {"n": sizes, "by_id": by_id}
        return [(getattr(t, "_overload_func", None), template_options(t))
                for val, t in self._index["by_id"].get(id(fn), ()) if val is fn]

    def _in_overload_registry(self, template) -> bool:
        return any(template in r.functions for r in self._overload_registries())

    # --- extension registrations (dispatcher/extensions.py) ---------------------------------

    def extension_registry_modules(self) -> tuple:
        """The names of the modules that hold the registries :meth:`extension_registries`
        reads (a registry appears when its module is imported)."""
        t = self.tables
        return tuple(m for m, _a, _h in t.typing) + tuple(m for m, _a, _h in t.lowering) + \
            tuple(m for m, _a in t.typeof) + tuple(m for m, _a in t.models) + (t.rewrites[0],)

    def extension_registries(self) -> list:
        """``[(kind, hot, container)]``: every registration container of the tables' registries
        whose module is imported. ``kind`` names what its items are for
        :meth:`extension_records`; containers are lists (append-only) or dicts (typeof
        functions, data models by type class), and the rewrite registry's dict of lists by
        pass kind is given too (a new kind grows it)."""
        out, seen = [], set()

        def add(kind, hot, container):
            if container is not None and id(container) not in seen:
                seen.add(id(container))
                out.append((kind, hot, container))

        t = self.tables
        for table, lists, prefix in ((t.typing, _TYPING_LISTS, "typing"),
                                     (t.lowering, _LOWERING_LISTS, "lower")):
            for module, attr, hot in table:
                registry = getattr(sys.modules.get(module), attr, None)
                for name in lists:
                    add(f"{prefix}-{name}", hot, getattr(registry, name, None))
        for module, attr in t.typeof:
            add("typeof", True, getattr(getattr(sys.modules.get(module), attr, None),
                                        "registry", None))
        for module, attr in t.models:
            add("model", True, getattr(getattr(sys.modules.get(module), attr, None),
                                       "_handlers", None))
        rewrites = getattr(getattr(sys.modules.get(t.rewrites[0]), t.rewrites[1], None),
                           "rewrites", None)
        if isinstance(rewrites, dict):
            add("rewrite-kinds", True, rewrites)
            for kind, classes in list(rewrites.items()):
                add(f"rewrite {kind}", True, classes)
        return out

    def known_registry_ids(self) -> set:
        """ids of the typing and lowering registries of the tables (modules imported)."""
        t = self.tables
        return {id(getattr(sys.modules.get(module), attr, None))
                for module, attr, _hot in t.typing + t.lowering}

    @staticmethod
    def extension_parts(kind: str, items: list) -> list:
        """For each registration of ``items`` (of a container of ``kind``), the tuple of
        objects that tell whose it is: its implementation, what it is registered for
        (argument types one by one), and the templates of a global's ``types.Function``.
        Built in bulk: the first key of a process reads every registration the front-end
        made (about two thousand)."""
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

    def extension_records(self, kind: str, item) -> list:
        """One registration as records ``(what, keys, impls, options, covered_by)``, empty
        when it is not one the front-end's contexts use or one the front-end made itself
        while compiling (it follows from a registration in the key already). ``what``:
        "overload", "overload_method", "lower", "typeof", ...; ``keys``: what it is
        registered for; ``impls``: the objects whose code decides it; ``options``: the
        ``@overload`` options or None; ``covered_by``: the function or intrinsic whose own
        fingerprint carries this registration when a kernel reaches it, else None."""
        if kind in ("typing-functions", "typing-attributes"):
            return self._template_records(item, kind == "typing-attributes", None)
        if kind == "typing-globals":
            val, typ = item
            templates = getattr(typ, "templates", None)
            if not templates:
                return [("global", (val, typ), (), None, None)]
            return [r for t in templates for r in self._template_records(t, False, val)]
        if kind == "lower-functions":
            impl, func, argtys = item
            if impl is func or self._made_by_template(impl):  # an intrinsic's own lowering
                return []
            return [("lower", (func, *argtys), (impl,), None, None)]
        if kind in ("lower-getattrs", "lower-setattrs"):
            impl, attr, sig = item
            impl = _decorated(impl)
            if self._made_by_template(impl):  # _OverloadAttributeTemplate._init_once's
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

    def _template_records(self, template, attribute: bool, registered_as) -> list:
        metadata = getattr(template, "metadata", None)
        target = metadata.get("target") if hasattr(metadata, "get") else None
        if target not in self.tables.targets:  # install_registry: not for this target
            return []
        key = getattr(template, "key", None)
        keys = (registered_as,) if registered_as is not None else (key,)
        overload_func = getattr(template, "_overload_func", None)
        if overload_func is not None:
            names = {c.__name__ for c in type.mro(template)}
            what = ("overload_method" if "_OverloadMethodTemplate" in names else
                    "overload_attribute" if "_OverloadAttributeTemplate" in names else
                    "overload")
            if what != "overload":
                keys = (key, getattr(template, "_attr", None))
            # Only the overload registries are read by overload_implementations().
            covered = key if what == "overload" and self._in_overload_registry(template) else None
            return [(what, keys, (overload_func,), template_options(template), covered)]
        definition = getattr(template, "_definition_func", None)
        if definition is not None:  # make_intrinsic_template: reached through the intrinsic
            return [("intrinsic", keys, (definition,), None, key)]
        return [("typing_attribute" if attribute else "typing", keys, (template,), None, None)]

    def _made_by_template(self, fn) -> bool:
        """A lowering a typing template registers while a kernel is typed
        (``_OverloadAttributeTemplate._init_once`` / ``_OverloadMethodTemplate._init_once``)."""
        module = getattr(fn, "__module__", "")
        return (module in self.tables.template_modules
                and "._init_once.<locals>." in (getattr(fn, "__qualname__", "") or ""))


def template_options(template):
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


def _template_parts(template) -> tuple:
    namespace = getattr(template, "__dict__", {})
    for name in ("_overload_func", "_definition_func"):  # make_overload_*/intrinsic_template
        func = namespace.get(name)
        if func is not None:  # a staticmethod in the namespace
            return (getattr(func, "__func__", func), namespace.get("key"), namespace.get("_attr"))
    return (template,)


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

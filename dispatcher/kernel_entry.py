"""Kernel <-> entry conversion: what a compiled kernel becomes on disk and back.

An entry (docs/design.md, "Kernel entries") holds the artifacts ``cubin`` (for ``arch``),
``ptx`` (utf-8, when the non-LTO path produced it) and ``ltoir`` (LTO builds), and plain
metadata. msgpack only: a debug kernel's exception table is stored as class names
("module:qualname") + constant arguments + location, and classes are resolved on load only from
builtins or modules already in ``sys.modules`` (never imported, no module ``__getattr__`` run)
and only if they subclass ``Exception``. Anything else cannot be
encoded, and the kernel then runs uncached (:class:`NotStorable` says why).
"""
from __future__ import annotations

import builtins
import sys

from kcache import Entry
from kcache.entry.artifacts import KERNEL_FIELDS



#: Metadata fields of an entry that ``Frontend.rebuild_kernel`` reads (all plain data); the
#: core checks the artifacts of every entry holding them all (kcache.artifacts).
STATE_FIELDS = KERNEL_FIELDS
_PLAIN = (type(None), bool, int, float, str, bytes)


class NotStorable(Exception):
    """A compiled kernel (or its entry) cannot be stored or rebuilt safely; ``str()`` says why."""


def class_name(cls: type) -> str:
    """"module:qualname" of an exception class; NotStorable for local classes and for classes
    :func:`resolve_class` would refuse (not an ``Exception`` subclass)."""
    qualname = getattr(cls, "__qualname__", "")
    if "<locals>" in qualname or not getattr(cls, "__module__", None):
        raise NotStorable(f"exception class {cls!r} is local to a function")
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        raise NotStorable(f"{cls!r} is not an Exception subclass")
    return f"{cls.__module__}:{qualname}"


def resolve_class(name: str) -> type:
    """The exception class named "module:qualname" (as :func:`class_name` writes it), from
    builtins or a module already in ``sys.modules``; nothing is imported and no module
    ``__getattr__`` runs (each step is a ``vars()`` look-up: numpy's lazy ``__getattr__`` would
    import ``numpy.f2py`` for "numpy:f2py.X"). The class must subclass ``Exception``:
    ``SystemExit``, ``KeyboardInterrupt`` and ``BaseException`` itself are refused, like
    anything else that is not an exception class. Raises NotStorable naming the entry's
    value otherwise (the caller then compiles instead)."""
    if not isinstance(name, str) or len(name) > 512:
        raise NotStorable(f"exception class name {name!r:.80} is not a short string")
    module_name, _, qualname = name.partition(":")
    module = builtins if module_name == "builtins" else sys.modules.get(module_name)
    obj = module
    for part in qualname.split(".") if module is not None and qualname else ():
        try:
            namespace = vars(obj)
        except TypeError:  # no __dict__: nothing further can be looked up
            obj = None
            break
        obj = namespace.get(part)
        if obj is None:
            break
    if module is None or obj is None:
        raise NotStorable(f"exception class {name!r:.80} is not loaded in this process")
    if not (isinstance(obj, type) and issubclass(obj, Exception)):
        raise NotStorable(f"{name!r:.80} is not an Exception subclass; debug entries may only "
                          "name exception classes")
    return obj


def _plain_args(args, code) -> list | None:
    if args is None:
        return None
    if not isinstance(args, tuple) or not all(isinstance(a, _PLAIN) for a in args):
        raise NotStorable(f"exception {code} has non-constant arguments {args!r:.80}")
    return list(args)


def encode_exceptions(table: dict) -> dict:
    """``{code: (class, args, loc)}`` (``_MinimalCallHelper.exceptions``) -> msgpack-plain
    ``{"code": [class "module:qualname", args list | None, loc list | None]}``."""
    out = {}
    for code, (cls, args, loc) in table.items():
        if cls is None:
            name = None
        else:
            name = class_name(cls)
        loc = list(loc) if loc is not None else None
        if loc is not None and not all(isinstance(x, _PLAIN) for x in loc):
            raise NotStorable(f"exception {code} has an unencodable location {loc!r:.80}")
        out[str(int(code))] = [name, _plain_args(args, code), loc]
    return out


def decode_exceptions(table: dict) -> dict:
    """Inverse of :func:`encode_exceptions`; NotStorable if a class is not loaded."""
    out = {}
    for code, (name, args, loc) in (table or {}).items():
        cls = resolve_class(name) if name is not None else None
        out[int(code)] = (cls, tuple(args) if args is not None else None,
                          tuple(loc) if loc is not None else None)
    return out


def kernel_to_entry(frontend, kernel, cc, *, kernel_name: str, signature: str, arch: str,
                    compile_seconds: float, warnings: list | None = None) -> Entry:
    """Entry of a compiled, cacheable kernel of ``frontend`` (a ``frontends.base.Frontend``)
    for full cc ``cc`` (``kcache.arch.full_cc``).

    ``compile_seconds``: wall time of the compile (seconds); ``warnings``: what the compile
    warned, in ``compile_warnings.encode`` form (kept only when there are some, so entries of
    quiet kernels are unchanged). Raises NotStorable with the reason
    when the kernel needs live Python objects (``frontend.uncacheable_reason``) or its exception
    table cannot be encoded."""
    # _kcache_stale: the compile reused a device function compiled under other globals
    # (kcache.dispatcher.dep_guard): its code is not what the key says.
    reason = frontend.uncacheable_reason(kernel) or getattr(kernel, "_kcache_stale", None)
    if reason:
        raise NotStorable(reason)
    state = frontend.kernel_state(kernel, cc)
    artifacts = {"cubin": state["cubin"]}
    if state["ptx"]:
        artifacts["ptx"] = state["ptx"].encode("utf-8")
    if state["ltoir"]:
        artifacts["ltoir"] = state["ltoir"]
    meta = {f: state[f] for f in STATE_FIELDS}
    if meta["nvvm_options"] and not all(isinstance(v, _PLAIN) for v in meta["nvvm_options"].values()):
        raise NotStorable(f"NVVM options {meta['nvvm_options']!r} are not plain values")
    # sigspec is imported by writers only: a process served from the cache never needs it
    from .sigspec import format_or_none
    meta.update(kernel=kernel_name, signature=signature, arch=arch,
                compile_seconds=float(compile_seconds),
                exceptions=encode_exceptions(state["exceptions"]),
                # replayable text (kcache warm)
                sigspec=format_or_none(frontend, state["argtypes"]))
    if warnings:
        meta["warnings"] = list(warnings)
    return Entry(artifacts=artifacts, meta=meta)


def marker_entry(*, kernel_name: str, signature: str, arch: str) -> Entry:
    """Entry stored under the launch-config-free key of a launch-config-sensitive kernel: no
    artifacts, ``meta["launch_config_sensitive"] = True``; the kernel itself is stored under the
    key that includes the launch configuration (mirrors numba-cuda's ``.lcs`` marker file)."""
    return Entry(artifacts={}, meta={"kernel": kernel_name, "signature": signature, "arch": arch,
                                     "launch_config_sensitive": True, "marker": True})


def entry_to_kernel(frontend, entry: Entry, argtypes: tuple, cc, *, extensions, use: str = "cubin",
                    compiled=None, py_func=None, launch_bounds=None):
    """A launchable kernel of ``frontend`` (a ``frontends.base.Frontend``) rebuilt from
    ``entry`` for full cc ``cc``, without numba's typing or target context. ``use``:
    "cubin" or "ptx" (driver/nvJitLink link of the PTX);
    ``compiled``, ``py_func``, ``launch_bounds``: see ``frontend.rebuild_kernel``.
    Raises NotStorable if the entry lacks a field or an exception class is not loaded."""
    meta = entry.meta
    missing = [f for f in STATE_FIELDS if f not in meta]
    if missing or "cubin" not in entry.artifacts:
        raise NotStorable(f"entry lacks {missing or ['cubin']}")
    state = {f: meta[f] for f in STATE_FIELDS}
    state["cubin"] = entry.artifacts["cubin"]
    ptx = entry.artifacts.get("ptx")
    state["ptx"] = ptx.decode("utf-8") if ptx else None
    exceptions = decode_exceptions(meta.get("exceptions"))
    return frontend.rebuild_kernel(state, argtypes, cc, extensions=extensions,
                                   exceptions=exceptions, use=use, compiled=compiled,
                                   py_func=py_func, launch_bounds=launch_bounds)

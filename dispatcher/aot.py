"""``compile_for``: compile and store kernel entries for explicit compute capabilities, with no
GPU and no driver (NVVM and nvJitLink come from the toolkit wheels).

numba-cuda's ``compile_ptx`` asks the current device for its cc as soon as a kernel calls a
``@cuda.jit(device=True)`` function; here the whole compile runs inside
``Frontend.offline_target(cc)``, which also compiles those device functions afresh per cc, in
whatever module they live. Keys are computed exactly as a GPU process computes them
(``keying.kernel_key``), so a cache warmed here hits later on a GPU of that cc.

Warming ahead of time exists to store entries: an entry that could not be stored (store
disabled, unwritable root, a kernel that cannot be cached, a lock timeout) is an error,
:class:`CompileForError`, raised after everything else was stored, so that a build script
(``python warm.py || exit 1``) fails instead of shipping a cold cache.

Every function is handed the front-end of the kernel (a ``frontends.base.Frontend``): the
package's ``kcache.dispatcher.compile_for`` picks numba-cuda's, ``kcache warm`` the one it
was given (in its workers too).
"""
from __future__ import annotations

import dataclasses
import inspect
import time

from kcache import Store
from kcache import arch as _arch
from kcache.entry.artifacts import problem
from kcache.errors import KcacheError, LockTimeout

from . import compile_warnings
from .components import Uncacheable
from .kernel_entry import NotStorable, kernel_to_entry, marker_entry
from .keying import kernel_key
from .process import explain_enabled, kernel_name, log_explanations, recache_enabled

__all__ = ["compile_for", "compile_for_report", "parse_cc", "check_cc", "CompiledEntry",
           "NotStored", "CompileForError"]


@dataclasses.dataclass(frozen=True)
class CompiledEntry:
    """One entry that ``compile_for`` left in the store.

    ``key`` (64 hex digits), ``kernel`` ("module:qualname"), ``signature`` (argument types as
    numba prints them, e.g. ``"(array(float32, 1d, C), float32)"``), ``cc`` ((major, minor)), ``arch`` (``"sm_90a"``),
    ``cached`` (True: the entry was already in the store, nothing was compiled),
    ``compile_seconds`` (wall time of this compile in seconds; 0.0 when ``cached``),
    ``remote`` (True: ``cached``, found in the remote tier, verified and copied into the
    root)."""
    key: str
    kernel: str
    signature: str
    cc: tuple
    arch: str
    cached: bool
    compile_seconds: float
    remote: bool = False


@dataclasses.dataclass(frozen=True)
class NotStored:
    """One (kernel, signature, cc) that ``compile_for`` could not store, and why (``reason``)."""
    kernel: str
    signature: str
    cc: tuple
    arch: str
    reason: str


class CompileForError(KcacheError):
    """``compile_for`` could not store every entry it was asked for.

    Raised after storing whatever could be stored. ``failures``: list of :class:`NotStored`
    (kernel, signature, cc, reason each); ``results``: list of :class:`CompiledEntry` for
    the entries that are in the store. The message names each failure."""

    def __init__(self, failures, results=()):
        self.failures = list(failures)
        self.results = list(results)
        total = len(self.failures) + len(self.results)
        lines = [f"compile_for could not store {len(self.failures)} of {total} "
                 f"entr{'y' if total == 1 else 'ies'}"]
        by_reason: dict = {}
        for f in self.failures:  # one reason usually covers every entry: say it once
            by_reason.setdefault(f.reason, []).append(f)
        for reason, group in by_reason.items():
            lines.append(f"{reason}:")
            lines += [f"  {f.kernel} {f.signature} for cc {f.cc[0]}.{f.cc[1]} ({f.arch})"
                      for f in group]
        super().__init__("\n".join(lines))


def parse_cc(cc) -> tuple:
    """``(major, minor)`` of a compute capability in any form ``kcache.arch.parse_cc`` accepts
    (``(9, 0)``, ``(9, 0, "a")``, ``"9.0"``, ``"9.0a"``, ``"sm_90"``, ``"sm_90a"``, ``90``,
    ``"90"``). Syntax only (see :func:`check_cc`). Raises ValueError quoting ``cc`` and naming
    the accepted forms."""
    return _arch.parse_cc(cc)[:2]


def check_cc(frontend, cc) -> tuple:
    """:func:`parse_cc`, then check that the installed CUDA toolkit can compile for it (the
    list ``frontend`` reads from NVRTC, ``Frontend.supported_ccs``; numba-cuda itself would
    silently pick the closest lower cc, or fail deep inside NVVM). Returns (major, minor);
    raises ``kcache.arch.BadCC`` (a ``kcache.KcacheError`` and a ValueError) naming the cc
    and the supported ones."""
    parsed = parse_cc(cc)
    supported = frontend.supported_ccs()
    if supported is not None and parsed not in supported:
        text = f"{parsed[0]}.{parsed[1]}"
        plain = (parsed, list(parsed), text, float(text))
        given = "" if cc in plain else f" (given as {cc!r:.40})"
        raise _arch.BadCC(
            f"cc {parsed[0]}.{parsed[1]}{given} is not supported by the installed CUDA toolkit "
            f"(supported: {', '.join(f'{a}.{b}' for a, b in supported)})")
    return parsed


def _cc_list(frontend, cc) -> list:
    # One cc: a str, an int (90), a float (9.0), or a tuple/list of ints with an optional
    # suffix string ((9, 0), (9, 0, "a"), or a mistake like (9,), quoted as given); but ints
    # whose second is above 9 cannot be (major, minor): (80, 90) is two ccs; and a lone int of
    # two or three digits is a packed cc, as cc=90 is: [90] is [9.0], [80] [8.0], [120]
    # [12.0]. A string may list several, comma-separated, as the CLI's --cc does: "8.0,9.0".
    if isinstance(cc, (str, int, float)) or _one_cc(cc):
        items = [cc]
    else:
        try:
            items = list(cc)
        except TypeError:
            raise _arch.BadCC(f"bad compute capability list cc={cc!r:.60}: use e.g. "
                              "[(8, 0), (9, 0)], \"8.0,9.0\" or 9.0") from None
    items = [part for item in items for part in _commas(item)]
    if not items:
        raise _arch.BadCC("compile_for needs at least one compute capability, e.g. cc=[(9, 0)]")
    return [check_cc(frontend, c) for c in items]


def _commas(item) -> list:
    """``"8.0,9.0"`` -> ``["8.0", "9.0"]``; anything else as it is."""
    if not isinstance(item, str) or "," not in item:
        return [item]
    parts = [part.strip() for part in item.split(",")]
    if not all(parts):
        raise _arch.BadCC(f"cc={item!r:.60} has an empty compute capability; use e.g. "
                          "\"8.0,9.0\"")
    return parts


def _one_cc(cc) -> bool:
    if not isinstance(cc, (tuple, list)) or not cc:
        return False
    head, tail = list(cc[:2]), list(cc[2:])
    ints = all(isinstance(v, int) for v in head)
    suffix = all(isinstance(v, str) for v in tail)
    packed = len(head) == 1 and ints and not tail and head[0] >= 10
    return ints and suffix and not (len(head) == 2 and head[1] > 9) and not packed


def _signature_list(frontend, signatures) -> list:
    if frontend.is_signature(signatures):
        signatures = [signatures]
    if not isinstance(signatures, (list, tuple)) or not signatures:
        raise TypeError(f"signatures must be a signature (e.g. 'void(float32[::1])') or a "
                        f"non-empty list of them, not {signatures!r:.80}")
    out = []
    for sig in signatures:
        try:
            out.append(frontend.normalize_signature(sig))
        except Exception as exc:  # numba raises SyntaxError/NameError/TypeError from eval
            error = ValueError if isinstance(sig, str) else TypeError
            raise error(f"signature {sig!r:.80} is not a numba kernel signature "
                        f"({type(exc).__name__}: {exc}); use e.g. 'void(float32[::1], int32)' "
                        "or a tuple of numba types") from None
    return out


def _check_arity(frontend, kernel, signatures, all_argtypes) -> None:
    """Raise ValueError, before anything is compiled, when a signature's argument count is not
    the kernel's: numba-cuda would raise ``TypeError: Signature mismatch`` deep in its
    pipeline (``FixupArgs``, which compares with ``len(inspect.signature(py_func).parameters)``,
    the ``FunctionIdentity.arg_count`` it mirrors)."""
    params = inspect.signature(kernel.py_func).parameters
    given = [signatures] if frontend.is_signature(signatures) else list(signatures)
    for sig, argtypes in zip(given, all_argtypes):
        if len(argtypes) != len(params):
            shown = sig if isinstance(sig, str) else frontend.signature_display(argtypes)
            raise ValueError(
                f"signature {shown!r} has {len(argtypes)} argument"
                f"{'' if len(argtypes) == 1 else 's'}; kernel {kernel_name(kernel)} takes "
                f"{len(params)} ({', '.join(params)})")


def _store_of(frontend, kernel, store):
    if store is None:
        options = kernel._kcache if isinstance(kernel, frontend.dispatcher_class()) else None
        store = options.store if options is not None and options.store is not None else Store()
    if not isinstance(store, Store):
        raise TypeError(f"store must be a kcache.Store or None, not {type(store).__name__}")
    return store


def _unwritable_reason(store) -> str | None:
    """Why nothing can be stored in ``store``, known before compiling; None if it may work."""
    if getattr(store, "disabled", False):
        return "KCACHE_DISABLE is set, so the cache stores nothing (unset it to warm the cache)"
    check = getattr(store, "check_writable", None)  # a real write test, where the store has one
    why = check() if callable(check) else (None if store.writable else "read-only, missing or full")
    return f"the cache at {store.root} cannot be written ({why})" if why else None


def compile_for(frontend, kernel, signatures, cc, store=None, *, cache_key=None,
                recache=None) -> list:
    """``kcache.dispatcher.compile_for`` (its arguments, result and errors) for a kernel of
    ``frontend`` (a ``frontends.base.Frontend``): the keys, one per (cc, signature)."""
    return [r.key for r in compile_for_report(frontend, kernel, signatures, cc, store,
                                              cache_key=cache_key, recache=recache)]


def compile_for_report(frontend, kernel, signatures, cc, store=None, *,
                       cache_key=None, recache=None) -> list:
    """``kcache.dispatcher.compile_for_report`` for a kernel of ``frontend`` (a
    ``frontends.base.Frontend``: the one ``kcache warm`` picked, in its workers too): a
    :class:`CompiledEntry` per (cc, signature). Raises ``kcache.KcacheError`` with
    ``frontend.refusal()``'s line, before anything else, for a front-end kcache does not
    support."""
    reason = frontend.refusal()
    if reason is not None:
        raise KcacheError(reason)
    if not frontend.is_kernel_dispatcher(kernel):
        raise TypeError(f"compile_for needs a kernel made by kcache.jit or "
                        f"{frontend.jit_name}, not {type(kernel).__name__}")
    if kernel.targetoptions.get("device"):
        raise TypeError(f"{kernel_name(kernel)} is a device function; compile_for the kernels "
                        "that call it")
    if cache_key is None and isinstance(kernel, frontend.dispatcher_class()):
        cache_key = kernel._kcache.cache_key
    if cache_key is not None and not isinstance(cache_key, str):
        raise TypeError(f"cache_key must be a str or None, not {type(cache_key).__name__}")
    all_argtypes = _signature_list(frontend, signatures)
    targets = _cc_list(frontend, cc)
    _check_arity(frontend, kernel, signatures, all_argtypes)
    store = _store_of(frontend, kernel, store)
    recache = recache_enabled() if recache is None else bool(recache)
    results, failures = [], []
    blocked = _unwritable_reason(store)
    for target in targets:
        for argtypes in all_argtypes:
            try:
                if blocked:
                    raise _NotStored(blocked)
                results.append(_compile_one(frontend, kernel, argtypes, target, store,
                                            cache_key, recache))
            except _NotStored as exc:
                if not blocked and not store.writable:
                    blocked = str(exc)  # the root proved unwritable: compile nothing more
                failures.append(NotStored(kernel_name(kernel),
                                          frontend.signature_display(argtypes), target,
                                          frontend.arch_name(target), str(exc)))
    # A later put of this call may have evicted an earlier entry (a cap smaller than them all)
    for result in [r for r in results if not still_stored(store, r.key)]:
        results.remove(result)
        failures.append(NotStored(result.kernel, result.signature, result.cc, result.arch,
                                  evicted_reason(store)))
    if failures:
        raise CompileForError(failures, results)
    return results


class _NotStored(Exception):
    """One entry was not stored; ``str()`` is the reason."""


def _compile_one(frontend, kernel, argtypes, cc, store, cache_key,
                 recache=False) -> CompiledEntry:
    name, shown, arch = (kernel_name(kernel), frontend.signature_display(argtypes),
                         frontend.arch_name(cc))
    compiled = {}

    def create():
        if explain_enabled() and recache:
            log_explanations(kernel, [f"{name} {shown} for {arch}: recache: compiled, "
                                      "stored again"])
        elif explain_enabled():  # one line per miss, as the dispatcher logs it
            from .misses import explain_miss, one_line
            log_explanations(kernel, [f"{name} {shown} for {arch}: miss: "
                                      f"{one_line(explain_miss(store, components, frontend))}"])
        # offline_target compiles every device function afresh (for cc): no compile made
        # under other globals is reused here (kcache.dispatcher.dep_guard)
        with frontend.offline_target(cc) as full, compile_warnings.captured() as said:
            start = time.perf_counter()
            built = frontend.compile_kernel(kernel.py_func, argtypes, kernel.targetoptions)
            entry = _entry(frontend, built, full, name, shown, arch, start)
        if said:  # said again wherever the entry is served, as the compile said it
            entry.meta["warnings"] = compile_warnings.encode(said, repr(kernel.py_func))
        compiled["seconds"] = entry.meta["compile_seconds"]
        compiled["entry"] = entry
        store.record(compiles=1, compile_seconds=compiled["seconds"])
        if not entry.meta["launch_config_sensitive"]:
            return entry
        # As the dispatcher does for an eager compile: kernel under the "no launch
        # configuration" key, marker under the plain key.
        lc_key, lc_components = kernel_key(frontend, kernel, argtypes, cc,
                                           frontend.launch_config_key(kernel, None), cache_key)
        if not store.put(lc_key, entry, components=lc_components):
            raise _NotStored(_put_failed(store, entry))
        return marker_entry(kernel_name=name, signature=shown, arch=arch)

    try:
        key, components = kernel_key(frontend, kernel, argtypes, cc, None, cache_key, store)
        # Finding the entry is an existence check, not a use: no hit, miss or seconds saved.
        _entry_, was_hit = store.get_or_create(key, create, components=components, count=False,
                                               recache=recache)
    except (Uncacheable, LockTimeout) as exc:
        reason = f"cannot be cached: {exc}" if isinstance(exc, Uncacheable) else str(exc)
        if explain_enabled():
            log_explanations(kernel, [f"{name} {shown} for {arch}: not cached: {reason}"])
        raise _NotStored(reason) from exc
    if not was_hit and store.header(key) is None:  # put() said nothing: look on disk
        raise _NotStored(_put_failed(store, compiled.get("entry")))
    remote = was_hit and store.remote_served(key)  # never opens the remote for a local hit
    return CompiledEntry(key, name, shown, tuple(cc), arch, cached=was_hit,
                         compile_seconds=compiled.get("seconds", 0.0), remote=bool(remote))


def still_stored(store, key: str) -> bool:
    """Whether ``key``'s entry is (still) in ``store``: a header read, no use counted."""
    return store.header(key) is not None


def evicted_reason(store) -> str:
    """Why an entry found or stored a moment ago is gone: the size cap made room for later
    ones (or another process removed it)."""
    return (f"the entry left the cache at {store.root} before the run ended: evicted by the "
            f"entries stored after it, max_size {store.max_size} bytes cannot hold them all "
            "(raise it: KCACHE_MAX_SIZE or kcache config set max_size), or removed by another "
            "process (kcache prune, rm, clear)")


def _put_failed(store, entry=None) -> str:
    why = problem(entry.artifacts, entry.meta) if entry is not None else None
    if why is not None:  # refused by Store.put: never published
        return f"the compile step returned a {why}; not stored"
    if not store.writable:
        why = getattr(store, "write_problem", None) or "read-only, missing or full"
        return f"the cache at {store.root} cannot be written ({why})"
    return (f"the entry was not kept in the cache at {store.root} (the disk is full, or "
            f"max_size {store.max_size} bytes is smaller than the entry)")


def _entry(frontend, compiled, full, name, signature, arch, start):
    try:
        entry = kernel_to_entry(frontend, compiled, full, kernel_name=name, signature=signature,
                                arch=arch, compile_seconds=0.0)
    except NotStorable as exc:
        raise Uncacheable(str(exc)) from exc
    entry.meta["compile_seconds"] = time.perf_counter() - start
    return entry

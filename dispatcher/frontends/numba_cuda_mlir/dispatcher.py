"""``KCacheMLIRDispatcher``: numba-cuda-mlir's ``MLIRDispatcher`` with overloads served from the
store.

numba-cuda-mlir compiles on two paths, both overridden here: ``_compile_impl`` (a launch: the
native launcher calls ``_compile`` with the arguments) and ``_compile_public`` (``compile(sig)``:
eager signatures, ``compile_for``). Each reads its disk cache (``self._cache.load_overload``)
only after ``mlir_target.ensure_initialized()``, the typing and target contexts' refresh
(0.68 s of a fresh process's first call on the H200). kcache looks the kernel up *before*
handing over: on a hit the compile result is rebuilt from the entry and published as
numba-cuda-mlir's own cache hit publishes it (``overloads[argtypes]``), and the contexts are
never built; on a miss, under the store's per-key lock (N processes compile once),
numba-cuda-mlir's own path compiles, with ``self._cache`` a :class:`KCacheCache` that hands
kcache the compile result ``save_overload`` is given. What numba-cuda-mlir does not store on
disk (launch-configuration specializations, whole-function planners) is not stored here
either: it compiles as without kcache, counted as uncached.

A dispatcher is handed its front-end (the bridge's ``FRONTEND``, by ``adopt``) and hands it on
to the front-end-generic modules it calls; this module never imports the bridge module, which
imports it.
"""
from __future__ import annotations

import collections
import threading
import time

import msgpack

from kcache.arch import full_cc
from kcache.text import cut
from kcache.warn import warn_once

from ... import components as _components
from ... import numba_config as _numba_config
from ... import process as _process
from ... import record as _record
from ... import require as _require
from ... import switch as _switch
from ...keying import kernel_key_encoded
from ...kernel_entry import NotStorable, entry_to_kernel, kernel_to_entry
from ...options import Options
from ...process import STATE as _STATE
from ...store_calls import RefusedEntry, StoreCalls
from ...process import explain_enabled, kernel_name, log_explanations
from . import compiling as _compiling
from . import internals as _internals
from . import served as _served
from . import signatures as _signatures
from .standin import KCacheCache
from .stats import KCacheStats
from .internals import MLIRDispatcher, global_compiler_lock


_now = _process.now

#: numba-cuda-mlir target options that print while compiling: a kernel with one on is
#: compiled (and stored), not served silently; they are not in the key.
_DUMPS = ("dump", "dump_numba_ir", "dump_mlir", "dump_cubin", "dump_llvmir", "dump_ptx",
          "dump_ast", "dump_ast_after_all", "print_before_all", "print_after_all",
          "profile_jit")


class Lookup:
    """One single-flight read of a key: ``entry`` found or published, ``result`` what this
    process's compile returned (a miss), ``error`` the user's compile error, ``uncached`` why
    the compile could not be stored."""

    __slots__ = ("entry", "result", "error", "uncached")

    def __init__(self):
        self.entry = self.result = self.error = self.uncached = None


class _NotPublished(Exception):
    """Raised from a ``get_or_create`` callback so that the store publishes nothing."""


class KCacheMLIRDispatcher(MLIRDispatcher, StoreCalls):
    """A numba-cuda-mlir dispatcher whose kernels come from the kcache store.

    ``py_func``: the Python kernel; ``targetoptions``: as ``numba_cuda_mlir.cuda.jit`` builds
    them; ``kcache``: :class:`~kcache.dispatcher.options.Options`; ``frontend``: the
    numba-cuda-mlir front-end (``kcache.dispatcher.frontends.numba_cuda_mlir.bridge.FRONTEND``;
    ``kcache.jit`` and ``install`` hand it over through ``Frontend.adopt``). Raises TypeError
    without one."""

    def __init__(self, py_func, targetoptions=None, *, kcache=None, frontend=None):
        frontend = frontend or getattr(_rebuilding, "frontend", None)
        if frontend is None:
            raise TypeError("KCacheMLIRDispatcher needs frontend= (the bridge's self._kcache_frontend, "
                            "kcache.dispatcher.frontends.numba_cuda_mlir.bridge); kcache.jit "
                            "and kcache.install make kernels with it")
        super().__init__(py_func, targetoptions)
        self._kcache_setup(kcache if kcache is not None else Options(), frontend)

    def __reduce__(self):
        # numba-cuda-mlir's reduction of its own _reduce_states (its tests hand them to
        # MLIRDispatcher._rebuild), rebuilt with this dispatcher's front-end (a Frontend
        # pickles by reference, as its bridge's FRONTEND).
        return _rebuild_with, (self._kcache_frontend, super().__reduce__())

    @classmethod
    def _rebuild(cls, frontend=None, **states):
        # numba-cuda-mlir's unpickling passes its states alone: _rebuild_with's front-end stays
        before = getattr(_rebuilding, "frontend", None)
        _rebuilding.frontend = frontend or before
        try:
            return super()._rebuild(**states)
        finally:
            _rebuilding.frontend = before

    def _reduce_states(self):
        # The chip as given, not the one a compile or a serve resolved: a rebuilt dispatcher
        # takes its targetoptions as given, and its keys with them.
        states = super()._reduce_states()
        states["targetoptions"] = self._kcache_given_options()
        return states

    def _kcache_given_options(self) -> dict:
        """``targetoptions`` with ``chip`` as the program gave it (``_kcache_chip``)."""
        options = dict(self.targetoptions)
        had, chip = self._kcache_chip
        if had:
            options["chip"] = chip
        else:
            options.pop("chip", None)
        return options

    def _kcache_setup(self, options: Options, frontend) -> None:
        self._kcache = options
        self._kcache_frontend = frontend  # a frontends.base.Frontend: handed to generic modules
        # The chip as the user gave it (None: the device's): numba-cuda-mlir writes the
        # resolved one into targetoptions at each compile (_kcache_restore_chip).
        self._kcache_chip = ("chip" in self.targetoptions, self.targetoptions.get("chip"))
        self._kcache_keys = {}  # (argtypes, cc) -> (key, components or None, encoding)
        self._kcache_counts = collections.Counter()
        self._kcache_uncached = {}
        self._kcache_bypassed = {}
        self._kcache_key_of = {}
        self.__dict__.setdefault("kcache_explanations", [])
        self._cache = KCacheCache(self)
        options.prepare(frontend, _signatures.key_targetoptions(self))

    # --- numba-cuda-mlir API ------------------------------------------------------------------

    def enable_caching(self):
        """Caching is always on for a kcache dispatcher made with ``cache=True``
        (numba-cuda-mlir's ``enable_caching`` contract); ``kcache.jit``'s options are taken."""
        options = _switch.adopting_options()
        if options is not None:
            if self._kcache is not options:
                self._kcache_setup(options, self._kcache_frontend)
            return
        self._kcache.cache = True
        if _switch.installed() is not None:
            self._kcache_numba_cache = True

    #: True when the program asked numba-cuda-mlir's own cache for this kernel
    #: (``cuda.jit(cache=True)`` under ``install()``): what that cache refuses to save is
    #: compiled, then refused with its own error, as without kcache.
    _kcache_numba_cache = False

    def specialize(self, *args):
        """A new kcache dispatcher specialized for the types of ``args`` (its kernel cached
        too). Mirrors ``MLIRDispatcher.specialize``."""
        cc = _signatures.current_cc()
        argtypes = tuple(a if isinstance(a, _internals.types.Type) else _internals.typeof(a)
                         for a in args)
        if self.specialized:
            raise RuntimeError("Dispatcher already specialized")
        made = self.specializations.get((cc, argtypes))
        if made:
            return made
        made = KCacheMLIRDispatcher(self.py_func, self._kcache_given_options(),
                                    kcache=self._kcache, frontend=self._kcache_frontend)
        made._kcache_numba_cache = self._kcache_numba_cache
        made.compile_for(*argtypes)
        made.disable_compile()
        made._specialized = True
        self.specializations[cc, argtypes] = made
        return made

    @property
    def stats(self):
        """:data:`KCacheStats`."""
        c = self._kcache_counts
        return KCacheStats(
            cache_path=self._cache.cache_path, cache_hits=self._cache_hits,
            cache_misses=self._cache_misses, compiles=c["compiles"],
            compile_seconds=c["compile_seconds"], uncached=dict(self._kcache_uncached),
            store_errors=c["store_errors"], fallbacks=c["fallbacks"],
            keys=dict(self._kcache_key_of), bypassed=dict(self._kcache_bypassed),
            inspect_compiles=c["inspect_compiles"])

    @global_compiler_lock
    def _compile_impl(self, args, *more, **kw):
        """A launch's compile (the native launcher's ``_compile``): returns numba-cuda-mlir's
        ``(cubin, func_name, cooperative)``."""
        argtypes = self._kcache_launch_argtypes(args)
        if argtypes is None:
            return self._kcache_as_is(lambda: super(KCacheMLIRDispatcher, self)._compile_impl(
                args, *more, **kw), None)
        served = self._kcache_lookup(argtypes, lambda: super(
            KCacheMLIRDispatcher, self)._compile_impl(args, *more, **kw))
        if served is None or isinstance(served, tuple):
            return served
        md = served.metadata
        return md["cubin"], md["func_name"], md.get("use_cooperative", False)

    @global_compiler_lock
    def _compile_public(self, sig, abi_info=None, output=None):
        """``compile(sig)``: returns the compile result (a ``compiler.CompileResult``)."""
        argtypes = _signatures.normalize_signature(sig)
        original = lambda: super(KCacheMLIRDispatcher, self)._compile_public(  # noqa: E731
            sig, abi_info=abi_info, output=output)
        if argtypes in self.overloads and output is None:
            return self.overloads[argtypes]
        if (abi_info is not None or output is not None or self.targetoptions.get("device")
                or _internals._planner_registry._planners):
            return self._kcache_as_is(original, argtypes)
        return self._kcache_lookup(argtypes, original)

    # --- kcache -------------------------------------------------------------------------------

    def _kcache_name(self) -> str:
        return kernel_name(self)

    def _kcache_launch_argtypes(self, args):
        """The argument types ``_compile_impl`` compiles ``args`` for (as it works them out),
        or None when it would not use its disk cache (a launch-configuration
        specialization, a whole-function planner, compiling disabled, an overload it reuses):
        those go through numba-cuda-mlir as they are."""
        tls = _internals.compile_arg_types
        override = getattr(tls, "types", None)
        argtypes = (tuple(override) if override is not None
                    else tuple(_internals.typeof(a) for a in args))
        values = tuple(getattr(tls, "values", tuple(args)))
        with self._launch_config_lock:
            argtypes = self._literalize_argtypes(argtypes, values, abi_arg_count=len(args))
        extensions = getattr(tls, "extensions", _internals.MISSING)
        if extensions is _internals.MISSING:
            extensions = self.extensions
        if (getattr(tls, "force_launch_config", False) or self._requires_launch_config
                or _internals.extensions_use_launch_config(extensions)
                or _internals._planner_registry._planners or not self._can_compile):
            return None
        if any(len(s) == len(argtypes) and all(map(self._can_reuse_overload, s, argtypes))
               for s in tuple(self.overloads)):
            return None
        return argtypes

    def kcache_key(self, argtypes, cc, launch_config=None, store=None):
        """(key, components) of this kernel for ``argtypes`` and cc (major, minor), worked out
        once per signature (until ``recompile``). Raises ``Uncacheable``."""
        memo = (argtypes, cc)
        known = self._kcache_keys.get(memo)
        if known is None:
            known = kernel_key_encoded(self._kcache_frontend, self, argtypes, cc, None,
                                       self._kcache.cache_key, store)
            known = self._kcache_keys.setdefault(memo, known)
        key, components, encoded = known
        if components is None:
            components = msgpack.unpackb(encoded, raw=False, strict_map_key=False)
        return key, components

    def _kcache_lookup(self, argtypes, original):
        """Serve ``argtypes`` from the store or compile it through ``original`` (numba-cuda-
        mlir's own path) and store the result. Returns the served compile result, or what
        ``original`` returned."""
        start = _now()
        outer = _STATE.clock
        clock = _STATE.clock = _process.LookupClock(self._kcache_name())
        try:
            served = self._kcache_load_or_compile(argtypes, original)
            _record.note(self._kcache_frontend, self, argtypes)  # KCACHE_RECORD: a signature compiled
            return served
        finally:
            clock.total = _now() - start
            _STATE.keep_phases(clock)
            _STATE.clock = outer

    def _kcache_load_or_compile(self, argtypes, original):
        store = self._kcache.get_store()
        if store is None:
            return self._kcache_as_is(original, argtypes, "caching is off for this kernel")
        if self._kcache_numba_cache:
            refusal = _compiling.numba_cache_load_refusal(self.py_func)
            if refusal is not None:  # numba-cuda-mlir's load_overload raises it
                raise refusal
            if self.targetoptions.get("link"):
                return self._kcache_as_is(original, argtypes, "numba-cuda-mlir's cache "
                                          "(cache=True) refuses kernels that link files; "
                                          "compiled as it does")
        cc = _signatures.current_cc()
        start = _now()
        try:
            key, components = self.kcache_key(argtypes, cc, store=store)
        except _components.Uncacheable as exc:
            _STATE.clock.key += _now() - start
            if isinstance(exc, _components.LinkUnread):
                warn_once(f"link-unread:{self._kcache_name()}", f"kcache: {exc}; "
                          f"{self._kcache_name()} runs uncached")
            return self._kcache_as_is(original, argtypes, str(exc))
        _STATE.clock.key += _now() - start
        self._kcache_key_of.setdefault(argtypes, key)
        bypass = self._kcache_bypass_reason()
        if bypass is not None:
            return self._kcache_bypass(store, key, components, argtypes, cc, original, bypass)
        start = _now()
        found = self._kcache_single_flight(store, key, components, argtypes, cc, original)
        _STATE.clock.read += _now() - start
        if found.result is not None:  # numba-cuda-mlir's path counted its own miss
            _STATE.counts["misses"] += 1
            return found.result
        if found.entry is None:
            return self._kcache_as_is(original, argtypes, "the cache store failed")
        try:
            served = self._kcache_serve(found.entry, argtypes, cc)
        except RefusedEntry as refused:
            return self._kcache_replace(store, key, components, argtypes, cc, original,
                                        found.entry, refused.__cause__)
        _STATE.clock.hit = True
        self._cache_hits[argtypes] += 1
        _STATE.counts["hits"] += 1
        self._kcache_forget_components(argtypes)
        return served

    def _kcache_forget_components(self, argtypes) -> None:
        """Keep a served signature's components only as their encoding (as the numba-cuda
        dispatcher does: fewer objects for the garbage collector to walk)."""
        for memo in [m for m in list(self._kcache_keys) if m[0] == argtypes]:
            known = self._kcache_keys.get(memo)
            if known is not None and known[1] is not None:
                self._kcache_keys[memo] = (known[0], None, known[2])

    def _kcache_replace(self, store, key, components, argtypes, cc, original, entry, exc):
        """``entry``, served for ``key``, refused by the rebuild (``exc``): a miss and a
        corrupt entry for the store (``_kcache_reject``), then compiled through ``original``
        and stored over it (recache), so that the next process hits."""
        reason = self._kcache_reject(store, key, entry, exc)
        found = self._kcache_single_flight(store, key, components, argtypes, cc, original,
                                           refused=reason)
        if found.result is None:  # not expected: the single flight compiles or raises
            return self._kcache_as_is(original, argtypes, reason)
        _STATE.counts["misses"] += 1  # numba-cuda-mlir's path counted its own miss
        return found.result

    def _kcache_single_flight(self, store, key, components, argtypes, cc, original,
                              refused=None) -> Lookup:
        """``store.get_or_create`` for one key, as a :class:`Lookup`. Under ``KCACHE_RECACHE``,
        or with ``refused`` (why the entry served was refused: its miss counted already), the
        entry present is not used: compiled and stored again."""
        found = Lookup()
        recache = refused is not None or _process.recache_enabled()

        def create():
            self._kcache_explain(store, components, argtypes, recache, refused)
            try:
                built = self._kcache_build(argtypes, original)
            except Exception as exc:
                found.error = exc
                raise _NotPublished() from exc
            found.result = built.result
            try:
                entry = self._kcache_entry(built, argtypes, cc)
            except NotStorable as exc:
                found.uncached = self._kcache_uncached[argtypes] = str(exc)
                _STATE.counts["uncached"] += 1
                raise _NotPublished() from exc
            self._kcache_record(store, compiles=1, compile_seconds=built.seconds)
            return entry

        try:
            found.entry, _hit = store.get_or_create(key, create, components=components,
                                                    recache=recache, count=refused is None)
            return found
        except _NotPublished:
            if found.error is None:
                return found
        except Exception as exc:  # lock timeout, unwritable store, ...: the call still succeeds
            self._kcache_store_failed(exc)
            if found.result is not None:
                return found
            if found.error is None:
                try:
                    found.result = self._kcache_build(argtypes, original).result
                    return found
                except Exception as error:
                    found.error = error
        _STATE.counts["misses"] += 1  # numba-cuda-mlir counted its own before compiling
        raise found.error

    def _kcache_build(self, argtypes, original) -> "_Built":
        """Compile through numba-cuda-mlir's own path (``original``), keeping the compile
        result its cache's ``save_overload`` is handed (None: it stores none) and what the
        compile warned, for the entry."""
        _require.check(self._kcache_frontend, self, argtypes)
        from ... import compile_warnings as _warnings
        from ... import dep_guard as _dep_guard
        cache = self._kcache_capturing()
        captured = cache.capture() if cache is not None else None
        start = time.perf_counter()
        try:
            with _warnings.captured() as said, _dep_guard.watched(self._kcache_frontend, self.py_func) as stale:
                result = original()
        finally:
            if cache is not None:
                cache.release()
            self._kcache_restore_chip()
        built = _Built(result, captured[-1] if captured else None, time.perf_counter() - start)
        _STATE.clock.compile += int(built.seconds * 1e9)
        for counts in (self._kcache_counts, _STATE.counts):
            counts["compiles"] += 1
            counts["compile_seconds"] += built.seconds
        built.warnings = _warnings.encode(said, repr(self.py_func))
        built._kcache_stale = stale[0] if stale else None
        if built.cres is not None and self._kcache_numba_cache:
            refusal = _compiling.numba_cache_refusal(built.cres)
            if refusal is not None:  # numba-cuda-mlir's save_overload raises it
                if explain_enabled():
                    log_explanations(self, [f"{self._kcache_name()} "
                                            f"{_signatures.signature_display(argtypes)}: refused "
                                            f"as numba-cuda-mlir's cache (cache=True) refuses "
                                            f"it: {refusal}"])
                raise refusal
        return built

    def _kcache_capturing(self):
        """kcache's stand-in for numba-cuda-mlir's cache, or None where the program put
        another object in ``_cache`` (numba-cuda-mlir's own tests do)."""
        cache = self._cache
        return cache if isinstance(cache, KCacheCache) else None

    def _kcache_restore_chip(self) -> None:
        """A chip the user gave back in ``targetoptions`` after a compile; with none given,
        the one numba-cuda-mlir resolved stays there, as without kcache: its later compiles
        of the dispatcher (lineinfo's and inspection's NVVM path) read it, and a None there
        reached ``chip.encode()`` (numba-cuda-mlir's suite on the H200). The key takes the
        given one (signatures.key_targetoptions); compile_for restores its own."""
        had, chip = self._kcache_chip
        if had and chip is not None:
            self.targetoptions["chip"] = chip

    def _kcache_as_is(self, original, argtypes, reason=None):
        """numba-cuda-mlir's own path, uncached (``reason`` said when not None)."""
        if reason is not None and argtypes is not None:
            self._kcache_uncached[argtypes] = reason
            _STATE.counts["uncached"] += 1
            _STATE.counts["misses"] += 1
            if explain_enabled():
                log_explanations(self, [f"{self._kcache_name()} "
                                        f"{_signatures.signature_display(argtypes)}: "
                                        f"not cached: {reason}"])
        cache = self._kcache_capturing()
        captured = cache.capture() if cache is not None else None
        try:
            result = original()
        finally:
            if cache is not None:
                cache.release()
            self._kcache_restore_chip()
        if captured and self._kcache_numba_cache:
            refusal = _compiling.numba_cache_refusal(captured[-1])
            if refusal is not None:
                raise refusal
        return result

    def _kcache_bypass_reason(self) -> str | None:
        shown = [name for name in _DUMPS if self.targetoptions.get(name)]
        if shown:
            return f"target option {shown[0]} is on"
        return _numba_config.bypass_reason(_signatures.numba_config())

    def _kcache_bypass(self, store, key, components, argtypes, cc, original, reason):
        """Compile although the entry may exist (a dump setting asks to see the compiler
        work), store the result, count a bypass."""
        self._kcache_bypassed[argtypes] = reason
        _STATE.counts["misses"] += 1
        _STATE.counts["bypasses"] += 1
        if explain_enabled():
            log_explanations(self, [f"{self._kcache_name()} "
                                    f"{_signatures.signature_display(argtypes)}: bypass: {reason}"])
        built = self._kcache_build(argtypes, original)
        try:
            self._kcache_put(store, key, self._kcache_entry(built, argtypes, cc), components)
        except NotStorable:
            pass
        return built.result

    def _kcache_entry(self, built, argtypes, cc):
        """The entry of a compile (``built``: :class:`_Built`). Raises NotStorable."""
        if built.cres is None:
            raise NotStorable("numba-cuda-mlir does not store this compile on disk either "
                              "(a launch-configuration specialization)")
        return kernel_to_entry(self._kcache_frontend, built, full_cc(cc), kernel_name=self._kcache_name(),
                               signature=_signatures.signature_display(argtypes),
                               arch=_signatures.compiled_arch(built.cres, cc),
                               compile_seconds=built.seconds, warnings=built.warnings)

    def _kcache_serve(self, entry, argtypes, cc):
        """The compile result rebuilt from ``entry`` and published as numba-cuda-mlir's own
        cache hit publishes it (``overloads``), with NRT's set-up callback and the shared
        memory carveout a compile gets. Raises RefusedEntry when ``entry_to_kernel`` refuses
        the entry's content."""
        if not self.targetoptions.get("chip"):  # as _resolve_target_options before its load
            self.targetoptions["chip"] = _signatures.arch_name(cc)  # (inspect_llvm reads it)
        start = _now()
        try:
            wrapped = entry_to_kernel(self._kcache_frontend, entry, argtypes, full_cc(cc),
                                      targetoptions=self.targetoptions)
        except Exception as exc:  # whatever a field of an entry makes the rebuild raise: corrupt
            raise RefusedEntry() from exc
        finally:
            _STATE.clock.rebuild += _now() - start
        _served.answering(wrapped, self, argtypes)
        self._propagate_compile_callbacks(wrapped.cres.metadata)
        if self.targetoptions.get("shared_memory_carveout") is not None:
            self._apply_shared_memory_carveout(wrapped)
        self.overloads[argtypes] = wrapped
        said = entry.meta.get("warnings")
        if said:
            from ... import compile_warnings as _warnings
            _warnings.replay(said, repr(self.py_func))
        return wrapped

    def _kcache_explain(self, store, components, argtypes, recache=False, refused=None):
        if not explain_enabled():
            return
        from ...misses import explain_miss, one_line, subject
        what = subject(self._kcache_frontend, self._kcache_name(),
                       _signatures.signature_display(argtypes), components)
        if refused is not None:
            log_explanations(self, [f"{what}: miss: {refused}; compiled, stored again"])
            return
        if recache:
            log_explanations(self, [f"{what}: recache: KCACHE_RECACHE is set (compiled, "
                                    "stored again)"])
            return
        try:
            lines = explain_miss(store, components, self._kcache_frontend)
        except Exception as exc:  # explaining must never fail the call
            lines = [f"(cannot explain: {type(exc).__name__}: {cut(exc)})"]
        log_explanations(self, [f"{what}: miss: {one_line(lines) or 'no entry of this kernel'}"])


class _Built:
    """One compile: ``result`` (what numba-cuda-mlir's path returned), ``cres`` (the compile
    result its cache was handed, or None), ``seconds``, ``warnings`` (``compile_warnings``
    form) and ``_kcache_stale`` (why ``dep_guard`` refuses it, read by
    ``kernel_entry.kernel_to_entry``). ``kernel_state`` reads ``cres``."""

    __slots__ = ("result", "cres", "seconds", "warnings", "_kcache_stale")

    def __init__(self, result, cres, seconds):
        self.result, self.cres, self.seconds = result, cres, seconds
        self.warnings = self._kcache_stale = None


def adopt(frontend, dispatcher, options: Options):
    """Turn an existing ``MLIRDispatcher`` into a :class:`KCacheMLIRDispatcher` of ``frontend``
    (the bridge's ``FRONTEND``) in place (nothing compiled yet is lost)."""
    if isinstance(dispatcher, KCacheMLIRDispatcher):
        return dispatcher
    dispatcher.__class__ = KCacheMLIRDispatcher
    dispatcher._kcache_setup(options, frontend)
    return dispatcher


def _rebuild_with(frontend, reduction):
    """Unpickle a kcache dispatcher: numba-cuda-mlir's ``reduction`` (a callable and its
    arguments) run with ``frontend`` for the dispatcher it rebuilds."""
    _rebuilding.frontend = frontend
    try:
        return reduction[0](*reduction[1])
    finally:
        _rebuilding.frontend = None


#: The front-end of the dispatcher being rebuilt by numba-cuda-mlir's unpickling, per thread
#: (``MLIRDispatcher._rebuild`` calls ``cls(py_func, targetoptions=...)``).
_rebuilding = threading.local()

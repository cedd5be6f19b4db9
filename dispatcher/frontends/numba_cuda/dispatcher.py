"""``KCacheDispatcher``: numba-cuda's ``CUDADispatcher`` with overloads served from the store.

The structure mirrors ``CUDADispatcher.compile`` (numba-cuda 0.30, dispatcher.py): in-memory
overloads first; then, instead of ``self._cache.load_overload`` (which refreshes numba's target
context, 0.7-0.9 s), the entry under the kernel's key is rebuilt from its cubin alone; on a
miss, the store's per-key lock makes N processes compile once, and the compiled kernel is
encoded as an entry (``kernel_entry``) and published. A store failure is a miss (counted,
warned once); a kernel that cannot be cached compiles and runs uncached, and says why.
One lookup's outcome is a :class:`Lookup`; what the process shares is ``process.STATE``.

A dispatcher is handed its front-end (the bridge's ``FRONTEND``, by ``adopt``) and hands it on
to the front-end-generic modules it calls; this module never imports the bridge module, which
imports it (``Frontend.dispatcher_class``, ``Frontend.adopt``).
"""
from __future__ import annotations

import collections
import time
import warnings

import msgpack

import kcache.store  # noqa: F401
from kcache import arch as _arch
from kcache import toolchain as _toolchain  # noqa: F401
from kcache.text import cut
from kcache.warn import warn_once

# ``import kcache`` loads nothing (the CLI starts fast); the first cached kernel imports this
# module (kcache.dispatcher.install), and with it what a hit needs: the store's read path
# and the toolchain memo, during the program's imports, not inside its first kernel call
# (measured on the H200: 47 ms of a 50 ms first call were these imports). What only a miss,
# a write or maintenance needs (filelock, the locks' users, maintenance, the reports, the
# remote tiers, the compile warnings, the signature grammar) is imported when first used: a
# process served from the cache imports filelock only to write its counters (in the
# background, or at exit).

from ... import components as _components  # imported now, not on the first kernel call
from ... import numba_config as _numba_config
from ... import process as _process
from ... import record as _record
from ... import require as _require
from ... import switch as _switch
from ...keying import kernel_key_encoded
from ...kernel_entry import NotStorable, entry_to_kernel, kernel_to_entry, marker_entry
from ...options import Options
from ...process import STATE as _STATE
from ...store_calls import RefusedEntry, StoreCalls
from ...process import explain_enabled, kernel_name, log_explanations
from . import compiling as _compiling
from . import internals as _internals
from . import patching as _patching
from . import rebuild as _rebuild  # noqa: F401  (a hit rebuilds: imported now, not on a hit)
from . import signatures as _signatures

#: ``dispatcher.stats``: numba-cuda's ``_CompileStats`` fields (cache_path, cache_hits,
#: cache_misses: Counters per signature) + kcache's: compiles (int), compile_seconds (float,
#: seconds), uncached ({signature: reason}), store_errors (int), fallbacks (int: cached cubins
#: the driver refused), keys ({signature: key}), bypassed ({signature: reason}: compiled
#: instead of served, e.g. under NUMBA_DUMP_IR), inspect_compiles (int: compiles made only to
#: answer ``inspect_llvm``/``inspect_types``/... for a served kernel; neither a miss nor a
#: compile of the kernel that runs).
KCacheStats = collections.namedtuple("KCacheStats", (
    "cache_path", "cache_hits", "cache_misses", "compiles", "compile_seconds", "uncached",
    "store_errors", "fallbacks", "keys", "bypassed", "inspect_compiles"))

_now = _process.now


class Lookup:
    """What one single-flight read of a key came to (:meth:`KCacheDispatcher._kcache_single_flight`).

    ``entry``: the entry found or published (None: nothing usable, e.g. the store failed or
    the kernel cannot be stored); ``kernel``: the kernel this process compiled for it (a miss),
    else None; ``error``: the user's compile error, raised by the caller as numba-cuda raises
    it; ``uncached``: why the compiled kernel could not be stored, else None."""

    __slots__ = ("entry", "kernel", "error", "uncached")

    def __init__(self):
        self.entry = self.kernel = self.error = self.uncached = None


class _NotPublished(Exception):
    """Raised from a ``get_or_create`` callback so that the store publishes nothing (its
    contract: ``create`` returns an entry or raises); the :class:`Lookup` says why."""


class KCacheDispatcher(_internals.CUDADispatcher, StoreCalls):
    """A ``numba.cuda`` dispatcher whose kernels come from the kcache store.

    ``py_func``: the Python kernel; ``targetoptions``: numba-cuda target options (as built by
    ``numba.cuda.jit``); ``kcache``: :class:`Options`; ``frontend``: the numba-cuda front-end
    (``kcache.dispatcher.frontends.numba_cuda.bridge.FRONTEND``; ``kcache.jit`` and
    ``install`` hand it over through ``Frontend.adopt``). Raises TypeError without one.
    Device functions (``device=True``) are compiled as numba-cuda does; they reach the cache
    through the kernels that call them.
    """

    def __init__(self, py_func, targetoptions, pipeline_class=None, *, kcache=None,
                 frontend=None):
        if frontend is None:
            raise TypeError("KCacheDispatcher needs frontend= (the bridge's FRONTEND, "
                            "kcache.dispatcher.frontends.numba_cuda.bridge); kcache.jit and "
                            "kcache.install make kernels with it")
        kwargs = {} if pipeline_class is None else {"pipeline_class": pipeline_class}
        super().__init__(py_func, targetoptions, **kwargs)
        self._kcache_setup(kcache if kcache is not None else Options(), frontend)

    def _reduce_states(self):
        # numba-cuda pickles a dispatcher as (py_func, targetoptions) and rebuilds it with
        # cls(py_func, targetoptions) (serialize.ReduceMixin): the front-end goes with them,
        # by reference (Frontend objects pickle as their bridge's FRONTEND).
        return {**super()._reduce_states(), "frontend": self._kcache_frontend}

    @classmethod
    def _rebuild(cls, py_func, targetoptions, frontend):
        return cls(py_func, targetoptions, frontend=frontend)

    def _kcache_setup(self, options: Options, frontend) -> None:
        self._kcache = options
        self._kcache_frontend = frontend  # a frontends.base.Frontend: handed to generic modules
        # (argtypes, cc, launch config) -> (key, components or None once served, encoding)
        self._kcache_keys = {}
        self._kcache_counts = collections.Counter()
        self._kcache_uncached = {}  # signature -> reason
        self._kcache_bypassed = {}  # signature -> reason
        self._kcache_inspected = {}  # argtypes -> _Kernel compiled to answer an inspect_*()
        self._kcache_key_of = {}  # signature -> key
        # Lines logged for this kernel's misses (compile_for may have added some already).
        self.__dict__.setdefault("kcache_explanations", [])
        options.prepare(self._kcache_frontend, self.targetoptions)

    # --- numba-cuda API ---------------------------------------------------------------------

    @_internals.global_compiler_lock
    def compile(self, sig):
        """Compile (or load from the store) and bind the kernel for ``sig``; returns the
        ``_Kernel``. Same contract as ``CUDADispatcher.compile``."""
        argtypes = _signatures.normalize_signature(sig)
        if self.specialized:
            return next(iter(self.overloads.values()))
        kernel = self.overloads.get(argtypes)
        if kernel is not None:
            return kernel
        start = _now()
        outer = _STATE.clock
        clock = _STATE.clock = _process.LookupClock(self._kcache_name())
        try:
            kernel = self._kcache_load_or_compile(argtypes, _signatures.current_launch_config())
            self.add_overload(kernel, argtypes)
            # KCACHE_RECORD: a signature this program launches
            _record.note(self._kcache_frontend, self, argtypes)
        finally:
            clock.total = _now() - start
            _STATE.keep_phases(clock)
            _STATE.clock = outer
        return kernel

    def recompile(self):
        """Recompile every signature afresh (``CUDADispatcher.recompile``): the keys are worked
        out again, so globals changed since the first compile are seen."""
        self._kcache_keys.clear()
        self._kcache_inspected.clear()
        super().recompile()

    def enable_caching(self):
        """Caching is always on for a KCacheDispatcher made with ``cache=True``; turns it on
        otherwise (numba-cuda's ``enable_caching`` contract). Reached from
        ``numba.cuda.jit(cache=True)`` when mode "all" made this one a KCacheDispatcher
        already (``install``)."""
        options = _switch.adopting_options()
        if options is not None:  # inside kcache.jit: that call's own settings are taken
            if self._kcache is not options:
                self._kcache_setup(options, self._kcache_frontend)
            return
        self._kcache.cache = True
        if _switch.installed() is not None:
            self._kcache_numba_cache = True  # numba.cuda.jit(cache=True): numba-cuda's rules

    #: True when the program asked numba-cuda's own cache for this kernel
    #: (``numba.cuda.jit(cache=True)`` under ``install()`` / ``KCACHE_ENABLE``, not kcache.jit):
    #: what numba-cuda's cache refuses to save (``_compiling.numba_cache_refusal``) is compiled,
    #: then refused with numba-cuda's own error, as without kcache.
    _kcache_numba_cache = False

    def specialize(self, *args):
        """A new KCacheDispatcher specialized for the types of ``args`` (its kernel cached too).
        Mirrors ``CUDADispatcher.specialize``."""
        cc = _signatures.current_cc()
        argtypes = tuple(self.typeof_pyval(a) for a in args)
        if self.specialized:
            raise RuntimeError("Dispatcher already specialized")
        specialization = self.specializations.get((cc, argtypes))
        if specialization:
            return specialization
        specialization = KCacheDispatcher(self.py_func, self.targetoptions, kcache=self._kcache,
                                          frontend=self._kcache_frontend)
        specialization.compile(argtypes)
        specialization.disable_compile()
        specialization._specialized = True
        self.specializations[cc, argtypes] = specialization
        return specialization

    def _get_launch_config_specialization(self, key):
        # CUDADispatcher's (numba-cuda 0.30, for launch-config-sensitive kernels), with a
        # KCacheDispatcher.
        def make():
            made = KCacheDispatcher(self.py_func, self.targetoptions,
                                    self._compiler.pipeline_class, kcache=self._kcache,
                                    frontend=self._kcache_frontend)
            # numba-cuda gives these its cache when the parent has it (enable_caching()).
            made._kcache_numba_cache = self._kcache_numba_cache
            return made
        return _patching.launch_config_specialization(self, key, make)

    @property
    def stats(self):
        """:data:`KCacheStats` (numba-cuda's ``cache_path``, ``cache_hits``, ``cache_misses`` +
        kcache's counters)."""
        store = self._kcache.get_store() if self._kcache.cache else None
        c = self._kcache_counts
        return KCacheStats(
            cache_path=str(store.root) if store is not None else None,
            cache_hits=self._cache_hits, cache_misses=self._cache_misses,
            compiles=c["compiles"], compile_seconds=c["compile_seconds"],
            uncached=dict(self._kcache_uncached), store_errors=c["store_errors"],
            fallbacks=c["fallbacks"], keys=dict(self._kcache_key_of),
            bypassed=dict(self._kcache_bypassed), inspect_compiles=c["inspect_compiles"])

    # --- kcache -------------------------------------------------------------------------------

    def _kcache_name(self) -> str:
        return kernel_name(self)

    def kcache_key(self, argtypes, cc, launch_config=None, store=None):
        """(key, components) of this kernel for ``argtypes``, cc (major, minor) and a launch
        configuration key (None unless launch-config-sensitive), worked out once per
        signature (until :meth:`recompile`): a served signature's are the ones it was served
        by. Raises ``Uncacheable``."""
        memo = (argtypes, cc, launch_config)
        known = self._kcache_keys.get(memo)
        if known is None:
            # Into a local first: another thread may forget the entry's components meanwhile.
            known = kernel_key_encoded(self._kcache_frontend, self, argtypes, cc, launch_config,
                                       self._kcache.cache_key, store)
            known = self._kcache_keys.setdefault(memo, known)
        key, components, encoded = known
        if components is None:  # a served signature's: decoded from their encoding
            components = msgpack.unpackb(encoded, raw=False, strict_map_key=False)
        return key, components

    def _kcache_forget_components(self, argtypes) -> None:
        """Keep a served signature's components only as their canonical encoding (bytes, made
        for its key): only a miss uses them (to explain it, to store the compile), and the
        dicts and lists are objects every full collection of the garbage collector would go
        through (an application of 1,000 kernels paid one more full collection than the floor:
        docs/bench-dispatch.md). :meth:`kcache_key` decodes them when asked."""
        # list() copies the keys at once (kcache_key() may add one from another thread)
        for memo in [m for m in list(self._kcache_keys) if m[0] == argtypes]:
            known = self._kcache_keys.get(memo)
            if known is not None and known[1] is not None:
                self._kcache_keys[memo] = (known[0], None, known[2])

    def _kcache_load_or_compile(self, argtypes, launch_config):
        sig = argtypes
        store = self._kcache.get_store()
        if store is None:
            return self._kcache_uncached_build(sig, "caching is off for this kernel")
        if self._kcache_numba_cache and self.targetoptions.get("link"):
            # Never served, even where kcache.jit stored this kernel: numba-cuda compiles it,
            # then its cache refuses it (raised by _kcache_build).
            return self._kcache_uncached_build(sig, "numba-cuda's cache (cache=True) refuses "
                                               "kernels that link files; compiled as it does")
        cc = _signatures.current_cc()
        start = _now()
        try:
            key, components = self.kcache_key(argtypes, cc, store=store)
        except _components.Uncacheable as exc:
            _STATE.clock.key += _now() - start
            if isinstance(exc, _components.LinkUnread):  # not the kernel's nature: say so
                warn_once(f"link-unread:{self._kcache_name()}", f"kcache: {exc}; "
                          f"{self._kcache_name()} runs uncached")
            return self._kcache_uncached_build(sig, str(exc))
        _STATE.clock.key += _now() - start
        bypass = _numba_config.bypass_reason(_signatures.numba_config())
        if bypass is not None:
            return self._kcache_bypass(store, key, components, argtypes, cc, bypass)
        start = _now()
        found = self._kcache_single_flight(store, key, components, argtypes, cc, launch_config)
        _STATE.clock.read += _now() - start
        if (found.entry is not None and found.kernel is None
                and found.entry.meta.get("launch_config_sensitive")):
            # A launch-config-sensitive kernel: the plain key holds a marker (numba-cuda's
            # ".lcs" file); the kernel is under the key with this launch configuration.
            lc_key = _patching.launch_config_key(self, launch_config)
            key, components = self.kcache_key(argtypes, cc, lc_key)
            found = self._kcache_single_flight(store, key, components, argtypes, cc,
                                               launch_config)
        self._kcache_key_of.setdefault(sig, key)
        if found.kernel is not None:
            self._cache_misses[sig] += 1
            _STATE.counts["misses"] += 1
            return found.kernel
        if found.entry is None:
            return self._kcache_uncached_build(sig, "the cache store failed")
        try:
            kernel, reason = self._kcache_rebuild(found.entry, argtypes, cc)
        except RefusedEntry as refused:  # the entry's content, not this machine's driver
            return self._kcache_replace(store, key, components, argtypes, cc, launch_config,
                                        found.entry, refused.__cause__)
        if kernel is not None:
            _STATE.clock.hit = True
            self._cache_hits[sig] += 1
            _STATE.counts["hits"] += 1
            self._kcache_forget_components(argtypes)
            return kernel
        # Neither the cubin nor the PTX loads here (e.g. an entry compiled elsewhere whose
        # PTX ISA is newer than this driver): compile for this process, uncached.
        return self._kcache_uncached_build(sig, reason)

    def _kcache_replace(self, store, key, components, argtypes, cc, launch_config, entry,
                        exc):
        """``entry``, served for ``key``, refused by the rebuild (``exc``): a miss and a
        corrupt entry for the store (``_kcache_reject``), then compiled and stored over it
        (recache), so that the next process hits. Returns the compiled kernel."""
        reason = self._kcache_reject(store, key, entry, exc)
        found = self._kcache_single_flight(store, key, components, argtypes, cc, launch_config,
                                           refused=reason)
        if found.kernel is None:  # not expected: the single flight compiles or raises
            return self._kcache_uncached_build(argtypes, reason)
        self._cache_misses[argtypes] += 1
        _STATE.counts["misses"] += 1
        return found.kernel

    def _kcache_single_flight(self, store, key, components, argtypes, cc,
                              launch_config, refused=None) -> Lookup:
        """``store.get_or_create`` for one key, as a :class:`Lookup`: the entry found or
        published, and on a miss the kernel this process compiled. Raises the user's compile
        error (a miss counted first, as numba-cuda counts it), outside the store's handler.
        Under ``KCACHE_RECACHE``, or with ``refused`` (why the entry served was refused: its
        miss counted already), the entry present is not used: compiled and stored again."""
        found = Lookup()
        recache = refused is not None or _process.recache_enabled()

        def create():
            self._kcache_explain(store, components, argtypes, recache, refused)
            try:
                kernel, seconds = self._kcache_build(argtypes)
            except Exception as exc:
                found.error = exc
                raise _NotPublished() from exc
            found.kernel = kernel
            try:
                entry = self._kcache_entry(kernel, argtypes, cc, seconds)
            except NotStorable as exc:
                found.uncached = self._kcache_uncached[argtypes] = str(exc)
                _STATE.counts["uncached"] += 1
                raise _NotPublished() from exc
            self._kcache_record(store, compiles=1, compile_seconds=seconds)
            if entry.meta["launch_config_sensitive"] and components.get("launch_config") is None:
                lc_key, lc_components = self.kcache_key(
                    argtypes, cc, _patching.launch_config_key(self, launch_config))
                self._kcache_put(store, lc_key, entry, lc_components)
                self._kcache_key_of[argtypes] = lc_key
                return marker_entry(kernel_name=entry.meta["kernel"],
                                    signature=entry.meta["signature"], arch=entry.meta["arch"])
            return entry

        try:
            found.entry, _was_hit = store.get_or_create(
                key, create, components=components, while_waiting=self._kcache_ready_compiler,
                recache=recache, count=refused is None)
            return found
        except _NotPublished:
            if found.error is None:
                return found  # compiled, not storable: the kernel runs uncached
        except Exception as exc:  # lock timeout, unwritable store, ...: the call still succeeds
            self._kcache_store_failed(exc)
            if found.kernel is not None:
                return found
        if found.error is None:  # compiled outside the handler: its error carries no context of ours
            try:
                found.kernel = self._kcache_build(argtypes)[0]
                return found
            except Exception as exc:
                found.error = exc
        # The user's error, as numba-cuda raises it: a miss counted (numba-cuda counts it
        # before compiling), raised outside the handler so that it carries no context of ours.
        self._cache_misses[argtypes] += 1
        _STATE.counts["misses"] += 1
        raise found.error

    def _kcache_ready_compiler(self) -> None:
        """While another process compiles this kernel (its lock is held): ready numba-cuda's
        compiler for this process, once, if it has compiled nothing yet and may compile
        (``_compiling.warm_compiler``). Processes that start together take turns at the locks of
        the kernels they share; without this each turn paid a fresh process's first-compile
        set-up (0.3-0.6 s) after the previous one's compile instead of during it."""
        if (_STATE.compiler_readied or _STATE.counts["compiles"] or not self._can_compile
                or _require.mode() is not None
                or _numba_config.bypass_reason(_signatures.numba_config()) is not None):
            return
        _STATE.compiler_readied = True
        start = _now()
        try:
            _compiling.warm_compiler(self.targetoptions)
        finally:  # numba-cuda's work, not kcache's own (own_phases)
            _STATE.clock.compile += _now() - start

    def _kcache_bypass(self, store, key, components, argtypes, cc, reason):
        """Compile although the entry may exist (a numba dump or debug setting asks to see the
        compiler work), store the result, count a bypass; the call gets the compiled kernel."""
        self._kcache_bypassed[argtypes] = reason
        self._cache_misses[argtypes] += 1
        _STATE.counts["misses"] += 1
        _STATE.counts["bypasses"] += 1
        self._kcache_key_of.setdefault(argtypes, key)
        if explain_enabled():
            self._kcache_log([f"{self._kcache_name()} {_signatures.signature_display(argtypes)}: "
                              f"bypass: {reason}"])
        kernel, seconds = self._kcache_build(argtypes)
        try:
            entry = self._kcache_entry(kernel, argtypes, cc, seconds)
        except NotStorable:
            return kernel
        if not entry.meta["launch_config_sensitive"]:  # those are stored per launch config
            self._kcache_put(store, key, entry, components)
        return kernel

    def _kcache_entry(self, kernel, argtypes, cc, seconds):
        return kernel_to_entry(self._kcache_frontend, kernel, _arch.full_cc(cc),
                               kernel_name=self._kcache_name(),
                               signature=_signatures.signature_display(argtypes),
                               arch=_arch.arch_name(cc), compile_seconds=seconds,
                               warnings=getattr(kernel, "_kcache_warnings", None))

    def _kcache_build(self, argtypes):
        """Compile as ``CUDADispatcher.compile`` does on a miss; returns (kernel, seconds).
        The warnings the compile emits (they are emitted as always) are kept on the kernel
        as ``_kcache_warnings``, for its entry."""
        if not self._can_compile:
            raise RuntimeError("Compilation disabled")
        frontend = self._kcache_frontend
        _require.check(frontend, self, argtypes)  # KCACHE_REQUIRE_HIT: may refuse (raise) or warn
        from ... import compile_warnings as _warnings  # a compile's (and a noisy entry's) only
        from ... import dep_guard as _dep_guard
        start = time.perf_counter()
        with _warnings.captured() as said, _dep_guard.watched(frontend, self.py_func) as stale:
            kernel = _compiling.compile_kernel(self.py_func, argtypes, self.targetoptions)
            kernel.bind()  # force codegen so that there is a cubin to store
        kernel._kcache_warnings = _warnings.encode(said, repr(self.py_func))
        kernel._kcache_stale = stale[0] if stale else None  # kernel_to_entry refuses it
        seconds = time.perf_counter() - start
        _STATE.clock.compile += int(seconds * 1e9)
        for counts in (self._kcache_counts, _STATE.counts):
            counts["compiles"] += 1
            counts["compile_seconds"] += seconds
        if self._kcache_numba_cache:
            refusal = _compiling.numba_cache_refusal(kernel)
            if refusal is not None:  # numba-cuda's save_overload raises it after its compile
                if explain_enabled():
                    self._kcache_log([f"{self._kcache_name()} "
                                      f"{_signatures.signature_display(argtypes)}: refused as "
                                      f"numba-cuda's cache (cache=True) refuses it: {refusal}"])
                raise refusal
        return kernel, seconds

    def _kcache_uncached_build(self, sig, reason):
        self._kcache_uncached[sig] = reason
        self._cache_misses[sig] += 1
        _STATE.counts["misses"] += 1
        _STATE.counts["uncached"] += 1
        if explain_enabled():
            self._kcache_log([f"{self._kcache_name()} {_signatures.signature_display(sig)}: "
                              f"not cached: {reason}"])
        return self._kcache_build(sig)[0]

    def _kcache_rebuild(self, entry, argtypes, cc):
        """(kernel, None): the kernel from ``entry`` bound to the current context, from the
        cubin, else (the driver refused it; counted in ``fallbacks``, warned once) from the
        PTX. (None, reason) when neither loads; the caller then compiles. Raises
        RefusedEntry when ``entry_to_kernel`` refuses the entry's content."""
        full = _arch.full_cc(cc)
        extensions = self.targetoptions.get("extensions")
        served = {"compiled": lambda: self._kcache_inspection(argtypes),
                  "py_func": self.py_func,
                  "launch_bounds": self.targetoptions.get("launch_bounds")}
        start = _now()
        try:
            kernel = entry_to_kernel(self._kcache_frontend, entry, argtypes, full,
                                     extensions=extensions, **served)
        except Exception as exc:  # whatever a field of an entry makes the rebuild raise: corrupt
            raise RefusedEntry() from exc
        finally:
            _STATE.clock.rebuild += _now() - start
        start = _now()
        try:
            kernel.bind()
        except Exception as exc:  # e.g. CUDA_ERROR_UNSUPPORTED_PTX_VERSION / NO_BINARY_FOR_GPU
            self._kcache_counts["fallbacks"] += 1
            _STATE.counts["fallbacks"] += 1
            cubin_error = exc
            # the driver's words may quote the entry's code (its JIT log): escaped and cut
            warn_once("dispatcher-driver", f"kcache: the driver refused a cached cubin of "
                      f"{self._kcache_name()} ({cut(exc)}); trying its PTX")
        else:
            _STATE.clock.load += _now() - start
            # Outside the driver's try: a warning the program's filters turn into an error is
            # raised, as numba-cuda's compile raises it, not taken for a refused cubin.
            self._kcache_say_again(entry)
            return kernel, None
        try:
            kernel = entry_to_kernel(self._kcache_frontend, entry, argtypes, full,
                                     extensions=extensions, use="ptx", **served)
            kernel.bind()
        except Exception as exc:  # no PTX, or a PTX ISA newer than this driver
            warn_once("dispatcher-ptx", f"kcache: the cached PTX of {self._kcache_name()} "
                      f"does not load either ({cut(exc)}); compiling instead")
            return None, (f"the driver refused the cached cubin ({cut(cubin_error)}) and its "
                          f"PTX ({cut(exc)})")
        self._kcache_say_again(entry)
        return kernel, None

    def _kcache_say_again(self, entry) -> None:
        """What the entry's compile warned, said again (naming this process's function); a
        hit of a quiet kernel does nothing here."""
        said = entry.meta.get("warnings")
        if said:
            from ... import compile_warnings as _warnings
            _warnings.replay(said, repr(self.py_func))

    def _kcache_inspection(self, argtypes):
        """The kernel for ``argtypes`` compiled (never bound or launched) to answer what a
        served kernel's entry does not hold: LLVM IR, typing, PTX for another cc. Once per
        signature, counted in ``inspect_compiles``; its warnings were already said on load."""
        kernel = self._kcache_inspected.get(argtypes)
        if kernel is None:
            from ... import dep_guard as _dep_guard
            # dep_guard notes the device functions this compile makes
            with _internals.global_compiler_lock, warnings.catch_warnings(), \
                    _dep_guard.watched(self._kcache_frontend, self.py_func):
                warnings.simplefilter("ignore")
                kernel = _compiling.compile_kernel(self.py_func, argtypes, self.targetoptions)
            self._kcache_inspected[argtypes] = kernel
            for counts in (self._kcache_counts, _STATE.counts):
                counts["inspect_compiles"] += 1
        return kernel

    def _kcache_explain(self, store, components, argtypes, recache=False, refused=None):
        if not explain_enabled():
            return
        from ...misses import explain_miss, one_line, subject
        what = subject(self._kcache_frontend, self._kcache_name(),
                       _signatures.signature_display(argtypes), components)
        if refused is not None:
            self._kcache_log([f"{what}: miss: {refused}; compiled, stored again"])
            return
        if recache:
            self._kcache_log([f"{what}: recache: KCACHE_RECACHE is set (compiled, stored again)"])
            return
        try:
            lines = explain_miss(store, components, self._kcache_frontend)
        except Exception as exc:  # explaining must never fail the call
            lines = [f"(cannot explain: {type(exc).__name__}: {cut(exc)})"]
        # One line per miss (the differences joined): an entry cannot flood the log.
        self._kcache_log([f"{what}: miss: {one_line(lines) or 'no entry of this kernel'}"])

    def _kcache_log(self, lines):
        log_explanations(self, lines)


def adopt(frontend, dispatcher, options: Options):
    """Turn an existing ``CUDADispatcher`` (as made by ``numba.cuda.jit``) into a
    KCacheDispatcher of ``frontend`` (the bridge's ``FRONTEND``) in place (its class changes;
    nothing compiled yet is lost)."""
    if isinstance(dispatcher, KCacheDispatcher):
        return dispatcher
    dispatcher.__class__ = KCacheDispatcher
    dispatcher._kcache_setup(options, frontend)
    return dispatcher

"""``KCacheDispatcher``: numba-cuda's ``CUDADispatcher`` with overloads served from the store.

The structure mirrors ``CUDADispatcher.compile`` (numba-cuda 0.30, dispatcher.py): in-memory
overloads first; then, instead of ``self._cache.load_overload`` (which refreshes numba's target
context, 0.7-0.9 s), the entry under the kernel's key is rebuilt from its cubin alone; on a
miss, the store's per-key lock makes N processes compile once, and the compiled kernel is
encoded as an entry (``kernel_entry``) and published. A store failure is a miss (counted,
warned once); a kernel that cannot be cached compiles and runs uncached, and says why.
"""
from __future__ import annotations

import collections
import functools
import logging
import os
import threading
import time
from pathlib import Path

import msgpack

import kcache.store  # noqa: F401
from kcache import arch as _arch
from kcache.config import environment_snapshot
from kcache.keys import canonical_bytes, key_of_bytes
from kcache.disk.layout import BUCKET
from kcache.text import cut
from kcache import toolchain as _toolchain  # noqa: F401
from kcache.warn import held_back, warn_once

# ``import kcache`` loads nothing (the CLI starts fast); the first cached kernel imports this
# module (kcache.dispatcher.install), and with it what a hit needs: the store's read path
# and the toolchain memo, during the program's imports, not inside its first kernel call
# (measured on the H200: 47 ms of a 50 ms first call were these imports). What only a miss,
# a write or maintenance needs (filelock, the locks' users, maintenance, the reports, the
# remote tiers, the compile warnings, the signature grammar) is imported when first used: a
# process served from the cache imports filelock only to write its counters (in the
# background, or at exit).

from . import _compat

from . import components as _components  # imported now, not on the first kernel call
from . import numba_config as _numba_config
from . import record as _record
from . import require as _require
from .kernel_entry import NotStorable, entry_to_kernel, kernel_to_entry, marker_entry

log = logging.getLogger("kcache.dispatcher")
explain_log = logging.getLogger("kcache.explain")

_stats_fields = ("cache_path", "cache_hits", "cache_misses", "compiles", "compile_seconds",
                 "uncached", "store_errors", "fallbacks", "keys", "bypassed",
                 "inspect_compiles")
#: ``dispatcher.stats``: numba-cuda's ``_CompileStats`` fields (cache_path, cache_hits,
#: cache_misses: Counters per signature) + kcache's: compiles (int), compile_seconds (float,
#: seconds), uncached ({signature: reason}), store_errors (int), fallbacks (int: cached cubins
#: the driver refused), keys ({signature: key}), bypassed ({signature: reason}: compiled
#: instead of served, e.g. under NUMBA_DUMP_IR), inspect_compiles (int: compiles made only to
#: answer ``inspect_llvm``/``inspect_types``/... for a served kernel; neither a miss nor a
#: compile of the kernel that runs). Made on first use (module ``__getattr__``, and
#: ``dispatcher.stats``): building a namedtuple costs a first kernel definition ~0.3 ms.


@functools.cache
def _stats_type():
    return collections.namedtuple("KCacheStats", _stats_fields)


def __getattr__(name: str):
    if name == "KCacheStats":
        return _stats_type()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Process-wide counters over every KCacheDispatcher (see :func:`process_counts`).
_process_counts = collections.Counter()
_compiler_readied = [False]  # _kcache_ready_compiler ran in this process


def process_counts() -> dict:
    """Counters of this process over all KCacheDispatchers: ``hits``, ``misses``, ``compiles``
    (cached or not), ``uncached`` (compiles that could not be stored), ``fallbacks``,
    ``store_errors``, ``compile_seconds`` (seconds), ``bypasses`` (compiled instead of served
    because a numba dump or debug setting is on), ``inspect_compiles`` (compiles made only to
    inspect a served kernel)."""
    return dict(_process_counts)


# --- kcache's own time per lookup ----------------------------------------------------------
# Every lookup of an overload (KCacheDispatcher.compile past the in-memory overloads) is
# timed phase by phase with perf_counter_ns (a few hundred nanoseconds in all), so kcache's
# own part of a hit is measured inside the call (own_phases()), not guessed from differences
# of medians. Lookups run under numba-cuda's global compiler lock: one clock at a time.

_now = time.perf_counter_ns
_PHASES_KEPT = 10_000  # lookups remembered per process (one per kernel and signature)
_phases: list = []


class _Clock:
    """Nanoseconds of one lookup: ``key``, ``read`` (the store's get, single flight; on a miss
    it holds the compile), ``rebuild`` (the kernel object from the entry), ``load`` (binding
    it: the driver's module load), ``compile`` (numba-cuda's compile on a miss, and the
    compiler readied while waiting for another process's), ``total``."""

    __slots__ = ("kernel", "hit", "key", "read", "rebuild", "load", "compile", "total")

    def __init__(self, kernel: str):
        self.kernel, self.hit = kernel, False
        self.key = self.read = self.rebuild = self.load = self.compile = self.total = 0


_clock = _Clock("")  # the lookup being timed (a dummy outside one)


def own_phases() -> list:
    """kcache's own time in each overload lookup of this process, in order (at most the first
    10,000): dicts with ``kernel`` ("module:qualname"), ``hit`` (bool), and milliseconds
    ``key``, ``read`` (store read), ``rebuild``, ``load`` (the driver's module load, not
    kcache's), ``compile`` (numba-cuda's: on a miss, or readying the compiler while another
    process compiles), ``total`` (the lookup) and ``own``
    (total minus load and compile: what kcache itself spent)."""
    out = []
    for kernel, hit, *ns in _phases:
        ms = {f: v / 1e6 for f, v in zip(_Clock.__slots__[2:], ns)}
        out.append({"kernel": kernel, "hit": hit, **ms,
                    "own": ms["total"] - ms["load"] - ms["compile"]})
    return out


class _Skip(Exception):
    """Raised from a ``get_or_create`` callback: compiled, but nothing to publish."""


class _CompileFailed(Exception):
    """Carries the user's compile error out of a ``get_or_create`` callback untouched."""


class Options:
    """kcache settings of one dispatcher.

    ``store``: a ``kcache.Store`` or None for the process default (``kcache.Store()``, made on
    first use); ``cache``: False compiles uncached, as numba-cuda without ``cache=True``;
    ``cache_key``: user string mixed into every key (str or None).
    """

    _default_store = None
    _default_lock = threading.Lock()

    def __init__(self, store=None, cache: bool = True, cache_key: str | None = None):
        if cache_key is not None and not isinstance(cache_key, str):
            raise TypeError(f"cache_key must be a str or None, not {type(cache_key).__name__}")
        self.store = store
        self.cache = bool(cache)
        self.cache_key = cache_key

    def get_store(self):
        """The store to use, or None when caching is off or no store can be opened (warned
        once: a broken cache never breaks the program)."""
        if not self.cache:
            return None
        store = self.store if self.store is not None else self._process_store()
        if store is None or getattr(getattr(store, "settings", None), "disabled", False):
            return None
        return store

    @classmethod
    def _process_store(cls, early: bool = False):
        """The process default store. ``early``: opened by :meth:`prepare`, before any
        kernel call, and kept only if that raised and warned nothing; the first call then
        checks that what settings come from (``environment_snapshot``) is unchanged, else
        opens it again, so settings still take effect as of the first kernel call."""
        with cls._default_lock:
            if early:
                if cls._default_store is None:
                    cls._open_early()
                return cls._default_store or None
            if cls._opened_early is not None:
                store = cls._default_store
                if cls._opened_early != environment_snapshot(store.root):
                    cls._default_store = None  # the program changed a setting since
                cls._opened_early = None
            if cls._default_store is None:
                try:
                    from kcache import Store
                    cls._default_store = Store()
                except Exception as exc:  # a bad setting or unusable root: run uncached
                    warn_once("dispatcher-store", f"kcache: cannot open the cache ({exc}); "
                              "kernels are compiled uncached")
                    cls._default_store = False
            return cls._default_store or None

    @classmethod
    def _open_early(cls) -> None:
        from kcache import Store
        with held_back() as would_warn:
            try:
                store = Store()
            except Exception:  # the first kernel call tries again, and says why
                return
        if not would_warn:  # else the first call opens it again and warns as it always did
            cls._default_store = store
            cls._opened_early = environment_snapshot(store.root)

    _opened_early = None  # environment_snapshot() when prepare() opened the default store

    @classmethod
    def reset_process_store(cls) -> None:
        """Forget the process default store (tests, or after changing KCACHE_* variables)."""
        with cls._default_lock:
            cls._default_store = None
            cls._opened_early = None

    def prepare(self, targetoptions: dict | None = None) -> None:
        """What every hit needs, done once per process when the first cached kernel is
        defined (during the program's imports) instead of in its first call: open the store,
        know the toolchain versions, encode the components every key shares
        (``targetoptions``: the first kernel's). Whatever would warn is left to the first
        call, which then does it again and warns as before.
        Never raises: a problem shows (and is warned about) at the kernel call, as before."""
        if not self.cache or Options._prepared:
            return
        Options._prepared = True
        try:
            store = self.store if self.store is not None else self._process_store(early=True)
            if store is None or getattr(store, "disabled", False):
                return
            with held_back():  # a warning here would be a first call's: it is left to it
                _components.toolchain_components(lambda: _toolchain_memo(store))
                _components.prepare_shared(targetoptions)
        except Exception:  # the kernel call does it again and reports it
            pass

    _prepared = False


def _explain_from_env() -> bool:
    """KCACHE_EXPLAIN as every boolean setting reads (1/0, true/false, yes/no, on/off); any
    other value is said once and leaves explanations off."""
    from kcache.config import ConfigError, parse_bool
    try:
        return parse_bool(os.environ.get("KCACHE_EXPLAIN", ""), "KCACHE_EXPLAIN")
    except ConfigError as exc:
        warn_once("explain-setting", f"kcache: {exc}; miss explanations stay off")
        return False


_explain_on = [_explain_from_env()]


def set_explain(enabled: bool) -> None:
    """Turn miss explanations on or off for this process (as ``KCACHE_EXPLAIN=1``)."""
    _explain_on[0] = bool(enabled)


def explain_enabled() -> bool:
    """True when misses are explained (``KCACHE_EXPLAIN=1`` or ``set_explain(True)``)."""
    return _explain_on[0]


def log_explanations(dispatcher, lines) -> None:
    """Log explain ``lines`` (logger ``kcache.explain``, WARNING) and keep them on
    ``dispatcher.kcache_explanations`` (any CUDADispatcher: ``compile_for`` explains misses
    of plain numba-cuda kernels too), where ``kcache.explain(dispatcher)`` reads them."""
    kept = dispatcher.__dict__.setdefault("kcache_explanations", [])
    for line in lines:
        kept.append(line)
        explain_log.warning("%s", line)


def kernel_name(dispatcher) -> str:
    """"module:qualname" of a dispatcher's Python function (the entry's ``kernel``)."""
    return f"{dispatcher.py_func.__module__}:{dispatcher.py_func.__qualname__}"


def kernel_key(dispatcher, argtypes, cc, launch_config=None, cache_key=None, store=None):
    """(key, components) of ``dispatcher``'s kernel: ``argtypes`` (tuple of numba types),
    ``cc`` (any ``kcache.arch`` form; 9.0 and 9.0a give one key), ``launch_config``
    (numba-cuda's launch-config cache key, only for launch-config-sensitive kernels),
    ``cache_key`` (str or None), ``store`` (its root keeps the toolchain memo; None: no memo).
    The same function serves a GPU process and ``compile_for``, so their keys agree. Raises
    ``Uncacheable``."""
    key, components, _encoded = _kernel_key_encoded(dispatcher, argtypes, cc, launch_config,
                                                    cache_key, store)
    return key, components


def _kernel_key_encoded(dispatcher, argtypes, cc, launch_config, cache_key, store):
    """:func:`kernel_key` and the components' canonical encoding (what the key digests)."""
    lc = launch_config
    if isinstance(lc, tuple):
        lc = [list(lc[0]), list(lc[1]), lc[2]]
    # The memo path is only worked out the first time (the versions are kept per process).
    toolchain = _components.toolchain_shared(lambda: _toolchain_memo(store))
    components = _components.kernel_components(
        dispatcher.py_func, signature=_compat.signature_string(argtypes), cc=cc,
        output="cubin", targetoptions=dispatcher.targetoptions, launch_config=lc,
        cache_key=cache_key, toolchain=toolchain)
    encoded = canonical_bytes(components)
    return key_of_bytes(encoded), components, encoded


def _toolchain_memo(store):
    """Where the toolchain memo lives in ``store``'s root (kcache.toolchain.memoized): a path
    through the bucket folder's descriptor (kcache.paths: no symlink below the root is
    followed); None when the store has no trusted root (nothing is read from or written to
    an untrusted one) or no bucket folder yet."""
    layout = getattr(store, "layout", None)
    if layout is None or not getattr(store, "trusted", False) or getattr(store, "disabled", False):
        return None
    dirs = getattr(getattr(store, "local", None), "dirs", None)
    if dirs is None:
        return layout.toolchain_memo
    try:
        return Path(dirs.path(BUCKET, layout.toolchain_memo.name))
    except OSError:
        return None


class KCacheDispatcher(_compat.CUDADispatcher):
    """A ``numba.cuda`` dispatcher whose kernels come from the kcache store.

    ``py_func``: the Python kernel; ``targetoptions``: numba-cuda target options (as built by
    ``numba.cuda.jit``); ``kcache``: :class:`Options`. Device functions (``device=True``) are
    compiled as numba-cuda does; they reach the cache through the kernels that call them.
    """

    def __init__(self, py_func, targetoptions, pipeline_class=None, *, kcache=None):
        kwargs = {} if pipeline_class is None else {"pipeline_class": pipeline_class}
        super().__init__(py_func, targetoptions, **kwargs)
        self._kcache_setup(kcache if kcache is not None else Options())

    def _kcache_setup(self, options: Options) -> None:
        self._kcache = options
        # (argtypes, cc, launch config) -> (key, components or None once served, encoding)
        self._kcache_keys = {}
        self._kcache_counts = collections.Counter()
        self._kcache_uncached = {}  # signature -> reason
        self._kcache_bypassed = {}  # signature -> reason
        self._kcache_inspected = {}  # argtypes -> _Kernel compiled to answer an inspect_*()
        self._kcache_key_of = {}  # signature -> key
        # Lines logged for this kernel's misses (compile_for may have added some already).
        self.__dict__.setdefault("kcache_explanations", [])
        options.prepare(self.targetoptions)

    # --- numba-cuda API ---------------------------------------------------------------------

    @_compat.global_compiler_lock
    def compile(self, sig):
        """Compile (or load from the store) and bind the kernel for ``sig``; returns the
        ``_Kernel``. Same contract as ``CUDADispatcher.compile``."""
        argtypes = _compat.normalize_signature(sig)
        if self.specialized:
            return next(iter(self.overloads.values()))
        kernel = self.overloads.get(argtypes)
        if kernel is not None:
            return kernel
        global _clock
        start = _now()
        outer, _clock = _clock, _Clock(self._kcache_name())
        try:
            kernel = self._kcache_load_or_compile(argtypes, _compat.current_launch_config())
            self.add_overload(kernel, argtypes)
            _record.note(self, argtypes)  # KCACHE_RECORD: a signature this program launches
        finally:
            _clock.total = _now() - start
            if len(_phases) < _PHASES_KEPT:
                # As a tuple of text, flag and numbers, which the collector stops tracking:
                # 1,000 kernels would otherwise add 1,000 objects to every full collection.
                _phases.append(tuple(getattr(_clock, f) for f in _Clock.__slots__))
            _clock = outer
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
        already: see ``install.caching_asked``."""
        from .install import caching_asked
        caching_asked(self)

    #: True when the program asked numba-cuda's own cache for this kernel
    #: (``numba.cuda.jit(cache=True)`` under ``install()`` / ``KCACHE_ENABLE``, not kcache.jit):
    #: what numba-cuda's cache refuses to save (``_compat.numba_cache_refusal``) is compiled,
    #: then refused with numba-cuda's own error, as without kcache.
    _kcache_numba_cache = False

    def specialize(self, *args):
        """A new KCacheDispatcher specialized for the types of ``args`` (its kernel cached too).
        Mirrors ``CUDADispatcher.specialize``."""
        cc = _compat.current_cc()
        argtypes = tuple(self.typeof_pyval(a) for a in args)
        if self.specialized:
            raise RuntimeError("Dispatcher already specialized")
        specialization = self.specializations.get((cc, argtypes))
        if specialization:
            return specialization
        specialization = KCacheDispatcher(self.py_func, self.targetoptions, kcache=self._kcache)
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
                                    self._compiler.pipeline_class, kcache=self._kcache)
            # numba-cuda gives these its cache when the parent has it (enable_caching()).
            made._kcache_numba_cache = self._kcache_numba_cache
            return made
        return _compat.launch_config_specialization(self, key, make)

    @property
    def stats(self):
        """:data:`KCacheStats` (numba-cuda's ``cache_path``, ``cache_hits``, ``cache_misses`` +
        kcache's counters)."""
        store = self._kcache.get_store() if self._kcache.cache else None
        c = self._kcache_counts
        return _stats_type()(
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
            known = _kernel_key_encoded(self, argtypes, cc, launch_config,
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
        cc = _compat.current_cc()
        start = _now()
        try:
            key, components = self.kcache_key(argtypes, cc, store=store)
        except _components.Uncacheable as exc:
            _clock.key += _now() - start
            if isinstance(exc, _components.LinkUnread):  # not the kernel's nature: say so
                warn_once(f"link-unread:{self._kcache_name()}", f"kcache: {exc}; "
                          f"{self._kcache_name()} runs uncached")
            return self._kcache_uncached_build(sig, str(exc))
        _clock.key += _now() - start
        bypass = _numba_config.bypass_reason()
        if bypass is not None:
            return self._kcache_bypass(store, key, components, argtypes, cc, bypass)
        built = {}
        start = _now()
        entry = self._kcache_single_flight(store, key, components, argtypes, cc,
                                           launch_config, built)
        _clock.read += _now() - start
        if entry is not None and "kernel" not in built and entry.meta.get("launch_config_sensitive"):
            # A launch-config-sensitive kernel: the plain key holds a marker (numba-cuda's
            # ".lcs" file); the kernel is under the key with this launch configuration.
            lc_key = _compat.launch_config_key(self, launch_config)
            key, components = self.kcache_key(argtypes, cc, lc_key)
            entry = self._kcache_single_flight(store, key, components, argtypes, cc,
                                               launch_config, built)
        self._kcache_key_of.setdefault(sig, key)
        if "kernel" in built:
            self._cache_misses[sig] += 1
            _process_counts["misses"] += 1
            return built["kernel"]
        if entry is None:
            return self._kcache_uncached_build(sig, "the cache store failed")
        kernel, reason = self._kcache_rebuild(entry, argtypes, cc)
        if kernel is not None:
            _clock.hit = True
            self._cache_hits[sig] += 1
            _process_counts["hits"] += 1
            self._kcache_forget_components(argtypes)
            return kernel
        # Neither the cubin nor the PTX loads here (e.g. an entry compiled elsewhere whose
        # PTX ISA is newer than this driver): compile for this process, uncached.
        return self._kcache_uncached_build(sig, reason)

    def _kcache_single_flight(self, store, key, components, argtypes, cc, launch_config, built):
        """``store.get_or_create`` for one key; a compile (on a miss) leaves the kernel in
        ``built["kernel"]``. Returns the entry, or None when nothing usable came back (store
        failure, or a kernel that cannot be stored)."""
        sig = argtypes

        def create():
            self._kcache_explain(store, components, argtypes)
            try:
                kernel, seconds = self._kcache_build(argtypes)
            except Exception as exc:
                raise _CompileFailed(exc) from exc
            built["kernel"] = kernel
            try:
                entry = self._kcache_entry(kernel, argtypes, cc, seconds)
            except NotStorable as exc:
                self._kcache_uncached[sig] = str(exc)
                _process_counts["uncached"] += 1
                raise _Skip() from exc
            self._kcache_record(store, compiles=1, compile_seconds=seconds)
            if entry.meta["launch_config_sensitive"] and components.get("launch_config") is None:
                lc_key, lc_components = self.kcache_key(
                    argtypes, cc, _compat.launch_config_key(self, launch_config))
                self._kcache_put(store, lc_key, entry, lc_components)
                self._kcache_key_of[sig] = lc_key
                return marker_entry(kernel_name=entry.meta["kernel"],
                                    signature=entry.meta["signature"], arch=entry.meta["arch"])
            return entry

        try:
            entry, _was_hit = store.get_or_create(key, create, components=components,
                                                  while_waiting=self._kcache_ready_compiler)
            return entry
        except _Skip:
            return None
        except _CompileFailed as failed:
            error = failed.args[0]
        except Exception as exc:  # lock timeout, unwritable store, ...: the call still succeeds
            self._kcache_store_failed(exc)
            if "kernel" in built:
                return None
            error = None
        if error is None:  # compiled outside the handler: its error carries no context of ours
            try:
                built["kernel"] = self._kcache_build(argtypes)[0]
                return None
            except Exception as exc:
                error = exc
        # The user's error, as numba-cuda raises it: a miss counted (numba-cuda counts it
        # before compiling), raised outside the handler so that it carries no context of ours.
        self._cache_misses[sig] += 1
        _process_counts["misses"] += 1
        raise error

    def _kcache_ready_compiler(self) -> None:
        """While another process compiles this kernel (its lock is held): ready numba-cuda's
        compiler for this process, once, if it has compiled nothing yet and may compile
        (``_compat.warm_compiler``). Processes that start together take turns at the locks of
        the kernels they share; without this each turn paid a fresh process's first-compile
        set-up (0.3-0.6 s) after the previous one's compile instead of during it."""
        if (_compiler_readied[0] or _process_counts["compiles"] or not self._can_compile
                or _require.mode() is not None or _numba_config.bypass_reason() is not None):
            return
        _compiler_readied[0] = True
        start = _now()
        try:
            _compat.warm_compiler(self.targetoptions)
        finally:  # numba-cuda's work, not kcache's own (own_phases)
            _clock.compile += _now() - start

    def _kcache_bypass(self, store, key, components, argtypes, cc, reason):
        """Compile although the entry may exist (a numba dump or debug setting asks to see the
        compiler work), store the result, count a bypass; the call gets the compiled kernel."""
        self._kcache_bypassed[argtypes] = reason
        self._cache_misses[argtypes] += 1
        _process_counts["misses"] += 1
        _process_counts["bypasses"] += 1
        self._kcache_key_of.setdefault(argtypes, key)
        if explain_enabled():
            self._kcache_log([f"{self._kcache_name()} {_compat.signature_display(argtypes)}: "
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
        return kernel_to_entry(kernel, _arch.full_cc(cc), kernel_name=self._kcache_name(),
                               signature=_compat.signature_display(argtypes),
                               arch=_arch.arch_name(cc), compile_seconds=seconds,
                               warnings=getattr(kernel, "_kcache_warnings", None))

    def _kcache_build(self, argtypes):
        """Compile as ``CUDADispatcher.compile`` does on a miss; returns (kernel, seconds).
        The warnings the compile emits (they are emitted as always) are kept on the kernel
        as ``_kcache_warnings``, for its entry."""
        if not self._can_compile:
            raise RuntimeError("Compilation disabled")
        _require.check(self, argtypes)  # KCACHE_REQUIRE_HIT: may refuse (raise) or warn
        from . import compile_warnings as _warnings  # a compile's (and a noisy entry's) only
        from . import dep_guard as _dep_guard
        start = time.perf_counter()
        with _warnings.captured() as said, _dep_guard.watched(self.py_func) as stale:
            kernel = _compat.compile_kernel(self.py_func, argtypes, self.targetoptions)
            kernel.bind()  # force codegen so that there is a cubin to store
        kernel._kcache_warnings = _warnings.encode(said, repr(self.py_func))
        kernel._kcache_stale = stale[0] if stale else None  # kernel_to_entry refuses it
        seconds = time.perf_counter() - start
        _clock.compile += int(seconds * 1e9)
        for counts in (self._kcache_counts, _process_counts):
            counts["compiles"] += 1
            counts["compile_seconds"] += seconds
        if self._kcache_numba_cache:
            refusal = _compat.numba_cache_refusal(kernel)
            if refusal is not None:  # numba-cuda's save_overload raises it after its compile
                if explain_enabled():
                    self._kcache_log([f"{self._kcache_name()} "
                                      f"{_compat.signature_display(argtypes)}: refused as "
                                      f"numba-cuda's cache (cache=True) refuses it: {refusal}"])
                raise refusal
        return kernel, seconds

    def _kcache_uncached_build(self, sig, reason):
        self._kcache_uncached[sig] = reason
        self._cache_misses[sig] += 1
        _process_counts["misses"] += 1
        _process_counts["uncached"] += 1
        if explain_enabled():
            self._kcache_log([f"{self._kcache_name()} {_compat.signature_display(sig)}: "
                              f"not cached: {reason}"])
        return self._kcache_build(sig)[0]

    def _kcache_rebuild(self, entry, argtypes, cc):
        """(kernel, None): the kernel from ``entry`` bound to the current context, from the
        cubin, else (the driver refused it; counted in ``fallbacks``, warned once) from the
        PTX. (None, reason) when neither loads; the caller then compiles."""
        full = _arch.full_cc(cc)
        extensions = self.targetoptions.get("extensions")
        served = {"compiled": lambda: self._kcache_inspection(argtypes),
                  "py_func": self.py_func,
                  "launch_bounds": self.targetoptions.get("launch_bounds")}
        start = _now()
        try:
            kernel = entry_to_kernel(entry, argtypes, full, extensions=extensions, **served)
        except Exception as exc:  # whatever a field of an entry makes the rebuild raise: unusable
            # (its text may quote the entry's fields: escaped and cut, kcache.text)
            warn_once("dispatcher-entry", f"kcache: an entry of {self._kcache_name()} cannot "
                      f"be used here ({type(exc).__name__}: {cut(exc)}); compiling instead")
            return None, f"the cached entry cannot be used here ({cut(exc)})"
        finally:
            _clock.rebuild += _now() - start
        start = _now()
        try:
            kernel.bind()
        except Exception as exc:  # e.g. CUDA_ERROR_UNSUPPORTED_PTX_VERSION / NO_BINARY_FOR_GPU
            self._kcache_counts["fallbacks"] += 1
            _process_counts["fallbacks"] += 1
            cubin_error = exc
            # the driver's words may quote the entry's code (its JIT log): escaped and cut
            warn_once("dispatcher-driver", f"kcache: the driver refused a cached cubin of "
                      f"{self._kcache_name()} ({cut(exc)}); trying its PTX")
        else:
            _clock.load += _now() - start
            # Outside the driver's try: a warning the program's filters turn into an error is
            # raised, as numba-cuda's compile raises it, not taken for a refused cubin.
            self._kcache_say_again(entry)
            return kernel, None
        try:
            kernel = entry_to_kernel(entry, argtypes, full, extensions=extensions, use="ptx",
                                     **served)
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
            from . import compile_warnings as _warnings
            _warnings.replay(said, repr(self.py_func))

    def _kcache_inspection(self, argtypes):
        """The kernel for ``argtypes`` compiled (never bound or launched) to answer what a
        served kernel's entry does not hold: LLVM IR, typing, PTX for another cc. Once per
        signature, counted in ``inspect_compiles``; its warnings were already said on load."""
        kernel = self._kcache_inspected.get(argtypes)
        if kernel is None:
            import warnings

            from . import dep_guard as _dep_guard
            with _compat.global_compiler_lock, warnings.catch_warnings(), \
                    _dep_guard.watched(self.py_func):  # notes the device functions it compiles
                warnings.simplefilter("ignore")
                kernel = _compat.compile_kernel(self.py_func, argtypes, self.targetoptions)
            self._kcache_inspected[argtypes] = kernel
            for counts in (self._kcache_counts, _process_counts):
                counts["inspect_compiles"] += 1
        return kernel

    def _kcache_put(self, store, key, entry, components):
        try:
            store.put(key, entry, components=components)
        except Exception as exc:
            self._kcache_store_failed(exc)

    def _kcache_record(self, store, **counters):
        try:
            store.record(**counters)
        except Exception as exc:
            self._kcache_store_failed(exc)

    def _kcache_store_failed(self, exc):
        self._kcache_counts["store_errors"] += 1
        _process_counts["store_errors"] += 1
        warn_once("dispatcher-store-error", f"kcache: cache store failed ({type(exc).__name__}: "
                  f"{cut(exc)}); kernels still compile and run")

    def _kcache_explain(self, store, components, argtypes):
        if not explain_enabled():
            return
        from .misses import explain_miss, one_line
        try:
            lines = explain_miss(store, components)
        except Exception as exc:  # explaining must never fail the call
            lines = [f"(cannot explain: {type(exc).__name__}: {cut(exc)})"]
        what = f"{self._kcache_name()} {_compat.signature_display(argtypes)}"
        # One line per miss (the differences joined): an entry cannot flood the log.
        self._kcache_log([f"{what}: miss: {one_line(lines) or 'no entry of this kernel'}"])

    def _kcache_log(self, lines):
        log_explanations(self, lines)


def adopt(dispatcher, options: Options):
    """Turn an existing ``CUDADispatcher`` (as made by ``numba.cuda.jit``) into a
    KCacheDispatcher in place (its class changes; nothing compiled yet is lost)."""
    if isinstance(dispatcher, KCacheDispatcher):
        return dispatcher
    dispatcher.__class__ = KCacheDispatcher
    dispatcher._kcache_setup(options)
    return dispatcher

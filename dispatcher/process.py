"""The process-wide state of kcache's dispatchers, in one object (:data:`STATE`): what every
module of ``kcache.dispatcher`` keeps for the life of the process (counters, the lookup being
timed, settings chosen by the program, the default store, the memos of the key), so that no
module keeps any in globals or class attributes. :class:`ProcessState` lists it by the module
that reads and writes each part.

Every lookup of an overload (``KCacheDispatcher.compile`` past the in-memory overloads) is
timed phase by phase with ``perf_counter_ns`` (a few hundred nanoseconds in all), so kcache's
own part of a hit is measured inside the call (:func:`own_phases`), not guessed from
differences of medians. Lookups run under the front-end's compiler lock: one clock at a time.
"""
from __future__ import annotations

import collections
import logging
import os
import threading
import time
import weakref

from kcache.warn import warn_once

explain_log = logging.getLogger("kcache.explain")

now = time.perf_counter_ns
#: Lookups remembered per process (one per kernel and signature).
PHASES_KEPT = 10_000


class LookupClock:
    """Nanoseconds of one lookup: ``key``, ``read`` (the store's get, single flight; on a miss
    it holds the compile), ``rebuild`` (the kernel object from the entry), ``load`` (binding
    it: the driver's module load), ``compile`` (the front-end's compile on a miss, and the
    compiler readied while waiting for another process's), ``total``."""

    __slots__ = ("kernel", "hit", "key", "read", "rebuild", "load", "compile", "total")

    def __init__(self, kernel: str):
        self.kernel, self.hit = kernel, False
        self.key = self.read = self.rebuild = self.load = self.compile = self.total = 0


class KeyMemo:
    """Key components remembered by what they are made from (``components``,
    ``numba_config``): ``shared``, ``(name, msgpack bytes)`` -> a component's
    ``CanonicalMap``; ``by_input``, ``(kind, inputs)`` -> the same; ``last_config``, the
    configuration module, its values and their component as last read; ``toolchain``, this
    process's toolchain versions (None: not known yet) and ``toolchain_map``, (those versions,
    their ``CanonicalMap``); ``bypass``, (the bypass settings' values, the reason they give);
    ``code_memo_tag``, the tag of remembered code analyses (fingerprint.remembered);
    ``library_names``, id of a library's object in target options -> (it, its name as the
    options memo packs it: components._by_library_name)."""

    __slots__ = ("shared", "by_input", "last_config", "toolchain", "toolchain_map", "bypass",
                 "code_memo_tag", "library_names")

    def __init__(self):
        self.shared: dict = {}
        self.by_input: dict = {}
        self.last_config: list = [None, (), None]
        self.toolchain: dict | None = None
        self.toolchain_map: tuple = (None, None)
        self.bypass: list = [None, None]
        self.code_memo_tag: str | None = None
        self.library_names: dict = {}


class FingerprintMemo:
    """Fingerprints remembered for one front-end's registries (``fingerprint``): ``results``,
    function -> its fingerprint and the checks that say it holds; ``dependencies``,
    device function -> its digest as reached by name; ``options``, dispatcher -> its target
    options' digest; ``named``, id of a library object -> (it, the digest of its name)."""

    __slots__ = ("results", "dependencies", "options", "named")

    def __init__(self):
        self.results = weakref.WeakKeyDictionary()
        self.dependencies = weakref.WeakKeyDictionary()
        self.options = weakref.WeakKeyDictionary()
        self.named: dict = {}


class ExtensionMemo:
    """What ``extensions`` has read: ``states``, a front-end's registries -> what was read of
    them (``extensions._State``), refreshed under ``lock``; and what it learnt of objects met:
    ``libraries`` (module name -> a library's?), ``library_types`` (types whose objects are a
    library's), ``library_classes``, ``metaclasses`` (the types of classes met),
    ``wrapping`` (type -> wraps a Python function?), ``own_module`` (types whose objects keep
    their own ``__module__``)."""

    __slots__ = ("states", "lock", "libraries", "library_types", "library_classes",
                 "metaclasses", "wrapping", "own_module")

    def __init__(self):
        self.states: dict = {}
        self.lock = threading.Lock()
        self.libraries: dict = {}
        self.library_types: set = {str, int, float, bool, type(None), bytes}
        self.library_classes: set = set()
        self.metaclasses: set = {type}
        self.wrapping: dict = {}
        self.own_module: set = set()


class GuardTables:
    """What ``dep_guard`` noted, under ``lock``: ``noted``, device dispatcher -> {id(compile
    result): (the result, the digest it was made under)}; ``first``, function with
    ``@overload`` implementations -> its digest when a kernel first reached it."""

    __slots__ = ("noted", "first", "lock")

    def __init__(self):
        self.noted = weakref.WeakKeyDictionary()
        self.first = weakref.WeakKeyDictionary()
        self.lock = threading.Lock()


class ProcessState:
    """What kcache's dispatchers share in one process, by the module that keeps it.

    Lookups (the front-end's dispatcher subclass, :func:`process_counts`, :func:`own_phases`):
    ``counts``, Counter of hits, misses, compiles, ...; ``clock``, the :class:`LookupClock` of
    the lookup being timed (a dummy outside one); ``phases``, the lookups done, as tuples in
    :class:`LookupClock` field order (text, flag and numbers, which the garbage collector stops
    tracking); ``explain``, misses are explained (``KCACHE_EXPLAIN``); ``compiler_readied``,
    the compiler was readied while another process compiled.

    The default store (``options.Options``, under ``store_lock``): ``default_store``, the
    ``kcache.Store`` (None: not opened yet; False: it could not be, warned); ``opened_early``:
    ``kcache.config.environment_snapshot`` when ``Options.prepare`` opened it before any
    kernel call (None otherwise); ``prepared``: ``Options.prepare`` has run.

    The transparent switch (``switch``, ``install``): ``mode``, "cache", "all" or None (not
    installed: no front-end serves kernels yet); ``options``, install()'s arguments (a dict
    until the first cached kernel makes them an ``Options``) or None; ``requested``,
    ``(options dict, mode)`` install() asked for, kept for front-ends imported later (None:
    not asked, or uninstalled); ``adopting``, per thread, the options of the ``kcache.jit``
    call under way (``adopting.options``). ``require_hit`` (``require``): what
    ``install(require_hit=...)`` chose, RAISE, WARN or "" (off); None: the variable decides.

    ``KCACHE_RECORD`` (``record``, under ``record_lock``): ``record_path``, the file recorded
    into (None: off); ``recorded``, the (kernel, argument types) already noted;
    ``record_skipped``, ``{"kernel signature": reason}`` of launches not recorded.

    Memos, each checked or keyed so that a change is seen: ``keys`` (:class:`KeyMemo`);
    ``fingerprints``, a front-end's registries -> its :class:`FingerprintMemo`;
    ``code_info``, code object -> its analysis (``fingerprint.code``: the same for every
    front-end); ``code_memos``, a writable root's path -> its code analyses remembered
    across processes (``fingerprint.remembered``); ``extensions`` (:class:`ExtensionMemo`);
    ``guard`` (:class:`GuardTables`).

    ``warm_runner``: in a ``kcache warm`` worker process, its task runner (``warm``)."""

    __slots__ = ("counts", "clock", "phases", "explain", "compiler_readied",
                 "store_lock", "default_store", "opened_early", "prepared",
                 "mode", "options", "requested", "adopting", "require_hit",
                 "record_lock", "record_path", "recorded", "record_skipped",
                 "keys", "fingerprints", "code_info", "code_memos", "extensions", "guard",
                 "warm_runner")

    def __init__(self, explain: bool = False):
        self.counts = collections.Counter()
        self.clock = LookupClock("")
        self.phases: list = []
        self.explain = explain
        self.compiler_readied = False
        self.store_lock = threading.Lock()
        self.default_store = None
        self.opened_early = None
        self.prepared = False
        self.mode = self.options = self.requested = self.require_hit = None
        self.adopting = threading.local()
        self.record_lock = threading.Lock()
        self.record_path: str | None = None
        self.recorded: set = set()
        self.record_skipped: dict = {}
        self.keys = KeyMemo()
        self.fingerprints: dict = {}
        self.code_info = weakref.WeakKeyDictionary()
        self.code_memos: dict = {}
        self.extensions = ExtensionMemo()
        self.guard = GuardTables()
        self.warm_runner = None

    def keep_phases(self, clock: LookupClock) -> None:
        """Remember ``clock``'s lookup (the first :data:`PHASES_KEPT` of the process)."""
        if len(self.phases) < PHASES_KEPT:
            self.phases.append(tuple(getattr(clock, f) for f in LookupClock.__slots__))

    def fingerprint_memo(self, registries) -> FingerprintMemo:
        """The :class:`FingerprintMemo` of a front-end's ``registries``
        (``Frontend.registries()``): a fingerprint made with one front-end's registries is
        never served to another's."""
        memo = self.fingerprints.get(registries)
        if memo is None:
            memo = self.fingerprints.setdefault(registries, FingerprintMemo())
        return memo


def _env_flag(name: str, otherwise: str) -> bool:
    """Environment variable ``name`` as every boolean setting reads it (1/0, true/false,
    yes/no, on/off); any other value is said once, with ``otherwise``, and reads False."""
    raw = os.environ.get(name, "")
    if not raw:  # the usual case: kcache's settings (kcache.config) are not imported for it
        return False
    from kcache.config.values import parse_bool
    from kcache.errors import ConfigError
    try:
        return parse_bool(raw, name)
    except ConfigError as exc:
        warn_once(f"{name}-setting", f"kcache: {exc}; {otherwise}")
        return False


def _explain_from_env() -> bool:
    """KCACHE_EXPLAIN (:func:`_env_flag`)."""
    return _env_flag("KCACHE_EXPLAIN", "miss explanations stay off")


#: The one state of this process.
STATE = ProcessState(explain=_explain_from_env())


def process_counts() -> dict:
    """Counters of this process over all KCacheDispatchers: ``hits``, ``misses``, ``compiles``
    (cached or not), ``uncached`` (compiles that could not be stored), ``fallbacks``,
    ``store_errors``, ``compile_seconds`` (seconds), ``bypasses`` (compiled instead of served
    because a numba dump or debug setting is on), ``inspect_compiles`` (compiles made only to
    inspect a served kernel)."""
    return dict(STATE.counts)


def own_phases() -> list:
    """kcache's own time in each overload lookup of this process, in order (at most the first
    10,000): dicts with ``kernel`` ("module:qualname"), ``hit`` (bool), and milliseconds
    ``key``, ``read`` (store read), ``rebuild``, ``load`` (the driver's module load, not
    kcache's), ``compile`` (the front-end's: on a miss, or readying the compiler while another
    process compiles), ``total`` (the lookup) and ``own``
    (total minus load and compile: what kcache itself spent)."""
    out = []
    for kernel, hit, *ns in STATE.phases:
        ms = {f: v / 1e6 for f, v in zip(LookupClock.__slots__[2:], ns)}
        out.append({"kernel": kernel, "hit": hit, **ms,
                    "own": ms["total"] - ms["load"] - ms["compile"]})
    return out


def recache_enabled() -> bool:
    """True when ``KCACHE_RECACHE`` is set (1, true, yes, on): each kernel looked up (a
    kcache dispatcher's miss of its in-memory overloads, ``compile_for``, ``kcache warm``) is
    compiled and its entry stored again, overwriting the one present (ccache's ``--recache``,
    ``SCCACHE_RECACHE``); counted as a miss and a compile, never a hit. Read at each lookup;
    any other value is said once and leaves it off."""
    return _env_flag("KCACHE_RECACHE", "cached entries are used")


def set_explain(enabled: bool) -> None:
    """Turn miss explanations on or off for this process (as ``KCACHE_EXPLAIN=1``)."""
    STATE.explain = bool(enabled)


def explain_enabled() -> bool:
    """True when misses are explained (``KCACHE_EXPLAIN=1`` or ``set_explain(True)``)."""
    return STATE.explain


def log_explanations(dispatcher, lines) -> None:
    """Log explain ``lines`` (logger ``kcache.explain``, WARNING) and keep them on
    ``dispatcher.kcache_explanations`` (any kernel dispatcher: ``compile_for`` explains misses
    of plain numba-cuda kernels too), where ``kcache.explain(dispatcher)`` reads them."""
    kept = dispatcher.__dict__.setdefault("kcache_explanations", [])
    for line in lines:
        kept.append(line)
        explain_log.warning("%s", line)


def kernel_name(dispatcher) -> str:
    """"module:qualname" of a dispatcher's Python function (the entry's ``kernel``)."""
    return f"{dispatcher.py_func.__module__}:{dispatcher.py_func.__qualname__}"

"""The process-wide state of kcache's dispatchers, in one object (:data:`STATE`): counters over
every kernel, the clock of the lookup being timed and the phases of those done, whether miss
explanations are on, whether the compiler was readied while another process compiled.

Every lookup of an overload (``KCacheDispatcher.compile`` past the in-memory overloads) is
timed phase by phase with ``perf_counter_ns`` (a few hundred nanoseconds in all), so kcache's
own part of a hit is measured inside the call (:func:`own_phases`), not guessed from
differences of medians. Lookups run under the front-end's compiler lock: one clock at a time.
"""
from __future__ import annotations

import collections
import logging
import os
import time

from kcache.config import ConfigError, parse_bool
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


class ProcessState:
    """What kcache's dispatchers share in one process.

    ``counts``: Counter of hits, misses, compiles, ... (:func:`process_counts`); ``clock``: the
    :class:`LookupClock` of the lookup being timed (a dummy outside one); ``phases``: the
    lookups done, as tuples in :class:`LookupClock` field order (text, flag and numbers, which
    the garbage collector stops tracking); ``explain``: misses are explained
    (``KCACHE_EXPLAIN``); ``compiler_readied``: the compiler was readied while another process
    compiled (``KCacheDispatcher._kcache_ready_compiler``)."""

    __slots__ = ("counts", "clock", "phases", "explain", "compiler_readied")

    def __init__(self, explain: bool = False):
        self.counts = collections.Counter()
        self.clock = LookupClock("")
        self.phases: list = []
        self.explain = explain
        self.compiler_readied = False

    def keep_phases(self, clock: LookupClock) -> None:
        """Remember ``clock``'s lookup (the first :data:`PHASES_KEPT` of the process)."""
        if len(self.phases) < PHASES_KEPT:
            self.phases.append(tuple(getattr(clock, f) for f in LookupClock.__slots__))


def _explain_from_env() -> bool:
    """KCACHE_EXPLAIN as every boolean setting reads (1/0, true/false, yes/no, on/off); any
    other value is said once and leaves explanations off."""
    try:
        return parse_bool(os.environ.get("KCACHE_EXPLAIN", ""), "KCACHE_EXPLAIN")
    except ConfigError as exc:
        warn_once("explain-setting", f"kcache: {exc}; miss explanations stay off")
        return False


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
    value = os.environ.get("KCACHE_RECACHE")
    if not value:
        return False
    try:
        return parse_bool(value, "KCACHE_RECACHE")
    except ConfigError as exc:
        warn_once("recache-setting", f"kcache: {exc}; cached entries are used")
        return False


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

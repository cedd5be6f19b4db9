"""``KCACHE_REQUIRE_HIT``: an image that must never compile.

``KCACHE_REQUIRE_HIT=1`` (or ``kcache.install(require_hit=True)``): a kernel call that would
compile raises :class:`kcache.CacheMissError` naming the kernel, its signature, the cc and why
no entry serves it (the nearest entry's differences, as ``KCACHE_EXPLAIN`` logs them, or why
the kernel is not cached). ``KCACHE_REQUIRE_HIT=warn``: warned once per kernel, then compiled.
:func:`check` is called by ``KCacheDispatcher._kcache_build``, the one place every compile of a
kernel call goes through (a miss, an uncacheable kernel, a broken or unreachable cache, an
entry the driver refused), so it holds for all of them; ``compile_for`` and ``kcache warm``
compile on their own path and are not affected.
"""
from __future__ import annotations

import os

from kcache import arch as _arch
from kcache.errors import CacheMissError
from kcache.text import cut
from kcache.warn import warn_once

from .process import STATE

ENV = "KCACHE_REQUIRE_HIT"
RAISE, WARN = "raise", "warn"
_OFF = {"", "0", "false", "no", "off"}
_ON = {"1", "true", "yes", "on"}


def set_mode(require_hit) -> None:
    """What ``kcache.install(require_hit=...)`` sets for this process: True (raise), "warn",
    False (off, whatever the variable says) or None (``KCACHE_REQUIRE_HIT`` decides).
    Raises ValueError for anything else."""
    if require_hit is None or isinstance(require_hit, bool):
        STATE.require_hit = None if require_hit is None else (RAISE if require_hit else "")
    elif require_hit == "warn":
        STATE.require_hit = WARN
    else:
        raise ValueError(f"require_hit must be True, False, 'warn' or None, not {require_hit!r:.60}")


def mode() -> str | None:
    """RAISE, WARN or None (compiles allowed). Read at each compile, so a program may set the
    variable before its first kernel call. A value other than 1/0/warn (and their spellings
    true/yes/on, false/no/off) is warned once and read as 1: the user asked for a guarantee."""
    if STATE.require_hit is not None:
        return STATE.require_hit or None
    raw = os.environ.get(ENV, "").strip().lower()
    if raw in _OFF:
        return None
    if raw == WARN:
        return WARN
    if raw not in _ON:
        warn_once("require-hit-value", f"kcache: {ENV}={raw[:40]!r} is not understood; accepted: "
                  "1 (a kernel call that would compile raises), warn, 0; read as 1")
    return RAISE


def check(frontend, dispatcher, argtypes) -> None:
    """Before ``dispatcher`` (a kcache dispatcher of ``frontend``, a
    ``frontends.base.Frontend``) compiles ``argtypes`` for a kernel call: raise
    CacheMissError (RAISE) or warn once per kernel (WARN); nothing when compiles are
    allowed."""
    how = mode()
    if how is None:
        return
    cc = frontend.current_cc()
    name, shown = dispatcher._kcache_name(), frontend.signature_display(argtypes)
    reason = _reason(frontend, dispatcher, argtypes, cc)
    where = f"{name} {shown} for cc {cc[0]}.{cc[1]} ({_arch.arch_name(cc)})"
    if how == WARN:
        warn_once(f"require-hit:{name}", f"kcache: {ENV}=warn: compiling {where}: {reason}")
        return
    raise CacheMissError(
        f"{where} would be compiled, and {ENV} forbids compiling: {reason}. Warm the cache for "
        f"it (kcache warm, kcache.compile_for) or unset {ENV}",
        kernel=name, signature=shown, cc=cc, reason=reason)


def _reason(frontend, dispatcher, argtypes, cc) -> str:
    """Why no entry serves this call: the kernel's uncached reason, else the nearest entry's
    differences (dispatcher.misses.explain_miss). Never raises."""
    uncached = dispatcher._kcache_uncached.get(argtypes)
    if uncached:
        return f"not cached: {uncached}"
    try:
        store = dispatcher._kcache.get_store()
        if store is None:
            return "not cached: no cache store"
        _key, components = dispatcher.kcache_key(argtypes, cc, store=store)
        from .misses import explain_miss, one_line
        lines = explain_miss(store, components, frontend)
        no_entry = "no entry of this kernel yet" in lines or lines[0].startswith("cannot read")
        return one_line(lines) if no_entry else "the nearest entry differs: " + one_line(lines)
    except Exception as exc:  # explaining must not hide the refusal itself
        return f"miss ({type(exc).__name__}: {cut(exc)})"

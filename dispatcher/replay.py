"""``kcache warm --replay``: after a CUDA toolkit or numba-cuda upgrade, compile again for the
current toolchain every (kernel, signature, cc) the cache holds from earlier toolchains.

An entry is stale when its ``components["toolchain"]`` disagrees with the current toolchain
(``kcache.toolchain.is_stale`` against ``components.toolchain_components()``, the versions
in every new key). Its signature comes from ``meta["sigspec"]`` (written with new entries),
else from inverting ``components["signature"]`` (``sigspec.from_signature_component``,
accepted only when exact). The kernel is found again by ``components["kernel"]``
("module:qualname", or among the module's kernels of that name: a factory's closure,
dispatcher/replay_find.py) in a worker, which checks that its code, options and links still
match the entry's components before compiling (dispatcher/warm.py); otherwise the entry is
listed as skipped with the reason. Nothing from an entry is executed: the signature text passes the
sigspec grammar, and a module is imported only if it was found in the TARGETs the user named
(dispatcher/discover.py); the kernels of other modules are listed, never imported.
"""
from __future__ import annotations

from kcache.entry.format import MAX_NAME
from kcache.text import QUOTE_LIMIT, cut
from kcache.toolchain import is_stale

from . import sigspec
from .aot import parse_cc
from .components import toolchain_components
from .options import toolchain_memo
from .sigfile import split_kernel
from .warm import Plan, Row

__all__ = ["plan_replay"]


#: Why a recorded kernel is listed, not replayed: warm imports only what the user named.
NO_TARGETS = ("no TARGET named: replay imports only modules found in the TARGETs "
              "(kcache warm --replay TARGET...)")
OUTSIDE_TARGETS = "not in the TARGETs named: replay imports only modules found in them"


def plan_replay(plan: Plan, store, ccs=None, modules=None) -> Plan:
    """Add to ``plan`` one task per stale (kernel, signature, cc, cache_key) of ``store``
    (every root, read-only layers too) whose kernel is defined in ``modules``, only for
    ``ccs`` when given ((major, minor) list). ``modules``: ``{module name: path entry}`` of
    the modules found in the TARGETs (``Plan.modules``); None when no TARGET was named.

    An entry's ``module:qualname`` is text from the cache (a bundle, a remote, another
    user's layer): a module is imported (by the workers) only when discovery found it in a
    TARGET, as plain ``kcache warm TARGET`` would import it. Every other stale entry, and
    with ``modules`` None all of them, is a skipped row naming the kernel; so is one that
    cannot be replayed, with the reason. Entries of ``modules``' kernels made by the
    current toolchain are counted in ``plan.current`` (warm already), and those kernels
    leave ``plan.without_signatures``. Reads headers only; imports nothing."""
    current = plan.frontend.key_toolchain(toolchain_components(toolchain_memo(store)))
    wanted = {tuple(cc[:2]) for cc in ccs} if ccs else None
    skipped: dict = {}
    known: set = set()
    for info in store.entries():
        components = info.components if isinstance(info.components, dict) else {}
        if not components or components.get("frontend", "numba-cuda") != plan.frontend.name:
            continue  # another front-end's kernel (kcache warm --frontend names the one)
        kernel = components.get("kernel") or info.kernel or "?"
        if not isinstance(kernel, str):  # a damaged or hostile entry's: no name to import
            kernel = cut(repr(kernel), 80)
        stale = is_stale(components, current)
        try:
            cc = _cc(components)
            if wanted is not None and tuple(cc[:2]) not in wanted:
                continue
            module = _module(kernel)
            if modules is None or module not in modules:
                if stale:
                    raise _Skip(NO_TARGETS if modules is None else OUTSIDE_TARGETS)
                continue
            known.add(kernel)
            if not stale:
                plan.current += 1
                continue
            plan.add(**_replayable(plan.frontend, info, components, kernel, cc,
                                   modules[module]))
        except _Skip as why:
            if stale:
                skipped.setdefault((kernel, info.signature, info.arch, str(why)), info.key)
    for (kernel, display, arch, reason), key in skipped.items():
        # listed, never used: an entry's text, escaped and cut (kcache.text)
        plan.rows.append(Row(kernel=cut(kernel), status="skipped", origin="replay",
                             display=None if display is None else cut(display),
                             arch=None if arch is None else cut(arch), key=key,
                             reason=cut(reason, 2 * QUOTE_LIMIT)))
    plan.without_signatures[:] = [k for k in plan.without_signatures if k not in known]
    return plan


class _Skip(Exception):
    """This entry cannot be replayed; ``str()`` says why."""


def _cc(components: dict) -> tuple:
    """The entry's cc from its ``target`` component ("sm_90a" -> (9, 0)); _Skip if unknown."""
    target = components.get("target") if isinstance(components.get("target"), dict) else {}
    try:
        return parse_cc(str(target.get("cc")))
    except ValueError:
        raise _Skip(f"unknown target {cut(repr(target.get('cc')))}") from None


def _module(kernel: str) -> str:
    """The module of ``"module:qualname"``; _Skip for a name warm could not import (or one
    longer than an entry's header may name a kernel: not a name kcache wrote)."""
    if len(kernel) > MAX_NAME:
        raise _Skip(f"kernel name of {len(kernel)} characters (more than {MAX_NAME})")
    try:
        return split_kernel(kernel, entry=True)[0]
    except ValueError:
        shown = repr(kernel) if len(kernel) <= 80 else f"{kernel[:60]!r}..."
        raise _Skip(f"kernel {shown} is not a module-level name warm can import") from None


def _replayable(frontend, info, components: dict, kernel: str, cc, path_entry) -> dict:
    """The ``Plan.add`` arguments that replay ``info`` (its module found in a TARGET, on
    ``sys.path`` with ``path_entry``); raises _Skip with the reason."""
    launch_config = components.get("launch_config")
    if launch_config not in (None, frontend.no_launch_config):
        raise _Skip("compiled for one launch configuration of a launch-config-sensitive "
                    "kernel; it is compiled again on its first launch")
    argtypes, text = _signature(frontend, info, components)
    cache_key = components.get("cache_key")
    return {"kernel": kernel, "path_entry": path_entry, "argtypes": argtypes, "sigspec_text": text,
            "eager_index": None, "cc": cc, "origin": "replay",
            "cache_key": cache_key if isinstance(cache_key, str) else None,
            "own_cache_key": True, "expect": components}


def _signature(frontend, info, components: dict) -> tuple:
    """(argument types, sigspec text) of an entry; _Skip when neither ``meta["sigspec"]``
    nor the ``signature`` component gives them exactly."""
    meta = info.meta if isinstance(info.meta, dict) else {}
    text = meta.get("sigspec")
    if text is not None:
        # Written by kcache from the very types of the entry: one that does not parse back
        # to them is a damaged or hostile entry, skipped (never evaluated).
        try:
            argtypes = sigspec.parse_signature(frontend, text)
        except ValueError as exc:
            raise _Skip(f"its recorded signature (meta.sigspec) is refused: {exc}") from None
        if frontend.signature_string(argtypes) != components.get("signature"):
            raise _Skip("its recorded signature (meta.sigspec) is not the one of its key")
        return argtypes, text
    argtypes = sigspec.from_signature_component(frontend, components.get("signature"))
    if argtypes is None:
        raise _Skip("no replayable signature")
    # The component text itself parses (a tuple of type reprs) when no void(...) form exists.
    return argtypes, sigspec.format_or_none(frontend, argtypes) or components["signature"]

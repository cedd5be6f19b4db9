"""``kcache warm --replay``: after a CUDA toolkit or numba-cuda upgrade, compile again for the
current toolchain every (kernel, signature, cc) the cache holds from earlier toolchains.

An entry is stale when its ``components["toolchain"]`` disagrees with the current toolchain
(``kcache.toolchain.is_stale`` against ``components.toolchain_components()``, the versions
in every new key). Its signature comes from ``meta["sigspec"]`` (written with new entries),
else from inverting ``components["signature"]`` (``sigspec.from_signature_component``,
accepted only when exact). The kernel is found again by ``components["kernel"]``
("module:qualname") in a worker, which checks that its code, options and links still match
the entry's components before compiling (dispatcher/warm.py); otherwise the entry is listed
as skipped with the reason. Nothing from an entry is executed: the signature text passes the
sigspec grammar, and the module imported is the one named, as a program would import it.
"""
from __future__ import annotations

from kcache.toolchain import is_stale

from . import _compat, sigspec
from .aot import parse_cc
from .components import toolchain_components
from .dispatcher import _toolchain_memo
from .sigfile import split_kernel
from .warm import Plan, Row

__all__ = ["plan_replay"]


def plan_replay(plan: Plan, store, ccs=None) -> Plan:
    """Add to ``plan`` one task per stale (kernel, signature, cc, cache_key) of ``store``
    (every root, read-only layers too), only for ``ccs`` when given ((major, minor) list).
    Entries that cannot be replayed become skipped rows with the reason. Reads headers
    only."""
    current = toolchain_components(_toolchain_memo(store))
    wanted = {tuple(cc[:2]) for cc in ccs} if ccs else None
    skipped: dict = {}
    for info in store.entries():
        components = info.components if isinstance(info.components, dict) else {}
        if not components or not is_stale(components, current):
            continue
        kernel = components.get("kernel") or info.kernel or "?"
        try:
            cc = _cc(components)
            if wanted is not None and tuple(cc[:2]) not in wanted:
                continue
            plan.add(**_replayable(info, components, kernel, cc))
        except _Skip as why:
            skipped.setdefault((kernel, info.signature, info.arch, str(why)), info.key)
    for (kernel, display, arch, reason), key in skipped.items():
        plan.rows.append(Row(kernel=kernel, status="skipped", origin="replay", display=display,
                             arch=arch, key=key, reason=reason))
    return plan


class _Skip(Exception):
    """This entry cannot be replayed; ``str()`` says why."""


def _cc(components: dict) -> tuple:
    """The entry's cc from its ``target`` component ("sm_90a" -> (9, 0)); _Skip if unknown."""
    target = components.get("target") if isinstance(components.get("target"), dict) else {}
    try:
        return parse_cc(str(target.get("cc")))
    except ValueError:
        raise _Skip(f"unknown target {target.get('cc')!r}") from None


def _replayable(info, components: dict, kernel: str, cc) -> dict:
    """The ``Plan.add`` arguments that replay ``info``; raises _Skip with the reason."""
    try:
        split_kernel(kernel)
    except ValueError:
        raise _Skip(f"kernel {kernel!r} is not a module-level name warm can import") from None
    launch_config = components.get("launch_config")
    if launch_config not in (None, _compat.NO_LAUNCH_CONFIG):
        raise _Skip("compiled for one launch configuration of a launch-config-sensitive "
                    "kernel; it is compiled again on its first launch")
    argtypes, text = _signature(info, components)
    cache_key = components.get("cache_key")
    return {"kernel": kernel, "path_entry": None, "argtypes": argtypes, "sigspec_text": text,
            "eager_index": None, "cc": cc, "origin": "replay",
            "cache_key": cache_key if isinstance(cache_key, str) else None,
            "own_cache_key": True, "expect": components}


def _signature(info, components: dict) -> tuple:
    """(argument types, sigspec text) of an entry; _Skip when neither ``meta["sigspec"]``
    nor the ``signature`` component gives them exactly."""
    meta = info.meta if isinstance(info.meta, dict) else {}
    text = meta.get("sigspec")
    if isinstance(text, str):
        try:
            argtypes = sigspec.parse_signature(text)
        except ValueError:
            argtypes = None  # not a sigspec (damaged or hostile): the component may still do
        if argtypes is not None and _compat.signature_string(argtypes) == components.get(
                "signature"):
            return argtypes, text
    argtypes = sigspec.from_signature_component(components.get("signature"))
    if argtypes is None:
        raise _Skip("no replayable signature")
    # The component text itself parses (a tuple of type reprs) when no void(...) form exists.
    return argtypes, sigspec.format_or_none(argtypes) or components["signature"]

"""Whether kcache can serve kernels with the installed numba-cuda: decided once per process.

Part of the numba-cuda bridge: kcache supports the numba-cuda versions
that have every internal the bridge uses, tested as features (imports, attributes,
parameters), never by version number; :data:`SUPPORTED` only says which releases those are.
Outside it (numba-cuda < 0.26, or a later one that dropped an internal), :func:`refusal` is one
line naming the installed and the supported versions; caching is then off for the process:
``kcache.jit`` is ``numba.cuda.jit``, ``install()`` / ``KCACHE_ENABLE`` leave numba-cuda alone
(one warning, :func:`warn_refusal`), ``compile_for`` raises ``KcacheError`` and ``kcache warm``
exits 1 with the line. This module imports ``numba.cuda`` (an ImportError without it, as
before) but never fails on a numba-cuda kcache cannot use.
"""
from __future__ import annotations

import functools

import numba.cuda  # noqa: F401  (importing kcache.dispatcher imports numba-cuda)

from kcache.warn import warn_once

#: The numba-cuda releases that have what kcache needs (docs/compat.md).
SUPPORTED = ">= 0.26, < 0.31"


@functools.cache
def refusal() -> str | None:
    """None when the installed numba-cuda has every internal kcache needs; else the one line
    that says it has not (installed version, :data:`SUPPORTED`, the first internals missing).
    Worked out once per process (imports the bridge's ``internals``)."""
    try:
        from . import internals  # every numba-cuda name the bridge imports: gone -> refused
        missing = internals.missing_internals()
    except Exception as exc:  # a numba-cuda module or name the bridge imports is gone
        missing = [" ".join(f"{type(exc).__name__}: {exc}".split())[:200]]
    if not missing:
        return None
    from kcache.toolchain import package_versions
    installed = package_versions().get("numba-cuda", "(version unknown)")
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return (f"numba-cuda {installed} is not supported by kcache (supported: numba-cuda "
            f"{SUPPORTED}; missing: {shown}); caching is off in this process")


def warn_refusal() -> bool:
    """Warn :func:`refusal`'s line (once per process, ``kcache.warn``) when there is one.
    Returns True when numba-cuda is refused (the caller then leaves it alone)."""
    reason = refusal()
    if reason is None:
        return False
    warn_once("numba-cuda-unsupported", reason)
    return True

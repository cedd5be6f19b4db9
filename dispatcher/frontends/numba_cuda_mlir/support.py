"""Whether kcache can serve kernels with the installed numba-cuda-mlir: decided once per
process.

Part of the numba-cuda-mlir bridge. Supported: numba-cuda-mlir >= 0.6, < 0.7 (:data:`SUPPORTED`),
checked by version number (its cache and dispatcher internals change between minor releases)
and by the features the bridge uses (``internals.missing_internals``). Outside it,
:func:`refusal` is one line naming the installed and the supported versions; caching is then
off for numba-cuda-mlir kernels in the process: ``kcache.jit(..., frontend="numba-cuda-mlir")``
is ``numba_cuda_mlir.cuda.jit``, ``install()`` / ``KCACHE_ENABLE`` leave numba-cuda-mlir alone
(one warning, :func:`warn_refusal`), ``compile_for`` raises ``KcacheError``. Importing this
module imports ``numba_cuda_mlir`` (an ImportError without it) but never fails on a version
kcache cannot use.
"""
from __future__ import annotations

import functools
import re

import numba_cuda_mlir

from kcache.warn import warn_once

#: The numba-cuda-mlir releases kcache supports (docs/mlir.md).
SUPPORTED = ">= 0.6, < 0.7"
_LOWEST, _BELOW = (0, 6), (0, 7)


def version_supported(text: str) -> bool:
    """True when version ``text`` (``"0.6.0"``, ``"0.6.1.dev2"``) is in :data:`SUPPORTED`."""
    match = re.match(r"\s*(\d+)\.(\d+)", str(text))
    if match is None:
        return False
    release = (int(match.group(1)), int(match.group(2)))
    return _LOWEST <= release < _BELOW


@functools.cache
def refusal() -> str | None:
    """None when kcache supports the installed numba-cuda-mlir; else the one line that says
    why not (installed version, :data:`SUPPORTED`, what is missing). Once per process."""
    installed = str(getattr(numba_cuda_mlir, "__version__", "(version unknown)"))
    if not version_supported(installed):
        missing = []
    else:
        try:
            from . import internals  # every name the bridge imports: gone -> refused
            missing = internals.missing_internals()
        except Exception as exc:  # a module or name the bridge imports is gone
            missing = [" ".join(f"{type(exc).__name__}: {exc}".split())[:200]]
        if not missing:
            return None
    shown = ""
    if missing:
        shown = "; missing: " + ", ".join(missing[:3]) + (
            f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return (f"numba-cuda-mlir {installed} is not supported by kcache (supported: "
            f"numba-cuda-mlir {SUPPORTED}{shown}); its kernels run uncached in this process")


def warn_refusal() -> bool:
    """Warn :func:`refusal`'s line (once per process, ``kcache.warn``) when there is one.
    Returns True when numba-cuda-mlir is refused (the caller then leaves it alone)."""
    reason = refusal()
    if reason is None:
        return False
    warn_once("numba-cuda-mlir-unsupported", reason)
    return True

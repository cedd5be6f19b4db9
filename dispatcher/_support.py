"""Old import path of the supported-version check: a plain re-export of
``kcache.dispatcher.frontends.numba_cuda.support``."""
from __future__ import annotations

from .frontends.numba_cuda.support import SUPPORTED, refusal, warn_refusal  # noqa: F401

"""Old import path of ``KCacheDispatcher`` and its helpers (``kcache.dispatcher.dispatcher``):
a plain re-export. The dispatcher lives in ``frontends/numba_cuda/dispatcher.py``; options,
keys and process state in ``options``, ``keying`` and ``process``."""
from __future__ import annotations

from .frontends.numba_cuda.dispatcher import KCacheDispatcher, KCacheStats, Lookup, adopt  # noqa: F401
from .keying import kernel_key  # noqa: F401
from .options import Options  # noqa: F401
from .process import (  # noqa: F401
    explain_enabled, kernel_name, log_explanations, own_phases, process_counts, set_explain)

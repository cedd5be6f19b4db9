"""The store: :class:`Store`, a facade over the tiers built from parts that receive what they
use (facade: settings, tiers, get/put, single flight; reading: the read path; remote: the
remote policy; listing; stats; maintenance; reports). See docs/design.md.

``kcache.store`` keeps the names it has always exported. Maintenance and the reports (``Stats``
among them) are imported when first asked for: a process that only reads entries never
imports them (tests/test_lazy_imports.py)."""
import importlib

from .facade import Store, probe_writable  # noqa: F401

#: name -> the module of this package that defines it, imported on first use
_LATER = {"DELTA_BATCH": ".maintenance", "EVICT_TARGET": ".maintenance",
          "CopyReport": ".reports", "NotRemoved": ".reports", "PruneReport": ".reports",
          "RemoveReport": ".reports", "VerifyReport": ".reports", "Stats": ".reports"}


def __getattr__(name: str):
    where = _LATER.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(where, __name__), name)

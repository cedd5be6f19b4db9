"""Bundles (``kcache export`` / ``import``, and a bundle file named as a read-only layer):
many entries in one file, read as a read-only tier. v3: the random-access format (written by
default, served in place by :mod:`.layer`); v2: the stream format, its writer and
:class:`BundleTier`; v1: reading kcache 0.1's tar bundles; common: what they share.

The names of v2 are this package's too, imported when first asked for: a process serving a
version-3 layer never imports the tar reader."""
import importlib


#: The package's modules: ``from . import v3`` asks this module for the name before it
#: imports the submodule, which must not import v2 (and v1's tarfile) on the way.
_MODULES = frozenset({"common", "layer", "v1", "v2", "v3"})


def __getattr__(name: str):
    if name.startswith("__") or name in _MODULES:
        raise AttributeError(name)
    return getattr(importlib.import_module(".v2", __name__), name)

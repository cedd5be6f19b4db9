"""Bundles (``kcache export`` / ``import``, and a bundle file named as a read-only layer):
many entries in one file, read as a read-only tier. v3: the random-access format (written by
default, served in place by :mod:`.layer`); v2: the stream format, its writer and
:class:`BundleTier`; v1: reading kcache 0.1's tar bundles; common: what they share.

The names of v2 are this package's too, imported when first asked for: a process serving a
version-3 layer never imports the tar reader."""
import importlib


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(importlib.import_module(".v2", __name__), name)

"""Bundles (``kcache export`` / ``import``): many entries in one file, read as a read-only
tier. v2: the current format, its writer and :class:`BundleTier`; v1: reading kcache 0.1's
tar bundles; common: what both readers share."""
from .v2 import *  # noqa: F401,F403

"""The read-only layers of a store (``readonly_dirs``): each path is a cache folder
(:class:`kcache.tiers.local.LocalTier`) or a bundle file served in place
(:class:`kcache.tiers.bundle.layer.BundleLayer`, imported only when a layer is a file), and
what each serves, for ``kcache stats``/``ls``/``dir``."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from ..disk import fsio
from ..disk.layout import BUCKET
from ..tiers.local import LocalTier
from ..warn import warn_once

#: What a layer whose path does not exist is told apart by (``describe``'s ``problem``).
MISSING = "does not exist: it serves nothing"


def make_layer(path: Path, trust: fsio.Trust, max_entry_size: int):
    """The layer of ``path``: a BundleLayer when it exists and is not a folder (following a
    symlink, which the layer then refuses: it is never opened through one; a FIFO or device is
    refused as no regular file, never opened), else a LocalTier (a folder, existing or not).
    A few ``stat`` calls; the bundle is opened on its first read. A path that does not exist
    (or a dangling symlink), or a folder with no ``v1/`` in it, is warned about once (a
    mistyped ``KCACHE_READONLY_DIRS``, or a bundle's folder named instead of the file, would
    serve nothing silently) and kept: a folder made there later serves."""
    if not os.path.exists(path):  # a dangling symlink too
        warn_once(f"missing-layer:{path}", f"kcache: the read-only layer {path} {MISSING} "
                  "(KCACHE_READONLY_DIRS / readonly_dirs)")
    elif os.path.isdir(path) and _without_bucket(path):
        # e.g. the folder of a bundle file named instead of the file: served nothing silently
        warn_once(f"empty-layer:{path}", f"kcache: the read-only layer {path} is a folder "
                  f"without kcache entries (no {BUCKET}/ in it): it serves nothing (a "
                  "bundle file is named itself, a cache folder by its root)")
    if os.path.exists(path) and not os.path.isdir(path):
        from ..tiers.bundle.layer import BundleLayer
        return BundleLayer(path, trust=trust, max_entry_size=max_entry_size)
    return LocalTier(path, writable=False, trust=trust)


def _without_bucket(path) -> bool:
    """True when folder ``path`` has no ``v1/``; False when it has one or that cannot be told
    (a folder this user cannot search: the trust check says why, in its own warning)."""
    try:
        return not stat.S_ISDIR(os.stat(os.path.join(path, BUCKET)).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False


def describe(layer, untrusted: dict, *, count: bool = False) -> dict:
    """What ``layer`` serves: ``{"path", "kind" ("directory" or "bundle"), "format_version"
    (a bundle's; null for a folder), "entries", "bytes" (a bundle's from its index; a folder's
    only with ``count``, a scan: else null), "signed", "problem" (why it is not used, or
    null)}``. ``untrusted``: the store's {name: why} of layers it does not use."""
    problem = untrusted.get(layer.name)
    if problem is None and not os.path.lexists(layer.name):
        problem = MISSING
    if hasattr(layer, "describe"):
        if problem is not None:
            return {"path": layer.name, "kind": "bundle", "format_version": None, "entries": 0,
                    "bytes": 0, "signed": None, "problem": problem}
        return layer.describe()
    entries = size = None
    if count and problem is None:
        found = [st.st_size for _key, _path, st in layer.scan()]
        entries, size = len(found), sum(found)
    return {"path": layer.name, "kind": "directory", "format_version": None, "entries": entries,
            "bytes": size, "signed": None, "problem": problem}

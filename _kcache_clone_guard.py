"""Installed with an editable install of kcache only (setup.py), imported at interpreter start
by ``kcache-clone-guard.pth``: ``import kcache`` finds the installed package even from the
folder holding a clone named ``kcache``.

An editable install is served by setuptools' finder at the end of ``sys.meta_path``. Before
it, the path finder meets the clone's folder in the current directory: a folder without an
``__init__.py``, which Python imports as an empty namespace package when no regular package
``kcache`` is on ``sys.path`` (the editable one is not on it). ``kcache.jit`` was then an
``AttributeError``. This finder, first on ``sys.meta_path``, asks the path finder for the
top-level name ``kcache`` only; when that would be a namespace package, it gives the spec the
later finders (the editable install's) give instead. A regular package ``kcache`` found on
``sys.path`` (the clone's own ``kcache/`` when Python runs inside the clone) is left to the
path finder, as before. Every other import costs one string comparison.
"""
import sys
from importlib.machinery import PathFinder

NAME = "kcache"


class CloneFolderFinder:
    """The meta path finder described above (a class: finders on sys.meta_path may be)."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname != NAME or path is not None:
            return None
        found = PathFinder.find_spec(fullname)
        if found is None or found.origin is not None or found.submodule_search_locations is None:
            return None  # a regular package or module, or nothing: the usual search decides
        for finder in list(sys.meta_path):
            if finder is cls or finder is PathFinder or not hasattr(finder, "find_spec"):
                continue
            try:
                spec = finder.find_spec(fullname, None, target)
            except Exception:  # another finder's trouble: the usual search goes on
                continue
            if spec is not None and spec.origin is not None:
                return spec
        return None


if not any(getattr(f, "__name__", None) == "CloneFolderFinder" for f in sys.meta_path):
    sys.meta_path.insert(0, CloneFolderFinder)

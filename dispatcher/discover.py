"""What ``kcache warm`` warms: modules from its TARGETs, and the kernels in them.

A TARGET is a ``.py`` file, a folder (walked), or a module or package name (a package is
walked too). A file is imported under the dotted name its package folders give it (the
folders up to the first one without ``__init__.py``; that one goes on ``sys.path``), the name
a program importing it uses, which is part of every kernel's key. Walking skips tests
(folders ``tests``/``test``, files ``test_*.py``, ``*_test.py``, ``conftest.py``) unless asked,
and always hidden folders, ``__pycache__``, virtual environments, ``setup.py`` and
``__main__.py`` (importing those runs a program).

Modules are imported inside :func:`import_context`: numba-cuda would compile eager
signatures (``@cuda.jit("void(float32[::1])")``) at import, which needs a GPU; there, they are
only noted (``Frontend.deferred_eager_compiles``), and device functions compiled at import see
a stand-in device (``Frontend.offline_target``). Each function takes the front-end
(``frontends.base.Frontend``) whose kernels it finds.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import os
import pkgutil
import sys
from pathlib import Path

from kcache.text import cut

from .process import kernel_name

__all__ = ["TargetError", "ModuleRef", "Kernel", "resolve_targets", "import_context",
           "import_module", "kernels_of", "other_kernels", "other_frontend_hint", "find_kernel",
           "OtherFrontendKernel", "reachable_name", "kernels_named",
           "is_test_name"]

_TEST_DIRS = frozenset({"tests", "test"})
_NEVER_FILES = frozenset({"setup.py", "__main__.py"})
_NEVER_DIRS = frozenset({"__pycache__", "site-packages", "node_modules"})


class TargetError(ValueError):
    """A TARGET that is no file, folder or module; ``str()`` is one line."""


@dataclasses.dataclass(frozen=True)
class ModuleRef:
    """A module to import: ``name`` (dotted), ``path_entry`` (folder to put on ``sys.path``
    first, or None), ``target`` (the TARGET it came from)."""
    name: str
    path_entry: str | None
    target: str


@dataclasses.dataclass(frozen=True)
class Kernel:
    """A module-level kernel dispatcher: ``name`` ("module:qualname", or "module:attr" where
    the qualname reaches no such kernel: :func:`_reachable_name`), ``module`` (dotted),
    ``attr`` (its name in the module), ``dispatcher``."""
    name: str
    module: str
    attr: str
    dispatcher: object


def is_test_name(name: str, is_dir: bool) -> bool:
    """True for a folder or file name that holds tests (skipped unless --include-tests)."""
    if is_dir:
        return name in _TEST_DIRS
    stem = name[:-3] if name.endswith(".py") else name
    return stem.startswith("test_") or stem.endswith("_test") or stem == "conftest"


# --- TARGET -> modules ------------------------------------------------------------------------

def resolve_targets(frontend, targets, cc, include_tests: bool = False) -> tuple[list, list]:
    """``targets`` (strings) -> ``(modules, skipped)``: ModuleRefs in order, duplicates
    dropped, and ``(what, reason)`` for files found by walking that cannot be imported by
    name. Finding a module by name imports its parent packages (inside
    :func:`import_context` for ``cc``). Raises :class:`TargetError` for a TARGET that is no
    file, folder or module."""
    modules, skipped, seen = [], [], set()
    for target in targets:
        for item in _resolve_one(frontend, target, include_tests, cc):
            if isinstance(item, tuple):
                skipped.append(item)
            elif item.name not in seen:
                seen.add(item.name)
                modules.append(item)
    return modules, skipped


def _resolve_one(frontend, target: str, include_tests: bool, cc):
    if not target.strip():
        raise TargetError(f"empty TARGET {target!r} (accepted: a .py file, a folder, or a "
                          "module or package name)")
    path = Path(target)
    if target.endswith(".py") or os.sep in target or path.exists():
        if path.is_file():
            if not target.endswith(".py"):
                raise TargetError(f"TARGET {target}: not a .py file")
            ref = _file_module(path.resolve(), target)
            return [ref if ref is not None else (target, _NOT_IMPORTABLE)]
        if path.is_dir():
            return list(_walk_folder(path.resolve(), target, include_tests))
        raise TargetError(f"TARGET {target}: no such file or folder")
    if not all(part.isidentifier() for part in target.split(".")):
        raise TargetError(f"TARGET {target!r}: no such file or folder, and not a module name "
                          "(accepted: a .py file, a folder, or a dotted module name)")
    with import_context(frontend, cc):
        return _module_target(target, include_tests)


_NOT_IMPORTABLE = "its name (or a folder above it) is not a Python identifier"


def _file_module(path: Path, target: str) -> ModuleRef | None:
    """The module a file is imported as: package folders up to the first without
    ``__init__.py``."""
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ModuleRef(".".join(parts), str(folder), target)


def _walk_folder(root: Path, target: str, include_tests: bool):
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if _walk_dir(Path(folder) / d, include_tests))
        for name in sorted(files):
            if not name.endswith(".py") or name in _NEVER_FILES:
                continue
            if not include_tests and is_test_name(name, False):
                continue
            path = Path(folder) / name
            ref = _file_module(path, target)
            yield ref if ref is not None else (str(path), _NOT_IMPORTABLE)


def _walk_dir(path: Path, include_tests: bool) -> bool:
    name = path.name
    if name.startswith(".") or name in _NEVER_DIRS or (path / "pyvenv.cfg").exists():
        return False
    return include_tests or not is_test_name(name, True)


def _module_target(name: str, include_tests: bool):
    _add_cwd()
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        spec = None
    except Exception:  # a parent package failed to import: reported when it is imported
        return [ModuleRef(name, None, name)]
    if spec is None:
        raise TargetError(f"TARGET {name!r}: no such file, folder or module (module names are "
                          "looked up on sys.path and the current folder)")
    refs = [ModuleRef(name, None, name)]
    for location in spec.submodule_search_locations or ():
        for info in pkgutil.walk_packages([location], prefix=name + ".", onerror=lambda _n: None):
            leaf_parts = info.name[len(name) + 1:].split(".")
            if leaf_parts[-1] in ("setup", "__main__"):
                continue
            if not include_tests and any(
                    is_test_name(p, True) or is_test_name(p, False) for p in leaf_parts):
                continue
            refs.append(ModuleRef(info.name, None, name))
    return refs


def _add_cwd() -> None:
    """Module-name TARGETs are found as ``python -m`` finds them: the current folder first."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


# --- importing and finding kernels -------------------------------------------------------------

@contextlib.contextmanager
def import_context(frontend, cc):
    """Import modules without a GPU: eager kernel signatures noted, not compiled; device
    functions compiled at import see a device of compute capability ``cc``."""
    with frontend.offline_target(cc), frontend.deferred_eager_compiles():
        yield


def import_module(frontend, ref: ModuleRef, cc):
    """Import ``ref`` (its ``path_entry`` put first on ``sys.path``) inside
    :func:`import_context`; returns the module. Raises whatever the import raises."""
    if ref.path_entry and ref.path_entry not in sys.path:
        sys.path.insert(0, ref.path_entry)
    with import_context(frontend, cc):
        return importlib.import_module(ref.name)


def kernels_of(frontend, module) -> list[Kernel]:
    """Module-level kernel dispatchers of ``frontend`` (``Frontend.is_kernel_dispatcher``:
    kcache's included) that are not device functions, defined in ``module`` itself (not
    imported into it), in definition order; one per dispatcher."""
    return _module_kernels(module, frontend.is_kernel_dispatcher)


def other_kernels(frontend, module) -> dict:
    """``{front-end name: [Kernel, ...]}``: the kernels of ``module`` (as :func:`kernels_of`
    finds them) that another front-end than ``frontend`` made, which a run for ``frontend``
    does not warm (``kcache warm --frontend`` names whose it warms)."""
    out: dict = {}
    for found in _module_kernels(module, lambda obj: _other_name(frontend, obj) is not None):
        out.setdefault(_other_name(frontend, found.dispatcher), []).append(found)
    return out


def _module_kernels(module, is_kernel) -> list[Kernel]:
    out, seen = [], set()
    for attr, obj in list(vars(module).items()):
        if not is_kernel(obj) or id(obj) in seen:
            continue
        if obj.targetoptions.get("device") or obj.py_func.__module__ != module.__name__:
            continue
        seen.add(id(obj))
        out.append(Kernel(_reachable_name(module, attr, obj), module.__name__, attr, obj))
    return out


def _reachable_name(module, attr: str, obj) -> str:
    """"module:qualname" of kernel ``obj`` (the entry's name), or "module:attr" where the
    qualname reaches no such kernel in ``module`` (a factory's closure bound to a module name,
    ``k = cuda.jit(sig)(impl)``): warm's tasks find their kernel by this name, in a worker too,
    and a signatures line can give it."""
    if _qualname_reaches(module, obj):
        return kernel_name(obj)
    return f"{module.__name__}:{attr}"


def _qualname_reaches(module, obj) -> bool:
    found = module
    for part in obj.py_func.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is obj


def reachable_name(dispatcher) -> str | None:
    """The name warm finds kernel ``dispatcher`` by, as :func:`kernels_of` names it
    ("module:qualname", else "module:attr" of the first name of its module holding it), or
    None: no name of its (imported) module holds it, e.g. a closure made at each call
    (``KCACHE_RECORD`` records under this name)."""
    module = sys.modules.get(dispatcher.py_func.__module__)
    if module is None:
        return None
    if _qualname_reaches(module, dispatcher):
        return kernel_name(dispatcher)
    for attr, obj in list(vars(module).items()):
        if obj is dispatcher:
            return f"{module.__name__}:{attr}"
    return None


def kernels_named(frontend, module, name: str) -> list[Kernel]:
    """The kernels of ``module`` (:func:`kernels_of`) whose entries are named ``name``
    ("module:qualname", an entry's ``kernel``): several where one factory made them
    (``add3 = make_adder(3.0)``, ``add4 = make_adder(4.0)``; their keys differ by the
    closure's values). ``kcache warm --replay`` finds an entry's kernel so."""
    return [k for k in kernels_of(frontend, module) if kernel_name(k.dispatcher) == name]


def _other_name(frontend, obj) -> str | None:
    """The name of the front-end other than ``frontend`` whose kernel dispatcher ``obj`` is,
    or None (told by its class: nothing of that front-end's bridge is imported)."""
    from .frontends.base import name_of_dispatcher
    name = name_of_dispatcher(obj)
    return name if name is not None and name != frontend.name else None


def other_frontend_hint(frontend, name: str) -> str:
    """What to do with a kernel of front-end ``name`` found by a run for ``frontend``."""
    return (f"a {name} kernel, not a {frontend.name} one: warm it with --frontend {name} "
            f"(this run warms {frontend.name} kernels)")


class OtherFrontendKernel(LookupError):
    """:func:`find_kernel` found a kernel of another front-end than the run's: another run
    (its ``--frontend``) warms it, so it is skipped, not a failure."""


def find_kernel(frontend, module, qualname: str):
    """The kernel dispatcher ``module.<qualname>`` (dotted attributes). Raises LookupError
    naming what was found instead (``qualname`` may be an entry's: quoted escaped and cut):
    :class:`OtherFrontendKernel` for another front-end's kernel."""
    obj = module
    shown = f"{module.__name__}:{cut(qualname)}"
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise LookupError(f"no kernel {shown} (no attribute {cut(repr(qualname))} in the "
                              "module)")
    if not frontend.is_kernel_dispatcher(obj):
        other = _other_name(frontend, obj)
        if other is not None:
            raise OtherFrontendKernel(f"{shown} is {other_frontend_hint(frontend, other)}")
        raise LookupError(f"{shown} is a {type(obj).__name__}, not a "
                          f"kernel made by {frontend.jit_name} or kcache.jit")
    if obj.targetoptions.get("device"):
        raise LookupError(f"{shown} is a device function; warm the "
                          "kernels that call it")
    return obj

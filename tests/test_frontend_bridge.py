"""The front-end seam (docs/dispatcher.md, "Layout"): the numba-cuda bridge implements every
member of ``frontends.base.Frontend``, and no module outside ``dispatcher/frontends/`` imports
numba-cuda (or numba) itself: every numba-cuda internal is in its bridge. The front-end-generic
modules are handed the front-end by their callers and import no bridge (issue 33); only the
entry points that pick the front-end import one, and only its ``bridge`` module."""
import ast
import inspect
from pathlib import Path

import pytest

pytest.importorskip("numba.cuda")

from kcache.dispatcher.frontends import base  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND  # noqa: E402

DISPATCHER = Path(base.__file__).resolve().parents[1]


def protocol_members() -> list:
    return sorted(n for n in vars(base.Frontend) if not n.startswith("_")) + \
        sorted(base.Frontend.__annotations__)


def test_the_numba_cuda_bridge_implements_the_frontend_protocol():
    for name in protocol_members():
        assert hasattr(FRONTEND, name), name
        want = getattr(base.Frontend, name, None)
        if callable(want):
            mine = inspect.signature(getattr(FRONTEND, name))
            theirs = inspect.signature(want)
            assert list(mine.parameters) == [p for p in theirs.parameters if p != "self"], name
    assert FRONTEND.name == "numba-cuda" and FRONTEND.refusal() is None
    import numba.cuda
    assert FRONTEND.numba() is numba.cuda
    assert FRONTEND.is_kernel_dispatcher(numba.cuda.jit(lambda a: None))
    assert FRONTEND.is_signature("void(float32[::1])") and not FRONTEND.is_signature(len)


def numba_imports(path: Path) -> list:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        found += [n for n in names if n == "numba" or n.startswith(("numba.", "numba_cuda"))]
    return found


def test_only_the_bridges_import_numba():
    outside = {str(p.relative_to(DISPATCHER)): numba_imports(p)
               for p in DISPATCHER.rglob("*.py") if "frontends" not in p.parts}
    # jit.py takes the front-end's public decorator from its bridge (Frontend.jit)
    assert {k: v for k, v in outside.items() if v} == {}


BRIDGE = "kcache.dispatcher.frontends.numba_cuda"
#: The entry points that pick the front-end (kcache.jit, install, the package's explain and
#: first-use checks, compile_for and check_cc, warm's workers): they may import the
#: ``frontends`` package (its selectors: by_name, default, of_dispatcher, imported, which
#: import a bridge's ``bridge`` module), nothing of a bridge itself.
ENTRY_POINTS = {"__init__.py", "install.py", "jit.py", "aot.py", "warm.py"}
#: Old import paths, kept as plain re-exports of the bridge's modules.
REEXPORTS = {"_compat.py", "_support.py", "dispatcher.py"}
#: Generic modules that still import the bridge's modules by name (issue 33, not done yet).
#: A module leaves this set when it takes the front-end from its caller.
PENDING: set = set()
FRONTENDS = "kcache.dispatcher.frontends"
SELECTORS = {FRONTENDS} | {f"{FRONTENDS}.{n}" for n in (
    "by_name", "default", "of_dispatcher", "imported", "package", "NAMES")}


def imported_names(path: Path) -> list:
    """Full names of what ``path`` imports, anywhere in it (inside functions too): a module,
    or ``module.name`` for ``from module import name``; relative imports resolved."""
    package = ["kcache", "dispatcher", *path.relative_to(DISPATCHER).parent.parts]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found += [f"{module}.{a.name}" for a in node.names]
    return found


def bridge_imports(path: Path) -> list:
    """What ``path`` imports of a bridge: any of ``frontends/`` but the Protocol (base)."""
    return [n for n in imported_names(path) if n.startswith(FRONTENDS)
            and not n.startswith(f"{FRONTENDS}.base")]


def generic_modules() -> dict:
    return {str(p.relative_to(DISPATCHER)): p for p in DISPATCHER.rglob("*.py")
            if "frontends" not in p.relative_to(DISPATCHER).parts}


def test_imported_names_resolve_relative_imports():
    names = imported_names(DISPATCHER / "frontends" / "numba_cuda" / "dispatcher.py")
    assert "kcache.dispatcher.record" in names  # from ... import record
    assert f"{BRIDGE}.bridge.FRONTEND" in names  # from .bridge import FRONTEND


def test_generic_modules_are_handed_the_front_end():
    modules = generic_modules()
    assert ENTRY_POINTS | REEXPORTS | PENDING <= set(modules)
    generic = {k: bridge_imports(p) + numba_imports(p) for k, p in modules.items()
               if k not in ENTRY_POINTS | REEXPORTS | PENDING}
    assert {k: v for k, v in generic.items() if v} == {}
    for name in ENTRY_POINTS:  # the selectors or FRONTEND only: never the internals
        assert all(n in SELECTORS or n.startswith(f"{BRIDGE}.bridge")
                   for n in bridge_imports(modules[name])), name
    # the pending list is honest: each of them still imports the bridge (else drop it there)
    assert [k for k in sorted(PENDING) if not bridge_imports(modules[k])] == []

"""The front-end seam (docs/dispatcher.md, "Layout"): the numba-cuda bridge implements every
member of ``frontends.base.Frontend``, and no module outside ``dispatcher/frontends/`` imports
numba-cuda (or numba) itself: every numba-cuda internal is in its bridge. The front-end-generic
modules are handed the front-end by their callers and import no bridge (issue 33); only the
entry points that pick the front-end import one, and only its ``bridge`` module. Every import
statement counts: inside functions and under ``TYPE_CHECKING`` too."""
import ast
import inspect
import pickle
import textwrap
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


BRIDGE = "kcache.dispatcher.frontends.numba_cuda"
FRONTENDS = "kcache.dispatcher.frontends"
#: The entry points that pick the front-end (kcache.jit, install, the package's compile_for,
#: check_cc, explain and first-use checks): they may import a bridge's ``bridge`` module (its
#: FRONTEND), nothing else of a bridge, and hand the front-end to the generic modules.
ENTRY_POINTS = {"__init__.py", "install.py", "jit.py"}
#: Old import paths, kept as plain re-exports of the bridge's modules.
REEXPORTS = {"_compat.py", "_support.py", "dispatcher.py"}


def imported_names(source: str, path: Path) -> list:
    """Full names of what ``source`` (the file ``path`` under dispatcher/) imports, anywhere
    in it (inside functions and under ``TYPE_CHECKING`` too): a module, or ``module.name`` for
    ``from module import name``; relative imports resolved."""
    package = ["kcache", "dispatcher", *path.relative_to(DISPATCHER).parent.parts]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found += [f"{module}.{a.name}" for a in node.names]
    return found


def bridge_imports(names: list) -> list:
    """What of ``names`` is a bridge: anything under ``frontends/`` but the Protocol (base)
    and the package itself (its docstring only)."""
    return [n for n in names if n.startswith(FRONTENDS + ".")
            and not n.startswith(f"{FRONTENDS}.base")]


def numba_names(names: list) -> list:
    return [n for n in names if n == "numba" or n.startswith(("numba.", "numba_cuda"))]


def generic_modules() -> dict:
    return {str(p.relative_to(DISPATCHER)): p for p in DISPATCHER.rglob("*.py")
            if "frontends" not in p.relative_to(DISPATCHER).parts}


def test_the_reader_counts_every_import_statement():
    """Imports inside functions, under TYPE_CHECKING and relative ones are all counted (a
    reader that missed them would pass every rule below)."""
    source = textwrap.dedent("""
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from .frontends.numba_cuda import signatures
        def f():
            import numba.cuda.types
            from .frontends.numba_cuda.bridge import FRONTEND
        from . import frontends
        from .frontends import base
    """)
    names = imported_names(source, DISPATCHER / "sigspec.py")
    assert bridge_imports(names) == [f"{BRIDGE}.signatures", f"{BRIDGE}.bridge.FRONTEND"]
    assert numba_names(names) == ["numba.cuda.types"]
    nested = imported_names("from ...keying import kernel_key\nfrom .bridge import FRONTEND",
                            DISPATCHER / "frontends" / "numba_cuda" / "dispatcher.py")
    assert nested == ["kcache.dispatcher.keying.kernel_key", f"{BRIDGE}.bridge.FRONTEND"]


def test_generic_modules_import_no_bridge_and_no_numba():
    """The front-end-generic modules take numba's modules from the front-end they are handed
    (issue 33: numba-cuda-mlir vendors its own numba); only the entry points that pick the
    front-end, and the old import paths, name a bridge."""
    modules = generic_modules()
    assert ENTRY_POINTS | REEXPORTS <= set(modules)
    names = {k: imported_names(p.read_text(), p) for k, p in modules.items()}
    generic = {k: bridge_imports(v) + numba_names(v) for k, v in names.items()
               if k not in ENTRY_POINTS | REEXPORTS}
    assert {k: v for k, v in generic.items() if v} == {}
    for name in ENTRY_POINTS:  # FRONTEND only: never a module with the front-end's internals
        assert all(n.startswith(f"{BRIDGE}.bridge") for n in bridge_imports(names[name])), name
    # jit.py hands numba.cuda.jit the program's function: the public decorator, no internal
    assert [k for k in sorted(ENTRY_POINTS | REEXPORTS) if numba_names(names[k])] == ["jit.py"]


def test_a_bridges_modules_are_handed_its_front_end():
    """Inside a bridge package only ``bridge`` and the package itself may name the bridge
    module: the rest are handed the Frontend object (the dispatcher by ``adopt``), since the
    bridge imports them."""
    for package in (DISPATCHER / "frontends").iterdir():
        if not (package / "bridge.py").is_file():
            continue
        own = f"{FRONTENDS}.{package.name}.bridge"
        users = [p.name for p in package.glob("*.py") if p.name != "bridge.py"
                 and any(n.startswith(own) for n in imported_names(p.read_text(), p))]
        assert users == [], package.name


def test_a_front_end_pickles_as_its_bridges_object():
    """kcache warm hands the front-end to its spawned workers: by reference, the same one."""
    assert pickle.loads(pickle.dumps(FRONTEND)) is FRONTEND


def test_a_kcache_dispatcher_keeps_its_front_end(tmp_path):
    """Made by kcache.jit, specialized, or rebuilt by numba-cuda's own pickling
    (``serialize.ReduceMixin``): the dispatcher holds the front-end it was handed."""
    import kcache
    from numba import cuda

    kernel = kcache.jit(_add_one, store=kcache.Store(tmp_path))
    assert kernel._kcache_frontend is FRONTEND
    again = pickle.loads(pickle.dumps(kernel))
    assert type(again) is type(kernel) and again._kcache_frontend is FRONTEND
    with pytest.raises(TypeError, match="needs frontend="):
        type(kernel)(_add_one, dict(kernel.targetoptions))
    assert cuda.jit(_add_one)._can_compile  # plain numba-cuda kernels untouched


def _add_one(a):
    a[0] += 1

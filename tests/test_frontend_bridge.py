"""The front-end seam (docs/dispatcher.md, "Layout"): the numba-cuda bridge implements every
member of ``frontends.base.Frontend``, and no module outside ``dispatcher/frontends/`` imports
numba-cuda (or numba) itself: every numba-cuda internal is in its bridge."""
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
    # jit.py hands numba.cuda.jit the program's function: the public decorator, no internal
    assert {k: v for k, v in outside.items() if v and k != "jit.py"} == {}
    assert outside["jit.py"] == ["numba"]

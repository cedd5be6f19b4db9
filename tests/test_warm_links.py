"""``kcache warm`` of ``link=`` kernels: a ``jit(cache=True, link=[...])`` kernel asked for the
front-end's own cache, which refuses kernels that link files, so a program under
``KCACHE_ENABLE`` compiles it and never reads an entry (docs/dispatcher.md): warm skips it
with that reason; a ``kcache.jit`` one, and one without ``cache=True`` (served under
``KCACHE_ENABLE=all``), are compiled."""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("numba.cuda")

from test_warm_cli import statuses, warm_json  # noqa: E402

# slow: kcache warm processes compile
pytestmark = pytest.mark.slow

ADD_ONE = Path(__file__).parent / "data" / "add_one.cu"

LINKED = '''
import os
import kcache
from {package} import cuda
LINK = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "add_one.cu")]
add_one = cuda.declare_device("add_one", "int32(int32)")

@cuda.jit("void(int32[::1])", cache=True, link=LINK)
def numba_cached(a):
    a[0] = add_one(a[0])

@kcache.jit("void(int32[::1])", link=LINK)
def kcache_jit(a):
    a[0] = add_one(a[0])

@cuda.jit("void(int32[::1])", link=LINK)
def uncached(a):
    a[0] = add_one(a[0])
'''


@pytest.mark.parametrize("frontend,package", [("numba-cuda", "numba"),
                                              ("numba-cuda-mlir", "numba_cuda_mlir")])
def test_a_cache_true_link_kernel_is_skipped_with_the_reason(tmp_path, frontend, package):
    pytest.importorskip(package if package != "numba" else "numba.cuda")
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copy(ADD_ONE, proj / "add_one.cu")
    (proj / "linked.py").write_text(textwrap.dedent(LINKED.format(package=package)))
    doc = warm_json(proj / "linked.py", "--cc", "9.0", "--frontend", frontend,
                    root=tmp_path / "cache", home=tmp_path / "home", cwd=proj)
    assert statuses(doc) == {"compiled": 2, "skipped": 1}, doc
    rows = {r["kernel"]: r for r in doc["results"]}
    assert rows["linked:kcache_jit"]["status"] == rows["linked:uncached"]["status"] == "compiled"
    skipped = rows["linked:numba_cached"]
    assert skipped["status"] == "skipped" and skipped["key"] is None
    assert f"{frontend}'s cache refuses kernels that link files" in skipped["reason"]

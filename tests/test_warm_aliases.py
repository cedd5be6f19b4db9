"""kcache warm on kernels bound to a module name other than their qualname: a factory's closure
(``add3 = make_adder(3.0)``) and ``k = cuda.jit(sig)(impl)``. Their qualname reaches no kernel
in the module, so warm names them by the attribute (module:attr), in its report and in a
signatures line; their entries keep the qualname, with the keys a running program computes.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba.cuda")

from test_warm_cli import env_for, kcache, statuses, warm_json  # noqa: E402

# slow: kcache warm processes compile; compat: tests/compat/run.sh runs it in every leg
pytestmark = [pytest.mark.slow, pytest.mark.compat]

ALIASED = '''
from numba import cuda

def make_adder(k):
    @cuda.jit("void(float32[::1])")
    def adder(a):
        a[0] += k
    return adder

add3 = make_adder(3.0)

def _impl(a):
    a[0] = 1

impl_k = cuda.jit("void(float32[::1])")(_impl)

def make_lazy():
    @cuda.jit
    def lazy(a):
        a[0] = 2
    return lazy

lazy_k = make_lazy()
'''

# the keys of the eager kernels as a program importing the module computes them
KEYS = '''
import json, sys
sys.path.insert(0, sys.argv[1])
from kcache.dispatcher import discover
from kcache.dispatcher.dispatcher import kernel_key
from kcache.dispatcher.frontends.numba_cuda import eager
from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
mod = discover.import_module(FRONTEND, discover.ModuleRef("aliased", None, "t"), (9, 0))
print(json.dumps(sorted(kernel_key(FRONTEND, k, sig, (9, 0), None, None)[0]
                        for k in (mod.add3, mod.impl_k) for sig in eager.eager_signatures(k))))
'''


def test_kernels_bound_under_another_name_are_warmed_by_that_name(tmp_path):
    proj, root, home = tmp_path / "proj", tmp_path / "cache", tmp_path / "home"
    proj.mkdir()
    (proj / "aliased.py").write_text(textwrap.dedent(ALIASED))
    (proj / "sigs").write_text("aliased:lazy_k  void(float32[::1])\n")
    doc = warm_json(proj / "aliased.py", "--signatures", proj / "sigs", "--cc", "9.0",
                    root=root, home=home, cwd=proj)
    assert statuses(doc) == {"compiled": 3}, doc
    assert sorted(r["kernel"] for r in doc["results"]) == [
        "aliased:add3", "aliased:impl_k", "aliased:lazy_k"]
    assert doc["without_signatures"] == []
    proc = subprocess.run([sys.executable, "-c", KEYS, str(proj)], capture_output=True,
                          text=True, env=env_for(home), timeout=300)
    assert proc.returncode == 0, proc.stderr
    eager = sorted(r["key"] for r in doc["results"] if r["kernel"] != "aliased:lazy_k")
    assert eager == json.loads(proc.stdout)
    listed = kcache("ls", "--json", root=root, home=home)
    names = sorted(e["kernel"] for e in json.loads(listed.stdout)["entries"])
    assert names == ["aliased:_impl", "aliased:make_adder.<locals>.adder",
                     "aliased:make_lazy.<locals>.lazy"]

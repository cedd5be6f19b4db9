"""A numba-cuda kcache does not support: one line, caching off, the program runs uncached.

Each check runs in a child process (the decision is made once per process): with numba-cuda
0.24's ``_Kernel._rebuild`` (no ``shared_memory_carveout``) put in place of the installed one
("simulate"), with a module the bridge imports gone ("simulate-module", as a later
numba-cuda could be), and with the installed numba-cuda as it is when kcache does not
support it ("installed": the compatibility leg with numba-cuda 0.24, tests/compat/run.sh;
skipped where it is supported).
"""
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba.cuda")

from kcache.dispatcher import _support  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda import internals as _nc_internals

pytestmark = pytest.mark.compat  # runs in every leg of tests/compat/run.sh (docs/compat.md)

#: What a child runs first: in "simulate" mode, numba-cuda 0.24's _Kernel._rebuild.
_SIMULATE = textwrap.dedent("""\
    import sys
    if sys.argv[1] == "simulate":
        from numba.cuda import dispatcher as _d

        def _rebuild(cls, cooperative, name, signature, codelibrary, debug, lineinfo,
                     call_helper, extensions):
            raise AssertionError("kcache rebuilt a kernel")
        _d._Kernel._rebuild = classmethod(_rebuild)
    elif sys.argv[1] == "simulate-module":
        import numba.cuda
        sys.modules["numba.cuda.core.callconv"] = None  # importing it now raises ImportError
    """)

# KCACHE_ENABLE's hook, kcache.jit (both forms), install(), compile_for, uninstall(): the
# warnings they give and what the program gets.
_LIBRARY = _SIMULATE + textwrap.dedent("""\
    import json, os, warnings

    from numba import cuda
    from numba.cuda.dispatcher import CUDADispatcher

    enable, init = CUDADispatcher.__dict__["enable_caching"], CUDADispatcher.__dict__["__init__"]

    def body(a):
        a[0] = 1

    out = {}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        os.environ["KCACHE_ENABLE"] = "all"
        import kcache._hook  # numba.cuda is imported: installs at once, as it would at start
        out["hook"] = type(cuda.jit(body)).__name__
        import kcache
        import kcache.dispatcher
        k = kcache.jit(body)
        out["jit"] = [type(k).__name__, type(k._cache).__name__,
                      k.targetoptions == cuda.jit(body).targetoptions]
        k2 = kcache.jit(lineinfo=True, cache_key="r1")(body)
        out["jit_options"] = [type(k2).__name__,
                              k2.targetoptions == cuda.jit(lineinfo=True)(body).targetoptions]
        kcache.install("all")
        out["installed"] = kcache.dispatcher.installed()
        out["untouched"] = (CUDADispatcher.__dict__["enable_caching"] is enable
                            and CUDADispatcher.__dict__["__init__"] is init)
        out["numba_cache"] = type(cuda.jit(cache=True)(body)._cache).__name__
        try:
            kcache.compile_for(k, "void(float32[::1])", cc="9.0")
        except kcache.KcacheError as exc:
            out["compile_for"] = [type(exc).__name__, str(exc)]
        kcache.uninstall()
    out["warnings"] = [[w.category.__name__, str(w.message)] for w in seen
                       if "kcache" in w.category.__module__ or "kcache" in str(w.message)]
    from kcache.dispatcher.frontends.numba_cuda import support
    out["line"] = support.refusal()
    out["cache"] = os.listdir(os.environ["KCACHE_DIR"]) if os.path.exists(os.environ["KCACHE_DIR"]) else []
    print(json.dumps(out))
    """)

_WARM = _SIMULATE + textwrap.dedent("""\
    from kcache.cli.main import main
    sys.exit(main(["warm", "--cc", "9.0", sys.argv[2]]))
    """)

_KERNELS = textwrap.dedent("""\
    from numba import cuda

    @cuda.jit("void(float32[::1])")
    def k(a):
        a[0] = 1
    """)

LINE = re.compile(r"numba-cuda (\S+) is not supported by kcache \(supported: numba-cuda "
                  r">= 0\.26, < 0\.31; missing: (.+)\); caching is off in this process")


def _child(tmp_path, script, *args):
    path = tmp_path / "child.py"  # a file: numba-cuda's own cache (cache=True) needs one
    path.write_text(script)
    env = dict(os.environ, KCACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, str(path), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(params=["simulate", "simulate-module", "installed"])
def mode(request):
    if request.param == "installed" and _support.refusal() is None:
        pytest.skip("the installed numba-cuda is supported (the compatibility leg with an "
                    "unsupported one runs this)")
    return request.param


def _check_line(line, mode):
    from kcache.toolchain import package_versions
    match = LINE.fullmatch(line or "")
    assert match, line
    assert match[1] == package_versions()["numba-cuda"]
    if mode == "simulate":
        assert "_Kernel._rebuild(shared_memory_carveout=)" in match[2]
    if mode == "simulate-module":
        assert "numba.cuda.core.callconv" in match[2]


def test_unsupported_numba_cuda_is_one_warning_and_kernels_run_uncached(tmp_path, mode):
    proc = _child(tmp_path, _LIBRARY, mode)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    _check_line(out["line"], mode)
    assert out["warnings"] == [["KcacheWarning", out["line"]]]  # one, for hook, jit, install
    assert out["hook"] == "CUDADispatcher"  # KCACHE_ENABLE=all adopted nothing
    assert out["jit"] == ["CUDADispatcher", "NullCache", True]  # numba.cuda.jit's, uncached
    assert out["jit_options"] == ["CUDADispatcher", True]
    assert out["installed"] is None and out["untouched"] is True
    assert out["numba_cache"] == "CUDACache"  # cache=True: numba-cuda's own cache, as without
    assert out["compile_for"] == ["KcacheError", out["line"]]
    assert out["cache"] == []  # nothing written


def test_unsupported_numba_cuda_warm_says_one_line_and_exits_1(tmp_path, mode):
    (tmp_path / "kernels.py").write_text(_KERNELS)
    proc = _child(tmp_path, _WARM, mode, str(tmp_path / "kernels.py"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stdout == ""
    [said] = proc.stderr.splitlines()
    assert said.startswith("kcache: ")
    _check_line(said[len("kcache: "):], mode)
    assert not (tmp_path / "cache").exists()


def test_feature_tests_agree_with_the_supported_releases():
    """The bridge tests features; the releases docs/compat.md names as supported must pass
    them, and those before must not (a later release is judged by its features alone)."""
    from packaging.version import Version  # numba-cuda's own dependency

    from kcache.toolchain import package_versions
    installed = Version(package_versions()["numba-cuda"])
    if installed >= Version("0.31"):
        pytest.skip(f"numba-cuda {installed} is newer than the releases kcache was tested with")
    if installed >= Version("0.26"):
        assert _nc_internals.missing_internals() == [] and _support.refusal() is None
    else:
        assert _nc_internals.missing_internals() and _support.refusal() is not None


def test_missing_internals_names_each_one(monkeypatch):
    def _rebuild(cls, cooperative, name, signature, codelibrary, debug, lineinfo,
                 call_helper, extensions):
        raise AssertionError
    monkeypatch.setattr(_nc_internals.Kernel, "_rebuild", classmethod(_rebuild))
    monkeypatch.delattr(_nc_internals.CUDACodeLibrary, "get_lto_ptx")
    missing = _nc_internals.missing_internals()
    assert "_Kernel._rebuild(shared_memory_carveout=)" in missing
    assert "CUDACodeLibrary.get_lto_ptx" in missing


@pytest.mark.parametrize("present, missing", [
    ((True, True), []),  # numba-cuda 0.30
    ((False, False), []),  # 0.26-0.29: no launch-configuration-sensitive kernels at all
    ((True, False), ["second"]),  # some only: kcache could not key such a kernel
])
def test_launch_configurations_are_all_or_nothing(monkeypatch, present, missing):
    monkeypatch.setattr(_nc_internals, "_LAUNCH_CONFIG_FEATURES", dict(zip(("first", "second"), present)))
    assert [m for m in _nc_internals.missing_internals() if m in ("first", "second")] == missing

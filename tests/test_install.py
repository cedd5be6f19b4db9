"""Transparent mode: kcache.install()/uninstall() and the KCACHE_ENABLE hook."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("numba.cuda")

pytestmark = pytest.mark.compat  # runs in every leg of tests/compat/run.sh (docs/compat.md)

from numba import cuda  # noqa: E402

from kcache.dispatcher import KCacheDispatcher, install, installed, uninstall  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda import internals as _nc_internals
from kcache.dispatcher.frontends.numba_cuda import patching as _nc_patching

REPO = Path(__file__).resolve().parents[1]
# The line of kcache-hook.pth (installed into site-packages by setup.py).
PTH_LINE = 'import os; os.environ.get("KCACHE_ENABLE") and __import__("kcache._hook")'


@pytest.fixture
def restore():
    yield
    uninstall()


def _kernel(**kw):
    def body(a):
        a[0] = 1
    return cuda.jit(**kw)(body)


def test_install_cache_mode_routes_cache_true_only(restore):
    install()
    assert _nc_patching.is_patched()
    assert installed() == "cache"
    assert isinstance(_kernel(cache=True), KCacheDispatcher)
    plain = _kernel()
    assert type(plain) is _nc_internals.CUDADispatcher
    device = cuda.jit(device=True, cache=True)(lambda x: x)
    assert type(device) is _nc_internals.CUDADispatcher
    assert type(device._cache).__name__ == "NullCache"  # no numba-cuda pickle cache either
    uninstall()
    assert installed() is None
    restored = _nc_internals.CUDADispatcher.__dict__["enable_caching"]
    assert not _nc_patching.is_patched()
    assert restored.__qualname__ == "CUDADispatcher.enable_caching"  # numba-cuda's own
    again = _kernel(cache=True)
    assert type(again) is _nc_internals.CUDADispatcher
    assert type(again._cache).__name__ == "CUDACache"


def test_install_all_mode_routes_every_kernel(restore):
    install("all", cache_key="r1")
    k = _kernel()
    assert isinstance(k, KCacheDispatcher) and k._kcache.cache_key == "r1"
    assert isinstance(_kernel(cache=True), KCacheDispatcher)
    assert type(cuda.jit(device=True)(lambda x: x)) is _nc_internals.CUDADispatcher


def test_kcache_jit_keeps_its_own_settings_under_mode_all(restore, tmp_path):
    import kcache
    install("all", cache_key="r1")
    mine = kcache.Store(tmp_path / "mine")
    k = kcache.jit(store=mine, cache_key="mine")(lambda a: None)
    assert k._kcache.store is mine and k._kcache.cache_key == "mine"
    off = kcache.jit(cache=False)(lambda a: None)
    assert off._kcache.cache is False  # numba.cuda.jit(cache=True) inside does not turn it on
    assert not k._kcache_numba_cache and not off._kcache_numba_cache  # kcache.jit's rules
    assert _kernel(cache=True)._kcache_numba_cache  # numba.cuda.jit(cache=True): numba-cuda's
    assert not _kernel()._kcache_numba_cache


def test_install_rejects_unknown_mode(restore):
    with pytest.raises(ValueError, match="mode must be one of"):
        install("sometimes")
    assert installed() is None


def test_kcache_jit_does_not_leak_into_numba_jit():
    from kcache.dispatcher import jit
    assert isinstance(jit(lambda a: None), KCacheDispatcher)
    k = _kernel(cache=True)  # patch applied by kcache.jit, but inert outside it
    assert type(k) is _nc_internals.CUDADispatcher and type(k._cache).__name__ == "CUDACache"


_CHILD = textwrap.dedent("""
    import sys
    pth_line = sys.argv[1]
    exec(pth_line)                      # what site.py does with kcache-hook.pth
    hooked = "kcache._hook" in sys.modules
    from numba import cuda
    def body(a):
        a[0] = 1
    cached = type(cuda.jit(cache=True)(body)).__name__
    plain = type(cuda.jit(body)).__name__
    print(hooked, cached, plain, "kcache.dispatcher" in sys.modules)
""")


def _run_child(tmp_path, env):
    # A file, not -c: numba-cuda's own cache (cache=True without kcache) needs a source file.
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    return subprocess.run([sys.executable, str(script), PTH_LINE], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("value, expect", [
    (None, "False CUDADispatcher CUDADispatcher False"),
    ("0", "True CUDADispatcher CUDADispatcher False"),  # hook imported, does nothing
    ("1", "True KCacheDispatcher CUDADispatcher True"),
    ("all", "True KCacheDispatcher KCacheDispatcher True"),
])
def test_kcache_enable_hook(value, expect, tmp_path):
    env = dict(os.environ, KCACHE_DIR=str(tmp_path))
    env.pop("KCACHE_ENABLE", None)
    if value is not None:
        env["KCACHE_ENABLE"] = value
    proc = _run_child(tmp_path, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[-2] == expect


@pytest.mark.slow
def test_kcache_enable_typo_is_one_message_not_a_crash(tmp_path):
    env = dict(os.environ, KCACHE_ENABLE="yes please", KCACHE_DIR=str(tmp_path))
    proc = _run_child(tmp_path, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "KCACHE_ENABLE='yes please' is not understood" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.split()[1] == "CUDADispatcher"


@pytest.mark.slow
def test_hook_installs_when_numba_cuda_already_imported(tmp_path):
    code = ("import numba.cuda, os; os.environ['KCACHE_ENABLE'] = 'all'; import kcache._hook;"
            "from kcache.dispatcher import installed; print(installed())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, KCACHE_DIR=str(tmp_path)))
    assert proc.stdout.strip() == "all", proc.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("first", ["import kcache; kcache.jit",
                                   "import kcache.dispatcher.warm"])  # as kcache warm does
def test_hook_waits_when_kcache_imports_numba_cuda_itself(tmp_path, first):
    """kcache.dispatcher imports numba.cuda while it is itself being imported: the hook
    installs once the package is complete (it once tried at once and failed: 'partially
    initialized module')."""
    code = ("import os, sys; os.environ['KCACHE_ENABLE'] = 'all'; import kcache._hook\n"
            f"try:\n    {first}\nexcept SystemExit:\n    pass\n"
            "from kcache.dispatcher import installed; print(installed(), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, KCACHE_DIR=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == ["all"], proc.stderr[-2000:]


def test_installed_pth_file_when_present(tmp_path):
    """With kcache-hook.pth installed in site-packages, the variable alone is enough."""
    import site
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    if not any((Path(d) / "kcache-hook.pth").exists() for d in dirs):
        pytest.skip("kcache-hook.pth is not installed here (reinstall kcache with setup.py)")
    code = "import sys; print('kcache._hook' in sys.modules)"
    env = dict(os.environ, KCACHE_ENABLE="1", KCACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "True", out.stderr

"""numba / numba-cuda configuration in the key: every variable classified, the code-changing
ones (NRT first) change the key, in-process and across processes."""
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

pytest.importorskip("numba.cuda")

import kcache  # noqa: E402
from kcache.dispatcher import numba_config  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda import signatures as _nc_signatures
from kcache.dispatcher.components import kernel_components  # noqa: E402
from kcache.dispatcher.misses import diff_components  # noqa: E402

from fixtures_keys import SIG, key_in_subprocess, write_modules  # noqa: E402

pytestmark = pytest.mark.compat  # runs in every leg of tests/compat/run.sh (docs/compat.md)

REPO = Path(__file__).resolve().parents[1]
TOOLCHAIN = {"numba-cuda": "0.30.4", "kcache-format": "1"}


def _config_modules():
    """Every module numba-cuda reads settings from (one object when numba is installed)."""
    import numba.cuda.core.config as cuda_config

    modules = {id(cuda_config): cuda_config, id(_nc_signatures.numba_config()): _nc_signatures.numba_config()}
    try:
        import numba.core.config as core_config
    except ImportError:
        core_config = None
    if core_config is not None:
        modules[id(core_config)] = core_config
    return list(modules.values())


def test_every_config_variable_of_the_installed_numba_is_classified():
    # numba-cuda adds variables when these modules are imported; the bridge imports them.
    import numba.cuda.cudadrv.nvrtc  # noqa: F401
    import numba.cuda.debuginfo  # noqa: F401
    import numba.cuda.memory_management.nrt  # noqa: F401

    for module in _config_modules():
        names = numba_config.config_variables(module)
        assert len(names) > 50, names  # the listing itself works
        missing = numba_config.unclassified(module)
        assert missing == [], (
            f"{module.__name__} has configuration variables kcache has not classified: "
            f"{missing}. Decide for each whether it changes generated code or linking, and add "
            "it to IN_KEY or NOT_IN_KEY in dispatcher/numba_config.py and to the table in "
            "docs/keys.md")


def test_a_new_variable_is_reported():
    fake = types.ModuleType("fakeconfig")
    fake.CUDA_ENABLE_NRT = False
    fake.CUDA_SOMETHING_NEW = 1
    fake._private = 2
    fake.lower = 3
    assert numba_config.unclassified(fake) == ["CUDA_SOMETHING_NEW"]


def test_tables_are_disjoint_and_in_the_docs():
    tables = (numba_config.IN_KEY, numba_config.NOT_IN_KEY, numba_config.WARNINGS_IN_KEY,
              numba_config.IN_KEY_WHEN_CHANGED)
    names = [name for table in tables for name in table]
    assert len(names) == len(set(names))
    assert all(numba_config.IN_KEY.values()) and all(numba_config.NOT_IN_KEY.values())
    assert all(why for _default, why in numba_config.IN_KEY_WHEN_CHANGED.values())
    doc = (REPO / "docs" / "keys.md").read_text()
    for name in names:
        assert f"`{name}`" in doc, name


# The variables some numba versions of the supported range (0.60-0.68) have beyond those of
# the numba this suite may run with: classified whichever numba is installed.
@pytest.mark.parametrize("name", ["USE_LEGACY_TYPE_SYSTEM", "CAPTURED_ERRORS",
                                  "USE_RVSDG_FRONTEND"])
def test_the_variables_of_older_numbas_are_classified(name):
    assert numba_config.unclassified(types.SimpleNamespace(**{name: 0})) == []


@pytest.mark.parametrize("name, default, changed", [
    ("USE_LEGACY_TYPE_SYSTEM", 1, 0), ("CAPTURED_ERRORS", "new_style", "old_style")])
def test_a_switch_is_in_the_key_only_away_from_its_default(monkeypatch, name, default, changed):
    kern = _kernel()
    config = _nc_signatures.numba_config()
    monkeypatch.delattr(config, name, raising=False)
    absent = _components(kern)
    assert name not in absent["config"]
    monkeypatch.setattr(config, name, default, raising=False)
    assert kcache.make_key(_components(kern)) == kcache.make_key(absent)
    monkeypatch.setattr(config, name, changed, raising=False)
    away = _components(kern)
    assert away["config"][name] == changed
    assert kcache.make_key(away) != kcache.make_key(absent)
    assert diff_components(absent, away) == [f"numba config {name} '(unset)' -> {changed!r}"]


def _kernel():
    from numba import cuda

    @cuda.jit(device=True)
    def twice(x):
        return 2 * x

    @cuda.jit
    def kern(out, a):
        out[0] = twice(a[0])

    return kern


def _components(kern):
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
    return kernel_components(kern, frontend=FRONTEND, signature=SIG, cc=(9, 0),
                             targetoptions=kern.targetoptions, toolchain=TOOLCHAIN)


CHANGED = {
    "CUDA_ENABLE_NRT": True, "DEBUG_NRT": 1, "FORCE_CUDA_CC": (8, 0), "OPT": 0,
    "CUDA_DEBUG_POLY": False, "CUDA_DEBUG_POLY_USE_TYPED_CONST": False,
    "CUDA_NVRTC_EXTRA_SEARCH_PATHS": "/opt/inc", "CUDA_INCLUDE_PATH": "/opt/cuda/include",
}


def test_each_code_changing_variable_changes_the_key(monkeypatch):
    assert set(CHANGED) == set(numba_config.IN_KEY)
    kern = _kernel()
    config = _nc_signatures.numba_config()
    base = _components(kern)
    for name, value in CHANGED.items():
        if isinstance(value, bool) and base["config"][name] is value:
            value = not value  # a flag whose default differs between numba-cuda versions
        with monkeypatch.context() as m:
            m.setattr(config, name, value)
            changed = _components(kern)
        assert kcache.make_key(changed) != kcache.make_key(base), name
        assert diff_components(base, changed) == [
            f"numba config {name} {base['config'][name]!r} -> {changed['config'][name]!r}"]
    assert kcache.make_key(_components(kern)) == kcache.make_key(base)  # restored


def test_variables_outside_the_key_keep_it(monkeypatch):
    kern = _kernel()
    config = _nc_signatures.numba_config()
    base = kcache.make_key(_components(kern))
    for name in ("DUMP_ASSEMBLY", "CUDA_LOW_OCCUPANCY_WARNINGS", "CUDA_NRT_STATS",
                 "CUDA_DEFAULT_PTX_CC", "CUDA_LOG_LEVEL"):
        monkeypatch.setattr(config, name, 7)
    assert kcache.make_key(_components(kern)) == base


def test_nrt_flag_values_are_normalised(monkeypatch):
    config = _nc_signatures.numba_config()
    monkeypatch.setattr(config, "CUDA_ENABLE_NRT", 1)
    assert numba_config.config_component(config)["CUDA_ENABLE_NRT"] is True
    monkeypatch.setattr(config, "CUDA_ENABLE_NRT", 0)
    assert numba_config.config_component(config)["CUDA_ENABLE_NRT"] is False


KERNELS = """
    from numba import cuda
    import devmod

    @cuda.jit
    def kern(out, a):
        out[0] = devmod.twice(a[0])
"""
DEVMOD = """
    from numba import cuda

    @cuda.jit(device=True)
    def twice(x):
        return 2 * x
"""


@pytest.mark.slow
def test_nrt_from_the_environment_changes_the_key_across_processes(tmp_path):
    """NUMBA_CUDA_ENABLE_NRT=1 in one process, unset in another: different keys (the kernel
    and the device function it calls are compiled with NRT in the first only)."""
    directory = write_modules(tmp_path / "p", {"kernels": KERNELS, "devmod": DEVMOD})
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    off = key_in_subprocess(directory, "kernels", "kern", env=env)
    on = key_in_subprocess(directory, "kernels", "kern",
                           env=dict(env, NUMBA_CUDA_ENABLE_NRT="1"))
    assert off["components"]["config"]["CUDA_ENABLE_NRT"] is False
    assert on["components"]["config"]["CUDA_ENABLE_NRT"] is True
    assert on["key"] != off["key"]
    again = key_in_subprocess(directory, "kernels", "kern",
                              env=dict(env, NUMBA_CUDA_ENABLE_NRT="1", PYTHONHASHSEED="7"))
    assert again["key"] == on["key"]


_WARM = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import kcache
    from kcache.dispatcher import compile_for_report
    import kernels
    (r,) = compile_for_report(kernels.kern, "void(float32[::1], float32[::1])", cc=(9, 0),
                              store=kcache.Store(sys.argv[2]))
    print(json.dumps({"key": r.key, "cached": r.cached}))
""")


@pytest.mark.slow
def test_an_nrt_entry_is_not_served_to_a_process_without_nrt(tmp_path):
    directory = write_modules(tmp_path / "p", {"kernels": KERNELS, "devmod": DEVMOD})
    root = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "KCACHE_"))}
    results = []
    for nrt in ("1", None, "1"):
        run_env = dict(env, NUMBA_CUDA_ENABLE_NRT=nrt) if nrt else env
        proc = subprocess.run([sys.executable, "-c", _WARM, str(directory), str(root)],
                              env=run_env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    with_nrt, without, with_nrt_again = results
    assert not with_nrt["cached"] and not without["cached"]  # compiled for each setting
    assert with_nrt["key"] != without["key"]
    assert with_nrt_again == {"key": with_nrt["key"], "cached": True}
    store = kcache.Store(root)
    metas = {k: store.load(k).meta for k in (with_nrt["key"], without["key"])}
    assert len(metas) == 2
    assert store.stats()["compiles"] == 2

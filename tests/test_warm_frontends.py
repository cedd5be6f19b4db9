"""``kcache warm`` where both front-ends are installed (cudf 26.10 brings numba-cuda-mlir beside
numba-cuda): a run warms one front-end's kernels (``--frontend``, default numba-cuda), and says
so of the other's it meets, naming the ``--frontend`` that warms them: a kernel of the other
front-end in a signatures file, such kernels found in the TARGETs, and a module the other
front-end could not import without a GPU (its eager signatures). A user trial saw every
numba-cuda-mlir kernel fail with "is a MLIRDispatcher, not a kernel made by numba.cuda.jit or
kcache.jit", and a package of them warm nothing, without a word of ``--frontend``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types

import pytest

pytest.importorskip("numba.cuda")
pytest.importorskip("numba_cuda_mlir")

from kcache.dispatcher import discover, warm  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND as NUMBA_CUDA  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda_mlir.bridge import FRONTEND as MLIR  # noqa: E402

SOURCE = textwrap.dedent("""\
    from numba import cuda as nc
    from numba_cuda_mlir import cuda as mc

    @nc.jit
    def nc_kernel(a):
        a[0] = 1

    @mc.jit
    def mlir_kernel(a):
        a[0] = 2

    @mc.jit(device=True)
    def mlir_device(x):
        return x
    """)


def module_of(source: str = SOURCE, name: str = "twofront") -> types.ModuleType:
    """A module named ``name`` holding ``source``'s kernels (their ``__module__`` is it)."""
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def test_a_kernel_of_the_other_front_end_names_the_frontend_that_warms_it():
    module = module_of()
    with pytest.raises(LookupError) as got:
        discover.find_kernel(NUMBA_CUDA, module, "mlir_kernel")
    assert str(got.value) == (
        "twofront:mlir_kernel is a numba-cuda-mlir kernel, not a numba-cuda one: warm it with "
        "--frontend numba-cuda-mlir (this run warms numba-cuda kernels)")
    with pytest.raises(LookupError, match="twofront:nc_kernel is a numba-cuda kernel, not a "
                       "numba-cuda-mlir one: warm it with --frontend numba-cuda "):
        discover.find_kernel(MLIR, module, "nc_kernel")
    # what is no kernel names the run's own front-end's jit, not always numba.cuda.jit
    module.not_a_kernel = len
    with pytest.raises(LookupError, match=r"is a builtin_function_or_method, not a kernel made "
                       r"by numba_cuda_mlir\.cuda\.jit or kcache\.jit"):
        discover.find_kernel(MLIR, module, "not_a_kernel")
    assert discover.find_kernel(MLIR, module, "mlir_kernel") is module.mlir_kernel


def test_the_other_front_ends_kernels_of_a_module_are_found_apart():
    module = module_of()
    assert [k.name for k in discover.kernels_of(NUMBA_CUDA, module)] == ["twofront:nc_kernel"]
    assert {n: [k.name for k in found]
            for n, found in discover.other_kernels(NUMBA_CUDA, module).items()} == {
        "numba-cuda-mlir": ["twofront:mlir_kernel"]}  # not its device function
    assert {n: [k.name for k in found]
            for n, found in discover.other_kernels(MLIR, module).items()} == {
        "numba-cuda": ["twofront:nc_kernel"]}


def test_an_import_failure_the_other_front_end_raised_names_its_frontend():
    from numba_cuda_mlir.numba_cuda.cudadrv.error import CudaSupportError
    exc = CudaSupportError("Error at driver init")
    assert warm._other_frontend_raised(NUMBA_CUDA, exc) == (
        " (numba-cuda-mlir raised it: warm its kernels with --frontend numba-cuda-mlir)")
    assert warm._other_frontend_raised(MLIR, exc) == ""  # its own front-end: nothing to add
    assert warm._other_frontend_raised(NUMBA_CUDA, ValueError("x")) == ""
    odd = type("Odd", (Exception,), {"__module__": 5})  # a module may set it to anything
    assert warm._other_frontend_raised(NUMBA_CUDA, odd()) == ""


@pytest.mark.slow
def test_warm_says_which_kernels_another_frontend_made(tmp_path):
    """The default run (numba-cuda) over a package of numba-cuda-mlir kernels: a signatures
    line of one is skipped naming ``--frontend numba-cuda-mlir``, the others are listed (stderr,
    and ``other_frontends`` in JSON), an eager module's import failure says who raised it."""
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kernels.py").write_text(textwrap.dedent("""\
        from numba_cuda_mlir import cuda

        @cuda.jit
        def first(a):
            a[0] = 1

        @cuda.jit
        def second(a):
            a[0] = 2
        """))
    (pkg / "eager.py").write_text(textwrap.dedent("""\
        from numba_cuda_mlir import cuda

        @cuda.jit("void(float32[::1])")
        def fill(a):
            a[0] = 1
        """))
    (tmp_path / "sigs.txt").write_text("app.kernels:first void(float32[::1])\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env.update(KCACHE_DIR=str(tmp_path / "cache"), CUDA_VISIBLE_DEVICES="")

    def run(*extra, frontend=()):
        return subprocess.run(
            [sys.executable, "-m", "kcache", *extra, "warm", "app", "--cc", "9.0", "--jobs", "1",
             "--dry-run", "--signatures", "sigs.txt", *frontend],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    plain = run()
    assert plain.returncode == 1
    assert ("kcache: warm: 2 numba-cuda-mlir kernels found, not warmed by this numba-cuda run: "
            "app.kernels:first, app.kernels:second (warm them with --frontend numba-cuda-mlir)"
            in plain.stderr), plain.stderr
    doc = json.loads(run("--json").stdout)
    assert doc["frontend"] == "numba-cuda"
    assert doc["other_frontends"] == {"numba-cuda-mlir": ["app.kernels:first",
                                                          "app.kernels:second"]}
    rows = {r["kernel"]: r for r in doc["results"]}
    assert rows["app.kernels:first"]["status"] == "skipped"  # the mlir run warms it
    assert "--frontend numba-cuda-mlir" in rows["app.kernels:first"]["reason"]
    assert rows["app.eager"]["status"] == "failed"
    assert rows["app.eager"]["reason"].startswith(
        "cannot import app.eager (app/eager.py:3) (numba-cuda-mlir raised it: warm its kernels "
        "with --frontend numba-cuda-mlir): "), rows["app.eager"]["reason"]
    # the run for their front-end warms them, and has nothing to say of the other
    mlir = json.loads(run("--json", frontend=("--frontend", "mlir")).stdout)
    assert mlir["other_frontends"] == {}
    assert mlir["summary"]["failed"] == 0 and mlir["summary"]["would_compile"] == 2


@pytest.mark.slow
def test_one_recorded_file_of_both_front_ends_warms_in_two_passing_runs(tmp_path):
    """A program using both front-ends, its signatures recorded in one file: the run for
    each front-end warms its own kernels' lines and skips the other's; both exit 0."""
    (tmp_path / "both.py").write_text(textwrap.dedent("""\
        from numba import cuda
        from numba_cuda_mlir import cuda as mcuda

        @cuda.jit
        def classic(a):
            a[0] = 1

        @mcuda.jit
        def mlir(a):
            a[0] = 2
        """))
    (tmp_path / "sigs.txt").write_text("both:classic void(float32[::1])\n"
                                       "both:mlir void(float32[::1])\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env.update(KCACHE_DIR=str(tmp_path / "cache"), CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=str(tmp_path))
    outcomes = {}
    for frontend in ("numba-cuda", "numba-cuda-mlir"):
        done = subprocess.run(
            [sys.executable, "-m", "kcache", "--json", "warm", "--signatures", "sigs.txt",
             "--cc", "9.0", "--jobs", "1", "--dry-run", "--frontend", frontend],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        outcomes[frontend] = {r["kernel"]: r["status"] for r in json.loads(done.stdout)["results"]}
    assert outcomes == {"numba-cuda": {"both:classic": "would_compile", "both:mlir": "skipped"},
                        "numba-cuda-mlir": {"both:classic": "skipped", "both:mlir": "would_compile"}}

"""``kcache.jit`` without ``frontend`` compiles a function with the front-end whose package
its globals name (``from numba_cuda_mlir import cuda``), whichever front-end the program
imported first (a cudf program imports both); the default otherwise (docs/mlir.md)."""
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba_cuda_mlir")

from kcache.dispatcher import frontends  # noqa: E402


def test_of_function_names_the_front_end_of_the_globals_a_function_reads():
    import numpy as np
    from numba import cuda as ncuda
    from numba_cuda_mlir import cuda as mcuda
    scope = {"mcuda": mcuda, "ncuda": ncuda, "np": np, "grid": ncuda.grid}

    def made(source):
        exec(textwrap.dedent(source), scope)
        return scope["f"]
    assert frontends.of_function(made("def f(a):\n    a[mcuda.grid(1)] = 1")) \
        == "numba-cuda-mlir"
    assert frontends.of_function(made("def f(a):\n    a[ncuda.grid(1)] = 1")) == "numba-cuda"
    assert frontends.of_function(made("def f(a):\n    a[grid(1)] = 1")) == "numba-cuda"
    assert frontends.of_function(made("def f(a):\n    a[0] = np.pi")) is None  # neither
    assert frontends.of_function(made("def f(a):\n    a[mcuda.grid(1)] = ncuda.laneid")) is None



def test_of_function_reads_closure_variables_and_device_functions():
    """``cuda`` imported in the enclosing function (a kernel factory) is a closure variable,
    not a global; a kernel that only calls a device function reads its dispatcher, whose
    ``__module__`` is the program's."""
    from numba import cuda as ncuda
    from numba_cuda_mlir import cuda as mcuda

    def factory(cuda):
        def f(a):
            a[cuda.grid(1)] = 1
        return f
    assert frontends.of_function(factory(mcuda)) == "numba-cuda-mlir"
    assert frontends.of_function(factory(ncuda)) == "numba-cuda"

    def twice(x):
        return 2 * x
    scope = {"dev": mcuda.jit(device=True)(twice)}
    exec("def k(a):\n    a[0] = dev(a[0])", scope)
    assert frontends.of_function(scope["k"]) == "numba-cuda-mlir"
    scope = {"dev": ncuda.jit(device=True)(twice)}
    exec("def k(a):\n    a[0] = dev(a[0])", scope)
    assert frontends.of_function(scope["k"]) == "numba-cuda"

    def unfilled():
        def f(a):
            a[0] = late
        return f
        late = 1  # noqa: F841 (a cell never filled)
    assert frontends.of_function(unfilled()) is None


@pytest.mark.slow
def test_kcache_jit_compiles_mlir_code_with_numba_cuda_mlir_when_numba_cuda_came_first(tmp_path):
    (tmp_path / "kernels.py").write_text(textwrap.dedent("""\
        import kcache
        from numba_cuda_mlir import cuda

        @kcache.jit
        def bare(a):
            a[cuda.grid(1)] = 1

        @kcache.jit(cache_key="v1")
        def called(a):
            a[cuda.grid(1)] = 2
        """))
    (tmp_path / "classic.py").write_text(textwrap.dedent("""\
        import kcache
        from numba import cuda

        @kcache.jit
        def classic(a):
            a[cuda.grid(1)] = 3
        """))
    code = ("import numba.cuda, numba_cuda_mlir, kernels, classic\n"
            "print(type(kernels.bare).__name__, type(kernels.called).__name__, "
            "type(classic.classic).__name__)")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "KCACHE_DIR": str(tmp_path / "c"),
                               "PYTHONPATH": str(tmp_path), "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["KCacheMLIRDispatcher", "KCacheMLIRDispatcher",
                                   "KCacheDispatcher"]


def jit_in_child(blocked: tuple, decorator: str) -> str:
    """``@DECORATOR`` on a kernel in a child where the modules ``blocked`` are not installed:
    the exception it raised, as ``"TypeName message"`` (no traceback)."""
    code = textwrap.dedent(f"""
        import sys
        for name in {blocked!r}:
            sys.modules[name] = None  # as if not installed
        import kcache
        try:
            @{decorator}
            def k(a):
                a[0] = 1
        except ImportError as exc:
            print(type(exc).__name__, exc)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("blocked, asked, install", [
    ("numba", "numba-cuda", "kcache-cuda[cu13]"),
    ("numba_cuda_mlir", "mlir", "kcache-cuda[mlir]"),
])
def test_a_front_end_named_but_not_installed_is_one_clear_import_error(blocked, asked, install):
    """``kcache.jit(frontend=...)`` naming a front-end the environment lacks (numba-cuda-mlir
    as the only front-end, or numba-cuda alone): an ImportError naming the front-end and the
    extra that installs it, not the bare ``No module named 'numba'``."""
    out = jit_in_child((blocked,), f"kcache.jit(frontend={asked!r})")
    assert out.startswith("ModuleNotFoundError kcache.jit(frontend="), out
    assert install in out and "not installed" in out, out


def test_no_front_end_installed_names_the_extras_that_install_one():
    """``pip install kcache-cuda`` without an extra, then ``kcache.jit``: the ImportError names
    the extras (as naming a front-end does), not only that neither front-end is installed."""
    out = jit_in_child(("numba", "numba_cuda_mlir"), "kcache.jit")
    assert out.startswith("ImportError kcache.dispatcher needs numba-cuda or "
                          "numba-cuda-mlir"), out
    assert all(extra in out for extra in frontends.INSTALL.values()), out


@pytest.mark.parametrize("name, wanted, install", [
    ("KCacheDispatcher", "numba-cuda", "kcache-cuda[cu13]"),
    ("KCacheMLIRDispatcher", "numba-cuda-mlir", "kcache-cuda[mlir]"),
])
def test_a_bridge_name_of_a_front_end_not_installed_is_one_import_error(monkeypatch, name,
                                                                        wanted, install):
    """``from kcache.dispatcher import KCacheDispatcher`` without numba-cuda (or the mlir
    dispatcher without numba-cuda-mlir): one ModuleNotFoundError naming the front-end and its
    extra, not a chained traceback of the bridge's import."""
    import kcache.dispatcher as d
    from kcache.dispatcher import frontends

    def not_installed(*_a, **_k):
        raise ModuleNotFoundError("No module named 'numba'", name="numba")
    monkeypatch.delitem(d.__dict__, name, raising=False)
    monkeypatch.setattr(d._importlib, "import_module", not_installed)
    monkeypatch.setattr(frontends, "by_name", not_installed)
    with pytest.raises(ModuleNotFoundError) as caught:
        d.__getattr__(name)
    text = str(caught.value)
    assert text.startswith(f"kcache.dispatcher.{name} needs {wanted}, which is not installed")
    assert install in text and caught.value.__suppress_context__

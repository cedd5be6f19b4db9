"""Front-end bridges: one package per compiler front-end whose kernels kcache serves
(``numba_cuda/``, ``numba_cuda_mlir/``). Each holds every internal of its front-end and
implements :class:`~kcache.dispatcher.frontends.base.Frontend` (its ``bridge.FRONTEND``); the
rest of ``kcache.dispatcher`` is front-end-generic and is handed a front-end by the entry
point that picked it (docs/dispatcher.md, "Layout").

The selectors below are what those entry points pick with. Importing this module imports no
front-end: it names them, and finds the one a program uses by name, by the dispatcher a kernel
is, or by what the program imported (a process may use both: cudf 26.10 depends on
numba-cuda-mlir, nvmath-python on both)."""
from __future__ import annotations

import sys

from .known import KNOWN as _KNOWN, name_of_dispatcher, of_function, of_module_name  # noqa: F401

#: The front-ends kcache knows, numba-cuda first (the default where it is installed).
NAMES = tuple(_KNOWN)
#: Short names accepted for a front-end: what ``kcache ls`` shows in its Front-end column.
ALIASES = {"mlir": "numba-cuda-mlir"}
#: What installs each front-end with kcache (the extras of pyproject.toml).
INSTALL = {"numba-cuda": "kcache-cuda[cu13] (CUDA 12: kcache-cuda[cu12])",
           "numba-cuda-mlir": "kcache-cuda[mlir] (CUDA 12: kcache-cuda[mlir-cu12])"}


def install_hint(names=NAMES) -> str:
    """``"install EXTRA or EXTRA"``: what installs the front-ends ``names`` with kcache (the
    end of every "front-end not installed" message: kcache.jit, kcache warm)."""
    return "install " + " or ".join(INSTALL[ALIASES.get(n, n)] for n in names)


def by_name(name: str):
    """The front-end named ``name`` (its ``Frontend.name``): the object its bridge module
    defines (``FRONTEND``), imported now (and with it the front-end's package: ImportError
    when it is not installed): ``kcache.jit(frontend=...)``, ``kcache warm --frontend``.
    A short name of :data:`ALIASES` is accepted. Raises ValueError for an unknown name."""
    name = ALIASES.get(name, name)
    if name == "numba-cuda":
        from .numba_cuda.bridge import FRONTEND
        return FRONTEND
    if name == "numba-cuda-mlir":
        from .numba_cuda_mlir.bridge import FRONTEND
        return FRONTEND
    raise ValueError(f"unknown front-end {name!r} (known: {', '.join(NAMES)}; "
                     f"{', '.join(f'{a} for {n}' for a, n in ALIASES.items())})")


def package(name: str) -> str:
    """The package a program imports to use front-end ``name`` (``"numba.cuda"``)."""
    return _KNOWN[name][0]


_BRIDGES = {"numba-cuda": f"{__name__}.numba_cuda.bridge",
            "numba-cuda-mlir": f"{__name__}.numba_cuda_mlir.bridge"}


def importing(name: str) -> bool:
    """True while front-end ``name``'s bridge module is being imported (its own import of the
    front-end's package is under way: ``kcache._hook`` and ``install`` hear of the package
    then, and wait for the bridge, which says it is ready at its end)."""
    module = sys.modules.get(_BRIDGES[name])
    return module is not None and not hasattr(module, "FRONTEND")


def imported() -> list:
    """The front-ends whose package this process has imported, numba-cuda first (not one whose
    bridge is being imported: :func:`importing`)."""
    return [by_name(name) for name, (pkg, _where) in _KNOWN.items()
            if pkg in sys.modules and not importing(name)]


def of_dispatcher(obj):
    """The front-end whose kernel dispatcher ``obj`` is (kcache's or the front-end's own,
    told by its class's lineage: no bridge internals imported), or None."""
    name = name_of_dispatcher(obj)
    return by_name(name) if name is not None else None


def default():
    """The front-end ``kcache.jit``, ``compile_for`` and ``kcache warm`` use when none is
    named: the first (numba-cuda, then numba-cuda-mlir) the process has imported, else the
    first installed (its distribution's metadata) that imports. Raises ImportError when
    neither does."""
    from kcache.toolchain import package_versions
    installed = package_versions()
    imported_first = sorted(NAMES, key=lambda n: _KNOWN[n][0] not in sys.modules)
    problems = []
    for name in imported_first:
        if _KNOWN[name][0] in sys.modules or name in installed:
            try:
                return by_name(name)
            except ImportError as exc:  # metadata left behind, or a broken install
                problems.append(f"{name}: {exc}")
    raise ImportError("kcache.dispatcher needs numba-cuda or numba-cuda-mlir; "
                      + ("; ".join(problems) if problems else "neither is installed")
                      + f"; {install_hint()}")

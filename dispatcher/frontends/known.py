"""The front-ends kcache knows, by name: each one's package and kernel dispatcher class. Plain
data and two lookups that import nothing: the ``frontends`` package's selectors pick by them,
and the generic modules name another front-end's kernels and errors with them (through
``frontends.base``, the one module of ``frontends/`` they may import)."""
from __future__ import annotations

#: Front-end name -> (its package, whose import installs the transparent switch; its kernel
#: dispatcher class as (module, name)).
KNOWN = {
    "numba-cuda": ("numba.cuda", ("numba.cuda.dispatcher", "CUDADispatcher")),
    "numba-cuda-mlir": ("numba_cuda_mlir", ("numba_cuda_mlir.descriptor", "MLIRDispatcher")),
}


def name_of_dispatcher(obj) -> str | None:
    """The name of the front-end whose kernel dispatcher ``obj`` is (kcache's or the
    front-end's own, told by its class's lineage), or None. Imports nothing: ``kcache warm``
    names the other front-end's kernels it meets."""
    for cls in type(obj).__mro__:
        for name, (_pkg, where) in KNOWN.items():
            if (cls.__module__, cls.__name__) == where:
                return name
    return None


def of_module_name(module: str) -> str | None:
    """The name of the front-end whose package holds module ``module`` (dotted), or None:
    ``kcache warm`` names the front-end an import failure came from (a class's
    ``__module__`` may be anything: not a str is None)."""
    if not isinstance(module, str):
        return None
    for name, (pkg, _where) in KNOWN.items():
        if module == pkg or module.startswith(pkg + "."):
            return name
    return None

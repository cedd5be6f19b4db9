"""The front-ends kcache knows, by name: each one's package and kernel dispatcher class. Plain
data and lookups that import no front-end: the ``frontends`` package's selectors pick by them
(``kcache.jit`` a function's front-end by its globals), and the generic modules name another
front-end's kernels and errors with them (through ``frontends.base``, the one module of
``frontends/`` they may import)."""
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


def of_function(fn) -> str | None:
    """The name of the one front-end whose package the globals ``fn``'s code reads belong to
    (``cuda`` bound to ``numba_cuda_mlir.cuda``, a ``grid`` imported from ``numba.cuda``), or
    None when they name none or both: ``kcache.jit`` without ``frontend`` compiles
    ``from numba_cuda_mlir import cuda`` code with numba-cuda-mlir, whichever front-end the
    program imported first. Reads only the globals and closure variables the code loads (its
    bytecode's loads, not its attribute names); a device function's dispatcher counts as its
    front-end's."""
    from ..bytecode import references
    code, scope = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
    if code is None or not isinstance(scope, dict):
        return None
    cells = dict(zip(code.co_freevars, getattr(fn, "__closure__", None) or ()))
    found = set()
    for kind, name, _attrs in references(code):
        value = scope.get(name) if kind == "g" else _cell_value(cells.get(name))
        if value is None:
            continue
        # a device function's dispatcher: its __module__ is the program's module
        front = name_of_dispatcher(value)
        where = getattr(value, "__name__", None) if type(value).__name__ == "module" \
            else getattr(value, "__module__", None)
        if front is None:
            front = of_module_name(where) if isinstance(where, str) else None
        if front is not None:
            found.add(front)
    return found.pop() if len(found) == 1 else None


def _cell_value(cell):
    """What a closure cell holds (``cuda`` imported in the enclosing function), or None."""
    try:
        return cell.cell_contents if cell is not None else None
    except ValueError:  # a cell not filled yet
        return None

"""Front-end bridges: one package per compiler front-end whose kernels kcache serves
(``numba_cuda/``; ``numba_cuda_mlir/`` next). Each holds every internal of its front-end and
implements :class:`~kcache.dispatcher.frontends.base.Frontend`; the rest of
``kcache.dispatcher`` is front-end-generic (docs/dispatcher.md, "Layout")."""


def by_name(name: str):
    """The front-end named ``name`` (its ``Frontend.name``): the object its bridge module
    defines (``FRONTEND``), imported now. ``kcache warm``'s spawned workers pick again, by
    name, the front-end their parent was handed. Raises ValueError for an unknown name."""
    if name == "numba-cuda":
        from .numba_cuda.bridge import FRONTEND
        return FRONTEND
    raise ValueError(f"unknown front-end {name!r} (known: numba-cuda)")

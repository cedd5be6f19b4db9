"""Front-end bridges: one package per compiler front-end whose kernels kcache serves
(``numba_cuda/``; ``numba_cuda_mlir/`` next). Each holds every internal of its front-end and
implements :class:`~kcache.dispatcher.frontends.base.Frontend` (its ``bridge.FRONTEND``); the
rest of ``kcache.dispatcher`` is front-end-generic and is handed a front-end by the entry
point that picked it (docs/dispatcher.md, "Layout")."""

"""The numba-cuda-mlir bridge: every numba-cuda-mlir internal kcache uses, by concern
(supported: numba-cuda-mlir >= 0.6, < 0.7; docs/mlir.md, docs/compat.md). ``bridge.FRONTEND``
implements :class:`kcache.dispatcher.frontends.base.Frontend`; ``support`` decides whether the
installed numba-cuda-mlir is supported before any other module here is imported. Needs
neither numba, llvmlite nor numba-cuda: numba-cuda-mlir vendors numba at
``numba_cuda_mlir.numba_cuda``."""

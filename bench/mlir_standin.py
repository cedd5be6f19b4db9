"""pytest plugin (``-p mlir_standin``) of ``bench/mlir_suite.py run --standin-cc``: numba-cuda-
mlir is told the cc in ``MLIR_SUITE_STANDIN_CC`` (``tools._cached_cc``, what it asks the
device for), so the suite's compiles run on a machine without a GPU."""
import os

import numba_cuda_mlir.tools as _tools

_tools._cached_cc = tuple(int(p) for p in os.environ["MLIR_SUITE_STANDIN_CC"].split("."))

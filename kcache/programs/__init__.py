"""cuda.core programs (docs/programs.md): a producer of entries, beside the numba-cuda
dispatcher. bridge: ``ProgramCache`` (cuda.core's ``Program.compile(cache=)`` protocol) and
``compile_program``, their keys and the checks of what they store. Importing this package
imports cuda.core; no store, tier, entry or disk module imports it."""
from .bridge import *  # noqa: F401,F403
from .bridge import (CUDA_CORE_NEEDED, EXTRA, MAX_LOG, MAX_SYMBOLS, NO_SUCH_ENTRY, TARGETS,  # noqa: F401
                     unavailable_line)

"""What a served compile result answers that only a compile makes.

An entry keeps what numba-cuda-mlir's own cache keeps (the cubin, PTX, LTO-IR, the optimized
MLIR, the target; ``caching.MLIRCacheImpl``), not what a compile leaves in a compile result
besides: ``metadata["transformed_source"]`` (AST transforms), ``["mlir_module"]`` (read when
a new kernel links a served one), ``type_annotation``, ``mlir_module_str``. Reading one of
those compiles the kernel once, uncached, and answers from that compile, as an ``inspect_*``
of a served numba-cuda kernel does (``inspect_compiles``)."""
from __future__ import annotations

import warnings

from ...process import STATE
from .compiling import compile_kernel
from .internals import CachedCompileResult, global_compiler_lock


#: What a compile leaves in ``metadata`` that an entry does not keep (numba-cuda-mlir 0.6):
#: ``metadata.get`` of one of these compiles too (``inspect_transformed_source`` reads
#: ``transformed_source`` so; ``get_lto_ptx`` ``linker`` and ``link_plan``). Only inspection
#: and a caller's compile read them: never a launch of the served kernel.
COMPILE_ONLY = frozenset({"transformed_source", "mlir_module", "mlir_module_str", "linker",
                          "link_plan", "linked_external_link_items", "_mlir_has_debug_info",
                          "pipeline_times"})


class ServedMetadata(dict):
    """A served compile result's ``metadata``: a key it lacks is read from a compile made
    then (``compile``: returns a compile result), once."""

    def __init__(self, data, compile):
        super().__init__(data)
        self._compile = compile
        self._full = None

    def full(self):
        """The compile result made for what the entry does not keep (made once)."""
        if self._full is None:
            self._full = self._compile()
            for key, value in self._full.metadata.items():
                dict.setdefault(self, key, value)
        return self._full

    def __missing__(self, key):
        self.full()
        return dict.__getitem__(self, key)  # KeyError when no compile makes it either

    def get(self, key, default=None):
        if key in COMPILE_ONLY and not dict.__contains__(self, key):
            self.full()
        return dict.get(self, key, default)

    def __contains__(self, key):
        # ``get_mlir_module_str`` asks ``"mlir_module_str" in metadata`` before it reads
        # ``["mlir_module"]``: answered without the compile, it printed that module, which
        # the compile's passes had lowered, over the string the compile kept before them.
        if key in COMPILE_ONLY and not dict.__contains__(self, key):
            self.full()
        return dict.__contains__(self, key)

    def __reduce__(self):  # copied or pickled as the plain dict it holds
        return dict, (dict(self),)


class ServedCompileResult(CachedCompileResult):
    """numba-cuda-mlir's ``CachedCompileResult`` (what its own cache hit publishes), whose
    missing public attributes come from :meth:`ServedMetadata.full`."""

    def __getattr__(self, name):
        metadata = self.__dict__.get("metadata")
        if name.startswith("_") or not isinstance(metadata, ServedMetadata):
            raise AttributeError(name)
        return getattr(metadata.full(), name)


def answering(wrapped, dispatcher, argtypes) -> None:
    """Make ``wrapped`` (``dispatcher``'s served ``compiler.CompileResult`` for
    ``argtypes``) answer as above."""
    cres = wrapped.cres
    cres.metadata = ServedMetadata(cres.metadata, lambda: inspection(dispatcher, argtypes))
    cres.__class__ = ServedCompileResult


def inspection(dispatcher, argtypes):
    """``dispatcher``'s kernel for ``argtypes`` compiled, uncached (nothing published or
    stored), counted in ``inspect_compiles``."""
    with global_compiler_lock, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # said already when the entry was served
        built = compile_kernel(dispatcher.py_func, argtypes, dispatcher.targetoptions)
    for counts in (dispatcher._kcache_counts, STATE.counts):
        counts["inspect_compiles"] += 1
    return built

"""Eager signatures (``numba_cuda_mlir.cuda.jit("void(...)")``, or type annotations) noted
instead of compiled while ``kcache warm`` imports a module, and compiled for each cc later."""
from __future__ import annotations

import contextlib

from .internals import MLIRDispatcher
from .offline import offline_target
from .signatures import normalize_signature

_EAGER = "_kcache_eager_signatures"
_EAGER_DEVICE = "_kcache_eager_device_signatures"
#: Device-function dispatchers whose eager signatures were noted, not compiled.
_eager_devices: list = []


def _dispatcher_classes() -> list:
    """MLIRDispatcher and every subclass that defines its own ``compile``."""
    seen, todo = [], [MLIRDispatcher]
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.append(cls)
            todo.extend(cls.__subclasses__())
    return [cls for cls in seen if "compile" in cls.__dict__]


@contextlib.contextmanager
def deferred_eager_compiles():
    """While the block runs, eager signatures are noted instead of compiled.

    ``decorators.mlir_jit`` compiles each eager signature (given, or read from the
    annotations) as the module is imported: ``disp.compile(argtypes)`` for a kernel,
    ``disp.compile_device(argtypes)`` for a device function, then ``disp.disable_compile()``
    — which needs a GPU and compiles for its cc only. ``kcache warm`` imports modules inside
    this block: a kernel's signatures are read back with :func:`eager_signatures`, a device
    function's are compiled for each cc inside :func:`eager_device_functions`. Not
    thread-safe: hold the compiler lock around it."""
    from . import dispatcher  # noqa: F401  (kcache's subclass must exist to be patched too)
    saved = {(cls, "compile"): cls.__dict__["compile"] for cls in _dispatcher_classes()}
    owner = next(c for c in MLIRDispatcher.__mro__ if "disable_compile" in c.__dict__)
    original_disable = owner.__dict__["disable_compile"]
    saved[owner, "disable_compile"] = original_disable
    saved[MLIRDispatcher, "compile_device"] = MLIRDispatcher.__dict__["compile_device"]

    def compile(self, sig, abi_info=None, output=None):
        argtypes = normalize_signature(sig)
        noted = self.__dict__.setdefault(_EAGER, [])
        if argtypes not in noted:
            noted.append(argtypes)
        return None

    def compile_device(self, sig):
        noted = self.__dict__.setdefault(_EAGER_DEVICE, [])
        if not noted:
            _eager_devices.append(self)
        noted.append(sig)
        return None

    def disable_compile(self, val=True):
        if _EAGER in self.__dict__ or _EAGER_DEVICE in self.__dict__:
            self._can_compile = not val
            return None
        return original_disable(self, val)

    replacements = {"compile": compile, "compile_device": compile_device,
                    "disable_compile": disable_compile}
    for cls, name in saved:
        setattr(cls, name, replacements[name])
    try:
        yield
    finally:
        for (cls, name), original in saved.items():
            setattr(cls, name, original)


@contextlib.contextmanager
def eager_device_functions(cc):
    """While the block runs, every device function imported inside
    :func:`deferred_eager_compiles` holds its eager signatures compiled for compute
    capability ``cc``, as ``mlir_jit`` compiles them on a GPU of that cc (``compile_device``
    under ``typeinfer.register_dispatcher``). Does nothing when there are none."""
    if not _eager_devices:
        yield
        return
    from numba_cuda_mlir.numba_cuda.core import typeinfer
    with offline_target(cc):
        for disp in _eager_devices:
            for sig in disp.__dict__.get(_EAGER_DEVICE, ()):
                with typeinfer.register_dispatcher(disp):
                    disp.compile_device(sig)
        yield


def eager_signatures(dispatcher) -> list:
    """The eager signatures (tuples of types) of a kernel dispatcher: those noted while its
    module was imported inside :func:`deferred_eager_compiles`, else, for one made with
    signatures elsewhere (compiled, then ``disable_compile()``), the argument types of its
    ``overloads``. [] for a lazy one."""
    noted = dispatcher.__dict__.get(_EAGER)
    if noted is not None:
        return list(noted)
    if not getattr(dispatcher, "_can_compile", True):
        return [tuple(sig) for sig in dispatcher.overloads]
    return []

"""Eager signatures (``numba.cuda.jit("void(...)")``) noted instead of compiled while
``kcache warm`` imports a module, and compiled for each cc later."""
from __future__ import annotations

import contextlib

from .internals import CUDADispatcher
from .offline import offline_target
from .signatures import normalize_signature

_EAGER = "_kcache_eager_signatures"
_EAGER_DEVICE = "_kcache_eager_device_signatures"
#: Device-function dispatchers whose eager signatures were noted, not compiled.
_eager_devices: list = []


def _kernel_dispatcher_classes() -> list:
    """CUDADispatcher and every subclass that defines its own ``compile``."""
    seen, todo = [], [CUDADispatcher]
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.append(cls)
            todo.extend(cls.__subclasses__())
    return [cls for cls in seen if "compile" in cls.__dict__]


@contextlib.contextmanager
def deferred_eager_compiles():
    """While the block runs, eager signatures are noted instead of compiled.

    ``numba.cuda.jit("void(float32[::1])")`` compiles each eager signature as the module is
    imported (``decorators.jit``: ``disp.compile(argtypes)`` for a kernel,
    ``disp.compile_device(argtypes, restype)`` for a device function, then
    ``disp.disable_compile()``), which needs a GPU and compiles for that GPU's cc only.
    ``kcache warm`` imports modules inside this block: a kernel's signatures are read back
    with :func:`eager_signatures`, and a device function's are compiled for each cc inside
    :func:`eager_device_functions`. ``disable_compile`` keeps its effect (numba-cuda
    then only uses those signatures) without its check that something was compiled. Not
    thread-safe: hold the compiler lock (as :func:`offline_target` does) around it."""
    # kcache's own subclass (kcache.jit with eager signatures) must exist to be patched too
    from . import dispatcher  # noqa: F401
    saved = {(cls, "compile"): cls.__dict__["compile"] for cls in _kernel_dispatcher_classes()}
    owner = next(c for c in CUDADispatcher.__mro__ if "disable_compile" in c.__dict__)
    original_disable = owner.__dict__["disable_compile"]
    saved[owner, "disable_compile"] = original_disable
    saved[CUDADispatcher, "compile_device"] = CUDADispatcher.__dict__["compile_device"]

    def compile(self, sig):
        argtypes = normalize_signature(sig)
        noted = self.__dict__.setdefault(_EAGER, [])
        if argtypes not in noted:
            noted.append(argtypes)
        return None

    def compile_device(self, args, return_type=None):
        noted = self.__dict__.setdefault(_EAGER_DEVICE, [])
        if not noted:
            _eager_devices.append(self)
        noted.append((tuple(args), return_type))
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
    capability ``cc`` ((major, minor)), as ``decorators.jit`` compiles them on a GPU of that
    cc (``compile_device`` under ``typeinfer.register_dispatcher``); a kernel compiled in the
    block (``compile_for`` nests its own :func:`offline_target`) calls exactly those. They
    are dropped when the block ends. Does nothing when there are none."""
    if not _eager_devices:
        yield
        return
    from numba.cuda.core import typeinfer
    with offline_target(cc):
        for disp in _eager_devices:
            for args, return_type in disp.__dict__.get(_EAGER_DEVICE, ()):
                with typeinfer.register_dispatcher(disp):
                    disp.compile_device(args, return_type)
        yield


def eager_signatures(dispatcher) -> list:
    """The eager signatures (tuples of numba types) of a kernel dispatcher: those noted while
    its module was imported inside :func:`deferred_eager_compiles`, else, for a dispatcher
    made by ``numba.cuda.jit(signatures)`` elsewhere (compiled, then ``disable_compile()``:
    ``_can_compile`` is False), the argument types of its ``overloads``. [] for a lazy one."""
    noted = dispatcher.__dict__.get(_EAGER)
    if noted is not None:
        return list(noted)
    if not getattr(dispatcher, "_can_compile", True):
        return [tuple(sig) for sig in dispatcher.overloads]
    return []

"""Signatures and the current target, as numba-cuda reads them: argument types from a
signature, the key's signature text, the signature namespace, the device's cc and launch
configuration, the configuration module and the ccs the toolkit compiles for."""
from __future__ import annotations

from . import internals as _internals
from .internals import config as _config
from .internals import get_current_device, sigutils, types

def normalize_signature(sig) -> tuple:
    """Argument types of ``sig`` (a signature string, a numba Signature or a tuple of numba
    types), as numba-cuda's ``CUDADispatcher.compile`` gets them from
    ``sigutils.normalize_signature``. Raises TypeError for a kernel signature with a non-void
    return type."""
    argtypes, restype = sigutils.normalize_signature(sig)
    if restype is not None and restype != types.none:
        raise TypeError(f"a kernel signature must return void, got {restype} in {sig!r}")
    return tuple(argtypes)


def signature_string(argtypes: tuple) -> str:
    """The ``signature`` key component: ``str`` of the tuple of numba types, which names layout,
    readonly and alignment (``"(array(float32, 1d, C),)"``, ``"unaligned array(...)"``).
    Remembered per tuple of types (numba types are interned and hashable; printing array
    types costs several microseconds each)."""
    argtypes = tuple(argtypes)
    try:
        return _signature_strings[argtypes]
    except KeyError:
        pass
    except TypeError:  # an unhashable type: just print it
        return str(argtypes)
    text = str(argtypes)
    if len(_signature_strings) < 4096:
        _signature_strings[argtypes] = text
    return text


_signature_strings: dict = {}


def signature_display(argtypes: tuple) -> str:
    """Argument types as numba prints them, for people (entry ``meta["signature"]``, messages):
    ``"(array(float32, 1d, C), float32)"``. Not a key component (see :func:`signature_string`)."""
    return "(" + ", ".join(str(t) for t in argtypes) + ")"


def is_signature(obj) -> bool:
    """True if ``obj`` is a signature (string, tuple of types or Signature), as
    ``numba.cuda.jit`` tells eager signatures from functions (``sigutils.is_signature``)."""
    return sigutils.is_signature(obj)


def supported_ccs() -> list | None:
    """The compute capabilities ((major, minor), ascending) the installed CUDA toolkit can
    compile for, as numba-cuda asks them (``numba.cuda.cudadrv.nvrtc.get_supported_ccs``,
    i.e. ``nvrtcGetSupportedArchs``; ``get_arch_option`` picks the NVVM target from this list).
    None when the toolkit cannot be asked (the compile then reports the problem itself)."""
    try:
        from numba.cuda.cudadrv import nvrtc
        return sorted(tuple(cc) for cc in nvrtc.get_supported_ccs())
    except Exception:  # no NVRTC library: nothing to check against
        return None


def numba_config():
    """The configuration module numba-cuda reads while compiling (``numba.cuda.core.config``,
    which is ``numba.core.config`` when numba is installed). Its NRT and debug-info
    attributes (``CUDA_ENABLE_NRT``, ``CUDA_DEBUG_POLY``, ...) are set when
    ``numba.cuda.memory_management.nrt`` and ``numba.cuda.debuginfo`` are imported, which
    ``import numba.cuda`` does (and this module, through ``NRT_LIBRARY``)."""
    return _config


def current_cc() -> tuple:
    """(major, minor) of the current device (``numba.cuda.get_current_device``); creates the
    CUDA context but never numba's typing or target context."""
    return tuple(get_current_device().compute_capability)


def current_launch_config():
    """numba-cuda's launch configuration of the launch now compiling, or None (always None
    without :data:`LAUNCH_CONFIGS`)."""
    return _internals._launchconfig.current_launch_config() if _internals.LAUNCH_CONFIGS else None



def signature_namespace() -> dict:
    """The names a signature string is evaluated with: numba-cuda's
    ``sigutils._parse_signature_string`` runs ``eval(text, {}, numba.cuda.types.__dict__)``.
    (kcache checks the text against its own grammar first: dispatcher/sigspec.py.)"""
    return types.__dict__


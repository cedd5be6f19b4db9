"""The transparent switch's state, read by the install functions and by the dispatchers they
make: the mode ``install()`` set ("cache", "all" or None), the options it keeps, and the
options ``kcache.jit`` gives to the ``numba.cuda.jit(cache=True)`` call it wraps (per thread).
Its own module so that the dispatcher reads it without importing ``install`` (which imports
the dispatcher)."""
from __future__ import annotations

import contextlib
import threading

#: "options": install()'s arguments (a dict until the first cached kernel makes them an
#: ``Options``), "mode": "cache", "all" or None.
_state = {"options": None, "mode": None}
_local = threading.local()


def installed() -> str | None:
    """The installed mode ("cache" or "all"), or None."""
    return _state["mode"]


def set_installed(options, mode) -> None:
    """Set (or with ``None, None`` clear) what ``install()`` asked for."""
    _state["options"], _state["mode"] = options, mode


def installed_options():
    """What ``install()`` kept: a dict of its arguments, an ``Options``, or None."""
    return _state["options"]


def keep_options(made, given) -> None:
    """Keep ``made`` (an ``Options``) for ``given`` (install()'s dict) when that is still the one
    installed: one Options (one default store) for every kernel."""
    if _state["options"] is given:
        _state["options"] = made


def adopting_options():
    """The options ``kcache.jit`` gave to this thread's ``numba.cuda.jit`` call, or None."""
    return getattr(_local, "options", None)


@contextlib.contextmanager
def adopting(options):
    """While the block runs in this thread, :func:`adopting_options` is ``options``."""
    previous = getattr(_local, "options", None)
    _local.options = options
    try:
        yield
    finally:
        _local.options = previous

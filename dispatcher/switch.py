"""The transparent switch, read by the install functions and by the dispatchers they make: the
mode ``install()`` set ("cache", "all" or None), the options it keeps, and the options
``kcache.jit`` gives to the ``numba.cuda.jit(cache=True)`` call it wraps (per thread). The
state itself is ``process.STATE``'s (``mode``, ``options``, ``adopting``). Its own module so
that the dispatcher reads it without importing ``install`` (which picks the front-end)."""
from __future__ import annotations

import contextlib

from .process import STATE


def installed() -> str | None:
    """The installed mode ("cache" or "all"), or None."""
    return STATE.mode


def set_installed(options, mode) -> None:
    """Set (or with ``None, None`` clear) what ``install()`` asked for."""
    STATE.options, STATE.mode = options, mode


def installed_options():
    """What ``install()`` kept: a dict of its arguments, an ``Options``, or None."""
    return STATE.options


def keep_options(made, given) -> None:
    """Keep ``made`` (an ``Options``) for ``given`` (install()'s dict) when that is still the one
    installed: one Options (one default store) for every kernel."""
    if STATE.options is given:
        STATE.options = made


def adopting_options():
    """The options ``kcache.jit`` gave to this thread's ``numba.cuda.jit`` call, or None."""
    return getattr(STATE.adopting, "options", None)


@contextlib.contextmanager
def adopting(options):
    """While the block runs in this thread, :func:`adopting_options` is ``options``."""
    previous = getattr(STATE.adopting, "options", None)
    STATE.adopting.options = options
    try:
        yield
    finally:
        STATE.adopting.options = previous

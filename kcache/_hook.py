"""``KCACHE_ENABLE`` hook: turn on kcache's transparent mode in any Python process.

Imported from the one-line ``kcache-hook.pth`` in site-packages only when ``KCACHE_ENABLE`` is
set (the .pth line costs one ``os.environ`` lookup otherwise). Standard library only: it must
not import numba or slow down interpreter start-up. It puts a finder on ``sys.meta_path``
(``kcache.importwatch``) that waits for a front-end's package (``numba.cuda``,
``numba_cuda_mlir``) to finish importing, then calls ``kcache.dispatcher.install(mode)``:
``KCACHE_ENABLE=1`` (or true/yes/on/cache) -> mode "cache" (kernels declared with
``cache=True``), ``KCACHE_ENABLE=all`` -> mode "all" (every
kernel; those that cannot be cached run uncached). Empty/0/false/no/off: nothing. Any other
value is reported once on stderr and ignored (a typo must not break the user's program).
"""
import os
import sys

_MODES = {"1": "cache", "true": "cache", "yes": "cache", "on": "cache", "cache": "cache",
          "all": "all"}
_OFF = {"", "0", "false", "no", "off"}
#: The packages of the front-ends kcache serves (kcache.dispatcher.frontends.package).
TARGETS = ("numba.cuda", "numba_cuda_mlir")
TARGET = TARGETS[0]  # the name before numba-cuda-mlir was served too


def mode_from_env(value=None):
    """The install mode for ``KCACHE_ENABLE`` (default: the environment): "cache", "all" or
    None. Raises ValueError naming the accepted values for anything else."""
    raw = os.environ.get("KCACHE_ENABLE", "") if value is None else value
    text = raw.strip().lower()
    if text in _OFF:
        return None
    if text in _MODES:
        return _MODES[text]
    raise ValueError(f"KCACHE_ENABLE={raw!r} is not understood; use 1 (cache=True kernels), "
                     "all (every kernel) or 0")


_pending = []  # the mode to install once kcache.dispatcher has finished importing


def _install(mode):
    disp = sys.modules.get("kcache.dispatcher")
    if disp is not None and not getattr(disp, "READY", False):
        # numba.cuda was imported by kcache.dispatcher's own import (``import kcache;
        # kcache.jit``, ``kcache warm``): installing now would import a half-made package.
        # dispatcher_ready() installs when the package is complete.
        _pending.append(mode)
        return
    try:
        from kcache.dispatcher import install
        install(mode)
    except Exception as exc:  # the hook must never break the user's program
        sys.stderr.write(f"kcache: KCACHE_ENABLE={mode} ignored: cannot install ({exc})\n")


def dispatcher_ready():
    """Called by kcache.dispatcher at the end of its import: install a mode left pending."""
    if _pending:
        _install(_pending.pop())


def enable(mode):
    """Arrange for ``kcache.dispatcher.install(mode)`` once a front-end's package is imported:
    at once if one already is, and again when another one is (``kcache.importwatch``)."""
    pending = [t for t in TARGETS if t not in sys.modules]
    if len(pending) < len(TARGETS):
        _install(mode)
    if pending:
        from kcache import importwatch
        importwatch.watch(pending, _installer(mode))


_installers: dict = {}


def _installer(mode):
    """One callback per mode (``importwatch.watch`` runs a callback given twice once)."""
    return _installers.setdefault(mode, lambda _package: _install(mode))


def _main():
    try:
        mode = mode_from_env()
    except ValueError as exc:
        sys.stderr.write(f"kcache: {exc}\n")
        return
    if mode is not None:
        enable(mode)


_main()

"""``KCACHE_RECORD=FILE``: a normal run writes each kernel signature it compiles or loads into a
signatures file (dispatcher/sigfile.py), so ``kcache warm --signatures FILE`` can warm what
the program really launches, without declared signatures.

Called once per new (kernel, signature) of a process from ``KCacheDispatcher.compile`` (the
first launch with those argument types); a hit on the in-memory overloads never gets here.
Many processes may record into one file: each append happens under a file lock
(``filelock``), after reading the file to skip lines already there, as one ``O_APPEND``
write of whole lines; so the file never holds a line twice or half a line. Recording never
breaks the program: a type that has no signature-string form, a kernel no module-level
name holds (a factory's closure bound to one is recorded as ``module:attr``), or a file
that cannot be written is skipped, warned once, and counted in :func:`skipped`.
"""
from __future__ import annotations

import errno
import os
import re
import stat

from kcache.warn import warn_once

from .process import STATE, kernel_name

__all__ = ["ENV", "start", "stop", "path", "note", "skipped", "LOCK_TIMEOUT"]

ENV = "KCACHE_RECORD"
#: Seconds to wait for another process's append before giving this one up (warned).
LOCK_TIMEOUT = 30.0


def start(file) -> None:
    """Record into ``file`` (str or path) from now on, in this process (as ``KCACHE_RECORD``).
    ``None`` or ``""`` stops recording."""
    with STATE.record_lock:
        STATE.record_path = os.path.abspath(os.fspath(file)) if file else None
        STATE.recorded = set()


def stop() -> None:
    """Stop recording in this process."""
    start(None)


def path() -> str | None:
    """The file being recorded into, or None."""
    return STATE.record_path


def skipped() -> dict:
    """``{"module:qualname signature": reason}`` for launches this process could not record."""
    return dict(STATE.record_skipped)


def note(frontend, dispatcher, argtypes) -> None:
    """Record that ``dispatcher`` (a kernel dispatcher of ``frontend``, a
    ``frontends.base.Frontend``) was compiled or loaded for
    ``argtypes`` (tuple of numba types), if recording is on. Never raises."""
    if STATE.record_path is None:
        return  # the common case: one attribute read on the compile path
    try:
        _note(frontend, dispatcher, tuple(argtypes))
    except Exception as exc:  # recording must never break the program
        warn_once("record-error", f"kcache: {ENV}: recording failed ({type(exc).__name__}: "
                  f"{exc}); the program goes on")


def _note(frontend, dispatcher, argtypes) -> None:
    from . import sigspec  # imported only when recording is on
    name, reason = _warm_name(dispatcher)
    memo = (name, argtypes)
    if memo in STATE.recorded:
        return
    STATE.recorded.add(memo)
    text = None
    if reason is None:
        try:
            text = sigspec.format_signature(frontend, argtypes)
        except sigspec.Unexpressible as exc:
            reason = str(exc)
    if reason is not None:
        STATE.record_skipped[f"{name} {frontend.signature_display(argtypes)}"] = reason
        warn_once(f"record-skip:{name}", f"kcache: {ENV}: not recording {name}: {reason}")
        return
    _append(STATE.record_path, name, text)


def _warm_name(dispatcher) -> tuple:
    """(name, None): the name kcache warm finds this kernel by ("module:qualname", or
    "module:attr" for a factory's closure a module name holds: discover.reachable_name);
    or ("module:qualname", why warm could not find it)."""
    from .discover import reachable_name
    fn = dispatcher.py_func
    if fn.__module__ in (None, "__main__"):
        return kernel_name(dispatcher), ("it is defined in the __main__ script; move it into "
                                         "an importable module")
    name = reachable_name(dispatcher)
    if name is not None:
        return name, None
    where = "it is defined inside a function and " if "<locals>" in fn.__qualname__ else ""
    return kernel_name(dispatcher), (
        f"{where}no name of its module holds it; kcache warm finds module-level kernels only "
        "(and a closure a module name holds: add3 = make_adder(3.0))")


def _append(file: str, kernel: str, signature: str) -> None:
    """Append one line unless the file already has it (parsed loosely: same kernel and same
    signature text); under the file's lock so concurrent appends neither interleave nor
    duplicate."""
    from filelock import FileLock, Timeout

    from . import sigfile

    line = sigfile.format_line(kernel, signature)
    try:
        with FileLock(file + ".lock", timeout=LOCK_TIMEOUT):
            if _has_line(file, kernel, signature):
                return
            data = (sigfile.HEADER if _is_empty(file) else "") + line
            # O_NONBLOCK: a FIFO put there meanwhile is refused (ENXIO), never waited on
            fd = os.open(file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
            try:
                view = memoryview(data.encode("utf-8"))
                while view:  # a regular file takes it in one write; loop for the rare short one
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
    except (OSError, Timeout) as exc:
        warn_once("record-write", f"kcache: {ENV}: cannot write {file} ({exc}); signatures "
                  "of this run are not recorded")
        if isinstance(exc, Timeout):  # a stopped holder: as said, not again (30 s per kernel)
            stop()


def _is_empty(file: str) -> bool:
    try:
        return os.stat(file).st_size == 0
    except FileNotFoundError:
        return True


def _has_line(file: str, kernel: str, signature: str) -> bool:
    """Whether ``file`` has a line of ``kernel`` and ``signature`` already (blanks and a
    trailing comment aside; a missing file has none). OSError when it is not a regular file:
    a FIFO would block the program's launch for good (opened ``O_NONBLOCK``, then checked),
    a device is no signatures file.

    Runs at every new launch of a recording program, on a file other processes write: only
    the lines that start with ``kernel`` are looked at, by a string comparison (parsing
    every line, a tokenizer pass for each ``#``, cost 10-24 s per launch on a file of
    16 MiB). The signature kcache writes is a whole expression, so what follows it on a
    line of its own is blanks or a comment."""
    from . import sigfile
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return False
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or socket)", file)
        text = f.read(sigfile.MAX_FILE_BYTES + 1).decode("utf-8", "replace")
    lines = re.compile(rf"^[ \t]*{re.escape(kernel)}[ \t]+(.*)$", re.MULTILINE)
    for match in lines.finditer(text):
        rest = match.group(1)
        if rest.startswith(signature):
            tail = rest[len(signature):].strip()
            if not tail or tail.startswith("#"):
                return True
    return False


start(os.environ.get(ENV, "").strip() or None)

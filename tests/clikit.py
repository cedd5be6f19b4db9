"""Run the ``kcache`` command inside the test's process, as a fresh process would run it.

A ``python -m kcache`` subprocess costs ~0.3 s of interpreter and import start-up; most CLI tests
are about what a command prints and returns, not about the process, and run it hundreds of
times. :func:`run` calls ``kcache.cli.main`` (what the console script and ``python -m kcache``
call) with what a new process would have: the environment without the caller's ``KCACHE_*``
(plus ``env``), ``stdin`` as a pipe's text, stdout and stderr captured as pipes (not terminals,
UTF-8, the interpreter's error handlers), Python's default warning filters, no warn-once state,
the exit status of ``SystemExit`` (argparse's usage errors, ``--help``), kcache's per-process
memos (``functools.lru_cache``) empty, and the counters a process flushes at exit. Everything
it changes is put back afterwards. An exception that would end a real process with a
traceback propagates and fails the test.

What needs a real process stays one: start-up (imports, ``sitecustomize`` shims through
``PYTHONPATH``), terminals, exit codes of the real entry point, crashes and concurrency.
"""
from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import warnings

from kcache import warn
from kcache.store import stats

#: Python's own warning filters of a fresh process (``python -W`` unset), last to first.
DEFAULT_FILTERS = (ResourceWarning, ImportWarning, PendingDeprecationWarning, DeprecationWarning)


def _pipe(errors: str) -> io.TextIOWrapper:
    """A text stream over bytes, as Python sets up stdout/stderr on a pipe."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors=errors, write_through=True)


def _read(stream: io.TextIOWrapper, text: bool) -> str | bytes:
    """What ``subprocess.run`` reads from the pipe: the bytes, or with ``text`` their text
    with universal newlines."""
    stream.flush()
    data = stream.buffer.getvalue()
    if not text:
        return data
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def _forget_memos() -> None:
    """Empty the ``lru_cache`` memos of kcache's modules, as a new process starts with them
    (e.g. whether a group is a user's private one: tests create and delete users)."""
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "kcache" or name.startswith("kcache.")):
            continue
        for value in list(vars(module).values()):
            if callable(getattr(value, "cache_clear", None)) and getattr(
                    value, "__module__", None) == name:
                value.cache_clear()


def _status(exc: SystemExit) -> tuple[int, str]:
    """(exit status, text for stderr) of ``SystemExit(code)`` as the interpreter ends on it."""
    if exc.code is None:
        return 0, ""
    if isinstance(exc.code, int):
        return exc.code, ""
    return 1, f"{exc.code}\n"


def run(argv: list[str], env: dict | None = None, stdin: str = "",
        environ: dict | None = None, text: bool = True) -> subprocess.CompletedProcess:
    """``kcache ARGV`` in this process; a CompletedProcess as ``subprocess.run(...,
    capture_output=True, text=text)`` returns for the real command. The environment is
    ``environ`` when given (as ``subprocess.run(env=...)``), else this one without
    ``KCACHE_*``, plus ``env``."""
    from kcache.cli import main as cli_main  # the console script's function
    main_module = sys.modules["kcache.cli.main"]  # its module (kcache.cli.main is the function)

    saved_env = dict(os.environ)
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    log = logging.getLogger("kcache")
    saved_log = list(log.handlers), log.propagate, log.level
    saved_reported = set(main_module._reported_here)
    saved_seen = set(warn._seen)  # the test's own warn-once state, put back afterwards
    out, err = _pipe("surrogateescape"), _pipe("backslashreplace")
    try:
        if environ is None:
            environ = {k: v for k, v in saved_env.items() if not k.startswith("KCACHE_")}
        os.environ.clear()
        os.environ.update({**environ, **(env or {})})
        warn.reset()
        _forget_memos()
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8")
        sys.stdout, sys.stderr = out, err
        with warnings.catch_warnings():
            warnings.resetwarnings()
            for category in DEFAULT_FILTERS:
                warnings.filterwarnings("ignore", category=category)
            try:
                status = cli_main(list(argv))
                tail = ""
            except SystemExit as exc:
                status, tail = _status(exc)
            stats.flush_all()  # what atexit does at the end of the process
        err.write(tail)
        return subprocess.CompletedProcess(["kcache", *argv], status, _read(out, text),
                                           _read(err, text))
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.environ.clear()
        os.environ.update(saved_env)
        log.handlers[:], log.propagate = saved_log[0], saved_log[1]
        log.setLevel(saved_log[2])
        main_module._reported_here.clear()
        main_module._reported_here.update(saved_reported)
        warn.reset()
        warn._seen.update(saved_seen)

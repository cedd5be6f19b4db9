"""Argument parsing and the top-level error handler of the ``kcache`` command.

Each subcommand is one module ``kcache.cli.cmd_<name>`` (``-`` in a name is ``_`` there:
``clean-numba-cache`` is ``cmd_clean_numba_cache``) with a ``register(subparsers)`` that
adds its subparser and a ``run(args) -> int``. Adding a command (``warm``, ``export``,
``import``, ``push``, ``pull``) is one module plus one name in :data:`COMMANDS`.
Only the module of the command being run is imported (all of them for ``kcache --help``),
and each must stay cheap to import (no rich, no numba at module level).
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import sys

from kcache.cli.args import add_common
from kcache.cli.errors import Problem, UsageError
from kcache.cli.text import line

#: Subcommands in the order ``kcache --help`` lists them; module ``kcache.cli.cmd_<name>``
#: (``-`` as ``_``).
COMMANDS = ("dir", "ls", "stats", "show", "prune", "rm", "clear", "verify", "config", "warm",
            "export", "import", "push", "pull", "remote", "clean-numba-cache", "completion")

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


class Parser(argparse.ArgumentParser):
    """argparse parser whose usage errors are one line on stderr and exit status 2.

    argparse's own ``error`` prints the whole usage block first; the project's rule is one
    clear line per bad input, so the usage text is replaced by a pointer to ``--help``.
    """

    def error(self, message: str):  # noqa: D401 - argparse hook
        # argparse quotes the bad value itself (e.g. "invalid choice: '...'"): escaped, and
        # clipped, so that no value can send control characters or 5,000 digits to stderr
        message = suggest(message)
        sys.stderr.write(f"{self.prog}: error: {line(message)} (see '{self.prog} --help')\n")
        raise SystemExit(EXIT_USAGE)


_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<value>[^']{0,200})' \(choose from "
                             r"(?P<choices>.*)\)$")


def suggest(message: str) -> str:
    """argparse's ``invalid choice: 'lss' (choose from 'dir', 'ls', ...)`` with the closest
    choices named first (``difflib.get_close_matches``; argparse's own ``suggest_on_error``
    is Python 3.14's): ``invalid choice: 'lss'; did you mean 'ls'? (choose from ...)``.
    Any other message is returned as it is."""
    found = _INVALID_CHOICE.search(message)
    if found is None:
        return message
    import difflib
    choices = re.findall(r"'([^']*)'", found.group("choices"))
    close = difflib.get_close_matches(found.group("value"), choices, n=3, cutoff=0.6)
    if not close:
        return message
    named = " or ".join(f"'{c}'" for c in close)
    at = found.start("choices") - len(" (choose from ")
    return f"{message[:at]}; did you mean {named}?{message[at:]}"


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Return the ``kcache`` parser with every subcommand of :data:`COMMANDS` registered,
    or with ``only`` that one (the command the arguments name, :func:`command_in`): a
    command then does not pay, at each start, for importing and building the eight others.

    Each parsed namespace carries ``run`` (the command's run function).
    """
    from kcache.cli.env import epilog

    parser = Parser(
        prog="kcache",
        description="Inspect and maintain the kcache store of compiled GPU kernels.",
        # the epilog is a table (one KCACHE_* variable a line): printed as written
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common(parser)
    parser.add_argument("--version", "-V", action="version", version=f"kcache {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    parser.commands = {}  # name -> its parser: where an unknown flag of it is reported
    for name in COMMANDS if only is None else (only,):
        module = importlib.import_module(f"kcache.cli.cmd_{name.replace('-', '_')}")
        command = module.register(sub)
        add_common(command)
        command.set_defaults(run=module.run)
        parser.commands[name] = command
    return parser


def parse(parser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, but words no parser took are reported by the command's own
    parser (``kcache ls: error: ... (see 'kcache ls --help')``: the help that lists its flags,
    not the top one's), with the closest flag of that command for a mistyped one."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = parser.commands.get(getattr(args, "command", None), parser)
        text = f"unrecognized arguments: {' '.join(extra)}"
        import difflib
        flags = [o for a in command._actions for o in a.option_strings if o.startswith("--")]
        close = [c for w in extra if w.startswith("--")
                 for c in difflib.get_close_matches(w.split("=")[0], flags, n=1, cutoff=0.6)]
        if close:
            text += f"; did you mean {' or '.join(repr(c) for c in close)}?"
        command.error(text)
    return args


def command_in(argv: list[str]) -> str | None:
    """The command that ``argv`` names (its first word that is not an option or the value
    of ``--dir``), or None when there is none or it is not one of :data:`COMMANDS` (then
    the full parser answers: help, or the "invalid choice" error)."""
    words = iter(argv)
    for word in words:
        if word == "--":
            return None
        if len(word) >= 3 and any(o.startswith(word) for o in ("--dir", "--cache-dir")):
            next(words, None)  # --dir PATH (argparse allows --di, --cache)
        elif not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def _version() -> str:
    from kcache import __version__
    return __version__


def main(argv: list[str] | None = None) -> int:
    """Run the ``kcache`` command with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    User errors (:class:`UsageError`, ``kcache.errors.KcacheError`` and its ``ConfigError``,
    ``NewerFormat``) become one line on stderr and status 2; problems found by the operation
    (:class:`Problem` and its :class:`NotFound`, ``CorruptEntry``, ``LockTimeout``, an OS
    error on the cache files) become one line and status 1. Anything else is a bug and keeps its traceback.
    """
    import warnings

    from kcache.errors import CorruptEntry, KcacheError, LockTimeout
    from kcache.warn import KcacheWarning

    # The store reports each kind of cache trouble once on logger "kcache" (one line on
    # stderr) and again through `warnings` (two more lines with a source line): keep the one.
    warnings.simplefilter("ignore", KcacheWarning)
    quiet_library_warnings()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # bare `kcache`: the usage, as `pip` prints it (a question, not a mistake)
        build_parser().print_help()
        return EXIT_OK
    argv = join_negative_values(argv)
    args = parse(build_parser(command_in(argv)), argv)
    if getattr(args, "no_color", False):
        os.environ["NO_COLOR"] = "1"  # rich honours it (https://no-color.org), here and in workers
    try:
        return args.run(args)
    except UsageError as exc:
        return _fail(exc, EXIT_USAGE)
    except (Problem, CorruptEntry, LockTimeout) as exc:
        return _fail(exc, EXIT_PROBLEMS)
    except KcacheError as exc:  # ConfigError, NewerFormat: bad input or a cache we must not touch
        return _fail(exc, EXIT_USAGE)
    except BrokenPipeError:
        # `kcache ls | head`: the reader left; stop quietly, as coreutils do. Point stdout at
        # devnull so the interpreter's final flush does not complain again (Python docs,
        # "Note on SIGPIPE").
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:
        # The cache's file system refused (read-only, full, permissions): not a bug here.
        return _fail(exc, EXIT_PROBLEMS)
    except KeyboardInterrupt:
        sys.stderr.write("kcache: interrupted\n")
        return 130


#: Kinds of store warnings (``record.kcache_kind``, kcache.warn) the commands report
#: themselves, in their own words: the store writes them for a program using kernels
#: ("kernels still work but are no longer cached", "treated as a miss"), which is confusing
#: in a maintenance command that says what it did and exits 1.
REPORTED_BY_COMMANDS = ("unwritable", "corrupt", "newer", "unreadable")
#: Kinds reported by the commands whose names go on with a path (``untrusted:<root>``):
#: ``kcache.cli.cache.check_trusted`` says them in the same words.
REPORTED_PREFIXES = ("untrusted:",)
_reported_here: set[str] = set()


def reported_here(*kinds: str) -> None:
    """The command being run reports these kinds of store warnings itself (``push`` and
    ``pull`` name each failed entry with the remote's error, so the store's "remote tier
    error ...; treated as a miss" is not printed); other commands, e.g. ``warm``,
    which compiles through the store, keep them."""
    _reported_here.update(kinds)


class _LibraryWarnings(logging.Filter):
    """Drops the store's runtime-oriented warnings (:data:`REPORTED_BY_COMMANDS`,
    :data:`REPORTED_PREFIXES` and those of :func:`reported_here`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        kind = getattr(record, "kcache_kind", None)
        return (kind not in REPORTED_BY_COMMANDS and kind not in _reported_here
                and not str(kind).startswith(REPORTED_PREFIXES))


def quiet_library_warnings() -> None:
    """Print the store's warnings (logger ``kcache``) once each on stderr, as plain lines,
    except those the commands report themselves (:data:`REPORTED_BY_COMMANDS`): every
    command checks and states write failures, quarantines and skipped entries on its own."""
    log = logging.getLogger("kcache")
    if any(isinstance(h, _StderrHandler) for h in log.handlers):
        return
    handler = _StderrHandler()
    handler.setFormatter(_EscapingFormatter("%(message)s"))
    handler.addFilter(_LibraryWarnings())
    log.addHandler(handler)
    log.propagate = False


class _EscapingFormatter(logging.Formatter):
    """Formats a record as its message on one escaped line (kcache.cli.text.line): a warning quoting
    a path or a value from a cache file cannot send control characters to the terminal."""

    def format(self, record: logging.LogRecord) -> str:
        return line(super().format(record))


class _StderrHandler(logging.StreamHandler):
    """A handler writing to the current ``sys.stderr`` (looked up at each record, so a
    replaced stderr, e.g. in tests, is honoured)."""

    @property
    def stream(self):  # noqa: D401 - logging reads this attribute
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


#: Options taking a value that may be written with a leading "-" (a bad value argparse would
#: otherwise mistake for an option, answering only "expected one argument").
VALUE_OPTIONS = ("--older-than", "--max-size", "--limit", "--cc", "--jobs", "-j")


def join_negative_values(argv: list[str]) -> list[str]:
    """Turn ``--older-than -3d`` into ``--older-than=-3d`` so the option's own type check
    rejects it with a message that says what is wrong (negative) and what is accepted."""
    out: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg in VALUE_OPTIONS:
            nxt = next(it, None)
            if nxt is not None and len(nxt) > 1 and nxt[0] == "-" and nxt[1] in "0123456789.":
                out.append(f"{arg}={nxt}" if arg.startswith("--") else arg + nxt)  # -j-3
                continue
            out.append(arg)
            if nxt is not None:
                out.append(nxt)
            continue
        out.append(arg)
    return out


def _fail(exc: BaseException, status: int) -> int:
    """Write ``exc`` as one line ``kcache: <message>`` on stderr and return ``status``."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        text = f"{exc.filename}: {exc.strerror}"
    else:
        text = " ".join(str(exc).split()) or type(exc).__name__
    sys.stderr.write(f"kcache: {line(text)}\n")
    return status

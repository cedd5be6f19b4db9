"""Options shared by the commands and the argparse types that check user values.

Every value the user gives is bounded before it is converted (issue 7, rule 9): a size,
duration or count longer than a real one could be is refused by its length first, with one
line that echoes it clipped (:func:`kcache.cli.text.clip`), never with a traceback and never
with 5,000 digits.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from kcache.cli.errors import UsageError
from kcache.cli.text import clip

#: Longest size or duration text read (``9223372036854775807`` bytes is 19 digits; units,
#: decimals and spaces fit easily); longer text is refused before any conversion.
MAX_VALUE_TEXT = 64
#: Largest count accepted (``--limit``): the largest signed 64-bit integer.
MAX_COUNT = 2**63 - 1


def add_common(parser: argparse.ArgumentParser) -> None:
    """Add ``--dir`` (alias ``--cache-dir``), ``--json``, ``--wide`` and ``--no-color`` to
    ``parser``.

    They default to ``argparse.SUPPRESS`` so they can be given before or after the
    subcommand (``kcache --dir D ls`` and ``kcache ls --dir D``) without one level
    overwriting the other's value with a default.
    """
    parser.add_argument(
        "--dir", "--cache-dir", dest="dir", metavar="PATH", default=argparse.SUPPRESS,
        help="cache root (default: $KCACHE_DIR, else the platform cache directory)")
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS,
        help="print one JSON document on stdout (schema in docs/cli.md)")
    parser.add_argument(
        "--wide", action="store_true", default=argparse.SUPPRESS,
        help="on a terminal, show every column and value in full (lines may then be wider "
             "than the terminal)")
    parser.add_argument(
        "--no-color", action="store_true", default=argparse.SUPPRESS,
        help="no colours on a terminal (as the NO_COLOR variable)")


def want_json(args: argparse.Namespace) -> bool:
    """True when ``--json`` was given at either level."""
    return bool(getattr(args, "json", False))


def want_wide(args: argparse.Namespace) -> bool:
    """True when ``--wide`` was given at either level."""
    return bool(getattr(args, "wide", False))


def _bounded(text: str, accepted: str) -> str:
    """``text`` when it is short enough to be a size or duration; else ArgumentTypeError."""
    if len(text) > MAX_VALUE_TEXT:
        raise argparse.ArgumentTypeError(
            f"{clip(text)} is too large (more than {MAX_VALUE_TEXT} characters); "
            f"accepted: {accepted}")
    return text


def size_arg(text: str) -> int:
    """argparse type for a size such as ``10G``, ``512MiB`` or ``1048576`` (bytes).

    Parsed by ``kcache.config.parse_size`` so the CLI accepts exactly what KCACHE_MAX_SIZE and
    config.json accept (no sign, at most 2**63-1 bytes), after a length bound
    (:data:`MAX_VALUE_TEXT`). Raises ``argparse.ArgumentTypeError`` (exit 2) otherwise.
    """
    from kcache.config import SIZE_ACCEPTED, parse_size
    try:
        return parse_size(_bounded(text, SIZE_ACCEPTED))
    except ValueError as exc:  # ConfigError is a ValueError
        raise argparse.ArgumentTypeError(one_line(exc)) from None


def duration_arg(text: str) -> float:
    """argparse type for a duration such as ``7d``, ``12h``, ``30m`` (returns seconds).

    Parsed by ``kcache.config.parse_duration`` (no sign, at most 100 years) after a length
    bound (:data:`MAX_VALUE_TEXT`); anything else raises ``argparse.ArgumentTypeError``.
    """
    from kcache.config import DURATION_ACCEPTED, parse_duration
    try:
        return parse_duration(_bounded(text, DURATION_ACCEPTED))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(one_line(exc)) from None


def check_setting_text(name: str, text: str) -> None:
    """Raise :class:`UsageError` when ``text`` for a size or duration setting (``config set
    max_size``/``lock_timeout``) is longer than any real value could be."""
    if name in ("max_size", "lock_timeout") and len(text) > MAX_VALUE_TEXT:
        raise UsageError(f"config set {name}: {clip(text)} is too large (more than "
                         f"{MAX_VALUE_TEXT} characters)")


def positive_int_arg(text: str) -> int:
    """argparse type for a count from 1 to 2**63-1 (``--limit``), ASCII digits only; the
    length is checked before the conversion."""
    digits = text.strip()
    if digits.startswith("-") and digits[1:].isascii() and digits[1:].isdigit():
        raise argparse.ArgumentTypeError(f"negative: {clip(text)} (accepted: a whole number, "
                                         "1 or more)")
    if not (digits.isascii() and digits.isdigit()):
        raise argparse.ArgumentTypeError(f"not a whole number: {clip(text)} (accepted: a whole "
                                         "number, 1 or more)")
    significant = digits.lstrip("0") or "0"  # int() would count leading zeros to its limit
    if len(significant) > len(str(MAX_COUNT)) or int(significant) > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"too large: {clip(text)} (at most {MAX_COUNT})")
    value = int(significant)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more: {clip(text)}")
    return value


def nonblank_arg(what: str):
    """argparse type factory: the text itself, rejecting an empty or blank value.

    ``what`` names the option in the message (e.g. ``--extract``); an unset shell variable
    (``--extract "$X"``) must not silently mean the current directory.
    """
    def check(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{what} needs a value, got {text!r}")
        return text
    return check


def glob_arg(text: str) -> str:
    """argparse type for ``--kernel GLOB``: an empty or blank pattern is refused (an unset
    shell variable must not mean "match nothing" in ``ls`` or be guessed at in ``rm``)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"--kernel needs a glob pattern, got {text!r} (e.g. 'axpy*' or 'pkg.linalg:*')")
    return text


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (whitespace runs joined)."""
    return " ".join(str(exc).split())


def cc_arg(text: str) -> tuple:
    """argparse type for a compute capability in any of numba-cuda's forms (``9.0``, ``9.0a``,
    ``90``, ``sm_90``, ``sm_90a``, ``compute_90``): ``kcache.arch.parse_cc``'s
    ``(major, minor, "a" | None)``. ``9.0`` then matches sm_90 and sm_90a entries, ``sm_90a``
    only sm_90a ones (:func:`arch_matches`). A filter takes any well-formed cc, also one the
    installed toolkit cannot build; the error is ``kcache.arch.option_problem``'s line."""
    from kcache import arch
    try:
        return arch.parse_cc(text)
    except ValueError as exc:
        problem = arch.option_problem("--cc", text) or one_line(exc)
        raise argparse.ArgumentTypeError(problem.removeprefix("--cc ")) from None


def add_entry_filters(parser: argparse.ArgumentParser) -> None:
    """``--kernel GLOB`` and repeatable ``--cc CC``: the entry filters of export, push and
    pull (``ls`` takes the same two, with its own help)."""
    parser.add_argument("--kernel", metavar="GLOB", type=glob_arg,
                        help="only kernels matching GLOB (module:qualname or qualname)")
    parser.add_argument("--cc", type=cc_arg, action="append", metavar="CC",
                        help="only this compute capability (repeatable; 9.0 matches sm_90 and "
                             "sm_90a)")


def arch_matches(arch_name, cc: tuple) -> bool:
    """True when an entry's ``arch`` (e.g. ``sm_90a``) is compute capability ``cc`` (a
    :func:`cc_arg` result); see ``kcache.arch.arch_matches``."""
    from kcache import arch
    return arch.arch_matches(arch_name, cc)


def root_arg(args: argparse.Namespace) -> Path | None:
    """The ``--dir`` root as an absolute path, or None when ``--dir`` was not given.

    Raises :class:`UsageError` for an empty or blank ``--dir`` (an unset shell variable in
    ``--dir "$X"`` must not make the current directory a cache) and for a path that exists and
    is not a directory.
    """
    text = getattr(args, "dir", None)
    if text is None:
        return None
    flag = getattr(args, "dir_flag", "--dir")  # import's --into stands for --dir
    if not text.strip():
        raise UsageError(f"{flag} needs a directory path, got {text!r} (accepted: a cache "
                         f"directory, existing or not; omit {flag} for $KCACHE_DIR or the "
                         "default)")
    path = Path(text).expanduser().absolute()  # as kcache.config makes roots absolute
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {path}: is a file, not a directory (accepted: a cache "
                         "directory, existing or not)")
    return path

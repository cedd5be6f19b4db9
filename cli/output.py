"""The three output forms of every command (docs/cli.md, "Conventions").

Data goes to stdout, messages to stderr. ``--json``: one JSON document (exact bytes, ISO 8601
UTC times, full-precision seconds). On a terminal: tables drawn with rich (kcache.cli.table,
imported only then), human sizes, relative times. Piped: plain text for ``cut``/``awk``, a
header of JSON field names, then one tab-separated row per item. Every value shown, on a
terminal or piped, is escaped (kcache.cli.text.escape): one row is always one line.
"""
from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, Callable, Iterator, Sequence

from kcache.cli.table import Column
from kcache.cli.text import escape, line
from kcache.cli.values import dumps, jsonable

__all__ = ["Column", "is_terminal", "print_json", "message", "cell", "human_value",
           "print_table", "print_fields", "confirm", "progress_bar", "stderr_is_terminal",
           "counting_progress"]


def is_terminal() -> bool:
    """True when stdout is a terminal (then tables and relative times are for people)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def stderr_is_terminal() -> bool:
    """True when stderr is a terminal (a progress bar drawn there helps a person, also while
    stdout is piped into a file)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def print_json(document: Any, *, checked: bool = False) -> None:
    """Write ``document`` as indented JSON on stdout. Values from entry headers need no
    care: :func:`kcache.cli.values.jsonable` turns bytes into hex, keys into strings and
    non-finite floats into text, and bounds the nesting; non-ASCII text is \\u-escaped.
    ``checked``: the document holds only JSON types already (entry records of
    kcache.cli.entries): the walk is skipped (0.2 s for 10,000 entries)."""
    sys.stdout.write(json.dumps(document if checked else jsonable(document), indent=2,
                                allow_nan=False) + "\n")


def message(text: str) -> None:
    """Write a one-line message for people on stderr (never mixed into the data on stdout),
    escaped and bounded (:func:`kcache.cli.text.line`): a path or kernel name in it cannot
    send control characters to the terminal. Rows already written to stdout are flushed
    first: with both streams on one pipe (``kcache ls 2>&1 | less``) the summary comes after
    them, as on a terminal (a closed pipe raises BrokenPipeError, which main handles)."""
    sys.stdout.flush()
    sys.stderr.write(line(text) + "\n")


def cell(value: Any) -> str:
    """A value for plain (piped) output: JSON spellings (``true``, ``false``, empty for
    null), lists of scalars joined with ``", "``, maps as JSON; escaped, so one line and no
    tabs."""
    if isinstance(value, str):
        return escape(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)) and not any(isinstance(v, (dict, list, tuple))
                                                    for v in value):
        return ", ".join(cell(v) for v in value)
    if isinstance(value, float):
        return str(jsonable(value))  # NaN, Infinity as JSON writers spell them
    if isinstance(value, (dict, list, tuple)):
        return escape(dumps(value, sort_keys=True))
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    return escape(dumps(value))


def human_value(value: Any) -> str:
    """A value for people: ``yes``/``no`` for booleans, ``-`` for none, otherwise as
    :func:`cell` writes it (escaped)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return cell(value)


def print_table(columns: Sequence[Column], items: Sequence[Any], *,
                human: Callable[[Any], Sequence[Any]], plain: Callable[[Any], Sequence[Any]],
                names: Sequence[str], wide: bool = False, title: str | None = None) -> None:
    """Print a table of ``items``: on a terminal their ``human(item)`` rows fitted to its
    width (kcache.cli.table; ``wide``: in full), else a header line of ``names`` (the JSON
    field names) and one tab-separated line of ``plain(item)`` per item. Only the form
    printed is computed (10,000 rows of relative times cost a quarter of a second)."""
    if is_terminal():
        if not items:
            return  # an empty table says nothing; the command's message says why
        from kcache.cli.table import draw
        draw(columns, [[human_value(v) for v in human(item)] for item in items], wide=wide,
             title=title)
        return
    lines = ["\t".join(names)]
    lines += ["\t".join([cell(v) for v in plain(item)]) for item in items]
    sys.stdout.write("\n".join(lines) + "\n")


#: The name and value columns of :func:`print_fields`: both lose their middle when the
#: terminal is narrow (a name from a header's meta may be long too), down to 16 cells.
_FIELD_COLUMNS = (Column("field", shrink=16, keep=24), Column("value", shrink=16))


def print_fields(pairs: Sequence[tuple[str, Any, Any]], *, wide: bool = False,
                 title: str | None = None, whole: Callable[[str], bool] | None = None) -> None:
    """Print ``(name, human, plain)`` pairs: a two-column grid on a terminal, else
    ``name<TAB>plain`` lines (spaces in names become ``_``). ``whole(name)``: that field's
    value is never cut on a terminal, wrapped under its name when it does not fit beside it
    (kcache.cli.table.draw_fields; ``show``'s key, signature, path)."""
    if is_terminal():
        from kcache.cli.table import draw, draw_fields
        if whole is not None and not wide:
            draw_fields([(escape(name), human_value(human), whole(name))
                         for name, human, _ in pairs], title=title)
            return
        draw(_FIELD_COLUMNS, [[escape(name), human_value(human)] for name, human, _ in pairs],
             wide=wide, title=title, show_header=False, bold_first=True)
        return
    write = sys.stdout.write
    for name, _, plain in pairs:
        write(f"{escape(name).replace(' ', '_')}\t{cell(plain)}\n")


def confirm(question: str) -> bool:
    """Ask a yes/no ``question`` on the terminal; True only for an explicit yes."""
    sys.stderr.write(f"{escape(question)} [y/N] ")
    sys.stderr.flush()
    try:
        answer = sys.stdin.readline()
    except (OSError, KeyboardInterrupt):
        return False
    return answer.strip().lower() in ("y", "yes")


@contextlib.contextmanager
def progress_bar(enabled: bool, description: str) -> Iterator[Callable[[int, int], None] | None]:
    """Yield a ``progress(done, total)`` callback drawing a rich progress bar labelled
    ``description`` on stderr when ``enabled`` (a terminal), else None (rich is then not
    imported). The bar disappears when done: the command's summary follows."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress
    with Progress(console=Console(stderr=True, highlight=False, markup=False, emoji=False),
                  transient=True) as bar:
        task = bar.add_task(description, total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield progress


def counting_progress(label: str, total: int, *, transient: bool):
    """A rich ``Progress`` (not started) on stderr for ``total`` items: ``label``, a bar,
    ``done/total``, the time taken, then what was just done. The counters and the label are
    never cut (rich shrinks every column of a narrow terminal alike: ``warm ━╺ 1… 0…``); the
    bar is 10 to 30 cells (an eighth of the width), and the description gets what is left: its ``describe(word,
    kernel)`` keeps the kernel's qualname (kcache.cli.table.shorten_kernel)."""
    from rich.console import Console
    from rich.markup import escape as markup_escape
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)
    from rich.table import Column as RichColumn

    from kcache.cli.table import GAP, cell_len, shorten_kernel

    console = Console(stderr=True, highlight=False, markup=False, emoji=False)
    digits = len(str(total))
    counter = 2 * digits + 1
    bar_width = max(10, min(30, console.width // 8))  # the kernel's name says more
    fixed = cell_len(label) + bar_width + counter + len("0:00:00") + 4 * (GAP // 2)
    whole = dict(no_wrap=True, overflow="crop")

    class _Bar(Progress):
        def describe(self, word: str, kernel: str) -> str:
            room = console.width - fixed - 1 - cell_len(word) - 1  # 1: the right edge
            return markup_escape(f"{word} {shorten_kernel(escape(kernel), max(room, 8))}")

    return _Bar(TextColumn(label, table_column=RichColumn(**whole)),
                BarColumn(bar_width=bar_width),
                MofNCompleteColumn(table_column=RichColumn(min_width=counter, **whole)),
                TimeElapsedColumn(table_column=RichColumn(**whole)),
                TextColumn("{task.description}",
                           table_column=RichColumn(no_wrap=True, overflow="ellipsis")),
                console=console, transient=transient)

"""Terminal tables that fit the terminal without breaking a word.

rich wraps a cell that does not fit, which breaks names mid-word (``Signatur``/``e``,
``examples.``/``kernels:b``). Instead each table is laid out here before rich draws it:
columns that may be shortened (long kernel names, signatures, paths) lose characters in the
middle (``pkg.mod…:kernel``), never their header, and when that is not enough the least
important columns are hidden, named in a caption. ``--wide`` skips all of this: every column,
every character (of cells up to MAX_WIDE_CELL), lines as long as they need to be.

rich is imported only here, and this module only when something is drawn on a terminal.
"""
from __future__ import annotations

from typing import Sequence

ELLIPSIS = "…"
GAP = 2  # columns between two table columns (rich: padding 1 on each side, no outer edge)
#: Widest cell ``--wide`` draws whole (a signature may be 65,536 characters): rich pads every
#: row to the widest, so one 60-million-character value from a hostile header cost 3.4 GB,
#: 58 s and 1.1 GB of output; a longer cell loses its middle (``--json`` has it whole).
MAX_WIDE_CELL = 1 << 16


class Column:
    """One table column.

    ``shrink``: None when cells are never shortened, else the narrowest width (cells) the
    column may be given, cells then losing their middle; ``keep``: the width it keeps while
    other columns can still be hidden instead (a kernel name stays readable rather than
    every column shrinking to a stub); ``drop``: 0 for a column that is always shown, else
    its rank in hiding order (the highest is hidden first). (A plain class: a dataclass
    costs a millisecond to create at import, on every command's start-up.)"""

    __slots__ = ("header", "right", "shrink", "keep", "drop", "cut")

    def __init__(self, header: str, right: bool = False, shrink: int | None = None,
                 keep: int = 0, drop: int = 0, cut: str = "middle") -> None:
        self.header, self.right, self.shrink, self.keep, self.drop = (
            header, right, shrink, keep, drop)
        #: how a cell loses characters (:func:`cut_cells`): "middle"; "kernel" (the end of a
        #: ``module:qualname`` stays, the module loses its middle); "distinct" (the part
        #: where the cell first differs from the other cells of its column stays)
        self.cut = cut


def keeping(columns: Sequence[Column], header: str) -> tuple:
    """``columns`` with the one named ``header`` never hidden (its cut and keep width as
    they were)."""
    return tuple(Column(c.header, c.right, c.shrink, c.keep, 0, c.cut) if c.header == header
                 else c for c in columns)


def rows_alike(views) -> bool:
    """True when two of ``views`` share kernel and arch: their Signature is then what tells
    the rows apart, so a table keeps it (``ls``, ``prune``)."""
    seen = set()
    for v in views:
        if (v.kernel, v.arch) in seen:
            return True
        seen.add((v.kernel, v.arch))
    return False


def cell_len(text: str) -> int:
    """Terminal cells taken by ``text`` (wide characters count 2)."""
    from rich.cells import cell_len as rich_cell_len
    return len(text) if text.isascii() else rich_cell_len(text)


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` cells by dropping its middle: ``pkg.linalg…:axpy``."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    from rich.cells import get_character_cell_size as size
    head_room, tail_room = width // 2, width - width // 2 - 1
    head, used = [], 0
    for char in text:
        if used + size(char) > head_room:
            break
        head.append(char)
        used += size(char)
    tail, used = [], 0
    for char in reversed(text):
        if used + size(char) > tail_room:
            break
        tail.append(char)
        used += size(char)
    return "".join(head) + ELLIPSIS + "".join(reversed(tail))


def shorten_kernel(text: str, width: int) -> str:
    """``module:qualname`` cut to ``width`` cells keeping the qualname, which tells kernels
    apart (``…cache_usecases:add_usecase_kernel``): the module loses its first dotted parts
    (then characters from its start), so its last part stays next to the qualname; when even
    the qualname does not fit, its end stays (``…ecase_kernel``)."""
    if cell_len(text) <= width:
        return text
    module, sep, qualname = text.rpartition(":")
    room = width - cell_len(qualname) - len(sep)
    if module and room >= 6:
        parts = module.split(".")
        for n in range(1, len(parts)):  # whole dotted parts go first, from the left
            rest = ELLIPSIS + ".".join(parts[n:])
            if cell_len(rest) <= room:
                return rest + sep + qualname
        return _keep_end(module, room) + sep + qualname
    return _keep_end(text, width)


def _keep_end(text: str, width: int) -> str:
    if width <= 1:
        return ELLIPSIS[:width]
    from rich.cells import get_character_cell_size as size
    tail, used = [], 0
    for char in reversed(text):
        if used + size(char) > width - 1:
            break
        tail.append(char)
        used += size(char)
    return ELLIPSIS + "".join(reversed(tail))


def differ_at(cells: Sequence[str]) -> dict[str, int]:
    """For each distinct text of ``cells``, where it first differs from the most alike other
    one (the longest common prefix, found between neighbours in sorted order); texts
    without another are left out."""
    values = sorted(set(cells))
    out: dict[str, int] = {}
    for i, text in enumerate(values):
        common = 0
        for j in (i - 1, i + 1):
            if 0 <= j < len(values):
                other, n = values[j], 0
                limit = min(len(text), len(other))
                while n < limit and text[n] == other[n]:
                    n += 1
                common = max(common, n)
        if len(values) > 1:
            out[text] = common
    return out


#: Characters after the first difference that :func:`shorten_distinct` keeps in sight.
_AFTER_DIFFERENCE = 8


def shorten_distinct(text: str, width: int, at: int | None) -> str:
    """``text`` cut to ``width`` cells keeping what follows position ``at`` (where it differs
    from its neighbours, :func:`differ_at`; a few characters before it for context): two
    overloads stay apart (``(array(f…at64, 1d, C), …``); when the difference is near the
    start, the end goes (``(float32[::1, :], float32…``). None or 0: :func:`shorten`."""
    if cell_len(text) <= width:
        return text
    if not at or not text.isascii() or width < 8:
        return shorten(text, width)
    if at + _AFTER_DIFFERENCE <= width - 1:  # the difference is near the start: cut the end
        return text[:width - 1] + ELLIPSIS
    start = _argument_start(text, at)
    tail = text[start:]
    if len(tail) + 1 <= width:
        return text[:width - 1 - len(tail)] + ELLIPSIS + tail
    head = min(start, max(0, (width - 2) // 3))  # some of the start, most for the difference
    body = width - 2 - head
    return text[:head] + ELLIPSIS + text[start:start + body] + ELLIPSIS


def _argument_start(text: str, at: int) -> int:
    """Where the argument holding position ``at`` starts (after ``, `` or ``(``), when that
    is a few characters back (``…float64)`` rather than ``…loat64)``); else ``at - 4``."""
    comma, paren = text.rfind(", ", 0, at), text.rfind("(", 0, at)
    boundary = max(comma + 2 if comma >= 0 else 0, paren + 1 if paren >= 0 else 0)
    return boundary if at - boundary <= 12 else max(0, at - 4)


def cut_cells(column: Column, cells: Sequence[str], width: int,
              groups: Sequence[str] | None = None) -> list[str]:
    """The cells of one column cut to ``width`` cells each, as ``column.cut`` says. For
    "distinct", ``groups`` (e.g. each row's kernel) says which cells are compared: the
    overloads of one kernel, whose difference is what the reader needs."""
    if column.cut == "kernel":
        return [shorten_kernel(c, width) for c in cells]
    if column.cut == "distinct" and any(cell_len(c) > width for c in cells):
        keys = groups if groups is not None else [""] * len(cells)
        members: dict[str, list[str]] = {}
        for key, c in zip(keys, cells):
            members.setdefault(key, []).append(c)
        at = {key: differ_at(group) for key, group in members.items()}
        return [shorten_distinct(c, width, at[key].get(c)) for key, c in zip(keys, cells)]
    return [shorten(c, width) for c in cells]


def layout(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int,
           wide: bool = False) -> tuple[list[int], dict[int, int]]:
    """``(shown column indexes, width of each)`` for a table of ``rows`` (escaped text) in
    ``width`` cells. Natural widths when they fit (or ``wide``); else shortenable columns
    are narrowed evenly from the widest down, first not below their ``keep`` width (hiding
    columns by ``drop`` rank as needed); when hiding every droppable column is not enough,
    with every droppable column hidden, the largest ``keep`` widths are lowered evenly
    until they fit (a kernel name keeps its 24 cells while a signature that wants 48 gets
    the rest), down to the columns' minimums (never below their header). When even that
    does not fit, the minimum is used (the terminal wraps whole lines). A droppable column
    with a ``keep`` width is lowered that way before it is hidden."""
    natural = [max([cell_len(c.header)] + [cell_len(r[i]) for r in rows])
               for i, c in enumerate(columns)]
    if wide:
        return list(range(len(columns))), dict(enumerate(natural))
    hide_order = sorted((i for i, c in enumerate(columns) if c.drop),
                        key=lambda i: -columns[i].drop)
    unbounded = max([c.keep for c in columns] + [0])
    for hidden in range(len(hide_order) + 1):
        shown = [i for i in range(len(columns)) if i not in hide_order[:hidden]]
        widths = _fit(columns, natural, shown, width, unbounded)
        if widths is not None:
            return shown, widths
        # below their keep widths only once every droppable column without a keep width is
        # hidden: a kernel name or signature cut to a stub says less than the Size or Hits
        # beside it. A droppable column with a keep width (ls's Signature) is cut, the
        # others keeping theirs, before it is hidden.
        if hidden < len(hide_order) and columns[hide_order[hidden]].keep:
            widths = _lowered(columns, natural, shown, width, unbounded, {hide_order[hidden]})
            if widths is not None:
                return shown, widths
    widths = _lowered(columns, natural, shown, width, unbounded)
    if widths is not None:
        return shown, widths
    return shown, {i: _minimum(columns[i], natural[i], 0) for i in shown}


def _lowered(columns: Sequence[Column], natural: list[int], shown: list[int], width: int,
             unbounded: int, only: set[int] | None = None) -> dict[int, int] | None:
    """Widths of ``shown`` with the largest ``keep`` widths (of the columns in ``only``, or
    all) lowered evenly until they fit, or None when even the columns' minimums do not."""
    for cap in range(unbounded - 1, -1, -1):
        widths = _fit(columns, natural, shown, width, cap, only)
        if widths is not None:
            return widths
    return None


def _minimum(column: Column, natural: int, cap: int) -> int:
    """The narrowest ``column`` may be: its ``keep`` width (at most ``cap``) or its
    ``shrink`` width, whichever is wider, never below its header nor above ``natural``."""
    if column.shrink is None:
        return natural
    floor = max(column.shrink, min(column.keep, cap))
    return min(natural, max(floor, cell_len(column.header)))


def _fit(columns: Sequence[Column], natural: list[int], shown: list[int],
         width: int, cap: int, only: set[int] | None = None) -> dict[int, int] | None:
    """Widths of ``shown`` within ``width``, shortenable columns capped at one common level
    (as high as fits), or None when even their minimums (:func:`_minimum`: their ``keep``
    widths up to ``cap``, for the columns in ``only`` when given) do not fit."""
    fixed = [i for i in shown if columns[i].shrink is None]
    flexible = [i for i in shown if columns[i].shrink is not None]
    room = width - sum(natural[i] for i in fixed) - GAP * (len(shown) - 1)
    floor = {i: _minimum(columns[i], natural[i],
                         cap if only is None or i in only else columns[i].keep)
             for i in flexible}
    if sum(floor.values()) > room:
        return None

    def used(level: int) -> int:
        return sum(max(floor[i], min(natural[i], level)) for i in flexible)

    low, high = 0, max([natural[i] for i in flexible], default=0)
    while low < high:  # the highest level whose widths fit in room
        mid = (low + high + 1) // 2
        low, high = (mid, high) if used(mid) <= room else (low, mid - 1)
    widths = {i: natural[i] for i in fixed}
    widths.update({i: max(floor[i], min(natural[i], low)) for i in flexible})
    return widths


def draw(columns: Sequence[Column], rows: Sequence[Sequence[str]], *, wide: bool = False,
         title: str | None = None, show_header: bool = True, bold_first: bool = False) -> None:
    """Draw ``rows`` (escaped text, one per column) on stdout with rich, laid out by
    :func:`layout` for the terminal's width; hidden columns are named in a caption."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False, markup=False, emoji=False)
    if wide:
        rows = [[shorten(c, MAX_WIDE_CELL) if len(c) > MAX_WIDE_CELL else c for c in row]
                for row in rows]
    shown, widths = layout(columns, rows, console.width, wide)
    if wide:  # as wide as the table: the terminal wraps lines, nothing is cut
        total = sum(widths.values()) + GAP * (len(shown) - 1)
        console = Console(highlight=False, markup=False, emoji=False,
                          width=max(console.width, total, cell_len(title or "")))
    kernel = next((i for i, c in enumerate(columns) if c.cut == "kernel"), None)
    groups = [row[kernel] for row in rows] if kernel is not None else None
    cut = [cut_cells(columns[i], [row[i] for row in rows], widths[i], groups) for i in shown]
    for n, i in enumerate(shown):  # a cut may leave a column narrower than its share
        widths[i] = max([cell_len(columns[i].header)] + [cell_len(c) for c in cut[n]])
    hidden = [columns[i].header for i in range(len(columns)) if i not in shown]
    # printed under the table at the terminal's width, wrapped between words: as rich's
    # table caption it could end a column past the edge
    caption = (Text(f"(no room for: {', '.join(hidden)}; --wide shows all)",
                    style="dim") if hidden else None)
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_header=show_header,
                  header_style="bold", show_edge=False, expand=False,
                  title=Text(shorten(title, console.width)) if title else None,
                  title_justify="left")
    for n, i in enumerate(shown):
        col = columns[i]
        table.add_column(Text(col.header), justify="right" if col.right else "left",
                         width=widths[i], no_wrap=True, overflow="ellipsis",
                         style="bold" if bold_first and n == 0 else None)
    for n in range(len(rows)):
        table.add_row(*(Text(column[n]) for column in cut))
    console.print(table)
    if caption is not None:
        console.print(caption, width=console.width)


#: Narrowest value column :func:`draw_fields` leaves beside the names (a longer name goes
#: on a line of its own).
MIN_VALUE = 24


def draw_fields(rows: Sequence[tuple[str, str, bool]], *, title: str | None = None) -> None:
    """Draw ``(name, value, whole)`` rows (escaped text) on stdout: bold names in a column,
    values beside them, fitted to the terminal's width. Names are never cut: one longer
    than the name column goes on a line of its own, its value on the next. A value that
    does not fit beside its name loses its middle, unless ``whole``: then it goes on the
    next line, unindented, in one piece (no inserted line break: the terminal wraps it, and
    a path or signature selected there is copied whole; ``kcache show``)."""
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False, markup=False, emoji=False)
    width = console.width
    names = max([cell_len(name) for name, _v, _w in rows] or [0])
    # the values that are cut want room more than the longest names: up to half the width
    values = max([cell_len(v) for _n, v, whole in rows if not whole] or [0])
    name_width = max(1, min(names, width - GAP - max(MIN_VALUE, min(values, width // 2))))
    room = width - name_width - GAP

    def line(text: str, bold: str = "") -> None:  # never cut, never wrapped by rich
        out = Text()
        out.append(bold, style="bold")
        out.append(text)
        console.print(out, no_wrap=True, crop=False, soft_wrap=True)

    if title:
        console.print(Text(shorten(title, width)), no_wrap=True, crop=False)
    for name, value, whole in rows:
        if whole and len(value) > MAX_WIDE_CELL:
            value = shorten(value, MAX_WIDE_CELL)
        if cell_len(name) > name_width:  # a name of its own line, its value under it
            line("", name)
            line(value if whole else " " * GAP + shorten(value, width - GAP))
        elif cell_len(value) <= room:
            line(" " * (name_width - cell_len(name) + GAP) + value, name)
        elif whole:
            line("", name)
            line(value)
        else:
            line(" " * (name_width - cell_len(name) + GAP) + shorten(value, room), name)

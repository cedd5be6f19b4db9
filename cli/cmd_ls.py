"""``kcache ls``: one row per entry (short key, kernel, signature, arch, size, hits, ...)."""
from __future__ import annotations

import argparse

from kcache.cli.args import (
    cc_arg, glob_arg, positive_int_arg, want_json, want_wide,
)
from kcache.cli.cache import open_store
from kcache.cli.entries import entries_and_broken, entry_record, is_stale
from kcache.cli.fmt import ago, entries_text, human_seconds, human_size, iso, plain_seconds
from kcache.cli.output import Column, message, print_json, print_table
from kcache.cli.table import keeping, rows_alike
from kcache.cli.entries import plain_table, shows_frontend
from kcache.cli.problems import LAYER_HINT, not_regular
from kcache.cli.selection import Selection, add_selection

#: --sort keys -> (sort key of an EntryView, newest/largest first?)
SORTS = {
    "last-used": (lambda v: v.last_used or 0.0, True),
    "size": (lambda v: v.file_size, True),
    "hits": (lambda v: v.hits, True),
    "name": (lambda v: (v.kernel or "", v.signature or "", v.arch or ""), False),
    "created": (lambda v: v.created or 0.0, True),
}

#: Width a Signature keeps while other columns can be hidden instead: the short form of three
#: or four arguments (``(float32[:, ::1], float32[::1], int64)``).
SIGNATURE_KEEP = 48
#: Terminal columns. When the terminal is narrow, kernel names keep their qualname (the
#: module loses its middle), signatures keep where they differ from the others, and Compile
#: time, Hits, Last used, Size go, in that order, before a kernel name is cut below 24 cells
#: or a signature below SIGNATURE_KEEP (then down to 16 and 12), whatever the number of rows;
#: Signature goes last, only when even that does not fit. It is never hidden while two rows
#: share kernel and arch (:func:`columns_for`): two overloads would print as the same row.
COLUMNS = (
    Column("Key"),
    Column("Kernel", shrink=16, keep=24, cut="kernel"),
    Column("Signature", shrink=12, keep=SIGNATURE_KEEP, drop=1, cut="distinct"),
    Column("Arch"),
    Column("Size", right=True, drop=2),
    Column("Hits", right=True, drop=4),
    Column("Last used", drop=3),
    Column("Compile time", right=True, drop=5),
)
#: COLUMNS with a Signature that is never hidden.
_WITH_SIGNATURE = keeping(COLUMNS, "Signature")


def last_used_cell(view) -> str:
    """"5 min ago"; ``-`` for an entry of a read-only layer, which is never touched: its
    file's time is when the layer was made, not a use."""
    return "-" if view.readonly else ago(view.last_used)


def columns_for(views) -> tuple:
    """:data:`COLUMNS`, with Signature kept when it is what tells two rows apart (the same
    kernel and arch), and a Front-end column after Arch when an entry is not numba-cuda's
    (:func:`shows_frontend`), hidden first when every row has the same one."""
    columns = _WITH_SIGNATURE if rows_alike(views) else COLUMNS
    if shows_frontend(views):
        at = [c.header for c in columns].index("Arch") + 1
        # one front-end on every row says nothing a row needs: the first column to go
        alike = len({getattr(v, "frontend", None) for v in views}) == 1
        columns = columns[:at] + (FRONTEND_ALIKE if alike else FRONTEND_COLUMN,) + columns[at:]
    return columns


#: The front-end of a kernel entry on a terminal, short (docs/cli.md): numba-cuda-mlir's as
#: "mlir"; shown only in a listing holding an entry that is not numba-cuda's.
FRONTEND_COLUMN = Column("Front-end")
#: The same, when every row has the same front-end: hidden before any other column.
FRONTEND_ALIKE = Column("Front-end", drop=6)
_SHORT_FRONTEND = {"numba-cuda-mlir": "mlir"}


def frontend_cell(view) -> str | None:
    return _SHORT_FRONTEND.get(view.frontend, view.frontend)

#: Header of the plain (piped) table: the entry object's JSON field names (docs/cli.md).
PLAIN_NAMES = ("short_key", "kernel", "signature", "arch", "file_size", "hits", "last_used",
               "compile_seconds")


def register(sub):
    """Add the ``ls`` subparser to ``sub`` and return it."""
    p = sub.add_parser("ls", help="list cache entries",
                       description="List cache entries, most recently used first.")
    p.add_argument("--kernel", metavar="GLOB", type=glob_arg,
                   help="only kernels matching GLOB (module:qualname or qualname)")
    p.add_argument("--cc", type=cc_arg, action="append", metavar="CC",
                   help="only this compute capability (repeatable; 9.0 matches sm_90 and "
                        "sm_90a)")
    add_selection(p)
    p.add_argument("--stale", action="store_true",
                   help="only entries built by a toolchain other than the current one")
    # choices: what completion offers (the type's own message answers a bad one first)
    p.add_argument("--sort", default="last-used", type=_sort_key, metavar="KEY",
                   choices=tuple(SORTS),
                   help=f"order by one of: {', '.join(SORTS)} (default last-used)")
    p.add_argument("--limit", type=positive_int_arg, metavar="N", help="at most N rows")
    return p


def _sort_key(text: str) -> str:
    if text not in SORTS:
        from kcache.cli.text import clip
        raise argparse.ArgumentTypeError(
            f"unknown sort key {clip(text)} (accepted: {', '.join(SORTS)})")
    return text


def select(store, args, *, with_stale: bool) -> tuple[list, list]:
    """Entries of ``store`` passing the selection switches (kcache.cli.selection, ``--kind``
    among them) and ``--stale``, sorted (``--limit`` is the caller's).

    Returns ``(rows, broken)``: ``rows`` are ``(EntryView, stale)`` pairs, including entry
    files whose header cannot be read (listed only when no filter is given, since nothing is
    known to match); ``broken`` lists every such file. ``stale`` is a bool when ``with_stale`` or ``--stale`` (the toolchain
    versions are then read once), else None. Reads headers only
    (``Store.entries(include_broken=True)``).
    """
    current = None
    if with_stale or args.stale:
        from kcache.toolchain import package_versions
        current = package_versions()
    rows = []
    selection = Selection(args)
    good, broken = entries_and_broken(store)
    for view in good:
        if selection and not selection.matches(view):
            continue
        stale = is_stale(view, current) if current is not None else None
        if args.stale and not stale:
            continue
        rows.append((view, stale))
    if not filtered(args):
        rows += [(b, False if current is not None else None) for b in broken]
    key, reverse = SORTS[args.sort]
    rows.sort(key=lambda r: key(r[0]), reverse=reverse)
    return rows, broken


def filtered(args) -> bool:
    """True when a switch choosing entries was given (then unreadable entries, of which
    nothing is known, are not listed)."""
    return bool(Selection(args) or args.stale)


def run(args) -> int:
    """Print the entries. JSON: ``{"entries": [entry object, ...]}`` (docs/cli.md).

    Entry files whose header cannot be read are listed with their ``problem`` (JSON) or
    ``(unreadable: ...)`` in the kernel column, and counted in a note on stderr."""
    as_json = want_json(args)
    store = open_store(args)
    matched, broken = select(store, args, with_stale=as_json)
    rows = matched[: args.limit] if args.limit else matched
    if as_json:
        layers = layer_records(store)  # only with read-only layers: the document is as it was
        print_json({"entries": [entry_record(view, stale) for view, stale in rows],
                    **({"layers": layers} if layers else {})}, checked=True)
    else:
        views = [view for view, _ in rows]
        fe = shows_frontend(views)
        short = not want_wide(args)  # numba's short form where space is short
        print_table(
            columns_for(views), views,
            human=lambda v: (v.short_key, v.kernel_cell(), v.signature_cell(short), v.arch,
                             *((frontend_cell(v),) if fe else ()),
                             human_size(v.file_size), v.hits, last_used_cell(v),
                             human_seconds(v.compile_seconds)),
            **plain_table(PLAIN_NAMES, lambda v: (
                v.short_key, v.kernel_cell(), v.signature_cell(), v.arch, v.file_size, v.hits,
                iso(v.last_used), plain_seconds(v.compile_seconds)), views),
            wide=want_wide(args))
        if not rows:
            message("kcache: no entries match" if filtered(args)
                    else "kcache: the cache has no entries")
        else:  # as `pip cache list` ends; on stderr, so the plain table stays rows only
            size = human_size(_bytes(views))
            if len(matched) > len(views):  # --limit cut the list: say how much is left out
                message(f"kcache: {len(views)} of {entries_text(len(matched))}, {size} of "
                        f"{human_size(_bytes(v for v, _ in matched))}")
            else:
                message(f"kcache: {entries_text(len(views))}, {size}")
            _layers_note(store, views)
    _broken_note(broken)
    return 0


def layer_records(store) -> list[dict]:
    """What each read-only layer serves (kcache.store.layers.describe): path, kind, format
    version, entries and bytes (a bundle's, from its index), problem."""
    from kcache.store.layers import describe
    return [describe(layer, store.untrusted) for layer in store.layers]


def _layers_note(store, views) -> None:
    """One line per read-only layer serving rows of the table: which, and how many."""
    served: dict[str, int] = {}
    for v in views:
        if v.readonly:
            served[str(v.info.root)] = served.get(str(v.info.root), 0) + 1
    for rec in layer_records(store) if served else []:
        if rec["path"] in served:
            what = (f"bundle format {rec['format_version']}, {entries_text(rec['entries'])}"
                    if rec["kind"] == "bundle" else "folder")
            message(f"kcache: {served[rec['path']]} of them from the read-only layer "
                    f"{rec['path']} ({what})")


def _bytes(views) -> int:
    return sum(v.file_size for v in views if isinstance(v.file_size, int))


def _broken_note(broken: list) -> None:
    in_layers = [b for b in broken if b.readonly]
    if in_layers:
        first = in_layers[0]
        message(f"kcache: {entries_text(len(in_layers))} of read-only layers cannot be read "
                f"(e.g. {first.short_key} in {first.info.root}: {first.problem}); "
                f"{LAYER_HINT}")
    broken = [b for b in broken if not b.readonly]
    if broken:
        first = broken[0]
        # rm never deletes an entry path that is not a regular file (e.g. a directory):
        # only verify --fix (which quarantines it) is offered then.
        rm_hint = ("" if any(not_regular(b.problem) for b in broken)
                   else ", or 'kcache rm KEY' to remove one")
        message(f"kcache: {entries_text(len(broken))} cannot be read (e.g. "
                f"{first.short_key}: {first.problem}); run 'kcache verify --fix' to "
                f"quarantine them{rm_hint}")

"""``kcache rm KEY-PREFIX... | SELECTION [--yes] [--dry-run]``: remove entries from the
writable root, given by key prefix or chosen by the selection switches (kcache.cli.selection:
``--kernel``, ``--cc``, ``--signature``, ``--kind``, ``--older-than``, ``--since``)."""
from __future__ import annotations

import sys

from kcache.cli.args import cc_arg, glob_arg, want_json, want_wide
from kcache.cli.cache import ensure_writable, layer_kind, open_store, write_problem
from kcache.cli.entries import EntryView, entry_record, plain_table, resolve_prefix
from kcache.cli.errors import NotFound, Problem, UsageError
from kcache.cli.fmt import entries_text, human_size
from kcache.cli.output import Column, confirm, is_terminal, message, print_json, print_table
from kcache.cli.problems import left_text, not_removed
from kcache.cli.selection import Selection, add_selection

#: Terminal columns (see cmd_ls.COLUMNS): the signature (short form) tells overloads apart.
COLUMNS = (Column("Key"), Column("Kernel", shrink=16, keep=24, cut="kernel"),
           Column("Signature", shrink=12, keep=40, cut="distinct"), Column("Arch"),
           Column("Size", right=True, drop=1))
#: Header of the plain (piped) table: JSON field names; ``signature`` (the full form) was
#: added last, so that ``cut -f`` of the first four still works.
PLAIN_NAMES = ("short_key", "kernel", "arch", "file_size", "signature")


def register(sub):
    """Add the ``rm`` subparser to ``sub`` and return it."""
    p = sub.add_parser("rm", help="remove entries by key prefix, kernel, signature or age",
                       description="Remove entries given by unique key prefixes (also entries "
                                   "whose header cannot be read), or every entry chosen by "
                                   "--kernel, --cc, --signature, --kind, --older-than and "
                                   "--since "
                                   "(all of those given must match). More than one entry is "
                                   "listed, then asked for.")
    p.add_argument("prefixes", nargs="*", metavar="KEY-PREFIX",
                   help="unique key prefixes, as shown by 'kcache ls'")
    p.add_argument("--kernel", metavar="GLOB", type=glob_arg,
                   help="remove every entry whose kernel (module:qualname or qualname) matches")
    p.add_argument("--cc", type=cc_arg, action="append", metavar="CC",
                   help="remove entries of this compute capability (repeatable; 9.0 matches "
                        "sm_90 and sm_90a)")
    add_selection(p, "remove")
    p.add_argument("--yes", "-y", action="store_true",
                   help="do not ask before removing more than one entry (needed when stdin "
                        "is not a terminal)")
    p.add_argument("--dry-run", "-n", action="store_true",
                   help="print what would be removed, remove nothing")
    return p


def run(args) -> int:
    """Remove the entries; every prefix is resolved, or the selection made, before anything
    is removed.

    JSON: ``{"removed": [entry object...], "bytes_freed", "not_removed": [entry object +
    "reason"...], "dry_run"}``, printed also when some entries stay. Exit 1 when a selection
    matches no entry (one line, as for a key prefix no entry has) or an entry could not be
    removed (read-only dir, locked by another process, not a regular file, ...): the reason
    is named for each. More than one entry to remove needs ``--yes`` (as ``clear``): on a
    terminal they are listed, then asked for; refused (exit 2, nothing removed) when stdin
    is not one.
    """
    selection = Selection(args)
    if selection and args.prefixes:
        raise UsageError(f"rm: give KEY-PREFIX... or a selection ({selection.describe()}), "
                         "not both")
    if not selection and not args.prefixes:
        raise UsageError("rm: give KEY-PREFIX... or a selection (--kernel GLOB, --cc CC, "
                         "--signature GLOB, --kind KIND, --older-than DURATION, --since "
                         "DURATION)")
    store = open_store(args)
    if selection:
        targets = [v for v in map(EntryView, store.entries()) if selection.matches(v)]
        if not targets:
            raise NotFound(f"no entry matches {selection.describe()}: nothing removed")
    else:
        targets = list({v.key: v for v in (resolve_prefix(store, p) for p in args.prefixes)}
                       .values())
    mine = [v for v in targets if not v.readonly]
    listed = False  # the table was drawn before the question: not drawn again
    if args.dry_run:
        reason = write_problem(store.root, store) if mine else None
        if reason:
            message(f"kcache: note: {store.root} cannot be written ({reason}); a real rm "
                    "would remove nothing")
        why: dict = {}
    else:
        if mine:
            ensure_writable(store)
        if len(mine) > 1 and not args.yes:
            listed = _ask(args, mine)
            if listed is None:
                message("kcache: nothing removed")
                return 1
        report = store.remove_many([v.key for v in mine])
        why = {e["key"]: e["reason"] for e in not_removed(report.failed)}
    removed = [v for v in mine if v.key not in why]
    kept = [(v, why[v.key]) for v in mine if v.key in why]
    kept += [(v, f"in the read-only {_WHERE[layer_kind(v.info.root)]} {v.info.root}")
             for v in targets if v.readonly]
    freed = sum(v.file_size for v in removed) if args.dry_run else int(report.bytes_freed)
    if want_json(args):
        print_json({"removed": [entry_record(v) for v in removed], "bytes_freed": freed,
                    "not_removed": [dict(entry_record(v), reason=why) for v, why in kept],
                    "dry_run": bool(args.dry_run)}, checked=True)
    else:
        if not listed:
            print_entries(removed, want_wide(args))
        if args.dry_run:
            message(f"kcache: would remove {entries_text(len(removed))}, would free "
                    f"{human_size(freed)}" if removed else "kcache: nothing to remove")
        elif removed or not kept:  # else the one line below says it all
            message(f"kcache: removed {entries_text(len(removed))}, freed {human_size(freed)}")
    if kept:
        raise Problem(left_text([{"key": v.key, "reason": why} for v, why in kept],
                                "would not be removed" if args.dry_run else "could not be removed"))
    return 0


#: How a read-only layer is named in what rm could not remove (a folder's words unchanged).
_WHERE = {"directory": "dir", "bundle": "bundle"}


def print_entries(views: list, wide: bool) -> None:
    """The entries as a table: on a terminal with the short signature (``wide``: the full
    one), piped with the full one (last column)."""
    print_table(COLUMNS, views,
                human=lambda v: (v.short_key, v.kernel_cell(), v.signature_cell(not wide),
                                 v.arch, human_size(v.file_size)),
                **plain_table(PLAIN_NAMES, lambda v: (v.short_key, v.kernel_cell(), v.arch,
                                                      v.file_size, v.signature_cell()), views),
                wide=wide)


def _ask(args, views: list) -> bool | None:
    """List ``views`` (more than one), then ask before removing them. True: the table went
    to the terminal's stdout (not to be drawn again); False: listed on stderr (stdout is a
    file or JSON); None: not confirmed. Raises :class:`UsageError` (exit 2, nothing
    removed) when stdin is not a terminal: a glob such as ``--kernel '*'`` in a script must
    say ``--yes`` (as ``kcache clear`` must)."""
    count = len(views)
    if not sys.stdin.isatty():
        raise UsageError(f"refusing to remove {entries_text(count)} without --yes (stdin is "
                         "not a terminal; --dry-run lists them)")
    on_stdout = is_terminal() and not want_json(args)
    if on_stdout:
        print_entries(views, want_wide(args))
        sys.stdout.flush()
    else:  # the person answering sees stderr
        for v in views:
            message(f"  {v.short_key}  {v.kernel_cell()}  {v.signature_cell(short=True) or ''}"
                    f"  {v.arch or ''}")
    return on_stdout if confirm(f"Remove {entries_text(count)}?") else None

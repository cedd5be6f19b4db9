"""``kcache rm KEY-PREFIX... | --kernel GLOB [--yes] [--dry-run]``: remove entries from the
writable root."""
from __future__ import annotations

import sys

from kcache.cli.args import glob_arg, want_json, want_wide
from kcache.cli.cache import ensure_writable, open_store, write_problem
from kcache.cli.entries import EntryView, entry_record, kernel_matches, resolve_prefix
from kcache.cli.errors import Problem, UsageError
from kcache.cli.fmt import entries_text, human_size
from kcache.cli.output import Column, confirm, message, print_json, print_table
from kcache.cli.problems import left_text, not_removed

#: Terminal columns (see cmd_ls.COLUMNS).
COLUMNS = (Column("Key"), Column("Kernel", shrink=16, keep=24, cut="kernel"), Column("Arch"),
           Column("Size", right=True, drop=1))


def register(sub):
    """Add the ``rm`` subparser to ``sub`` and return it."""
    p = sub.add_parser("rm", help="remove entries by key prefix or kernel name",
                       description="Remove entries given by unique key prefixes (also entries "
                                   "whose header cannot be read), or every entry whose kernel "
                                   "matches --kernel GLOB.")
    p.add_argument("prefixes", nargs="*", metavar="KEY-PREFIX",
                   help="unique key prefixes, as shown by 'kcache ls'")
    p.add_argument("--kernel", metavar="GLOB", type=glob_arg,
                   help="remove every entry whose kernel (module:qualname or qualname) matches")
    p.add_argument("--yes", "-y", action="store_true",
                   help="do not ask before removing more than one entry (needed when stdin "
                        "is not a terminal)")
    p.add_argument("--dry-run", "-n", action="store_true",
                   help="print what would be removed, remove nothing")
    return p


def run(args) -> int:
    """Remove the entries; every prefix is resolved before anything is removed.

    JSON: ``{"removed": [entry object...], "bytes_freed", "not_removed": [entry object +
    "reason"...], "dry_run"}``, printed also when some entries stay. Exit 1 when an entry could
    not be removed (read-only dir, locked by another process, not a regular file, ...): the
    reason is named for each. More than one entry to remove needs ``--yes`` (as ``clear``):
    asked on a terminal, refused (exit 2, nothing removed) when stdin is not one.
    """
    if args.kernel is not None and args.prefixes:
        raise UsageError("rm: give KEY-PREFIX... or --kernel GLOB, not both")
    if args.kernel is None and not args.prefixes:
        raise UsageError("rm: give KEY-PREFIX... or --kernel GLOB")
    store = open_store(args)
    if args.kernel is not None:
        targets = [v for v in map(EntryView, store.entries()) if kernel_matches(v, args.kernel)]
    else:
        targets = list({v.key: v for v in (resolve_prefix(store, p) for p in args.prefixes)}
                       .values())
    mine = [v for v in targets if not v.readonly]
    if args.dry_run:
        reason = write_problem(store.root, store) if mine else None
        if reason:
            message(f"kcache: note: {store.root} cannot be written ({reason}); a real rm "
                    "would remove nothing")
        why: dict = {}
    else:
        if mine:
            ensure_writable(store)
        if len(mine) > 1 and not args.yes and not _confirmed(len(mine)):
            message("kcache: nothing removed")
            return 1
        report = store.remove_many([v.key for v in mine])
        why = {e["key"]: e["reason"] for e in not_removed(report.failed)}
    removed = [v for v in mine if v.key not in why]
    kept = [(v, why[v.key]) for v in mine if v.key in why]
    kept += [(v, f"in the read-only dir {v.info.root}") for v in targets if v.readonly]
    freed = sum(v.file_size for v in removed) if args.dry_run else int(report.bytes_freed)
    if want_json(args):
        print_json({"removed": [entry_record(v) for v in removed], "bytes_freed": freed,
                    "not_removed": [dict(entry_record(v), reason=why) for v, why in kept],
                    "dry_run": bool(args.dry_run)}, checked=True)
    else:
        print_table(COLUMNS, removed,
                    human=lambda v: (v.short_key, v.kernel_cell(), v.arch,
                                     human_size(v.file_size)),
                    plain=lambda v: (v.short_key, v.kernel_cell(), v.arch, v.file_size),
                    names=("short_key", "kernel", "arch", "file_size"), wide=want_wide(args))
        if args.dry_run:
            message(f"kcache: would remove {entries_text(len(removed))}, would free "
                    f"{human_size(freed)}" if removed else "kcache: nothing to remove")
        elif removed or not kept:  # else the one line below says it all
            message(f"kcache: removed {entries_text(len(removed))}, freed {human_size(freed)}")
    if args.kernel is not None and not targets:
        message(f"kcache: no entry's kernel matches {args.kernel!r}")
    if kept:
        raise Problem(left_text([{"key": v.key, "reason": why} for v, why in kept],
                                "would not be removed" if args.dry_run else "could not be removed"))
    return 0


def _confirmed(count: int) -> bool:
    """Ask on a terminal before removing ``count`` (> 1) entries; raise :class:`UsageError`
    (exit 2, nothing removed) when stdin is not one: a glob such as ``--kernel '*'`` in a
    script must say ``--yes`` (as ``kcache clear`` must)."""
    if not sys.stdin.isatty():
        raise UsageError(f"refusing to remove {entries_text(count)} without --yes (stdin is "
                         "not a terminal; --dry-run lists them)")
    return confirm(f"Remove {entries_text(count)}?")

"""``kcache prune``: remove least recently used entries down to a size, old or stale entries."""
from __future__ import annotations

from kcache.cli.args import duration_arg, size_arg, want_json, want_wide
from kcache.cli.cache import ensure_writable, open_store, write_problem
from kcache.cli.entries import EntryView, entry_record, is_stale, plain_table
from kcache.cli.errors import Problem
from kcache.cli.fmt import ago, code_memos_text, entries_text, human_size, iso
from kcache.cli.output import Column, message, print_json, print_table
from kcache.cli.table import keeping, rows_alike
from kcache.cli.problems import left_text, not_removed, refuse_newer_format

#: Terminal columns (see cmd_ls.COLUMNS): the kernel and the signature (short form) shrink,
#: then the signature goes (never while two rows share kernel and arch), then Size; Last
#: used, what --older-than and the least recently used order choose by, goes last.
COLUMNS = (Column("Key"), Column("Kernel", shrink=16, keep=24, cut="kernel"),
           Column("Signature", shrink=12, keep=40, drop=3, cut="distinct"), Column("Arch"),
           Column("Size", right=True, drop=2), Column("Last used", drop=1))
#: Header of the plain (piped) table: JSON field names; ``signature`` (the full form) was
#: added last, so that ``cut -f`` of the first five still works.
PLAIN_NAMES = ("short_key", "kernel", "arch", "file_size", "last_used", "signature")


def register(sub):
    """Add the ``prune`` subparser to ``sub`` and return it."""
    p = sub.add_parser(
        "prune", help="remove least recently used, old or stale entries",
        description="Remove entries from the writable root: least recently used first down to "
                    "--max-size, those unused for --older-than, and --stale ones. Without "
                    "--max-size, the configured max_size applies.")
    p.add_argument("--max-size", type=size_arg, metavar="SIZE",
                   help="remove least recently used entries until the cache fits SIZE "
                        "(e.g. 500M, 2G)")
    p.add_argument("--older-than", type=duration_arg, metavar="DURATION",
                   help="remove entries not used for DURATION (e.g. 12h, 7d, 2w), and files "
                        "of remembered code analyses not used for DURATION")
    p.add_argument("--stale", action="store_true",
                   help="remove entries built by a toolchain other than the current one")
    p.add_argument("--dry-run", "-n", action="store_true",
                   help="print what would be removed, remove nothing")
    return p


def run(args) -> int:
    """Prune and print the removed entries and the bytes freed.

    JSON: ``{"dry_run", "max_size", "older_than", "stale", "removed": [entry object...],
    "entries_removed", "bytes_freed", "not_removed": [{"key", "path", "reason"}],
    "code_memos_removed", "code_memo_bytes_freed"}`` (docs/cli.md; the code memos only with
    --older-than), printed also when some entries stay. Exit 1 when the root cannot be
    written (nothing removed) or when an entry chosen was left in place (each named with its
    reason); exit 2, with nothing changed, when the root holds newer-format entries. A dry
    run previews the same: the same refusal, the same report, and a note when the root
    cannot be written.
    """
    store = open_store(args)
    # The configured cap always holds (puts evict down to it anyway); --max-size overrides it.
    max_size = args.max_size if args.max_size is not None else store.max_size
    where = None
    if args.stale:
        from kcache.toolchain import package_versions
        current = package_versions()
        where = lambda info: is_stale(EntryView(info), current)  # noqa: E731
    refuse_newer_format(store, "prune")
    if args.dry_run:
        reason = write_problem(store.root, store)
        if reason:
            message(f"kcache: note: {store.root} cannot be written ({reason}); a real prune "
                    "would remove nothing")
    else:
        ensure_writable(store)
    report = store.prune(max_size=max_size, older_than=args.older_than, where=where,
                         dry_run=args.dry_run)
    removed = [EntryView(i) for i in report.removed]
    freed = sum(v.file_size for v in removed)
    left = not_removed(report.failed)
    memo_files, memo_bytes = report.code_memos
    if want_json(args):
        print_json({"dry_run": bool(args.dry_run), "max_size": max_size,
                    "older_than": args.older_than, "stale": bool(args.stale),
                    "removed": [entry_record(v) for v in removed],
                    "entries_removed": len(removed), "bytes_freed": freed,
                    "not_removed": left, "code_memos_removed": memo_files,
                    "code_memo_bytes_freed": memo_bytes}, checked=True)
    else:
        wide = want_wide(args)  # the full signature; else numba's short form
        columns = keeping(COLUMNS, "Signature") if rows_alike(removed) else COLUMNS
        print_table(columns, removed,
                    human=lambda v: (v.short_key, v.kernel_cell(), v.signature_cell(not wide),
                                     v.arch, human_size(v.file_size), ago(v.last_used)),
                    **plain_table(PLAIN_NAMES, lambda v: (
                        v.short_key, v.kernel_cell(), v.arch, v.file_size, iso(v.last_used),
                        v.signature_cell()), removed),
                    wide=wide)
        if not removed and not memo_files:
            message("kcache: nothing to remove" if args.dry_run or not left
                    else "kcache: nothing removed")
        else:
            verb = "would remove" if args.dry_run else "removed"
            size = (f", {'would free' if args.dry_run else 'freed'} {human_size(freed)} "
                    f"({freed} bytes)" if removed else "")  # no "0 B (0 bytes)"
            message(f"kcache: {verb} {entries_text(len(removed))}{size}"
                    f"{code_memos_text(memo_files, memo_bytes)}")
    if left:
        raise Problem(left_text(left, "would not be removed" if args.dry_run
                                else "could not be removed"))
    return 0


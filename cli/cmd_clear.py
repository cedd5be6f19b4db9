"""``kcache clear [--yes]``: remove every entry of the writable root."""
from __future__ import annotations

import sys

from kcache.cli.args import want_json
from kcache.cli.cache import ensure_writable, open_store
from kcache.cli.errors import Problem, UsageError
from kcache.cli.fmt import code_memos_text, entries_text, human_size
from kcache.cli.output import confirm, message, print_json
from kcache.cli.problems import left_text, not_removed, refuse_newer_format


def register(sub):
    """Add the ``clear`` subparser to ``sub`` and return it."""
    p = sub.add_parser("clear", help="remove every entry of the writable root",
                       description="Remove every entry of the writable root (read-only dirs "
                                   "and settings are kept). Asks first on a terminal.")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask")
    return p


def run(args) -> int:
    """Clear the root. JSON: ``{"root", "removed", "bytes_freed", "not_removed": [{"key",
    "path", "reason"}], "code_memos_removed", "code_memo_bytes_freed"}``, printed also when
    some entries stay (then exit 1, each with its reason: locked by another process, not a
    regular file, ...). Without --yes: asks on a terminal and refuses (exit 2) when stdin is
    not one."""
    store = open_store(args)
    refuse_newer_format(store, "clear")
    ensure_writable(store)
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError(f"refusing to clear {store.root} without --yes "
                             "(stdin is not a terminal)")
        if not confirm(f"Remove every entry in {store.root}?"):
            message("kcache: nothing removed")
            return 1
    report = store.clear()
    left = not_removed(report.failed)
    removed, freed = int(report), int(report.bytes_freed)
    memo_files, memo_bytes = report.code_memos
    if want_json(args):
        print_json({"root": str(store.root), "removed": removed, "bytes_freed": freed,
                    "not_removed": left, "code_memos_removed": memo_files,
                    "code_memo_bytes_freed": memo_bytes})
    else:
        message(f"kcache: removed {entries_text(removed)} ({human_size(freed)})"
                f"{code_memos_text(memo_files, memo_bytes)} from {store.root}")
    if left:
        raise Problem(left_text(left))
    return 0

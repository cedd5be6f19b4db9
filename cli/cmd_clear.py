"""``kcache clear [--yes]``: remove every entry of the writable root."""
from __future__ import annotations

import sys

from kcache.cli.common import (
    Problem, UsageError, confirm, ensure_writable, message, open_store, print_json,
    refuse_newer_format, want_json,
)


def register(sub):
    """Add the ``clear`` subparser to ``sub`` and return it."""
    p = sub.add_parser("clear", help="remove every entry of the writable root",
                       description="Remove every entry of the writable root (read-only layers "
                                   "and settings are kept). Asks first on a terminal.")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask")
    return p


def run(args) -> int:
    """Clear the root. JSON: ``{"root", "removed"}``. Without --yes: asks on a terminal and
    refuses (exit 2) when stdin is not one."""
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
    removed = store.clear()
    if not store.writable:
        raise Problem(f"cannot write to {store.root}: the cache was not cleared")
    if want_json(args):
        print_json({"root": str(store.root), "removed": int(removed)})
    else:
        message(f"kcache: removed {removed} entries from {store.root}")
    return 0

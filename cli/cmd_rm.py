"""``kcache rm KEY-PREFIX... | --kernel GLOB``: remove entries from the writable root."""
from __future__ import annotations

from kcache.cli.common import (
    SHORT_KEY, Problem, UsageError, entries_text, ensure_writable, entry_record, human_size,
    kernel_matches, left_text, message, not_removed, open_store, print_json, print_table, resolve_prefix,
    want_json,
)


def register(sub):
    """Add the ``rm`` subparser to ``sub`` and return it."""
    p = sub.add_parser("rm", help="remove entries by key prefix or kernel name",
                       description="Remove entries given by unique key prefixes (also entries "
                                   "whose header cannot be read), or every entry whose kernel "
                                   "matches --kernel GLOB.")
    p.add_argument("prefixes", nargs="*", metavar="KEY-PREFIX",
                   help="unique key prefixes, as shown by 'kcache ls'")
    p.add_argument("--kernel", metavar="GLOB",
                   help="remove every entry whose kernel (module:qualname or qualname) matches")
    return p


def run(args) -> int:
    """Remove the entries; every prefix is resolved before anything is removed.

    JSON: ``{"removed": [entry object...], "bytes_freed", "not_removed": [entry object +
    "reason"...]}``, printed also when some entries stay. Exit 1 when an entry could not be
    removed (read-only layer, locked by another process, not a regular file, ...): the reason
    is named for each.
    """
    if args.kernel is not None and args.prefixes:
        raise UsageError("rm: give KEY-PREFIX... or --kernel GLOB, not both")
    if args.kernel is None and not args.prefixes:
        raise UsageError("rm: give KEY-PREFIX... or --kernel GLOB")
    if args.kernel is not None and not args.kernel.strip():
        raise UsageError("rm: --kernel needs a glob pattern, got '' (e.g. 'axpy*' or "
                         "'pkg.linalg:*')")
    store = open_store(args)
    if args.kernel is not None:
        targets = [i for i in store.entries() if kernel_matches(i, args.kernel)]
    else:
        targets = list({i.key: i for i in (resolve_prefix(store, p) for p in args.prefixes)}
                       .values())
    if any(not i.readonly for i in targets):
        ensure_writable(store)
    mine = [i for i in targets if not i.readonly]
    report = store.remove_many([i.key for i in mine])
    why = {e["key"]: e["reason"] for e in not_removed(report.failed)}
    removed = [i for i in mine if i.key not in why]
    kept = [(i, why[i.key]) for i in mine if i.key in why]
    kept += [(i, f"in the read-only layer {i.root}") for i in targets if i.readonly]
    freed = int(report.bytes_freed)
    if want_json(args):
        print_json({"removed": [entry_record(i) for i in removed], "bytes_freed": freed,
                    "not_removed": [dict(entry_record(i), reason=why) for i, why in kept]})
    else:
        print_table(("Key", "Kernel", "Arch", "Size"),
                    [(i.key[:SHORT_KEY], i.kernel, i.arch, human_size(i.file_size))
                     for i in removed],
                    [(i.key[:SHORT_KEY], i.kernel, i.arch, i.file_size) for i in removed],
                    right=("Size",), names=("short_key", "kernel", "arch", "file_size"))
        if removed or not kept:  # else the one line below says it all
            message(f"kcache: removed {entries_text(len(removed))}, freed {human_size(freed)}")
    if args.kernel is not None and not targets:
        message(f"kcache: no entry's kernel matches {args.kernel!r}")
    if kept:
        raise Problem(left_text([{"key": i.key, "reason": why} for i, why in kept]))
    return 0

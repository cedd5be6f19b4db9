"""``kcache rm KEY-PREFIX... | --kernel GLOB``: remove entries from the writable root."""
from __future__ import annotations

from kcache.cli.common import (
    SHORT_KEY, Problem, UsageError, ensure_writable, entry_record, human_size, kernel_matches,
    message, open_store, print_json, print_table, resolve_prefix, want_json,
)


def register(sub):
    """Add the ``rm`` subparser to ``sub`` and return it."""
    p = sub.add_parser("rm", help="remove entries by key prefix or kernel name",
                       description="Remove entries given by unique key prefixes, or every "
                                   "entry whose kernel matches --kernel GLOB.")
    p.add_argument("prefixes", nargs="*", metavar="KEY-PREFIX",
                   help="unique key prefixes, as shown by 'kcache ls'")
    p.add_argument("--kernel", metavar="GLOB",
                   help="remove every entry whose kernel (module:qualname or qualname) matches")
    return p


def run(args) -> int:
    """Remove the entries; every prefix is resolved before anything is removed.

    JSON: ``{"removed": [entry object...], "bytes_freed", "not_removed": [entry object...]}``.
    Exit 1 when an entry could not be removed (read-only layer or root).
    """
    if bool(args.prefixes) == bool(args.kernel):
        raise UsageError("rm: give KEY-PREFIX... or --kernel GLOB (one of the two)")
    store = open_store(args)
    if args.kernel:
        targets = [i for i in store.entries() if kernel_matches(i, args.kernel)]
    else:
        targets = list({i.key: i for i in (resolve_prefix(store, p) for p in args.prefixes)}
                       .values())
    if any(not i.readonly for i in targets):
        ensure_writable(store)
    removed, kept = [], []
    for info in targets:
        ok = not info.readonly and store.remove(info.key)
        (removed if ok else kept).append(info)
    freed = sum(int(i.file_size) for i in removed)
    if want_json(args):
        print_json({"removed": [entry_record(i) for i in removed], "bytes_freed": freed,
                    "not_removed": [entry_record(i) for i in kept]})
    else:
        print_table(("Key", "Kernel", "Arch", "Size"),
                    [(i.key[:SHORT_KEY], i.kernel, i.arch, human_size(i.file_size))
                     for i in removed],
                    [(i.key[:SHORT_KEY], i.kernel, i.arch, i.file_size) for i in removed],
                    right=("Size",))
        message(f"kcache: removed {len(removed)} entries, freed {human_size(freed)}")
    if args.kernel and not targets:
        message(f"kcache: no entry's kernel matches {args.kernel!r}")
    if kept:
        where = ", ".join(f"{i.key[:SHORT_KEY]} ({i.root})" for i in kept)
        raise Problem(f"could not remove {len(kept)} entries (read-only layer or root): {where}")
    return 0

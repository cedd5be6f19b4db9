"""``kcache pull [--kernel GLOB] [--cc CC]``: copy the remote tier's entries into the cache root."""
from __future__ import annotations

import functools

from kcache.cli.args import add_entry_filters, want_json
from kcache.cli.cache import open_store
from kcache.cli.entries import header_matches
from kcache.cli.errors import Problem
from kcache.cli.fmt import entries_text
from kcache.cli.output import is_terminal, message, print_json, progress_bar, stderr_is_terminal
from kcache.cli.remote import open_remote
from kcache.cli.transfer import failed_records, failure_line, print_outcomes


def register(sub):
    """Add the ``pull`` subparser to ``sub`` and return it."""
    p = sub.add_parser("pull", help="copy the remote tier's entries into the cache",
                       description="Copy the entries of the remote tier (KCACHE_REMOTE) into "
                                   "the cache root, each read within the size limit and checked "
                                   "as a remote hit is (the signature when a secret is set, the "
                                   "format, the checksum) before it is written. Filters apply to "
                                   "the checked header of each entry. Exit status 1 when any "
                                   "failed.")
    add_entry_filters(p)
    return p


def run(args) -> int:
    """Pull. JSON: ``{"remote", "root", "pulled": [key...], "present": [key...],
    "skipped": [key...] (left out by --kernel/--cc), "failed": [{"key", "reason"}],
    "signed"}``. Piped: a ``key<TAB>outcome<TAB>reason`` table (outcome ``pulled``,
    ``present``, ``skipped`` or ``failed``). Exit 1 when any entry failed (refused, unreadable,
    not written: each named with its reason) or the remote or the root cannot be used."""
    store = open_store(args)
    remote = open_remote(store, "nothing pulled")
    if store.check_writable() is not None:
        raise Problem(f"cannot write to {store.root} ({store.write_problem}): nothing pulled")
    # filters apply to each entry's header once it is read and checked (one read per key)
    where = functools.partial(header_matches, kernel=args.kernel, ccs=args.cc) if args.kernel or args.cc else None
    with progress_bar(stderr_is_terminal() and not want_json(args), "pulling") as progress:
        report = store.copy_in(remote, progress=progress, where=where)
    listing = [why for key, why in report.failed if key == "*"]
    if listing:
        raise Problem(f"{listing[0]}; nothing pulled")
    failed = failed_records(report.failed)
    signed = store.remote_settings.secret is not None
    if want_json(args):
        print_json({"remote": remote.name, "root": str(store.root), "pulled": report.copied,
                    "present": report.present, "skipped": report.skipped, "failed": failed,
                    "signed": signed})
    else:
        if not is_terminal():
            print_outcomes([("pulled", report.copied), ("present", report.present),
                            ("skipped", report.skipped)], failed)
        message(f"kcache: pulled {entries_text(len(report.copied))} from {remote.name} into "
                f"{store.root}{', signatures checked' if signed and report.copied else ''}"
                f"{f'; {len(report.present)} already there' if report.present else ''}"
                f"{f'; {len(report.skipped)} not matching' if report.skipped else ''}")
    if failed:
        raise Problem(failure_line(failed, "not pulled"))
    return 0

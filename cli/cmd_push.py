"""``kcache push [--kernel GLOB] [--cc CC]``: publish local entries to the remote tier."""
from __future__ import annotations

import os

from kcache.cli.args import add_entry_filters, want_json
from kcache.cli.cache import open_store
from kcache.cli.entries import select_entries
from kcache.cli.errors import Problem
from kcache.cli.fmt import entries_text
from kcache.cli.output import is_terminal, message, print_json, progress_bar, stderr_is_terminal
from kcache.cli.remote import one_line, open_remote
from kcache.cli.transfer import failed_records, failure_line, print_outcomes


def register(sub):
    """Add the ``push`` subparser to ``sub`` and return it."""
    p = sub.add_parser("push", help="publish local entries to the remote tier",
                       description="Publish the entries of the cache (writable root and "
                                   "read-only dirs) to the remote tier (KCACHE_REMOTE), each "
                                   "checked first and signed when a secret is set "
                                   "(KCACHE_REMOTE_SECRET). Entries the remote holds already "
                                   "are left as they are. Exit status 1 when any failed.")
    add_entry_filters(p)
    return p


def run(args) -> int:
    """Push. JSON: ``{"remote", "pushed": [key...], "present": [key...], "failed": [{"key",
    "reason"}], "signed"}``. Piped: a ``key<TAB>outcome<TAB>reason`` table (outcome
    ``pushed``, ``present`` or ``failed``). Exit 1 when any entry failed (each is named with
    its reason) or the remote cannot be used (read-only, unreachable, not configured)."""
    from kcache.errors import KcacheError
    store = open_store(args)
    remote = open_remote(store, "nothing pushed")
    if not remote.writable:
        # where the setting came from (kcache.tiers.remote.remote_settings: a non-blank
        # variable wins over config.json), so that the user looks in the right place
        where = ("KCACHE_REMOTE_READONLY" if os.environ.get("KCACHE_REMOTE_READONLY", "").strip()
                 else "remote_readonly in config.json: 'kcache config unset remote_readonly'")
        raise Problem(f"the remote {remote.name} is read-only ({where}): nothing pushed")
    keys = [info.key for info in select_entries(store, kernel=args.kernel, ccs=args.cc)]
    with progress_bar(stderr_is_terminal() and not want_json(args), "pushing") as progress:
        try:
            report = store.push(keys, progress=progress)
        except KcacheError as exc:
            raise Problem(f"{one_line(exc)}; nothing pushed") from None
    listing = [why for key, why in report.failed if key == "*"]
    if listing:
        raise Problem(f"{listing[0]}; nothing pushed")
    failed = failed_records(report.failed)
    signed = store.remote_settings.secret is not None
    if want_json(args):
        print_json({"remote": remote.name, "pushed": report.copied, "present": report.present,
                    "failed": failed, "signed": signed})
    else:
        if not is_terminal():
            print_outcomes([("pushed", report.copied), ("present", report.present)], failed)
        message(f"kcache: pushed {entries_text(len(report.copied))} to {remote.name}"
                f"{', signed' if signed and report.copied else ''}"
                f"{f'; {len(report.present)} already there' if report.present else ''}"
                f"{'' if keys else ' (no entries match)'}")
    if failed:
        raise Problem(failure_line(failed, "not pushed"))
    return 0

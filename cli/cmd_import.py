"""``kcache import IN``: verify and publish the entries of a bundle into a cache root."""
from __future__ import annotations

import os
from pathlib import Path

from kcache.cli.args import nonblank_arg, want_json
from kcache.cli.cache import open_store
from kcache.cli.errors import Problem
from kcache.cli.fmt import entries_text
from kcache.cli.output import message, print_json, progress_bar, stderr_is_terminal
from kcache.cli.secret import add_secret_option, secret_of
from kcache.cli.transfer import failure_line


def register(sub):
    """Add the ``import`` subparser to ``sub`` and return it."""
    p = sub.add_parser("import", help="verify and add the entries of a bundle",
                       description="Read a bundle written by 'kcache export', check every entry "
                                   "(manifest digest, entry checksum and format, and the "
                                   "signature when a secret is set) and publish those that pass "
                                   "into the cache root. Importing twice changes nothing.")
    p.add_argument("bundle", metavar="IN", type=nonblank_arg("IN"), help="the bundle file")
    p.add_argument("--into", metavar="DIR", type=nonblank_arg("--into"),
                   help="the cache root to import into (default: --dir, $KCACHE_DIR, the "
                        "default root)")
    add_secret_option(p)
    return p


def run(args) -> int:
    """Import. JSON: ``{"bundle", "root", "imported": [key...], "present": [key...],
    "failed": [{"key", "reason"}], "ignored": [{"member", "reason"}], "signed",
    "signature_checked"}``. Exit 1 when the bundle cannot be used (nothing imported) or any
    entry was refused (the others are imported)."""
    from kcache.tiers.bundle.v2 import BundleError, BundleTier
    if args.into is not None:
        args.dir, args.dir_flag = args.into, "--into"
    secret = secret_of(args)
    store = open_store(args)
    # the user's own path: a symlink they typed is theirs to follow (the no-link rule is for
    # paths inside cache roots); the file it names is then opened without following links
    path = Path(os.path.realpath(Path(args.bundle).expanduser()))
    try:
        tier = BundleTier(path, secret=secret, max_entry_size=store.settings.max_entry_size)
    except BundleError as exc:
        raise Problem(f"{exc}; nothing imported") from None
    with tier:
        if store.check_writable() is not None:
            raise Problem(f"cannot write to {store.root} ({store.write_problem}): nothing imported")
        with progress_bar(stderr_is_terminal() and not want_json(args), "importing") as progress:
            report = store.copy_in(tier, progress=progress)
        failed = [{"key": k, "reason": why} for k, why in report.failed]
        failed += [{"key": k, "reason": why} for k, why in tier.refused.items()]
        ignored = [{"member": k, "reason": why} for k, why in tier.notes.items()]
        signed, checked = tier.signed, tier.checked
    if want_json(args):
        print_json({"bundle": str(path), "root": str(store.root), "imported": report.copied,
                    "present": report.present, "failed": failed, "ignored": ignored,
                    "signed": signed, "signature_checked": checked})
    else:
        message(f"kcache: imported {entries_text(len(report.copied))} into {store.root}"
                f"{_present_text(store, report.present)}"
                f"{', signature checked' if checked else ''}")
        for item in ignored[:5]:
            message(f"kcache: note: {item['member']}: {item['reason']}")
    if signed and not checked:
        message(f"kcache: note: {path} is signed, but its signature was not checked (no "
                "KCACHE_SECRET or --secret-file); each entry was still verified")
    if failed:
        raise Problem(failure_line(failed, f"of {path} refused"))
    return 0


def _present_text(store, present: list) -> str:
    """", N already there", saying how many of them a read-only layer serves (the root does
    not get a copy of those: the bundle may be one of the layers)."""
    if not present:
        return ""
    in_layers = 0
    if store.layers:  # one stat each: not in the root, so a layer has it
        in_layers = sum(1 for key in present if store.local.entry_stat(key) is None)
    return f", {len(present)} already there" + (
        f" ({in_layers} served by read-only layers, not copied)" if in_layers else "")

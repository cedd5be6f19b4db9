"""``kcache import IN``: verify and publish the entries of a bundle into a cache root."""
from __future__ import annotations

from pathlib import Path

from kcache.cli.args import nonblank_arg, want_json
from kcache.cli.cache import open_store
from kcache.cli.errors import Problem
from kcache.cli.fmt import entries_text
from kcache.cli.output import message, print_json
from kcache.cli.problems import SHORT_KEY
from kcache.cli.secret import add_secret_option, secret_of


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
    "failed": [{"key", "reason"}], "ignored": [{"member", "reason"}], "signed"}``. Exit 1
    when the bundle cannot be used (nothing imported) or any entry was refused."""
    from kcache.bundle import BundleError, BundleTier
    if args.into is not None:
        args.dir = args.into
    secret = secret_of(args)
    store = open_store(args)
    path = Path(args.bundle).expanduser().absolute()
    try:
        tier = BundleTier(path, secret=secret, max_entry_size=store.settings.max_entry_size)
    except FileNotFoundError:
        raise Problem(f"{path}: no such file") from None
    except BundleError as exc:
        raise Problem(f"{exc}; nothing imported") from None
    with tier:
        if store.check_writable() is not None:
            raise Problem(f"cannot write to {store.root} ({store.write_problem}): nothing imported")
        report = store.copy_in(tier)
        listed = {rec["key"] for rec in tier.records()}
        # a listed entry the bundle cannot give (missing, twice, a link) is a failure;
        # other members are only noted (never read)
        failed = [{"key": k, "reason": why} for k, why in report.failed]
        failed += [{"key": k, "reason": why} for k, why in tier.problems.items() if k in listed]
        ignored = [{"member": k, "reason": why} for k, why in tier.problems.items() if k not in listed]
        signed = tier.signed
    if want_json(args):
        print_json({"bundle": str(path), "root": str(store.root), "imported": report.copied,
                    "present": report.present, "failed": failed, "ignored": ignored,
                    "signed": signed})
    else:
        message(f"kcache: imported {entries_text(len(report.copied))} into {store.root}"
                f"{f', {len(report.present)} already there' if report.present else ''}"
                f"{', signature checked' if signed and secret else ''}")
        for item in ignored[:5]:
            message(f"kcache: note: {item['member']}: {item['reason']}")
    if failed:
        shown = "; ".join(f"{f['key'][:SHORT_KEY]}: {f['reason']}" for f in failed[:5])
        raise Problem(f"{entries_text(len(failed))} refused: {shown}"
                      f"{f'; and {len(failed) - 5} more' if len(failed) > 5 else ''}")
    return 0

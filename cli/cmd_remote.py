"""``kcache remote [check]``: test the connection to the remote tier and say what is wrong."""
from __future__ import annotations

import time

from kcache.cli.args import add_common, want_json
from kcache.cli.cache import open_store
from kcache.cli.errors import Problem
from kcache.cli.output import print_json
from kcache.cli.remote import describe, open_remote, tier_problem
from kcache.cli.text import escape


def register(sub):
    """Add the ``remote`` subparser (with its ``check`` action) to ``sub``; return it."""
    p = sub.add_parser("remote", help="test the connection to the remote tier",
                       description="Test the remote tier (KCACHE_REMOTE) with one bounded round "
                                   "trip (Redis: PING, and SET + DEL of a probe key when "
                                   "writable; object stores: a probe object written and "
                                   "removed, or a listing when read-only) and say in one line "
                                   "what is wrong: refused, timeout, credentials, missing "
                                   "client library, bad URL. Exit status 1 on failure.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    add_common(actions.add_parser("check", help="test the connection (default)"))
    return p


def run(args) -> int:
    """Check. JSON: ``{"remote", "kind", "ok", "readonly", "namespace", "signed", "timeout",
    "seconds" (the round trip; null on failure), "error" (null when ok), "error_kind"}``. A
    remote that cannot be opened (none configured, bad URL, missing client library) is one
    line on stderr, exit 1, in every form."""
    from kcache.tiers.tier import TierError
    store = open_store(args)
    tier = open_remote(store, "nothing checked")
    settings = store.remote_settings
    doc = {"remote": tier.name, "kind": tier.kind, "ok": True, "readonly": not tier.writable,
           "namespace": settings.namespace, "signed": settings.secret is not None,
           "timeout": settings.timeout, "seconds": None, "error": None, "error_kind": None}
    started = time.monotonic()
    try:
        tier.check()
        doc["seconds"] = time.monotonic() - started
    except TierError as exc:
        doc.update(ok=False, error=tier_problem(exc, settings.timeout), error_kind=exc.kind)
    finally:
        tier.close()
    if want_json(args):
        print_json(doc)
        return 0 if doc["ok"] else 1
    if not doc["ok"]:
        raise Problem(f"remote check failed: {doc['error']}")
    print(escape(f"{describe(settings)}: ok, answered in {doc['seconds'] * 1000:.1f} ms"))
    return 0

"""``kcache stats``: the persistent counters, like ``ccache -s``; never scans unless --recount."""
from __future__ import annotations

from kcache.cli.common import (
    ensure_writable, human_seconds, human_size, is_terminal, message, open_store,
    plain_value, print_fields, print_json, want_json,
)

#: Counter names copied from ``kcache.Stats`` into the JSON document, in this order.
COUNTERS = ("hits", "misses", "compiles", "puts", "evictions", "corrupt", "lock_waits",
            "lock_timeouts", "bytes_written", "compile_seconds", "seconds_saved",
            "entries", "bytes", "max_size")


def register(sub):
    """Add the ``stats`` subparser to ``sub`` and return it."""
    p = sub.add_parser("stats", help="show hit/miss counters and cache size",
                       description="Show the persistent counters (hits, misses, evictions, ...) "
                                   "and the cache size against its cap.")
    p.add_argument("--zero", action="store_true", help="reset the counters to zero first")
    p.add_argument("--recount", action="store_true",
                   help="scan the cache to recount entries and bytes (otherwise never scans)")
    return p


def as_dict(stats) -> dict:
    """``kcache.Stats`` (a dict subclass or a dataclass with ``as_dict()``) -> plain dict."""
    if hasattr(stats, "as_dict"):
        return dict(stats.as_dict())
    if isinstance(stats, dict):
        return dict(stats)
    return dict(vars(stats))


def document(stats: dict, recounted: bool) -> dict:
    """The stable JSON document of ``kcache stats --json`` (docs/cli.md)."""
    doc = {name: stats.get(name, 0) for name in COUNTERS}
    for name in COUNTERS:
        if name not in ("compile_seconds", "seconds_saved"):
            doc[name] = int(doc[name] or 0)
        else:
            doc[name] = float(doc[name] or 0.0)
    lookups = doc["hits"] + doc["misses"]
    doc["hit_rate"] = doc["hits"] / lookups if lookups else None
    doc["recounted"] = recounted
    return doc


def run(args) -> int:
    """Print the counters (zeroing or recounting first when asked). Exit 1, with nothing
    said to be zeroed, when ``--zero`` cannot write the counters."""
    store = open_store(args)
    if args.zero:
        ensure_writable(store, "statistics not zeroed")
        store.zero_stats()  # OSError (exit 1, one line) when the counters were not written
        message("kcache: statistics zeroed")
    stats = store.recount() if args.recount else store.stats()
    doc = document(as_dict(stats), args.recount)
    if want_json(args):
        print_json(doc)
        return 0
    if not is_terminal():
        # Piped: "name<TAB>value" with the JSON names and exact values, for scripts.
        for name, value in doc.items():
            print(f"{name}\t{plain_value(value)}")
        return 0
    rate = doc["hit_rate"]
    cap = doc["max_size"]
    used = (f"{human_size(doc['bytes'])} of {human_size(cap)} ({doc['bytes'] / cap:.0%})"
            if cap else human_size(doc["bytes"]))
    print_fields([
        ("hits", doc["hits"], doc["hits"]),
        ("misses", doc["misses"], doc["misses"]),
        ("hit rate", "-" if rate is None else f"{rate:.1%}",
         "" if rate is None else f"{rate:.4f}"),
        ("compiles", doc["compiles"], doc["compiles"]),
        ("compile seconds", human_seconds(doc["compile_seconds"]), doc["compile_seconds"]),
        ("compile time saved", human_seconds(doc["seconds_saved"]), doc["seconds_saved"]),
        ("puts", doc["puts"], doc["puts"]),
        ("evictions", doc["evictions"], doc["evictions"]),
        ("corrupt", doc["corrupt"], doc["corrupt"]),
        ("lock waits", doc["lock_waits"], doc["lock_waits"]),
        ("lock timeouts", doc["lock_timeouts"], doc["lock_timeouts"]),
        ("entries", doc["entries"], doc["entries"]),
        ("size", used, doc["bytes"]),
        ("max size", human_size(cap), cap),
    ], title=f"kcache {store.root}")
    return 0

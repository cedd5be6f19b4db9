"""``kcache stats``: the persistent counters, like ``ccache -s``; never scans unless --recount."""
from __future__ import annotations

from kcache.cli.args import want_json, want_wide
from kcache.cli.cache import ensure_writable, open_store
from kcache.cli.fmt import entries_text, human_seconds, human_size, plain_seconds, plural
from kcache.cli.output import cell, is_terminal, message, print_fields, print_json
from kcache.cli.values import number

#: Counter names copied from ``kcache.Stats`` into the JSON document, in this order (then
#: any counter a newer store adds).
COUNTERS = ("hits", "misses", "compiles", "puts", "evictions", "corrupt", "lock_waits",
            "lock_timeouts", "lock_stale", "artifacts_refused", "bytes_written", "compile_seconds", "seconds_saved",
            "entries", "bytes", "max_size")
#: The store's failure and quarantine counters, and the remote tier's (docs/cli.md, "stats").
STORE_COUNTERS = ("write_errors_no_space", "write_errors_permission", "write_errors_other",
                  "temp_swept", "quarantine_files", "quarantine_bytes")
REMOTE_ERRORS = ("timeout", "refused", "auth", "bad_value", "io", "unavailable")
REMOTE_COUNTERS = ("remote_hits", "remote_misses", "remote_bad", "remote_puts", "remote_put_errors",
                   *(f"remote_errors_{kind}" for kind in REMOTE_ERRORS), "remote_wait_seconds")
#: What ``v1/code/`` holds (remembered code analyses), added after the remote's counters as
#: docs/cli.md allows a newer store's counters: the order before them stays.
MEMO_COUNTERS = ("code_memo_files", "code_memo_bytes")


def register(sub):
    """Add the ``stats`` subparser to ``sub`` and return it."""
    p = sub.add_parser("stats", help="show hit/miss counters and cache size",
                       description="Show the persistent counters (hits, misses, evictions, ...) "
                                   "and the cache size against its cap.")
    p.add_argument("--zero", "-z", action="store_true",
                   help="reset the counters to zero first (ccache -z)")
    p.add_argument("--recount", action="store_true",
                   help="scan the cache to recount entries and bytes (otherwise never scans)")
    p.add_argument("--short", "-s", action="store_true",
                   help="at most 8 lines: the root, entries, size against the cap, hits and "
                        "misses, and the remote when one is configured (--json prints the "
                        "whole document)")
    return p


def as_dict(stats) -> dict:
    """``kcache.Stats`` (a dict subclass or a dataclass with ``as_dict()``) -> plain dict."""
    if hasattr(stats, "as_dict"):
        return dict(stats.as_dict())
    if isinstance(stats, dict):
        return dict(stats)
    return dict(vars(stats))


#: Counters in seconds: exact in JSON, rounded in plain output.
SECONDS = ("compile_seconds", "seconds_saved")


def document(stats: dict, recounted: bool) -> dict:
    """The stable JSON document of ``kcache stats --json`` (docs/cli.md). A counter that is
    not a sensible number (a damaged stats shard) reads as 0, never as NaN."""
    doc = {}
    for name in COUNTERS + STORE_COUNTERS + REMOTE_COUNTERS + MEMO_COUNTERS:
        doc[name] = _counter(name, stats.get(name, 0))
    for name, value in stats.items():  # counters a newer store adds (e.g. failed writes)
        if name not in doc and isinstance(name, str) and number(value) is not None:
            doc[name] = _counter(name, value)
    lookups = doc["hits"] + doc["misses"]
    doc["hit_rate"] = doc["hits"] / lookups if lookups > 0 else None
    doc["recounted"] = recounted
    return doc


def _counter(name: str, value):
    """A counter as a float (seconds) or an int; 0 for what is not a finite number."""
    seconds = number(value)
    if name in SECONDS or name.endswith("_seconds"):
        return seconds or 0.0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return int(seconds) if seconds is not None else 0


def plain(name: str, value) -> str:
    """A value of the document for plain output: seconds rounded (``0.84``), the hit rate
    to 4 decimals, the rest as in JSON."""
    if name in SECONDS or name.endswith("_seconds"):
        return plain_seconds(value) or ""
    if name == "hit_rate" and value is not None:
        return f"{value:.4f}"
    return cell(value)


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
    from kcache.store.layers import describe
    layers = [describe(layer, store.untrusted, count=args.recount) for layer in store.layers]
    settings, remote = _remote(store)
    if want_json(args):  # the remote's URL only when one is configured, the layers only with layers
        print_json({**doc, **({"remote": settings.name} if settings is not None else {}),
                    **({"layers": layers} if layers else {})})
        return 0
    if args.short:
        short(store, doc, layers)
        return 0
    if not is_terminal():
        # Piped: "name<TAB>value" with the JSON names, seconds rounded, for scripts.
        for name, value in doc.items():
            print(f"{name}\t{plain(name, value)}")
        if settings is not None:
            print(f"remote\t{cell(settings.name)}")
        for layer in layers:
            print(f"layer\t{layer_text(layer)}")
        return 0
    rows = terminal_rows(doc, remote_shown(store, doc))
    if remote is not None:  # named before its counters, as the root in the title
        at = next((i for i, row in enumerate(rows) if row[0].startswith("remote ")), len(rows))
        rows.insert(at, ("remote", remote, None))
    for layer in layers:  # the path on a row of its own: cut, it keeps its end
        rows += [("read-only layer", layer["path"], None), ("", layer_what(layer), None)]
    print_fields(rows, title=f"kcache {store.root}", wide=want_wide(args))
    return 0


def _remote(store) -> tuple:
    """(the remote's settings or None, the remote in words for a terminal or None): its URL
    without credentials, how it is used, or a bad setting's pointer."""
    from kcache.cli.remote import configured, describe
    settings, problem = configured(store.settings.config)
    return settings, (describe(settings) if settings is not None
                      else "(bad setting: see 'kcache remote check')" if problem else None)


def layer_text(layer: dict) -> str:
    """A read-only layer in words: ``/opt/k.kcb (bundle format 3: 6 entries, 120.0 KiB)``,
    ``/opt/kcache (folder)``, or why it is not used."""
    return f"{layer['path']} ({layer_what(layer)})"


def layer_what(layer: dict) -> str:
    """What a read-only layer is and holds: ``bundle format 3: 6 entries, 120.0 KiB``,
    ``folder``, or ``not used: WHY``."""
    if layer["problem"]:
        return f"not used: {layer['problem']}"
    what = f"bundle format {layer['format_version']}" if layer["kind"] == "bundle" else "folder"
    if layer["entries"] is None:
        return what
    return f"{what}: {entries_text(layer['entries'])}, {human_size(layer['bytes'])}"


def short(store, doc: dict, layers: list = ()) -> None:
    """``stats --short``, as ``ccache -s`` and ``pip cache info``: on a terminal the root,
    entries, size of cap, hit rate, the read-only layers (those that serve hits the root's
    entries do not count) and the remote with its use (when configured); piped,
    ``name<TAB>value`` lines with the JSON names (root, entries, bytes, max_size, hits,
    misses, hit_rate, remote), then a ``layer`` line per read-only layer."""
    settings, remote = _remote(store)
    if not is_terminal():
        rows = [("root", str(store.root))]
        rows += [(name, plain(name, doc[name]))
                 for name in ("entries", "bytes", "max_size", "hits", "misses", "hit_rate")]
        if remote is not None:
            rows.append(("remote", settings.name if settings is not None else ""))
        rows += [("layer", layer_text(layer)) for layer in layers]  # as stats' plain lines
        for name, value in rows:
            print(f"{name}\t{cell(value)}")
        return
    rate = doc["hit_rate"]
    lookups = (f"{'-' if rate is None else f'{rate:.1%}'} ({plural(doc['hits'], 'hit')}, "
               f"{plural(doc['misses'], 'miss', 'misses')})")
    rows = [("root", str(store.root), None), ("entries", doc["entries"], None),
            ("size", _used(doc), None), ("hit rate", lookups, None)]
    for layer in layers:  # its path (two layers may hold alike), then what it holds
        rows += [("read-only layer", layer["path"], None), ("", layer_what(layer), None)]
    if remote is not None:
        rows.append(("remote", remote, None))
        if settings is not None:
            errors = sum(doc[f"remote_errors_{kind}"] for kind in REMOTE_ERRORS)
            rows.append(("remote use", f"{plural(doc['remote_hits'], 'hit')}, "
                         f"{plural(doc['remote_misses'], 'miss', 'misses')}, "
                         f"{plural(errors, 'error')}", None))
    print_fields(rows, whole=lambda name: name in ("root", "remote"))


def _used(doc: dict) -> str:
    """``1.2 MiB of 10.0 GiB (12%)``: the size against the cap (no cap: the size)."""
    cap = doc["max_size"]
    return (f"{human_size(doc['bytes'])} of {human_size(cap)} ({doc['bytes'] / cap:.0%})"
            if cap > 0 else human_size(doc["bytes"]))


def remote_shown(store, doc: dict) -> bool:
    """Whether the terminal shows the remote tier's counters: a remote is configured
    (KCACHE_REMOTE or config.json's ``remote``) or one of them is not 0."""
    import os
    configured = os.environ.get("KCACHE_REMOTE", "").strip() or store.settings.config.get("remote")
    return bool(configured) or any(doc[name] for name in REMOTE_COUNTERS)


def terminal_rows(doc: dict, remote: bool) -> list[tuple]:
    """The ``(name, value, None)`` rows of ``kcache stats`` on a terminal: every counter of
    ``doc``, failures and the remote tier's grouped (``write errors  3 (no space 2, ...)``)."""
    rate = doc["hit_rate"]
    cap = doc["max_size"]
    used = _used(doc)
    rows = [
        ("hits", doc["hits"], None),
        ("misses", doc["misses"], None),
        ("hit rate", "-" if rate is None else f"{rate:.1%}", None),
        ("compiles", doc["compiles"], None),
        ("compile seconds", human_seconds(doc["compile_seconds"]), None),
        ("compile time saved", human_seconds(doc["seconds_saved"]), None),
        ("puts", doc["puts"], None),
        ("write errors", _by_kind(doc, "write_errors_", ("no_space", "permission", "other")), None),
        ("evictions", doc["evictions"], None),
        ("corrupt", doc["corrupt"], None),
        ("artifacts refused", doc["artifacts_refused"], None),
        ("quarantine", f"{plural(doc['quarantine_files'], 'file')}, "
                       f"{human_size(doc['quarantine_bytes'])}", None),
        *_code_memo_rows(doc),
        ("temp files swept", doc["temp_swept"], None),
        ("lock waits", doc["lock_waits"], None),
        ("lock timeouts", doc["lock_timeouts"], None),
        ("stopped lock holders passed", doc["lock_stale"], None),
        ("entries", doc["entries"], None),
        ("size", used, None),
        ("max size", human_size(cap), None),
    ]
    if remote:
        rows += [
            ("remote hits", doc["remote_hits"], None),
            ("remote misses", doc["remote_misses"], None),
            ("remote bad values", doc["remote_bad"], None),
            ("remote puts", doc["remote_puts"], None),
            ("remote put errors", doc["remote_put_errors"], None),
            ("remote errors", _by_kind(doc, "remote_errors_", REMOTE_ERRORS), None),
            ("remote wait", human_seconds(doc["remote_wait_seconds"]), None),
        ]
    known = set(COUNTERS + STORE_COUNTERS + REMOTE_COUNTERS + MEMO_COUNTERS) | {"hit_rate", "recounted"}
    rows += [(name.replace("_", " "), doc[name], None) for name in doc if name not in known]
    return rows


def _code_memo_rows(doc: dict) -> list[tuple]:
    """The row ``code analyses  3 files, 12.0 KiB`` (what ``v1/code/`` holds), only when it
    holds a file: most roots have none, as they have no remote."""
    n = doc["code_memo_files"]
    return ([("code analyses", f"{plural(n, 'file')}, {human_size(doc['code_memo_bytes'])}", None)]
            if n > 0 else [])


def _by_kind(doc: dict, prefix: str, kinds) -> str:
    """``3 (no space 2, other 1)``: the sum of the ``prefix<kind>`` counters and the ones
    that are not 0."""
    counts = [(kind.replace("_", " "), doc.get(prefix + kind, 0)) for kind in kinds]
    total = sum(n for _k, n in counts)
    parts = ", ".join(f"{kind} {n}" for kind, n in counts if n)
    return f"{total} ({parts})" if parts else str(total)

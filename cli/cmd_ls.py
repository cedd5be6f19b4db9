"""``kcache ls``: one row per entry (short key, kernel, signature, arch, size, hits, ...)."""
from __future__ import annotations

import argparse

from kcache.cli.common import (
    SHORT_KEY, ago, arch_matches, cc_arg, entries_and_broken, entries_text, entry_record,
    human_seconds, human_size, is_stale, iso, kernel_matches, message, open_store,
    not_regular, plain_seconds, positive_int_arg, print_json, print_table, problem_of,
    want_json,
)

#: --sort keys -> (sort key, newest/largest first?)
SORTS = {
    "last-used": (lambda i: i.last_used or 0, True),
    "size": (lambda i: i.file_size or 0, True),
    "hits": (lambda i: i.hits or 0, True),
    "name": (lambda i: (i.kernel or "", i.signature or "", i.arch or ""), False),
    "created": (lambda i: i.created or 0, True),
}


#: Header of the plain (piped) table: the entry object's JSON field names (docs/cli.md).
PLAIN_NAMES = ("short_key", "kernel", "signature", "arch", "file_size", "hits", "last_used",
               "compile_seconds")


def register(sub):
    """Add the ``ls`` subparser to ``sub`` and return it."""
    p = sub.add_parser("ls", help="list cache entries",
                       description="List cache entries, most recently used first.")
    p.add_argument("--kernel", metavar="GLOB",
                   help="only kernels matching GLOB (module:qualname or qualname)")
    p.add_argument("--cc", type=cc_arg, metavar="CC",
                   help="only this compute capability (9.0 matches sm_90 and sm_90a)")
    p.add_argument("--stale", action="store_true",
                   help="only entries built by a toolchain other than the current one")
    p.add_argument("--sort", default="last-used", type=_sort_key, metavar="KEY",
                   help=f"order by one of: {', '.join(SORTS)} (default last-used)")
    p.add_argument("--limit", type=positive_int_arg, metavar="N", help="at most N rows")
    return p


def _sort_key(text: str) -> str:
    if text not in SORTS:
        raise argparse.ArgumentTypeError(
            f"unknown sort key {text!r} (accepted: {', '.join(SORTS)})")
    return text


def select(store, args) -> tuple[list, list]:
    """Entries of ``store`` passing ``--kernel``/``--cc``/``--stale``, sorted, limited.

    Returns ``(rows, broken)``: ``rows`` are ``(EntryInfo, stale: bool)`` pairs, including
    entry files whose header cannot be read (``EntryInfo.problem`` set; listed only when no
    filter is given, since nothing is known to match); ``broken`` lists every such file.
    Reads headers only (``Store.entries(include_broken=True)``).
    """
    from kcache.toolchain import package_versions
    current = package_versions()
    rows = []
    good, broken = entries_and_broken(store)
    for info in good:
        if args.kernel and not kernel_matches(info, args.kernel):
            continue
        if args.cc and not arch_matches(info.arch, args.cc):
            continue
        stale = is_stale(info, current)
        if args.stale and not stale:
            continue
        rows.append((info, stale))
    if not (args.kernel or args.cc or args.stale):
        rows += [(b, False) for b in broken]
    key, reverse = SORTS[args.sort]
    rows.sort(key=lambda r: key(r[0]), reverse=reverse)
    return (rows[: args.limit] if args.limit else rows), broken


def run(args) -> int:
    """Print the entries. JSON: ``{"entries": [entry object, ...]}`` (docs/cli.md).

    Entry files whose header cannot be read are listed with their ``problem`` (JSON) or
    ``unreadable: ...`` in the kernel column, and counted in a note on stderr."""
    rows, broken = select(open_store(args), args)
    if want_json(args):
        print_json({"entries": [entry_record(info, stale) for info, stale in rows]})
    else:
        columns = ("Key", "Kernel", "Signature", "Arch", "Size", "Hits", "Last used",
                   "Compile time")
        human = [(i.key[:SHORT_KEY], _kernel(i), i.signature, i.arch, human_size(i.file_size),
                  i.hits, ago(i.last_used), human_seconds(i.compile_seconds)) for i, _ in rows]
        plain = [(i.key[:SHORT_KEY], _kernel(i), i.signature, i.arch, i.file_size, i.hits,
                  iso(i.last_used), plain_seconds(i.compile_seconds)) for i, _ in rows]
        print_table(columns, human, plain, right=("Size", "Hits", "Compile time"),
                    names=PLAIN_NAMES)
        if not rows:
            message("kcache: no entries match" if (args.kernel or args.cc or args.stale)
                    else "kcache: the cache has no entries")
    if broken:
        first = broken[0]
        # rm never deletes an entry path that is not a regular file (e.g. a directory):
        # only verify --fix (which quarantines it) is offered then.
        rm_hint = ("" if any(not_regular(problem_of(b)) for b in broken)
                   else ", or 'kcache rm KEY' to remove one")
        message(f"kcache: {entries_text(len(broken))} cannot be read (e.g. "
                f"{first.key[:SHORT_KEY]}: {problem_of(first)}); run 'kcache verify --fix' to "
                f"quarantine them{rm_hint}")
    return 0


def _kernel(info) -> str | None:
    problem = problem_of(info)
    return f"(unreadable: {problem})" if problem else info.kernel

"""``kcache verify [--fix]``: fully check every entry; with --fix, quarantine the bad ones."""
from __future__ import annotations

import contextlib

from kcache.cli.common import (
    SHORT_KEY, is_terminal, message, open_store, print_json, print_table, want_json,
)


def register(sub):
    """Add the ``verify`` subparser to ``sub`` and return it."""
    p = sub.add_parser("verify", help="check every entry; --fix quarantines bad ones",
                       description="Read and check every entry (lengths, checksums, "
                                   "structure). Exit status 1 while any bad entry remains.")
    p.add_argument("--fix", action="store_true",
                   help="move bad entries of the writable root to <root>/v1/quarantine/")
    return p


@contextlib.contextmanager
def progress_bar(enabled: bool):
    """Yield a ``progress(done, total)`` callback drawing a rich progress bar on stderr when
    ``enabled`` (a terminal), else None (rich is then not imported)."""
    if not enabled:
        yield None
        return
    from rich.progress import Progress
    from kcache.cli.common import console
    with Progress(console=console(stderr=True), transient=True) as bar:
        task = bar.add_task("verifying", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield progress


def run(args) -> int:
    """Verify every entry of every root (``Store.verify``).

    JSON: ``{"checked", "ok": bool, "bad": [{"key", "path", "problem", "quarantined"}],
    "newer": [path...]}``. Exit 1 while any bad entry remains (not quarantined); entries of a
    newer format are listed and left untouched, and do not count as bad.
    """
    store = open_store(args)
    with progress_bar(is_terminal() and not want_json(args)) as progress:
        report = store.verify(fix=args.fix, progress=progress)
    bad = [{"key": path.stem, "path": str(path), "problem": problem,
            "quarantined": bool(args.fix) and not path.exists()}
           for path, problem in report.corrupt]
    remaining = [b for b in bad if not b["quarantined"]]
    newer = [str(p) for p in report.newer]
    if want_json(args):
        print_json({"checked": int(report.checked), "ok": not remaining, "bad": bad,
                    "newer": newer})
        return 1 if remaining else 0
    if bad:
        print_table(("Key", "Problem", "Quarantined", "Path"),
                    [(b["key"][:SHORT_KEY], b["problem"], "yes" if b["quarantined"] else "no",
                      b["path"]) for b in bad],
                    [(b["key"][:SHORT_KEY], b["problem"], b["quarantined"], b["path"])
                     for b in bad])
    summary = f"kcache: checked {report.checked} entries: {len(bad)} bad"
    if args.fix:
        summary += f", {len(bad) - len(remaining)} quarantined"
    elif remaining:
        summary += " (run 'kcache verify --fix' to quarantine them)"
    message(summary)
    if newer:
        message(f"kcache: {len(newer)} entries were written by a newer kcache format and left "
                f"untouched (e.g. {newer[0]})")
    return 1 if remaining else 0

"""``kcache verify [--fix]``: fully check every entry; with --fix, quarantine the bad ones."""
from __future__ import annotations

import os
from pathlib import Path

from kcache.cli.args import want_json, want_wide
from kcache.cli.cache import open_store, write_problem
from kcache.cli.fmt import entries_text
from kcache.cli.output import Column, is_terminal, message, print_json, print_table, progress_bar
from kcache.cli.problems import LAYER_HINT, SHORT_KEY, problem_text

#: Terminal columns: problem, outcome and path lose their middle when narrow, then the path
#: goes (the key names the entry).
COLUMNS = (Column("Key"), Column("Problem", shrink=16), Column("Quarantined", shrink=11),
           Column("Path", shrink=20, drop=1))


def register(sub):
    """Add the ``verify`` subparser to ``sub`` and return it."""
    p = sub.add_parser("verify", help="check every entry; --fix quarantines bad ones",
                       description="Read and check every entry (lengths, checksums, "
                                   "structure). Exit status 1 while any bad entry remains.")
    p.add_argument("--fix", action="store_true",
                   help="move bad entries of the writable root to <root>/v1/quarantine/")
    return p


def run(args) -> int:
    """Verify every entry of every root (``Store.verify``).

    JSON: ``{"checked", "ok": bool, "bad": [{"key", "path", "problem", "quarantined",
    "reason"}], "newer": [path...]}``; ``reason`` says why ``--fix`` left a bad entry in place
    (null otherwise). Exit 1 while any bad entry remains (not quarantined); entries of a
    newer format are listed and left untouched, and do not count as bad.
    """
    store = open_store(args)
    with progress_bar(is_terminal() and not want_json(args), "verifying") as progress:
        report = store.verify(fix=args.fix, progress=progress)
    left = {str(p): why for p, why in report.not_quarantined}
    bad = []
    for path, problem in report.corrupt:
        # Truth from the disk: quarantined means moved away by this run's --fix (a bundle
        # layer's entry is no file of its own, never moved).
        bundle, key = _bundle_entry(store, path)
        moved = bool(args.fix) and bundle is None and not os.path.lexists(path)
        why = None
        if not moved and args.fix:
            why = left.get(str(path)) or (f"in the read-only layer {bundle}" if bundle
                                          else _why_not_moved(store, path))
        bad.append({"key": key or (path.name[:-4] if path.name.endswith(".kce") else path.name),
                    "path": str(path), "problem": _wording(store, path, problem, moved),
                    "quarantined": moved,
                    "reason": why})
    remaining = [b for b in bad if not b["quarantined"]]
    newer = [str(p) for p in report.newer]
    if want_json(args):
        print_json({"checked": int(report.checked), "ok": not remaining, "bad": bad,
                    "newer": newer})
        return 1 if remaining else 0
    if bad:
        names = ["key", "problem", "quarantined", "path"]  # key: its first 12 digits
        if args.fix:
            names.append("reason")
        print_table(
            COLUMNS, bad, names=names, wide=want_wide(args),
            human=lambda b: (b["key"][:SHORT_KEY], b["problem"],
                             "yes" if b["quarantined"] else
                             (f"no: {b['reason']}" if b["reason"] else "no"), b["path"]),
            plain=lambda b: (b["key"][:SHORT_KEY], b["problem"], b["quarantined"], b["path"],
                             *([b["reason"]] if args.fix else [])))
    summary = f"kcache: checked {entries_text(report.checked)}: {len(bad)} bad"
    if args.fix:
        summary += f", {len(bad) - len(remaining)} quarantined"
        if remaining:
            summary += f", {len(remaining)} left in place (see the reasons above)"
    elif any(not _in_layer(store, b["path"]) for b in remaining):
        summary += " (run 'kcache verify --fix' to quarantine them)"
    message(summary)
    if any(_in_layer(store, b["path"]) for b in remaining):
        message(f"kcache: bad entries of read-only layers stay: {LAYER_HINT}")
    if newer:
        message(f"kcache: {entries_text(len(newer))} written by a newer kcache format, left "
                f"untouched (e.g. {newer[0]})")
    return 1 if remaining else 0


def _bundle_entry(store, path) -> tuple[str | None, str | None]:
    """(bundle file, key) when ``path`` names an entry of a bundle layer (``<file>#<key>``,
    kcache.tiers.bundle.layer), else (None, None)."""
    bundle, _hash, key = str(path).rpartition("#")
    if any(hasattr(layer, "describe") and layer.name == bundle for layer in store.layers):
        return bundle, key
    return None, None


def _in_layer(store, path) -> bool:
    """True when ``path`` names an entry of a read-only layer (a bundle's or a folder's)."""
    if _bundle_entry(store, path)[0] is not None:
        return True
    parents = Path(path).parents
    return len(parents) > 3 and parents[3] != Path(store.root)


def _why_not_moved(store, path) -> str:
    """Why ``--fix`` left a bad entry in place, when the store did not say."""
    path = Path(path)
    if path.parents[3] != Path(store.root):
        return f"in the read-only dir {path.parents[3]}"
    reason = write_problem(store.root, store)
    return f"cannot write to {store.root} ({reason})" if reason else "not moved"


def _wording(store, path: Path, problem: str, moved: bool) -> str:
    """``problem`` as the store words it, on one line (the same words before and after
    ``--fix`` moved the file)."""
    return problem_text(problem)

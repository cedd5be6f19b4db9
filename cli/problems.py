"""What is wrong with an entry, in one wording per problem, and what was left in place.

Also the refusal of entries written by a newer kcache format, which the store neither reads
nor deletes (issue 4): the CLI looks for them itself to say why a key or a command is refused.
"""
from __future__ import annotations

from pathlib import Path

from kcache.cli.errors import UsageError
from kcache.cli.fmt import entries_text

SHORT_KEY = 12  # hex digits shown for a key; any unique prefix is accepted back

#: The hint for an entry path that is not a regular file (rm does not delete directories).
QUARANTINE_HINT = "run 'kcache verify --fix' to quarantine it"

#: What to do about a bad entry of a read-only layer, which no command changes.
LAYER_HINT = ("kcache never changes a read-only layer: its kernels compile into the writable "
              "root; rebuild the layer (kcache export) to drop them")

def problem_of(info) -> str | None:
    """What is wrong with an entry (``EntryInfo.problem``: its header cannot be read), or None
    for a readable one."""
    return problem_text(str(info.problem)) if info.problem else None


def problem_text(text: str, path: Path | None = None) -> str:
    """The store's wording of a problem, on one line. The store words each problem one way
    whichever check meets it (``kcache.errors.CorruptEntry``: a short file is "truncated: 40
    of 15015 bytes" from its fixed prefix, before any checksum), so nothing is reworded here;
    ``path`` is accepted for compatibility."""
    return " ".join(text.split())


def not_regular(problem: str | None) -> bool:
    """True for an entry path that is not a regular file (e.g. a directory): ``rm`` and
    ``prune`` never delete those; ``verify --fix`` moves them to quarantine."""
    from kcache.store.reports import NOT_REGULAR
    return bool(problem) and problem.startswith(NOT_REGULAR)


def is_newer(info) -> bool:
    """True for an entry the store lists as written by a newer kcache format (never changed)."""
    return (problem_of(info) or "").startswith("newer format")


def newer_format_files(store, prefix: str = "", *, readonly: bool = True) -> list[Path]:
    """Entry files (whose key starts with ``prefix``) written by a newer kcache format, which
    ``Store.entries``/``find`` skip (``LocalTier.newer_files``: the first 10 bytes of each
    entry file; a newer one's checksum must hold too, as in the store)."""
    tiers = [store.local] + (list(store.layers) if readonly else [])
    return [path for tier in tiers if tier.name not in store.untrusted
            for _key, path in tier.newer_files(prefix or None)]


def refuse_newer_format(store, action: str) -> None:
    """Raise :class:`UsageError` when the writable root holds newer-format entries.

    A cache written by a newer kcache is left untouched as a whole (issue 4): rather than
    pruning around entries it cannot judge, ``action`` (e.g. "prune") says so and changes
    nothing.
    """
    newer = newer_format_files(store, readonly=False)
    if newer:
        raise UsageError(f"{store.root} holds {entries_text(len(newer))} written by a newer "
                         f"kcache format (e.g. {newer[0].name}); refusing to {action}, nothing "
                         "changed (use the newer kcache)")


def not_removed(failed) -> list[dict]:
    """``[{"key", "path", "reason"}]`` from the store's report of entries left in place
    (``RemoveReport.failed`` / ``PruneReport.failed``: ``NotRemoved(key, path, reason)``,
    reasons such as "busy (locked by another process)" or "not a regular file")."""
    return [{"key": f.key, "path": str(f.path), "reason": _name_lock(f)} for f in failed or ()]


def _name_lock(failed) -> str:
    """The reason, naming the lock file when the entry was busy (another process held it)."""
    from kcache.disk.layout import Layout
    from kcache.store.reports import BUSY
    if not failed.reason.startswith(BUSY):
        return failed.reason
    root = Path(failed.path).parents[3]  # <root>/v1/entries/ab/<key>.kce
    lock = Layout(root).lock(failed.key)
    return f"{failed.reason} (lock file {lock})"


def left_text(left: list[dict], verb: str = "could not be removed") -> str:
    """One line naming each entry left and why (the first five, then a count)."""
    shown = "; ".join(f"{e['key'][:SHORT_KEY]}: {e['reason']}"
                      + (f" ({QUARANTINE_HINT})" if not_regular(e["reason"]) else "")
                      for e in left[:5])
    more = f"; and {len(left) - 5} more" if len(left) > 5 else ""
    return f"{entries_text(len(left))} {verb}: {shown}{more}"

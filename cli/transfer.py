"""What ``push`` and ``pull`` print about the entries they moved: the piped table of
outcomes and the one line naming each entry that failed."""
from __future__ import annotations

import sys

from kcache.cli.fmt import entries_text
from kcache.cli.output import cell
from kcache.cli.problems import SHORT_KEY

#: Failed entries named in the one line of a failure; the rest are counted (all are in JSON).
SHOWN_FAILURES = 5


def failed_records(failed) -> list[dict]:
    """``[{"key", "reason"}]`` from a CopyReport's ``failed`` ([(key, reason)]), reasons
    on one line (a reason never holds a credential: tier names and backend messages leave
    them out, kcache.remote.base)."""
    return [{"key": key, "reason": " ".join(str(why).split())} for key, why in failed]


def failure_line(failed: list[dict], verb: str) -> str:
    """``2 entries not pushed: 1a2b3c4d5e6f: <reason>; ...`` (the first five, then a count)."""
    shown = "; ".join(f"{f['key'][:SHORT_KEY]}: {f['reason']}" for f in failed[:SHOWN_FAILURES])
    more = len(failed) - SHOWN_FAILURES
    return f"{entries_text(len(failed))} {verb}: {shown}{f'; and {more} more' if more > 0 else ''}"


def print_outcomes(groups, failed: list[dict]) -> None:
    """The plain (piped) table: a ``key<TAB>outcome<TAB>reason`` header, then one row per
    key of each ``(outcome, keys)`` group and per failed entry (outcome ``failed``)."""
    rows = ["key\toutcome\treason"]
    for outcome, keys in groups:
        rows += [f"{cell(key)}\t{outcome}\t" for key in keys]
    rows += [f"{cell(f['key'])}\tfailed\t{cell(f['reason'])}" for f in failed]
    sys.stdout.write("\n".join(rows) + "\n")

"""Fingerprints remembered per function, with the checks that say they still hold: a
rebound global or an edited closure cell is always seen. The tables are the process's
(``process.STATE.fingerprint_memo(registries)``: one :class:`~kcache.dispatcher.process.
FingerprintMemo` per front-end's registries)."""
from __future__ import annotations


# ---------------------------------------------------------------------------------------
# Result cache: a fingerprint is reused only while everything it read is still the very same
# object (identity), so a rebound global or an edited closure cell is always seen.  Mutable
# values (arrays, lists, dicts, opaque objects) make an entry uncacheable.


class _Cached:
    __slots__ = ("fp", "checks")

    def __init__(self, fp, checks):
        self.fp = fp
        # (reader, its arguments, expected object, compare by equality?): reader(*arguments)
        # is the current object. Plain functions and tuples rather than closures: a kernel's
        # checks are a few tuples, not a function and cells per global it reads.
        self.checks = checks


#: In ``FingerprintMemo.results`` for a function fingerprinted once without recording its
#: checks.
_SEEN = _Cached(None, ())


def _validated_cache_get(entry):
    """The Fingerprint remembered in ``entry`` (a :class:`_Cached`) if every input it read is
    unchanged, else None."""
    if entry is None or entry is _SEEN:
        return None
    return entry.fp if _checks_hold(entry.checks) else None


def _checks_hold(checks) -> bool:
    """True when every input a result read is unchanged (see _Cached)."""
    try:
        for read, args, expected, by_equality in checks:
            current = read(*args)
            if not (current == expected if by_equality else current is expected):
                return False
    except Exception:  # an input that cannot be read (or compared) any more: recompute
        return False
    return True

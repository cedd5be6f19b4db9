"""Which entries ``ls``, ``rm`` and ``export`` act on: the selection switches.

``--kernel GLOB`` and ``--cc CC`` (kcache.cli.args), ``--signature GLOB`` (the short or the
full form, kcache.entry.shortsig.signature_matches), ``--kind kernel|program``, ``--older-than
DURATION`` and ``--since DURATION``. Both times are the entry's *last use* (its file's mtime, the LRU time
``prune --older-than`` and ``ccache --evict-older-than`` go by; a new entry's last use is its
creation): ``--older-than 30d`` is "not used for 30 days", ``--since 1h`` "used (or made) in
the last hour". Given together they are a window; every switch given must match.
"""
from __future__ import annotations

import argparse
import time

from kcache.cli.args import MAX_VALUE_TEXT, arch_matches, duration_arg as seconds_of, one_line
from kcache.cli.entries import kernel_matches
from kcache.cli.text import clip
from kcache.entry.format import KINDS
from kcache.entry.shortsig import signature_matches


class Duration(float):
    """Seconds, remembering the text the user typed (``7d``) for messages."""

    text: str

    def __new__(cls, seconds: float, text: str) -> "Duration":
        self = super().__new__(cls, seconds)
        self.text = text
        return self


def duration_arg(text: str) -> Duration:
    """argparse type for ``--older-than``/``--since``: ``kcache.config.parse_duration``'s
    durations (``30m``, ``12h``, ``7d``, ``2w``, seconds), as ``prune --older-than`` takes
    them (kcache.cli.args.duration_arg). ArgumentTypeError (exit 2) otherwise."""
    return Duration(seconds_of(text), text.strip())


def signature_arg(text: str) -> str:
    """argparse type for ``--signature GLOB``: an empty or blank pattern is refused (an unset
    shell variable must not select every entry or none)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"--signature needs a glob pattern, got {text!r} (e.g. '*float64[::1]*' or "
            "'float32[:, ::1], *')")
    if len(text) > 16 * MAX_VALUE_TEXT:
        raise argparse.ArgumentTypeError(f"--signature {clip(text)} is too long (more than "
                                         f"{16 * MAX_VALUE_TEXT} characters)")
    return text


def add_selection(parser: argparse.ArgumentParser, verb: str = "only") -> None:
    """Add ``--signature GLOB``, ``--kind KIND``, ``--older-than DURATION`` and ``--since
    DURATION`` to ``parser``; ``verb`` starts their help (``only``, ``remove``)."""
    parser.add_argument(
        "--signature", metavar="GLOB", type=signature_arg,
        help=f"{verb} entries whose signature matches GLOB, in numba's short form or in full "
             "('*float64[::1]*', 'float32[:, ::1], *'; * and ? are wildcards, brackets and "
             "spaces are plain text)")
    parser.add_argument("--kind", choices=KINDS,
                        help=f"{verb} numba-cuda kernels or {verb} cuda.core programs")
    parser.add_argument(
        "--older-than", metavar="DURATION", type=duration_arg,
        help=f"{verb} entries not used for DURATION (last use: e.g. 12h, 7d, 2w)")
    parser.add_argument(
        "--since", metavar="DURATION", type=duration_arg,
        help=f"{verb} entries used or made within the last DURATION (e.g. 30m, 12h, 1d)")


class Selection:
    """The selection switches of one command line, and whether an entry passes them all."""

    __slots__ = ("kernel", "ccs", "signature", "kind", "older_than", "since", "now")

    def __init__(self, args: argparse.Namespace, now: float | None = None) -> None:
        self.kernel = getattr(args, "kernel", None)
        self.ccs = getattr(args, "cc", None) or None
        self.signature = getattr(args, "signature", None)
        self.kind = getattr(args, "kind", None)
        self.older_than = getattr(args, "older_than", None)
        self.since = getattr(args, "since", None)
        self.now = time.time() if now is None else now

    def __bool__(self) -> bool:
        """True when any switch was given."""
        return any(v is not None for v in (self.kernel, self.ccs, self.signature, self.kind,
                                           self.older_than, self.since))

    def matches(self, view) -> bool:
        """True when the entry (a kcache.cli.entries.EntryView) passes every switch given.
        An entry whose times cannot be read (neither last use nor creation) passes no time
        switch."""
        if self.kernel is not None and not kernel_matches(view, self.kernel):
            return False
        if self.ccs and not any(arch_matches(view.arch, cc) for cc in self.ccs):
            return False
        if self.signature is not None and not signature_matches(view.signature, self.signature):
            return False
        if self.kind is not None and view.kind != self.kind:
            return False
        if self.older_than is not None or self.since is not None:
            used = view.last_used if view.last_used is not None else view.created
            if used is None:
                return False
            if self.older_than is not None and not used < self.now - self.older_than:
                return False
            if self.since is not None and not used >= self.now - self.since:
                return False
        return True

    def describe(self) -> str:
        """The switches given, as typed: ``--kernel 'mix*' --since 7d``."""
        parts = []
        if self.kernel is not None:
            parts.append(f"--kernel {clip(self.kernel)}")
        for cc in self.ccs or ():
            parts.append(f"--cc {_cc_text(cc)}")
        if self.signature is not None:
            parts.append(f"--signature {clip(self.signature)}")
        if self.kind is not None:
            parts.append(f"--kind {self.kind}")
        for flag, value in (("--older-than", self.older_than), ("--since", self.since)):
            if value is not None:
                parts.append(f"{flag} {getattr(value, 'text', value)}")
        return " ".join(parts)


def _cc_text(cc) -> str:
    """A ``cc_arg`` value ``(major, minor, suffix)`` as typed: ``9.0``, ``9.0a``."""
    try:
        major, minor, suffix = cc
        return f"{major}.{minor}{suffix or ''}"
    except (TypeError, ValueError):
        return one_line(cc)

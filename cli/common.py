"""Helpers shared by the ``kcache`` subcommands: options, the store, output and formatting.

Output conventions (docs/cli.md): data goes to stdout, messages to stderr. With ``--json``
stdout is one JSON document (exact bytes, ISO 8601 UTC times). On a terminal, tables are drawn
with rich (imported here lazily, never at module level, to keep start-up fast), sizes are
human-readable and times relative ("3 h ago"). Piped without ``--json``, output is plain
tab-separated text with exact bytes and ISO times, for ``cut``/``awk``.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

SHORT_KEY = 12  # hex digits shown for a key in tables; any unique prefix is accepted back


class UsageError(Exception):
    """Bad input from the user: one line on stderr, exit status 2."""


class Problem(Exception):
    """The operation could not be done or found problems: one line on stderr, exit status 1."""


# ---------------------------------------------------------------------------- options

def add_common(parser: argparse.ArgumentParser) -> None:
    """Add ``--dir`` and ``--json`` to ``parser``.

    Both default to ``argparse.SUPPRESS`` so they can be given before or after the
    subcommand (``kcache --dir D ls`` and ``kcache ls --dir D``) without one level
    overwriting the other's value with a default.
    """
    parser.add_argument(
        "--dir", metavar="PATH", default=argparse.SUPPRESS,
        help="cache root (default: $KCACHE_DIR, else the platform cache directory)")
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS,
        help="print one JSON document on stdout (schema in docs/cli.md)")


def want_json(args: argparse.Namespace) -> bool:
    """True when ``--json`` was given at either level."""
    return bool(getattr(args, "json", False))


def size_arg(text: str) -> int:
    """argparse type for a size such as ``10G``, ``512MiB`` or ``1048576`` (bytes).

    Parsed by ``kcache.config.parse_size`` so the CLI accepts exactly what KCACHE_MAX_SIZE and
    config.json accept (no sign, at most 2**63-1 bytes). Raises
    ``argparse.ArgumentTypeError`` (exit 2) with its message for anything else.
    """
    from kcache.config import parse_size
    try:
        return parse_size(text)
    except ValueError as exc:  # ConfigError is a ValueError
        raise argparse.ArgumentTypeError(_one_line(exc)) from None


def duration_arg(text: str) -> float:
    """argparse type for a duration such as ``7d``, ``12h``, ``30m`` (returns seconds).

    Parsed by ``kcache.config.parse_duration`` (no sign, at most 100 years); anything else
    raises ``argparse.ArgumentTypeError`` (exit 2) with its message.
    """
    from kcache.config import parse_duration
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(_one_line(exc)) from None


def nonblank_arg(what: str):
    """argparse type factory: the text itself, rejecting an empty or blank value.

    ``what`` names the option in the message (e.g. ``--extract``); an unset shell variable
    (``--extract "$X"``) must not silently mean the current directory.
    """
    def check(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{what} needs a value, got {text!r}")
        return text
    return check


def positive_int_arg(text: str) -> int:
    """argparse type for a count >= 1 (``--limit``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more: {text!r}")
    return value


_CC = re.compile(r"^(?:sm_|compute_)?(\d+)(?:\.(\d+))?([a-z]?)$")


def cc_arg(text: str) -> tuple[str, str]:
    """argparse type for a compute capability: ``9.0``, ``90``, ``sm_90`` or ``sm_90a``.

    Returns ``(digits, suffix)``, e.g. ``("90", "")`` for ``9.0`` (which then matches both
    sm_90 and sm_90a) or ``("90", "a")`` for ``sm_90a`` (matches only sm_90a).
    """
    match = _CC.match(text.strip().lower())
    if not match:
        raise argparse.ArgumentTypeError(
            f"not a compute capability: {text!r} (accepted: 9.0, 90, sm_90, sm_90a)")
    major, minor, suffix = match.groups()
    digits = major + minor if minor is not None else major
    if minor is None and len(major) == 1:
        digits = major + "0"  # "9" means 9.0
    return digits, suffix


def arch_matches(arch: str | None, cc: tuple[str, str]) -> bool:
    """True when an entry's ``arch`` (e.g. ``sm_90a``) is compute capability ``cc``."""
    match = _CC.match((arch or "").lower())
    if not match:
        return False
    major, minor, suffix = match.groups()
    digits = major + (minor or "")
    return digits == cc[0] and (not cc[1] or suffix == cc[1])


# ---------------------------------------------------------------------------- the store

def root_arg(args: argparse.Namespace) -> Path | None:
    """The ``--dir`` root as an absolute path, or None when ``--dir`` was not given.

    Raises :class:`UsageError` for an empty or blank ``--dir`` (an unset shell variable in
    ``--dir "$X"`` must not make the current directory a cache) and for a path that exists and
    is not a directory.
    """
    text = getattr(args, "dir", None)
    if text is None:
        return None
    if not text.strip():
        raise UsageError(f"--dir needs a directory path, got {text!r} (accepted: a cache "
                         "directory, existing or not; omit --dir for $KCACHE_DIR or the default)")
    path = Path(text).expanduser().absolute()  # as kcache.config makes roots absolute
    if path.exists() and not path.is_dir():
        raise UsageError(f"--dir {path}: is a file, not a directory (accepted: a cache "
                         "directory, existing or not)")
    return path


def open_store(args: argparse.Namespace):
    """Return a ``kcache.Store`` for ``--dir`` (else KCACHE_DIR, the config, the default).

    Raises :class:`UsageError` for a bad ``--dir`` (:func:`root_arg`); errors of the
    configuration itself (``ConfigError``) propagate to the top-level handler (exit 2).
    """
    from kcache import Store
    store = Store(root_arg(args))
    # KCACHE_DISABLE keeps programs off the cache; maintenance asked for explicitly (e.g.
    # `verify --fix`, which the store skips quarantining when disabled) still applies.
    store.disabled = False
    return store


def ensure_writable(store, nothing: str = "nothing was removed") -> None:
    """Raise :class:`Problem` (exit 1) when ``store.root`` cannot be written.

    ``nothing`` ends the message (what did not happen).
    """
    reason = write_problem(store.root, store)
    if reason:
        raise Problem(f"cannot write to {store.root} ({reason}): {nothing}")


def write_problem(root: Path, store=None) -> str | None:
    """Why ``root`` cannot be written (e.g. "Read-only file system (EROFS)"), or None if it can.

    ``Store.check_writable()`` decides when a store is given (it also remembers an earlier
    write failure). Without one (``kcache dir`` while a setting is bad, so no Store can be
    opened) the same probe runs directly: ``kcache.store.probe_writable`` (a temp file
    created and deleted in the root, or for a root that does not exist yet a temp folder in
    its nearest existing ancestor; permission bits and ``os.access`` do not tell the truth
    for the root user or on a read-only mount). Raises nothing.
    """
    if store is not None:
        return store.check_writable()
    from kcache.store import probe_writable
    return probe_writable(root)


def is_stale(info, current: dict[str, str]) -> bool:
    """True when ``info.components['toolchain']`` disagrees with ``current`` on a shared key
    (``kcache.toolchain.is_stale``; ``current`` is ``package_versions()``, read once)."""
    from kcache.toolchain import is_stale as toolchain_is_stale
    return toolchain_is_stale(info.components or {}, current)


def kernel_matches(info, pattern: str) -> bool:
    """True when the entry's kernel (``module:qualname``) matches the glob ``pattern``.

    The pattern is matched against the whole name and against the qualname alone, so
    ``--kernel 'axpy*'`` finds ``pkg.linalg:axpy``.
    """
    kernel = info.kernel or ""
    qualname = kernel.rpartition(":")[2]
    return fnmatch.fnmatchcase(kernel, pattern) or fnmatch.fnmatchcase(qualname, pattern)


_HEX = re.compile(r"^[0-9a-f]+$")


def problem_of(info) -> str | None:
    """What is wrong with an entry (``EntryInfo.problem``: its header cannot be read), in the
    CLI's one wording per problem (:func:`problem_text`), or None for a readable one."""
    return problem_text(info.problem, getattr(info, "path", None)) if info.problem else None


_MISMATCH = re.compile(r"size mismatch: lengths say (\d+), file has (\d+)")
_TRUNCATED = re.compile(r"truncated(?:: | \()(\d+) bytes\)?")


def problem_text(text: str, path: Path | None = None) -> str:
    """One wording per problem, whichever check found it (docs/cli.md, "Problems").

    The store words a short file by the check that met it: the header read says "size
    mismatch: lengths say 15015, file has 40", the full read "truncated (40 bytes)" or
    "checksum mismatch". All of them become ``truncated: 40 of 15015 bytes`` (the expected
    size read from the file's fixed prefix, ``kcache.entry.parse_prefix``, when ``path`` is
    given and the prefix is whole), else ``truncated: 40 bytes``. Other texts are unchanged.
    """
    if path is not None and (_TRUNCATED.fullmatch(text) or text == "checksum mismatch"):
        text = _prefix_problem(Path(path)) or text
    match = _MISMATCH.fullmatch(text)
    if match and int(match.group(2)) < int(match.group(1)):
        return f"truncated: {match.group(2)} of {match.group(1)} bytes"
    match = _TRUNCATED.fullmatch(text)
    return f"truncated: {match.group(1)} bytes" if match else text


def _prefix_problem(path: Path) -> str | None:
    """The fixed-prefix check's complaint about ``path`` (None when it has none or the file
    cannot be read)."""
    from kcache.entry import PREFIX_SIZE, parse_prefix
    from kcache.errors import KcacheError
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            parse_prefix(f.read(PREFIX_SIZE), size)
    except KcacheError as exc:
        return " ".join(str(exc).split())
    except (OSError, ValueError):
        return None
    return None


def not_regular(problem: str | None) -> bool:
    """True for an entry path that is not a regular file (e.g. a directory): ``rm`` and
    ``prune`` never delete those; ``verify --fix`` moves them to quarantine."""
    from kcache.prune import NOT_REGULAR
    return bool(problem) and problem.startswith(NOT_REGULAR)


#: The hint for an entry path that is not a regular file (rm does not delete directories).
QUARANTINE_HINT = "run 'kcache verify --fix' to quarantine it"


def is_newer(info) -> bool:
    """True for an entry the store lists as written by a newer kcache format (never changed)."""
    return (problem_of(info) or "").startswith("newer format")


def entries_and_broken(store, *, readonly: bool = True) -> tuple[list, list]:
    """``(readable, broken)`` entries of ``store`` (``Store.entries(include_broken=True)``).

    ``broken`` are entry files whose header cannot be read (truncated, zero-length, garbage,
    not a regular file), with ``problem`` set; newer-format entries are in neither list
    (they are not ours to judge; ``verify`` lists them).
    """
    good, broken = [], []
    for info in store.entries(readonly=readonly, include_broken=True):
        if problem_of(info) is None:
            good.append(info)
        elif not is_newer(info):
            broken.append(info)
    return good, broken


def resolve_prefix(store, prefix: str):
    """Return the one entry whose key starts with ``prefix``: an ``EntryInfo``, or a
    :class:`Broken` for an entry file whose header cannot be read.

    Raises :class:`UsageError` when ``prefix`` is not hex, when no key starts with it (naming
    the nearest keys) or when several do (listing them).
    """
    text = prefix.strip().lower()
    if not _HEX.match(text):
        raise UsageError(f"not a key prefix: {prefix!r} (hex digits, as shown by 'kcache ls')")
    # One key may sit in the writable root and a read-only layer: keep the first (writable).
    unique: dict = {}
    for info in store.find(text, include_broken=True):
        if not is_newer(info):  # said below, with the newer-format check
            unique.setdefault(info.key, info)
    matches = list(unique.values())
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(f"{m.key[:SHORT_KEY]} ({_label(m)})"
                          for m in sorted(matches, key=lambda m: m.key)[:8])
        more = f" and {len(matches) - 8} more" if len(matches) > 8 else ""
        raise UsageError(f"key prefix {prefix!r} is ambiguous: {len(matches)} entries match: "
                         f"{shown}{more}")
    newer = newer_format_files(store, text)
    if newer:
        raise UsageError(f"entry {newer[0]} was written by a newer kcache format; left "
                         "untouched (use the kcache version that wrote it)")
    keys = [info.key for info in store.entries()]
    near = near_keys(text, keys)
    if not keys:
        hint = " (the cache has no entries)"
    elif near:
        hint = f"; nearest keys: {', '.join(near)}"
    else:
        hint = ""
    raise UsageError(f"no entry with key prefix {prefix!r}{hint}")


def _label(info) -> str:
    problem = problem_of(info)
    if problem:
        return f"unreadable: {problem}"
    return f"{info.kernel or '?'} {info.arch or ''}".rstrip()


def newer_format_files(store, prefix: str = "", *, readonly: bool = True) -> list[Path]:
    """Entry files (whose key starts with ``prefix``) written by a newer kcache format.

    ``Store.entries``/``find`` skip such files (the store never reads nor deletes them), so
    the CLI looks for them itself to say why a key or a command is refused: it reads each file's fixed prefix and asks
    ``kcache.entry.parse_prefix``, which raises ``NewerFormat`` for a newer version; only such
    files are then read whole and checked by ``kcache.entry.decode`` (which checks the
    checksum first, so a flipped bit in the version field counts as corruption, as in the
    store).
    """
    from kcache.layout import Layout, scan
    roots = [store.root] + (list(store.readonly_roots) if readonly else [])
    return [path for root in roots
            for key, path, st in scan(Layout(root), prefix[:2] if len(prefix) >= 2 else None)
            if key.startswith(prefix) and _is_newer(path, key, st.st_size)]


def _is_newer(path: Path, key: str, size: int) -> bool:
    from kcache.entry import PREFIX_SIZE, decode, parse_prefix
    from kcache.errors import KcacheError, NewerFormat
    try:
        with open(path, "rb") as f:
            head = f.read(PREFIX_SIZE)
            try:
                parse_prefix(head, size)
                return False  # this format (or corrupt: verify's business)
            except NewerFormat:
                decode(head + f.read(), key)  # confirm: the checksum must hold too
    except NewerFormat:
        return True
    except (OSError, KcacheError):
        return False
    return False


def refuse_newer_format(store, action: str) -> None:
    """Raise :class:`UsageError` when the writable root holds newer-format entries.

    A cache written by a newer kcache is left untouched as a whole (issue 4): rather than
    pruning around entries it cannot judge, ``action`` (e.g. "prune") says so and changes
    nothing.
    """
    newer = newer_format_files(store, readonly=False)
    if newer:
        raise UsageError(f"{store.root} holds {entries_text(len(newer))} written by a newer kcache "
                         f"format (e.g. {newer[0].name}); refusing to {action}, nothing "
                         "changed (use the newer kcache)")


def not_removed(failed) -> list[dict]:
    """``[{"key", "path", "reason"}]`` from the store's report of entries left in place
    (``RemoveReport.failed`` / ``PruneReport.failed``: ``NotRemoved(key, path, reason)``,
    reasons such as "busy (locked by another process)" or "not a regular file")."""
    return [{"key": f.key, "path": str(f.path), "reason": _name_lock(f)} for f in failed or ()]


def _name_lock(failed) -> str:
    """The reason, naming the lock file when the entry was busy (another process held it)."""
    from kcache.layout import Layout
    from kcache.prune import BUSY
    if not failed.reason.startswith(BUSY):
        return failed.reason
    root = Path(failed.path).parents[3]  # <root>/v1/entries/ab/<key>.kce
    lock = Layout(root).locks / failed.key[:2] / f"{failed.key}.lock"
    return f"{failed.reason} (lock file {lock})"


def left_text(left: list[dict], verb: str = "could not be removed") -> str:
    """One line naming each entry left and why (the first five, then a count)."""
    shown = "; ".join(f"{e['key'][:SHORT_KEY]}: {e['reason']}"
                      + (f" ({QUARANTINE_HINT})" if not_regular(e["reason"]) else "")
                      for e in left[:5])
    more = f"; and {len(left) - 5} more" if len(left) > 5 else ""
    return f"{entries_text(len(left))} {verb}: {shown}{more}"


def plural(n: int, one: str, many: str | None = None) -> str:
    """``1 entry``, ``2 entries``: ``n`` with the right form of the noun."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def entries_text(n: int) -> str:
    """``1 entry`` / ``N entries``."""
    return plural(n, "entry", "entries")


def near_keys(prefix: str, keys: Iterable[str], n: int = 3) -> list[str]:
    """The ``n`` keys nearest to ``prefix`` (short forms): the most leading digits in common
    first, then the smallest numeric distance between the first ``len(prefix)`` digits."""
    target = int(prefix, 16)
    keys = [k for k in keys if _HEX.match(k)]  # a stray file name is not a key

    def nearness(key: str) -> tuple[int, int]:
        shared = len(os.path.commonprefix([key, prefix]))
        return -shared, abs(int(key[: len(prefix)], 16) - target)

    return [k[:SHORT_KEY] for k in sorted(set(keys), key=nearness)[:n]]


# ---------------------------------------------------------------------------- formatting

def iso(ts: float | None) -> str | None:
    """Unix seconds -> ISO 8601 in UTC, e.g. ``2026-11-30T23:55:45Z`` (None stays None)."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds").replace(
        "+00:00", "Z")


def ago(ts: float | None, now: float | None = None) -> str:
    """Unix seconds -> a relative time for people: ``just now``, ``5 min ago``, ``3 h ago``."""
    if ts is None:
        return "-"
    delta = (time.time() if now is None else now) - ts
    future, delta = delta < 0, abs(delta)
    for unit, seconds in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if delta >= seconds:
            text = f"{int(delta // seconds)} {unit}"
            return f"in {text}" if future else f"{text} ago"
    return "just now"


def human_size(n: int | None) -> str:
    """Bytes -> ``kcache.config.format_size`` text (e.g. ``1.5 MiB``)."""
    if n is None:
        return "-"
    from kcache.config import format_size
    return format_size(int(n))


def plain_seconds(s: float | None) -> str | None:
    """Seconds for plain (piped) output: 2 decimals, e.g. ``0.08`` (JSON keeps them exact)."""
    return None if s is None else f"{s:.2f}"


def human_seconds(s: float | None) -> str:
    """Seconds -> ``0.84 s``, ``12.3 min`` or ``4.1 h`` for people."""
    if s is None:
        return "-"
    if s < 60:
        return f"{s:.2f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def entry_record(info, stale: bool | None = None) -> dict[str, Any]:
    """The stable JSON object for one entry header (docs/cli.md, "entry object")."""
    record = {
        "key": info.key,
        "short_key": info.key[:SHORT_KEY],
        "kernel": info.kernel,
        "signature": info.signature,
        "arch": info.arch,
        "file_size": int(info.file_size or 0),
        "sizes": {k: int(v) for k, v in (info.sizes or {}).items()},
        "hits": int(info.hits or 0),
        "created": iso(info.created),
        "last_used": iso(info.last_used),
        "compile_seconds": info.compile_seconds,
        "root": str(info.root),
        "readonly": bool(info.readonly),
        "path": str(info.path),
        "problem": problem_of(info),
    }
    if stale is not None:
        record["stale"] = stale
    return record


# ---------------------------------------------------------------------------- output

def is_terminal() -> bool:
    """True when stdout is a terminal (then tables and relative times are for people)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    return repr(value)


def print_json(document: Any) -> None:
    """Write ``document`` as indented JSON on stdout (bytes become hex strings)."""
    sys.stdout.write(json.dumps(document, indent=2, default=_json_default) + "\n")


def message(text: str) -> None:
    """Write a message for people on stderr (never mixed into the data on stdout)."""
    sys.stderr.write(text.rstrip("\n") + "\n")


def console(stderr: bool = False):
    """A rich Console (rich is imported here, only when something is drawn)."""
    from rich.console import Console
    return Console(stderr=stderr, highlight=False)


def print_table(columns: Sequence[str], human_rows: Sequence[Sequence[Any]],
                plain_rows: Sequence[Sequence[Any]], *, title: str | None = None,
                right: Sequence[str] = (), names: Sequence[str] | None = None) -> None:
    """Print a table: rich with ``human_rows`` on a terminal, else TSV of ``plain_rows``.

    The TSV form has a header line of ``names`` (the JSON field names, e.g. ``file_size``),
    else of ``columns`` (lower case, spaces as ``_``); tabs and newlines inside values are
    replaced by spaces so each row stays one line.
    """
    if is_terminal():
        if not human_rows:
            return  # an empty table says nothing; the command's message says why
        from rich.table import Table
        table = Table(title=title, title_justify="left", box=None, header_style="bold")
        for i, name in enumerate(columns):
            # The first column is the key people copy back: never wrap it.
            table.add_column(name, justify="right" if name in right else "left",
                             overflow="fold", no_wrap=i == 0)
        for row in human_rows:
            table.add_row(*(shown(v) for v in row))
        console().print(table)
        return
    out = sys.stdout
    header = names if names is not None else [c.lower().replace(" ", "_") for c in columns]
    out.write("\t".join(header) + "\n")
    for row in plain_rows:
        out.write("\t".join(_cell(v) for v in row) + "\n")


def print_fields(pairs: Sequence[tuple[str, Any, Any]], *, title: str | None = None) -> None:
    """Print ``(name, human, plain)`` pairs: a rich grid on a terminal, else ``name\\tplain``."""
    if is_terminal():
        from rich.table import Table
        table = Table(title=title, title_justify="left", box=None, show_header=False)
        table.add_column(style="bold")
        table.add_column(overflow="fold")
        for name, human, _ in pairs:
            table.add_row(shown(name), shown(human_value(human)))
        console().print(table)
        return
    for name, _, plain in pairs:
        sys.stdout.write(f"{name.replace(' ', '_')}\t{_cell(plain)}\n")


#: Characters never written raw, to a terminal or a plain line: C0 and C1 control characters,
#: DEL and the bidirectional overrides. A kernel name or signature read from a cache entry
#: could otherwise set the window title, clear the screen or reorder what is shown.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
#: Characters of one value shown in a terminal table (rich lays out every character; a
#: 15 MiB string in an entry's meta would take minutes). Plain and JSON output stay exact.
MAX_SHOWN = 1000


def escape_control(text: str, keep: str = "") -> str:
    """``text`` with every control character (but those in ``keep``, e.g. ``"\\n\\t"``)
    written as an escape (``\\x1b``, ``\\u202e``)."""
    def one(m: re.Match) -> str:
        c = m.group()
        if c in keep:
            return c
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
    return _UNPRINTABLE.sub(one, text)


def shown(value: Any):
    """A value for a rich table cell: a ``rich.text.Text`` (so ``[/bold]`` in a kernel name
    is text, not markup), control characters escaped, at most :data:`MAX_SHOWN` characters."""
    from rich.text import Text
    text = escape_control("" if value is None else str(value))
    if len(text) > MAX_SHOWN:
        text = f"{text[:MAX_SHOWN]}... ({len(text)} characters)"
    return Text(text)


def _cell(value: Any) -> str:
    """A value for plain (piped) output: JSON spellings (``true``, ``false``, empty for
    null), lists joined with ``", "``, dicts as JSON; one line, no tabs, control characters
    escaped (:func:`escape_control`)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif isinstance(value, (list, tuple)) and all(not isinstance(v, (dict, list)) for v in value):
        value = ", ".join(_cell(v) for v in value)
    elif isinstance(value, (dict, list, tuple)):
        value = json.dumps(value, default=_json_default, sort_keys=True)
    return escape_control(" ".join(str(value).replace("\t", " ").splitlines()))


def plain_value(value: Any) -> str:
    """A value for plain (piped) output, as in tables: see :func:`_cell`."""
    return _cell(value)


def human_value(value: Any) -> str:
    """A value for people: ``yes``/``no`` for booleans, ``-`` for none, lists joined with
    ``", "``, otherwise as :func:`_cell` writes it."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return _cell(value) if not isinstance(value, str) else value


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def confirm(question: str) -> bool:
    """Ask a yes/no ``question`` on the terminal; True only for an explicit yes."""
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    try:
        answer = sys.stdin.readline()
    except (OSError, KeyboardInterrupt):
        return False
    return answer.strip().lower() in ("y", "yes")

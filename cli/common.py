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
import tempfile
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
    config.json accept. Raises ``argparse.ArgumentTypeError`` (exit 2) for anything else.
    """
    from kcache.config import parse_size
    if text.strip().startswith("-"):
        raise argparse.ArgumentTypeError(f"size must not be negative: {text!r}")
    try:
        value = parse_size(text)
    except ValueError as exc:  # ConfigError is a ValueError
        raise argparse.ArgumentTypeError(_one_line(exc)) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"size must not be negative: {text!r}")
    return value


def duration_arg(text: str) -> float:
    """argparse type for a duration such as ``7d``, ``12h``, ``30m`` (returns seconds).

    Parsed by ``kcache.config.parse_duration``; negative or malformed durations raise
    ``argparse.ArgumentTypeError`` (exit 2).
    """
    from kcache.config import parse_duration
    if text.strip().startswith("-"):
        raise argparse.ArgumentTypeError(f"duration must not be negative: {text!r}")
    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(_one_line(exc)) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"duration must not be negative: {text!r}")
    return value


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

def open_store(args: argparse.Namespace):
    """Return a ``kcache.Store`` for ``--dir`` (else KCACHE_DIR, the config, the default).

    Raises :class:`UsageError` when the given root exists and is not a directory; errors of
    the configuration itself (``ConfigError``) propagate to the top-level handler (exit 2).
    """
    from kcache import Store
    root = getattr(args, "dir", None)
    if root is not None:  # KCACHE_DIR is checked by kcache.config, which names the variable
        path = Path(root).expanduser()
        if path.exists() and not path.is_dir():
            raise UsageError(f"--dir {root}: is a file, not a directory (accepted: a cache "
                             "directory, existing or not)")
        root = path
    store = Store(root)
    # KCACHE_DISABLE keeps programs off the cache; maintenance asked for explicitly (e.g.
    # `verify --fix`, which the store skips quarantining when disabled) still applies.
    store.disabled = False
    return store


def ensure_writable(store, nothing: str = "nothing was removed") -> None:
    """Raise :class:`Problem` (exit 1) when ``store.root`` cannot be written.

    ``nothing`` ends the message (what did not happen).

    Probed by creating and removing a temporary file in the entries folder, because neither
    the permission bits nor ``os.access`` tell the truth for root or on a read-only mount.
    """
    reason = write_problem(store)
    if reason:
        raise Problem(f"cannot write to {store.root} ({reason}): {nothing}")


def write_problem(store) -> str | None:
    """Why ``store.root`` cannot be written (e.g. "Read-only file system"), or None if it can.

    A root that does not exist yet counts as writable (the store creates it on its first
    write). Probed by creating and removing a temporary file in the entries folder.
    """
    if not store.root.exists():
        return None
    folder = store.root
    for name in ("v1", "entries"):
        if (folder / name).is_dir():
            folder = folder / name
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".kcache-probe-"):
            pass
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


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


def resolve_prefix(store, prefix: str):
    """Return the one ``EntryInfo`` whose key starts with ``prefix``.

    Raises :class:`UsageError` when ``prefix`` is not hex, when no key starts with it (naming
    the nearest keys) or when several do (listing them).
    """
    text = prefix.strip().lower()
    if not _HEX.match(text):
        raise UsageError(f"not a key prefix: {prefix!r} (hex digits, as shown by 'kcache ls')")
    # One key may sit in the writable root and a read-only layer: keep the first (writable).
    unique: dict = {}
    for info in store.find(text):
        unique.setdefault(info.key, info)
    matches = list(unique.values())
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(f"{m.key[:SHORT_KEY]} ({m.kernel or '?'} {m.arch or ''})".rstrip()
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
        raise UsageError(f"{store.root} holds {len(newer)} entries written by a newer kcache "
                         f"format (e.g. {newer[0].name}); refusing to {action}, nothing "
                         "changed (use the newer kcache)")


def near_keys(prefix: str, keys: Iterable[str], n: int = 3) -> list[str]:
    """The ``n`` keys nearest to ``prefix`` (short forms): the most leading digits in common
    first, then the smallest numeric distance between the first ``len(prefix)`` digits."""
    target = int(prefix, 16)

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
        "file_size": int(info.file_size),
        "sizes": {k: int(v) for k, v in (info.sizes or {}).items()},
        "hits": int(info.hits or 0),
        "created": iso(info.created),
        "last_used": iso(info.last_used),
        "compile_seconds": info.compile_seconds,
        "root": str(info.root),
        "readonly": bool(info.readonly),
        "path": str(info.path),
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
                right: Sequence[str] = ()) -> None:
    """Print a table: rich with ``human_rows`` on a terminal, else TSV of ``plain_rows``.

    The TSV form has a header line of ``columns`` (lower case, spaces as ``_``); tabs and
    newlines inside values are replaced by spaces so each row stays one line.
    """
    if is_terminal():
        from rich.table import Table
        table = Table(title=title, title_justify="left", box=None, header_style="bold")
        for i, name in enumerate(columns):
            # The first column is the key people copy back: never wrap it.
            table.add_column(name, justify="right" if name in right else "left",
                             overflow="fold", no_wrap=i == 0)
        for row in human_rows:
            table.add_row(*("" if v is None else str(v) for v in row))
        console().print(table)
        return
    out = sys.stdout
    out.write("\t".join(c.lower().replace(" ", "_") for c in columns) + "\n")
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
            table.add_row(name, "" if human is None else str(human))
        console().print(table)
        return
    for name, _, plain in pairs:
        sys.stdout.write(f"{name.replace(' ', '_')}\t{_cell(plain)}\n")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        value = json.dumps(value, default=_json_default, sort_keys=True)
    return " ".join(str(value).replace("\t", " ").splitlines())


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

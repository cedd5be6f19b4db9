"""What is wrong with an entry, in one wording per problem, and what was left in place.

Also the refusal of entries written by a newer kcache format, which the store neither reads
nor deletes (issue 4): the CLI looks for them itself to say why a key or a command is refused.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from pathlib import Path

from kcache.cli.errors import UsageError
from kcache.cli.fmt import entries_text

SHORT_KEY = 12  # hex digits shown for a key; any unique prefix is accepted back

#: The hint for an entry path that is not a regular file (rm does not delete directories).
QUARANTINE_HINT = "run 'kcache verify --fix' to quarantine it"

_MISMATCH = re.compile(r"size mismatch: lengths say (\d+), file has (\d+)")
_TRUNCATED = re.compile(r"truncated(?:: | \()(\d+) bytes\)?")


def problem_of(info) -> str | None:
    """What is wrong with an entry (``EntryInfo.problem``: its header cannot be read), in the
    CLI's one wording per problem (:func:`problem_text`), or None for a readable one."""
    return problem_text(str(info.problem), getattr(info, "path", None)) if info.problem else None


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
        with regular_file(path) as (fd, st):
            parse_prefix(read_at_most(fd, PREFIX_SIZE), st.st_size)
    except KcacheError as exc:
        return " ".join(str(exc).split())
    except (OSError, ValueError):
        return None
    return None


@contextlib.contextmanager
def regular_file(path: Path):
    """``(fd, stat)`` of ``path`` opened for reading, when it is a regular file: never
    through a symlink and without blocking (a FIFO named like an entry must not hang the
    command); OSError otherwise (ELOOP for a symlink, EINVAL for anything but a regular
    file). File descriptors, not file objects: this runs once per entry in prune and clear."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        yield fd, st
    finally:
        os.close(fd)


def read_at_most(fd: int, size: int) -> bytes:
    """Up to ``size`` bytes from ``fd`` (fewer at the end of the file)."""
    chunks = []
    while size > 0:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def not_regular(problem: str | None) -> bool:
    """True for an entry path that is not a regular file (e.g. a directory): ``rm`` and
    ``prune`` never delete those; ``verify --fix`` moves them to quarantine."""
    from kcache.prune import NOT_REGULAR
    return bool(problem) and problem.startswith(NOT_REGULAR)


def is_newer(info) -> bool:
    """True for an entry the store lists as written by a newer kcache format (never changed)."""
    return (problem_of(info) or "").startswith("newer format")


def newer_format_files(store, prefix: str = "", *, readonly: bool = True) -> list[Path]:
    """Entry files (whose key starts with ``prefix``) written by a newer kcache format.

    ``Store.entries``/``find`` skip such files, so each file's fixed prefix is read and
    asked to ``kcache.entry.parse_prefix``, which raises ``NewerFormat`` for a newer version;
    only such files are then read whole and checked by ``kcache.entry.decode`` (checksum
    first, so a flipped bit in the version field counts as corruption, as in the store).
    """
    from kcache.layout import Layout, entry_key
    roots = [store.root] + (list(store.readonly_roots) if readonly else [])
    found = []
    for root in roots:
        # File names only (no stat, no Path per file: prune and clear run this on every
        # entry first); the folders and the names are the Layout's.
        for shard in Layout(root).shard_dirs(prefix[:2] if len(prefix) >= 2 else None):
            try:
                with os.scandir(shard) as listing:
                    names = [de.name for de in listing]
            except OSError:
                continue
            folder = str(shard)
            for name in names:
                key = entry_key(shard.name, name)
                if key is not None and key.startswith(prefix) and _is_newer(
                        os.path.join(folder, name), key):
                    found.append(shard / name)
    return found


def _is_newer(path: str, key: str) -> bool:
    """True when ``path`` is a regular file of a newer entry format whose checksum holds.

    The first bytes are read without a ``stat`` (a folder or FIFO named like an entry reads
    as an error or as too short, both "not newer"); only a file whose version field says
    newer is checked further, bounded by its size."""
    from kcache.entry import MAX_FILE, PREFIX_SIZE, decode, parse_prefix
    from kcache.errors import KcacheError, NewerFormat
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return False
    try:
        head = os.read(fd, PREFIX_SIZE)
        try:
            # The magic, then the version, are checked before any length: a newer file
            # raises NewerFormat whatever size is given; its real size is checked below.
            parse_prefix(head, len(head) + 2**40)
            return False  # this format (or corrupt: verify's business)
        except NewerFormat:
            pass
        except KcacheError:
            return False
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE:
            return False  # not a file, or corrupt: never read whole
        decode(head + read_at_most(fd, st.st_size - len(head)), key)  # the checksum too
    except NewerFormat:
        return True
    except (OSError, KcacheError):
        return False
    finally:
        os.close(fd)
    return False


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

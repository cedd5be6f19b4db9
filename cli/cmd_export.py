"""``kcache export OUT``: write entries into one bundle file (zstd-compressed, signed with a
secret when one is set; format version 3 by default, which a process serves in place when the
file is named as a read-only layer; docs/containers.md "Bundle format")."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from kcache.cli.args import add_entry_filters, nonblank_arg, want_json
from kcache.cli.cache import open_store
from kcache.cli.entries import select_entries
from kcache.cli.errors import Problem, UsageError
from kcache.cli.fmt import entries_text, human_size
from kcache.cli.output import message, print_json, progress_bar, stderr_is_terminal
from kcache.cli.secret import add_secret_option, secret_of
from kcache.cli.selection import Selection, add_selection


def register(sub):
    """Add the ``export`` subparser to ``sub`` and return it."""
    p = sub.add_parser("export", help="write entries into one bundle file",
                       description="Write the cache's entries (writable root and read-only "
                                   "layers) into one bundle file for another machine or image: "
                                   "the entries with a record each, zstd-compressed, signed "
                                   "with a secret when one is set. Format version 3 (the "
                                   "default) is served in place when the file is named in "
                                   "KCACHE_READONLY_DIRS; version 2 is read by kcache before "
                                   "the bundle layers (import only).")
    p.add_argument("out", metavar="OUT", type=nonblank_arg("OUT"), help="the bundle file to write")
    add_entry_filters(p)
    add_selection(p)
    p.add_argument("--current", action="store_true",
                   help="only entries built by the current toolchain (no stale ones)")
    p.add_argument("--compress", choices=("auto", "zstd", "none"), default="auto",
                   help="zstd, none, or auto (the default): zstd when the zstandard package is "
                        "installed (a dependency of kcache)")
    p.add_argument("--format", type=int, choices=(3, 2), default=3, dest="bundle_format",
                   metavar="VERSION", help="the bundle format version: 3 (the default: an index "
                   "and a frame per entry, served in place as a read-only layer) or 2 (one "
                   "stream, for kcache versions before bundle layers)")
    add_secret_option(p)
    return p


def select(store, args) -> list:
    """The entries to export (EntryInfo), one per key (the writable root's first), chosen by
    the selection switches (kcache.cli.selection) and ``--current``."""
    selection = Selection(args)
    return select_entries(store, current=args.current,
                          where=selection.matches if selection else None)


def _items(store, infos, progress) -> list[tuple[dict, bytes]]:
    """(record, verified bytes) of each entry in ``infos`` still there and valid."""
    items = []
    for i, info in enumerate(infos, 1):
        data = store.entry_bytes(info.key)
        if progress is not None:
            progress(i, len(infos))
        if data is None:
            continue  # removed meanwhile, or fails the checks: never exported
        items.append(({"key": info.key, "kernel": info.kernel, "signature": info.signature,
                       "arch": info.arch, "toolchain": (info.components or {}).get("toolchain"),
                       "created": info.created}, data))
    return items


def _refuse_planted_link(path: Path) -> None:
    """Problem if ``path`` is a symlink another user planted in a sticky world-writable
    folder (/tmp): realpath resolves it without the kernel's ``fs.protected_symlinks``
    check, so ``export /tmp/b.kcb`` as root replaced the file it named (``cp`` is refused)."""
    try:
        link, folder = os.lstat(path), os.stat(path.parent)
    except OSError:
        return  # nothing there: created in place
    if (stat.S_ISLNK(link.st_mode) and folder.st_mode & stat.S_ISVTX and folder.st_mode & 0o002
            and link.st_uid not in (os.geteuid(), folder.st_uid)):
        raise Problem(f"export: {path} is a symlink owned by another user (uid {link.st_uid}) "
                      "in a folder every user can write: not followed, nothing written")


def run(args) -> int:
    """Export. JSON: ``{"path", "entries", "entry_bytes", "bundle_bytes", "compressed",
    "signed", "format_version", "keys"}``. Exit 1 (nothing written) when no entry matches."""
    from kcache.tiers.bundle.v2 import BundleError, check_target, write_bundle
    # a symlink the user typed is theirs: the bundle replaces the file it names
    if args.out == "-":  # not a file name anyone means
        raise UsageError("export: OUT '-': a bundle is written to a file, not to standard "
                         "output (accepted: a file path)")
    _refuse_planted_link(Path(args.out).expanduser())
    out = Path(os.path.realpath(Path(args.out).expanduser()))
    if out.is_dir() or args.out.endswith("/"):  # "new/" names a folder, never a file "new"
        raise UsageError(f"export: {args.out if args.out.endswith('/') else out} is a folder "
                         "(accepted: a file path for the bundle)")
    if not out.parent.is_dir():  # said before any entry is read, not as the temp file's error
        what = (f"{out.parent} is not a folder" if out.parent.exists()
                else f"the folder {out.parent} does not exist")
        raise UsageError(f"export: {what} (accepted: a file path in an existing folder)")
    try:  # a device or FIFO (/dev/null as root) is never replaced; said before any work
        check_target(out)
    except BundleError as exc:
        raise Problem(f"export: {exc}") from None
    except OSError as exc:
        raise Problem(f"export: cannot look at {out} ({exc.strerror or exc})") from None
    secret = secret_of(args)
    store = open_store(args)
    show = stderr_is_terminal() and not want_json(args)
    with progress_bar(show, "reading entries") as progress:
        items = _items(store, select(store, args), progress)
    if not items:
        raise Problem("no entries match: nothing written")
    compress = {"auto": None, "zstd": True, "none": False}[args.compress]
    try:
        with progress_bar(show, "exporting") as progress:
            rep = write_bundle(out, items, secret=secret, compress=compress, progress=progress,
                               version=args.bundle_format)
    except BundleError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # the folder's file system refused: named by OUT, not the temp file
        raise Problem(f"export: cannot write {out} ({exc.strerror or exc}): nothing "
                      "written") from None
    if want_json(args):
        print_json({"path": str(rep.path), "entries": rep.entries, "entry_bytes": rep.entry_bytes,
                    "bundle_bytes": rep.bundle_bytes, "compressed": rep.compressed,
                    "signed": rep.signed, "format_version": rep.version,
                    "keys": [rec["key"] for rec, _d in items]})
    else:
        how = ", ".join((f"bundle format {rep.version}", "zstd" if rep.compressed else "uncompressed",
                         "signed" if rep.signed else "unsigned"))
        message(f"kcache: exported {entries_text(rep.entries)} ({human_size(rep.entry_bytes)}) "
                f"to {rep.path} ({human_size(rep.bundle_bytes)}, {how})")
    return 0

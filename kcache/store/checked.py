"""Entries checked by an earlier process, remembered in the writable root: a later process's
first hit of the same bytes skips the checks whose verdict cannot differ (issues 34 and 36: a
hit costs less; the figures are in docs/bench-dispatch.md).

A hit checks an entry twice over: that its bytes are undamaged (the artifacts' SHA-256 sums
and the header's BLAKE2b-128, or a bundle layer index's SHA-256 of the whole entry, computed
at every hit) and that what they say is well formed (kcache.entry.format.check_header, the
header's schema and bounds, and kcache.entry.artifacts.problem). The second is a pure function
of the key and the bytes, so its verdict is kept under a digest of the key and of what pins
every byte it read: the header's BLAKE2b-128 (the header holds the artifacts' SHA-256 sums
and sizes, checked at every hit) or the layer index's SHA-256. A later hit whose bytes, once
found undamaged, give a remembered digest is decoded without those checks, as
kcache.store.verified does within a process.

Trust, as for the code analyses (dispatcher/fingerprint/remembered.py): kept in and read from
the writable root only, never a read-only layer, a bundle or a remote. Read as every file of a
root (regular, a trusted owner, through folders walked afresh without following a symlink,
at most :data:`MAX_BYTES`), shape-checked; anything wrong is an empty memo, never an error. A
digest planted there lets only bytes that hash to it skip the schema check, and planting it
takes the write access to the root that planting an entry takes.

One file, ``<root>/v1/code/<code_memo_name(NAME, tag)>``, beside the code analyses (``kcache
stats``, ``prune --older-than`` and ``clear`` count and remove it with them): {"tag", "digests":
16-byte digests joined}. The tag is kcache's version, msgpack's, and the source of the
checking modules and of this one, so a change to a check is another file. Read on a process's
first hit; written at exit, atomically, when the process checked entries the file lacks,
keeping the newest :data:`MAX_KEPT`.
"""
from __future__ import annotations

import atexit
import hashlib
import importlib
import os
import threading

import msgpack

from .. import __version__
from ..disk import fsio
from ..disk.layout import CODE, code_memo_name
from ..disk.paths import RootDirs
from ..entry.format import _unpack

NAME = "<checked entries>"  # the "source file" the memo file's name is made from
SIZE = 16  # bytes of a digest
MAX_KEPT = 16384  # digests a file keeps (256 KiB)
MAX_BYTES = 1 << 20  # a memo file read
#: The modules whose code makes the verdict or this memo: their source is in the tag.
_CHECKERS = ("kcache.entry.format", "kcache.entry.artifacts", __name__)
_TAG: list = []  # [tag or ""] once worked out in this process
_MEMOS: dict = {}  # root -> CheckedMemo, one per writable root in this process
_MEMOS_LOCK = threading.Lock()


def memo_for(local) -> "CheckedMemo":
    """The :class:`CheckedMemo` of ``local``'s root (a LocalTier) in this process."""
    memo = _MEMOS.get(local.root)
    if memo is None:
        with _MEMOS_LOCK:
            memo = _MEMOS.setdefault(local.root, CheckedMemo(local))
    return memo


def digest(key: str, pin: bytes) -> bytes:
    """The memo's digest of an entry of ``key`` whose bytes ``pin`` pins (the header's
    BLAKE2b-128, or a bundle index's SHA-256 of the whole entry)."""
    return hashlib.blake2b(pin, digest_size=SIZE, key=key.encode()[:64]).digest()


class CheckedMemo:
    """The checked entries of one writable root, for this process. ``local``: the root's
    LocalTier, of which the path, trust check and modes are kept."""

    def __init__(self, local):
        self._root, self._trust = local.root, local.trust
        self._dir_mode, self._file_mode = local.dir_mode, local.file_mode
        self._known: set | None = None  # read on first use
        self._new: list = []
        self._lock = threading.Lock()

    def known(self, d: bytes) -> bool:
        """True when bytes of digest ``d`` passed every check in an earlier process."""
        if self._known is None:
            with self._lock:
                if self._known is None:
                    self._known = set(self._read())
        return d in self._known

    def add(self, d: bytes) -> None:
        """Bytes of digest ``d`` passed every check here (written at exit)."""
        if self._known is not None and d not in self._known and len(self._new) < MAX_KEPT:
            self._known.add(d)
            self._new.append(d)

    def _dirs(self) -> RootDirs:
        return RootDirs(self._root, self._dir_mode)

    def _read(self, dirs: RootDirs | None = None) -> list:
        """The digests of this root's file, oldest first ([] when none or unusable)."""
        tag = _tag()
        if tag is None:
            return []
        dirs = dirs or self._dirs()  # held: its descriptors close when it is dropped
        try:
            raw, _st = fsio.read_regular(code_memo_name(NAME, tag), MAX_BYTES,
                                         dir_fd=dirs.folder(CODE), trust=self._trust)
            data = _unpack(raw)
        except Exception:  # absent, refused, unreadable or not msgpack: checked instead
            return []
        joined = data.get("digests") if type(data) is dict and data.get("tag") == tag else None
        if type(joined) is not bytes or len(joined) % SIZE:
            return []
        return [joined[i:i + SIZE] for i in range(0, len(joined), SIZE)]

    def flush(self) -> None:
        """Write the digests checked here that the root's file lacks (at exit; a root that
        cannot be written is left as it is). Never raises."""
        with self._lock:
            new, self._new = self._new, []
        tag = _tag()
        if not new or tag is None:
            return
        dirs = self._dirs()
        try:
            # A root that exists (the memo never makes one, nor one removed meanwhile): a
            # process that only read from layers leaves it to the next, once its counts
            # have made the root.
            dirs.folder("")
            folder = dirs.folder(CODE, create=True)
        except OSError:
            return
        old = self._read(dirs)
        seen = set(old)
        kept = (old + [d for d in dict.fromkeys(new) if d not in seen])[-MAX_KEPT:]
        if len(kept) == len(old) and kept == old:
            return  # another process wrote them meanwhile
        data = msgpack.packb({"tag": tag, "digests": b"".join(kept)}, use_bin_type=True)
        try:
            fsio.publish(folder, code_memo_name(NAME, tag), data, self._file_mode, fsync=False)
        except OSError:
            pass  # a full or read-only root: the memo is only a speed-up


def _tag() -> str | None:
    """What a file's digests are valid for (worked out once per process); None (no memo)
    when a checking module's source cannot be read (an install without ``.py`` files)."""
    if not _TAG:
        parts = [__version__.encode(), repr(msgpack.version).encode()]
        try:
            for name in _CHECKERS:  # imported already (reading imports them)
                with open(importlib.import_module(name).__file__, "rb") as f:
                    parts.append(f.read())
        except (OSError, AttributeError, TypeError, ImportError):
            _TAG.append("")
        else:
            _TAG.append(hashlib.blake2b(b"\0".join(parts), digest_size=16).hexdigest())
    return _TAG[0] or None


def _flush_all() -> None:
    for memo in list(_MEMOS.values()):
        try:
            memo.flush()
        except Exception:  # interpreter shutdown must not fail for a speed-up
            pass


def _after_fork() -> None:
    for memo in list(_MEMOS.values()):
        memo._lock = threading.Lock()  # another thread of the parent may have held it


atexit.register(_flush_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)

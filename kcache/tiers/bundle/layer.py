"""A bundle file named as a read-only layer (``KCACHE_READONLY_DIRS`` / ``readonly_dirs``
naming a file): served in place, never unpacked, never written.

The file passes a layer's checks (docs/security.md, "Read-only layers"): a regular file,
never a symlink (opened ``O_NOFOLLOW``), owned by the user or root (or the shared group in
shared mode), not writable by group or others; :meth:`BundleLayer.trust_problem` says why not
before the store uses it. It is opened on its first read (``import kcache`` and a store that
never reads stay cheap), once per process, and its prefix, header and index are checked once:
the signature when ``KCACHE_SECRET`` is set (an unsigned bundle is then refused, as ``kcache
import`` refuses it), the checksum otherwise. A version-3 bundle (kcache.tiers.bundle.v3) is
then served by one ``os.pread`` per entry from that descriptor — never mmap: a file truncated
under a mapping raises SIGBUS, which Python cannot turn into a miss — each entry checked
against the index's digest the first time it is served (every time when signed: bytes that
do not match the signature are never served); a miss is a dict lookup. A version 1
or 2 bundle is decompressed into memory once (``memfd``, bounded by the file's size as import
bounds it), never onto a disk, and served from there.

Whatever goes wrong is a miss, never an exception in the user's program: a layer that cannot
be used is warned once (naming the file and what is accepted) and skipped; a file that changes
or is truncated while open (its fstat differs, a read comes back short) is warned once and
gives misses from then on; an entry that differs from its digest is a corrupt entry of that
key alone. The bytes served cross the store's verification path like any tier's.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import stat
import threading
import weakref
from pathlib import Path
from typing import Iterator

from ...disk import fsio
from ...entry.format import decode_header
from ...errors import CorruptEntry
from ...warn import warn_once
from ..local import KnownBad
from ..tier import Blob
from . import v3
from .common import BundleError, open_bundle_file, pread_exact

SECRET_ENV = "KCACHE_SECRET"
MIN_SECRET = 16  # bytes, as kcache.tiers.remote.signing and the CLI's --secret-file
ACCEPTED = ("a bundle file written by 'kcache export' (format version 1, 2 or 3), owned by "
            "you or root and not writable by group or others, or a cache folder")


class BundleLayer:
    """The bundle file ``path`` as a read-only layer: the parts of
    :class:`kcache.tiers.local.LocalTier` the store uses of a layer (``read``, ``mark_bad``,
    ``trust_problem``, ``scan``, ``read_header``, ``newer_files``, ``entry_path``,
    ``entry_stat``), read from
    the file in place. ``trust``: :class:`kcache.disk.fsio.Trust`; ``max_entry_size``: the
    largest entry served (bytes). Thread-safe; raises nothing from its reads but what a
    LocalTier raises for a bad entry (CorruptEntry, KnownBad, OSError)."""

    kind = "layer"
    writable = False
    backfill = False  # served as fast as the root: a hit is not copied there

    def __init__(self, path: Path, *, trust: fsio.Trust, max_entry_size: int):
        self.root = Path(path)
        self.name = str(path)
        self.trust = trust
        self.max_entry_size = max_entry_size
        self.problem: str | None = None  # why it is not used (any more), once known
        self.version: int | None = None  # its bundle format version, once opened
        self._lock = threading.Lock()
        self._opened = False
        self._fd: int | None = None
        self._st: os.stat_result | None = None
        self._index: v3.Index | None = None  # a version-3 bundle
        self._old = None  # a version 1 or 2 bundle's Contents (kcache.tiers.bundle.common)
        self._bad: set[str] = set()  # keys found bad (never served again unless fresh)
        self._checked: set[str] = set()  # keys whose bytes matched the index's digest
        self._closer: weakref.finalize | None = None  # closes the descriptors (once opened)

    def __repr__(self) -> str:
        return f"BundleLayer({self.name!r})"

    # -- trust and opening ---------------------------------------------------------------------
    def trust_problem(self) -> str | None:
        """Why this file must not be used as a layer, or None: one ``lstat`` (a symlink, not a
        regular file, an owner or mode :class:`Trust` refuses). The file is checked again,
        by ``fstat`` of what was opened, when it is opened."""
        try:
            st = os.lstat(self.root)
        except FileNotFoundError:
            return None  # gone since the setting was read: a miss when first read
        except OSError as exc:
            return f"the bundle file {self.root} cannot be examined: {exc.strerror or exc}"
        if stat.S_ISLNK(st.st_mode):
            return (f"the bundle file {self.root} is a symlink (a layer is never opened through "
                    f"one: name the file itself); accepted: {ACCEPTED}")
        if not stat.S_ISREG(st.st_mode):
            return f"{self.root} is not a regular file; accepted: {ACCEPTED}"
        if not self.trust.file_ok(st):
            return f"the bundle file {self.root} is {self.trust.file_problem(st)}; accepted: {ACCEPTED}"
        return None

    def _open(self) -> bool:
        """Open and check the file once (on first use); False when it is not used."""
        if not self._opened:
            with self._lock:
                if not self._opened:
                    try:
                        self._open_file()
                    except BundleError as exc:
                        self._refuse(str(exc))
                    except OSError as exc:
                        self._refuse(f"{self.root}: cannot read it ({exc.strerror or exc})")
                    self._opened = True
        return self.problem is None

    def _open_file(self) -> None:
        fd, st = open_bundle_file(self.root, self.trust)  # O_NOFOLLOW, regular, trusted owner
        try:
            secret = _secret(self.root)
            newest = v3.is_v3(pread_exact(fd, len(v3.MAGIC) + 2, 0))
            if newest:
                self._index = v3.open_index(self.root, fd, st.st_size, secret)
        except BaseException:
            _close(fd)
            raise
        if not newest:  # an older format: decompressed into memory once (the tar reader, now)
            from .v2 import read_contents
            self._old = read_contents(self.root, fd, st.st_size, secret, memory=True)  # owns fd
        self.version = v3.VERSION if newest else self._old.version
        self._fd, self._st = fd, st
        # Closed when this layer is collected (its store dropped: compile_for makes a store
        # per call), as RootDirs closes a root's: else a descriptor per store, and a version
        # 1 or 2 bundle's copy in memory, until the program runs out of either.
        self._closer = weakref.finalize(self, _close_all, {fd, *(self._old.owned if self._old else ())})
        refused = (self._index or self._old).refused
        if refused:  # records that are not entries: misses, said once (import names them all)
            name, why = next(iter(refused.items()))
            warn_once(f"layer-refused:{self.name}", f"kcache: the read-only layer {self.name}: "
                      f"{len(refused)} of its records are not usable entries and are misses "
                      f"(e.g. {name}: {why}); 'kcache import' names each")

    def _refuse(self, why: str) -> None:
        self.problem = why
        tail = "" if "accepted:" in why else f" (accepted: {ACCEPTED})"  # said once only
        warn_once(f"layer:{self.name}", f"kcache: the read-only layer {self.name} is not used: "
                  f"{why}{tail}")

    def _unchanged(self) -> bool:
        """True while the open file is as it was opened (size, mtime, identity); else warned
        once, and every later read of this layer is a miss."""
        try:
            st = os.fstat(self._fd)
        except OSError as exc:
            return self._changed(f"cannot be examined: {exc.strerror or exc}")
        old = self._st
        if (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev) != (
                old.st_size, old.st_mtime_ns, old.st_ino, old.st_dev):
            return self._changed(f"{old.st_size} bytes when opened, {st.st_size} now")
        return True

    def _changed(self, why: str) -> bool:
        self.problem = f"it changed while in use ({why})"
        warn_once(f"layer-changed:{self.name}", f"kcache: the read-only layer {self.name} changed "
                  f"while in use ({why}): its entries are misses from now on in this process "
                  "(a layer file is replaced by a rename, never rewritten in place)")
        return False

    # -- reading -------------------------------------------------------------------------------
    def read(self, key: str, limit: int, *, touch: bool = False, fresh: bool = False,
             recheck: bool = True) -> Blob | None:
        """The entry file of ``key`` (None when absent or the layer is not used). ``touch`` and
        ``recheck`` are ignored (nothing is written to a layer, a miss is a lookup in its
        index); ``fresh``: read and check it again even if
        found bad or checked before. Raises KnownBad (found bad before), CorruptEntry (too
        large for ``limit`` bytes, not what the index says), OSError."""
        if self.problem is not None or not self._open():
            return None
        index = self._index.entries if self._index is not None else self._old.index
        if key not in index:
            return None  # a miss: a dict lookup, no I/O
        if key in self._bad and not fresh:
            raise KnownBad("already found bad", "invalid")
        if not self._unchanged():
            return None
        limit = min(limit, self.max_entry_size)
        # A signed layer's bytes are compared with its signed index on every serve: a rewrite
        # with the mtime put back, or between the fstat above and the read, is not seen by the
        # fstat (its ctime changes, but so does a rename over the path, which must go on
        # serving), and bytes that do not match the signature are never served.
        check = fresh or key not in self._checked or (self._index is not None
                                                      and self._index.checked)
        try:
            data = (v3.read_entry(self._index, key, limit, check=check) if self._index is not None
                    else self._read_old(key, limit, check))
        except v3.Shrunk:
            self._changed("it was truncated")
            return None
        except CorruptEntry:
            self._bad.add(key)
            raise
        if check:
            self._checked.add(key)
        # Compared just now with the index's digest (a version-3 bundle; an older one's
        # BLAKE2b is its tar member's, not a checked index's): the bytes are undamaged.
        return Blob(data, (self.name, key), intact=check and self._index is not None)

    def _read_old(self, key: str, limit: int, check: bool) -> bytes:
        """An entry of a version 1 or 2 bundle (kcache.tiers.bundle.v2.BundleTier.read)."""
        offset, size, blake = self._old.index[key]
        if size > limit:
            raise CorruptEntry(f"file too large: {size} bytes (limit {limit})", "too_large")
        data = pread_exact(self._old.fd, size, offset)
        if len(data) != size:
            raise v3.Shrunk(f"truncated: {len(data)} of {size} bytes", "truncated")
        if check and not hmac.compare_digest(hashlib.blake2b(data, digest_size=32).digest(), blake):
            raise CorruptEntry("differs from the bundle's manifest", "checksum")
        return data

    def mark_bad(self, ident) -> None:
        """Remember an entry the store found bad (``ident`` from its Blob): not served again."""
        if isinstance(ident, tuple) and len(ident) == 2 and ident[0] == self.name:
            self._bad.add(ident[1])

    # -- listings ------------------------------------------------------------------------------
    def keys(self) -> list[str]:
        """The keys of the entries served (none when the layer is not used)."""
        if not self._open():
            return []
        return list(self._index.entries if self._index is not None else self._old.index)

    def entry_path(self, key: str) -> Path:
        """What names ``key``'s entry in messages and listings: ``<bundle file>#<key>``."""
        return Path(f"{self.root}#{key}")

    def scan(self, prefix: str | None = None, *, regular_only: bool = True) -> Iterator[tuple]:
        """(key, entry_path, stat) of each entry whose key starts with ``prefix``, as
        :meth:`LocalTier.scan` yields them: the stat says the entry's size and the bundle
        file's times (its entries are regular, read-only)."""
        for key in sorted(self.keys()):
            if prefix is None or key.startswith(prefix):
                yield key, self.entry_path(key), self._stat(key)

    def entry_stat(self, key: str) -> os.stat_result | None:
        """The stat :meth:`scan` gives ``key``'s entry, or None when this layer does not serve
        it (as :meth:`LocalTier.entry_stat`: nothing raised)."""
        if not self._open():
            return None
        index = self._index.entries if self._index is not None else self._old.index
        return self._stat(key) if key in index else None

    def _stat(self, key: str) -> os.stat_result:
        st = self._st
        index = self._index.entries if self._index is not None else self._old.index
        size = index[key][2] if self._index is not None else index[key][1]
        return os.stat_result((stat.S_IFREG | 0o444, st.st_ino, st.st_dev, 1, st.st_uid,
                               st.st_gid, size, st.st_mtime, st.st_mtime, st.st_mtime))

    def read_header(self, key: str, limit: int) -> tuple[dict, os.stat_result]:
        """The checked header of ``key``'s entry and its stat (:meth:`scan`). Raises
        FileNotFoundError (not served), CorruptEntry, NewerFormat, OSError."""
        blob = self.read(key, limit)
        if blob is None:
            raise FileNotFoundError(2, "not in this layer", str(self.entry_path(key)))
        return decode_header(blob.data, key, len(blob.data)), self._stat(key)

    def newer_files(self, prefix: str | None = None) -> list:
        """Entry files of a newer format: none are listed apart (such an entry is corrupt)."""
        return []

    def describe(self) -> dict:
        """What it serves, for ``kcache stats``/``ls``: ``{"path", "kind": "bundle",
        "format_version", "entries", "bytes" (the entries' sizes), "signed", "problem"}``."""
        used = self._open()
        entries = (self._index.entries if self._index is not None
                   else self._old.index if self._old is not None else {})
        size = (self._index.plain_bytes if self._index is not None
                else sum(e[1] for e in entries.values()))
        signed = (self._index or self._old).signed if used else None
        return {"path": self.name, "kind": "bundle", "format_version": self.version,
                "entries": len(entries) if used else 0, "bytes": size if used else 0,
                "signed": signed, "problem": self.problem}

    def close(self) -> None:
        """Close the descriptors (the layer is not read afterwards)."""
        self.problem = self.problem or "closed"
        self._fd = None
        if self._closer is not None:
            self._closer()  # once: a later collection closes nothing again


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _close_all(fds: set) -> None:
    for fd in fds:
        _close(fd)


def _secret(path: Path) -> bytes | None:
    """The bundles' secret (``KCACHE_SECRET``, UTF-8, blanks stripped) or None when unset or
    empty; BundleError for one shorter than MIN_SECRET bytes (the layer is then not used)."""
    text = os.environ.get(SECRET_ENV)
    if not text:
        return None
    secret = text.strip().encode("utf-8", "surrogateescape")
    if len(secret) < MIN_SECRET:
        raise BundleError(f"{SECRET_ENV} is shorter than {MIN_SECRET} bytes, so {path} cannot be "
                          "checked (accepted: a secret of at least 16 bytes, or it unset)")
    return secret

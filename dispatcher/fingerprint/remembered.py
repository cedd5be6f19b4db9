"""Code analyses remembered across processes, in the writable root (issue 36: the key on a hit
costs less).

A kernel's first fingerprint in a process analyses its code object: the digest of its content
(bytecode, constants and nested code, names, counts and flags: ``code._code_payload``) and the
global and closure chains its bytecode reads (:mod:`.code`), about a fifth of the key
(docs/keys.md, "Code analyses remembered"). The chains, half of that work, are a pure
function of that content, so they are kept under its digest: the chains of a source file's
kernels in ``<root>/v1/code/<digest of the tag and the file's name>.msgpack``, a map from a
code object's content digest to its chains, read by a later process instead of scanning the
bytecode again. The tag is kcache's version, Python's, msgpack's, and the source of the
modules that analyse (code, bytecode, model) and of this one: a change to any of them is
another tag, so another file. Exact: the digest is made afresh from the code object each time,
and the chains are what the scan gives for that content.

Trust: kept in and read from the writable root of the store the key is made for, never from a
read-only layer, a bundle or a remote, where a planted analysis could drop a callee from a key.
Read as every file of a root (a regular file passing the root's trust check, through the
folders walked afresh from the root, never through a symlink below it, at most
:data:`MAX_BYTES`, decoding bounded); a record is checked for shape when it is used, and
names only what its code loads (:func:`_loads_only`: the walk reads its attributes, and a
package's lazy ``__getattr__`` imports what it is asked for); anything wrong is a miss of the
memo (the code is analysed), never an error.

Bounded: a file is read, and written, only for a source file of which the process keyed
:data:`READ_FROM` kernels or more (one that uses a kernel or two of a module reads and writes
nothing), never for code without a file (``<string>``, ``<stdin>``); it is written at exit,
atomically, when the process made analyses it lacks (a warm process writes nothing), keeping
the records the process used and made and, of the others, the newest, up to
:func:`_kept` records; ``kcache clear`` removes the files.
"""
from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import sys
import threading
import time
import types

import msgpack

from kcache import __version__
from kcache.disk import fsio
from kcache.disk.layout import CODE, code_memo_name
from kcache.disk.paths import RootDirs
from kcache.entry.format import _unpack

from ..process import STATE
from . import code as _code

MAX_BYTES = 8 << 20  # a memo file read: 1,000 kernels' analyses take about 100 KB
READ_FROM = 4  # kernels of a source file a process keys before its memo is read or written
#: A memo file read is touched when older than this (seconds), so that its time is its last
#: use and ``prune --older-than`` removes only unused ones (a complete one is never rewritten).
TOUCH_AFTER = 24 * 3600
_MAX_CHAINS = 4096  # references of one code object
_MAX_TEXT = 1024  # characters of a name
#: The modules whose code makes an analysis or its records: their source is in the tag.
_ANALYSERS = ("kcache.dispatcher.fingerprint.code", "kcache.dispatcher.bytecode",
              "kcache.dispatcher.fingerprint.model", __name__)


def memo_of(store) -> "CodeMemo | None":
    """The :class:`CodeMemo` of ``store``'s writable root in this process (one per root, so
    the stores ``compile_for`` makes call by call share it), or None when the store has no
    trusted root (or is disabled)."""
    if store is None or not getattr(store, "trusted", False) or getattr(store, "disabled", False):
        return None
    local = getattr(store, "local", None)
    if getattr(local, "dirs", None) is None:
        return None
    root = str(local.root)
    memo = STATE.code_memos.get(root)
    if memo is None:
        memo = STATE.code_memos.setdefault(root, CodeMemo(local))
    return memo


class _File:
    """The memo of one source file: ``seen`` kernels keyed so far, ``table`` (digest -> raw
    record) once read, ``used`` digests of its records used here, ``new`` analyses made here
    that it lacks (digest -> ``_CodeInfo``)."""

    __slots__ = ("seen", "table", "used", "new")

    def __init__(self):
        self.seen, self.table, self.used, self.new = 0, None, set(), {}


class CodeMemo:
    """The remembered code analyses of one writable root, for this process. ``local``: the
    root's LocalTier, of which its path, trust check and modes are kept (not the tier: its
    folders are walked afresh at each read and write, so none is held open)."""

    def __init__(self, local):
        self._root, self._trust = local.root, local.trust
        self._dir_mode, self._file_mode = local.dir_mode, local.file_mode
        self._files: dict[str, _File] = {}
        self._lock = threading.Lock()
        # packed chains -> their tuple, checked: the kernels of a module mostly read the same
        # globals, and checking a record's chains took most of a remembered analysis's time
        self._chains: dict[bytes, tuple] = {}

    def info(self, code) -> "_code._CodeInfo":
        """The analysis of ``code`` (a kernel's code object): its content digest, made now,
        and its chains, remembered or made (and kept for the file written at exit)."""
        source = code.co_filename
        if source.startswith("<"):  # no file of its own: nothing is remembered
            return _code._code_info_once(code)
        digest = _code.digest_of(_code._code_payload(code))
        with self._lock:
            found = self._files.get(source)
            if found is None:
                found = self._files[source] = _File()
            found.seen += 1
            if found.table is None and found.seen >= READ_FROM:
                found.table = self._read(source)
                found.new = {d: c for d, c in found.new.items() if d not in found.table}
            record = found.table.get(digest) if found.table else None
        chains = self._usable(record) if record is not None else None
        if chains is not None and _loads_only(chains, code):
            found.used.add(digest)
        else:
            chains = tuple(_code._chains(code))
            found.new[digest] = chains  # packed when written: one dict store here
        return _code._CodeInfo(digest, chains)

    def _usable(self, record) -> tuple | None:
        """A record of a memo file (packed chains) as chains, or None when it is not what
        :meth:`info` writes (a damaged or hand-made file)."""
        if type(record) is not bytes:
            return None
        chains = self._chains.get(record)
        if chains is None:
            chains = _chains_of(record)
            if chains is not None and len(self._chains) < 4096:
                self._chains[record] = chains
        return chains

    def _dirs(self) -> RootDirs:
        """The root's folders, walked afresh (kcache.disk.paths: never through a symlink below
        the root, so a folder swapped for one since is not followed); closed when dropped."""
        return RootDirs(self._root, self._dir_mode)

    def _read(self, source_file: str, dirs: RootDirs | None = None) -> dict:
        """The records of ``source_file``'s memo in this root ({} when there is none or it
        cannot be used)."""
        tag = _tag()
        if tag is None:
            return {}
        dirs = dirs or self._dirs()
        name = code_memo_name(source_file, tag)
        try:
            folder = dirs.folder(CODE)
            raw, st = fsio.read_regular(name, MAX_BYTES, dir_fd=folder, trust=self._trust)
            data = _unpack(raw)
        except Exception:  # absent, refused, unreadable or not msgpack: analysed instead
            return {}
        if time.time() - st.st_mtime > TOUCH_AFTER:
            _touch(name, folder)
        if type(data) is not dict or data.get("tag") != tag or type(data.get("records")) \
                is not dict:
            return {}
        return data["records"]

    def flush(self) -> None:
        """Write the analyses made here that the root's files lack (at exit; a root that
        cannot be written is left as it is). Never raises."""
        tag = _tag()
        with self._lock:
            pending = {name: (f.seen, f.used, f.new) for name, f in self._files.items()
                       if f.new and f.seen >= READ_FROM}
            for f in self._files.values():
                f.new = {}
        if tag is None or not pending:
            return
        dirs = self._dirs()
        try:
            dirs.folder("")  # a root that exists: the memo never creates one
            folder = dirs.folder(CODE, create=True)
        except OSError:
            return
        for source_file, (seen, used, new) in pending.items():
            old = self._read(source_file, dirs)
            if all(d in old for d in new):
                continue  # another process wrote them meanwhile
            data = msgpack.packb({"tag": tag, "records": _records(old, seen, used, new)},
                                 use_bin_type=True)
            try:
                fsio.publish(folder, code_memo_name(source_file, tag), data, self._file_mode,
                             fsync=False)
            except OSError:
                return  # a full or read-only root: the memo is only a speed-up


def _touch(name: str, folder: int) -> None:
    try:  # its name in the folder's descriptor, never through a symlink swapped in since
        os.utime(name, dir_fd=folder, follow_symlinks=False)
    except OSError:  # a read-only root, a group member's file: only prune's view is older
        pass


def _kept(seen: int) -> int:
    """Records a file keeps, written by a process that keyed ``seen`` kernels of it: room for
    edits and for other programs' kernels of the module, without growing for good."""
    return max(4 * seen, 1024)


def _records(old: dict, seen: int, used: set, new: dict) -> dict:
    """What a file holds next, written by a process that keyed ``seen`` kernels of it, used
    the records ``used`` and made ``new``: the records it neither used nor made, newest
    last, then those it used, then those it made, the oldest dropped beyond :func:`_kept`."""
    made = {d: _pack_chains(c) for d, c in new.items()}
    used = {d: r for d, r in old.items() if d in used and d not in made}
    rest = [(d, r) for d, r in old.items() if d not in used and d not in made]
    room = max(_kept(seen) - len(used) - len(made), 0)
    return {**dict(rest[max(len(rest) - room, 0):] if room else []), **used, **made}


def _chains_of(packed: bytes) -> tuple | None:
    """The chains :func:`_pack_chains` packed, checked for shape; None for anything else."""
    try:
        chains = _unpack(packed)
    except Exception:
        return None
    if type(chains) is not list or len(chains) > _MAX_CHAINS:
        return None
    out = []
    for chain in chains:
        if type(chain) is not list or len(chain) != 3 or chain[0] not in ("g", "d") or \
                not _text(chain[1]) or type(chain[2]) is not list or \
                not all(_text(a) for a in chain[2]):
            return None
        out.append((chain[0], chain[1], tuple(chain[2])))
    return tuple(out)


def _loads_only(chains: tuple, code) -> bool:
    """Whether every name in ``chains`` (a record read back) is one ``code`` loads: a global
    or attribute among its names (or its nested code's), a closure variable among its free
    variables. The walk reads each chain's attributes with ``getattr``, and a package's lazy
    ``__getattr__`` (PEP 562) imports a submodule so named: a planted record naming what the
    code never reads would import a module of its choosing."""
    names = _names(code)
    for kind, name, attrs in chains:
        if name not in (names if kind == "g" else code.co_freevars) or \
                not names.issuperset(attrs):
            return False
    return True


def _names(code) -> set:
    """``co_names`` of ``code`` and of the code objects nested in it."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _text(value) -> bool:
    return type(value) is str and len(value) <= _MAX_TEXT


def _pack_chains(chains) -> bytes:
    # Packed apart: reading a file then makes three objects per record, not one per name.
    return msgpack.packb([[k, n, list(a)] for k, n, a in chains], use_bin_type=True)


def _tag() -> str | None:
    """What the records of a file are valid for (read once per process): kcache's version,
    Python's, msgpack's, and the source of the modules that analyse; None (no memo) when a
    source cannot be read (an install without ``.py`` files)."""
    tag = STATE.keys.code_memo_tag
    if tag is None:
        parts = [__version__.encode(), sys.version.encode(), repr(msgpack.version).encode()]
        try:
            for name in _ANALYSERS:
                with open(importlib.util.find_spec(name).origin, "rb") as f:
                    parts.append(f.read())
        except (OSError, AttributeError, TypeError, ImportError):
            tag = ""
        else:
            tag = hashlib.blake2b(b"\0".join(parts), digest_size=16).hexdigest()
        STATE.keys.code_memo_tag = tag
    return tag or None


def _flush_all() -> None:
    # The counters first: a process served from read-only layers alone makes its root only
    # then, and their exit handler, registered before this one, would run after it.
    from kcache.store.stats import flush_all as flush_counts
    flush_counts()
    for memo in list(STATE.code_memos.values()):
        memo.flush()


def _after_fork() -> None:
    for memo in list(STATE.code_memos.values()):
        memo._lock = threading.Lock()  # another thread of the parent may have held it


atexit.register(_flush_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)

"""Code analyses remembered across processes, in the writable root (issue 36: the key on a hit
costs less).

A kernel's first fingerprint in a process analyses its code object: the digest of its content
and the global and closure chains its bytecode reads (:mod:`.code`), a pure function of the
code object and a fifth of the key (docs/keys.md, "Code analyses remembered"). Each analysis
made is kept in ``<root>/v1/code/<digest of the source file's name>.msgpack``, a map from the
BLAKE2b-128 of ``marshal.dumps(code, 2)`` (every byte of the code object: bytecode, constants
and nested code, names, file name, line table) to the analysis, under a tag of kcache's
version, Python's and the analysing code's own content; a later process reads it instead of
analysing again. Exact: equal marshal bytes are an equal code object, and a file of another
tag is not read.

Trust: kept in and read from the writable root of the store the key is made for, never from a
read-only layer, a bundle or a remote, where a planted analysis could drop a callee from a key.
Read as every file of a root (a regular file passing the root's trust check, through the
folder's descriptor, never a symlink, at most :data:`MAX_BYTES`, decoding bounded); a record is
checked for shape when it is used; anything wrong is a miss of the memo (the code is analysed),
never an error. Read once it pays: from the :data:`READ_FROM`-th kernel of a source file a
process fingerprints (one that uses a kernel or two of a large module reads nothing). Written
at exit, atomically, when the process made analyses the file lacks; a warm process writes
nothing.
"""
from __future__ import annotations

import atexit
import hashlib
import marshal
import os
import sys
import threading
import weakref

import msgpack

from kcache import __version__
from kcache.disk import fsio
from kcache.disk.layout import CODE, code_memo_name
from kcache.entry.format import _unpack

from .. import bytecode
from ..process import STATE
from . import code as _code

MAX_BYTES = 8 << 20  # a memo file read: 1,000 kernels' analyses take about 150 KB
MAX_RECORDS = 20_000  # analyses kept per source file (the newest)
READ_FROM = 4  # the kernel of a source file, in a process, from which its memo is read
_MAX_CHAINS = 4096  # references of one code object
_MAX_TEXT = 1024  # characters of a name


def memo_of(store) -> "CodeMemo | None":
    """The :class:`CodeMemo` of ``store``'s writable root in this process, or None when the
    store has no trusted root (or is disabled)."""
    if store is None or not getattr(store, "trusted", False) or getattr(store, "disabled", False):
        return None
    local = getattr(store, "local", None)
    if getattr(local, "dirs", None) is None:
        return None
    try:
        memo = STATE.code_memos.get(store)
        if memo is None:
            memo = STATE.code_memos.setdefault(store, CodeMemo(store))
    except TypeError:  # a store that is not weak-referenceable: no memo
        return None
    return memo


class _File:
    """The memo of one source file: ``seen`` kernels so far, ``table`` (digest -> raw record)
    once read, ``new`` analyses made here that it lacks (digest -> ``_CodeInfo``)."""

    __slots__ = ("seen", "table", "new")

    def __init__(self):
        self.seen, self.table, self.new = 0, None, {}


class CodeMemo:
    """The remembered code analyses of one store's writable root, for this process."""

    def __init__(self, store):
        self._store = weakref.ref(store)
        self._files: dict[str, _File] = {}
        self._lock = threading.Lock()
        # packed chains -> their tuple, checked: the kernels of a module mostly read the same
        # globals, and checking a record's chains took most of a remembered analysis's time
        self._chains: dict[bytes, tuple] = {}

    def info(self, code) -> "_code._CodeInfo":
        """The analysis of ``code`` (a kernel's code object): remembered, or made (and kept
        for the file written at exit)."""
        digest = _digest(code)
        if digest is None:
            return _code._code_info_once(code)
        with self._lock:
            found = self._files.get(code.co_filename)
            if found is None:
                found = self._files[code.co_filename] = _File()
            found.seen += 1
            if found.table is None and found.seen >= READ_FROM:
                found.table = self._read(code.co_filename)
                found.new = {d: r for d, r in found.new.items() if d not in found.table}
            record = found.table.get(digest) if found.table else None
        info = self._usable(record) if record is not None else None
        if info is not None:
            return info
        info = _code._code_info_once(code)
        found.new[digest] = info  # packed when written: one dict store here
        return info

    def _usable(self, record) -> "_code._CodeInfo | None":
        """A record of a memo file as an analysis, or None when it is not what :meth:`info`
        writes (a damaged or hand-made file)."""
        if type(record) is not list or len(record) != 2:
            return None
        digest, packed = record
        if type(digest) is not str or len(digest) != 32 or type(packed) is not bytes:
            return None
        chains = self._chains.get(packed)
        if chains is None:
            chains = _chains_of(packed)
            if chains is None:
                return None
            if len(self._chains) < 4096:
                self._chains[packed] = chains
        return _code._CodeInfo(digest, chains)

    def _read(self, source_file: str) -> dict:
        """The records of ``source_file``'s memo in this root ({} when there is none or it
        cannot be used)."""
        store = self._store()
        if store is None:
            return {}
        try:
            folder = store.local.dirs.folder(CODE)
            raw, _st = fsio.read_regular(code_memo_name(source_file), MAX_BYTES, dir_fd=folder,
                                         trust=store.local.trust)
            data = _unpack(raw)
        except Exception:  # absent, refused, unreadable or not msgpack: analysed instead
            return {}
        if type(data) is not dict or data.get("tag") != _tag() or type(data.get("records")) \
                is not dict:
            return {}
        return data["records"]

    def flush(self) -> None:
        """Write the analyses made here that the root's files lack (at exit). Never raises."""
        store = self._store()
        with self._lock:
            pending = {name: f.new for name, f in self._files.items() if f.new}
            for f in self._files.values():
                f.new = {}
        if store is None or not pending or not store.writable or store.disabled:
            return
        try:
            # A root that exists (the memo never creates one); its bucket may come later in
            # this exit (the counters' flush, another exit handler) or now.
            store.local.dirs.folder("")
            folder = store.local.dirs.folder(CODE, create=True)
        except OSError:
            return
        for source_file, new in pending.items():
            old = self._read(source_file)
            if all(d in old for d in new):
                continue  # another process wrote them meanwhile
            records = {**old, **{d: [i.digest, _pack_chains(i.chains)] for d, i in new.items()}}
            if len(records) > MAX_RECORDS:  # the newest kept
                records = dict(list(records.items())[-MAX_RECORDS:])
            data = msgpack.packb({"tag": _tag(), "records": records}, use_bin_type=True)
            try:
                fsio.publish(folder, code_memo_name(source_file), data,
                             store.local.file_mode, fsync=False)
            except OSError:
                return  # a full or read-only root: the memo is only a speed-up


def _digest(code) -> bytes | None:
    try:  # version 2: no back-references, so equal code objects give equal bytes
        return hashlib.blake2b(marshal.dumps(code, 2), digest_size=16).digest()
    except ValueError:  # a constant marshal cannot write (code made at run time)
        return None


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


def _text(value) -> bool:
    return type(value) is str and len(value) <= _MAX_TEXT


def _pack_chains(chains) -> bytes:
    # Packed apart: reading a file then makes three objects per record, not one per name.
    return msgpack.packb([[k, n, list(a)] for k, n, a in chains], use_bin_type=True)


def _tag() -> str:
    """What the records of a file are valid for: kcache's version, Python's, and the content
    of the code that analyses (a change to it without a new version is another tag)."""
    tag = STATE.keys.code_memo_tag
    if tag is None:
        parts = [__version__, sys.version, marshal.version]
        for module in (_code, bytecode):
            for name in sorted(vars(module)):
                value = vars(module)[name]
                if getattr(value, "__module__", None) == module.__name__ and \
                        hasattr(value, "__code__"):
                    parts.append(_code._code_info_once(value.__code__).digest)
        tag = STATE.keys.code_memo_tag = hashlib.blake2b(
            repr(parts).encode(), digest_size=16).hexdigest()
    return tag


def _flush_all() -> None:
    for memo in list(STATE.code_memos.values()):
        memo.flush()


def _after_fork() -> None:
    for memo in list(STATE.code_memos.values()):
        memo._lock = threading.Lock()  # another thread of the parent may have held it


atexit.register(_flush_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)

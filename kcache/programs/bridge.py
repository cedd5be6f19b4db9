"""cuda.core programs through kcache's store: :class:`ProgramCache` and :func:`compile_program`.

``cuda.core.Program`` (NVRTC for CUDA C++, NVVM, PTX) is the CUDA Python stack's other way to
make kernels. This module serves it from the same store as numba-cuda's kernels, in two ways
(docs/programs.md):

* :class:`ProgramCache`, a ``cuda.core.utils.ProgramCacheResource``:
  ``Program(...).compile("cubin", cache=kcache.ProgramCache())``. cuda.core derives the key
  and does get, compile, set: kcache sees only an opaque key and bytes, so this way cannot be
  single-flight and keeps no symbol mapping (cuda.core refuses ``name_expressions`` with
  ``cache=``).
* :func:`compile_program`: kcache builds the ``Program`` itself, compiles once across
  processes (``Store.get_or_create``), keeps the symbol mapping of ``name_expressions``, the
  compile's log and its time.

Imported only when ``kcache.ProgramCache`` or ``kcache.compile_program`` is first used:
``import kcache`` never imports cuda. They need cuda-core >= 1.2 (its ``ProgramCacheResource``
protocol), the ``programs`` extra: numba-cuda before 0.30.2 pins cuda-core < 1.0, so it is not
in the ``cu12``/``cu13`` extras. Without it this module still imports, and making a
``ProgramCache`` or calling ``compile_program`` raises :class:`~kcache.errors.MissingExtra`,
one line naming the extra.
"""
from __future__ import annotations

import errno
import functools
import os
import re
import stat
import threading
import time
from importlib import metadata
from typing import Any

try:
    from cuda.core import ObjectCode, Program, ProgramOptions
    from cuda.core.utils import ProgramCacheResource, make_program_cache_key
except ImportError as exc:  # no cuda-core, or one before 1.2 (numba-cuda < 0.30.2 pins < 1.0)
    _UNAVAILABLE: ImportError | None = exc
    ProgramCacheResource = object  # ProgramCache stays a class; making one raises MissingExtra
else:
    _UNAVAILABLE = None

from ..entry import artifacts
from ..entry.format import Entry, entry_kind
from ..config import environment_snapshot
from ..errors import KcacheError, MissingExtra
from ..keys import make_key
from ..store import Store
from ..text import cut
from ..toolchain import program_versions
from ..warn import warn_once

__all__ = ["ProgramCache", "compile_program", "program_components", "KIND", "PRODUCER"]

#: ``components["producer"]`` and ``meta["kind"]`` of every program entry.
PRODUCER = KIND = "program"
#: Artifacts an entry may hold, as ``ObjectCode.code_type`` names them.
TARGETS = ("cubin", "ptx", "ltoir")
MAX_LOG = 64 << 10  # characters of a compile log kept in an entry's header
_LOG_KEEP = "\n\t\0"  # control characters of a log written as they are (harmless on a terminal)
MAX_SYMBOLS = 4096  # name expressions kept per entry
NO_SUCH_ENTRY = "no such entry"  # Store.remove_many's reason for a key it does not hold
_MAX_PENDING = 1024  # misses remembered per ProgramCache (to time the compile that follows)
_MAX_COMPILE = 3600.0  # seconds: a longer gap between a miss and its set is no compile


# --- cuda-core ----------------------------------------------------------------------------------

#: The cuda-core the programs extra brings (``ProgramCacheResource``, ``make_program_cache_key``).
CUDA_CORE_NEEDED = (1, 2)
EXTRA = "pip install 'kcache-cuda[programs]'"


def _require(what: str) -> None:
    """Raise :class:`MissingExtra` (one line: :func:`unavailable_line`) when cuda-core >= 1.2
    could not be imported."""
    if _UNAVAILABLE is not None:
        try:
            installed = metadata.version("cuda-core")
        except metadata.PackageNotFoundError:
            installed = None
        raise MissingExtra(unavailable_line(what, installed, _UNAVAILABLE)) from None


def unavailable_line(what: str, installed: str | None, error: BaseException) -> str:
    """Why ``what`` (e.g. "kcache.ProgramCache") cannot work with the cuda-core version
    ``installed`` (None: not installed), whose import raised ``error``: one line that names
    the extra."""
    needed = ".".join(map(str, CUDA_CORE_NEEDED))
    if installed is None:
        return f"{what} needs cuda-core >= {needed}, which is not installed; install it with: {EXTRA}"
    numbers = tuple(int(n) for n in re.findall(r"\d+", installed)[:2])
    if numbers < CUDA_CORE_NEEDED:
        return (f"{what} needs cuda-core >= {needed} and {installed} is installed (numba-cuda "
                f"before 0.30.2 requires cuda-core < 1.0); install it with: {EXTRA}")
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    return (f"{what} needs cuda-core >= {needed}: cuda-core {installed} is installed but "
            f"could not be imported ({first}); reinstall it with: {EXTRA}")


# --- keys -------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _toolchain() -> dict:
    """:func:`kcache.toolchain.program_versions`, and NVRTC's own version when no wheel names
    it (a system CUDA toolkit): what ``prune --stale`` compares."""
    out = program_versions()
    if "nvrtc" not in out:
        try:
            from cuda.bindings import nvrtc
            _err, major, minor = nvrtc.nvrtcVersion()
            out["nvrtc"] = f"{major}.{minor}"
        except Exception:  # no NVRTC: compiling fails loudly elsewhere
            out["nvrtc"] = "unavailable"
    return out


def program_components(program_key: bytes, **named: Any) -> tuple[str, dict]:
    """``(kcache key, components)`` of a program: cuda.core's key (``program_key``, the bytes
    of ``make_program_cache_key``: source, code type, options, target type, name
    expressions, extra digest, NVRTC/NVVM/linker version) inside kcache's named components,
    with ``producer`` "program", the ``toolchain`` (cuda-core, cuda-bindings, nvrtc) and the
    ``named`` ones (compile_program: code_type, target_type, arch)."""
    components = {"producer": PRODUCER, "program_key": bytes(program_key).hex(),
                  "toolchain": _toolchain(), **named}
    return make_key(components), components


@functools.lru_cache(maxsize=4096)
def _cache_key(program_key: bytes, code_type=None, target_type=None, arch=None) -> tuple[str, dict]:
    """:func:`program_components`, remembered per process (every hit asks it): the
    ``cache=`` way names no more, compile_program names the three."""
    if code_type is None:
        return program_components(program_key)
    return program_components(program_key, code_type=code_type, target_type=target_type,
                              arch=arch)


def _key_bytes(key: Any) -> bytes:
    """A ``ProgramCacheResource`` key: bytes, or str (UTF-8), as cuda.core's caches take it."""
    if isinstance(key, (bytes, bytearray)):
        return bytes(key)
    if isinstance(key, str):
        return key.encode("utf-8")
    raise TypeError(f"cache keys must be bytes or str, got {type(key).__name__}")


def _shown(program_key: bytes) -> str:
    """A program key in a message: its hex digits (cut: a caller's str key may be long)."""
    return cut(program_key.hex(), 80)


# --- entries ----------------------------------------------------------------------------------

def _meta(artifact: str, data: bytes, *, name: str | None, arch: str | None, via: str,
          symbol_mapping=None, **more: Any) -> dict:
    """An entry's meta: what is known of the program, read from the artifact when not given
    (``arch`` from the cubin's ELF header or the PTX's ``.target``; entry points)."""
    seen = artifacts.describe(artifact, data)
    meta = {"kind": KIND, "via": via, "artifact": artifact,
            "kernel": name if isinstance(name, str) and name else None,
            "arch": arch or seen["arch"], "entry_points": seen["entry_points"]}
    if symbol_mapping:
        meta["symbol_mapping"] = [[k, v] for k, v in symbol_mapping.items()]
    meta.update({k: v for k, v in more.items() if v is not None})
    return meta


def _artifact(entry: Entry) -> tuple[str, bytes] | None:
    """``(name, bytes)`` of a program entry's artifact, or None when ``entry`` is not a program
    entry naming one of its artifacts (another producer's). The artifact check is not repeated
    here: every entry the store hands out crossed ``Store.verify_bytes``, which runs the one
    validator (kcache.artifacts.problem) on every artifact of a ``kind: program`` entry (a bad
    cubin, PTX or LTO-IR is a corrupt entry: a miss, quarantined)."""
    meta = entry.meta
    name = meta.get("artifact")
    if (meta.get("kind") != KIND or not isinstance(name, str) or name not in TARGETS
            or name not in entry.artifacts):
        return None
    return name, entry.artifacts[name]


def _symbol_mapping(meta: dict) -> dict | None:
    """The ``symbol_mapping`` of ``ObjectCode`` kept in ``meta``: ``[[name expression,
    mangled name], ...]``, each str or bytes as NVRTC gave them (msgpack keeps the two apart,
    so ``"k<int>"`` and ``b"k<int>"`` stay distinct keys). None when malformed."""
    pairs = meta.get("symbol_mapping", [])
    if not isinstance(pairs, list) or len(pairs) > MAX_SYMBOLS:
        return None
    out = {}
    for pair in pairs:
        if (not isinstance(pair, list) or len(pair) != 2
                or not all(isinstance(p, (str, bytes)) for p in pair)):
            return None
        out[pair[0]] = pair[1]
    return out


def _object_code(entry: Entry, target_type: str | None = None) -> ObjectCode | None:
    """A fresh ``ObjectCode`` from a program entry (public constructors ``from_cubin`` /
    ``from_ptx`` / ``from_ltoir`` with the name and symbol mapping), or None."""
    found = _artifact(entry)
    if found is None or (target_type is not None and found[0] != target_type):
        return None
    mapping = _symbol_mapping(entry.meta)
    make = {"cubin": ObjectCode.from_cubin, "ptx": ObjectCode.from_ptx,
            "ltoir": ObjectCode.from_ltoir}.get(found[0])
    if mapping is None or make is None:
        return None
    name = entry.meta.get("kernel")
    return make(found[1], name=name if isinstance(name, str) else "", symbol_mapping=mapping)


def _value(value: Any, limit: int) -> tuple[str | None, bytes, str | None, dict | None]:
    """``(artifact kind, bytes, name, symbol mapping)`` of a value given to ProgramCache:
    bytes-like (its kind sniffed: None when the bytes show none), or an ``ObjectCode`` (its
    ``code_type``; a path-backed one is read now, as cuda.core's caches do, so the entry
    holds the bytes: a regular file, at most ``limit`` bytes). OSError when that file cannot
    be read; TypeError for a value of another type (the protocol's, as cuda.core's caches)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        return artifacts.sniff(data), data, None, None
    if isinstance(value, ObjectCode):
        code = value.code
        if isinstance(code, str):
            code = _read_code_file(code, limit)
        mapping = value.symbol_mapping
        plain = all(isinstance(x, (str, bytes)) for pair in mapping.items() for x in pair)
        return str(value.code_type), bytes(code), value.name, mapping if plain else None
    raise TypeError(f"cache values must be bytes-like or ObjectCode, got {type(value).__name__}")


def _read_code_file(path: str, limit: int) -> bytes:
    """The bytes of a path-backed ``ObjectCode``'s file: a regular file (``stat`` before the
    open, so no device or FIFO is opened; ``fstat`` after an ``O_NONBLOCK`` open, so one put
    there meanwhile cannot block the program) of at most ``limit`` bytes (the largest entry a
    read accepts: a larger one could never be served); OSError otherwise."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(errno.EINVAL, "not a regular file", path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes (max_entry_size)", path)
    return data


def _refusal(kind: str | None, data: bytes) -> str | None:
    """Why bytes of ``kind`` are not stored (kcache.artifacts checks a cubin, PTX or LTO-IR,
    all that ``Program.compile`` makes; anything else would be served unchecked), or None."""
    if kind not in TARGETS:
        return (f"{len(data)} bytes of no kind kcache checks (accepted: {', '.join(TARGETS)})"
                if kind is None else f"a {cut(kind, 40)} ObjectCode (accepted: "
                f"{', '.join(TARGETS)})")
    why = artifacts.check(kind, data)
    return None if why is None else f"bad {kind}: {why}"


# --- stores -----------------------------------------------------------------------------------

_stores: dict = {}  # root (None: the default) -> (environment snapshot, Store)
_stores_lock = threading.Lock()


def _store(root) -> Store:
    """One Store per root and settings environment (``root=None``: the root kernels use,
    settings as for kernels; ``kcache.config.environment_snapshot``: the variables, folder
    and user settings are resolved from); made again when one of them changed."""
    where, snapshot = None if root is None else os.fspath(root), environment_snapshot()
    with _stores_lock:
        known = _stores.get(where)
        if known is None or known[0] != snapshot:
            known = _stores[where] = (snapshot, Store(root))
        return known[1]


# --- the cache= way ---------------------------------------------------------------------------

class ProgramCache(ProgramCacheResource):
    """A ``cuda.core.utils.ProgramCacheResource`` backed by kcache's store:
    ``Program(src, "c++", options=opts).compile("cubin", cache=kcache.ProgramCache())``.

    ``root`` (str or path; None: the root kernels use, with the same settings). Every read
    goes through the store's verification path, counters, size cap and LRU, read-only layers,
    remote tier and trust rules. Keys are cuda.core's (bytes, or str as UTF-8) inside
    kcache's key (:func:`program_components`). Values: bytes or an ``ObjectCode``; reads
    return the stored bytes unchanged. Not single-flight: cuda.core calls get, compiles, then
    sets, and the protocol has no hook around the compile (use :func:`compile_program`).
    A broken or unreachable cache is a miss (``KeyError``), never an error. ``len()``,
    ``clear()`` and ``del`` concern the program entries of the writable root only (kernel
    entries and read-only layers are untouched). Raises ConfigError for bad settings,
    :class:`~kcache.errors.MissingExtra` without cuda-core >= 1.2."""

    def __init__(self, root=None):
        _require("kcache.ProgramCache")
        self.store = _store(root)
        self._misses: dict[bytes, float] = {}  # key -> monotonic time of its miss

    def __repr__(self) -> str:
        return f"kcache.ProgramCache({str(self.store.root)!r})"

    def __getitem__(self, key) -> bytes:
        program_key = _key_bytes(key)
        entry = self.store.get(_cache_key(program_key)[0])
        if entry is not None:
            found = _artifact(entry)
            if found is not None:
                return found[1]
            warn_once("program-entry", f"kcache: the entry of program key {_shown(program_key)} "
                      "is not a usable program entry; treated as a miss")
        if len(self._misses) >= _MAX_PENDING:
            self._misses.clear()
        self._misses[program_key] = time.monotonic()
        raise KeyError(key)

    def __setitem__(self, key, value) -> None:
        """Store ``value`` (bytes-like or ``ObjectCode``) under ``key``. Bytes that are not a
        plausible cubin, PTX or LTO-IR (kcache.artifacts) are not stored (counted in
        ``artifacts_refused``, warned once): a later lookup is a miss. Raises nothing but
        TypeError for a key or value of another type: a cache that cannot take the value
        must not fail the ``Program.compile`` that made it."""
        program_key = _key_bytes(key)
        if not isinstance(value, (bytes, bytearray, memoryview, ObjectCode)):
            raise TypeError("cache values must be bytes-like or ObjectCode, got "
                            f"{type(value).__name__}")
        try:
            self._set(program_key, value)
        except Exception as exc:  # an unreadable ObjectCode file, a store failure: not stored
            warn_once("program-put", f"kcache: program key {_shown(program_key)} not stored "
                      f"({type(exc).__name__}: {cut(exc)})")

    def _set(self, program_key: bytes, value) -> None:
        artifact, data, name, mapping = _value(value, self.store.settings.max_entry_size)
        # cuda.core compiles between its miss and this set: that time is the compile's.
        began = self._misses.pop(program_key, None)
        seconds = None if began is None else time.monotonic() - began
        if seconds is not None and seconds > _MAX_COMPILE:
            seconds = None  # a set long after its miss (by hand, not cuda.core): not a compile
        if seconds is not None:
            self.store.record(compiles=1, compile_seconds=seconds)
        why = _refusal(artifact, data)
        if why is not None:
            self.store.record(artifacts_refused=1)
            warn_once("program-refused", f"kcache: program key {_shown(program_key)} not "
                      f"stored: {why}; later lookups of it are misses")
            return
        meta = _meta(artifact, data, name=name, arch=None, via="ProgramCache",
                     symbol_mapping=mapping, compile_seconds=seconds)
        kkey, components = _cache_key(program_key)
        try:
            self.store.put(kkey, Entry({artifact: data}, meta), components=components)
        except (TypeError, ValueError) as exc:  # e.g. over the header's limits: not stored
            warn_once("program-put", f"kcache: program key {_shown(program_key)} not stored "
                      f"({cut(exc)})")

    def __delitem__(self, key) -> None:
        program_key = _key_bytes(key)
        report = self.store.remove_many([_cache_key(program_key)[0]])
        if report.failed and report.failed[0].reason == NO_SUCH_ENTRY:
            raise KeyError(key)
        if report.failed:  # busy past the lock timeout, read-only root, ...
            raise KcacheError(f"cannot remove the entry of program key {_shown(program_key)}: "
                              f"{report.failed[0].reason}")

    def _keys(self) -> list[str]:
        return [info.key for info in self.store.entries(readonly=False)
                if entry_kind(info.components) == KIND]

    def __len__(self) -> int:
        """Program entries in the writable root (headers read, kernels not counted)."""
        return len(self._keys())

    def clear(self):
        """Remove every program entry of the writable root; kernel entries stay. Returns the
        store's RemoveReport (an int: how many removed; ``failed`` says what stayed, why)."""
        return self.store.remove_many(self._keys())

    def close(self) -> None:
        """Write this process's counters (the store keeps nothing else open)."""
        self.store.flush()


# --- the way with everything ------------------------------------------------------------------

def compile_program(code, code_type: str, options: ProgramOptions | None, target_type: str,
                    name_expressions=(), extra_digest: bytes | None = None, root=None, *,
                    logs=None) -> ObjectCode:
    """``Program(code, code_type, options).compile(target_type, name_expressions)``, served
    from kcache's store and compiled once across processes and machines.

    ``code``: str (bytes for NVVM); ``code_type``: "c++", "ptx" or "nvvm"; ``options``: a
    ``cuda.core.ProgramOptions`` (its ``arch`` set; None: ``ProgramOptions()``, which asks the
    current device); ``target_type``: "cubin", "ptx" or "ltoir"; ``name_expressions``:
    str or bytes (C++ templates: ``get_kernel("k<int>")`` works on a hit); ``extra_digest``:
    bytes that fingerprint what the key cannot see (included headers, PCH, libdevice), as
    cuda.core's ``make_program_cache_key`` takes it; ``root``: as :class:`ProgramCache`;
    ``logs``: an object with ``write`` that receives the compile's log (on a hit: the log of
    the compile that made the entry).

    N processes asking for one program compile it once (``Store.get_or_create``: the key's
    lock, and the Redis lease across machines); the others load its entry. Returns a fresh
    ``ObjectCode``. Raises what cuda.core raises for the inputs (``ValueError`` from
    ``make_program_cache_key`` for options it cannot key, e.g. ``include_path`` without
    ``extra_digest``; NVRTC's error for bad source); a bad setting, or a broken, full or
    unreachable cache, only costs a compile (warned once). Without cuda-core >= 1.2:
    :class:`~kcache.errors.MissingExtra`."""
    _require("kcache.compile_program")
    options = options if options is not None else ProgramOptions()
    ct, tt = str(code_type).lower(), str(target_type).lower()
    names = tuple(name_expressions)
    program_key = make_program_cache_key(code=code, code_type=ct, options=options,
                                         target_type=tt, name_expressions=names,
                                         extra_digest=extra_digest)
    key, components = _cache_key(program_key, ct, tt, getattr(options, "arch", None))
    try:
        store = _store(root)
    except Exception as exc:  # a bad setting or an unusable root: compile uncached
        warn_once("program-store", f"kcache: cannot open the cache ({cut(exc)}); programs are "
                  "compiled uncached")
        obj, log, _seconds = _compile(code, ct, options, tt, names)
        _write_log(logs, log)
        return obj
    built: dict = {}

    def create() -> Entry:
        try:
            built["object"], built["log"], seconds = _compile(code, ct, options, tt, names)
        except Exception as exc:
            raise _CompileError(exc) from exc
        try:
            store.record(compiles=1, compile_seconds=seconds)
        except Exception:  # a counter that cannot be written is not the compile's failure
            pass
        obj = built["object"]
        return Entry({tt: bytes(obj.code)},
                     _meta(tt, bytes(obj.code), name=obj.name, arch=components["arch"],
                           via="compile_program", symbol_mapping=obj.symbol_mapping,
                           code_type=ct, compile_seconds=seconds, log=built["log"][:MAX_LOG]))

    try:
        entry, _hit = store.get_or_create(key, create, components=components)
    except _CompileError as failed:
        raise failed.args[0] from None  # the user's error (bad source), as cuda.core raises it
    except Exception as exc:  # lock timeout, unusable store: the program still compiles
        warn_once("program-store-error", f"kcache: cache store failed ({type(exc).__name__}: "
                  f"{cut(exc)}); programs still compile")
        entry = None
    if "object" in built:
        _write_log(logs, built["log"])
        return built["object"]
    obj = _object_code(entry, tt) if entry is not None else None
    if obj is None:
        if entry is not None:
            warn_once("program-entry", f"kcache: the entry {key} is not a usable program "
                      "entry; compiled again")
        obj, log, _seconds = _compile(code, ct, options, tt, names)
        _write_log(logs, log)
        return obj
    # The entry's log may come from a bundle or another machine: escaped and bounded by the
    # cap it was written under; kept are lines, tabs and the NUL that ends NVRTC's log (as
    # cuda.core hands it over: a hit writes what the compile wrote).
    recorded = entry.meta.get("log")
    _write_log(logs, cut(recorded, MAX_LOG, keep=_LOG_KEEP) if isinstance(recorded, str) else None)
    return obj


class _CompileError(Exception):
    """Wraps what the compile raised, so that it is told apart from a store failure."""


def _compile(code, code_type: str, options, target_type: str, names: tuple):
    """``(ObjectCode, log text, seconds)`` of one NVRTC/NVVM/linker compile."""
    import io
    log = io.StringIO()
    start = time.perf_counter()
    obj = Program(code, code_type, options=options).compile(target_type, name_expressions=names,
                                                              logs=log)
    return obj, log.getvalue(), time.perf_counter() - start


def _write_log(logs, text) -> None:
    if logs is not None and isinstance(text, str) and text:
        logs.write(text)

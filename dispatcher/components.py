"""The components of a kernel's key (docs/design.md "Kernel entries", docs/keys.md).

``kernel_components`` gathers everything that decides the cubin numba-cuda produces for one
kernel and signature: source fingerprint (with line tables when line information is
compiled in), signature, target (cc with its arch suffix and the output kind), toolchain
versions, code-changing numba configuration, code-changing target options, ``link=``
contents, launch config, the user's ``cache_key`` and, in a process with user extension
registrations (``@overload`` of operators, ``lower_builtin``, ...), their digests
(``extensions``, dispatcher/extensions.py).  ``kcache.make_key(components)`` turns
it into the key; the named components let explain say which one changed.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from operator import is_ as _is

import msgpack

from kcache.arch import arch_name
from kcache.keys import CanonicalMap, canonical_map, packed_map
from kcache.text import cut

from .extensions import extensions_component
from .fingerprint import (Uncacheable, describe, digest_of, fingerprint, line_digest,
                          named_by_library, value_digest)
from .numba_config import (IN_KEY, IN_KEY_WHEN_CHANGED, WARNINGS_IN_KEY, bypass_reason,
                           config_component, settings_values)
from .process import STATE
from .toolchain_versions import toolchain_components

__all__ = [
    "COMPONENTS_FORMAT",
    "LinkUnread",
    "Uncacheable",
    "arch_name",
    "kernel_components",
    "line_digest",
    "toolchain_components",
]

COMPONENTS_FORMAT = 2  # 2: "config" component, line tables of device functions, kcache.arch

# Target options that are not code: handled as their own component or not a compile input.
_NOT_OPTIONS = frozenset({"link"})
_BOOL_OPTIONS = frozenset({"debug", "lineinfo", "opt", "fastmath", "forceinline", "device", "lto"})


def kernel_components(
    py_func,
    *,
    frontend,
    signature: str,
    cc: tuple,
    output: str = "cubin",
    targetoptions: dict,
    launch_config=None,
    cache_key: str | None = None,
    toolchain: dict | None = None,
    config: dict | None = None,
    code_memo=None,
) -> dict:
    """The components dict of one kernel overload (layout in docs/design.md).

    ``py_func``: the kernel's Python function (or its dispatcher); ``frontend``: the
    ``frontends.base.Frontend`` compiling it (its configuration module and extension
    registries are read); ``signature``: numba's
    spelling of the argument types, e.g. ``"(array(float32, 1d, C),)"``; ``cc``: compute
    capability in any ``kcache.arch`` form (``(9, 0)``, ``(9, 0, "a")``, ``"sm_90a"``, ``90``;
    9.0 and 9.0a give the same key, as numba-cuda compiles both as ``sm_90a``); ``output``:
    ``"cubin"``, ``"ptx"`` or ``"ltoir"``; ``targetoptions``: the dispatcher's target options (numba-cuda's
    ``CUDADispatcher.targetoptions``), every key is kept; ``launch_config``: None or
    ``(grid, block, sharedmem)`` for launch-config-sensitive kernels; ``cache_key``: the user's
    string; ``toolchain``: defaults to :func:`toolchain_components`; ``config``: defaults to
    ``numba_config.config_component()`` (the code-changing numba-cuda settings of this process,
    NRT among them); ``code_memo``: as ``fingerprint``'s.

    Raises :class:`Uncacheable` (captured device array, unreadable ``link=`` file,
    ``LinkableCode`` with setup/teardown callbacks), ``ValueError`` for a bad ``cc`` or
    ``output``, ``TypeError`` for a ``cache_key`` that is not a string.
    """
    if output not in ("cubin", "ptx", "ltoir"):
        raise ValueError(f"output must be 'cubin', 'ptx' or 'ltoir', not {output!r}")
    if cache_key is not None and not isinstance(cache_key, str):
        raise TypeError(f"cache_key must be a string or None, not {type(cache_key).__name__}")
    fn = getattr(py_func, "py_func", py_func)
    registries = frontend.registries()
    fp = fingerprint(fn, registries, code_memo=code_memo)
    options = targetoptions or {}
    source = dict(fp.parts)
    if options.get("debug") or options.get("lineinfo"):
        source.update(line_parts(fn, fp))
    extensions, extensions_opaque = extensions_component(registries)
    config_module = frontend.numba_config()
    components = {
        "format": COMPONENTS_FORMAT,
        "kernel": f"{fn.__module__}:{fn.__qualname__}",
        "source": source,
        "opaque": list(fp.opaque) + extensions_opaque if extensions_opaque else list(fp.opaque),
        "signature": str(signature),
        "target": _target(cc, output),
        "toolchain": _shared("toolchain", toolchain if toolchain is not None
                             else toolchain_components()),
        "config": _shared("config", config) if config is not None else _config(config_module),
        "options": _options(targetoptions or {}, registries),
        "link": link_digests(options["link"], _search_paths(config_module))
        if options.get("link") else {},
        "launch_config": _plain(launch_config),
        "cache_key": cache_key,
    }
    if frontend.name != "numba-cuda":
        # Another front-end's kernels never share a key with numba-cuda's (whose keys, made
        # before there was a second front-end, have no such component).
        components["frontend"] = frontend.name
    if extensions is not None:
        # Only when the process has user extension registrations: keys of every other process
        # are the ones made before this component existed (docs/keys.md, "Extensions").
        components["extensions"] = extensions
    return components


def _shared(name: str, value: dict) -> dict:
    """``value`` as a read-only :class:`~kcache.keys.CanonicalMap`, one per distinct value in
    the process: the target, toolchain, configuration and options components are the same
    for most kernels, and putting them in canonical form took a third of ``make_key``'s time.
    Remembered by their msgpack bytes, which tell ``True`` from ``1`` (equality does not). A
    value msgpack cannot encode is returned as a plain copy (``make_key`` then says why)."""
    if type(value) is CanonicalMap:
        return value
    try:
        memo = (name, msgpack.packb(value, use_bin_type=True))
    except (TypeError, ValueError, OverflowError):
        return dict(value)
    known = STATE.keys.shared  # (name, msgpack bytes of a value) -> its CanonicalMap
    shared = known.get(memo)
    if shared is None:
        shared = canonical_map(value, name)
        if len(known) < 1024:
            known[memo] = shared
            packed_map(shared)  # its msgpack bytes now (made once): what every key packs
    return shared


# The components most kernels share, remembered by what they are made from, so that a key
# neither encodes nor packs them again (each step of the fast path is C: packb, map, dict
# lookups). A value that cannot serve as a memo key goes the long way.
def _remembered(memo, make):
    known = STATE.keys.by_input  # ("target" | "config" | "options", its inputs) -> CanonicalMap
    shared = known.get(memo)
    if shared is None:
        shared = make()
        if len(known) < 1024:
            known[memo] = shared
    return shared


def _target(cc, output: str):
    make = lambda: _shared("target", {"cc": arch_name(cc), "output": output})  # noqa: E731
    try:
        return _remembered(("target", cc, type(cc), output), make)
    except TypeError:  # an unhashable cc, e.g. a list
        return make()


_CONFIG_NAMES = tuple(IN_KEY) + tuple(WARNINGS_IN_KEY) + tuple(IN_KEY_WHEN_CHANGED)


def _config(config):
    """The ``config`` component of ``config`` (the front-end's configuration module)."""
    values = settings_values(config, _CONFIG_NAMES)
    last = STATE.keys.last_config  # (config module, its values, their component)
    # The usual lookup: the very same objects as the last one read (a setting changed is
    # another object), compared by identity in C instead of hashing them all again.
    if last[0] is config and len(values) == len(last[1]) and all(map(_is, values, last[1])):
        return last[2]
    make = lambda: _shared("config", config_component(config))  # noqa: E731
    try:
        shared = _remembered(("config", id(config), values, tuple(map(type, values))), make)
    except TypeError:  # a value that is not hashable
        return make()
    last[:] = [config, values, shared]
    return shared


def _options(targetoptions: dict, registries):
    # msgpack bytes tell True from 1 and a str from bytes, as the encoding does; options
    # msgpack cannot pack (extensions, a user's inline cost model, sets) go the long way.
    make = lambda: _shared("options", encode_options(dict(targetoptions), registries))  # noqa: E731
    try:
        raw = msgpack.packb(targetoptions, use_bin_type=True, default=_by_library_name)
    except (TypeError, ValueError, OverflowError):
        return make()
    return _remembered(("options", raw), make)


def _by_library_name(value):
    """msgpack's ``default`` for :func:`_options`' memo: a library's object that the key
    names by module and qualname alone (numba-cuda-mlir's default ``inline`` cost model, in
    every kernel's options: docs/keys.md) as that name, in an ext type no plain value packs
    to; TypeError for anything else (its encoding reads its content). Remembered per
    object (held, so its id is not reused), as the fingerprint's ``named`` memo is: every
    key packs the same cost model."""
    known = STATE.keys.library_names
    found = known.get(id(value))
    if found is not None and found[0] is value:
        return found[1]
    if named_by_library(value):
        name = msgpack.ExtType(1, describe(value).encode("utf-8", "surrogatepass"))
        if len(known) < 256:
            known[id(value)] = (value, name)
        return name
    raise TypeError(f"{type(value).__name__} is encoded by its content")


def prepare_shared(frontend, targetoptions: dict | None = None) -> None:
    """Put this process's toolchain and configuration components (and ``targetoptions``'
    encoding, if given) in canonical form now, as the first kernel call would (the results
    are remembered by value, so a later change is still seen); ``frontend``: the
    ``frontends.base.Frontend`` of the kernels."""
    toolchain_shared()
    config = frontend.numba_config()
    _config(config)
    bypass_reason(config)  # numba's settings read once: a lookup compares them with these
    # The first read of the extension registries (numba-cuda's own ~800-1,900 registrations,
    # a few ms) is done here too; a key then reads only what was registered since.
    extensions_component(frontend.registries())
    if targetoptions is not None:
        _options(targetoptions, frontend.registries())


# --- options --------------------------------------------------------------------------------


def encode_options(targetoptions: dict, registries) -> dict:
    """Target options as plain msgpack values, every key but ``link`` kept.

    Simple values (None, bool, int, float, str and tuples of them) stay readable so explain
    can print ``option fastmath False -> True``; ``extensions`` becomes the type identity
    (module.qualname) of each extension; anything else (e.g. an ``inline`` cost-model
    function) becomes the digest of its canonical encoding (``registries``: as
    ``fingerprint``'s).
    """
    out = {}
    for name in sorted(targetoptions):
        if name in _NOT_OPTIONS:
            continue
        value = targetoptions[name]
        if name == "extensions":
            out[name] = [f"{type(e).__module__}.{type(e).__qualname__}" for e in value or ()]
            continue
        if name in _BOOL_OPTIONS and isinstance(value, int):
            value = bool(value)  # numba's config gives debug=0 where the decorator gives False
        elif isinstance(value, (set, frozenset)):
            value = sorted(value, key=repr)  # fastmath={"nsz", "arcp"}
        plain = _plain(value)
        out[name] = plain if plain is not _UNPLAIN else _value_digest(value, name, registries)
    return out


_UNPLAIN = object()


def _plain(value):
    """value as msgpack-ready None/bool/int/float/str/list, or _UNPLAIN."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        items = [_plain(v) for v in value]
        return _UNPLAIN if any(v is _UNPLAIN for v in items) else items
    return _UNPLAIN


def _value_digest(value, name, registries) -> str:
    # The fingerprint's value encoding: functions by content, types and classes by name.
    return "digest:" + value_digest(value, f"option {name}", registries=registries)


# --- link= ----------------------------------------------------------------------------------


def link_digests(link, search_paths: str = "") -> dict:
    """``{name: content digest}`` for each ``link=`` item, in order. ``search_paths``: the
    folders NVRTC also searches for a ``.cu`` source's headers (":"-separated: numba-cuda's
    ``CUDA_NVRTC_EXTRA_SEARCH_PATHS``).

    A path counts by basename + contents (directories never do); a ``LinkableCode``
    (duck-typed: ``data``, ``kind``, ``name``) by name, kind, nrt flag and data.  Two items
    with the same name get ``name#2``, ``name#3``.  Files are read as :class:`_Reader` says
    (regular files only, bounded one by one and in all).  Raises :class:`LinkUnread` for a
    file that is not read (missing, not a regular file, too large), :class:`Uncacheable`
    for a ``LinkableCode`` with setup/teardown callbacks (they run Python at module load,
    which a cached entry cannot replay) or an item of another type.
    """
    if isinstance(link, (str, os.PathLike)) or hasattr(link, "kind"):
        link = [link]
    reader = _Reader()
    out: dict = {}
    for item in link:
        name, digest = _link_item(item, reader, search_paths)
        unique, n = name, 1
        while unique in out:
            n += 1
            unique = f"{name}#{n}"
        out[unique] = digest
    return out


class LinkUnread(Uncacheable):
    """A ``link=`` file, or a header a linked CUDA C++ source includes, that kcache does not
    read (missing, not a regular file, over the bounds of :class:`_Reader`): the kernel
    runs uncached (warned once per kernel: kcache.dispatcher)."""


def _search_paths(config) -> str:
    return str(getattr(config, "CUDA_NVRTC_EXTRA_SEARCH_PATHS", "") or "")


def _link_item(item, reader: "_Reader", search_paths: str):
    if isinstance(item, (str, os.PathLike)):
        path = os.fspath(item)
        source = path.endswith(".cu")
        digest, includes = reader.read(path, f"link file {_shown(path)}", scan=source)
        headers = (_included(includes, os.path.dirname(path), path, reader, search_paths)
                   if source else [])
        if headers:  # CUDA C++ that NVRTC compiles: its headers count too (keys without any
            digest = digest_of([digest, headers])  # stay those of before)
        return os.path.basename(path), digest
    if hasattr(item, "data") and hasattr(item, "kind"):
        if getattr(item, "setup_callback", None) or getattr(item, "teardown_callback", None):
            raise Uncacheable(
                f"link= object {_shown(getattr(item, 'name', '?'))} has setup/teardown callbacks"
            )
        data = item.data
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise Uncacheable(
                f"link= object {_shown(getattr(item, 'name', '?'))} holds "
                f"{type(data).__name__}, not bytes or str"
            )
        parts = [str(item.kind), bool(getattr(item, "nrt", False)),
                 hashlib.blake2b(bytes(data), digest_size=32).digest()]
        name = str(getattr(item, "name", "<unnamed>"))
        headers = (_included(_includes(bytes(data)), None, name, reader, search_paths)
                   if str(item.kind) == "cu" else [])
        if headers:  # numba-cuda's CUSource: NVRTC resolves its headers too
            parts.append(headers)
        return name, digest_of(parts)
    raise Uncacheable(
        f"link= item of type {type(item).__name__} is neither a path nor a LinkableCode"
    )


def _shown(name) -> str:
    """A path or name in a reason: quoted, escaped, cut (kcache.text.cut)."""
    return cut(repr(os.fspath(name) if isinstance(name, os.PathLike) else name))


#: ``#include "name"`` / ``#include <name>`` at the start of a line (spaces allowed).
_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.MULTILINE)
_MAX_HEADERS = 1024  # header files followed from one linked source
_MAX_HEADER_BYTES = 16 << 20  # bytes read of one link= file or header
_MAX_LINK_BYTES = 64 << 20  # bytes read of all the link= files and headers of one kernel
_MAX_INCLUDES = 16 * _MAX_HEADERS  # #include lines looked up for one kernel
_CHUNK = 1 << 20  # bytes read and digested at a time


def _includes(text) -> list:
    """The ``(kind, name)`` (bytes) of each distinct ``#include`` line of ``text`` (bytes or
    bytearray), in order."""
    return list(dict.fromkeys((bytes(kind), bytes(name))
                              for kind, name in _INCLUDE.findall(text)))


class _Reader:
    """Reads the ``link=`` files of one kernel and the headers they include, each a regular
    file (checked with ``stat`` before it is opened, so no device or FIFO is opened, and
    with ``fstat`` after an ``O_NONBLOCK`` open, so one swapped in meanwhile cannot block),
    one at a time, digested as read (only a CUDA C++ file is held, to find its
    ``#include`` lines): at most _MAX_HEADER_BYTES each, _MAX_LINK_BYTES in all. A file
    read once (same device, inode, size and times) is not read again: N links to one
    header cost one read. Over a bound: :class:`LinkUnread`."""

    def __init__(self):
        self.total = 0  # bytes read so far
        self.lookups = 0  # #include lines looked up so far
        self._known: dict = {}  # file identity -> (digest, includes)

    def read(self, path: str, what: str, scan: bool) -> tuple[str, list]:
        """``(blake2b-128 hex digest, includes)`` of regular file ``path`` (``includes``:
        its ``#include`` lines when ``scan``, else []). ``what`` names it in a reason."""
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise LinkUnread(f"{what} is not a regular file")
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as exc:
            raise LinkUnread(f"{what} cannot be read: {cut(exc.strerror or exc)}") from exc
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # swapped for a FIFO or device after the stat
                raise LinkUnread(f"{what} is not a regular file")
            ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            known = self._known.get(ident)
            if known is None or (scan and not known[2]):
                try:  # a "regular" file whose read fails (/proc/self/mem: EIO) or would block
                    digest, held = self._digest(f, st.st_size, what, scan)
                except OSError as exc:
                    raise LinkUnread(f"{what} cannot be read: "
                                     f"{cut(exc.strerror or exc)}") from exc
                known = self._known[ident] = (digest, _includes(held) if scan else [], scan)
        return known[0], known[1] if scan else []

    def _digest(self, f, size: int, what: str, scan: bool) -> tuple[str, bytearray]:
        self._check(size, self.total + size, what)  # the size the file states, unread
        h, held, n = hashlib.blake2b(digest_size=16), bytearray(), 0
        while (chunk := f.read(min(_CHUNK, _MAX_HEADER_BYTES + 1 - n))) != b"":
            if chunk is None:  # O_NONBLOCK: a /proc file that would block (kmsg), not its end
                raise BlockingIOError("a read would block")
            n += len(chunk)
            self.total += len(chunk)
            self._check(n, self.total, what)  # what was read: a file that grows meanwhile
            h.update(chunk)
            if scan:
                held += chunk
        return h.hexdigest(), held

    @staticmethod
    def _check(size: int, total: int, what: str) -> None:
        if size > _MAX_HEADER_BYTES:
            raise LinkUnread(f"{what} is larger than {_MAX_HEADER_BYTES >> 20} MiB")
        if total > _MAX_LINK_BYTES:
            raise LinkUnread(f"{what} would make the link files and headers read for this "
                             f"kernel more than {_MAX_LINK_BYTES >> 20} MiB")


def _included(includes: list, own_dir: str | None, what: str, reader: _Reader,
              search_paths: str) -> list:
    """``[[name as written, digest], ...]`` of the headers a linked CUDA C++ source includes
    (``includes``: its ``#include`` lines, :func:`_includes`), transitively, that are not the
    toolkit's: NVRTC (numba-cuda's ``nvrtc.compile``) finds a quoted one in the working
    directory (or beside the including file), and either kind in ``search_paths`` (numba-cuda's
    ``CUDA_NVRTC_EXTRA_SEARCH_PATHS``) or at an absolute path; each candidate found there is
    digested, so an edited header is another key. One found nowhere (or a folder) is the
    toolkit's or numba-cuda's (their versions are in the key), or is not read at all (an
    ``#include`` in ``#if 0`` or a comment; a missing one fails the compile). Nested headers
    are looked for beside the path they were found at, as NVRTC does, not beside a
    symlink's target. Headers are read by ``reader`` (one at a time, bounded; a FIFO or
    device there is not read). Raises :class:`LinkUnread` past _MAX_HEADERS headers or
    _MAX_INCLUDES ``#include`` lines, or for a header ``reader`` refuses."""
    extra = [p for p in search_paths.split(":") if p]
    out, seen, todo = [], set(), [(includes, own_dir)]
    while todo:  # (include lines, folder): never a file's bytes, read one at a time
        lines, folder = todo.pop()
        for kind, raw in lines:
            reader.lookups += 1
            if reader.lookups > _MAX_INCLUDES:
                raise LinkUnread(f"link source {_shown(what)} and its headers have more than "
                                 f"{_MAX_INCLUDES} #include lines")
            name = raw.decode("utf-8", "replace").strip()
            if os.path.isabs(name):
                dirs = [""]
            else:
                dirs = ([os.getcwd()] + ([folder] if folder else []) if kind == b'"' else [])
                dirs += extra
            for path in {os.path.abspath(os.path.join(d, name)) for d in dirs}:
                if (path, folder) in seen or not _exists(path):
                    continue
                if len(seen) >= _MAX_HEADERS:
                    raise LinkUnread(f"link source {_shown(what)} includes more than "
                                     f"{_MAX_HEADERS} headers")
                seen.add((path, folder))
                digest, nested = reader.read(
                    path, f"header {_shown(path)} of link source {_shown(what)}", scan=True)
                out.append([name, digest])
                todo.append((nested, os.path.dirname(path)))
    return sorted(out)


def _exists(path: str) -> bool:
    """Whether NVRTC would open ``path`` as a header: something there that is not a folder
    (a FIFO or device counts: it is refused, never skipped as if absent)."""
    try:
        return not stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


# --- source line numbers (debug / lineinfo kernels only) -----------------------------------


def line_parts(fn, fp) -> dict:
    """Source parts for a kernel compiled with ``debug`` or ``lineinfo``: ``lines`` (the
    kernel's own line table, :func:`line_digest`) and ``lines:<module>.<qualname>`` for each
    function reached that numba-cuda compiles with line information too (``fp.lines``): the
    PTX ``.loc``/``.file`` lines of all of them are in the kernel's code. A function compiled
    without line information adds none (numba-cuda emits none for it), and a kernel without
    it has no ``.loc`` lines at all, so neither is here then."""
    parts = {"lines": line_digest(fn)}
    for name, digests in fp.lines.items():
        parts[f"lines:{name}"] = digests[0] if len(digests) == 1 else digest_of(list(digests))
    return parts


# --- toolchain ------------------------------------------------------------------------------

def toolchain_shared(memo_path=None):
    """:func:`toolchain_components` as the read-only canonical map every key of the process
    shares (made once per process's versions)."""
    memo = STATE.keys
    if memo.toolchain is None or memo.toolchain_map[0] is not memo.toolchain:
        versions = toolchain_components(memo_path)
        memo.toolchain_map = (memo.toolchain, _shared("toolchain", versions))
    return memo.toolchain_map[1]

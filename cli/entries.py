"""Entries as the commands see them: sanitised header fields, key prefixes, JSON records.

``Store.entries``/``find`` give ``EntryInfo`` objects whose fields are what the file's header
decoded to. :class:`EntryView` reads each field once into a type the commands can rely on
(str or None, int >= 0, finite float or None), so that no header value can crash a listing,
a sort, a filter or a JSON document.
"""
from __future__ import annotations

import fnmatch
import os
import re
from typing import Any, Iterable

from kcache.entry.artifacts import MAX_ENTRY_POINTS
from kcache.cli.cache import layer_kind
from kcache.cli.errors import NotFound, UsageError
from kcache.cli.fmt import iso
from kcache.cli.problems import SHORT_KEY, is_newer, newer_format_files, problem_of
from kcache.cli.text import clip
from kcache.cli.values import count, number, text
from kcache.entry.format import entry_kind
from kcache.entry.shortsig import short_signature

_HEX = re.compile(r"^[0-9a-f]+$")


class EntryView:
    """The fields of one ``EntryInfo`` (``info``) in sane types: ``kernel``, ``signature``,
    ``arch`` str or None; ``file_size``, ``hits`` int >= 0; ``created``, ``last_used``,
    ``compile_seconds`` finite float or None (unix seconds / seconds); ``problem`` the CLI's
    wording of why its header cannot be read, or None."""

    __slots__ = ("info", "key", "kernel", "signature", "arch", "file_size", "hits", "created",
                 "last_used", "compile_seconds", "problem", "kind", "entry_points", "frontend")

    def __init__(self, info) -> None:
        self.info = info
        self.key = str(info.key)
        self.kernel = text(info.kernel)
        self.signature = text(info.signature)
        self.arch = text(info.arch)
        self.file_size = count(info.file_size)
        self.hits = count(info.hits)
        self.created = number(info.created)
        self.last_used = number(info.last_used)
        self.compile_seconds = number(info.compile_seconds)
        self.problem = problem_of(info)
        # "kernel" or "program" (a cuda.core program: kcache.programs); for a program,
        # ``kernel`` is its name (ProgramOptions.name) and ``entry_points`` its kernels.
        self.kind = entry_kind(info.components)
        self.entry_points = _entry_points(info.meta) if self.kind == "program" else []
        # The compiler front-end of a kernel entry: "numba-cuda" (entries without the field,
        # written before there was another) or "numba-cuda-mlir"; None for a program or an
        # unreadable entry.
        self.frontend = (None if self.kind == "program" or self.problem
                         else _frontend(info.meta))

    @property
    def short_key(self) -> str:
        return self.key[:SHORT_KEY]

    @property
    def readonly(self) -> bool:
        return bool(self.info.readonly)

    def kernel_cell(self) -> str | None:
        """The kernel for tables: ``(unreadable: <problem>)`` for a broken entry."""
        return f"(unreadable: {self.problem})" if self.problem else self.kernel

    def signature_cell(self, short: bool = False) -> str | None:
        """The signature for tables (``short``: in numba's short form, ``float32[::1]``,
        :func:`kcache.entry.shortsig.short_signature`); a program's entry points,
        comma-separated."""
        if self.kind == "program":
            return ", ".join(self.entry_points) or None
        return self.short_signature if short else self.signature

    @property
    def short_signature(self) -> str | None:
        """The signature in numba's short form (``(float32[::1], int32)``); None for none."""
        return short_signature(self.signature)


def _frontend(meta: Any) -> str | None:
    """A kernel entry's ``meta["frontend"]`` as text, "numba-cuda" when absent."""
    value = meta.get("frontend", "numba-cuda") if isinstance(meta, dict) else "numba-cuda"
    return text(value)


def _entry_points(meta: Any) -> list[str]:
    """A program entry's ``meta["entry_points"]`` as a list of text (odd values dropped)."""
    points = meta.get("entry_points") if isinstance(meta, dict) else None
    if not isinstance(points, list):
        return []
    return [t for t in (text(p) for p in points[:MAX_ENTRY_POINTS]) if t]


def shows_frontend(views) -> bool:
    """True when a kernel entry of ``views`` was compiled by another front-end than
    numba-cuda (a cache of numba-cuda kernels only lists as it always did)."""
    return any(getattr(v, "frontend", None) not in (None, "numba-cuda") for v in views)


def plain_table(names: tuple, plain, views) -> dict:
    """``print_table``'s ``names`` and ``plain`` for piped rows of ``views``, with the
    ``frontend`` field last when :func:`shows_frontend`, then the ``layer`` field when a row
    comes from a read-only layer (the columns before them stay where they were)."""
    extra = []
    if shows_frontend(views):
        extra.append(("frontend", lambda v: v.frontend or ""))
    if any(getattr(v, "readonly", False) for v in views):
        # a key in the writable root and in a layer is two rows: this tells them apart
        extra.append(("layer", lambda v: str(v.info.root) if v.readonly else ""))
    if not extra:
        return {"names": names, "plain": plain}
    return {"names": (*names, *(name for name, _ in extra)),
            "plain": lambda v: (*plain(v), *(cell(v) for _, cell in extra))}


def entry_record(view: EntryView, stale: bool | None = None) -> dict[str, Any]:
    """The stable JSON object for one entry header (docs/cli.md, "entry object"). ``created``
    and ``last_used`` are null when the header's time is not a representable time."""
    info = view.info
    record = {
        "key": view.key,
        "short_key": view.short_key,
        "kernel": view.kernel,
        "signature": view.signature,
        "short_signature": view.short_signature,
        "arch": view.arch,
        "file_size": view.file_size,
        "sizes": sizes(info.sizes),
        "hits": view.hits,
        "created": iso(view.created),
        "last_used": iso(view.last_used),
        "compile_seconds": view.compile_seconds,
        "root": str(info.root),
        "readonly": view.readonly,
        "path": str(info.path),
        "problem": view.problem,
        "kind": view.kind,
        "entry_points": view.entry_points,
        "frontend": view.frontend,
        "layer": str(info.root) if view.readonly else None,
        "layer_kind": layer_kind(info.root) if view.readonly else None,
    }
    if stale is not None:
        record["stale"] = stale
    return record


def sizes(value: Any) -> dict[str, int]:
    """The header's ``sizes`` map as {artifact name: bytes}; odd names and values are
    written as text and 0 rather than dropped."""
    if not isinstance(value, dict):
        return {}
    return {name if isinstance(name, str) else str(text(name)): count(size)
            for name, size in value.items()}


def entries_and_broken(store, *, readonly: bool = True) -> tuple[list[EntryView], list[EntryView]]:
    """``(readable, broken)`` entries of ``store`` (``Store.entries(include_broken=True)``).

    ``broken`` are entry files whose header cannot be read (truncated, zero-length, garbage,
    not a regular file), with ``problem`` set; newer-format entries are in neither list
    (they are not ours to judge; ``verify`` lists them).
    """
    good, broken = [], []
    for info in store.entries(readonly=readonly, include_broken=True):
        if not info.problem:
            good.append(EntryView(info))
        elif not is_newer(info):
            broken.append(EntryView(info))
    return good, broken


def kernel_matches(view: EntryView, pattern: str) -> bool:
    """True when the entry's kernel (``module:qualname``) matches the glob ``pattern``, as a
    whole or by its qualname alone (``--kernel 'axpy*'`` finds ``pkg.linalg:axpy``)."""
    return name_matches(view.kernel, pattern)


def name_matches(kernel: Any, pattern: str) -> bool:
    """:func:`kernel_matches` for a kernel name of any type (from a header: not text -> its
    JSON text, None -> "")."""
    kernel = text(kernel) or ""
    qualname = kernel.rpartition(":")[2]
    return fnmatch.fnmatchcase(kernel, pattern) or fnmatch.fnmatchcase(qualname, pattern)


def header_matches(header: Any, kernel: str | None = None, ccs=None) -> bool:
    """True when an entry header (a dict: ``kernel``, ``arch``) matches ``--kernel GLOB``
    (``kernel``) and one of ``--cc`` (``ccs``: :func:`kcache.cli.args.cc_arg` results);
    a filter not given matches everything."""
    from kcache.cli.args import arch_matches
    header = header if isinstance(header, dict) else {}
    if kernel and not name_matches(header.get("kernel"), kernel):
        return False
    return not ccs or any(arch_matches(text(header.get("arch")), cc) for cc in ccs)


def select_entries(store, *, kernel: str | None = None, ccs=None, current: bool = False,
                   where=None) -> list:
    """The entries (EntryInfo) of every root matching ``--kernel GLOB`` (``kernel``), one of
    ``--cc`` (``ccs``), ``where(view)`` (an EntryView predicate: export's
    kcache.cli.selection.Selection) and, with ``current``, built by the current toolchain;
    one per key (the writable root's first). For export and push."""
    from kcache.cli.args import arch_matches
    from kcache.toolchain import package_versions
    versions = package_versions() if current else {}
    chosen: dict = {}
    for info in store.entries():
        view = EntryView(info)
        if kernel and not kernel_matches(view, kernel):
            continue
        if ccs and not any(arch_matches(view.arch, cc) for cc in ccs):
            continue
        if where is not None and not where(view):
            continue
        if current and is_stale(view, versions):
            continue
        chosen.setdefault(info.key, info)
    return list(chosen.values())


def is_stale(view: EntryView, current: dict[str, str]) -> bool:
    """True when the entry's ``components['toolchain']`` disagrees with ``current`` (from
    ``package_versions()``, read once) on a shared key (``kcache.toolchain.is_stale``). Only
    scalar versions are compared: a nested value in a header cannot make it recurse."""
    from kcache.toolchain import is_stale as toolchain_is_stale
    if view.kind == "program":  # programs also follow NVRTC's version
        from kcache.toolchain import program_versions
        current = {**current, **program_versions()}
    components = view.info.components
    toolchain = components.get("toolchain") if isinstance(components, dict) else None
    if not isinstance(toolchain, dict):
        return False
    scalars = {k: v for k, v in toolchain.items()
               if isinstance(k, str) and isinstance(v, (str, int, float, bool))}
    return toolchain_is_stale({"toolchain": scalars}, current)


def resolve_prefix(store, prefix: str) -> EntryView:
    """The one entry whose key starts with ``prefix`` (also one whose header cannot be read).

    Raises :class:`UsageError` (exit 2) when ``prefix`` is not hex, when several keys start
    with it (listing them) or when the entry is of a newer format; :class:`NotFound` (exit 1)
    when no key does (naming the nearest keys).
    """
    cleaned = prefix.strip().lower()
    if not _HEX.match(cleaned) or len(cleaned) > 64:
        raise UsageError(f"not a key prefix: {clip(prefix)} (1 to 64 hex digits, as shown by "
                         "'kcache ls')")
    # One key may sit in the writable root and a read-only dir: keep the first (writable).
    unique: dict = {}
    for info in store.find(cleaned, include_broken=True):
        if not is_newer(info):  # said below, with the newer-format check
            unique.setdefault(info.key, info)
    matches = [EntryView(info) for info in unique.values()]
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(f"{m.short_key} ({_label(m)})"
                          for m in sorted(matches, key=lambda m: m.key)[:8])
        more = f" and {len(matches) - 8} more" if len(matches) > 8 else ""
        raise UsageError(f"key prefix {prefix!r} is ambiguous: {len(matches)} entries match: "
                         f"{shown}{more}")
    newer = newer_format_files(store, cleaned)
    if newer:
        raise UsageError(f"entry {newer[0]} was written by a newer kcache format; left "
                         "untouched (use the kcache version that wrote it)")
    keys = entry_keys(store)
    shared, near = near_keys(cleaned, keys)
    if not keys:
        hint = " (the cache has no entries)"
    elif near:
        more = ", …" if len(near) > 3 else ""
        hint = f"; keys starting with {cleaned[:shared]!r}: {', '.join(near[:3])}{more}"
    else:  # no key shares even a first digit: none is "near"
        hint = f" (no entry's key starts with {cleaned[:1]!r}; 'kcache ls' lists the keys)"
    raise NotFound(f"no entry with key prefix {prefix!r}{hint}")


def entry_keys(store) -> list[str]:
    """The keys of every entry file in the writable root and the read-only dirs, from the
    file names alone (``kcache.layout.scan``; no header is read: naming the nearest keys of
    a mistyped prefix must not read 100,000 headers)."""
    from kcache.disk.layout import Layout, scan
    keys = [key for key, _path, _st in scan(Layout(store.root))]
    for layer in store.layers:  # a folder's file names, or a bundle's index
        keys += (layer.keys() if hasattr(layer, "describe") else
                 [key for key, _path, _st in scan(Layout(layer.root))])
    return keys


def _label(view: EntryView) -> str:
    if view.problem:
        return f"unreadable: {view.problem}"
    return f"{view.kernel or '?'} {view.arch or ''}".rstrip()


def near_keys(prefix: str, keys: Iterable[str], n: int = 3) -> tuple[int, list[str]]:
    """``(digits, keys)``: the most leading digits any key shares with ``prefix``, and up to
    ``n + 1`` of the keys sharing that many (short forms, sorted; ``n + 1`` says that there
    are more). No keys when none shares a first digit: a key that merely sorts near is no
    nearer to a mistyped prefix than any other."""
    keys = {k for k in keys if _HEX.match(k)}  # a stray file name is not a key
    shared = max((len(os.path.commonprefix([k, prefix])) for k in keys), default=0)
    if not shared:
        return 0, []
    return shared, sorted(k[:SHORT_KEY] for k in keys if k.startswith(prefix[:shared]))[:n + 1]

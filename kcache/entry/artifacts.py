"""What a compiled artifact's bytes say: whether they are a plausible cubin, PTX or LTO-IR (the
one validator every producer's entries pass), and their arch and entry points. Imports no CUDA.

**Validity** (:func:`check`, :func:`problem`). A compile step that returns an empty or cut-off
cubin must never be published, and such bytes read back from a cache must never reach the
driver. The store runs :func:`problem` on every put (a refusal is counted in
``artifacts_refused``, warned once, and the kernel still runs) and on every read (a bad
artifact makes the entry corrupt: a miss, quarantined). What is checked, and nothing more
(structural checks, not a proof that the code is correct or came from a compiler):

* ``cubin``: an ELF64 little-endian header (``\\x7fELF``, class 2, data 1) with
  ``e_machine`` EM_CUDA (190), a section header entry size of 64 bytes, at least one section,
  and a section header table that lies inside the bytes (``e_shoff + e_shnum * e_shentsize
  <= len``), and every section with contents and the program header table inside the
  bytes too: a cut-off cubin loses the end of one of them.
* ``ptx``: text holding the ``.version`` and ``.target`` directives (searched in its first
  64 KiB, where NVVM writes them after a short comment header).
* ``ltoir``: NVVM's LTO-IR container magic, the little-endian u32 0x7F4E43ED (bytes
  ``ed 43 4e 7f``; what NVVM, NVRTC ``-dlto`` and numba-cuda ``lto=True`` produce), followed by
  at least a container header (16 bytes).
* a kernel entry's name of its kernel (numba-cuda's ``entry_name``, numba-cuda-mlir's
  ``func_name``; at most :data:`MAX_NAME` characters) is a kernel of its cubin
  (:func:`cubin_has_entry`): the driver looks that name up at load or launch.

Checked are kernel entries (meta holding every field kcache.dispatcher needs to rebuild a
launchable kernel, :data:`KERNEL_FIELDS`; numba-cuda-mlir's, ``meta["frontend"]``, theirs,
:data:`MLIR_KERNEL_FIELDS`) and program entries (``meta["kind"] == "program"``,
kcache.programs: every artifact must be one of these three kinds, what cuda.core's
``Program.compile`` makes, since bytes of any other kind would be served unchecked); an entry
the store is given for other uses keeps its artifacts opaque.

**Description** (:func:`describe`). For cuda.core programs stored through
``kcache.ProgramCache`` (``Program.compile(cache=...)`` hands kcache only an opaque key and the
bytes): the arch comes from a cubin's ELF header (``e_flags``) or a PTX's ``.target`` line, the
entry points from the cubin's symbol table (functions marked ``STO_CUDA_ENTRY``) or the PTX's
``.entry`` directives. A bundle or a remote may carry these bytes too, so every read is bounded
by the data's length and every list by a constant; anything that does not parse is "unknown"
(None / []), never an error.
"""
from __future__ import annotations

import functools
import re
import struct

__all__ = ["describe", "sniff", "cubin_arch", "cubin_entry_points", "cubin_has_entry", "ptx_arch",
           "ptx_entry_points", "KERNEL_FIELDS", "MLIR_FRONTEND", "MLIR_KERNEL_FIELDS", "EM_CUDA",
           "LTOIR_MAGIC", "check", "problem"]

ELF_MAGIC = b"\x7fELF"
#: NVVM LTO-IR as NVRTC and nvJitLink write it.
LTOIR_MAGIC = b"\xedCN\x7f"
_ELFOSABI_CUDA = 0x41  # e_ident[EI_OSABI] of a cubin ("A")
_STO_CUDA_ENTRY = 0x10  # st_other of a kernel's symbol
_STT_FUNC = 2
MAX_ENTRY_POINTS = 256  # names kept per artifact (a header stays small)
MAX_SYMBOLS = 1 << 16  # symbols read from a symbol table
MAX_NAME = 4096  # characters of one name
_PTX_SCAN = 1 << 16  # bytes of a PTX searched for its .target line (it is near the top)


# Compiled when first used (functools.cache): describing a PTX is a writer's work; a cache hit
# checks its artifacts without a regex.
@functools.cache
def _ptx_target() -> re.Pattern:
    return re.compile(rb"^\s*\.target\s+(sm_\d{2,3}[af]?|compute_\d{2,3}[af]?)", re.M)


@functools.cache
def _ptx_entry() -> re.Pattern:
    return re.compile(rb"\.entry\s+([A-Za-z_$%][\w$%]{0,4095})")


def sniff(data: bytes) -> str | None:
    """``"cubin"``, ``"ltoir"`` or ``"ptx"`` by the bytes' own marks; None when unknown."""
    head = bytes(data[:16])
    if head.startswith(ELF_MAGIC):
        return "cubin"
    if head.startswith(LTOIR_MAGIC):
        return "ltoir"
    if _ptx_target().search(bytes(data[:_PTX_SCAN])):
        return "ptx"
    return None


def describe(kind: str | None, data: bytes) -> dict:
    """``{"arch": str | None, "entry_points": [str, ...]}`` of an artifact of ``kind``
    ("cubin", "ptx", "ltoir"; None: sniffed). LTO-IR names neither: arch None, no entries."""
    kind = kind or sniff(data)
    if kind == "cubin":
        return {"arch": cubin_arch(data), "entry_points": cubin_entry_points(data)}
    if kind == "ptx":
        return {"arch": ptx_arch(data), "entry_points": ptx_entry_points(data)}
    return {"arch": None, "entry_points": []}


def cubin_arch(data: bytes) -> str | None:
    """``"sm_90"`` from a cubin's ELF header, or None. The SM number is byte 0 of
    ``e_flags`` for ELF ABI version 7 and older, byte 1 from version 8 (CUDA 12.8's cubins);
    the header does not name the ``a``/``f`` variant, so ``sm_90a`` reads as ``sm_90``."""
    if len(data) < 52 or bytes(data[:4]) != ELF_MAGIC or data[7] != _ELFOSABI_CUDA:
        return None
    if data[4] == 2:  # ELFCLASS64
        (flags,) = struct.unpack_from("<I", data, 48)
    elif data[4] == 1:
        (flags,) = struct.unpack_from("<I", data, 36)
    else:
        return None
    sm = (flags >> 8) & 0xFF if data[8] >= 8 else flags & 0xFF
    return f"sm_{sm}" if 10 <= sm <= 199 else None


def cubin_entry_points(data: bytes) -> list[str]:
    """The kernels of a 64-bit little-endian cubin (``STT_FUNC`` symbols marked
    ``STO_CUDA_ENTRY`` in ``.symtab``), in symbol order; [] when it cannot be read."""
    try:
        return _elf_entries(memoryview(data))
    except (struct.error, ValueError, IndexError):
        return []


def _elf_entries(view: memoryview) -> list[str]:
    if len(view) < 64 or bytes(view[:4]) != ELF_MAGIC or view[4] != 2 or view[5] != 1:
        return []
    shoff, = struct.unpack_from("<Q", view, 40)
    shentsize, shnum = struct.unpack_from("<HH", view, 58)
    if shentsize < 64 or shoff + shentsize * shnum > len(view):
        return []
    sections = [struct.unpack_from("<IIQQQQIIQQ", view, shoff + i * shentsize)
                for i in range(shnum)]
    for _name, kind, _f, _a, off, size, link, _i, _al, entsize in sections:
        if kind != 2 or link >= shnum:  # SHT_SYMTAB, with its string table
            continue
        if entsize < 24 or off + size > len(view):
            return []
        strtab = sections[link]
        str_off, str_size = strtab[4], strtab[5]
        if str_off + str_size > len(view):
            return []
        strings = view[str_off:str_off + str_size]
        out = []
        for i in range(min(size // entsize, MAX_SYMBOLS)):
            st_name, st_info, st_other = struct.unpack_from("<IBB", view, off + i * entsize)
            if st_info & 0xF == _STT_FUNC and st_other & _STO_CUDA_ENTRY:
                name = _c_string(strings, st_name)
                if name:
                    out.append(name)
                    if len(out) >= MAX_ENTRY_POINTS:
                        break
        return out
    return []


def cubin_has_entry(data: bytes, name: str) -> bool:
    """Whether a 64-bit little-endian cubin's ``.symtab`` holds a kernel named ``name``
    (``str``): :func:`cubin_entry_points`'s test for one name, found by searching the string
    and symbol tables' bytes instead of decoding every symbol (every read of a kernel entry
    asks it). False when the cubin cannot be read. Linear in the cubin's size."""
    try:
        target = name.encode("utf-8") + b"\0"
    except UnicodeError:  # a lone surrogate: no cubin names it
        return False
    data = data if isinstance(data, bytes) else bytes(data)
    if len(data) < _ELF64_HEADER or data[:6] != b"\x7fELF\x02\x01":
        return False
    shoff, = _U64.unpack_from(data, 40)
    shentsize, shnum = _U16X2.unpack_from(data, 58)
    end = shoff + shnum * _ELF64_SHDR
    if shentsize != _ELF64_SHDR or end > len(data):
        return False
    # The symbol table's section header: sh_type SHT_SYMTAB (2) at byte 4 of a 64-byte header,
    # found by a search, not by decoding every header (a few places are looked at).
    at = data.find(_SYMTAB_TYPE, shoff, end)
    for _ in range(_NAME_CANDIDATES):
        if at < 0:
            return False
        if (at - shoff) % _ELF64_SHDR == 4:
            return _symtab_has(data, shoff, shnum, at - 4, target)
        at = data.find(_SYMTAB_TYPE, at + 1, end)
    return False


def _symtab_has(data: bytes, shoff: int, shnum: int, header: int, target: bytes) -> bool:
    """:func:`cubin_has_entry` in the symbol table whose section header is at ``header``;
    ``target``: the name, NUL-terminated."""
    _k, off, size, link, entsize = _SHDR_SYMTAB.unpack_from(data, header)
    if link >= shnum or entsize < _SYM.size or off + size > len(data):
        return False
    _k, str_off, str_size, _l, _e = _SHDR_SYMTAB.unpack_from(data, shoff + link * _ELF64_SHDR)
    if str_off + str_size > len(data):
        return False
    # The name as a whole string first (after a NUL: the string table starts with one); then
    # any place its text ends a longer string (a table may share suffixes; section names such
    # as ".text.NAME" hold it too). A few places are looked at, never all a forger writes.
    whole = data.find(b"\0" + target, str_off, str_off + str_size)
    if whole >= 0 and _entry_at(data, off, off + size, entsize, whole + 1 - str_off):
        return True
    at = data.find(target, str_off, str_off + str_size)
    for _ in range(_SYMBOL_SEARCHES - (whole >= 0)):  # each a search of the symbol table
        if at < 0:
            return False
        if at != whole + 1 and _entry_at(data, off, off + size, entsize, at - str_off):
            return True
        at = data.find(target, at + 1, str_off + str_size)
    return False


def _entry_at(data: bytes, start: int, end: int, entsize: int, st_name: int) -> bool:
    """Whether the symbol table ``data[start:end]`` (``entsize`` bytes a symbol) holds a kernel
    symbol (``STT_FUNC``, ``STO_CUDA_ENTRY``) whose name is at ``st_name``."""
    packed = _U32.pack(st_name)
    at = data.find(packed, start, end)
    for _ in range(_NAME_CANDIDATES):
        if at < 0:
            return False
        if (at - start) % entsize == 0 and at + _SYM.size <= end:
            _n, info, other = _SYM.unpack_from(data, at)
            if info & 0xF == _STT_FUNC and other & _STO_CUDA_ENTRY:
                return True
        at = data.find(packed, at + 1, end)
    return False


def _c_string(strings: memoryview, start: int) -> str | None:
    if start >= len(strings):
        return None
    chunk = bytes(strings[start:start + MAX_NAME + 1])
    end = chunk.find(b"\0")
    if end < 0:
        return None
    return chunk[:end].decode("utf-8", errors="replace")


def ptx_arch(data: bytes) -> str | None:
    """The arch of a PTX's ``.target`` line (``"sm_90a"``), or None."""
    found = _ptx_target().search(bytes(data[:_PTX_SCAN]))
    return found.group(1).decode("ascii") if found else None


def ptx_entry_points(data: bytes) -> list[str]:
    """The names of a PTX's ``.entry`` directives, in order (at most MAX_ENTRY_POINTS)."""
    out = []
    for found in _ptx_entry().finditer(bytes(data)):
        out.append(found.group(1).decode("ascii", errors="replace"))
        if len(out) >= MAX_ENTRY_POINTS:
            break
    return out


#: The meta fields of a kernel entry: what ``kcache.dispatcher._compat.rebuild_kernel`` reads
#: (kcache.dispatcher.kernel_entry.STATE_FIELDS is this tuple).
KERNEL_FIELDS = (
    "entry_name", "name", "cooperative", "needs_cudadevrt", "nrt", "max_registers", "lto",
    "nvvm_options", "launch_config_sensitive", "shared_memory_carveout", "debug", "lineinfo",
)
#: ``meta["frontend"]`` of a numba-cuda-mlir kernel entry, and its meta fields: what
#: kcache.dispatcher's numba-cuda-mlir bridge rebuilds a compile result from (its
#: ``rebuild.STATE_FIELDS``). An entry without ``frontend`` is numba-cuda's.
MLIR_FRONTEND = "numba-cuda-mlir"
MLIR_KERNEL_FIELDS = (
    "func_name", "cooperative", "needs_nrt", "nrt_inline", "dynamic_shared_memory",
    "gpu_target", "lto", "capi", "launch_config_sensitive",
)
EM_CUDA = 190
_ELF64_HEADER = 64  # bytes
_ELF64_SHDR = 64  # bytes of one section header
_SHT_NOBITS = 8
_SHDR = struct.Struct("<4xI16xQQ24x")  # Elf64_Shdr: sh_type, sh_offset, sh_size
# Elf64_Shdr: sh_type, sh_offset, sh_size, sh_link, sh_entsize
_SHDR_SYMTAB = struct.Struct("<4xI16xQQI12xQ")
_U64, _U32, _U16X2 = struct.Struct("<Q"), struct.Struct("<I"), struct.Struct("<HH")
_SYMTAB_TYPE = _U32.pack(2)  # sh_type SHT_SYMTAB
_SYM = struct.Struct("<IBB")  # Elf64_Sym: st_name, st_info, st_other
_NAME_CANDIDATES = 64  # places a kernel's name is looked for (real cubins: one)
#: ... of which at most this many are looked up in the symbol table: each lookup searches
#: the whole table (real cubins: the whole name, or one of a few section names ending in it)
_SYMBOL_SEARCHES = 8
# Elf64_Ehdr from e_machine (byte 18): e_machine, [e_version, e_entry], e_phoff, e_shoff,
# [e_flags, e_ehsize], e_phentsize, e_phnum, e_shentsize, e_shnum
_EHDR = struct.Struct("<H4x8xQQ4x2xHHHH")
_PTX_HEAD = 64 << 10  # bytes of PTX searched for its directives
_LTOIR_HEADER = 16  # bytes: magic, versions, header size, IR size (at least)


def _cubin(data: bytes) -> str | None:
    if len(data) < _ELF64_HEADER:
        return f"{len(data)} bytes, shorter than an ELF64 header"
    if data[:6] != b"\x7fELF\x02\x01":
        return "not an ELF64 little-endian file"
    # e_machine, e_phoff, e_shoff, e_phentsize, e_phnum, e_shentsize, e_shnum: one unpack
    machine, phoff, shoff, phentsize, phnum, shentsize, shnum = _EHDR.unpack_from(data, 18)
    if machine != EM_CUDA:
        return f"ELF e_machine {machine}, not EM_CUDA ({EM_CUDA})"
    if shnum == 0 or shentsize != _ELF64_SHDR:
        return f"no usable section header table ({shnum} sections of {shentsize} bytes)"
    if shoff < _ELF64_HEADER or shoff + shnum * shentsize > len(data):
        return (f"truncated: its section header table ends at byte {shoff + shnum * shentsize}, "
                f"the cubin has {len(data)}")
    end = _end_of_contents(data, shoff, shnum)
    if phnum:
        end = max(end, phoff + phnum * phentsize)
    if end > len(data):
        return f"truncated: its sections end at byte {end}, the cubin has {len(data)}"
    return None


def _end_of_contents(data: bytes, shoff: int, shnum: int) -> int:
    """The byte where the last section with contents in the file ends (SHT_NOBITS sections,
    e.g. .bss, occupy none). The table was checked to lie inside ``data``."""
    table = memoryview(data)[shoff:shoff + shnum * _ELF64_SHDR]
    return max([offset + size for sh_type, offset, size in _SHDR.iter_unpack(table)
                if sh_type != _SHT_NOBITS], default=0)


def _ptx(data: bytes) -> str | None:
    # searched in place (a slice would copy up to 64 KiB on every hit)
    missing = [d for d in (b".version", b".target")
               if data.find(d, 0, _PTX_HEAD) < 0]
    if missing:
        return f"no {' or '.join(m.decode() for m in missing)} directive ({len(data)} bytes)"
    return None


def _ltoir(data: bytes) -> str | None:
    if len(data) < _LTOIR_HEADER:
        return f"{len(data)} bytes, shorter than an LTO-IR header"
    if data[:4] != LTOIR_MAGIC:
        magic = struct.unpack_from("<I", data)[0]
        return f"magic 0x{magic:08X}, not NVVM LTO-IR's 0x7F4E43ED"
    return None


_CHECKS = {"cubin": _cubin, "ptx": _ptx, "ltoir": _ltoir}


def check(kind: str, data: bytes) -> str | None:
    """Why ``data`` (bytes) is not a plausible artifact of ``kind`` ("cubin", "ptx", "ltoir";
    any other kind is not checked), or None. One line, for messages. Raises nothing."""
    test = _CHECKS.get(kind)
    return None if test is None else test(data)


def problem(artifacts: dict, meta: dict) -> str | None:
    """Why a kernel entry (``meta`` holds every one of :data:`KERNEL_FIELDS`; with
    ``meta["frontend"] == "numba-cuda-mlir"``, every one of :data:`MLIR_KERNEL_FIELDS`) or a
    program entry (``meta["kind"] == "program"``; an artifact of another kind than cubin, PTX
    or LTO-IR is refused too) with ``artifacts`` (name -> bytes) must not be used, e.g.
    "bad cubin: truncated: ...", or None (also for any other entry). Raises nothing."""
    if not isinstance(meta, dict):
        return None
    if meta.get("kind") != "program":
        frontend = meta.get("frontend", "numba-cuda")
        if frontend == MLIR_FRONTEND:  # every field required: it says it is such an entry
            why = _mlir_meta_problem(meta)
        elif frontend != "numba-cuda" or not meta.keys() >= _KERNEL_FIELD_SET:
            return None  # no kernel of a front-end kcache serves (none is rebuilt from it)
        else:
            why = _kernel_meta_problem(meta)
        if why is not None:
            return why
    program = meta.get("kind") == "program"
    for kind, data in artifacts.items():
        test = _CHECKS.get(kind)
        if test is None:
            if program:  # what cuda.core compiles is one of these; nothing else is checked
                return f"artifact {str(kind)[:40]!r} is of no checked kind ({', '.join(_CHECKS)})"
            continue
        why = test(data)
        if why is not None:
            return f"bad {kind}: {why}"
    if not program and "cubin" in artifacts:  # a kernel entry: what the launch looks up
        field = "func_name" if meta.get("frontend") == MLIR_FRONTEND else "entry_name"
        if not cubin_has_entry(artifacts["cubin"], meta[field]):
            return f"bad kernel fields: {field} {meta[field][:80]!r} is not a kernel of the cubin"
    return None


_KERNEL_FIELD_SET = frozenset(KERNEL_FIELDS)
_FLAG_FIELDS = ("cooperative", "needs_cudadevrt", "nrt", "lto", "launch_config_sensitive",
                "debug", "lineinfo")
_MAX_EXCEPTIONS = 1 << 16  # entries of a kernel's exception table (one per raise site)
_MAX_SHARED_MEMORY = (1 << 32) - 1  # bytes: the driver's launch parameter is 32-bit


def _kernel_meta_problem(meta: dict) -> str | None:
    """Why the fields a kernel is rebuilt from (KERNEL_FIELDS, and the exception table) do not
    have the types kcache writes, or None: a wrong type would otherwise fail the rebuild of
    every process the entry is served to, or stop its call."""
    if type(meta["entry_name"]) is not str or type(meta["name"]) is not str:
        return "bad kernel fields: entry_name and name must be text"
    if len(meta["entry_name"]) > MAX_NAME or len(meta["name"]) > MAX_NAME:
        return f"bad kernel fields: entry_name and name must be at most {MAX_NAME} characters"
    if type(meta["nvvm_options"]) is not dict:
        return "bad kernel fields: nvvm_options must be a map"
    if meta["max_registers"] is not None and type(meta["max_registers"]) is not int:
        return "bad kernel fields: max_registers must be a number or nil"
    for field in _FLAG_FIELDS:
        if type(meta[field]) not in (bool, int):
            return f"bad kernel fields: {field} must be true or false"
    table = meta.get("exceptions")
    if table is not None and not _exception_table_ok(table):
        return "bad kernel fields: exceptions must map a code to [class, args, location]"
    return None


def _mlir_meta_problem(meta: dict) -> str | None:
    """:func:`_kernel_meta_problem` for a numba-cuda-mlir kernel entry (MLIR_KERNEL_FIELDS)."""
    missing = [f for f in MLIR_KERNEL_FIELDS if f not in meta]
    if missing:
        return f"bad kernel fields: {missing[0]} missing from a numba-cuda-mlir entry"
    if type(meta["func_name"]) is not str or not meta["func_name"]:
        return "bad kernel fields: func_name must be text"
    if len(meta["func_name"]) > MAX_NAME:
        return f"bad kernel fields: func_name must be at most {MAX_NAME} characters"
    for field in ("cooperative", "needs_nrt", "nrt_inline", "lto", "launch_config_sensitive"):
        if type(meta[field]) not in (bool, int):
            return f"bad kernel fields: {field} must be true or false"
    shared = meta["dynamic_shared_memory"]
    if type(shared) is not int or not 0 <= shared <= _MAX_SHARED_MEMORY:
        return "bad kernel fields: dynamic_shared_memory must be a number of bytes (< 4 GiB)"
    if meta["capi"] is not None and type(meta["capi"]) is not str:
        return "bad kernel fields: capi must be text or nil"
    target = meta["gpu_target"]
    if type(target) is not dict or not all(
            type(k) is str and (v is None or type(v) in (bool, int, str) or (
                type(v) is list and all(type(x) in (int, str) for x in v)))
            for k, v in target.items()):
        return "bad kernel fields: gpu_target must map names to plain values"
    table = meta.get("exceptions")  # the rebuild decodes it, as numba-cuda's does
    if table is not None and not _exception_table_ok(table):
        return "bad kernel fields: exceptions must map a code to [class, args, location]"
    return None


def _exception_table_ok(table) -> bool:
    """``{"code": [class name or nil, args list or nil, location list or nil]}``, as
    kcache.dispatcher.kernel_entry.encode_exceptions writes it."""
    if type(table) is not dict or len(table) > _MAX_EXCEPTIONS:
        return False
    for code, value in table.items():
        if not (type(code) is str and 0 < len(code) <= 20 and code.lstrip("-").isdigit()
                and code.isascii()):
            return False
        if type(value) is not list or len(value) != 3:
            return False
        name, args, loc = value
        if not ((name is None or type(name) is str) and (args is None or type(args) is list)
                and (loc is None or type(loc) is list)):
            return False
    return True

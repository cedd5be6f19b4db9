"""What a compiled artifact says about itself: its kind, arch and entry points.

Used for cuda.core programs stored through ``kcache.ProgramCache`` (``Program.compile(cache=...)``
hands kcache only an opaque key and the bytes): the arch comes from a cubin's ELF header
(``e_flags``) or a PTX's ``.target`` line, the entry points from the cubin's symbol table
(functions marked ``STO_CUDA_ENTRY``) or the PTX's ``.entry`` directives. Imports no CUDA.

The bytes are the user's own compile output, but a bundle or a remote may carry them too, so
every read is bounded by the data's length and every list by a constant; anything that does
not parse is "unknown" (None / []), never an error.
"""
from __future__ import annotations

import re
import struct

__all__ = ["describe", "sniff", "cubin_arch", "cubin_entry_points", "ptx_arch",
           "ptx_entry_points"]

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
_PTX_TARGET = re.compile(rb"^\s*\.target\s+(sm_\d{2,3}[af]?|compute_\d{2,3}[af]?)", re.M)
_PTX_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$%][\w$%]{0,4095})")


def sniff(data: bytes) -> str | None:
    """``"cubin"``, ``"ltoir"`` or ``"ptx"`` by the bytes' own marks; None when unknown."""
    head = bytes(data[:16])
    if head.startswith(ELF_MAGIC):
        return "cubin"
    if head.startswith(LTOIR_MAGIC):
        return "ltoir"
    if _PTX_TARGET.search(bytes(data[:_PTX_SCAN])):
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
    found = _PTX_TARGET.search(bytes(data[:_PTX_SCAN]))
    return found.group(1).decode("ascii") if found else None


def ptx_entry_points(data: bytes) -> list[str]:
    """The names of a PTX's ``.entry`` directives, in order (at most MAX_ENTRY_POINTS)."""
    out = []
    for found in _PTX_ENTRY.finditer(bytes(data)):
        out.append(found.group(1).decode("ascii", errors="replace"))
        if len(out) >= MAX_ENTRY_POINTS:
            break
    return out

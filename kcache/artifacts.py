"""The one check of a kernel entry's artifacts, by kind: is each one plausibly what its name says?

A compile step that returns an empty or cut-off cubin must never be published, and such bytes
read back from a cache must never reach the driver. The store runs :func:`problem` on every
put (a refusal is counted in ``artifacts_refused``, warned once, and the kernel still runs)
and on every read (a bad artifact makes the entry corrupt: a miss, quarantined).

What is checked, and nothing more (these are structural checks, not a verification that the
code is correct or was produced by a compiler):

* ``cubin``: an ELF64 little-endian header (``\\x7fELF``, class 2, data 1) with
  ``e_machine`` EM_CUDA (190), a section header entry size of 64 bytes, at least one section,
  and a section header table that lies inside the bytes (``e_shoff + e_shnum * e_shentsize
  <= len``), and every section with contents and the program header table inside the
  bytes too: a cut-off cubin loses the end of one of them.
* ``ptx``: text holding the ``.version`` and ``.target`` directives (searched in its first
  64 KiB, where NVVM writes them after a short comment header).
* ``ltoir``: NVVM's LTO-IR container magic, the little-endian u32 0x7F4E43ED (bytes
  ``ed 43 4e 7f``; what NVVM, NVRTC ``-dlto`` and numba-cuda ``lto=True`` produce; numba-cuda's
  own tests check the same magic), followed by at least a container header (16 bytes).

Only kernel entries are checked: those whose meta holds every field kcache.dispatcher needs to
rebuild a launchable kernel (:data:`KERNEL_FIELDS`; the dispatcher refuses any other entry
before its bytes could reach the driver). An entry the store is given for other uses keeps its
artifacts as opaque bytes.
"""
from __future__ import annotations

import struct

__all__ = ["KERNEL_FIELDS", "EM_CUDA", "LTOIR_MAGIC", "check", "problem"]

#: The meta fields of a kernel entry: what ``kcache.dispatcher._compat.rebuild_kernel`` reads
#: (kcache.dispatcher.kernel_entry.STATE_FIELDS is this tuple).
KERNEL_FIELDS = (
    "entry_name", "name", "cooperative", "needs_cudadevrt", "nrt", "max_registers", "lto",
    "nvvm_options", "launch_config_sensitive", "shared_memory_carveout", "debug", "lineinfo",
)
EM_CUDA = 190
LTOIR_MAGIC = 0x7F4E43ED
_ELF64_HEADER = 64  # bytes
_ELF64_SHDR = 64  # bytes of one section header
_SHT_NOBITS = 8
_SHDR = struct.Struct("<4xI16xQQ24x")  # Elf64_Shdr: sh_type, sh_offset, sh_size
_PTX_HEAD = 64 << 10  # bytes of PTX searched for its directives
_LTOIR_HEADER = 16  # bytes: magic, versions, header size, IR size (at least)


def _cubin(data: bytes) -> str | None:
    if len(data) < _ELF64_HEADER:
        return f"{len(data)} bytes, shorter than an ELF64 header"
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return "not an ELF64 little-endian file"
    machine = struct.unpack_from("<H", data, 18)[0]
    if machine != EM_CUDA:
        return f"ELF e_machine {machine}, not EM_CUDA ({EM_CUDA})"
    shoff = struct.unpack_from("<Q", data, 40)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    if shnum == 0 or shentsize != _ELF64_SHDR:
        return f"no usable section header table ({shnum} sections of {shentsize} bytes)"
    if shoff < _ELF64_HEADER or shoff + shnum * shentsize > len(data):
        return (f"truncated: its section header table ends at byte {shoff + shnum * shentsize}, "
                f"the cubin has {len(data)}")
    end = _end_of_contents(data, shoff, shnum)
    phoff = struct.unpack_from("<Q", data, 32)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    if phnum:
        end = max(end, phoff + phnum * phentsize)
    if end > len(data):
        return f"truncated: its sections end at byte {end}, the cubin has {len(data)}"
    return None


def _end_of_contents(data: bytes, shoff: int, shnum: int) -> int:
    """The byte where the last section with contents in the file ends (SHT_NOBITS sections,
    e.g. .bss, occupy none). The table was checked to lie inside ``data``."""
    table = memoryview(data)[shoff:shoff + shnum * _ELF64_SHDR]
    return max((offset + size for sh_type, offset, size in _SHDR.iter_unpack(table)
                if sh_type != _SHT_NOBITS), default=0)


def _ptx(data: bytes) -> str | None:
    head = data[:_PTX_HEAD]
    missing = [d for d in (b".version", b".target") if d not in head]
    if missing:
        return f"no {' or '.join(m.decode() for m in missing)} directive ({len(data)} bytes)"
    return None


def _ltoir(data: bytes) -> str | None:
    if len(data) < _LTOIR_HEADER:
        return f"{len(data)} bytes, shorter than an LTO-IR header"
    magic = struct.unpack_from("<I", data)[0]
    if magic != LTOIR_MAGIC:
        return f"magic 0x{magic:08X}, not NVVM LTO-IR's 0x{LTOIR_MAGIC:08X}"
    return None


_CHECKS = {"cubin": _cubin, "ptx": _ptx, "ltoir": _ltoir}


def check(kind: str, data: bytes) -> str | None:
    """Why ``data`` (bytes) is not a plausible artifact of ``kind`` ("cubin", "ptx", "ltoir";
    any other kind is not checked), or None. One line, for messages. Raises nothing."""
    test = _CHECKS.get(kind)
    return None if test is None else test(data)


def problem(artifacts: dict, meta: dict) -> str | None:
    """Why a kernel entry (``meta`` holds every one of :data:`KERNEL_FIELDS`) with
    ``artifacts`` (name -> bytes) must not be used, e.g. "bad cubin: truncated: ...", or None
    (also for an entry that is not a kernel entry). Raises nothing."""
    if not isinstance(meta, dict) or not all(f in meta for f in KERNEL_FIELDS):
        return None
    for kind, data in artifacts.items():
        why = check(kind, data)
        if why is not None:
            return f"bad {kind}: {why}"
    return None

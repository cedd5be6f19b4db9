"""Never publish a broken artifact: kcache.artifacts' checks, the store's put refusing a bad
kernel entry, a bad artifact read back being a miss, and the producers (dispatcher,
compile_for) on a fake GPU whose compile step returns an empty or truncated cubin."""
import struct

import pytest

import kcache
from kcache import Entry, make_key
from kcache.entry import artifacts
from kcache.entry.artifacts import EM_CUDA, KERNEL_FIELDS, LTOIR_MAGIC
from kcache.warn import KcacheWarning

pytest.importorskip("numba.cuda")

from kcache.dispatcher import CompileForError, compile_for_report  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda import rebuild as _nc_rebuild

from test_dispatcher_fakegpu import _kernels, fake_gpu  # noqa: E402


def elf(size=256, machine=EM_CUDA, shoff=64, shnum=1):
    """A minimal ELF64 little-endian file of ``size`` bytes: header, section headers at
    ``shoff``; each section's contents at offset 0, size 0."""
    head = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    head += struct.pack("<HHIQQQIHHHHHH", 2, machine, 1, 0, 0, shoff, 0, 64, 0, 0, 64, shnum, 0)
    return (head + bytes(size))[:size]


def kernel_elf(name: str, other: int = 0x10, names: bytes = b"") -> bytes:
    """A minimal cubin-shaped ELF64 whose ``.symtab`` holds one function symbol named
    ``name`` (``other``: its st_other, 0x10 STO_CUDA_ENTRY: a kernel), the string table
    ``names`` first (other strings)."""
    strtab = b"\0" + names + name.encode() + b"\0"
    symtab = bytes(24) + struct.pack("<IBBHQQ", 1 + len(names), 0x12, other, 0, 0, 0)
    sym_off = 64 + len(strtab)
    shoff = sym_off + len(symtab)
    head = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    head += struct.pack("<HHIQQQIHHHHHH", 2, EM_CUDA, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 0)
    sections = bytes(64)
    sections += struct.pack("<IIQQQQIIQQ", 0, 2, 0, 0, sym_off, len(symtab), 2, 1, 8, 24)
    sections += struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, 64, len(strtab), 0, 0, 1, 0)
    return head + strtab + symtab + sections


def test_a_kernel_is_found_by_its_whole_name_among_the_cubins_kernels():
    cubin = kernel_elf("_Z1kPf", names=b".text._Z1kPf\0")
    assert artifacts.check("cubin", cubin) is None
    assert artifacts.cubin_entry_points(cubin) == ["_Z1kPf"]
    assert artifacts.cubin_has_entry(cubin, "_Z1kPf")
    for name in ("_Z1k", "Z1kPf", ".text._Z1kPf", "_Z1kPf\0", "", "\ud800"):
        assert not artifacts.cubin_has_entry(cubin, name), name
    assert not artifacts.cubin_has_entry(kernel_elf("_Z1kPf", other=0), "_Z1kPf")  # a function
    assert not artifacts.cubin_has_entry(elf(), "_Z1kPf")  # no symbol table
    assert not artifacts.cubin_has_entry(b"\x7fELF garbage", "_Z1kPf")
    # a suffix shared in the string table: the kernel's st_name inside another string
    shared = kernel_elf("k", names=b"other_")
    assert artifacts.cubin_has_entry(shared, "other_k") is False  # it is no symbol
    assert artifacts.cubin_has_entry(shared, "k")


def test_a_string_table_full_of_the_name_is_searched_a_bounded_number_of_times():
    """A forger's string table holding the name 100,000 times, no kernel symbol at any of
    them: refused, after looking at a few places only (each search is linear)."""
    cubin = kernel_elf("_Z1kPf", other=0, names=b"_Z1kPf\0" * 100_000)
    assert artifacts.check("cubin", cubin) is None
    assert not artifacts.cubin_has_entry(cubin, "_Z1kPf")


def test_a_symbol_table_is_searched_a_bounded_number_of_times(monkeypatch):
    """A forger's string table ending 64 strings with the name (no NUL before it: each a
    place the name may be), no kernel symbol at any: each place costs a search of the whole
    symbol table, so only a few are looked at (64 made a 16 MiB cubin cost 1.4 s a read, a
    256 MiB entry over 20 s), and the cubin is refused."""
    searches = []
    real = artifacts._entry_at
    monkeypatch.setattr(artifacts, "_entry_at", lambda *a: searches.append(a) or real(*a))
    cubin = kernel_elf("_Z1kPf", other=0, names=b"x_Z1kPf\0" * 64)
    assert not artifacts.cubin_has_entry(cubin, "_Z1kPf")
    assert 1 <= len(searches) <= artifacts._SYMBOL_SEARCHES
    searches.clear()  # the kernel's own symbol is still found (the whole name comes first)
    assert artifacts.cubin_has_entry(kernel_elf("_Z1kPf", names=b"x_Z1kPf\0" * 64), "_Z1kPf")


def test_a_compiled_kernels_cubin_holds_its_entry_name(store):
    with fake_gpu((9, 0)):
        k = _kernels(store)
        k.compile(_sig())
    ent = store.load(k.stats.keys[_sig()])
    name = ent.meta["entry_name"]
    assert artifacts.cubin_entry_points(ent.artifacts["cubin"]) == [name]
    assert artifacts.cubin_has_entry(ent.artifacts["cubin"], name)
    assert not artifacts.cubin_has_entry(ent.artifacts["cubin"], name[:-1])
    assert not artifacts.cubin_has_entry(ent.artifacts["cubin"], ".text." + name)


@pytest.mark.parametrize("kind,data,expected", [
    ("cubin", elf(), None),
    ("cubin", b"", "0 bytes, shorter than an ELF64 header"),
    ("cubin", elf(63), "shorter than an ELF64 header"),
    ("cubin", b"\x7fELF" + bytes(60), "not an ELF64 little-endian file"),
    ("cubin", elf(machine=62), "e_machine 62, not EM_CUDA (190)"),
    ("cubin", elf(shnum=0), "no usable section header table"),
    ("cubin", elf(100), "truncated: its section header table ends at byte 128, the cubin has 100"),
    ("ptx", b"//\n.version 8.5\n.target sm_90\n", None),
    ("ptx", b"", "no .version or .target directive (0 bytes)"),
    ("ptx", b".version 8.5\n", "no .target directive"),
    ("ltoir", LTOIR_MAGIC + bytes(12), None),
    ("ltoir", LTOIR_MAGIC, "4 bytes, shorter than an LTO-IR header"),
    ("ltoir", b"BC\xc0\xde" + bytes(12), "not NVVM LTO-IR's 0x7F4E43ED"),
    ("other", b"", None),
])
def test_each_kind_is_checked(kind, data, expected):
    got = artifacts.check(kind, data)
    assert got == expected if expected is None else expected in got


def test_a_section_past_the_end_is_truncation():
    data = bytearray(elf(256))
    struct.pack_into("<IIQQQQ", data, 64, 0, 1, 0, 0, 200, 100)  # PROGBITS at 200, 100 bytes
    assert "its sections end at byte 300, the cubin has 256" in artifacts.check("cubin", bytes(data))
    struct.pack_into("<I", data, 68, 8)  # NOBITS (.bss): occupies nothing in the file
    assert artifacts.check("cubin", bytes(data)) is None


META = dict.fromkeys(KERNEL_FIELDS, False) | {  # the fields' types as kcache writes them
    "entry_name": "_Z1kPf", "name": "k", "max_registers": None, "nvvm_options": {},
    "shared_memory_carveout": None, "kernel": "m:k"}


def test_put_refuses_a_kernel_entry_with_a_bad_cubin_and_keeps_other_entries_opaque(store):
    with pytest.warns(KcacheWarning, match=r"not storing the entry of m:k \(bad cubin: 0 bytes"):
        assert store.put(make_key({"k": 1}), Entry({"cubin": b""}, META)) is False
    assert store.put(make_key({"k": 2}), Entry({"cubin": kernel_elf("_Z1kPf")}, META)) is True
    assert store.put(make_key({"k": 3}), Entry({"cubin": b""}, {"kernel": "m:k"})) is True
    # a valid cubin that holds no kernel of the entry's name: the launch would not find it
    assert store.put(make_key({"k": 4}), Entry({"cubin": elf()}, META)) is False
    assert "'_Z1kPf' is not a kernel of the cubin" in artifacts.problem({"cubin": elf()}, META)
    long_name = dict(META, entry_name="k" * 4097)
    assert "at most 4096 characters" in artifacts.problem(
        {"cubin": kernel_elf("k" * 4097)}, long_name)
    st = store.stats()
    assert (st.artifacts_refused, st.puts, st.entries) == (2, 2, 2)


def _sig():
    from numba.cuda import types
    return (types.float32[::1],)


@pytest.fixture(params=["empty", "truncated"])
def bad_compile(request, monkeypatch):
    """The compile step returns an empty or truncated cubin."""
    real = _nc_rebuild.kernel_state

    def kernel_state(kernel, cc):
        state = real(kernel, cc)
        cubin = state["cubin"]
        state["cubin"] = b"" if request.param == "empty" else cubin[: len(cubin) // 2]
        return state

    monkeypatch.setattr(_nc_rebuild, "kernel_state", kernel_state)
    return request.param


def test_a_kernel_with_a_bad_cubin_runs_and_is_not_stored(store, bad_compile):
    with fake_gpu((9, 0)) as bound:
        k = _kernels(store)
        with pytest.warns(KcacheWarning, match="bad cubin"):
            k.compile(_sig())
        assert len(bound) == 1  # the kernel this process compiled is still launched
        fresh = _kernels(store)  # as a fresh process would: not a hit
        fresh.compile(_sig())
    assert fresh.stats.cache_misses[_sig()] == 1 and fresh.stats.compiles == 1
    assert list(store.entries()) == []
    st = store.stats()
    assert (st.artifacts_refused, st.puts, st.hits) == (2, 0, 0)


def test_compile_for_report_does_not_say_cached_for_a_bad_cubin(store, bad_compile):
    k = _kernels(store)
    with pytest.warns(KcacheWarning, match="bad cubin"):
        with pytest.raises(CompileForError, match="the compile step returned a bad cubin") as info:
            compile_for_report(k, [_sig()], cc=(9, 0), store=store)
    assert info.value.results == [] and len(info.value.failures) == 1
    assert list(store.entries()) == []
    with pytest.raises(CompileForError):  # still nothing cached: compiled (and refused) again
        compile_for_report(k, [_sig()], cc=(9, 0), store=store)


def test_a_stored_truncated_cubin_is_a_corrupt_entry_and_a_miss(store, monkeypatch):
    good_check = artifacts.problem
    monkeypatch.setattr(artifacts, "problem", lambda arts, meta: None)  # an older writer
    real = _nc_rebuild.kernel_state

    def truncated(kernel, cc):
        state = real(kernel, cc)
        state["cubin"] = state["cubin"][:-100]
        return state

    with fake_gpu((9, 0)):
        monkeypatch.setattr(_nc_rebuild, "kernel_state", truncated)
        _kernels(store).compile(_sig())
        monkeypatch.setattr(_nc_rebuild, "kernel_state", real)
        monkeypatch.setattr(artifacts, "problem", good_check)
        (info,) = store.entries()
        _header, stored = kcache.entry.decode(store.local.read(info.key, 1 << 30).data, info.key)
        assert "truncated" in good_check(stored.artifacts, stored.meta)  # it is on disk
        fresh = _kernels(store)
        with pytest.warns(KcacheWarning, match="corrupt cache entry.*bad cubin: truncated"):
            fresh.compile(_sig())
    assert fresh.stats.cache_hits[_sig()] == 0 and fresh.stats.compiles == 1
    st = store.stats()
    assert (st.corrupt, st.quarantine_files, st.hits) == (1, 1, 0)
    (again,) = store.entries()  # recompiled and stored whole
    assert artifacts.check("cubin", store.load(again.key).artifacts["cubin"]) is None


@pytest.mark.parametrize("field,value", [
    ("exceptions", "x"), ("exceptions", [1]), ("exceptions", {"1": 5}),
    ("exceptions", {"one": [None, None, None]}), ("exceptions", {"1": ["E", 5, None]}),
    ("nvvm_options", "ab"), ("entry_name", 5), ("max_registers", "32"), ("debug", "yes"),
    ("entry_name", "_Z" + "k" * 4096), ("entry_name", "_Z6otherkPf"), ("name", "n" * 4097),
])
def test_an_entry_with_kernel_fields_of_the_wrong_type_is_corrupt_and_a_miss(
        store, monkeypatch, field, value):
    """Written by a hostile or broken writer (checksums valid): the rebuild would raise in
    every process it is served to (an exception table that is not a map stopped the call):
    the store refuses it as corrupt, the dispatcher compiles, and the compile is stored."""
    good_check = artifacts.problem
    monkeypatch.setattr(artifacts, "problem", lambda arts, meta: None)  # the other writer
    with fake_gpu((9, 0)):
        k = _kernels(store)
        k.compile(_sig())
        key = k.stats.keys[_sig()]
        ent = store.get(key)
        store.remove(key)
        assert store.put(key, Entry(dict(ent.artifacts), dict(ent.meta, **{field: value})))
        monkeypatch.setattr(artifacts, "problem", good_check)
        assert "bad kernel fields" in good_check(ent.artifacts, dict(ent.meta, **{field: value}))
        fresh = _kernels(store)
        with pytest.warns(KcacheWarning, match="corrupt cache entry.*bad kernel fields"):
            fresh.compile(_sig())
    assert fresh.stats.cache_hits[_sig()] == 0 and fresh.stats.compiles == 1
    assert store.stats().corrupt == 1
    assert good_check(store.load(key).artifacts, store.load(key).meta) is None  # stored whole


def test_kernel_fields_as_kcache_writes_them_pass(store):
    with fake_gpu((9, 0)):
        k = _kernels(store)
        k.compile(_sig())
    ent = store.load(k.stats.keys[_sig()])
    assert set(KERNEL_FIELDS) <= ent.meta.keys() and "exceptions" in ent.meta
    assert artifacts.problem(ent.artifacts, ent.meta) is None
    table = {"1": ["builtins:IndexError", ["out of range"], ["f.py", 3]], "-2": [None, None, None]}
    assert artifacts.problem(ent.artifacts, dict(ent.meta, exceptions=table)) is None

"""cuda.core programs through kcache's store (kcache.programs, docs/programs.md).

NVRTC compiles for sm_90 without a GPU, so everything but launching runs on the CPU machine:
``Program.compile(cache=kcache.ProgramCache())``, ``kcache.compile_program`` (single flight
across real processes, the symbol mapping of name expressions), and the CLI's view of program
entries. The launch test is marked ``gpu``.
"""
from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

cuda_core = pytest.importorskip("cuda.core", minversion="1.2")  # the programs extra

from cuda.core import Program, ProgramOptions  # noqa: E402

import clikit  # noqa: E402
import kcache  # noqa: E402
from kcache import Entry, Store, make_key  # noqa: E402
from kcache.entry import artifacts  # noqa: E402
from kcache.warn import KcacheWarning  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SRC = 'extern "C" __global__ void add_one(int* a) { a[threadIdx.x] += 1; }'
TEMPLATE = textwrap.dedent("""
    template <typename T> __global__ void scale(T* a, T by) { a[threadIdx.x] *= by; }
    extern "C" __global__ void plain(int* a) { a[0] = 7; }
""")
NAMES = ("scale<int>", b"scale<float>")


def opts(**kw):
    return ProgramOptions(arch=kw.pop("arch", "sm_90"), **kw)


def child(code: str, *args, root: Path, env: dict | None = None, stderr: bool = False) -> dict:
    """Run ``code`` in a fresh interpreter with KCACHE_DIR=root; the JSON of its last line
    (with ``stderr``: and what it wrote there, exit warnings included, under "stderr")."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    e.update(KCACHE_DIR=str(root), **(env or {}))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                          capture_output=True, text=True, env=e, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if stderr:
        out["stderr"] = done.stderr[-3000:]
    return out


#: Commands run as ``python -m kcache``: warm imports numba-cuda and the modules it names, and
#: push/pull open a remote; the others run in this process as a fresh one would (clikit).
IN_A_PROCESS = ("warm", "push", "pull")


def kc(*args, root: Path, check: int | None = 0, env: dict | None = None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    e.update(env or {})
    argv = ["--dir", str(root), *map(str, args)]
    if args[0] in IN_A_PROCESS:
        done = subprocess.run([sys.executable, "-m", "kcache", *argv], capture_output=True,
                              env=e, timeout=300, stdin=subprocess.DEVNULL)
    else:
        done = clikit.run(argv, environ=e, text=False)
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    if check is not None:
        assert done.returncode == check, (done.returncode, done.stdout[-2000:], done.stderr)
    return done


def counters(root: Path) -> dict:
    """The root's counters, this process's included (ProgramCache.close writes those of the
    store that the programs of ``root`` share)."""
    kcache.ProgramCache(root).close()
    return Store(root).stats().as_dict()


def put_kernel(store: Store) -> str:
    """A numba-cuda-like kernel entry (no producer component): the programs' neighbour."""
    components = {"format": 2, "kernel": "pkg.mod:axpy", "signature": "(float32,)",
                  "target": {"cc": "sm_90a", "output": "cubin"}}
    key = make_key(components)
    assert store.put(key, Entry({"cubin": b"\x7fELF-kernel"}, {"kernel": "pkg.mod:axpy",
                                                               "arch": "sm_90a"}),
                     components=components)
    return key


# --- import -------------------------------------------------------------------------------

@pytest.mark.exec_children  # what a fresh interpreter imports
def test_import_kcache_imports_no_cuda_until_programs_are_used(tmp_path):
    out = child("""
        import json, sys
        import kcache
        kcache.Store, kcache.make_key
        before = sorted(m for m in sys.modules if m.split(".")[0] in ("cuda", "numba"))
        kcache.ProgramCache
        after = "cuda.core" in sys.modules and "kcache.programs" in sys.modules
        print(json.dumps({"before": before, "after": after,
                          "numba": "numba" in sys.modules}))
    """, root=tmp_path / "cache")
    assert out == {"before": [], "after": True, "numba": False}


# --- the cache= way -----------------------------------------------------------------------

def test_program_cache_round_trip_through_compile_cache(root):
    cache = kcache.ProgramCache(root)
    first = Program(SRC, "c++", options=opts()).compile("cubin", cache=cache)
    again = Program(SRC, "c++", options=opts()).compile("cubin", cache=cache)
    assert again.code == first.code and again.code_type == "cubin"
    assert again.name == first.name == "default_program"
    cache.close()
    stats = counters(root)
    assert (stats["compiles"], stats["hits"], stats["misses"], stats["puts"]) == (1, 1, 1, 1)
    assert stats["compile_seconds"] > 0 and stats["seconds_saved"] == stats["compile_seconds"]
    (info,) = Store(root).entries()
    assert info.components["producer"] == "program"
    assert info.meta["via"] == "ProgramCache"
    assert info.kernel == "default_program" and info.arch == "sm_90"  # from the ELF header
    assert info.meta["entry_points"] == ["add_one"]
    assert Store(root).load(info.key).artifacts == {"cubin": bytes(first.code)}  # unchanged


def test_program_cache_hits_in_a_fresh_process(root):
    code = """
        import hashlib, json, sys
        import kcache
        from cuda.core import Program, ProgramOptions
        obj = Program(sys.argv[1], "c++", options=ProgramOptions(arch="sm_90")).compile(
            "cubin", cache=kcache.ProgramCache())
        print(json.dumps(hashlib.sha256(obj.code).hexdigest()))
    """
    first = child(code, SRC, root=root)
    second = child(code, SRC, root=root)
    assert first == second
    stats = counters(root)
    assert (stats["compiles"], stats["hits"], stats["misses"]) == (1, 1, 1)


# What filelock 3.32 (the GPU image's) does when imported: it imports concurrent.futures.thread,
# which registers a threading exit hook, and that raises once the interpreter shuts down. A
# child that only hits imports filelock at its exit flush: the store has imported that module
# when it opened (kcache.stats._ready_lock_import), so the hits are still written.
LATE_IMPORT = """
    import importlib.abc, sys, threading

    class LikeFilelock332(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "filelock":
                import concurrent.futures.thread  # noqa: F401  (its threading exit hook)
            return None

    sys.meta_path.insert(0, LikeFilelock332())
"""

HIT_ONLY = LATE_IMPORT + """
    import json
    import kcache
    from cuda.core import Program, ProgramOptions
    src, mode = sys.argv[1], sys.argv[2]
    options = ProgramOptions(arch="sm_90", name="scale")
    if mode == "cache":
        Program(src, "c++", options=options).compile("cubin", cache=kcache.ProgramCache())
    else:
        kcache.compile_program(src, "c++", options, "cubin", name_expressions=("scale<int>",))
    print(json.dumps({"filelock": "filelock" in sys.modules}))
"""


@pytest.mark.parametrize("mode", ["cache", "compile"])
def test_hits_of_a_process_that_only_hits_are_written_at_its_exit(root, mode):
    runs = [child(HIT_ONLY, TEMPLATE, mode, root=root, stderr=True) for _ in range(2)]
    stats = counters(root)
    seen = f"children: {runs}; the root's counters after they exited: {stats}"
    assert (stats["compiles"], stats["misses"], stats["hits"]) == (1, 1, 1), seen
    assert not any("could not be written" in run["stderr"] for run in runs), seen
    (info,) = Store(root).entries()
    assert info.hits == 1, seen


def test_program_cache_plain_mapping_use_with_extra_digest(root):
    from cuda.core.utils import make_program_cache_key
    cache = kcache.ProgramCache(root)
    key = make_program_cache_key(code=SRC, code_type="c++", options=opts(include_path="/inc"),
                                 target_type="cubin", extra_digest=b"headers v1")
    assert cache.get(key) is None
    obj = Program(SRC, "c++", options=opts()).compile("cubin")
    cache[key] = obj
    assert cache[key] == bytes(obj.code) and cache.get(key.hex()) is None  # str keys: UTF-8
    other = make_program_cache_key(code=SRC, code_type="c++", options=opts(include_path="/inc"),
                                   target_type="cubin", extra_digest=b"headers v2")
    assert cache.get(other) is None
    with pytest.raises(ValueError, match="extra_digest"):
        make_program_cache_key(code=SRC, code_type="c++", options=opts(include_path="/inc"),
                               target_type="cubin")


def test_corrupt_program_entry_is_a_miss_and_quarantined(root):
    cache = kcache.ProgramCache(root)
    good = Program(SRC, "c++", options=opts()).compile("cubin", cache=cache)
    (info,) = Store(root).entries()
    data = bytearray(info.path.read_bytes())
    data[-40] ^= 0xFF  # inside the body: only the full checksum sees it
    info.path.write_bytes(bytes(data))
    with pytest.warns(Warning, match="corrupt"):
        again = Program(SRC, "c++", options=opts()).compile("cubin", cache=cache)
    assert again.code == good.code
    cache.close()
    stats = counters(root)
    assert stats["corrupt"] == 1 and stats["compiles"] == 2 and stats["hits"] == 0
    assert stats["quarantine_files"] == 1
    assert Store(root).load(info.key).artifacts["cubin"] == bytes(good.code)  # rewritten


def test_program_entry_whose_artifact_is_not_what_it_says_is_a_miss(root):
    from kcache.programs.bridge import program_components
    key, components = program_components(b"k" * 32)
    store = Store(root)
    meta = {"kind": "program", "artifact": "cubin", "kernel": "fake"}
    # the store's one artifact validator refuses it (kcache.artifacts): never published
    with pytest.warns(Warning, match="cubin"):
        assert not store.put(key, Entry({"cubin": b"#!/bin/sh\n"}, meta), components=components)
    assert not store.put(key, Entry({"cubin": b"\x7fELF..."}, meta), components=components)
    cache = kcache.ProgramCache(root)
    assert cache.get(b"k" * 32) is None


@functools.lru_cache(maxsize=1)
def _cubin() -> bytes:
    return bytes(Program(SRC, "c++", options=opts()).compile("cubin").code)


#: What ProgramCache was given and stored, then served as a cubin (issue 32, item 4).
UNCHECKED = {
    "empty": lambda: b"",
    "8 random bytes": lambda: bytes.fromhex("9c1f5e0a7d3b62e4"),
    "100 NULs": lambda: b"\0" * 100,
    "garbage": lambda: b"GARBAGE-NOT-A-CUBIN",
    "cubin without its first byte": lambda: _cubin()[1:],
    "cubin cut short": lambda: _cubin()[:-64],
    "ptx without .version": lambda: b"//\n.target sm_90\n.entry k()\n{\n ret;\n}\n",
    "lto-ir magic only": lambda: artifacts.LTOIR_MAGIC + b"\0" * 4,
}


@pytest.mark.parametrize("what", UNCHECKED)
def test_program_cache_stores_no_bytes_that_no_check_passes(root, what):
    cache, data = kcache.ProgramCache(root), UNCHECKED[what]()
    with pytest.warns(KcacheWarning, match=r"program key 6b not stored: .*later lookups"):
        cache[b"k"] = data  # never raises: the exception would reach Program.compile
    with pytest.raises(KeyError):
        cache[b"k"]
    assert cache.get("k") is None and list(Store(root).entries()) == []
    cache.close()
    assert counters(root)["artifacts_refused"] == 1


def test_program_cache_warns_once_for_refused_bytes(root, recwarn):
    cache = kcache.ProgramCache(root)
    for n in range(3):
        cache[bytes([n])] = b"\0" * 100
    said = [str(w.message) for w in recwarn.list if "not stored" in str(w.message)]
    assert len(said) == 1 and "program key 00 not stored" in said[0], said


def test_program_compile_never_gets_planted_garbage_from_the_cache(root):
    from cuda.core.utils import make_program_cache_key
    cache = kcache.ProgramCache(root)
    key = make_program_cache_key(code=SRC, code_type="c++", options=opts(), target_type="cubin")
    with pytest.warns(KcacheWarning, match="not stored"):
        cache[key] = b"GARBAGE-NOT-A-CUBIN"
    obj = Program(SRC, "c++", options=opts()).compile("cubin", cache=cache)
    assert bytes(obj.code) == _cubin()  # compiled: the garbage was never stored
    assert cache[key] == _cubin()  # and the compile's cubin was


def test_program_cache_takes_what_program_compile_makes(root):
    """cubin (NVRTC, and the PTX linker), PTX (NVVM: NVRTC's own needs a driver here) and
    LTO-IR (NVRTC -dlto, NVVM): every kind cuda.core's Program.compile produces is stored."""
    ir = textwrap.dedent("""\
        target triple = "nvptx64-nvidia-cuda"
        target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
        define void @k(i32* %a) {
          ret void
        }
        !nvvm.annotations = !{!0}
        !0 = !{void (i32*)* @k, !"kernel", i32 1}
        !nvvmir.version = !{!1}
        !1 = !{i32 2, i32 0, i32 3, i32 1}
    """)
    lto = opts(link_time_optimization=True)
    made = {"cubin": Program(SRC, "c++", options=opts()).compile("cubin"),
            "ltoir": Program(SRC, "c++", options=lto).compile("ltoir"),
            "ptx": Program(ir, "nvvm", options=opts()).compile("ptx"),
            "nvvm ltoir": Program(ir, "nvvm", options=lto).compile("ltoir")}
    cache = kcache.ProgramCache(root)
    for name, obj in made.items():
        cache[name.encode()] = bytes(obj.code)
        assert cache[name.encode()] == bytes(obj.code), name
    ptx = made["ptx"].code
    cubin = Program(bytes(ptx).decode(), "ptx", options=opts()).compile("cubin")
    cache[b"from ptx"] = cubin
    assert cache[b"from ptx"] == bytes(cubin.code)
    assert len(cache) == 5


def test_program_cache_refuses_an_object_code_of_another_kind_and_a_fifo(root, tmp_path):
    from cuda.core import ObjectCode
    cache = kcache.ProgramCache(root)
    with pytest.warns(KcacheWarning, match="not stored: a fatbin ObjectCode"):
        cache[b"fat"] = ObjectCode.from_fatbin(b"\x50\xed\x55\xba" + b"\0" * 60)
    fifo = tmp_path / "code.cubin"
    os.mkfifo(fifo)  # no writer: reading it would block the program for ever
    with pytest.warns(KcacheWarning, match="not stored .*not a regular file"):
        cache[b"fifo"] = ObjectCode.from_cubin(str(fifo))
    assert cache.get(b"fat") is None and cache.get(b"fifo") is None
    with pytest.raises(TypeError, match="bytes-like or ObjectCode"):
        cache[b"k"] = "a str is no artifact"  # the protocol's error, as cuda.core's caches


@pytest.mark.parametrize("artifact", ["binary", "cubin"])
def test_a_program_entry_planted_with_unchecked_bytes_is_a_miss(root, artifact):
    """An entry an older kcache wrote as "binary" (bytes sniff could not tell), or one put in
    the root by anyone: every read checks again."""
    from kcache.entry import format as fmt
    from kcache.programs.bridge import program_components
    key, components = program_components(b"k")
    meta = {"kind": "program", "via": "ProgramCache", "artifact": artifact, "kernel": None}
    data = fmt.encode(key, Entry({artifact: b"GARBAGE-NOT-A-CUBIN"}, meta), components)
    path = Store(root).layout.entry(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    cache = kcache.ProgramCache(root)
    with pytest.warns(KcacheWarning, match="corrupt"):
        assert cache.get(b"k") is None
    cache.close()
    assert counters(root)["corrupt"] == 1 and not path.exists()  # quarantined


def test_compile_program_is_served_no_planted_garbage(root):
    """compile_program is not affected (issue 32): it takes only the artifact its target names,
    checked on every read (a bad cubin is corrupt; a "binary" one is no usable entry)."""
    from kcache.entry import format as fmt
    from cuda.core.utils import make_program_cache_key
    from kcache.programs.bridge import _cache_key
    program_key = make_program_cache_key(code=SRC, code_type="c++", options=opts(),
                                         target_type="cubin")
    key, components = _cache_key(program_key, "c++", "cubin", "sm_90")
    for artifact in ("cubin", "binary"):
        meta = {"kind": "program", "via": "compile_program", "artifact": artifact,
                "kernel": "default_program", "symbol_mapping": []}
        data = fmt.encode(key, Entry({artifact: b"GARBAGE-NOT-A-CUBIN"}, meta), components)
        path = Store(root).layout.entry(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        with pytest.warns(KcacheWarning, match="corrupt|not a usable program entry"):
            obj = kcache.compile_program(SRC, "c++", opts(), "cubin", root=root)
        assert bytes(obj.code) == _cubin(), artifact
        kcache.warn.reset()


def test_program_cache_len_clear_del_concern_programs_only(root):
    store = Store(root)
    kernel_key = put_kernel(store)
    cache = kcache.ProgramCache(root)
    for n in (1, 2, 3):
        Program(SRC.replace("+= 1", f"+= {n}"), "c++", options=opts()).compile("cubin", cache=cache)
    assert len(cache) == 3 and len(list(store.entries())) == 4
    from cuda.core.utils import make_program_cache_key
    key = make_program_cache_key(code=SRC.replace("+= 1", "+= 2"), code_type="c++",
                                 options=opts(), target_type="cubin")
    del cache[key]
    assert len(cache) == 2 and cache.get(key) is None
    with pytest.raises(KeyError):
        del cache[key]
    with pytest.raises(KeyError):
        del cache[b"not a key of this cache"]
    removed = cache.clear()
    assert removed == 2 and len(cache) == 0
    assert [i.key for i in store.entries()] == [kernel_key]  # the kernel is untouched


def test_program_cache_is_a_miss_when_disabled(root, monkeypatch):
    monkeypatch.setenv("KCACHE_DISABLE", "1")
    cache = kcache.ProgramCache(root)
    Program(SRC, "c++", options=opts()).compile("cubin", cache=cache)
    Program(SRC, "c++", options=opts()).compile("cubin", cache=cache)
    assert not (root / "v1").exists()


def test_program_cache_serves_a_read_only_layer(tmp_path, monkeypatch):
    layer = tmp_path / "layer"
    Program(SRC, "c++", options=opts()).compile("cubin", cache=kcache.ProgramCache(layer))
    monkeypatch.setenv("KCACHE_READONLY_DIRS", str(layer))
    cache = kcache.ProgramCache(tmp_path / "root")
    Program(SRC, "c++", options=opts()).compile("cubin", cache=cache)
    cache.close()
    stats = counters(tmp_path / "root")
    assert stats["hits"] == 1 and stats["compiles"] == 0 and len(cache) == 0  # used in place


# --- compile_program ----------------------------------------------------------------------

def test_compile_program_keeps_the_symbol_mapping_exactly(root):
    import io
    log = io.StringIO()
    first = kcache.compile_program(TEMPLATE, "c++", opts(name="tmpl"), "cubin",
                                   name_expressions=NAMES, root=root, logs=log)
    hit = kcache.compile_program(TEMPLATE, "c++", opts(name="tmpl"), "cubin",
                                 name_expressions=NAMES, root=root)
    assert hit is not first and hit.code == first.code and hit.name == "tmpl"
    assert hit.symbol_mapping == first.symbol_mapping
    assert list(map(type, hit.symbol_mapping)) == [str, bytes]  # "k" and b"k" stay apart
    assert all(type(v) is type(first.symbol_mapping[k]) for k, v in hit.symbol_mapping.items())
    (info,) = Store(root).entries()
    assert info.meta["via"] == "compile_program" and info.arch == "sm_90"
    assert info.components["arch"] == "sm_90" and info.components["target_type"] == "cubin"
    assert sorted(info.meta["entry_points"]) == sorted(
        [m.decode() for m in first.symbol_mapping.values()] + ["plain"])
    assert info.compile_seconds > 0
    other = kcache.compile_program(TEMPLATE, "c++", opts(name="tmpl"), "cubin",
                                   name_expressions=("scale<int>",), root=root)
    assert list(other.symbol_mapping) == ["scale<int>"]  # its own key, its own entry
    assert len(list(Store(root).entries())) == 2


def test_compile_program_log_is_recorded_and_replayed(root):
    import io
    src = SRC + "\n__global__ void warns() { int unused; }"
    first, second = io.StringIO(), io.StringIO()
    kcache.compile_program(src, "c++", opts(), "cubin", root=root, logs=first)
    kcache.compile_program(src, "c++", opts(), "cubin", root=root, logs=second)
    assert "unused" in first.getvalue() and second.getvalue() == first.getvalue()


def test_compile_program_raises_the_compile_error_and_stores_nothing(root, recwarn):
    with pytest.raises(Exception, match="(?i)nvrtc|compil"):
        kcache.compile_program("this is not C++", "c++", opts(), "cubin", root=root)
    assert list(Store(root).entries()) == []
    assert not [w for w in recwarn if "kcache" in str(w.message)]


def test_compile_program_key_follows_inputs(root):
    base = dict(code_type="c++", target_type="cubin", root=root)
    kcache.compile_program(SRC, options=opts(), **base)
    kcache.compile_program(SRC, options=opts(arch="sm_80"), **base)
    kcache.compile_program(SRC, options=opts(), extra_digest=b"x", **base)
    kcache.compile_program(SRC, options=opts(), **base)  # a hit
    infos = list(Store(root).entries())
    assert sorted(i.arch for i in infos) == ["sm_80", "sm_90", "sm_90"]
    assert counters(root)["compiles"] == 3


def _race(root, barrier, results, index):
    os.environ["KCACHE_DIR"] = str(root)
    import kcache as kc
    from cuda.core import ProgramOptions as Options
    kc.ProgramCache  # import cuda.core and the bridge before the start
    barrier.wait(timeout=120)
    obj = kc.compile_program(TEMPLATE, "c++", Options(arch="sm_90", name="race"), "cubin",
                             name_expressions=NAMES)
    results.put((index, hashlib.sha256(obj.code).hexdigest(),
                 sorted(map(repr, obj.symbol_mapping.items()))))


def test_compile_program_compiles_once_across_processes(root):
    n = 4
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(root, barrier, results, i)) for i in range(n)]
    for p in procs:
        p.start()
    got = [results.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    assert len({(h, tuple(m)) for _i, h, m in got}) == 1
    stats = counters(root)
    assert stats["compiles"] == 1, stats
    assert stats["hits"] == n - 1 and stats["misses"] == 1


# --- the CLI ------------------------------------------------------------------------------

def _fill(root) -> tuple[str, str]:
    """A kernel entry and two program entries (one per way); returns (kernel key, tmpl key)."""
    kernel_key = put_kernel(Store(root))
    Program(SRC, "c++", options=opts()).compile("cubin", cache=kcache.ProgramCache(root))
    kcache.compile_program(TEMPLATE, "c++", opts(name="tmpl"), "cubin",
                           name_expressions=NAMES, root=root)
    tmpl = next(i.key for i in Store(root).entries() if i.kernel == "tmpl")
    return kernel_key, tmpl


def test_ls_shows_programs_beside_kernels(root):
    kernel_key, tmpl = _fill(root)
    doc = json.loads(kc("ls", "--json", root=root).stdout)
    kinds = {e["kernel"]: (e["kind"], e["arch"], e["entry_points"]) for e in doc["entries"]}
    assert kinds["pkg.mod:axpy"] == ("kernel", "sm_90a", [])
    assert kinds["default_program"] == ("program", "sm_90", ["add_one"])
    assert kinds["tmpl"][:2] == ("program", "sm_90") and "plain" in kinds["tmpl"][2]
    only = json.loads(kc("ls", "--json", "--kind", "program", root=root).stdout)
    assert sorted(e["kernel"] for e in only["entries"]) == ["default_program", "tmpl"]
    kernels = json.loads(kc("ls", "--json", "--kind", "kernel", root=root).stdout)
    assert [e["key"] for e in kernels["entries"]] == [kernel_key]
    table = kc("ls", "--kind", "program", root=root).stdout.decode()
    assert "add_one" in table and "axpy" not in table  # entry points in the Signature column
    bad = kc("ls", "--kind", "programs", root=root, check=2)
    assert b"invalid choice" in bad.stderr and b"kernel" in bad.stderr


def test_rm_and_export_choose_by_kind_as_ls_does(root, tmp_path):
    # 'kcache ls --kind program' listed them; rm and export refused '--kind' (usage error),
    # so removing or shipping a project's programs alone took a glob per program name
    kernel_key, _tmpl = _fill(root)
    shipped = tmp_path / "programs.kcb"
    kc("export", shipped, "--kind", "program", root=root)
    other = tmp_path / "other"
    kc("import", shipped, root=other)
    assert sorted(i.kernel for i in Store(other).entries()) == ["default_program", "tmpl"]
    dry = json.loads(kc("rm", "--kind", "program", "--dry-run", "--json", root=root).stdout)
    assert sorted(e["kernel"] for e in dry["removed"]) == ["default_program", "tmpl"]
    kc("rm", "--kind", "program", "--yes", root=root)
    assert [i.key for i in Store(root).entries()] == [kernel_key]
    none = kc("rm", "--kind", "program", "--yes", root=root, check=1)
    assert b"no entry matches --kind program: nothing removed" in none.stderr
    kc("rm", "--kind", "kernel", "--cc", "8.0", root=root, check=1)  # every switch must match
    assert [i.key for i in Store(root).entries()] == [kernel_key]


def test_show_artifact_writes_the_bytes_unchanged(root, tmp_path):
    _kernel, tmpl = _fill(root)
    want = Store(root).load(tmpl).artifacts["cubin"]
    out = tmp_path / "k.cubin"
    done = kc("show", tmpl[:10], "--artifact", "cubin", "-o", out, root=root)
    assert out.read_bytes() == want and b"wrote" in done.stderr
    assert kc("show", tmpl[:10], "--artifact", "cubin", "-o", "-", root=root).stdout == want
    doc = json.loads(kc("show", tmpl[:10], "--artifact", "cubin", "-o", out, "--json",
                        root=root).stdout)
    assert doc["bytes"] == len(want) and doc["artifact"] == "cubin"
    missing = kc("show", tmpl[:10], "--artifact", "ptx", "-o", out, root=root, check=1)
    assert b"no ptx (artifacts: cubin)" in missing.stderr
    kc("show", tmpl[:10], "--artifact", "cubin", root=root, check=2)
    shown = json.loads(kc("show", tmpl[:10], "--json", root=root).stdout)
    assert shown["kind"] == "program" and shown["components"]["producer"] == "program"


def test_stats_verify_prune_stale_follow_nvrtc(root):
    _kernel, tmpl = _fill(root)
    store = Store(root)
    entry, info = store.load(tmpl), store.header(tmpl)
    components = dict(info.components, toolchain={**info.components["toolchain"],
                                                  "nvrtc": "0.0.1"})
    old = make_key(components)
    assert store.put(old, entry, components=components)
    verify = kc("verify", "--json", root=root).stdout
    assert json.loads(verify)["checked"] == 4
    stale = json.loads(kc("ls", "--stale", "--json", root=root).stdout)["entries"]
    assert [e["key"] for e in stale] == [old]
    doc = json.loads(kc("prune", "--stale", "--json", root=root).stdout)
    assert [e["key"] for e in doc["removed"]] == [old] and doc["removed"][0]["kind"] == "program"
    assert json.loads(kc("stats", "--json", root=root).stdout)["entries"] == 3


def test_export_import_carry_programs(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    _fill(src)
    kc("export", tmp_path / "b.kcb", root=src)
    kc("import", tmp_path / "b.kcb", "--into", dst, root=dst)
    cache = kcache.ProgramCache(dst)
    assert len(cache) == 2
    Program(SRC, "c++", options=opts()).compile("cubin", cache=cache)
    hit = kcache.compile_program(TEMPLATE, "c++", opts(name="tmpl"), "cubin",
                                 name_expressions=NAMES, root=dst)
    assert list(hit.symbol_mapping) == list(NAMES)
    cache.close()
    stats = counters(dst)
    assert stats["hits"] == 2 and stats["compiles"] == 0


def test_push_pull_and_a_remote_hit_carry_programs(tmp_path, monkeypatch):
    src, dst = tmp_path / "src", tmp_path / "dst"
    _fill(src)
    remote = {"KCACHE_REMOTE": (tmp_path / "remote").as_uri()}
    (tmp_path / "remote").mkdir()
    pushed = json.loads(kc("push", "--json", root=src, env=remote).stdout)
    assert len(pushed["pushed"]) == 3 and pushed["failed"] == []
    kc("pull", root=dst, env=remote)
    assert sorted(i.key for i in Store(dst).entries()) == sorted(i.key for i in Store(src).entries())
    monkeypatch.setenv("KCACHE_REMOTE", remote["KCACHE_REMOTE"])
    third = tmp_path / "third"
    Program(SRC, "c++", options=opts()).compile("cubin", cache=kcache.ProgramCache(third))
    stats = counters(third)
    assert stats["remote_hits"] == 1 and stats["compiles"] == 0 and stats["hits"] == 1


def test_warm_replay_skips_programs(root):
    pytest.importorskip("numba.cuda")
    _kernel, tmpl = _fill(root)
    store = Store(root)
    info = store.header(tmpl)
    components = dict(info.components, toolchain={**info.components["toolchain"],
                                                  "cuda-core": "0.0.1"})
    old = make_key(components)
    assert store.put(old, store.load(tmpl), components=components)
    # without a TARGET, replay lists every stale kernel entry (exit 1): a program is not one
    doc = json.loads(kc("warm", "--replay", "--dry-run", "--json", root=root, check=1).stdout)
    assert [r for r in doc["results"] if r.get("key") in (old, tmpl)] == []


# --- the artifact reader ------------------------------------------------------------------

def test_artifact_reader_never_raises_on_damaged_bytes():
    cubin = bytes(Program(TEMPLATE, "c++", options=opts()).compile(
        "cubin", name_expressions=NAMES).code)
    assert artifacts.describe(None, cubin)["arch"] == "sm_90"
    rng = random.Random(20)
    for _ in range(300):
        data = bytearray(cubin[: rng.randrange(len(cubin) + 1)])
        for _flip in range(rng.randrange(4)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        seen = artifacts.describe(None, bytes(data))
        assert isinstance(seen["entry_points"], list)
        assert len(seen["entry_points"]) <= artifacts.MAX_ENTRY_POINTS
    ptx = b".version 8.8\n.target sm_90a\n.visible .entry k(\n)\n{}\n" + b".entry x()" * 1000
    assert artifacts.describe("ptx", ptx) == {"arch": "sm_90a",
                                              "entry_points": ["k"] + ["x"] * 255}


# --- on a GPU -----------------------------------------------------------------------------

LAUNCH = """
    import json, sys
    import numpy as np
    import kcache
    from cuda.core import Device, LaunchConfig, LegacyPinnedMemoryResource, Program, ProgramOptions, launch
    src, mode = sys.argv[1], sys.argv[2]
    dev = Device(); dev.set_current(); stream = dev.create_stream()
    options = ProgramOptions(arch=f"sm_{dev.arch}", name="scale")
    if mode == "cache":
        obj = Program(src, "c++", options=options).compile("cubin", cache=kcache.ProgramCache())
        kernel = obj.get_kernel("plain")
    else:
        obj = kcache.compile_program(src, "c++", options, "cubin",
                                     name_expressions=("scale<int>", b"scale<float>"))
        kernel = obj.get_kernel("scale<int>")
    buf = LegacyPinnedMemoryResource().allocate(32 * 4)
    host = np.from_dlpack(buf).view(np.int32)
    host[:] = np.arange(32, dtype=np.int32)
    if mode == "cache":
        launch(stream, LaunchConfig(grid=1, block=1), kernel, buf)
    else:
        launch(stream, LaunchConfig(grid=1, block=32), kernel, buf, np.int32(3))
    stream.sync()
    stats = kcache.Store().stats()  # another Store: the disk, before this process's exit flush
    print(json.dumps({"values": host[:4].tolist(), "disk_hits": stats.hits,
                      "disk_compiles": stats.compiles, "filelock": "filelock" in sys.modules}))
"""


@pytest.mark.gpu
def test_gpu_launches_programs_from_the_cache_and_from_a_bundle(tmp_path):
    try:
        from cuda.core import Device
        Device().set_current()
    except Exception as exc:  # no driver or no device
        pytest.skip(f"needs a CUDA GPU and driver ({type(exc).__name__})")
    root, other = tmp_path / "cache", tmp_path / "other"
    runs = []
    for mode, want in (("cache", [7, 1, 2, 3]), ("compile", [0, 3, 6, 9])):
        first = child(LAUNCH, TEMPLATE, mode, root=root, stderr=True)
        second = child(LAUNCH, TEMPLATE, mode, root=root, stderr=True)
        runs += [(mode, first), (mode, second)]
        assert first["values"] == second["values"] == want, runs
    stats = counters(root)
    assert (stats["compiles"], stats["hits"]) == (2, 2), (
        f"root's counters after the children exited: compiles={stats['compiles']}, "
        f"hits={stats['hits']} (want 2, 2); the children, in order: {runs}")
    kc("export", tmp_path / "b.kcb", root=root)
    kc("import", tmp_path / "b.kcb", "--into", other, root=other)
    runs = []
    for mode, want in (("cache", [7, 1, 2, 3]), ("compile", [0, 3, 6, 9])):
        runs.append((mode, child(LAUNCH, TEMPLATE, mode, root=other, stderr=True)))
        assert runs[-1][1]["values"] == want, runs
    stats = counters(other)
    assert (stats["compiles"], stats["hits"]) == (0, 2), (
        f"imported root's counters after the children exited: compiles={stats['compiles']}, "
        f"hits={stats['hits']} (want 0, 2); the children, in order: {runs}")

"""The main job (examples/main.py) on a machine without a GPU: it says so, warms the example
kernels and numba-cuda's cache_usecases kernels for cc 8.0 and 9.0 with ``kcache warm``,
exports them, imports the bundle into a fresh root whose ``kcache ls`` shows the same entries;
a second run finds everything cached. A process pointed at the imported root (with numba-cuda
patched to compile for a cc without a device, as tests/test_dispatcher_fakegpu.py does) loads
every kernel the GPU run launches, with the same argument types, from the cache: all hits, no
compile. Bad arguments are one line and exit status 2."""
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import clikit

pytest.importorskip("numba.cuda")

pytestmark = pytest.mark.slow  # the main job compiles every example for two ccs

REPO = Path(__file__).resolve().parents[1]
MAIN = REPO / "examples" / "main.py"
TESTS = Path(__file__).resolve().parent
#: A kernel's name on a line of its own, then a line per (signature, arch) under it.
KERNEL = re.compile(r"^  (\w+)$")
ROW = re.compile(r"^    (\S.*?) +(sm_80|sm_90a) +(compiled in \d+\.\d\d s|already cached) +"
                 r"([0-9a-f]{12})$")


def _rows(out: str) -> list:
    """``(kernel, arch, what, key)`` for each line warm's report printed (its signature
    aside), the kernel from the name line above it."""
    rows, kernel = [], None
    for line in out.split("\n\nIn a", 1)[0].split("\nkcache export", 1)[0].splitlines():
        named, row = KERNEL.match(line), ROW.match(line)
        if named:
            kernel = named.group(1)
        elif row:
            rows.append((kernel, row.group(2), row.group(3), row.group(4)))
    return rows
EXAMPLES = ["scaled_add", "clamp_square", "block_sum"]
USECASES = ["add_usecase_kernel", "add_nocache_usecase_kernel", "outer_kernel",
            "outer_uncached_kernel", "record_return", "record_return", "ambiguous_function",
            "many_locals", "simple_usecase_kernel"]


def _have_filecheck() -> bool:
    try:
        import filecheck  # noqa: F401  (numba.cuda.testing, imported by cache_usecases)
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def no_gpu():
    from numba import cuda
    if cuda.is_available():
        pytest.skip("a GPU is present: the main job runs its GPU path (tests/test_gpu.py)")


def _env(base: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env["HOME"] = env["XDG_CACHE_HOME"] = str(base / "home")  # never the user's cache
    return env


def _main(base, *args, cache_dir=None, work_dir=None):
    cache_dir = str(base / "cache") if cache_dir is None else cache_dir
    extra = ["--work-dir", str(work_dir)] if work_dir is not None else []
    return subprocess.run([sys.executable, str(MAIN), "--cache-dir", cache_dir, *extra, *args],
                          env=_env(base), cwd=base, capture_output=True, text=True, timeout=600)


def _ls(base, root) -> dict:
    proc = clikit.run(["ls", "--json", "--dir", str(root)], environ=_env(base))
    assert proc.returncode == 0, proc.stderr
    return {e["key"]: e for e in json.loads(proc.stdout)["entries"]}


def _stats(base, root) -> dict:
    proc = clikit.run(["stats", "--json", "--dir", str(root)], environ=_env(base))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def first_run(no_gpu, tmp_path_factory):
    """The main job once on an empty cache (work folder kept): (base, process)."""
    base = tmp_path_factory.mktemp("main-job")
    proc = _main(base, work_dir=base / "work")
    return base, proc


def test_without_gpu_warms_exports_and_imports(first_run):
    base, first = first_run
    assert first.returncode == 0, first.stderr[-3000:] + first.stdout[-3000:]
    out = first.stdout
    assert "No GPU found" in out and "not launched" in out
    assert "cc 8.0, 9.0 (sm_80, sm_90a)" in out
    assert f"Cache: {base / 'cache'}" in out
    rows = _rows(out)
    names = EXAMPLES + (USECASES if _have_filecheck() else [])
    assert [r[0] for r in rows] == [n for n in names for _arch in (0, 1)], out
    assert [r[1] for r in rows] == ["sm_80", "sm_90a"] * len(names)
    assert all(r[2].startswith("compiled in") for r in rows)
    n = len(rows)
    if _have_filecheck():
        assert "not compiled, no known signature: " \
               "numba.cuda.tests.cudapy.cache_usecases:inner" in out
    else:
        assert "skipping numba.cuda.tests.cudapy.cache_usecases" in out
    assert re.search(rf"^kcache warm: {n} compiled, 0 already cached, 0 failed in ", out, re.M)
    size = r"\d+(\.\d)? (B|KiB|MiB)"
    assert re.search(rf"^kcache export: {n} entries \({size}\) -> .*\({size}, ", out, re.M)
    assert re.search(rf"^kcache import: {n} entries added to {re.escape(str(base))}", out, re.M)
    assert f"Same {n} entries in both roots (every field of kcache ls --json)." in out
    # the listing printed is the imported root's: one row per entry under its kernel's name
    # (signature, arch, human size, key), then a total; no row wider than 80 columns
    listing = out.split("(kcache ls):\n", 1)[1].split("Same ", 1)[0].strip("\n").splitlines()
    assert re.fullmatch(rf"{n} entries, {size}", listing[-1].strip())
    entries = [line for line in listing[:-1] if line.startswith("    ")]
    assert len(entries) == n and {line.split()[-1] for line in entries} == {r[3] for r in rows}
    assert all(re.search(rf"{size}  [0-9a-f]{{12}}$", line) for line in entries), listing
    assert max(len(line) for line in out.splitlines() if line.startswith("  ")) <= 80
    # and it is so: the two roots list the same entries, those warm reported
    cache, imported = _ls(base, base / "cache"), _ls(base, base / "work" / "imported")
    assert cache.keys() == imported.keys() and len(cache) == n
    assert {k[:12] for k in cache} == {r[3] for r in rows}
    for key, entry in cache.items():
        assert {f: imported[key][f] for f in ("kernel", "signature", "arch", "file_size")} == \
               {f: entry[f] for f in ("kernel", "signature", "arch", "file_size")}


def test_second_run_finds_everything_cached(first_run):
    base, first = first_run
    assert first.returncode == 0
    second = _main(base, work_dir=base / "work")
    assert second.returncode == 0, second.stderr[-3000:]
    rows = _rows(second.stdout)
    assert [(r[0], r[1], r[3]) for r in rows] == [(r[0], r[1], r[3]) for r in _rows(first.stdout)]
    assert all(r[2] == "already cached" for r in rows)
    n = len(rows)
    # nothing compiled: warm's own process alone, as kcache warm's summary says ("2 jobs",
    # the --jobs setting, was printed)
    assert re.search(rf"^kcache warm: 0 compiled, {n} already cached, 0 failed in [\d.]+ s "
                     r"\(1 job\)$", second.stdout, re.M), second.stdout
    assert f"kcache import: 0 entries added to {base / 'work' / 'imported'}, {n} already there" \
           in second.stdout
    assert f"Same {n} entries" in second.stdout


def test_a_temporary_work_folder_is_not_named(first_run):
    """Without --work-dir the bundle and the imported root live in a temporary folder that is
    removed at the end: the job says so and prints no path of it (it would name nothing)."""
    base, first = first_run
    assert first.returncode == 0
    again = _main(base)
    assert again.returncode == 0, again.stderr[-3000:]
    out = again.stdout
    assert "kcache-main-" not in out and "/imported" not in out
    assert "\nIn a temporary folder, removed at the end (--work-dir DIR keeps it):\n" \
           "kcache export: " in out
    assert re.search(r"^kcache export: \d+ entries \(.*\) -> kernels\.kcb \(.*\)$", out, re.M)
    assert re.search(r"^kcache import: \d+ entries added to a fresh root, imported/$", out, re.M)
    assert "signature" not in out.split("(kcache ls):", 1)[1]  # no column it does not show


# What the GPU run launches (examples.kernels.run_all and examples.usecases.cases), compiled
# in a process pointed at the imported root for one cc, as a GPU of that cc would.
FROM_IMPORTED = textwrap.dedent("""
    import json, sys
    import numpy as np
    import kcache
    kcache.install("all")                     # as examples/main.py's GPU process does
    from examples import kernels, usecases
    from kcache.dispatcher import process_counts
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
    from kcache.dispatcher.sigspec import parse_signature
    from test_dispatcher_fakegpu import fake_gpu

    # run_all launches each example kernel with the argument types of its SIGNATURES
    launches = [(k, parse_signature(FRONTEND, sig)) for k, sigs in kernels.SIGNATURES.items()
                for sig in sigs]
    if sys.argv[2] == "1":
        launches += [(k, tuple(k.typeof_pyval(a) for a in args))
                     for _n, k, args, _e, _r in usecases.cases()]
    cc = tuple(int(p) for p in sys.argv[1].split("."))
    with fake_gpu(cc):
        for kernel, argtypes in launches:
            kernel.compile(argtypes)
    print(json.dumps({"launches": len(launches), "process": process_counts(),
                      "compiles": sum(k.stats.compiles for k, _a in launches),
                      "misses": sum(sum(k.stats.cache_misses.values()) for k, _a in launches)}))
""")


@pytest.mark.parametrize("cc", ["9.0", "8.0"])
def test_imported_root_serves_every_launch_without_compiling(first_run, cc):
    base, first = first_run
    assert first.returncode == 0
    imported = base / "work" / "imported"
    usecases = _have_filecheck()
    env = dict(_env(base), KCACHE_DIR=str(imported), PYTHONHASHSEED="4321",
               PYTHONPATH=os.pathsep.join([str(TESTS), str(REPO)]))
    before = len(_ls(base, imported)), _stats(base, imported)
    proc = subprocess.run([sys.executable, "-c", FROM_IMPORTED, cc, "1" if usecases else "0"],
                          env=env, cwd=base, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    kernels = 3 + (9 if usecases else 0)
    assert got["launches"] == kernels
    assert got["compiles"] == 0 and got["misses"] == 0, got
    assert got["process"] == {"hits": kernels}, got
    after = len(_ls(base, imported)), _stats(base, imported)
    assert after[0] == before[0]  # nothing added: every key was there
    # the root's counters, written at the process's exit: hits only
    assert {k: after[1][k] - before[1][k] for k in ("hits", "misses", "compiles", "puts")} == \
           {"hits": kernels, "misses": 0, "compiles": 0, "puts": 0}


def test_unsupported_cc_is_one_line_and_exit_2(no_gpu, tmp_path):
    proc = _main(tmp_path, "--cc", "99.9")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cc 99.9 is not supported" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "cache").exists()


def test_without_numba_cuda_is_one_line_and_exit_1(tmp_path):
    """kcache-cuda[mlir] alone (numba-cuda-mlir, no numba): one line naming the extra to
    install, not a ModuleNotFoundError traceback (a user trial)."""
    code = ("import runpy, sys; sys.modules['numba'] = None; sys.argv = [sys.argv[1]]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env["KCACHE_DIR"] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-c", code, str(MAIN)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "install kcache-cuda[cu13]" in lines[0], proc.stderr
    assert lines[0].startswith("examples/main.py: warms numba-cuda kernels") \
        and "docs/mlir.md" in lines[0]
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("option", ["--cache-dir", "--work-dir"])
@pytest.mark.parametrize("given", ["", "  "])
def test_empty_directory_option_is_one_line_and_exit_2(no_gpu, tmp_path, option, given):
    if option == "--cache-dir":
        proc = _main(tmp_path, cache_dir=given)
    else:
        proc = _main(tmp_path, work_dir=given)
    assert proc.returncode == 2, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{option} needs a directory path" in lines[0], proc.stderr
    assert not (tmp_path / "home").exists()  # the default cache was not used


def test_bad_cache_dir_is_named_as_the_option(no_gpu, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    proc = _main(tmp_path, cache_dir=str(afile))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "(from --cache-dir)" in lines[0], proc.stderr
    assert "KCACHE_DIR" not in proc.stderr

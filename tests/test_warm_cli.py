"""``kcache warm`` run as a command (subprocesses, no GPU): discovery of kernels and eager
signatures, signatures files, cached entries not compiled again (and not counted as hits),
failures reported while the rest goes on, usage errors as one line, and the same entries
whatever --jobs. Also numba-cuda's own module-level test kernels (cache_usecases.py)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import clikit
from servers import redis_url, unique_namespace  # noqa: F401

pytest.importorskip("numba.cuda")

# slow: each test compiles kernels in `kcache warm` processes; compat: tests/compat/run.sh
pytestmark = [pytest.mark.slow, pytest.mark.compat]

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_SIGS = REPO / "examples" / "kernels.sigs"
USECASE_SIGS = REPO / "examples" / "cache_usecases.sigs"


def env_for(home: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env["HOME"] = env["XDG_CACHE_HOME"] = str(home)  # never the user's cache
    env.update(extra)
    return env


def kcache(*args, root: Path, home: Path, cwd: Path = REPO, env: dict | None = None,
           timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m kcache ARGS --dir ROOT`` in ``cwd``."""
    return subprocess.run([sys.executable, "-m", "kcache", *map(str, args), "--dir", str(root)],
                          cwd=cwd, env=env or env_for(home), capture_output=True, text=True,
                          timeout=timeout)


def kcache_here(*args, root: Path, home: Path) -> subprocess.CompletedProcess:
    """``kcache ARGS --dir ROOT`` in this process (tests/clikit.py), for the commands whose
    output alone is checked (ls, stats): no numba, no process of its own to start."""
    return clikit.run([*map(str, args), "--dir", str(root)], environ=env_for(home))


def warm_json(*args, root, home, cwd=REPO, expect_rc=0, env=None) -> dict:
    proc = kcache("warm", *args, "--json", root=root, home=home, cwd=cwd, env=env)
    assert proc.returncode == expect_rc, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def statuses(doc) -> dict:
    """{status: count} of the results, checked against the summary."""
    counts: dict = {}
    for r in doc["results"]:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    assert counts == {s: n for s, n in doc["summary"].items() if n}
    return counts


# --- the examples: warm, ls, warm again, --jobs 2 ----------------------------------------------

@pytest.fixture(scope="module")
def examples_warm(tmp_path_factory):
    """examples/ warmed once for cc 8.0 and 9.0 (--jobs 1): (root, home, JSON report)."""
    base = tmp_path_factory.mktemp("warm-examples")
    root, home = base / "cache", base / "home"
    doc = warm_json("examples", "--signatures", EXAMPLE_SIGS, "--cc", "8.0,9.0", "--jobs", "1",
                    root=root, home=home)
    return root, home, doc


def test_warm_examples_then_ls_shows_the_entries(examples_warm):
    root, home, doc = examples_warm
    assert doc["summary"]["compiled"] == 6 and doc["summary"]["failed"] == 0, doc
    assert doc["cc"] == ["8.0", "9.0"] and doc["jobs"] == 1 and doc["root"] == str(root)
    results = doc["results"]
    assert {(r["kernel"].split(":")[1], r["arch"]) for r in results} == {
        (k, a) for k in ("scaled_add", "clamp_square", "block_sum") for a in ("sm_80", "sm_90a")}
    assert all(r["origin"].startswith(f"{EXAMPLE_SIGS}:") for r in results)
    assert all(r["compile_seconds"] > 0 and len(r["key"]) == 64 for r in results)
    listing = json.loads(kcache_here("ls", "--json", root=root, home=home).stdout)["entries"]
    assert {e["key"] for e in listing} == {r["key"] for r in results}
    assert {(e["kernel"], e["arch"]) for e in listing} == {(r["kernel"], r["arch"]) for r in results}
    # the folder also holds examples.mathbits (device functions only) and examples.main:
    # neither is a kernel, neither is reported
    assert doc["without_signatures"] == []


def test_second_warm_compiles_nothing_and_counts_no_hit(examples_warm):
    root, home, first = examples_warm
    again = warm_json("examples", "--signatures", EXAMPLE_SIGS, "--cc", "9.0,sm_80",
                      root=root, home=home)
    assert statuses(again) == {"cached": 6}
    assert {r["key"] for r in again["results"]} == {r["key"] for r in first["results"]}
    stats = json.loads(kcache_here("stats", "--json", root=root, home=home).stdout)
    assert stats["compiles"] == 6 and stats["hits"] == 0  # an existence check is not a hit


def test_entries_found_in_the_remote_are_reported_as_remote_hits(tmp_path, redis_url):  # noqa: F811
    """A warm of an empty root whose remote holds the kernels downloaded them and said
    '3 already cached', as if the root had held them: no row, field or line told a remote hit.
    They are cached rows still, each with "remote": true, "remote_hits" counts them, and the
    summary line and table say "from the remote"; a root that holds them says remote false."""
    pytest.importorskip("redis")
    env = {"KCACHE_REMOTE": redis_url, "KCACHE_REMOTE_NAMESPACE": unique_namespace()}
    args = ("examples", "--signatures", EXAMPLE_SIGS, "--cc", "9.0")
    first = warm_json(*args, root=tmp_path / "a", home=tmp_path / "h",
                      env=env_for(tmp_path / "h", **env))
    assert statuses(first) == {"compiled": 3} and first["remote_hits"] == 0
    assert [r["remote"] for r in first["results"]] == [False] * 3
    fetched = warm_json(*args, root=tmp_path / "b", home=tmp_path / "h",
                        env=env_for(tmp_path / "h", **env))
    assert statuses(fetched) == {"cached": 3} and fetched["remote_hits"] == 3
    assert [r["remote"] for r in fetched["results"]] == [True] * 3
    said = kcache("warm", *args, root=tmp_path / "c", home=tmp_path / "h",
                  env=env_for(tmp_path / "h", **env))
    assert said.returncode == 0 and "3 already cached (3 from the remote)" in said.stderr, said.stderr
    local = warm_json(*args, root=tmp_path / "b", home=tmp_path / "h",
                      env=env_for(tmp_path / "h", **env))
    assert statuses(local) == {"cached": 3} and local["remote_hits"] == 0


def test_jobs_2_makes_the_same_entries_as_jobs_1(examples_warm, tmp_path):
    _root, _home, first = examples_warm
    doc = warm_json("examples", "--signatures", EXAMPLE_SIGS, "--cc", "8.0", "--cc", "90",
                    "--jobs", "2", root=tmp_path / "cache", home=tmp_path / "home")
    assert doc["jobs"] == 2 and statuses(doc) == {"compiled": 6}
    assert doc["processes"] == 2  # 6 compiles: a worker beside this process
    assert sorted(r["key"] for r in doc["results"]) == sorted(r["key"] for r in first["results"])
    listing = json.loads(kcache_here("ls", "--json", root=tmp_path / "cache",
                                home=tmp_path / "home").stdout)["entries"]
    assert len(listing) == 6


def test_dry_run_lists_and_writes_nothing(examples_warm, tmp_path):
    root = tmp_path / "fresh"
    doc = warm_json("examples", "--signatures", EXAMPLE_SIGS, "--cc", "9.0", "--dry-run",
                    root=root, home=tmp_path / "home")
    assert statuses(doc) == {"would_compile": 3} and doc["dry_run"] is True
    assert not root.exists()
    # against the warmed root: what is there is reported as cached, with its key
    warmed, home, first = examples_warm
    doc = warm_json("examples", "--signatures", EXAMPLE_SIGS, "--cc", "9.0,7.5", "--dry-run",
                    root=warmed, home=home)
    assert statuses(doc) == {"cached": 3, "would_compile": 3}
    cached = {r["key"] for r in doc["results"] if r["status"] == "cached"}
    assert cached <= {r["key"] for r in first["results"]}


def test_check_fails_when_a_kernel_would_be_compiled_and_writes_nothing(examples_warm,
                                                                         tmp_path):
    """``--check``: a dry run whose exit status says whether the cache is up to date (a
    container build's check; ``--dry-run`` exits 0 whatever it lists)."""
    warmed, home, _first = examples_warm
    doc = warm_json("examples", "--signatures", EXAMPLE_SIGS, "--cc", "9.0", "--check",
                    root=warmed, home=home)
    assert statuses(doc) == {"cached": 3} and doc["check"] is True and doc["dry_run"] is True
    assert doc["processes"] == 1  # nothing to compile: no worker started
    before = sorted(p.name for p in warmed.rglob("*.kce"))
    proc = kcache("warm", "examples", "--signatures", EXAMPLE_SIGS, "--cc", "9.0,7.5",
                  "--check", root=warmed, home=home)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "kcache: warm: --check: 3 kernels would be compiled: the cache is not up to date "
        "(the rows marked would compile; KCACHE_EXPLAIN=1 says why)")
    assert sorted(p.name for p in warmed.rglob("*.kce")) == before  # nothing compiled


def test_dry_run_says_why_each_kernel_would_compile_under_explain(examples_warm):
    """``KCACHE_EXPLAIN=1`` with ``--dry-run``/``--check``: each would-compile row's reason
    is what the miss would log (the nearest entry's differing component), in the table's
    ``reason`` field and as a line after it; without it, no reason."""
    warmed, home, _first = examples_warm
    doc = warm_json("examples", "--signatures", EXAMPLE_SIGS, "--cc", "7.5", "--dry-run",
                    root=warmed, home=home)
    assert {r["reason"] for r in doc["results"]} == {None}
    doc = warm_json("examples", "--signatures", EXAMPLE_SIGS, "--cc", "7.5", "--dry-run",
                    root=warmed, home=home, env=env_for(home, KCACHE_EXPLAIN="1"))
    reasons = [r["reason"] for r in doc["results"] if r["status"] == "would_compile"]
    assert len(reasons) == 3 and all("sm_90a -> sm_75" in r for r in reasons), reasons
    proc = kcache("warm", "examples", "--signatures", EXAMPLE_SIGS, "--cc", "7.5", "--check",
                  root=warmed, home=home, env=env_for(home, KCACHE_EXPLAIN="1"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith("(the rows marked would compile)")


def test_entries_evicted_by_the_warm_itself_are_failures(tmp_path):
    """A size cap smaller than what the warm stores: the later puts evict the earlier
    entries. Those are not reported as compiled (a container build would ship a cache
    without them): each is a failure naming max_size, and the warm exits 1; every row
    still marked compiled or cached is in the cache."""
    root, home = tmp_path / "cache", tmp_path / "home"
    env = env_for(home, KCACHE_MAX_SIZE="30K")  # about one entry of 22 KiB
    doc = warm_json("examples", "--signatures", EXAMPLE_SIGS, "--cc", "8.0,9.0", "--jobs", "1",
                    root=root, home=home, env=env, expect_rc=1)
    counts = statuses(doc)
    listing = json.loads(kcache_here("ls", "--json", root=root, home=home).stdout)["entries"]
    kept = {e["key"] for e in listing}
    served = {r["key"] for r in doc["results"] if r["status"] in ("compiled", "cached")}
    assert served == kept and len(kept) == 1, (counts, kept)
    failed = [r for r in doc["results"] if r["status"] == "failed"]
    assert len(failed) == 5 and all("evicted" in r["reason"] and "max_size" in r["reason"]
                                    for r in failed), failed


def test_plain_output_is_a_table_and_progress_lines(examples_warm):
    root, home, _ = examples_warm
    proc = kcache("warm", "examples", "--signatures", EXAMPLE_SIGS, "--cc", "8.0", root=root,
                  home=home)
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.strip().splitlines()
    assert header.split("\t") == ["kernel", "display", "arch", "status", "key",
                                  "compile_seconds", "reason"]
    assert len(rows) == 3 and all(r.split("\t")[3] == "cached" for r in rows)
    progress = [l for l in proc.stderr.splitlines() if l.startswith("kcache: warm: [")]
    assert len(progress) == 3
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "kcache: warm: 0 compiled, 3 already cached, 0 failed in ")


# --- discovery: eager signatures, packages, tests skipped, failures ----------------------------

KERNELS = '''
from numba import cuda
import kcache
from mypkg import helpers

@cuda.jit("void(float32[::1])")
def eager_one(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = helpers.twice(a[i])

@cuda.jit(["void(float32[::1], float32)", "void(float64[::1], float64)"])
def eager_two(a, s):
    i = cuda.grid(1)
    if i < a.size:
        a[i] *= s

@kcache.jit("void(int32[::1])")
def via_kcache(a):
    a[0] = 1

@cuda.jit
def lazy(a):
    a[0] = 2

alias = eager_one  # found once
'''

HELPERS = '''
from numba import cuda

@cuda.jit("float32(float32)", device=True)  # an eager device function: compiled at import
def twice(x):
    return 2 * x
'''

IN_TESTS = '''
from numba import cuda

@cuda.jit("void(float32[::1])")
def kernel_in_tests(a):
    a[0] = 3
'''

BROKEN = '''
from numba import cuda

@cuda.jit("void(float32[::1])")
def fine(a):
    a[0] = 4

@cuda.jit("void(float32[::1])")
def broken(a):
    a[0] = no_such_global
'''


def make_package(base: Path, broken: bool = False) -> Path:
    """base/proj/mypkg: kernels.py, helpers.py, tests/test_k.py, test_more.py, conftest.py,
    and (``broken``) bad.py with one kernel that does not compile."""
    pkg = base / "proj" / "mypkg"
    (pkg / "tests").mkdir(parents=True)
    files = {"__init__.py": "", "kernels.py": KERNELS, "helpers.py": HELPERS,
             "tests/__init__.py": "", "tests/test_k.py": IN_TESTS, "test_more.py": IN_TESTS,
             "conftest.py": IN_TESTS, "__main__.py": "raise SystemExit('must not be imported')",
             "setup.py": "raise SystemExit('must not be imported')"}
    if broken:
        files["bad.py"] = BROKEN
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text))
    return pkg


def test_package_folder_eager_signatures_and_tests_skipped(tmp_path):
    pkg = make_package(tmp_path)
    root, home = tmp_path / "cache", tmp_path / "home"
    doc = warm_json(pkg, "--cc", "9.0", "--dry-run", root=root, home=home, cwd=tmp_path)
    found = sorted((r["kernel"], r["signature"]) for r in doc["results"])
    assert found == [
        ("mypkg.kernels:eager_one", "void(float32[::1])"),
        ("mypkg.kernels:eager_two", "void(float32[::1], float32)"),
        ("mypkg.kernels:eager_two", "void(float64[::1], float64)"),
        ("mypkg.kernels:via_kcache", "void(int32[::1])"),
    ], doc
    assert all(r["origin"] == "eager" and r["status"] == "would_compile" for r in doc["results"])
    assert doc["without_signatures"] == ["mypkg.kernels:lazy"]
    with_tests = warm_json(pkg, "--cc", "9.0", "--dry-run", "--include-tests", root=root,
                           home=home, cwd=tmp_path)
    extra = sorted({r["kernel"] for r in with_tests["results"]} -
                   {r["kernel"] for r in doc["results"]})
    assert extra == ["mypkg.conftest:kernel_in_tests", "mypkg.test_more:kernel_in_tests",
                     "mypkg.tests.test_k:kernel_in_tests"]
    # the same package given as a module name (looked up from the current folder)
    by_name = warm_json("mypkg", "--cc", "9.0", "--dry-run", root=root, home=home,
                        cwd=tmp_path / "proj")
    assert sorted((r["kernel"], r["signature"]) for r in by_name["results"]) == found


def test_eager_kernels_compile_to_the_keys_a_gpu_process_uses(tmp_path):
    pkg = make_package(tmp_path)
    root, home = tmp_path / "cache", tmp_path / "home"
    doc = warm_json(pkg / "kernels.py", "--cc", "8.0,9.0", root=root, home=home, cwd=tmp_path)
    assert statuses(doc) == {"compiled": 8}
    # Keys as the dispatcher computes them (kernel_key), from an import here
    code = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(tmp_path / 'proj')!r})
        from kcache.dispatcher import discover
        from kcache.dispatcher.frontends.numba_cuda import eager as _nc_eager
        from kcache.dispatcher.dispatcher import kernel_key
        from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
        ref = discover.ModuleRef("mypkg.kernels", None, "t")
        mod = discover.import_module(FRONTEND, ref, (9, 0))
        keys = []
        for k in discover.kernels_of(FRONTEND, mod):
            for sig in _nc_eager.eager_signatures(k.dispatcher):
                for cc in ((8, 0), (9, 0)):
                    keys.append(kernel_key(FRONTEND, k.dispatcher, sig, cc, None, None)[0])
        print(json.dumps(keys))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env_for(home), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert sorted(json.loads(proc.stdout)) == sorted(r["key"] for r in doc["results"])


def test_a_kernel_that_fails_is_reported_and_the_rest_compile(tmp_path):
    pkg = make_package(tmp_path, broken=True)
    doc = warm_json(pkg / "bad.py", pkg / "kernels.py", "--cc", "9.0", "--jobs", "2",
                    root=tmp_path / "cache", home=tmp_path / "home", cwd=tmp_path, expect_rc=1)
    assert statuses(doc) == {"compiled": 5, "failed": 1}
    [failed] = [r for r in doc["results"] if r["status"] == "failed"]
    assert failed["kernel"] == "mypkg.bad:broken" and failed["key"] is None
    assert "no_such_global" in failed["reason"] and "\n" not in failed["reason"]


def test_a_module_that_fails_to_import_is_reported(tmp_path):
    pkg = make_package(tmp_path)
    (pkg / "noimport.py").write_text("import no_such_module_here\n")
    doc = warm_json(pkg, "--cc", "9.0", "--dry-run", root=tmp_path / "cache",
                    home=tmp_path / "home", cwd=tmp_path, expect_rc=1)
    [failed] = [r for r in doc["results"] if r["status"] == "failed"]
    assert failed["kernel"] == "mypkg.noimport" and failed["origin"] == "import"
    assert "ModuleNotFoundError" in failed["reason"]
    assert doc["summary"]["would_compile"] == 4



# --- a warm that warms nothing fails the build --------------------------------------------------

def test_warm_without_signatures_or_kernels_exits_1(tmp_path):
    """The user forgot --signatures, or named an empty folder: nothing compiled and nothing
    cached is exit status 1 with a line saying so, not a passing build step."""
    root, home = tmp_path / "cache", tmp_path / "home"
    for extra in ((), ("--dry-run",)):
        proc = kcache("warm", "examples", "--cc", "9.0", *extra, root=root, home=home)
        assert proc.returncode == 1, proc.stderr
        last = proc.stderr.strip().splitlines()[-2:]
        assert last[0].startswith("kcache: warm: 3 kernels without a known signature, not "
                                  "compiled: examples.kernels:"), proc.stderr
        done = "would be compiled" if extra else "was compiled"
        assert last[1] == f"kcache: warm: warmed nothing: no kernel {done} and none is cached"
    empty = tmp_path / "empty"
    empty.mkdir()
    doc = warm_json(empty, "--cc", "9.0", root=root, home=home, expect_rc=1)
    assert doc["results"] == [] and doc["summary"]["compiled"] == 0
    proc = kcache("warm", empty, "--cc", "9.0", root=root, home=home)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        "kcache: warm: 0 compiled, 0 already cached, 0 failed in "
        + proc.stderr.split(" failed in ", 1)[1].splitlines()[0],
        "kcache: warm: warmed nothing: no kernel was compiled and none is cached"]
    assert not root.exists()  # and nothing was written


def test_strict_fails_on_a_kernel_without_a_known_signature(tmp_path, examples_warm):
    pkg = make_package(tmp_path)
    root, home = tmp_path / "cache", tmp_path / "home"
    doc = warm_json(pkg, "--cc", "9.0", "--dry-run", "--strict", root=root, home=home,
                    cwd=tmp_path, expect_rc=1)
    assert doc["strict"] is True and doc["without_signatures"] == ["mypkg.kernels:lazy"]
    assert doc["summary"]["would_compile"] == 4
    proc = kcache("warm", pkg, "--cc", "9.0", "--dry-run", "--strict", root=root, home=home,
                  cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "kcache: warm: --strict: 1 kernel found without a known signature")
    # every kernel has its signature: --strict passes
    warmed, home, _ = examples_warm
    again = warm_json("examples", "--signatures", EXAMPLE_SIGS, "--cc", "9.0", "--strict",
                      root=warmed, home=home)
    assert statuses(again) == {"cached": 3} and again["without_signatures"] == []


DIES_IN_WORKERS = '''
import multiprocessing, os
from numba import cuda

if multiprocessing.parent_process() is not None:  # a warm worker, not the warm command
    os._exit(3)  # as a crash in NVVM would end it

@cuda.jit("void(float32[::1])")
def k1(a):
    a[0] = 1

@cuda.jit("void(float32[::1])")
def k2(a):
    a[0] = 2

@cuda.jit("void(float32[::1])")
def k3(a):
    a[0] = 3
'''


def test_a_worker_that_dies_fails_its_task_and_the_rest_compile(tmp_path):
    pkg = make_package(tmp_path)
    (pkg / "dies.py").write_text(DIES_IN_WORKERS)
    doc = warm_json(pkg / "dies.py", "--cc", "8.0,9.0", "--jobs", "2", root=tmp_path / "cache",
                    home=tmp_path / "home", cwd=tmp_path, expect_rc=1)
    assert statuses(doc) == {"compiled": 5, "failed": 1}, doc["results"]
    [failed] = [r for r in doc["results"] if r["status"] == "failed"]
    assert failed["reason"].startswith("worker process failed: BrokenProcessPool")

# --- usage errors: one line, exit 2 ----------------------------------------------------------

USAGE_ERRORS = [
    (["no/such/dir", "--cc", "9.0"], "TARGET no/such/dir: no such file or folder"),
    (["no_such_module_xyz", "--cc", "9.0"], "no such file, folder or module"),
    (["not a module", "--cc", "9.0"], "not a module name"),
    (["examples"], "warm needs --cc"),
    (["--cc", "9.0"], "warm needs a TARGET, --signatures FILE or --replay"),
    (["examples", "--cc", "ninety"], "--cc ninety: not a compute capability; use MAJOR.MINOR"),
    (["examples", "--cc", "sm_99x"], "use one the installed CUDA toolkit supports: "),
    (["examples", "--cc", "8.0,,9.0"], "empty compute capability"),
    (["examples", "--cc", "99.9"], "cc 99.9 is not supported by the installed CUDA toolkit"),
    (["examples", "--cc", "9.0", "--jobs", "0"], "must be 1 to 256"),
    (["examples", "--cc", "9.0", "--signatures", "/no/such.sigs"],
     "/no/such.sigs: cannot read the signatures file"),
]

#: One process runs every case of USAGE_ERRORS in turn (tests/clikit.py: each as a fresh
#: process would, in the folder of the case): `kcache warm` imports numba-cuda (~2 s a
#: process) before it can judge a --cc, and the cases are about the message, not the process.
USAGE_CHILD = """
import json, os, sys
import clikit
from servers import redis_url, unique_namespace  # noqa: F401
out = []
for args, root, home in json.loads(sys.argv[1]):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env["HOME"] = env["XDG_CACHE_HOME"] = home
    done = clikit.run(["warm", *args, "--dir", root], environ=env)
    out.append([done.returncode, done.stdout, done.stderr])
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def usage_runs(tmp_path_factory):
    """[(status, stdout, stderr, root)] of each case of USAGE_ERRORS, in order."""
    base = tmp_path_factory.mktemp("warm-usage")
    cases = [(args, str(base / f"c{i}" / "cache"), str(base / f"c{i}" / "home"))
             for i, (args, _) in enumerate(USAGE_ERRORS)]
    env = env_for(base / "home", PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO / "tests"), os.environ.get("PYTHONPATH", "")) if p))
    proc = subprocess.run([sys.executable, "-c", USAGE_CHILD, json.dumps(cases)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [(*done, Path(root)) for done, (_, root, _) in zip(json.loads(proc.stdout), cases)]


@pytest.mark.parametrize("case", range(len(USAGE_ERRORS)),
                         ids=[f"args{i}-{c}" for i, (_, c) in enumerate(USAGE_ERRORS)])
def test_usage_errors_are_one_line_exit_2(usage_runs, case):
    status, stdout, stderr, root = usage_runs[case]
    complaint = USAGE_ERRORS[case][1]
    assert status == 2, stdout + stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and complaint in lines[0], stderr
    assert stdout == "" and not root.exists()


def test_bad_signatures_line_names_file_and_line(tmp_path):
    sigs = tmp_path / "bad.sigs"
    sigs.write_text("# ok\nexamples.kernels:scaled_add void(float32[::1], float32[::1], "
                    "float32[::1])\nexamples.kernels:block_sum void(float32[::1], flaot32[::1])\n")
    proc = kcache("warm", "--signatures", sigs, "--cc", "9.0", root=tmp_path / "cache",
                  home=tmp_path / "home")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kcache: {sigs}:3: 'flaot32' is not a numba "
                                                   "type name"), proc.stderr


def test_a_module_that_fails_to_import_is_a_row_naming_its_line(tmp_path):
    # a typo in an eager signature raises in numba's parser: the row says the user's line
    project = tmp_path / "proj"
    project.mkdir()
    (project / "typo.py").write_text('from numba import cuda\n\n\n@cuda.jit("void(flaot32[::1])")\n'
                                     "def k(a):\n    a[0] = 1\n")
    doc = warm_json("--cc", "9.0", project / "typo.py", root=tmp_path / "cache",
                    home=tmp_path / "home", expect_rc=1)
    [row] = doc["results"]
    assert row["status"] == "failed"
    # the decorator's line (Python 3.11+) or the def's (3.10 reports a decorator call there)
    assert re.match(r"cannot import typo \(typo\.py:[45]\): NameError: name 'flaot32'",
                    row["reason"]), row["reason"]


def test_an_unknown_frontend_is_one_line_naming_what_is_accepted(tmp_path):
    proc = kcache("warm", "--frontend", "mlr", "--cc", "9.0", root=tmp_path / "cache",
                  home=tmp_path / "home")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "'mlr' is not a front-end" in lines[0] and \
        "numba-cuda, numba-cuda-mlir (or mlir)" in lines[0], proc.stderr


def test_unwritable_root_is_one_line_and_compiles_nothing(tmp_path):
    # A root in /proc cannot be created, whoever runs the tests (root included).
    root = Path("/proc") / f"kcache-warm-test-{os.getpid()}"
    proc = kcache("warm", "examples", "--signatures", EXAMPLE_SIGS, "--cc", "9.0", root=root,
                  home=tmp_path / "home")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kcache: cannot write to {root} ")
    assert lines[0].endswith("nothing was compiled") and proc.stdout == ""


# --- the main job's real input: numba-cuda's own module-level test kernels ---------------------

def test_numba_cuda_cache_usecases_for_80_and_90(tmp_path):
    pytest.importorskip("filecheck")  # numba.cuda.testing (imported by cache_usecases) needs it
    root, home = tmp_path / "cache", tmp_path / "home"
    doc = warm_json("numba.cuda.tests.cudapy.cache_usecases", "--signatures", USECASE_SIGS,
                    "--cc", "8.0,9.0", root=root, home=home)
    assert statuses(doc) == {"compiled": 18}, doc["results"]
    compiled = {(r["kernel"].split(":")[1], r["arch"]) for r in doc["results"]}
    assert {k for k, _ in compiled} == {
        "add_usecase_kernel", "add_nocache_usecase_kernel", "outer_kernel",
        "outer_uncached_kernel", "record_return", "ambiguous_function", "many_locals",
        "simple_usecase_kernel"}
    # `inner` returns a value (a device function in all but name): found, not compiled
    assert doc["without_signatures"] == ["numba.cuda.tests.cudapy.cache_usecases:inner"]
    # the keys are those compile_for computes for the argument types of real launches
    code = textwrap.dedent("""
        import json
        import numpy as np
        from numba.cuda.tests.cudapy import cache_usecases as cu
        from kcache.dispatcher.dispatcher import kernel_key
        from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
        f64, i64 = np.zeros((), np.float64), np.zeros((), np.int64)
        cases = [(cu.add_usecase_kernel, (f64, f64, f64)), (cu.add_nocache_usecase_kernel, (f64, f64, f64)),
                 (cu.outer_kernel, (f64, f64, f64)), (cu.outer_uncached_kernel, (f64, f64, f64)),
                 (cu.record_return, (np.zeros((), cu.packed_arr.dtype), cu.packed_arr, 1)),
                 (cu.record_return, (np.zeros((), cu.aligned_arr.dtype), cu.aligned_arr, 1)),
                 (cu.ambiguous_function, (f64, f64)), (cu.many_locals, ()),
                 (cu.simple_usecase_kernel, (i64, i64))]
        print(json.dumps([kernel_key(FRONTEND, k, tuple(k.typeof_pyval(a) for a in args), cc,
                                     None, None)[0]
                          for k, args in cases for cc in ((8, 0), (9, 0))]))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env_for(home), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert sorted(json.loads(proc.stdout)) == sorted(r["key"] for r in doc["results"])


@pytest.mark.parametrize("blocked, named", [("numba", "numba-cuda"),
                                            ("numba_cuda_mlir", "numba-cuda-mlir")])
def test_warm_names_the_extra_of_a_front_end_not_installed_as_kcache_jit_does(
        tmp_path, blocked, named):
    """``kcache warm --frontend NAME`` without that front-end: one line naming the extras
    that install it, the same text as ``kcache.jit(frontend=NAME)``'s error
    (``frontends.INSTALL``: the CUDA 12 extra too), not a list of its own."""
    from kcache.dispatcher import frontends
    code = (f"import sys; sys.modules[{blocked!r}] = None; from kcache.cli.main import main; "
            "sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, "--dir", str(tmp_path / "c"), "warm",
                           "examples", "--cc", "9.0", "--frontend", named],
                          capture_output=True, text=True, cwd=REPO, timeout=120,
                          env=env_for(tmp_path / "home"))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"kcache: warm needs {named} ("), line
    assert line.endswith(f"; install {frontends.INSTALL[named]}"), line


def _state(pid: int) -> str | None:
    """The process's state letter (None: no such process; 'Z': ended, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def test_a_worker_ends_when_its_warm_process_is_killed(tmp_path):
    """kcache warm killed (SIGKILL: the OOM killer, a CI job's time limit) left its spawned
    workers waiting for good, each an interpreter with numba loaded: a worker holds both ends
    of its task queue and never saw it end. Here the worker stops in its first task (the
    module's import) until its parent is gone. What it counted before is written as it ends
    (its own ending, os._exit, skipped multiprocessing's exit flush: counts were lost)."""
    import signal
    import time
    mods, marker = tmp_path / "mods", tmp_path / "worker.pid"
    mods.mkdir()
    (mods / "held.py").write_text(textwrap.dedent(f"""\
        import multiprocessing, os, threading
        from numba import cuda

        if multiprocessing.parent_process() is not None:  # in a warm worker: stay here
            import kcache
            kcache.Store({str(tmp_path / "cache")!r}).record(seconds_saved=1000)  # batched
            with open({str(marker) + ".tmp"!r}, "w") as f:
                f.write(str(os.getpid()))
            os.replace({str(marker) + ".tmp"!r}, {str(marker)!r})
            threading.Event().wait()


        @cuda.jit("void(float32[::1])", cache=True)
        def k(x):
            x[0] = 1.0


        @cuda.jit("void(float64[::1])", cache=True)
        def j(x):
            x[0] = 2.0
        """))  # 4 compiles: one worker (warm.TASKS_PER_WORKER)
    warm = subprocess.Popen(
        [sys.executable, "-m", "kcache", "warm", "--cc", "8.0,9.0", "--jobs", "2",
         str(mods / "held.py"), "--dir", str(tmp_path / "cache")], cwd=mods,
        env=env_for(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and warm.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # a poll for the worker's marker, with a deadline
        assert marker.exists(), f"no worker took a task (warm exit status {warm.poll()})"
        worker = int(marker.read_text())
        assert _state(worker) not in (None, "Z")
        warm.kill()
        warm.wait(30)
        deadline = time.monotonic() + 30
        while _state(worker) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(worker) in (None, "Z"), "the worker outlived its kcache warm process"
        from kcache import Store
        assert Store(tmp_path / "cache").stats().seconds_saved == 1000  # the worker's count
    finally:
        warm.kill()
        if worker is not None and _state(worker) not in (None, "Z"):
            os.kill(worker, signal.SIGKILL)

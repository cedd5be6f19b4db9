"""Build here, run there (issue 9): kernels warmed under one path by one user with one HOME,
the code copied to another path (new mtimes), the cache copied (a root-owned read-only layer,
as ``COPY`` makes it) or exported and imported, then used by another user with another HOME
and another PYTHONHASHSEED: every kernel is a hit. Without a GPU a hit means: the keys the
runtime process computes (``kcache warm --dry-run`` and ``compile_for_report``, i.e.
``kernel_key``) are exactly the warmed entries' keys, and nothing is compiled.

No absolute build path is in any entry (key components, header or artifacts), except in a
``lineinfo=True`` kernel: its PTX names its source file (``.file``), so its key covers the
path (docs/keys.md, "Line numbers") and a relocated copy is a miss. That is checked too.

Two real users made by the test (tests/userkit.py): needs root (CI runs as root); skipped
otherwise. No GPU; no Docker.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("numba.cuda")

from userkit import run_as, shared_base, users, probe  # noqa: E402

pytestmark = pytest.mark.slow  # warms, exports and imports as other users

REPO = Path(__file__).resolve().parents[1]
CCS = "8.0,9.0"
SECRET = "relocation test secret"
TRACED = '''\
from numba import cuda

from examples import mathbits


@cuda.jit(lineinfo=True, cache=True)
def traced_axpy(x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = mathbits.axpy(2.0, x[i], y[i])
'''
TRACED_SIG = "examples.traced:traced_axpy  void(float32[::1], float32[::1], float32[::1])\n"

# What the runtime process does first with each kernel: compile_for_report looks the key up
# and reports cached=True without compiling (kernel_key, as a launch computes it).
RUNTIME_CHECK = '''
import json
import kcache
from kcache.dispatcher import compile_for_report
from examples import kernels
store = kcache.Store()
rows = []
for kernel, sigs in kernels.SIGNATURES.items():
    for r in compile_for_report(kernel, sigs, cc=[(8, 0), (9, 0)], store=store):
        rows.append([r.key, r.cached])
st = store.stats()
print(json.dumps({"rows": rows, "compiles": st.compiles, "puts": st.puts,
                  "trusted": store.trusted, "untrusted": {str(k): v for k, v in store.untrusted.items()}}))
'''


def _tree_chmod(root: Path) -> None:
    """``chmod -R a+rX,go-w root``: what docs/containers.md has the build stage run."""
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode & 0o777
        add = 0o555 if path.is_dir() else 0o444
        os.chmod(path, (mode | add) & ~0o022)


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    for path in [root, *root.rglob("*")]:
        os.chown(path, uid, gid, follow_symlinks=False)


def _env(home: Path, seed: str, **extra) -> dict:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "PYTHONHASHSEED": seed, "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
    env.update({k: str(v) for k, v in extra.items()})
    return env


class World:
    """Everything the tests look at, made once (see the fixture)."""


@pytest.fixture(scope="module")
def world():
    base = shared_base("kcache-reloc-")
    try:
        with users("build", "run") as u:
            w = World()
            w.base, w.build, w.run = base, u["build"], u["run"]
            stage = base / "mounts"
            stage.mkdir(mode=0o700)
            w.stage = stage
            _build(w)
            _relocate(w)
            yield w
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _kcache(w, user, *args, env, cwd):
    return run_as(user, [sys.executable, "-m", "kcache", *args], env=env, cwd=cwd, stage=w.stage)


def _build(w: World) -> None:
    """As user ``build``, HOME /…/build/home, PYTHONHASHSEED 1: warm <base>/build/app (a copy
    of examples/ plus a lineinfo kernel) for cc 8.0 and 9.0, and export it, signed."""
    build = w.base / "build"
    app = build / "app"
    shutil.copytree(REPO / "examples", app / "examples",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (app / "examples" / "traced.py").write_text(TRACED)
    (app / "traced.sigs").write_text(TRACED_SIG)
    (build / "home").mkdir()
    (build / "secret").write_text(SECRET)
    os.chmod(build / "secret", 0o600)
    _chown_tree(build, w.build.uid, w.build.gid)
    w.build_app, w.build_home, w.build_cache = app, build / "home", build / "cache"
    env = _env(w.build_home, "1", KCACHE_DIR=w.build_cache)
    probe(w.build, w.stage, env)
    done = _kcache(w, w.build, "warm", "examples", "--signatures", "examples/kernels.sigs",
                   "--signatures", "traced.sigs", "--cc", CCS, "--json", env=env, cwd=app)
    assert done.returncode == 0, done.stderr[-3000:]
    w.warmed = {(r["kernel"], r["cc"]): r["key"] for r in json.loads(done.stdout)["results"]
                if r["status"] == "compiled"}
    assert len(w.warmed) == 8, w.warmed  # 3 example kernels + the lineinfo one, 2 ccs
    done = _kcache(w, w.build, "export", build / "kernels.kcb", "--secret-file", build / "secret",
                   "--json", env=env, cwd=app)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["signed"] is True


def _relocate(w: World) -> None:
    """What an image build does next, as root: the code to <base>/app with new mtimes, the
    cache to <base>/opt/kcache (root-owned, a+rX, go-w), the bundle to <base>/opt (0644); the
    runtime user gets a HOME of its own and its copy of the secret."""
    w.app = w.base / "app"
    shutil.copytree(w.build_app, w.app, copy_function=shutil.copy)  # root-owned, new mtimes
    later = time.time() + 3600
    for path in w.app.rglob("*"):
        os.utime(path, (later, later))
    _chown_tree(w.app, 0, 0)
    opt = w.base / "opt"
    opt.mkdir(mode=0o755)
    w.layer = opt / "kcache"
    shutil.copytree(w.build_cache, w.layer, copy_function=shutil.copy)  # modes kept: 0700/0600
    _chown_tree(w.layer, 0, 0)
    _tree_chmod(w.layer)
    w.bundle = opt / "kernels.kcb"
    shutil.copy(w.base / "build" / "kernels.kcb", w.bundle)
    os.chmod(w.bundle, 0o644)
    w.run_home = w.base / "runhome"
    w.run_home.mkdir(mode=0o700)
    (w.run_home / "secret").write_text(SECRET)
    _chown_tree(w.run_home, w.run.uid, w.run.gid)


def _run_env(w, **extra) -> dict:
    return _env(w.run_home, "2", **extra)


def _dry_run(w, env) -> dict:
    done = _kcache(w, w.run, "warm", "examples", "--signatures", "examples/kernels.sigs",
                   "--signatures", "traced.sigs", "--cc", CCS, "--dry-run", "--json",
                   env=env, cwd=w.app)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "not trusted" not in done.stderr, done.stderr
    return {(r["kernel"], r["cc"]): (r["status"], r["key"])
            for r in json.loads(done.stdout)["results"]}


def _check_hits(w, seen: dict) -> None:
    """Every kernel but the lineinfo one: already cached, under the very key warmed."""
    assert seen.keys() == w.warmed.keys()
    for (kernel, cc), key in w.warmed.items():
        status, got = seen[(kernel, cc)]
        if kernel == "examples.traced:traced_axpy":
            # its PTX names the source file: another path, another key (docs/keys.md)
            assert status == "would_compile" and got != key, (kernel, cc)
        else:
            assert (status, got) == ("cached", key), (kernel, cc)


def test_copied_cache_as_a_read_only_layer_serves_every_kernel(world):
    w = world
    env = _run_env(w, KCACHE_DIR=w.run_home / "cache", KCACHE_READONLY_DIRS=w.layer)
    _check_hits(w, _dry_run(w, env))


def test_exported_and_imported_cache_serves_every_kernel(world):
    w = world
    imported = w.run_home / "imported"
    env = _run_env(w, KCACHE_DIR=imported)
    done = _kcache(w, w.run, "import", w.bundle, "--secret-file", w.run_home / "secret", "--json",
                   env=env, cwd=w.app)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["imported"]) == 8
    _check_hits(w, _dry_run(w, env))


def test_runtime_process_finds_every_key_and_compiles_nothing(world):
    w = world
    env = _run_env(w, KCACHE_DIR=w.run_home / "cache2", KCACHE_READONLY_DIRS=w.layer)
    done = run_as(w.run, [sys.executable, "-c", RUNTIME_CHECK], env=env, cwd=w.app,
                  stage=w.stage)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["trusted"] and got["untrusted"] == {}
    examples = {key for (kernel, _cc), key in w.warmed.items() if kernel.startswith("examples.kernels:")}
    assert sorted(k for k, _cached in got["rows"]) == sorted(examples)
    assert all(cached for _k, cached in got["rows"]) and got["compiles"] == 0 and got["puts"] == 0


def _entries(w) -> dict:
    """{key: entry file bytes} of the build cache."""
    return {p.stem: p.read_bytes() for p in (w.build_cache / "v1" / "entries").rglob("*.kce")}


def _header(w, key) -> str:
    done = _kcache(w, w.build, "show", key, "--json", env=_env(w.build_home, "1",
                   KCACHE_DIR=w.build_cache), cwd=w.build_app)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    return json.dumps({"components": doc["components"], "meta": doc["meta"], "key": doc["key"]})


def test_no_build_path_in_entries_but_in_the_lineinfo_kernels_ptx(world):
    w = world
    files = _entries(w)
    assert set(files) == set(w.warmed.values())
    build_paths = [str(w.build_app), str(w.build_home), str(w.base / "build")]
    traced = {key for (kernel, _cc), key in w.warmed.items() if kernel.endswith(":traced_axpy")}
    for key, data in files.items():
        header = _header(w, key)
        assert not any(p in header for p in build_paths), key  # key components and header
        if key in traced:
            # lineinfo: the PTX's .file directive names the build path (and the key covers it)
            assert f'"{w.build_app}/examples/traced.py"'.encode() in data, key
        else:
            assert not any(p.encode() in data for p in build_paths), key  # nowhere in the file

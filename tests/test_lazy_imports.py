"""What ``KCACHE_ENABLE=1`` imports, and when (issue 19, "fast where users measure it").

In fresh processes (``sys.modules`` is per process):

* after ``import numba.cuda`` with ``KCACHE_ENABLE=1`` (the hook installs kcache), neither
  the store nor the key is imported: they come with the first cached kernel;
* a process served from the cache (kernel defined, store opened, a hit, a miss read) never
  imports filelock (only a write or a counter flush takes a lock), the remote tiers, rich,
  the command line, maintenance, the reports, bundles or ``compile_for``;
* the public names stay importable from where they were (``kcache.Store``,
  ``kcache.dispatcher.compile_for``, ``kcache.store.PruneReport``, ...).
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba.cuda")
pytestmark = pytest.mark.exec_children  # what a fresh interpreter imports

#: never imported by a process that only defines kernels and is served from the cache: the
#: lock library and the locks (a write, a compile or maintenance takes one), the remote tier and
#: its clients, bundles, the store's maintenance and reports, the command line, the cuda.core
#: producer, the dispatcher's write/report modules, and the old import paths (kept for users)
NOT_ON_A_HIT = ("filelock", "rich", "redis", "fsspec", "kcache.disk.locks", "kcache.tiers.remote",
                "kcache.tiers.bundle", "kcache.store.maintenance", "kcache.store.reports",
                "kcache.cli", "kcache.programs",
                "kcache.fsio", "kcache.paths", "kcache.locks", "kcache.stats", "kcache.prune",
                "kcache.bundle", "kcache.remote", "kcache.artifacts",
                "kcache.dispatcher.aot", "kcache.dispatcher.warm", "kcache.dispatcher.sigfile",
                "kcache.dispatcher.misses",
                # a compile's warnings and the grammar of signatures: imported when first used
                "kcache.dispatcher.compile_warnings", "kcache.dispatcher.sigspec")

CHILD = """
    import json, os, sys
    import numba.cuda
    from numba import cuda, types
    import kcache._hook                   # KCACHE_ENABLE=1: installs now, as the .pth does
    from kcache.dispatcher.frontends.numba_cuda import internals as _nc_internals
    from kcache.dispatcher.frontends.numba_cuda import offline as _nc_offline
    from kcache.dispatcher.frontends.numba_cuda import signatures as _nc_signatures
    after_import = sorted(sys.modules)

    @cuda.jit(cache=True)
    def k(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = 2 * a[i]

    from kcache.dispatcher.process import STATE
    STATE.default_store.get("ab" * 32)  # a miss read: no write, no lock
    if os.environ.get("CALL"):            # compile (fill) or serve (hit) through a fake GPU
        with _nc_offline.offline_target((9, 0)):
            _nc_signatures.current_cc = lambda: (9, 0)
            _nc_internals.Kernel.bind = lambda self: self._codelibrary.get_cubin()
            k.compile((types.float32[::1],))
    print(json.dumps({"after_import": after_import, "served": sorted(sys.modules),
                      "hits": k.stats.cache_hits[(types.float32[::1],)] if os.environ.get("CALL") else 0,
                      "installed": __import__("kcache.dispatcher").dispatcher.installed()}))
    os._exit(0)                           # the exit-time counter flush would import filelock
"""


def child(tmp_path, **env) -> dict:
    full = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    full.update({"KCACHE_ENABLE": "1", "KCACHE_DIR": str(tmp_path / "cache"), **env})
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD)], env=full,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def imported(modules, names):
    return sorted(m for m in modules for n in names if m == n or m.startswith(n + "."))


def test_import_with_the_hook_leaves_the_store_and_key_for_the_first_kernel(tmp_path):
    res = child(tmp_path)
    assert res["installed"] == "cache"
    assert imported(res["after_import"], ("kcache.store", "kcache.dispatcher.frontends.numba_cuda.dispatcher",
                                          "kcache.dispatcher.fingerprint", "msgpack",
                                          *NOT_ON_A_HIT)) == []
    assert "kcache.store" in res["served"]  # the first cached kernel opened it
    assert imported(res["served"], NOT_ON_A_HIT) == []


@pytest.mark.slow
def test_a_hit_imports_no_lock_remote_or_maintenance(tmp_path):
    filled = child(tmp_path, CALL="1")  # compiles and stores (a write: filelock is fine here)
    assert filled["hits"] == 0
    res = child(tmp_path, CALL="1")
    assert res["hits"] == 1
    assert imported(res["served"], NOT_ON_A_HIT) == []


@pytest.mark.slow
def test_a_hit_from_a_bundle_layer_imports_no_old_bundle_reader(tmp_path):
    # A version-3 bundle named as a layer is served by its own reader: the tar and stream
    # readers of versions 1 and 2 (tarfile among them) are for old bundles only.
    assert child(tmp_path, CALL="1")["hits"] == 0  # fills tmp_path/cache
    bundle = tmp_path / "k.kcb"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    done = subprocess.run([sys.executable, "-m", "kcache", "--dir", str(tmp_path / "cache"),
                           "export", str(bundle)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    res = child(tmp_path, CALL="1", KCACHE_DIR=str(tmp_path / "run"),
                KCACHE_READONLY_DIRS=str(bundle))
    assert res["hits"] == 1
    assert "kcache.tiers.bundle.v3" in res["served"]
    assert imported(res["served"], ("tarfile", "kcache.tiers.bundle.v1",
                                    "kcache.tiers.bundle.v2")) == []


def test_public_names_stay_importable():
    code = textwrap.dedent("""
        import kcache, kcache.store, kcache.dispatcher as d
        names = [kcache.Store, kcache.Entry, kcache.make_key, kcache.CacheMissError,
                 kcache.PruneReport, kcache.CopyReport, kcache.jit, kcache.install,
                 kcache.compile_for, kcache.CompileForError, kcache.explain,
                 kcache.store.PruneReport, kcache.store.VerifyReport, kcache.store.CopyReport,
                 kcache.store.EVICT_TARGET, kcache.store.DELTA_BATCH, d.compile_for,
                 d.compile_for_report, d.KCacheDispatcher, d.KCacheStats, d.Options,
                 d.Uncacheable, d.process_counts, d.explain_enabled, d.own_phases, d.parse_cc]
        from kcache.store import RemoveReport, Stats
        from kcache.dispatcher import CompiledEntry, NotStored, check_cc, installed
        from kcache.prune import BUSY, NEWER, NOT_REGULAR, TEMP_MAX_AGE
        assert d.explain(False) is None
        assert set(d.__all__) <= set(dir(d))
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]

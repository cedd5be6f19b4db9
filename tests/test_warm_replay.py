"""``kcache warm --replay TARGET``: entries made by an earlier toolchain of the kernels defined
in the TARGETs are compiled again for the current one; entries that cannot be replayed
(module outside the TARGETs, source changed, no readable signature, one launch
configuration) are listed as skipped with the reason; nothing read from an entry is executed
or imported: a module an entry names is imported only if it is inside the TARGETs."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba.cuda")

from kcache import Store, make_key  # noqa: E402

# slow: compiles kernels under two toolchains; compat: tests/compat/run.sh
pytestmark = [pytest.mark.slow, pytest.mark.compat]

REPO = Path(__file__).resolve().parents[1]
SIGS = REPO / "examples" / "kernels.sigs"
OLD = {"numba-cuda": "0.0.1", "nvvm": "0.0.1"}


def kcache(tmp_path, *args, root):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env["HOME"] = env["XDG_CACHE_HOME"] = str(tmp_path / "home")
    return subprocess.run([sys.executable, "-m", "kcache", *map(str, args), "--dir", str(root)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def warm_json(tmp_path, *args, root, rc=0):
    proc = kcache(tmp_path, "warm", *args, "--json", root=root)
    assert proc.returncode == rc, proc.stderr + proc.stdout[-3000:]
    return json.loads(proc.stdout)


def age(store, key, *, changes=None, meta=None, signature=None):
    """Put a copy of entry ``key`` as an earlier toolchain would have made it (toolchain
    versions changed, plus ``changes`` to other components); return the old key."""
    entry = store.load(key)
    components = copy.deepcopy(store.header(key).components)
    components["toolchain"].update(OLD)
    for name, value in (changes or {}).items():
        components[name] = value
    if signature is not None:
        components["signature"] = signature
    entry.meta.update(meta or {})
    old_key = make_key(components)
    assert store.put(old_key, entry, components=components)
    return old_key


def test_replay_recompiles_entries_of_an_earlier_toolchain(tmp_path):
    root = tmp_path / "cache"
    first = warm_json(tmp_path, "examples", "--signatures", SIGS, "--cc", "8.0,9.0",
                      "--jobs", "1", root=root)
    key_of = {(r["kernel"].split(":")[1], r["arch"]): r["key"] for r in first["results"]}
    store = Store(root)
    # scaled_add sm_90a: only an old-toolchain entry is left, so replay must compile it
    current = key_of["scaled_add", "sm_90a"]
    old = age(store, current)
    assert store.remove(current)
    # block_sum sm_80: old entry with a readable sigspec in its meta; current one still there
    age(store, key_of["block_sum", "sm_80"], meta={"sigspec": "void(float32[::1], float32[::1])"})
    # clamp_square sm_90a: old entry whose source is not today's
    changed = copy.deepcopy(store.header(key_of["clamp_square", "sm_90a"]).components["source"])
    changed[next(iter(changed))] = "0" * 32
    age(store, key_of["clamp_square", "sm_90a"], changes={"source": changed})
    # a kernel whose module no longer exists
    age(store, key_of["clamp_square", "sm_80"], changes={"kernel": "gone.module:clamp_square"})
    # a signature component that cannot be turned back into types (and no sigspec: a type
    # without a text form)
    age(store, key_of["scaled_add", "sm_80"], signature="(SomethingNew(1),)",
        meta={"sigspec": None})
    # a sigspec in meta that is not the signature of the entry's key: damaged, skipped
    age(store, key_of["block_sum", "sm_80"], meta={"sigspec": "void(float64[::1], float32[::1])"},
        changes={"toolchain": {**OLD, "numba-cuda": "0.0.2"}})  # another old key
    # a hostile sigspec in meta is never evaluated: the entry is skipped, named
    canary = tmp_path / "canary"
    age(store, key_of["block_sum", "sm_90a"],
        meta={"sigspec": f"__import__('os').system('touch {canary}')"})
    # one launch configuration of a launch-config-sensitive kernel
    age(store, key_of["clamp_square", "sm_80"], changes={"launch_config": [[1, 1, 1], [32, 1, 1], 0]})
    store.flush()

    dry = warm_json(tmp_path, "--replay", "examples", "--dry-run", root=root)
    assert dry["replay"] is True
    assert {(r["kernel"].split(":")[1], r["arch"], r["status"]) for r in dry["results"]
            if r["status"] != "skipped"} == {
        ("scaled_add", "sm_90a", "would_compile"), ("block_sum", "sm_80", "cached")}
    assert dry["current_entries"] == 5  # examples' entries of today's toolchain
    assert Store(root).header(current) is None  # a dry run compiles nothing

    doc = warm_json(tmp_path, "--replay", "examples", "--jobs", "1", root=root)
    by = {(r["kernel"], r["arch"], r["status"]): r for r in doc["results"]}
    done = by["examples.kernels:scaled_add", "sm_90a", "compiled"]
    assert done["key"] == current and done["origin"] == "replay"  # today's key again
    assert done["signature"] == "void(float32[::1], float32[::1], float32[::1])"
    assert by["examples.kernels:block_sum", "sm_80", "cached"]["key"] == key_of["block_sum", "sm_80"]
    skipped = {}
    for r in doc["results"]:
        if r["status"] == "skipped":
            skipped.setdefault((r["kernel"], r["arch"]), []).append(r["reason"])

    def only(kernel, arch):  # the one skipped row of (kernel, arch), taken out of `skipped`
        [reason] = skipped.pop((kernel if ":" in kernel else f"examples.kernels:{kernel}", arch))
        return reason
    assert "changed since the entry was made" in only("clamp_square", "sm_90a")
    assert "not in the TARGETs named" in only("gone.module:clamp_square", "sm_80")
    assert only("scaled_add", "sm_80") == "no replayable signature"
    assert "one launch configuration" in only("clamp_square", "sm_80")
    assert "meta.sigspec) is refused" in only("block_sum", "sm_90a")
    assert "is not the one of its key" in only("block_sum", "sm_80")
    assert skipped == {} and doc["summary"]["failed"] == 0
    assert not canary.exists()
    assert Store(root).header(old) is not None  # replay adds; pruning the old is prune's job

    # only the ccs asked for; and a second replay finds everything in place
    again = warm_json(tmp_path, "--replay", "examples", "--cc", "9.0", root=root)
    assert {r["status"] for r in again["results"] if r["arch"] == "sm_90a"} <= {"cached", "skipped"}
    assert all(r["arch"] == "sm_90a" for r in again["results"] if r["status"] != "skipped")
    assert again["summary"]["compiled"] == 0


# --- entries name modules: only those inside the TARGETs are ever imported ---------------------

#: Imported, it leaves a marker file (a user's own deploy script in the current folder).
DEPLOY = "import pathlib\npathlib.Path(__file__).with_name('deployed').write_text('ran')\n"
#: A module inside the TARGET: one kernel without a known signature (nothing to compile).
LAZY = "from numba import cuda\n\n\n@cuda.jit\ndef lazy(a):\n    a[0] = 1\n"
ZEN = "Beautiful is better than ugly"  # what importing the stdlib's `this` prints
HOSTILE_KERNELS = ("deploy:k", "this:k")


@pytest.fixture(scope="module")
def one_entry(tmp_path_factory):
    """A real entry (examples.kernels:clamp_square for sm_90a) in a root of its own:
    (root, key)."""
    base = tmp_path_factory.mktemp("replay-one")
    sigs = base / "one.sigs"
    sigs.write_text("examples.kernels:clamp_square void(float64[::1])\n")
    doc = warm_json(base, "--signatures", sigs, "--cc", "9.0", "--jobs", "1", root=base / "cache")
    [row] = doc["results"]
    return base / "cache", row["key"]


def plant(one_entry, dest: Path) -> None:
    """Copies of the entry made by an earlier toolchain, naming ``deploy:k`` and ``this:k``,
    put in ``dest`` (as any writer of a root, a layer or a remote could)."""
    source_root, key = one_entry
    source = Store(source_root)
    entry, header = source.load(key), source.header(key)
    store = Store(dest)
    for kernel in HOSTILE_KERNELS:
        components = copy.deepcopy(header.components)
        components["toolchain"].update(OLD)
        components["kernel"] = kernel
        entry.meta["kernel"] = kernel
        assert store.put(make_key(components), entry, components=components)
    store.flush()


def run_in(work: Path, tmp_path, *args, root, env=None, timeout=300):
    """``python -m kcache ARGS --dir ROOT`` with ``work`` as the current folder."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    full["HOME"] = full["XDG_CACHE_HOME"] = str(tmp_path / "home")
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "kcache", *map(str, args), "--dir", str(root)],
                          cwd=work, env=full, capture_output=True, text=True, timeout=timeout)


def hostile_cache(form: str, one_entry, tmp_path, monkeypatch) -> tuple:
    """A cache whose stale entries name ``deploy:k`` and ``this:k``, reached in ``form``;
    returns (root, env for the warm commands)."""
    root = tmp_path / "cache"
    if form == "root":  # as a remote backfill or any writer of the root leaves them
        plant(one_entry, root)
        return root, {}
    if form == "shared":
        monkeypatch.setenv("KCACHE_SHARED", "1")
        plant(one_entry, root)
        return root, {"KCACHE_SHARED": "1"}
    if form == "readonly":
        plant(one_entry, tmp_path / "layer")
        return root, {"KCACHE_READONLY_DIRS": str(tmp_path / "layer")}
    plant(one_entry, tmp_path / "elsewhere")
    if form == "bundle":
        bundle = tmp_path / "hostile.kcache"
        steps = [("export", bundle, tmp_path / "elsewhere"), ("import", bundle, root)]
        env = {}
    else:  # a remote tier, pulled from
        env = {"KCACHE_REMOTE": f"file://{tmp_path / 'remote'}"}
        steps = [("push", None, tmp_path / "elsewhere"), ("pull", None, root)]
    for command, arg, where in steps:
        done = run_in(tmp_path, tmp_path, command, *([arg] if arg else []), root=where, env=env)
        assert done.returncode == 0, done.stderr
    assert {h.kernel for h in Store(root).entries()} == set(HOSTILE_KERNELS)
    return root, {}


@pytest.mark.parametrize("form", ["root", "bundle", "remote", "readonly", "shared"])
def test_replay_never_imports_a_module_an_entry_names(form, one_entry, tmp_path, monkeypatch):
    if form == "remote":
        pytest.importorskip("fsspec")  # the file:// remote tier's client (kcache-cuda[s3])
    root, env = hostile_cache(form, one_entry, tmp_path, monkeypatch)
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "deploy.py").write_text(DEPLOY)
    (work / "src" / "lazy.py").write_text(LAZY)
    marker = work / "deployed"
    # Every command form against the root; one per other source (they differ only in how
    # the entries got there: replay reads them all alike).
    forms = [("--replay", "src", "--cc", "9.0")]
    if form == "root":
        forms += [("--replay",), ("--replay", "--dry-run"),
                  ("--replay", "src", "--cc", "9.0", "--dry-run"), ("--replay", "src")]
    for args in forms:
        done = run_in(work, tmp_path, "warm", *args, "--json", root=root, env=env)
        assert not marker.exists(), (args, done.stderr)
        assert ZEN not in done.stdout + done.stderr, args
        assert "Traceback" not in done.stderr, done.stderr
        # nothing warmed (src's one kernel has no signature), so exit 1, with one line
        assert done.returncode == 1, (args, done.stderr)
        doc = json.loads(done.stdout)
        listed = {r["kernel"]: r for r in doc["results"]}
        assert set(listed) == set(HOSTILE_KERNELS), (args, doc["results"])
        assert all(r["status"] == "skipped" and r["origin"] == "replay" for r in listed.values())
        if "src" in args:
            assert all("not in the TARGETs named" in r["reason"] for r in listed.values())
            assert doc["without_signatures"] == (["lazy:lazy"] if "--cc" in args else [])
            assert done.stderr.strip().splitlines()[-1] == (
                "kcache: warm: warmed nothing: no kernel "
                f"{'would be' if '--dry-run' in args else 'was'} compiled and none is cached")
        else:
            assert all("no TARGET named" in r["reason"] for r in listed.values())
            [line] = done.stderr.strip().splitlines()
            assert line.startswith("kcache: warm: --replay imports only modules found in the "
                                   "TARGETs named: name them, e.g. kcache warm --replay src/")
    # the module named is importable from there: a plain import does run it
    assert subprocess.run([sys.executable, "-c", "import deploy"], cwd=work).returncode == 0
    assert marker.exists()


def test_bare_replay_lists_without_json(one_entry, tmp_path):
    plant(one_entry, tmp_path / "cache")
    work = tmp_path / "work"
    work.mkdir()
    (work / "deploy.py").write_text(DEPLOY)
    done = run_in(work, tmp_path, "warm", "--replay", root=tmp_path / "cache")
    assert done.returncode == 1 and not (work / "deployed").exists()
    rows = [line.split("\t") for line in done.stdout.strip().splitlines()[1:]]
    assert sorted(r[0] for r in rows) == sorted(HOSTILE_KERNELS)
    assert all(r[3] == "skipped" for r in rows)
    assert done.stderr.strip().splitlines()[-1].startswith("kcache: warm: --replay imports only")


#: A kernel that types with any argument: what lowers (flattens) its argument is reached.
ANY_ARG = "from numba import cuda\n\n\n@cuda.jit\ndef k(t):\n    pass\n"
#: 80 characters that flatten to 2**60 kernel parameters (each tuple element is one).
HUGE = "void(UniTuple(UniTuple(UniTuple(float32, 1048575), 1048575), 1048575))"


def test_replay_of_a_signature_of_too_many_parameters_is_skipped_not_compiled(tmp_path):
    """A stale entry (any writer of a root, layer, bundle or remote makes one) of the user's own
    kernel whose signature is within the grammar's bounds but flattens to 2**60 kernel
    parameters: warm compiled it, for ever (a real process; the signature is refused)."""
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "anyarg.py").write_text(ANY_ARG)
    sigs = tmp_path / "one.sigs"
    sigs.write_text("anyarg:k void(UniTuple(float32, 2))\n")
    root = tmp_path / "cache"
    done = run_in(work, tmp_path, "warm", "src", "--signatures", sigs, "--cc", "9.0",
                  "--json", root=root)
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)["results"]
    store = Store(root)
    components = copy.deepcopy(store.header(row["key"]).components)
    components["toolchain"].update(OLD)
    components["signature"] = "(UniTuple(UniTuple(UniTuple(float32, 1048575), 1048575), 1048575),)"
    entry = store.load(row["key"])
    entry.meta["sigspec"] = HUGE
    assert store.put(make_key(components), entry, components=components)
    store.flush()
    done = run_in(work, tmp_path, "warm", "--replay", "src", "--cc", "9.0", "--json",
                  root=root, timeout=120)
    doc = json.loads(done.stdout)
    [skipped] = [r for r in doc["results"] if r["status"] == "skipped"]
    assert skipped["kernel"] == "anyarg:k" and "kernel parameters" in skipped["reason"], skipped
    assert doc["summary"]["failed"] == 0 and doc["summary"]["compiled"] == 0


# --- kernels bound to a module name their qualname does not reach ------------------------------

@pytest.mark.parametrize("frontend", ["numba-cuda", "numba-cuda-mlir"])
def test_replay_warms_closures_and_aliases_by_their_module_name(frontend, tmp_path):
    """Stale entries of a factory's closures (``add3 = make_adder(3.0)``, ``add4 = ...(4.0)``:
    one entry name, ``aliased:make_adder.<locals>.adder``, told apart by their closure values)
    and of ``impl_k = cuda.jit(sig)(_impl)`` (entry name ``aliased:_impl``, a function) are
    compiled again under the kernel's module name; they were skipped ('not a module-level
    name warm can import', 'is a function, not a kernel')."""
    from test_warm_aliases import ALIASED
    source = ALIASED + "\nadd4 = make_adder(4.0)\n"
    if frontend == "numba-cuda-mlir":
        pytest.importorskip("numba_cuda_mlir")
        source = source.replace("from numba import cuda", "from numba_cuda_mlir import cuda")
    proj, root, target = tmp_path / "proj", tmp_path / "cache", tmp_path / "proj" / "aliased.py"
    proj.mkdir()
    target.write_text(source)
    first = warm_json(tmp_path, target, "--cc", "9.0", "--jobs", "1", "--frontend", frontend,
                      root=root)
    key_of = {r["kernel"]: r["key"] for r in first["results"]}
    assert sorted(key_of) == ["aliased:add3", "aliased:add4", "aliased:impl_k"]
    store = Store(root)
    # an entry of the factory's closure whose code is no longer any of the module's closures
    changed = copy.deepcopy(store.header(key_of["aliased:add3"]).components["source"])
    changed[next(iter(changed))] = "0" * 32
    age(store, key_of["aliased:add3"], changes={"source": changed})
    for key in key_of.values():  # only the earlier toolchain's entries are left
        age(store, key)
        assert store.remove(key)
    store.flush()

    doc = warm_json(tmp_path, "--replay", target, "--jobs", "1", "--frontend", frontend,
                    root=root)
    done = {r["kernel"]: r for r in doc["results"] if r["status"] == "compiled"}
    assert {k: r["key"] for k, r in done.items()} == key_of, doc["results"]  # today's keys
    arch = first["results"][0]["arch"]  # numba-cuda-mlir compiles 9.0 as sm_90
    assert all(r["origin"] == "replay" and r["arch"] == arch for r in done.values())
    [skipped] = [r for r in doc["results"] if r["status"] == "skipped"]
    assert skipped["kernel"] == "aliased:make_adder.<locals>.adder", skipped
    assert skipped["reason"].startswith("changed since the entry was made"), skipped
    assert doc["summary"]["failed"] == 0
    again = warm_json(tmp_path, "--replay", target, "--dry-run", "--frontend", frontend,
                      root=root)
    assert sorted(r["kernel"] for r in again["results"] if r["status"] == "cached") == [
        "aliased:add3", "aliased:add4", "aliased:impl_k"]

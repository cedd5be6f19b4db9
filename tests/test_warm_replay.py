"""``kcache warm --replay``: entries made by an earlier toolchain are compiled again for the
current one; entries that cannot be replayed (module gone, source changed, no readable
signature, one launch configuration) are listed as skipped with the reason; nothing read
from an entry is executed."""
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

pytestmark = pytest.mark.slow  # compiles kernels under two toolchains

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
    # a signature component that cannot be turned back into types
    age(store, key_of["scaled_add", "sm_80"], signature="(SomethingNew(1),)")
    # a hostile sigspec in meta is never evaluated (the component still gives the signature)
    canary = tmp_path / "canary"
    age(store, key_of["block_sum", "sm_90a"],
        meta={"sigspec": f"__import__('os').system('touch {canary}')"})
    # one launch configuration of a launch-config-sensitive kernel
    age(store, key_of["clamp_square", "sm_80"], changes={"launch_config": [[1, 1, 1], [32, 1, 1], 0]})
    store.flush()

    dry = warm_json(tmp_path, "--replay", "--dry-run", root=root)
    assert dry["replay"] is True
    assert {(r["kernel"].split(":")[1], r["arch"], r["status"]) for r in dry["results"]
            if r["status"] != "skipped"} == {
        ("scaled_add", "sm_90a", "would_compile"), ("block_sum", "sm_80", "cached"),
        ("block_sum", "sm_90a", "cached")}
    assert Store(root).header(current) is None  # a dry run compiles nothing

    doc = warm_json(tmp_path, "--replay", "--jobs", "1", root=root)
    by = {(r["kernel"], r["arch"], r["status"]): r for r in doc["results"]}
    done = by["examples.kernels:scaled_add", "sm_90a", "compiled"]
    assert done["key"] == current and done["origin"] == "replay"  # today's key again
    assert done["signature"] == "void(float32[::1], float32[::1], float32[::1])"
    assert by["examples.kernels:block_sum", "sm_80", "cached"]["key"] == key_of["block_sum", "sm_80"]
    assert by["examples.kernels:block_sum", "sm_90a", "cached"]
    skipped = {(r["kernel"], r["arch"]): r["reason"] for r in doc["results"]
               if r["status"] == "skipped"}
    assert "changed since the entry was made" in skipped["examples.kernels:clamp_square", "sm_90a"]
    assert "cannot import gone.module" in skipped["gone.module:clamp_square", "sm_80"]
    assert skipped["examples.kernels:scaled_add", "sm_80"] == "no replayable signature"
    assert "one launch configuration" in skipped["examples.kernels:clamp_square", "sm_80"]
    assert len(skipped) == 4 and doc["summary"]["failed"] == 0
    assert not canary.exists()
    assert Store(root).header(old) is not None  # replay adds; pruning the old is prune's job

    # only the ccs asked for; and a second replay finds everything in place
    again = warm_json(tmp_path, "--replay", "--cc", "9.0", root=root)
    assert {r["status"] for r in again["results"] if r["arch"] == "sm_90a"} <= {"cached", "skipped"}
    assert all(r["arch"] == "sm_90a" for r in again["results"] if r["status"] != "skipped")
    assert again["summary"]["compiled"] == 0

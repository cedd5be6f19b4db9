"""One "machine" of the store-level remote tests (tests/test_remote_store.py), run as a fresh
interpreter: ``python tests/remote_child.py SPEC.json``. The remote is configured the way users
configure it (``KCACHE_REMOTE*`` in the environment); this program only uses the public Store.

SPEC (JSON): ``root``; ``ops``: [[op, key], ...] with op ``get_or_create``, ``get`` or ``put``;
``machine``: a name put into what ``create()`` compiles; ``record``: a file every ``create()``
appends "<machine> <pid> <key>" to (shared by all processes: the count of compiles);
``work``: CPU seconds a compile costs (hashing: a fixed-cost fake compile, no GPU);
``size``: bytes of the fake cubin; ``block``: module names made unimportable first (a missing
client library); ``start``: a folder for a start signal (write ``ready.<pid>``, wait for
``go``); ``pause_at``: index of the op before which to signal ``paused`` in the folder ``signals`` and
wait for ``resume`` there; ``connect``: open the remote and make one call before the start
signal (bench/bench_remote.py: the client's import and connection are not timed).

Prints one JSON document: per op ``{"op", "key", "hit", "seconds", "cubin"}`` (``cubin``: the
first 128 bytes of what was served, as text), ``stats`` (Store.stats()), ``warnings`` (every
KcacheWarning message) and ``created`` (keys this process compiled).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import warnings

DEADLINE = 180.0  # seconds a signal is waited for


def wait_for(path: str) -> None:
    """Poll for ``path`` (a start signal) with a deadline."""
    deadline = time.monotonic() + DEADLINE
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"no {path} after {DEADLINE} s")
        time.sleep(0.005)


def signal(folder: str, name: str) -> None:
    with open(os.path.join(folder, f".{name}.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.replace(os.path.join(folder, f".{name}.tmp"), os.path.join(folder, name))


def burn(seconds: float) -> None:
    """A compile of fixed CPU cost: hash until ``seconds`` of process CPU time are spent."""
    end = time.process_time() + seconds
    h = hashlib.sha256()
    block = b"\x00" * 65536
    while time.process_time() < end:
        h.update(block)


def main(spec: dict) -> dict:
    for name in spec.get("block", ()):
        sys.modules[name] = None  # `import name` now raises ImportError
    from kcache import Entry, Store
    from kcache.warn import KcacheWarning

    machine = spec.get("machine", "m")
    created: list[str] = []

    def compiler(key: str):
        def create() -> Entry:
            with open(spec["record"], "a") as f:  # O_APPEND: one short line per write
                f.write(f"{machine} {os.getpid()} {key}\n")
            burn(spec.get("work", 0.0))
            created.append(key)
            body = f"compiled by {machine} for {key}".encode()
            return Entry({"cubin": body + b"\x00" * max(0, spec.get("size", 0) - len(body))},
                         {"kernel": "tests.remote:kern", "arch": "sm_90", "compile_seconds": 0.5})
        return create

    results = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = Store(spec["root"])
        if spec.get("connect") and store.remote is not None:
            from kcache import make_key
            from kcache.tiers.tier import TierError
            try:  # a direct tier call: no store counter changes
                store.remote.read(make_key({"connect": os.getpid()}), 1)
            except TierError:
                pass
        if spec.get("start"):
            signal(spec["start"], f"ready.{os.getpid()}")
            wait_for(os.path.join(spec["start"], "go"))
        for i, (op, key) in enumerate(spec["ops"]):
            if i == spec.get("pause_at"):
                signal(spec["signals"], "paused")
                wait_for(os.path.join(spec["signals"], "resume"))
            t0 = time.monotonic()
            hit = None
            if op == "get_or_create":
                entry, hit = store.get_or_create(key, compiler(key))
            elif op == "get":
                entry = store.get(key)
                hit = entry is not None
            elif op == "put":
                entry = compiler(key)()
                hit = store.put(key, entry)
            else:
                raise SystemExit(f"unknown op {op!r}")
            seconds = time.monotonic() - t0
            cubin = entry.artifacts["cubin"][:128].rstrip(b"\x00").decode() if entry else None
            results.append({"op": op, "key": key, "hit": hit, "seconds": seconds, "cubin": cubin})
        store.flush()
        stats = store.stats().as_dict()
    return {"results": results, "stats": stats, "created": created,
            "warnings": [str(w.message) for w in caught if issubclass(w.category, KcacheWarning)]}


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    print(json.dumps(main(spec)))

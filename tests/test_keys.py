import os
import subprocess
import sys

import pytest

from kcache import make_key

pytestmark = pytest.mark.compat  # runs in every leg of tests/compat/run.sh (docs/compat.md)

COMPONENTS = {
    "format": 1,
    "kernel": "pkg.mod:axpy",
    "source": {"code": "ab" * 32, "dep:m.f": "cd" * 32, "global:SCALE": "ef" * 32},
    "signature": "(array(float32, 1d, C),)",
    "target": {"cc": "sm_90a", "output": "cubin"},
    "toolchain": {"numba": "0.68.1", "numba-cuda": "0.30.4"},
    "options": {"debug": False, "fastmath": True, "opt": True, "max_registers": None},
    "link": {"a.cu": "00" * 32},
    "launch_config": [[1, 2, 3], [128, 1, 1], 0],
    "cache_key": None,
}


def test_key_is_64_hex():
    k = make_key(COMPONENTS)
    assert len(k) == 64 and all(c in "0123456789abcdef" for c in k)


def test_map_order_does_not_matter():
    reordered = {k: COMPONENTS[k] for k in reversed(list(COMPONENTS))}
    reordered["source"] = dict(reversed(list(COMPONENTS["source"].items())))
    assert make_key(reordered) == make_key(COMPONENTS)


def test_tuple_and_list_are_the_same():
    a = dict(COMPONENTS, launch_config=((1, 2, 3), (128, 1, 1), 0))
    assert make_key(a) == make_key(COMPONENTS)


@pytest.mark.parametrize("change", [
    {"options": {**COMPONENTS["options"], "fastmath": False}},
    {"target": {"cc": "sm_80", "output": "cubin"}},
    {"cache_key": "x"},
    {"format": True},  # bool is not int 1
    {"format": 1.0},  # float is not int
    {"extra": None},  # a new component changes the key
])
def test_any_change_changes_the_key(change):
    assert make_key({**COMPONENTS, **change}) != make_key(COMPONENTS)


@pytest.mark.parametrize("bad, names", [
    ({"source": {"code": object()}}, ["'source'", "'code'", "object"]),
    ({"options": {"x": {1, 2}}}, ["'options'", "'x'", "set"]),
    ({"launch_config": [1, 2.5j]}, ["'launch_config'", "[1]", "complex"]),
    ({"source": {(1, 2): "x"}}, ["'source'", "map key"]),
])
def test_unencodable_value_names_the_component(bad, names):
    with pytest.raises(TypeError) as info:
        make_key(bad)
    for name in names:
        assert name in str(info.value)


def test_components_must_be_a_mapping():
    with pytest.raises(TypeError, match="mapping"):
        make_key([("a", 1)])


_CHILD = """
import json, sys
from kcache import make_key
comps = json.loads(sys.stdin.read())
# rebuild the maps in a different order, through a set so the hash seed matters
def shuffle(v):
    if isinstance(v, dict):
        return {k: shuffle(v[k]) for k in set(v)}
    return v
print(make_key(shuffle(comps)))
"""


@pytest.mark.slow
def test_key_stable_across_processes_and_hash_seeds():
    import json

    expected = make_key(COMPONENTS)
    for seed in ("0", "1", "12345", "random"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(COMPONENTS),
                             capture_output=True, text=True, env=env, check=True)
        assert out.stdout.strip() == expected, seed


def test_known_components_keep_their_key():
    """make_key's output is a file format: pinned, so a faster encoder cannot change it."""
    assert make_key(COMPONENTS) == (
        "1c53e3c1de21740dd91be4d6b788f26cbffd27e3abbd492a0d4571cb8c02def0")
    mixed = dict(COMPONENTS, extra={
        "big": 2**63 + 5, "neg": -2**63, "b": b"x", "ba": bytearray(b"y"),
        "nested": [{"z": 1, "a": [1.5, None, True]}], 7: "int key", b"k": "bytes key"})
    assert make_key(mixed) == (
        "08bd5df0aa2541e9a470d5d5280dcae71109d0f92fdf7015cafbf473e5bd94f3")


def test_huge_integer_is_named_not_printed():
    with pytest.raises(TypeError, match=r"'source'\['n'\]\[1\] = <integer of \d+ bits>"):
        make_key({"source": {"n": [1, 10**5000]}})

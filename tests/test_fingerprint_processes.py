"""Keys computed in fresh processes: equal across processes for the same content (whatever the
directory, mtimes or PYTHONHASHSEED), different after an edit of a device function in another
module or of a global constant.  Nothing is compiled: no GPU needed."""

import os
import shutil

import pytest

from kcache.dispatcher.misses import diff_components

from fixtures_keys import key_in_subprocess, write_modules

pytest.importorskip("numba.cuda")

pytestmark = pytest.mark.slow  # keys computed in fresh processes

KERNELS = """
    import numpy as np
    from numba import cuda

    import mathbits

    SCALE = 2.0
    TABLE = np.array([1, 2, 3], dtype=np.int32)

    @cuda.jit
    def kern(out, a):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = mathbits.step(a[i]) * SCALE + TABLE[i % 3]
"""

MATHBITS = """
    from numba import cuda

    @cuda.jit(device=True)
    def step(x):
        # clamp to [0, 1]
        return min(max(x, 0.0), 1.0)
"""


def project(directory, kernels=KERNELS, mathbits=MATHBITS):
    return write_modules(directory, {"kernels": kernels, "mathbits": mathbits})


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    directory = project(tmp_path_factory.mktemp("base") / "proj")
    result = key_in_subprocess(directory, "kernels", "kern")
    assert result["compiled"] == 0  # fingerprinting never compiles
    return directory, result


def test_same_content_in_another_process_same_key(baseline, tmp_path):
    _directory, first = baseline
    # Same files rewritten elsewhere, with other mtimes, in another working directory,
    # under a different hash seed.
    moved = project(tmp_path / "elsewhere" / "deeper")
    for path in moved.iterdir():
        os.utime(path, (1_000_000_000, 1_000_000_000))
    again = key_in_subprocess(moved, "kernels", "kern", env={"PYTHONHASHSEED": "12345"},
                              cwd=tmp_path)
    assert again["key"] == first["key"]


def test_touching_files_keeps_key(baseline, tmp_path):
    directory, first = baseline
    copy = tmp_path / "copy"
    shutil.copytree(directory, copy)
    for path in copy.iterdir():
        os.utime(path, None)  # "now": a git checkout or docker COPY
    assert key_in_subprocess(copy, "kernels", "kern", env={"PYTHONHASHSEED": "0"})["key"] == (
        first["key"])


def test_comment_edit_in_device_module_keeps_key(baseline, tmp_path):
    _directory, first = baseline
    edited = project(tmp_path / "p", mathbits=MATHBITS.replace("# clamp to [0, 1]",
                                                               "# clamp\n\n    # (edited)"))
    assert key_in_subprocess(edited, "kernels", "kern")["key"] == first["key"]


def test_device_function_edit_in_other_module_changes_key(baseline, tmp_path):
    _directory, first = baseline
    edited = project(tmp_path / "p", mathbits=MATHBITS.replace("1.0)", "2.0)"))
    second = key_in_subprocess(edited, "kernels", "kern")
    assert second["key"] != first["key"]
    assert diff_components(first["components"], second["components"]) == [
        "dependency mathbits.step changed"
    ]


def test_global_constant_changed_between_processes(baseline, tmp_path):
    _directory, first = baseline
    edited = project(tmp_path / "p", kernels=KERNELS.replace("SCALE = 2.0", "SCALE = 3.0"))
    second = key_in_subprocess(edited, "kernels", "kern")
    assert second["key"] != first["key"]
    assert diff_components(first["components"], second["components"]) == [
        "global SCALE changed"
    ]


def test_global_array_changed_between_processes(baseline, tmp_path):
    _directory, first = baseline
    edited = project(tmp_path / "p", kernels=KERNELS.replace("[1, 2, 3]", "[1, 2, 4]"))
    second = key_in_subprocess(edited, "kernels", "kern")
    assert diff_components(first["components"], second["components"]) == [
        "global TABLE changed"
    ]


def test_value_digests_equal_under_other_hash_seeds():
    """Sets and dicts of strings iterate in hash-seed order; digests must not."""
    import ast
    import json
    import subprocess
    import sys

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from kcache.dispatcher.fingerprint import value_digest
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
    REGISTRIES = FRONTEND.registries()

    leaves = st.one_of(st.text(max_size=8), st.integers(-10**20, 10**20), st.booleans(),
                       st.floats(allow_nan=False, allow_infinity=False))
    values = st.recursive(
        leaves,
        lambda inner: st.one_of(st.tuples(inner, inner), st.lists(inner, max_size=4),
                                st.sets(st.text(max_size=6), min_size=1, max_size=6),
                                st.dictionaries(st.text(max_size=6), inner, max_size=4)),
        max_leaves=12,
    )
    samples = []

    @settings(max_examples=60, deadline=None, database=None)
    @given(values)
    def collect(value):
        samples.append(repr(value))

    collect()
    here = [value_digest(ast.literal_eval(text), registries=REGISTRIES) for text in samples]
    code = ("import ast, json, sys\n"
            "from kcache.dispatcher.fingerprint import value_digest\n"
            "from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND\n"
            "texts = json.load(sys.stdin)\n"
            "print(json.dumps([value_digest(ast.literal_eval(t), registries=FRONTEND.registries())"
            " for t in texts]))\n")
    for seed in ("1", "987654"):
        proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(samples),
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONHASHSEED": seed})
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == here

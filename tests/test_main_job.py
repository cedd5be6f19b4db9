"""The main job (examples/main.py) on a machine without a GPU: it says so, names the cc and the
cache root, reports per kernel whether it compiled or came from the cache, and rejects a cc the
toolkit cannot compile for with one line and exit status 2."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba.cuda")

MAIN = Path(__file__).resolve().parents[1] / "examples" / "main.py"


@pytest.fixture(scope="module")
def no_gpu():
    from numba import cuda
    if cuda.is_available():
        pytest.skip("a GPU is present: the main job runs its GPU path (tests/test_gpu.py)")


def _main(tmp_path, *args, cache_dir=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env["HOME"] = env["XDG_CACHE_HOME"] = str(tmp_path / "home")  # never the user's cache
    cache_dir = str(tmp_path / "cache") if cache_dir is None else cache_dir
    return subprocess.run([sys.executable, str(MAIN), "--cache-dir", cache_dir, *args],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_without_gpu_first_compiles_then_all_cached(no_gpu, tmp_path):
    first = _main(tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    out = first.stdout
    assert "No GPU found" in out and "not launched" in out
    assert "cc 9.0 (sm_90a)" in out
    assert f"Cache: {tmp_path / 'cache'}" in out
    rows = re.findall(r"^  (\w+) +(compiled in \d+\.\d\d s|already cached) +key ([0-9a-f]+)$",
                      out, re.M)
    assert [r[0] for r in rows] == ["scaled_add", "clamp_square", "block_sum"], out
    assert all(r[1].startswith("compiled in") and len(r[2]) == 12 for r in rows)
    listing = out.split("(kcache ls)", 1)[1]
    for _name, _what, key in rows:
        assert key in listing  # the listing shows the same entries
    # Piped, `kcache ls` is TSV under the JSON field names; compile seconds rounded.
    header, *lines = listing.split("\n", 1)[1].strip().splitlines()  # after "(kcache ls):"
    column = header.split("\t").index("compile_seconds")
    assert lines and all(re.fullmatch(r"\d+\.\d\d", line.split("\t")[column])
                         for line in lines), listing

    second = _main(tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    again = re.findall(r"^  (\w+) +(already cached) +key ([0-9a-f]{12})$", second.stdout, re.M)
    assert [(n, k) for n, _w, k in again] == [(n, k) for n, _w, k in rows]
    assert "compiled in" not in second.stdout


def test_unsupported_cc_is_one_line_and_exit_2(no_gpu, tmp_path):
    proc = _main(tmp_path, "--cc", "99.9")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cc 99.9 is not supported" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("given", ["", "  "])
def test_empty_cache_dir_is_one_line_and_exit_2(no_gpu, tmp_path, given):
    proc = _main(tmp_path, cache_dir=given)
    assert proc.returncode == 2, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--cache-dir needs a directory path" in lines[0], proc.stderr
    assert not (tmp_path / "home").exists()  # the default cache was not used


def test_bad_cache_dir_is_named_as_the_option(no_gpu, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    proc = _main(tmp_path, cache_dir=str(afile))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "(from --cache-dir)" in lines[0], proc.stderr
    assert "KCACHE_DIR" not in proc.stderr

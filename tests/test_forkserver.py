"""The suite's fork server (tests/forkserver.py): a child with its own NUMBA_CACHE_DIR, or
started with ``python -B``, is still forked, and is what a fresh interpreter would be (numba's
settings read from its environment; no bytecode written); KCACHE_TEST_FORK=0 starts every
child anew."""
import os
import subprocess
import sys

import forkserver

CHILD = ("import sys; forked = 'numba.cuda' in sys.modules\n"
         "from numba.core import config\n"
         "print(forked, config.CACHE_DIR)")


def test_a_child_with_its_own_numba_cache_dir_reads_it(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [str(forkserver.FORK), str(tmp_path / "numba")]  # forked unless switched off
    env.pop("NUMBA_CACHE_DIR")
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [str(forkserver.FORK)]  # unset again in the next child: "", printed as nothing


def test_python_dash_b_is_forked_and_writes_no_bytecode():
    code = "import sys; print('numba.cuda' in sys.modules, sys.dont_write_bytecode)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run([sys.executable, "-B", "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [str(forkserver.FORK), "True"]
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [str(forkserver.FORK), "False"]

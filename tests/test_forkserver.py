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


def test_a_program_on_stdin_is_forked_and_runs_as_python_minus_runs_it():
    code = b"import sys; print('numba.cuda' in sys.modules, sys.argv, repr(sys.path[0]))\n"
    out = subprocess.run([sys.executable, "-", "a"], input=code, capture_output=True,
                         check=True).stdout.decode().split(" ", 1)
    assert out == [str(forkserver.FORK), "['-', 'a'] ''\n"]


def test_stand_ins_run_the_real_program_forked_or_as_itself(tmp_path):
    """A stand-in (what tests/test_docs.py puts on a block's PATH) runs the interpreter with
    its arguments, stdio and exit status, forked when it may be."""
    forkserver.start()
    forkserver.write_stand_ins(tmp_path, {"python": sys.executable})
    stand_in = str(tmp_path / "python")
    code = "import sys; print('numba.cuda' in sys.modules, sys.stdin.read()); sys.exit(3)"
    done = subprocess.run(["bash", "-c", f'echo hi | "{stand_in}" -c "$1"', "bash", code],
                          capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (3, "True hi\n\n")  # a server is running
    done = subprocess.run(["bash", "-c", f'"{stand_in}" - <<< "import os; os.abort()"'],
                          capture_output=True, text=True)
    assert done.returncode == 128 + 6  # killed by SIGABRT, as bash reports it

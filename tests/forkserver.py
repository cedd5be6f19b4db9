"""Start the suite's Python children from a fork server that has imported numba.cuda already.

A child that runs ``kcache warm`` or launches a kernel through the fake GPU pays ~1.1 s of CPU
importing numba.cuda before its first line of work, and the suite starts a few hundred. With
:func:`install`, ``subprocess.Popen`` (and so ``run``, ``check_output``, ...) sends a Python
child to tests/_forkserver.py instead, which forks it from a process that has that import
done. The child is still a process of its own, with its own pid, pipes, working directory,
environment, argv and sys.path, and its exit status is the one it would have had.

Only children that a fresh interpreter would run the same way go there: ``sys.executable``
(or a console script of this environment) with ``-c``, ``-m``, ``-`` or a script and no
other interpreter option than ``-B``; no ``preexec_fn``, ``pass_fds``, user, group, umask or shell; no terminal
on its stdio; the same ``NUMBA_*``, ``CUDA_*``, ``PYTHON*`` and locale variables as the
server (numba and the interpreter read those once at start), except those that are read when
used (:data:`READ_WHEN_USED`: PYTHONPATH, PYTHONDONTWRITEBYTECODE, NUMBA_CACHE_DIR); and no
PYTHONPATH entry that would shadow a module the server has imported. Everything else is
started as usual, as is every child of a test marked ``exec_children`` and every child when
``KCACHE_TEST_FORK=0``. Mark a test that checks what a fresh interpreter has: the modules it
imported (a forked child has numba's), its peak memory (``ru_maxrss`` counts the server's
pages), or its children's CPU time through ``RUSAGE_CHILDREN`` (the server, not this
process, waited for them; ``os.wait4`` on such a child is answered with the server's figures).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import resource
import weakref
from pathlib import Path

ENV = "_TEST_FORKSERVER"  # the server's socket path, for the children it forks
_HERE = Path(__file__).resolve().parent
_RealPopen = subprocess.Popen
_server_lock = threading.Lock()
_server: dict | None = None  # {"socket": path, "env": {...}, "modules": [...]}
_by_pid = weakref.WeakValueDictionary()  # pid -> ForkPopen, for os.wait4
_real_wait4 = os.wait4
enabled = True  # tests/conftest.py turns it off for tests marked exec_children
#: KCACHE_TEST_FORK=0: no child is forked. Read here, at import (collection), because the
#: tests run with every KCACHE_* variable removed (tests/conftest.py's clean_env).
FORK = os.environ.get("KCACHE_TEST_FORK", "1") != "0"


#: Variables of those prefixes that are read when used, not once at start, so that a child may
#: have its own: PYTHONPATH (the child's ``sys.path`` is made from it), PYTHONDONTWRITEBYTECODE
#: (``sys.dont_write_bytecode``), and NUMBA_CACHE_DIR, which numba's settings hold as CACHE_DIR
#: and which only numba's own cache reads, when a ``cache=True`` function is decorated
#: (numba.core.caching's locators); the forked child reloads numba's settings from its
#: environment (``numba.core.config.reload_config``) before it runs. The bench's children set
#: it (bench/gpu.py, bench/bench_import.py): ~60 of them, ~1.5 s of CPU each when started anew.
READ_WHEN_USED = frozenset({"PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "NUMBA_CACHE_DIR"})


def _read_at_start(name: str) -> bool:
    """Whether numba, CUDA's libraries or the interpreter read the variable once, at start."""
    if name in READ_WHEN_USED:
        return False
    return name.startswith(("NUMBA_", "CUDA_", "PYTHON", "LC_")) or name == "LANG"


def _start() -> dict:
    """Start the server (once per process); its address and what it was started with."""
    folder = tempfile.mkdtemp(prefix="kcache-forkserver-")
    path = os.path.join(folder, "s")
    read_end, write_end = os.pipe()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_") and k != ENV}
    proc = _RealPopen([sys.executable, str(_HERE / "_forkserver.py"), path, str(read_end)],
                      pass_fds=(read_end,), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                      env=env, cwd=folder)
    os.close(read_end)
    os.set_inheritable(write_end, False)  # the server ends when this process ends
    ready = proc.stdout.readline()  # b"ready <the top-level modules it imported>"
    if not ready.startswith(b"ready "):
        raise RuntimeError("the fork server did not start")
    info = {"socket": path, "env": {k: v for k, v in env.items() if _read_at_start(k)},
            "modules": json.loads(ready[6:]),
            "pythonpath": env.get("PYTHONPATH", "").split(os.pathsep)}
    Path(folder, "info.json").write_text(json.dumps(info))
    _started.append((proc, write_end))
    return info


_started: list = []  # (server process, its pipe's write end): kept open while we live


def _info() -> dict | None:
    """The running server's description: started here, or inherited from the environment."""
    global _server
    if _server is not None:
        return _server
    with _server_lock:
        if _server is None:
            inherited = os.environ.get(ENV)
            if inherited:
                _server = json.loads(Path(inherited).parent.joinpath("info.json").read_text())
            else:
                _server = _start()
                os.environ[ENV] = _server["socket"]
    return _server


def _interpreter_args(args) -> tuple[list, bool] | None:
    """``args`` as what follows the interpreter (``["-c", code, ...]``, ``["-m", mod, ...]``,
    ``["-", ...]``, ``[script, ...]``) and whether ``-B`` came before it (no bytecode written), or None when a
    fresh interpreter is needed."""
    if isinstance(args, (str, bytes, os.PathLike)) or not args:
        return None
    args = [os.fspath(a) for a in args]
    if any(not isinstance(a, str) for a in args):
        return None
    head, rest = args[0], args[1:]
    if head != sys.executable:
        return ([head, *rest], False) if _is_console_script(head) else None
    no_bytecode = rest[:1] == ["-B"]
    rest = rest[1:] if no_bytecode else rest
    if not rest:
        return None
    if rest[0] == "-":  # the program on stdin
        return rest, no_bytecode
    if rest[0] in ("-c", "-m"):
        return (rest, no_bytecode) if len(rest) >= 2 else None
    if rest[0].startswith("-") or not os.path.isfile(rest[0]):
        return None
    return rest, no_bytecode


def _is_console_script(path: str) -> bool:
    """A script of this environment's bin folder that runs with this interpreter."""
    try:
        with open(path, "rb") as f:
            return f.readline().rstrip() == b"#!" + os.fsencode(sys.executable)
    except OSError:
        return False


def _env_matches(env: dict, info: dict) -> bool:
    mine = {k: v for k, v in env.items() if _read_at_start(k)}
    if mine != info["env"]:
        return False
    imported = set(info["modules"])
    theirs = set(info["pythonpath"])
    for entry in env.get("PYTHONPATH", "").split(os.pathsep):
        if entry in theirs:  # the server has imported from there too
            continue
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        if any(n.partition(".")[0] in imported for n in names):
            return False
    return True


def _fork(parsed: tuple[list, bool], cwd, env: dict, fds: list, new_session: bool):
    """Have the server fork the child (``parsed``: :func:`_interpreter_args`'s answer) with
    ``fds`` as its stdin, stdout and stderr: (pid, the connection its end is reported on), or
    None when it must start as a fresh interpreter (an environment the server's does not
    match) or there is no server."""
    info = _info()
    if not _env_matches(env, info):
        return None
    mask = os.umask(0)
    os.umask(mask)
    argv, no_bytecode = parsed
    request = {"argv": argv, "cwd": os.path.abspath(os.fspath(cwd) if cwd else os.getcwd()),
               "env": env, "umask": mask, "new_session": new_session,
               "no_bytecode": no_bytecode}
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(info["socket"])
        socket.send_fds(conn, [json.dumps(request).encode()], fds)
        return json.loads(conn.recv(1 << 16))["pid"], conn
    except (OSError, ValueError, KeyError):  # no server: start it as usual
        conn.close()
        return None


class ForkPopen(_RealPopen):
    """``subprocess.Popen`` that forks eligible Python children from the server."""

    _fork_conn = None  # the connection the server reports the child's end on
    _forked = False
    _fork_status = 0  # the wait status and resource usage the server's wait4 reported
    rusage = None

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                       startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite,
                       errread, errwrite, restore_signals, gid, gids, uid, umask,
                       start_new_session, *later):
        # later: what newer Pythons pass after start_new_session, given back as it came
        # (3.11 added process_group; 3.10 has nothing there)
        process_group = later[0] if later else None
        parsed = None
        fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1,
               errwrite if errwrite != -1 else 2]
        if (enabled and FORK and not shell
                and executable is None and preexec_fn is None and not pass_fds
                and uid is None and gid is None and gids is None and umask < 0
                and process_group in (None, -1)
                and (cwd is None or os.path.isdir(cwd))
                and not any(os.isatty(fd) for fd in fds)):
            parsed = _interpreter_args(args)
        child_env = dict(os.environ if env is None else
                         {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()})
        forked = _fork(parsed, cwd, child_env, fds, bool(start_new_session)) if parsed else None
        if forked is None:
            return super()._execute_child(
                args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
                restore_signals, gid, gids, uid, umask, start_new_session, *later)
        pid, conn = forked
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)
        self.pid = pid
        self._child_created = True
        self._forked = True
        self._fork_conn = conn
        _by_pid[pid] = self

    def _try_wait(self, wait_flags):
        """The server's report of the child's end: (pid, wait status), or (0, 0) not yet."""
        conn = self._fork_conn
        if conn is None:
            return super()._try_wait(wait_flags)
        conn.setblocking(not wait_flags & os.WNOHANG)
        try:
            reply = conn.recv(1 << 16)
        except BlockingIOError:
            return (0, 0)
        conn.close()
        self._fork_conn = None
        if not reply:  # the server went away: the status is lost, as with SIGCHLD ignored
            return (self.pid, 0)
        ended = json.loads(reply)
        self.rusage = resource.struct_rusage(ended["rusage"])
        self._fork_status = ended["status"]
        return (self.pid, ended["status"])

    def _internal_poll(self, _deadstate=None, _waitpid=None, _WNOHANG=None, _ECHILD=None):
        if not self._forked:
            return super()._internal_poll(_deadstate)
        if self.returncode is None and self._waitpid_lock.acquire(False):
            try:
                if self.returncode is None:
                    pid, status = self._try_wait(os.WNOHANG)
                    if pid == self.pid:
                        self._handle_exitstatus(status)
            finally:
                self._waitpid_lock.release()
        return self.returncode


def _wait4(pid, options):
    """``os.wait4`` that also knows the children the server forked (the server waited for
    them; its ``wait4`` result comes back with their end)."""
    proc = _by_pid.get(pid)
    if proc is None:
        return _real_wait4(pid, options)
    if options & os.WNOHANG:
        if proc.poll() is None:
            return (0, 0, resource.struct_rusage((0,) * 16))
    else:
        proc.wait()
    return (pid, proc._fork_status, proc.rusage)


def start() -> None:
    """Start the server now (and put its address in the environment) if it is not running."""
    _info()


def install() -> None:
    """Route eligible children of this process through the fork server (started on first use)."""
    subprocess.Popen = ForkPopen
    os.wait4 = _wait4


def stand_in(real: str) -> None:
    """The body of a stand-in program (:func:`write_stand_ins`): run ``real`` (this
    environment's interpreter or one of its console scripts) with this process's arguments,
    stdio, working directory and environment, forked by the server when ForkPopen would fork
    it (the same rules), else exec'd; exit as it did."""
    args = [real, *sys.argv[1:]]
    fds = [0, 1, 2]
    parsed = None
    if os.environ.get(ENV) and not any(os.isatty(fd) for fd in fds):
        parsed = _interpreter_args(args)
    forked = _fork(parsed, None, dict(os.environ), fds, False) if parsed else None
    if forked is None:
        os.execv(real, args)
    _pid, conn = forked
    reply = conn.recv(1 << 16)  # when the child has ended
    status = json.loads(reply)["status"] if reply else 0
    if os.WIFSIGNALED(status):
        import signal
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    sys.exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def write_stand_ins(folder: Path, reals: dict[str, str]) -> None:
    """Write ``folder/NAME`` for each ``NAME: real program``: an executable that runs as the
    real program would (:func:`stand_in`), so that the Python children a shell starts (a
    documentation block's ``python -c ...``, ``kcache warm ...``) fork from the server too.
    It starts the interpreter without ``site`` (~20 ms) and imports nothing but this module."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, real in reals.items():
        path = folder / name
        path.write_text(f"#!{sys.executable} -S\nimport sys\nsys.path.insert(0, {str(_HERE)!r})\n"
                        f"import forkserver\nforkserver.stand_in({real!r})\n")
        path.chmod(0o755)

"""A fork server for the hostile-file harness (run as a script, never imported).

Starting an interpreter and importing kcache, its CLI and rich costs about 0.25 s of CPU, more
than most commands take; the corpus runs well over a thousand of them. This process imports
all of that once, then forks one child per command, as a process pool does: each command still
runs in its own process, in its own session, with its own stdout/stderr (passed in as file
descriptors), working directory, environment and address-space limit, and is reaped here and
reported back with its exit status. Set HOSTILE_EXEC=1 to run every command in a fresh
interpreter instead (same results, slower).

Protocol on the SOCK_SEQPACKET socket given as argv[1], one JSON message per packet:
request ``{"id", "argv", "cwd", "env", "as_limit"}`` with two descriptors (stdout, stderr);
replies ``{"id", "pid"}`` once forked and ``{"exit": pid, "status": waitpid status}`` when it
ended.
"""
import atexit
import gc
import json
import os
import resource
import socket
import sys
import threading
import traceback
import warnings

_HERE = sys.path.pop(0)  # this folder: its modules are not for the children
# What the commands import, once, here.
import kcache  # noqa: E402,F401
from kcache.cli.main import build_parser  # noqa: E402
import kcache.store  # noqa: E402,F401
import kcache.toolchain  # noqa: E402,F401
import rich.console  # noqa: E402,F401
import rich.markup  # noqa: E402,F401
import rich.progress  # noqa: E402,F401
import rich.table  # noqa: E402,F401
import rich.text  # noqa: E402,F401

build_parser()  # imports every command module
# What nearly every command imports later, lazily (kcache keeps them off a hit's path): the
# lock library on the first write (~13 ms of CPU a process; with concurrent.futures.thread),
# the maintenance and prune modules (ls, verify, prune, clear, rm, the post-check's put), and
# rich's emoji table (markup). Imported here they cost nothing in each of the ~1,400 children.
import concurrent.futures.thread  # noqa: E402,F401
import filelock  # noqa: E402,F401
import kcache.store.maintenance  # noqa: E402,F401
import kcache.store.reports  # noqa: E402,F401
import rich._emoji_codes  # noqa: E402,F401
sys.path.insert(0, _HERE)
import _child  # noqa: E402
sys.path.pop(0)

warnings.simplefilter("ignore", DeprecationWarning)  # fork() with a reaper thread running
gc.collect()
gc.freeze()  # a child's collections skip what is imported above: its pages stay shared


def _run_child(sock, req, out_fd, err_fd) -> None:
    """In the forked child: become the command's process, run it, never return."""
    rc = 1
    try:
        os.setsid()
        sock.close()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        for fd in (null, out_fd, err_fd):
            os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        resource.setrlimit(resource.RLIMIT_AS, (req["as_limit"], req["as_limit"]))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        sys.argv = ["_child.py", *req["argv"]]
        try:
            rc = _child.main()
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # what the interpreter prints for an uncaught exception
            traceback.print_exc()
            rc = 1
        try:
            atexit._run_exitfuncs()  # e.g. kcache's stats flush, as at a normal exit
        except BaseException:
            traceback.print_exc()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
    finally:
        os._exit(rc if isinstance(rc, int) else 1)


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    send_lock = threading.Lock()

    def send(msg) -> None:
        with send_lock:
            sock.send(json.dumps(msg).encode())

    def reap(pid: int) -> None:
        _pid, status = os.waitpid(pid, 0)
        send({"exit": pid, "status": status})

    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 2)
        except OSError:
            break
        if not data:
            break
        req = json.loads(data)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _run_child(sock, req, *fds)
        for fd in fds:
            os.close(fd)
        send({"id": req["id"], "pid": pid})
        threading.Thread(target=reap, args=(pid,), daemon=True).start()


if __name__ == "__main__":
    main()

"""The suite's fork server (run as a script by tests/forkserver.py, never imported).

A test's Python child pays ~1.1 s of CPU to import numba.cuda before it does anything, and the
suite starts a few hundred of them. This process imports numba.cuda once, then forks one child
per request: each child is still a process of its own, with the requester's stdin/stdout/stderr
(passed in as file descriptors), working directory, umask, environment, ``sys.argv`` and
``sys.path``, and runs its ``-c`` code, ``-m`` module, script or ``-`` (stdin) as ``python``
would. It is reaped here and its wait status is sent back. tests/forkserver.py decides which
children may come here (an environment that numba read at import must match this one's).

Protocol, on a SOCK_SEQPACKET connection per child to the socket path in argv[1]: one request
``{"argv", "cwd", "env", "umask", "new_session", "no_bytecode"}`` (argv as after the
interpreter: ``["-c", code, ...]``, ``["-m", module, ...]``, ``["-", ...]`` (the program on
stdin) or ``[script, ...]``;
``no_bytecode``: the interpreter's ``-B``) with three descriptors (stdin, stdout, stderr);
replies ``{"pid"}`` once forked and ``{"status", "rusage"}`` (``wait4``'s) when it ended.
The server exits when the pipe on argv[2] (its parent's) reaches end of file.
"""
import builtins
import json
import os
import selectors
import socket
import sys

import forkserver  # noqa: E402  (this folder's): the children's own children come here too

sys.path.pop(0)  # this folder: nothing else here is for the children

import numba.cuda  # noqa: E402,F401  what every child would import first (the whole point)


def _prime() -> None:
    """Compile one throwaway kernel to PTX: numba-cuda's set-up on a process's first compile
    (its typing and target contexts, NVVM and libdevice loaded) is then done for every child,
    ~0.7 s of CPU each. Nothing of it is kcache's, nor in a key (docs/keys.md)."""
    try:
        from numba import types

        def _primer(a):
            a[0] = 1

        numba.cuda.compile_ptx(_primer, (types.int32[::1],), cc=(9, 0))
    except Exception:  # no toolkit here: the children pay the set-up themselves
        pass


_prime()

_BASE_PATH = [p for p in sys.path if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]


def _child_path(argv: list, env: dict) -> list:
    """``sys.path`` as a fresh ``python ARGV`` would have it: the first entry, PYTHONPATH's,
    then the interpreter's own (site-packages and what its .pth files add)."""
    if argv[0] in ("-c", "-"):
        first = ""
    elif argv[0] == "-m":
        first = os.getcwd()
    else:
        first = os.path.dirname(os.path.realpath(argv[0]))
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [first, *extra, *_BASE_PATH]


def _run(argv: list) -> int:
    """Run the request as the interpreter would; the exit status it would return."""
    import runpy
    main = type(sys)("__main__")  # a fresh __main__, not this server's namespace
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    try:
        if argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            exec(compile(argv[1], "<string>", "exec"), main.__dict__)
        elif argv[0] == "-":  # the program is stdin (never a terminal here)
            sys.argv = list(argv)
            exec(compile(sys.stdin.buffer.read(), "<stdin>", "exec"), main.__dict__)
        elif argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's path in argv[0]
            runpy._run_module_as_main(argv[1], alter_argv=True)
        else:
            sys.argv = list(argv)
            main.__file__ = os.path.abspath(argv[0])
            with open(argv[0], "rb") as f:
                code = compile(f.read(), main.__file__, "exec")
            exec(code, main.__dict__)
        return 0
    except SystemExit as exc:
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    except BaseException as exc:  # what the interpreter prints for an uncaught exception
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next  # the frames of this server, which a fresh interpreter has not
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        return 1


def _become_child(req: dict, fds: list) -> None:
    """In the forked child: take on the requester's process state, run, never return."""
    rc = 1
    try:
        if req["new_session"]:
            os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        # as exec with close_fds: none of the server's descriptors (its socket, the other
        # children's connections, the pipe from its parent); the server's frame stays alive
        # until os._exit, so no object closes a number that is reused meanwhile
        os.closerange(3, 1 << 16)
        os.chdir(req["cwd"])
        os.umask(req["umask"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.dont_write_bytecode = bool(req["env"].get("PYTHONDONTWRITEBYTECODE")
                                       or req.get("no_bytecode"))  # python -B
        sys.path[:] = _child_path(req["argv"], req["env"])
        _numba_settings()
        _fresh_state()
        import site
        site.execsitecustomize()  # a PYTHONPATH shim's, as site does at start
        if site.ENABLE_USER_SITE:
            site.execusercustomize()
        if req["env"].get("KCACHE_ENABLE"):
            import kcache._hook  # noqa: F401  what kcache-hook.pth does at interpreter start
        if req["env"].get(forkserver.ENV):
            forkserver.install()  # bench's children, for one, start their own children
        rc = _run(req["argv"])
        import atexit
        import threading
        threading._shutdown()  # as the interpreter's exit: non-daemon threads, then atexit
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
    finally:
        os._exit(rc if isinstance(rc, int) else 1)


def _numba_settings() -> None:
    """numba's settings from the child's environment, as a fresh ``import numba`` reads them:
    the NUMBA_* variables read when used (tests/forkserver.py's READ_WHEN_USED, NUMBA_CACHE_DIR)
    may differ from the server's; the others are the server's (or the child was not sent here)."""
    from numba.core import config
    config.reload_config()


def _fresh_state() -> None:
    """What a new interpreter would not share with its siblings: random seeds, tempdir."""
    import random
    import tempfile
    random.seed()
    tempfile.tempdir = None
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()


def main() -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(sys.argv[1])
    listener.listen(64)
    parent = int(sys.argv[2])
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(parent, selectors.EVENT_READ, "parent")
    conns = {}  # connection -> child pid (0 until forked)
    top = sorted({name.partition(".")[0] for name in sys.modules})
    sys.stdout.write("ready " + json.dumps(top) + "\n")
    sys.stdout.flush()
    while True:
        for key, _events in sel.select():
            what = key.data
            if what == "parent":
                return
            if what == "accept":
                conn, _ = listener.accept()
                conns[conn] = 0
                sel.register(conn, selectors.EVENT_READ, ("request", conn))
            elif what[0] == "request":
                conn = what[1]
                sel.unregister(conn)
                try:
                    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 22, 3)
                except OSError:
                    data, fds = b"", []
                if not data or len(fds) != 3:
                    conns.pop(conn)
                    conn.close()
                    continue
                req = json.loads(data)
                pid = os.fork()
                if pid == 0:
                    _become_child(req, fds)
                for fd in fds:
                    os.close(fd)
                conns[conn] = pid
                pidfd = os.pidfd_open(pid)
                sel.register(pidfd, selectors.EVENT_READ, ("exit", conn, pid))
                try:
                    conn.send(json.dumps({"pid": pid}).encode())
                except OSError:
                    pass
            else:  # a child ended
                _, conn, pid = what
                sel.unregister(key.fd)
                os.close(key.fd)
                _, status, usage = os.wait4(pid, 0)
                try:
                    conn.send(json.dumps({"status": status, "rusage": list(usage)}).encode())
                except OSError:
                    pass
                conns.pop(conn, None)
                conn.close()


if __name__ == "__main__":
    main()

"""One case of the hostile-file corpus: build it, run one command on it, observe.

A case is a folder ``base`` holding::

    root/      a copy of a real cache (valid entries written by the store) + the hostile file
    outside/   canaries: files a symlink in the root points to, a valid entry for the hostile
               key (planted.kce), a FIFO, a secret config, a folder, a fake shard folder
    home/      HOME, XDG_CACHE_HOME and the working directory of the command
    tmp/       TMPDIR
    extract/   where ``show --extract`` writes (the only place outside the root it may)
    run/       the harness's own files (spec, stdout, stderr, result)

The command runs in a subprocess (``_child.py``) in its own session, under a wall-clock limit
and an address-space limit (``RLIMIT_AS`` = the interpreter's base + the kind's allowance), on
a pseudo-terminal for the commands people read (rich tables) or on pipes. Everything under
``base`` except ``root/``, ``extract/`` and ``run/`` is snapshotted before and after (type,
size, mtime, mode, owner, content hash, link target): a difference is a write outside the
root. The child's post-check then says whether the valid entries are still served and a new
entry can still be stored.
"""
from __future__ import annotations

import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import pty
import re
import resource
import shutil
import signal
import stat
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

from kcache import Entry, Store
from kcache.entry.format import encode
from kcache.keys import make_key
from kcache.disk.layout import Layout

from .corpus import Kind
from .craft import ARTIFACTS, META

HERE = Path(__file__).resolve().parent
CHILD = HERE / "_child.py"
TIME_LIMIT = 20.0  # seconds, the command and the post-check together
BASE_AS = 320 << 20  # bytes of address space: interpreter, kcache, rich, msgpack, a thread
#: Peak resident memory allowed beyond the kind's allowance: the interpreter with kcache and
#: rich is about 25 MiB, so a file read whole (200 MiB) or a decode blow-up shows up.
BASE_RSS = 48 << 20
COLUMNS = 400

#: The commands run on every kind: name -> (argv template, on a terminal?). "{key}" is the
#: target key (hostile, or a valid one for auxiliary kinds), "{extract}" the extract folder.
COMMANDS: dict[str, tuple[list[str] | None, bool]] = {
    "get": (None, False),
    "ls": (["ls"], True),
    "ls | cat": (["ls"], False),
    "show": (["show", "{key}"], True),
    "show --json": (["show", "{key}", "--json"], False),
    "show --extract": (["show", "{key}", "--extract", "{extract}"], True),
    "verify": (["verify"], True),
    "verify --fix": (["verify", "--fix"], True),
    "prune": (["prune"], True),
    "clear --yes": (["clear", "--yes"], True),
    "rm": (["rm", "{key}"], True),
}
#: Also run on the auxiliary kinds (stats shards, config.json, locks, ...).
AUX_COMMANDS: dict[str, tuple[list[str], bool]] = {
    "stats": (["stats"], True),
    "stats --json": (["stats", "--json"], False),
    "dir": (["dir"], True),
    "config show": (["config", "show"], True),
}
#: Run only on the kinds that name them (``Kind.commands``).
EXTRA_COMMANDS: dict[str, tuple[list[str], bool]] = {
    "show --ptx": (["show", "{key}", "--ptx"], True),
    "show --ptx | cat": (["show", "{key}", "--ptx"], False),
}
JSON_COMMANDS = {"show --json", "stats --json"}
#: Output that is data, written as it is when piped (the PTX text itself).
RAW_DATA_COMMANDS = {"show --ptx | cat"}
#: Escape sequences planted by the escape-names kind: they must never reach the output raw.
RAW_ESCAPES = (b"\x1b]0;pwned", b"\x1b[2J", b"\x1b[31m")


def commands_for(kind: Kind) -> list[str]:
    names = list(COMMANDS)
    if kind.where == "aux":
        names += list(AUX_COMMANDS)
    return names + list(kind.commands)


# ---------------------------------------------------------------------------- the template

@dataclasses.dataclass
class Template:
    """A real cache written by the store, copied into every case."""

    root: Path
    valid_keys: list[str]
    hostile_key: str
    fresh_key: str


def _key(tag, used_shards: set[str]) -> str:
    i = 0
    while True:
        key = make_key({"hostile-corpus": tag, "n": i})
        if key[:2] not in used_shards:
            used_shards.add(key[:2])
            return key
        i += 1


def build_template(where: Path) -> Template:
    """Three valid entries (each in its own shard), read once so stats and hits exist; the
    hostile and the fresh key get shards of their own."""
    where.mkdir(parents=True, exist_ok=True)
    root = where / "template-root"
    shards: set[str] = set()
    valid = [_key(f"valid-{i}", shards) for i in range(3)]
    hostile = _key("hostile", shards)
    fresh = _key("fresh", shards)
    store = Store(root, max_size=1 << 30)  # whatever KCACHE_* the caller has set
    store.disabled = False
    for i, key in enumerate(valid):
        meta = dict(META, kernel=f"pkg.mod:valid{i}")
        assert store.put(key, Entry(dict(ARTIFACTS), meta), components={"n": i})
        assert store.get(key) is not None
    store.flush()
    store.stats()  # toolchain memo etc. are made by the commands themselves
    return Template(root, valid, hostile, fresh)


# ---------------------------------------------------------------------------- a case

@dataclasses.dataclass
class Case:
    """What a kind's builder sees (see kcache/tests/hostile/corpus.py)."""

    base: Path
    root: Path
    outside: Path
    layout: Layout
    key: str  # the hostile key
    valid_keys: list[str]
    fresh_key: str

    layer: Path | None = None  # a read-only layer (KCACHE_READONLY_DIRS), when the kind uses one

    def in_layer(self) -> "Case":
        """This case with the hostile key planted in the read-only layer instead of the root."""
        return dataclasses.replace(self, root=self.layer, layout=Layout(self.layer))

    @property
    def entry_path(self) -> Path:
        return self.layout.entry(self.key)

    @property
    def marker(self) -> Path:
        """Created only if something unpickled the pickle payload."""
        return self.base / "PWNED-marker"

    def valid_bytes(self, key: str | None = None, *, meta: dict | None = None,
                    artifacts: dict | None = None) -> bytes:
        """A valid entry file for ``key`` (default: the hostile key), as the store writes it."""
        return encode(key or self.key, Entry(dict(artifacts or ARTIFACTS), dict(meta or META)),
                      {"kernel": "pkg.mod:hostile"})


def make_case(template: Template, kind: Kind, base: Path) -> Case:
    """Copy the template into ``base/root``, make the canaries, plant the hostile kind."""
    if base.exists():
        _force_rmtree(base)
    for sub in ("outside", "home", "tmp", "run"):
        (base / sub).mkdir(parents=True)
    base.chmod(0o700)
    root = base / "root"
    shutil.copytree(template.root, root, symlinks=True)
    case = Case(base, root, base / "outside", Layout(root), template.hostile_key,
                list(template.valid_keys), template.fresh_key)
    if kind.where == "layer":
        case.layer = base / "layer"
        (case.layer / "v1" / "entries").mkdir(parents=True, mode=0o700)
        case.layer.chmod(0o700)
    _canaries(case)
    kind.build(case)
    return case


def _canaries(case: Case) -> None:
    out = case.outside
    (out / "canary.txt").write_bytes(b"canary: kcache must never change this file\n")
    (out / "planted.kce").write_bytes(case.valid_bytes())  # served only through a symlink
    os.mkfifo(out / "fifo", 0o600)
    (out / "secret.json").write_bytes(b'{"max_size": "1K", "note": "TOPSECRET-canary"}')
    (out / "dir").mkdir()
    (out / "dir" / "canary.txt").write_bytes(b"canary in a folder\n")
    (out / "dir" / case.entry_path.name).write_bytes(b"entry-named canary\n")
    shard = out / "shard"
    shard.mkdir()
    (shard / case.entry_path.name).write_bytes(case.valid_bytes())
    (shard / "canary.txt").write_bytes(b"canary in a fake shard\n")
    for p in (out / "dir" / case.entry_path.name, out / "canary.txt"):
        os.utime(p, (1e9, 1e9))  # old: a prune following a symlink would pick them


def _force_rmtree(path: Path) -> None:
    for dirpath, dirnames, _files in os.walk(path):
        for d in dirnames:
            p = os.path.join(dirpath, d)
            if not os.path.islink(p):
                os.chmod(p, 0o700)
    shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------- snapshots

def snapshot(base: Path, skip=("root", "extract", "run")) -> dict[str, tuple]:
    """Every file under ``base`` (except ``skip``), never following a symlink and never opening
    anything but a regular file: path -> (type, size, mtime_ns, mode, uid, sha256|target)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(base):
        rel_dir = os.path.relpath(dirpath, base)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d not in skip]
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            kind = stat.S_IFMT(st.st_mode)
            extra = None
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    extra = hashlib.sha256(f.read(64 << 20)).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                extra = os.readlink(p)
            mtime = None if stat.S_ISDIR(st.st_mode) else st.st_mtime_ns
            out[os.path.relpath(p, base)] = (kind, st.st_size if not stat.S_ISDIR(st.st_mode) else None,
                                             mtime, stat.S_IMODE(st.st_mode), st.st_uid, extra)
    return out


def diff(before: dict, after: dict, mtime_ok=()) -> list[str]:
    """What changed between two snapshots; ``mtime_ok``: paths whose mtime alone may change."""
    changes = []
    for p in sorted(set(before) | set(after)):
        if p not in after:
            changes.append(f"removed {p}")
        elif p not in before:
            changes.append(f"created {p}")
        elif before[p] != after[p]:
            if p in mtime_ok and before[p][:2] + before[p][3:] == after[p][:2] + after[p][3:]:
                continue
            changes.append(f"changed {p}")
    return changes


def entry_state(path: Path) -> str:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    except NotADirectoryError:
        return "absent"
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "folder"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "device")):
        if test(st.st_mode):
            return name
    return "other"


def quarantined(layout: Layout) -> int:
    try:
        st = os.lstat(layout.quarantine)
    except OSError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        return 0
    return len(os.listdir(layout.quarantine))


# ---------------------------------------------------------------------------- running

@dataclasses.dataclass
class Observation:
    kind: str
    command: str
    argv: list[str]
    tty: bool
    rc: int | None
    timed_out: bool
    signal: int | None
    wall: float
    peak_bytes: int | None  # the child's peak RSS (VmHWM)
    peak_vm_bytes: int | None  # the child's peak address space (VmPeak; limited by as_limit)
    as_limit: int
    stdout: bytes
    stderr: bytes
    result: dict  # what _child.py wrote (rc, get results, post-check)
    outside_changes: list[str]
    entry_before: str
    entry_after: str
    quarantine_before: int
    quarantine_after: int
    marker: bool  # the pickle payload ran
    key: str  # the key show/rm named
    hostile_key: str
    valid_keys: list[str]
    base: str
    root: str

    @property
    def text_out(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def text_err(self) -> str:
        return self.stderr.decode("utf-8", "replace")


def _env(case: Case) -> dict[str, str]:
    """A clean environment: nothing of the caller's KCACHE_*, HOME and TMPDIR in the case."""
    home = case.base / "home"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "TMPDIR": str(case.base / "tmp"),
        "KCACHE_DIR": str(case.root),
        "LANG": "C.UTF-8",
        "TERM": "xterm-256color",
        "COLUMNS": str(COLUMNS),
        "LINES": "50",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MALLOC_ARENA_MAX": "2",  # thread arenas reserve 64 MiB of address space each
    }
    if case.layer is not None:
        env["KCACHE_READONLY_DIRS"] = str(case.layer)
    if "VIRTUAL_ENV" in os.environ:
        env["VIRTUAL_ENV"] = os.environ["VIRTUAL_ENV"]
    return env


def _spawn(child_args: list[str], case: Case, as_limit: int, out_fd: int, err_fd: int,
           extra_env: dict[str, str] | None = None):
    """Start ``_child.py child_args`` in its own session; returns (pid, wait) where
    ``wait(timeout)`` gives the waitpid status, or None while it still runs."""
    env = {**_env(case), **(extra_env or {})}
    cwd = str(case.base / "home")
    zygote = None if os.environ.get("HOSTILE_EXEC") else Zygote.get()
    if zygote is not None:
        pid = zygote.spawn(child_args, cwd, env, as_limit, out_fd, err_fd)
        return pid, lambda timeout: zygote.wait(pid, timeout)
    proc = subprocess.Popen([sys.executable, str(CHILD), *child_args], stdin=subprocess.DEVNULL,
                            stdout=out_fd, stderr=err_fd, cwd=cwd, env=env,
                            preexec_fn=_limits(as_limit), start_new_session=True)
    status: list = []
    waiter = threading.Thread(target=lambda: status.append(os.waitpid(proc.pid, 0)[1]),
                              daemon=True)
    waiter.start()

    def wait(timeout):
        waiter.join(timeout)
        if waiter.is_alive():
            return None
        proc.returncode = 0  # reaped above: keep Popen from waiting again
        return status[0]
    return proc.pid, wait


class Zygote:
    """The fork server (``_zygote.py``): one per harness process, started on first use."""

    _instance: "Zygote | None" = None
    _create = threading.Lock()

    @classmethod
    def get(cls) -> "Zygote":
        with cls._create:
            if cls._instance is None or cls._instance.proc.poll() is not None:
                cls._instance = cls()
            return cls._instance

    def __init__(self):
        import socket
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "MALLOC_ARENA_MAX": "2",
               "HOME": os.environ.get("HOME", "/"), "TERM": "xterm-256color"}
        self.proc = subprocess.Popen([sys.executable, str(HERE / "_zygote.py"), str(theirs.fileno())],
                                     pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL)
        theirs.close()
        self.sock = ours
        self.cond = threading.Condition()
        self.started: dict[int, int] = {}  # request id -> pid
        self.exits: dict[int, int] = {}  # pid -> status
        self.next_id = 0
        self.send_lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                data = b""
            with self.cond:
                if not data:
                    self.dead = True
                    self.cond.notify_all()
                    return
                msg = json.loads(data)
                if "exit" in msg:
                    self.exits[msg["exit"]] = msg["status"]
                else:
                    self.started[msg["id"]] = msg["pid"]
                self.cond.notify_all()

    dead = False

    def spawn(self, args, cwd, env, as_limit, out_fd, err_fd) -> int:
        import socket
        with self.cond:
            self.next_id += 1
            rid = self.next_id
        msg = json.dumps({"id": rid, "argv": args, "cwd": cwd, "env": env, "as_limit": as_limit})
        with self.send_lock:
            socket.send_fds(self.sock, [msg.encode()], [out_fd, err_fd])
        with self.cond:
            if not self.cond.wait_for(lambda: rid in self.started or self.dead, 60):
                raise RuntimeError("the hostile-corpus fork server did not answer in 60 s")
            if self.dead:
                raise RuntimeError("the hostile-corpus fork server died")
            return self.started.pop(rid)

    def wait(self, pid: int, timeout: float) -> int | None:
        with self.cond:
            self.cond.wait_for(lambda: pid in self.exits or self.dead, timeout)
            return self.exits.pop(pid, None)


def _limits(as_bytes: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def _reader(fd: int, sink: list) -> threading.Thread:
    def read():
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError as exc:  # EIO: the terminal's other side closed
                if exc.errno in (errno.EIO, errno.EBADF):
                    break
                raise
            if not chunk:
                break
            if sum(map(len, sink)) < (64 << 20):  # keep at most 64 MiB of what it prints
                sink.append(chunk)
    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def observe(template: Template, kind: Kind, command: str, work: Path, *,
            env: dict[str, str] | None = None, time_limit: float = TIME_LIMIT) -> Observation:
    """Build a fresh case of ``kind`` under ``work`` and run ``command`` on it (``env``: extra
    environment variables; ``time_limit``: seconds before it is killed)."""
    case = make_case(template, kind, work)
    argv_t, tty = {**COMMANDS, **AUX_COMMANDS, **EXTRA_COMMANDS}[command]
    key = case.key if kind.target == "hostile" else case.valid_keys[0]
    hostile_at = case.in_layer() if case.layer is not None else case
    run = case.base / "run"
    spec_path = _write_spec(case, command, key, hostile_at.entry_path)
    if argv_t is None:
        argv, child = [], ["get", str(spec_path)]
    else:
        argv = [a.replace("{key}", key[:16]).replace("{extract}", str(case.base / "extract"))
                for a in argv_t]
        child = ["cli", str(spec_path), "--", *argv]
    before = snapshot(case.base)
    entry_before = entry_state(hostile_at.entry_path)
    q_before = quarantined(case.layout)
    as_limit = BASE_AS + kind.mem
    start = time.monotonic()
    status, stdout, timed_out = _run(child, case, as_limit, tty, env, time_limit)
    wall = time.monotonic() - start
    rc = sig = None
    if status is not None:
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
        else:
            rc = os.WEXITSTATUS(status)
    result = _result(run)
    obs = Observation(
        kind=kind.name, command=command, argv=argv, tty=tty, rc=rc, timed_out=timed_out,
        signal=sig, wall=wall, peak_bytes=result.get("peak_bytes"),
        peak_vm_bytes=result.get("peak_vm_bytes"), as_limit=as_limit, stdout=stdout,
        stderr=(run / "stderr").read_bytes()[: 64 << 20], result=result,
        outside_changes=diff(before, snapshot(case.base), kind.outside_mtime_ok),
        entry_before=entry_before, entry_after=entry_state(hostile_at.entry_path),
        quarantine_before=q_before, quarantine_after=quarantined(case.layout),
        marker=case.marker.exists(), key=key, hostile_key=case.key,
        valid_keys=list(case.valid_keys), base=str(case.base), root=str(case.root))
    _force_rmtree(case.base)
    return obs


def _write_spec(case: Case, command: str, key: str, hostile_path: Path) -> Path:
    """The child's instructions: keys, which valid entries must survive ``command``, where to
    write its result."""
    run = case.base / "run"
    survivors = list(case.valid_keys)
    if command == "clear --yes":
        survivors = []
    elif command == "rm" and key in survivors:
        survivors.remove(key)
    spec = {"key": case.key, "valid_keys": case.valid_keys, "survivors": survivors,
            "fresh_key": case.fresh_key, "artifacts": {k: v.hex() for k, v in ARTIFACTS.items()},
            "hostile_path": str(hostile_path),
            "result": str(run / "result.json"), "post_log": str(run / "post.log")}
    path = run / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def _run(child: list[str], case: Case, as_limit: int, tty: bool, env, time_limit: float):
    """Run the child on a terminal (``tty``) or a pipe, stderr to ``run/stderr``; kill its
    session after ``time_limit`` seconds. Returns (waitpid status or None, stdout, timed out)."""
    out_chunks: list[bytes] = []
    with open(case.base / "run" / "stderr", "wb") as err:
        if tty:
            master, slave = pty.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, COLUMNS, 0, 0))
        else:
            master, slave = os.pipe()
        try:
            pid, wait = _spawn(child, case, as_limit, slave, err.fileno(), env)
        finally:
            os.close(slave)
        reader = _reader(master, out_chunks)
        status = wait(time_limit)
        timed_out = status is None
        if timed_out:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            status = wait(10)
        reader.join(10)
        os.close(master)
    return status, b"".join(out_chunks), timed_out


def _result(run: Path) -> dict:
    """What the child wrote (``{}`` if nothing), with its post-check's stray output."""
    try:
        result = json.loads((run / "result.json").read_text())
    except (OSError, ValueError):
        result = {}
    post_log = run / "post.log"
    if post_log.exists() and post_log.stat().st_size:
        result["post_log"] = post_log.read_text(errors="replace")[:20000]
    return result


# ---------------------------------------------------------------------------- judging

_ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text).replace("\r", "")


def problems(obs: Observation, kind: Kind) -> list[str]:
    """Every rule of issue 7 the observation breaks ([] when it passed)."""
    bad = []
    out, err = obs.text_out, obs.text_err
    if obs.timed_out:
        bad.append(f"hung: killed after {TIME_LIMIT:g} s")
    if obs.signal is not None:
        bad.append(f"killed by signal {obs.signal}")
    for where, text in (("stdout", out), ("stderr", err),
                        ("post-check", obs.result.get("post_log", "") + obs.result.get("post_error", ""))):
        if "Traceback (most recent call last)" in text:
            bad.append(f"traceback on {where}: {_last_line(text)}")
        elif "MemoryError" in text:
            bad.append(f"MemoryError on {where}")
    if obs.peak_bytes and obs.peak_bytes > BASE_RSS + kind.mem:
        bad.append(f"peak memory {obs.peak_bytes >> 20} MiB, more than the "
                   f"{(BASE_RSS + kind.mem) >> 20} MiB allowed")
    if obs.command == "get":
        if obs.rc not in (0, None):
            bad.append(f"get raised (exit {obs.rc})")
        if err.strip():
            bad.append(f"unexpected stderr: {_last_line(err)}")
        served = obs.result.get("hostile")
        if kind.served is not None and served is not None and (served == "hit") != kind.served:
            bad.append(f"hostile key: {served} (expected {'hit' if kind.served else 'miss'})")
        if expected_fix(kind) == "quarantined" and obs.result.get("after_gets", "absent") != "absent":
            bad.append(f"get left the bad file in place ({obs.result['after_gets']})")
        if (obs.result.get("corrupt") or 0) > 1:
            bad.append(f"two gets of one bad file counted {obs.result['corrupt']} corrupt")
        warned = " ".join(obs.result.get("warnings") or [])
        if kind.warns and kind.warns not in warned:
            bad.append(f"get did not warn {kind.warns!r}")
        for k, v in (obs.result.get("valid") or {}).items():
            if v != "hit" and not kind.refused:
                bad.append(f"valid entry {k[:12]}: {v} during the get")
    else:
        allowed = {0, 1}
        if obs.command in ("show", "show --json", "show --extract", "rm") and "no entry with key prefix" in err:
            allowed.add(2)  # the hostile file is not an entry at all: a usage error
        if "written by a newer kcache format" in err:
            allowed.add(2)  # documented: a newer-format entry is refused, nothing changed
        if kind.bad_setting and len(err.strip().splitlines()) == 1 and "config.json" in err:
            allowed.add(2)  # documented: a bad setting is a usage error, one line
        if obs.rc is not None and obs.rc not in allowed:
            bad.append(f"exit status {obs.rc}: {_last_line(err)}")
        for line in strip_ansi(err).splitlines():
            if line.strip() and not line.startswith("kcache"):
                bad.append(f"stderr line not from kcache: {line[:200]!r}")
                break
    if obs.command in JSON_COMMANDS and obs.rc == 0:
        try:
            json.loads(out, parse_constant=_no_constant)
        except ValueError as exc:
            bad.append(f"invalid JSON on stdout: {exc}")
    if obs.command not in JSON_COMMANDS:
        raw = obs.stderr if obs.command in RAW_DATA_COMMANDS else obs.stdout + obs.stderr
        for seq in RAW_ESCAPES:
            if seq in raw:
                bad.append(f"raw escape sequence {seq!r} reached the output")
    if obs.command == "verify --fix":
        bad += _check_fix(obs, kind)
    if "locked by another process" in out + err + " ".join(obs.result.get("warnings") or []):
        bad.append("says another process holds a lock (no other process runs)")
    if obs.outside_changes:
        bad.append(f"changed outside the root: {', '.join(obs.outside_changes[:5])}")
    if obs.marker:
        bad.append("the pickle payload was executed")
    if "TOPSECRET" in out + err:
        bad.append("the secret file behind a config.json symlink was printed")
    for name in ("store_error", "post_store_error"):
        if obs.result.get(name) and not kind.bad_setting:
            bad.append(f"Store() raised {obs.result[name][:200]}")
    if kind.refused:
        said = " ".join(obs.result.get("warnings", [])) + err
        if "not trusted" not in said and obs.command not in ("dir", "config show"):
            bad.append("the refused root was not reported as not trusted")
    if obs.result.get("post_error"):
        bad.append(f"post-check raised: {_last_line(obs.result['post_error'])}")
    elif (obs.rc is not None and not obs.timed_out and not kind.refused
          and not obs.result.get("post_store_error")):
        for k, v in (obs.result.get("post_get") or {}).items():
            if v != "hit":
                bad.append(f"afterwards valid entry {k[:12]}: {v}")
        if obs.result.get("post_put") is not True:
            bad.append("afterwards a put+get of a new key failed")
    if not obs.result and not obs.timed_out and obs.signal is None:
        bad.append("the child wrote no result")
    return bad


def expected_fix(kind: Kind) -> str | None:
    """What ``verify --fix`` must do with the hostile file (see ``Kind.fix``)."""
    if kind.fix != "default":
        return kind.fix
    if kind.served is not False:
        return None
    return "quarantined" if kind.where == "entry" else None


def _check_fix(obs: Observation, kind: Kind) -> list[str]:
    want = expected_fix(kind)
    moved = obs.entry_after == "absent" and obs.quarantine_after > obs.quarantine_before
    if want == "quarantined" and (obs.rc != 0 or not moved):
        return [f"verify --fix did not quarantine it (exit {obs.rc}, path now {obs.entry_after})"]
    if want == "left" and (obs.rc != 1 or obs.entry_after == "absent"):
        return [f"verify --fix should report it left in place (exit {obs.rc}, path now "
                f"{obs.entry_after})"]
    if want == "untouched" and obs.entry_after != obs.entry_before:
        return [f"verify --fix changed a newer-format file ({obs.entry_after})"]
    return []


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def _last_line(text: str) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1][:300] if lines else ""


# ---------------------------------------------------------------------------- describing

def describe(obs: Observation) -> str:
    """What the command did, in a few words, from the observation alone (for the table)."""
    subst = _substitutions(obs)
    parts = []
    if obs.timed_out:
        parts.append(f"HUNG (killed after {TIME_LIMIT:g} s)")
    elif obs.signal is not None:
        parts.append(f"KILLED (signal {obs.signal})")
    if obs.command == "get":
        if obs.result.get("store_error"):
            parts.append(f"Store() raised {_clean(obs.result['store_error'], subst)}")
        else:
            parts.append(obs.result.get("hostile", "?"))
        if "hostile_put" in obs.result:
            parts.append("then put: " + ("stored" if obs.result["hostile_put"] else "not stored"))
        warns = obs.result.get("warnings") or []
        if warns:
            parts.append("warned: " + " / ".join(_clean(w, subst) for w in warns))
        else:
            parts.append("no warning")
    else:
        parts.append(f"exit {obs.rc}" if obs.rc is not None else "")
        if obs.command == "show --json" and obs.rc in (0, 1):
            try:
                doc = json.loads(obs.text_out)
                parts.append(f"problem: {_clean(str(doc.get('problem')), subst)}")
            except ValueError:
                pass
        if obs.command in ("ls", "ls | cat", "verify", "verify --fix", "prune", "rm", "clear --yes"):
            hostile_rows = [r for r in (strip_ansi(l) for l in obs.text_out.splitlines())
                            if obs.hostile_key[:12] in r]
            if obs.command.startswith("ls"):
                parts.append("listed: " + _clean(hostile_rows[0], subst) if hostile_rows
                             else "not listed")
            elif hostile_rows:
                parts.append("row: " + _clean(hostile_rows[0], subst))
        errs = [_clean(l, subst) for l in strip_ansi(obs.text_err).splitlines() if l.strip()]
        if errs:
            parts.append("said: " + " / ".join(errs[:4]) + (" / ..." if len(errs) > 4 else ""))
        if obs.command == "show --extract":
            parts.append("wrote files" if "wrote" in obs.text_err else "wrote nothing")
    after = obs.entry_after
    if obs.command == "get":  # its state after the gets, before the program's put
        after = obs.result.get("after_gets", after)
    if obs.entry_before != after:
        fate = {"absent": "removed" if obs.quarantine_after <= obs.quarantine_before else "quarantined"}
        parts.append(f"hostile path: {obs.entry_before} -> {fate.get(after, after)}")
    return "; ".join(p for p in parts if p)


def _substitutions(obs: Observation) -> list[tuple[str, str]]:
    subst = [(obs.root, "<root>"), (obs.base, "<case>"), (obs.hostile_key, "<key>"),
             (obs.hostile_key[:16], "<key>"), (obs.hostile_key[:12], "<key>")]
    for k in obs.valid_keys:
        subst += [(k, "<valid>"), (k[:16], "<valid>"), (k[:12], "<valid>")]
    return subst


_VARIABLE = ((re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"), "<time>"),
             (re.compile(r"\b(?:just now|\d+ (?:s|min|h|d) ago)"), "<ago>"))


def _clean(text: str, subst) -> str:
    """One line of output for the table: paths and keys by name, times masked, control
    characters escaped, at most 400 characters."""
    for a, b in subst:
        text = text.replace(a, b)
    for pattern, name in _VARIABLE:
        text = pattern.sub(name, text)
    text = " ".join(text.split())
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return text[:400] + ("..." if len(text) > 400 else "")


def work_dir(fallback: Path) -> Path:
    """Where cases are built: ``$HOSTILE_DIR``, else a fresh folder in /dev/shm when it has
    1 GiB free (a tmpfs: the store's fsyncs cost nothing there, a third of the run time on a
    disk), else ``fallback``. Same file semantics either way (FIFOs, sockets, sparse files,
    O_NOFOLLOW, rename)."""
    import tempfile
    if os.environ.get("HOSTILE_DIR"):
        return Path(tempfile.mkdtemp(prefix="kcache-hostile-", dir=os.environ["HOSTILE_DIR"]))
    try:
        vfs = os.statvfs("/dev/shm")
        if vfs.f_bavail * vfs.f_frsize >= 1 << 30 and os.access("/dev/shm", os.W_OK):
            return Path(tempfile.mkdtemp(prefix="kcache-hostile-", dir="/dev/shm"))
    except OSError:
        pass
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback


def default_jobs() -> int:
    """Cases run at once: ``$HOSTILE_JOBS``, else CPUs + 2 (they also wait on the disk)."""
    return int(os.environ.get("HOSTILE_JOBS") or min(8, (os.cpu_count() or 2) + 2))


def observe_many(template: Template, pairs, work: Path, jobs: int = 2):
    """Observe every (kind, command) pair, ``jobs`` at a time; yields observations in order."""
    from concurrent.futures import ThreadPoolExecutor
    pairs = list(pairs)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(observe, template, kind, command, work / f"case{i}")
                   for i, (kind, command) in enumerate(pairs)]
        for fut in futures:
            yield fut.result()

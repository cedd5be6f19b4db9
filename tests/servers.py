"""Real servers for the remote-tier tests, all on 127.0.0.1: redis-server, moto's S3 server,
a server that accepts connections and never answers, one that answers one byte every 0.5 s,
one that quotes what it was sent in its error answers, and a port that refuses connections.

Session fixtures use the servers .ci/run started (``KCACHE_TEST_REDIS_URL``,
``KCACHE_TEST_S3_ENDPOINT``), else start their own on free loopback ports when the programs are
installed, else skip with a reason. With ``KCACHE_TEST_REQUIRE_SERVERS=1`` (set by .ci/run) a
server that cannot be had is a failure, not a skip: CI never skips these tests.

Import the fixtures into a test module: ``from servers import redis_url, s3_endpoint, ...``.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

LOOPBACK = "127.0.0.1"
START_TIMEOUT = 30.0  # seconds for a server to answer after it was started
# Read at import (collection), before conftest's autouse clean_env removes every KCACHE_*
# variable from each test's environment.
REQUIRE_SERVERS = os.environ.get("KCACHE_TEST_REQUIRE_SERVERS", "") == "1"
REDIS_URL = os.environ.get("KCACHE_TEST_REDIS_URL", "").strip()
S3_ENDPOINT = os.environ.get("KCACHE_TEST_S3_ENDPOINT", "").strip()


def servers_required() -> bool:
    return REQUIRE_SERVERS


def unavailable(reason: str):
    """Skip with ``reason``, or fail when CI requires the servers."""
    if servers_required():
        pytest.fail(f"{reason} (KCACHE_TEST_REQUIRE_SERVERS=1: CI must provide it)")
    pytest.skip(reason)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.02) -> None:
    """Poll ``predicate`` until it is true; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class RedisServer:
    """A redis-server process of our own (no persistence) on a loopback port; ``stop(kill)``
    ends it, ``start()`` starts it again on the same port."""

    def __init__(self, password: str | None = None, unix: bool = False, tls: bool = False):
        exe = shutil.which("redis-server")
        if exe is None:
            unavailable("redis-server is not installed (Debian package redis-server; .ci/run installs it)")
        self.exe = exe
        self.password = password
        self.dir = tempfile.mkdtemp(prefix="kcache-redis-")
        self.socket = os.path.join(self.dir, "redis.sock") if unix else None
        self.port = 0 if unix else free_port()  # port 0: no TCP at all
        self.tls_port = free_port() if tls else None
        self.cert = self._self_signed_cert() if tls else None
        self.proc: subprocess.Popen | None = None

    def _self_signed_cert(self) -> str:
        """A self-signed certificate for 127.0.0.1 (also its own CA), made by openssl."""
        if shutil.which("openssl") is None:
            unavailable("openssl is not installed (needed to make a TLS certificate)")
        cert, key = os.path.join(self.dir, "cert.pem"), os.path.join(self.dir, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                        "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
        return cert

    @property
    def tls_url(self) -> str:
        """rediss:// URL of the TLS port, trusting the test certificate."""
        return f"rediss://{LOOPBACK}:{self.tls_port}/0?ssl_ca_certs={self.cert}&ssl_cert_reqs=required"

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        if self.socket:
            return f"unix://{auth}{self.socket}?db=0"
        return f"redis://{auth}{LOOPBACK}:{self.port}/0"

    def start(self) -> "RedisServer":
        args = [self.exe, "--port", str(self.port), "--bind", LOOPBACK, "--save", "",
                "--appendonly", "no", "--dir", self.dir, "--logfile", "", "--loglevel", "warning"]
        if self.socket:
            args += ["--unixsocket", self.socket]
        if self.cert:
            key = os.path.join(self.dir, "key.pem")
            args += ["--tls-port", str(self.tls_port), "--tls-cert-file", self.cert, "--tls-key-file", key,
                     "--tls-ca-cert-file", self.cert, "--tls-auth-clients", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_until(self._answers, START_TIMEOUT, f"redis-server on port {self.port}")
        return self

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            err = self.proc.stderr.read().decode(errors="replace")[-500:]
            raise AssertionError(f"redis-server exited with {self.proc.returncode}: {err}")
        try:
            if self.socket:
                s = socket.socket(socket.AF_UNIX)
                s.settimeout(1)
                s.connect(self.socket)
            else:
                s = socket.create_connection((LOOPBACK, self.port), timeout=1)
            with s:
                s.sendall(b"PING\r\n")
                reply = s.recv(64)
            # +PONG, or -NOAUTH when a password is required: either way it is serving
            return reply.startswith((b"+PONG", b"-NOAUTH"))
        except OSError:
            return False

    def stop(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        (self.proc.kill if kill else self.proc.terminate)()
        self.proc.wait(timeout=30)
        self.proc.stderr.close()
        self.proc = None

    def close(self) -> None:
        self.stop(kill=True)
        shutil.rmtree(self.dir, ignore_errors=True)


class MotoServer:
    """moto's S3 server (``python -m moto.server``) on a loopback port."""

    def __init__(self):
        try:
            import moto.server  # noqa: F401
        except ImportError as exc:
            unavailable(f"moto's server is not installed ({exc}); moto[s3], flask and "
                        "flask-cors are in kcache's test extra")
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> "MotoServer":
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._answers, START_TIMEOUT, f"moto S3 server on port {self.port}", interval=0.1)
        return self

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"moto server exited with {self.proc.returncode}")
        return http_answers(self.endpoint)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def http_answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1).close()
    except urllib.error.HTTPError:
        return True  # an HTTP answer, whatever its status
    except OSError:
        return False
    return True


class LoopbackServer:
    """A TCP server of threads on a free loopback port: :meth:`serve` runs for each accepted
    connection in a thread of its own until :meth:`close` (which waits for them all)."""

    def __init__(self):
        self.sock = socket.create_server((LOOPBACK, 0))
        self.port = self.sock.getsockname()[1]
        self.sock.settimeout(0.1)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue  # timeout: check the stop flag
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            self.serve(conn)

    def serve(self, conn: socket.socket) -> None:  # pragma: no cover - each server's own
        raise NotImplementedError

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for thread in self._threads:
            thread.join()
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SilentServer(LoopbackServer):
    """Accepts every connection and never answers nor closes (until closed itself): the
    hardest case for a client's timeouts. ``accepted``: connections so far."""

    accepted = property(lambda self: len(self._threads))

    def serve(self, conn: socket.socket) -> None:
        self._stop.wait()


class DrippingServer(LoopbackServer):
    """Answers whatever it is sent with a reply that never ends, one byte every ``interval``
    seconds (by default 0.5 s: within any read timeout of 1 s): ``+OK`` then ``K``s (a Redis
    simple string, or an FTP banner line, with no end of line); with ``greet`` without waiting
    for a request (an FTP server speaks first). Only a deadline on the whole call ends a
    client's wait. ``accepted``: connections so far; ``closed``: those the client closed."""

    def __init__(self, interval: float = 0.5, greet: bool = False):
        self.interval = interval
        self.greet = greet
        self.closed = 0
        self._lock = threading.Lock()
        super().__init__()

    accepted = property(lambda self: len(self._threads))

    def serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(self.interval)
            if not self.greet:
                self._request(conn)
            sent = 0
            while not self._stop.is_set():
                conn.sendall(b"+OK"[sent:sent + 1] or b"K")
                sent += 1
                self._stop.wait(self.interval)  # the server's behaviour: slow, not synchronisation
                self._check_open(conn)
        except OSError:
            with self._lock:
                self.closed += 1

    def _request(self, conn: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                if not conn.recv(65536):
                    raise ConnectionResetError  # closed before asking
                return
            except socket.timeout:
                continue

    def _check_open(self, conn: socket.socket) -> None:
        """ConnectionResetError once the client has closed its end (more requests are ignored)."""
        conn.setblocking(False)
        try:
            if conn.recv(65536) == b"":
                raise ConnectionResetError
        except BlockingIOError:
            pass
        finally:
            conn.settimeout(self.interval)


class EchoingServer(LoopbackServer):
    """Answers every request with a Redis error quoting what it was sent (as a server does
    for a command it does not know): a password sent in AUTH comes back in the error text."""

    def serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.1)
        while not self._stop.is_set():
            try:
                data = conn.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if not data:
                return
            quoted = b" ".join(data.split(b"\r\n"))[:300]
            with contextlib.suppress(OSError):
                conn.sendall(b"-ERR unknown command, with args beginning with: " + quoted + b"\r\n")


@contextlib.contextmanager
def refusing_port() -> Iterator[int]:
    """A loopback port bound but not listening: a connection to it is refused (RST)."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        yield s.getsockname()[1]


# -- fixtures ---------------------------------------------------------------------------
@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a Redis server shared by the session (.ci/run's, else one started here)."""
    if REDIS_URL:
        yield REDIS_URL
        return
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.close()


@pytest.fixture
def make_redis() -> Iterator[Callable[..., RedisServer]]:
    """Start private redis-servers for one test (to stop, restart, protect with a password,
    or serve on a unix socket): ``make_redis(password=None, unix=False)``; all are ended
    after the test."""
    started: list[RedisServer] = []

    def make(**kw) -> RedisServer:
        server = RedisServer(**kw)
        started.append(server)
        return server.start()

    yield make
    for server in started:
        server.close()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """Endpoint URL of an S3 server shared by the session (.ci/run's moto, else one started here)."""
    if S3_ENDPOINT:
        yield S3_ENDPOINT
        return
    server = MotoServer().start()
    try:
        yield server.endpoint
    finally:
        server.close()


class ThreadedHTTP:
    """An HTTP server on 127.0.0.1 in a thread of this process, for fake S3 endpoints:
    :meth:`serve` starts it with a ``BaseHTTPRequestHandler`` class; ``endpoint`` is its URL;
    a ``with`` block shuts it down."""

    def serve(self, handler) -> None:
        import http.server

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()


#: A user's program in a child process: one Store.get with the remote the environment names;
#: prints the outcome, the remote's error counters and the child's peak memory (VmHWM, bytes:
#: ru_maxrss keeps the forked parent's high-water mark over exec).
_LOOKUP_CHILD = """
import json, sys, time
from kcache import Store, make_key

def peak():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) << 10 for l in f if l.startswith("VmHWM:"))

store = Store(sys.argv[1])
start = time.monotonic()
got = store.get(make_key({"lookup": 1}))
took = time.monotonic() - start
st = store.stats()
print(json.dumps({"hit": got is not None, "took": took, "bad": st.remote_errors_bad_value,
                  "timeout": st.remote_errors_timeout, "io": st.remote_errors_io,
                  "rss": peak()}))
"""


def s3_lookup_in_child(endpoint: str, tmp_path: Path, timeout: float = 3,
                       memory: int = 1 << 30) -> tuple[subprocess.CompletedProcess, dict | None]:
    """One lookup of a user's program against the S3 ``endpoint`` (test credentials, nothing
    leaves the machine), in a child limited to ``memory`` bytes of data (RLIMIT_DATA), with
    KCACHE_REMOTE_TIMEOUT ``timeout`` s: (the finished process, its JSON report or None)."""
    import json
    import resource

    env = {k: v for k, v in os.environ.items() if not k.startswith(("KCACHE_", "AWS_"))}
    env.update(KCACHE_REMOTE="s3://bucket/cache", KCACHE_REMOTE_TIMEOUT=str(timeout),
               AWS_ENDPOINT_URL_S3=endpoint, AWS_ACCESS_KEY_ID="testing",
               AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
               AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
    done = subprocess.run([sys.executable, "-c", _LOOKUP_CHILD, str(tmp_path / "root")],
                          env=env, capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_DATA,
                                                                (memory, memory)))
    try:
        return done, json.loads(done.stdout)
    except ValueError:
        return done, None


@pytest.fixture
def aws_env(monkeypatch, tmp_path) -> None:
    """Test credentials for moto; no AWS profile, config file or instance metadata lookup
    (nothing leaves the machine)."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))


@pytest.fixture
def s3_bucket(s3_endpoint, aws_env, monkeypatch) -> str:
    """A new, empty bucket on the S3 server; its URL is ``s3://<bucket>``. The endpoint is
    given the way users give it: ``AWS_ENDPOINT_URL_S3``."""
    import boto3

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_endpoint)
    name = f"kcache-test-{worker_tag()}{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name


def worker_tag() -> str:
    """``gw0-`` in pytest-xdist's worker gw0, empty in a serial run: the prefix of every Redis
    namespace and S3 bucket a worker makes, so workers sharing .ci/run's servers never meet
    (and a leftover key names the worker that left it)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return f"{worker}-" if worker else ""


def unique_namespace() -> str:
    return f"t{worker_tag()}{uuid.uuid4().hex[:12]}"


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


# -- servers that state a size, then drip ------------------------------------------------------

def _resp_commands(conn: socket.socket, stop: threading.Event) -> Iterator[list[bytes]]:
    """The commands a Redis client sends on ``conn`` (RESP arrays of bulk strings), one list
    of words each, until the client closes or ``stop`` is set."""
    buf = b""
    conn.settimeout(0.1)
    while not stop.is_set():
        while True:  # every complete command in the buffer
            words, rest = _resp_parse(buf)
            if words is None:
                break
            buf = rest
            yield words
        try:
            data = conn.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            return
        if not data:
            return
        buf += data


def _resp_parse(buf: bytes) -> tuple[list[bytes] | None, bytes]:
    """(words, rest) of the first complete RESP array in ``buf``, else (None, buf)."""
    if not buf.startswith(b"*") or b"\r\n" not in buf:
        return None, buf
    head, _, rest = buf.partition(b"\r\n")
    words = []
    for _ in range(int(head[1:])):
        line, sep, rest = rest.partition(b"\r\n")
        if not sep:
            return None, buf
        n = int(line[1:])
        if len(rest) < n + 2:
            return None, buf
        words.append(rest[:n])
        rest = rest[n + 2:]
    return words, rest


class StatingRedis(LoopbackServer):
    """A fake Redis (RESP on a loopback port) that states a size and then drips. STRLEN answers
    ``stated`` (a size, or raw bytes sent as they are: ``b":-5"``, ``b"$3\r\nabc"``); a read of
    the value (GETRANGE, GET, alone or in a transaction) answers with the header of a value
    that long, then one byte every ``interval`` seconds, never finishing (the attack: slow,
    not synchronisation). With ``value``: a server that is slow but honest: STRLEN is its
    length and a GETRANGE sends that slice at ``rate`` bytes per second. Other commands
    answer ``+OK`` (``+QUEUED`` inside MULTI; EXEC answers each queued one). ``commands``:
    every command seen, its name upper-cased."""

    def __init__(self, stated: int | bytes = 50 << 20, interval: float = 0.5,
                 value: bytes | None = None, rate: float = 1 << 20, flood: bool = False):
        self.value = value
        self.flood = flood  # a read is answered with a 1 TiB string, sent as fast as it goes
        self.sent = 0  # bytes of such answers sent
        self.flood_ended = threading.Event()  # the client hung up on one
        self.stated = (stated if isinstance(stated, bytes) else
                       b":%d" % (len(value) if value is not None else stated))
        self.interval = interval
        self.rate = rate
        self.commands: list[list[bytes]] = []
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        queued: list[list[bytes]] | None = None
        try:
            for words in _resp_commands(conn, self._stop):
                words = [words[0].upper(), *words[1:]]
                self.commands.append(words)
                name = words[0]
                if name == b"MULTI":
                    queued = []
                    conn.sendall(b"+OK\r\n")
                elif queued is not None and name not in (b"EXEC", b"DISCARD"):
                    queued.append(words)
                    conn.sendall(b"+QUEUED\r\n")
                elif name == b"EXEC":
                    conn.sendall(b"*%d\r\n" % len(queued))
                    for each in queued:
                        if not self._answer(conn, each):
                            return
                    queued = None
                elif not self._answer(conn, words):
                    return
        except OSError:
            return

    def _answer(self, conn: socket.socket, words: list[bytes]) -> bool:
        """Answer one command; False once a dripping answer ended (the client went away)."""
        name = words[0]
        if name == b"HELLO":  # redis-py >= 8 speaks RESP3: a map of the server's facts
            conn.sendall(b"%3\r\n+server\r\n+redis\r\n+version\r\n+7.0.0\r\n+proto\r\n:3\r\n")
        elif name == b"STRLEN":
            conn.sendall(self.stated + b"\r\n")
        elif name in (b"GETRANGE", b"GET") and self.flood:
            conn.sendall(b"$%d\r\n" % (1 << 40))
            zeros = bytes(1 << 20)
            try:
                while not self._stop.is_set():  # until the client hangs up (OSError)
                    conn.sendall(zeros)
                    self.sent += len(zeros)
            finally:
                self.flood_ended.set()
            return False
        elif name in (b"GETRANGE", b"GET") and self.value is None:
            self._drip(conn)
            return False
        elif name in (b"GETRANGE", b"GET"):
            first, last = (int(words[2]), int(words[3])) if name == b"GETRANGE" else (0, -1)
            part = self.value[first:] if last == -1 else self.value[first:last + 1]
            conn.sendall(b"$%d\r\n" % len(part))
            self._pace(conn, part + b"\r\n")
        elif name == b"PEXPIRE":
            conn.sendall(b":1\r\n")
        else:
            conn.sendall(b"+OK\r\n")
        return True

    def _drip(self, conn: socket.socket) -> None:
        size = int(self.stated[1:]) if self.stated[:1] == b":" else 50 << 20
        conn.sendall(b"$%d\r\n" % max(size, 1))
        while not self._stop.is_set():
            conn.sendall(b"K")
            self._stop.wait(self.interval)  # the attack: slow, not synchronisation

    def _pace(self, conn: socket.socket, data: bytes) -> None:
        """Send ``data`` at ``rate`` bytes per second, in 64 KiB pieces (the server's speed)."""
        piece = 64 << 10
        for i in range(0, len(data), piece):
            conn.sendall(data[i:i + piece])
            self._stop.wait(min(piece, len(data) - i) / self.rate)


class EndlessScanRedis(LoopbackServer):
    """A fake Redis whose SCAN never ends: each page answers a new cursor and ``per_page``
    new names of valid keys under ``prefix`` (``kcache:v1:`` by default), or with ``page`` those
    raw bytes (RESP); STRLEN answers 0 (no value), anything else ``+OK``. ``pages``: SCAN
    pages answered so far."""

    def __init__(self, per_page: int = 1000, prefix: bytes = b"kcache:v1:", page: bytes | None = None):
        self.per_page = per_page
        self.prefix = prefix
        self.page = page  # with it: every SCAN answered with these bytes as they are
        self.pages = 0
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        try:
            for words in _resp_commands(conn, self._stop):
                name = words[0].upper()
                if name == b"HELLO":  # redis-py >= 8 speaks RESP3
                    conn.sendall(b"%3\r\n+server\r\n+redis\r\n+version\r\n+7.0.0\r\n+proto\r\n:3\r\n")
                elif name == b"SCAN" and self.page is not None:
                    self.pages += 1
                    conn.sendall(self.page)
                elif name == b"SCAN":
                    self.pages += 1
                    first = self.pages * self.per_page
                    names = [self.prefix + b"%064x" % (first + i) for i in range(self.per_page)]
                    conn.sendall(b"".join([b"*2\r\n$1\r\n7\r\n*%d\r\n" % len(names)]
                                          + [b"$%d\r\n%s\r\n" % (len(n), n) for n in names]))
                elif name == b"STRLEN":
                    conn.sendall(b":0\r\n")
                else:
                    conn.sendall(b"+OK\r\n")
        except OSError:
            return


class StatingS3:
    """A fake S3 endpoint (http.server on a loopback port) that states a size and then drips:
    HEAD answers ``Content-Length: <stated>`` (any text), GET (ranged or not) the length of
    what was asked, then one byte of the body every ``interval`` seconds, never finishing.
    With ``value``: slow but honest: HEAD states its length, a GET sends the range asked at
    ``rate`` bytes per second. ``requests``: (method, path, Range header) seen."""

    def __init__(self, stated: int | str = 50 << 20, interval: float = 0.5,
                 value: bytes | None = None, rate: float = 1 << 20):
        import http.server

        self.value = value
        self.stated = str(len(value) if value is not None else stated)
        self.interval = interval
        self.rate = rate
        self.requests: list[tuple[str, str, str | None]] = []
        self._stop = threading.Event()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _head(self, length: str) -> None:
                owner.requests.append((self.command, self.path, self.headers.get("Range")))
                self.send_response(200 if owner.value is None or self.command == "HEAD" else 206)
                self.send_header("Content-Length", length)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("ETag", '"0123456789abcdef0123456789abcdef"')
                self.send_header("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")
                self.end_headers()

            def do_HEAD(self) -> None:
                self._head(owner.stated)

            def do_GET(self) -> None:
                asked = self.headers.get("Range", "")
                first, last = 0, None
                if asked.startswith("bytes=") and "-" in asked:
                    a, _, b = asked[6:].partition("-")
                    first, last = int(a), (int(b) if b else None)
                if owner.value is not None:
                    self._send(owner.value[first:None if last is None else last + 1])
                    return
                self._head(owner.stated if last is None else str(last - first + 1))
                try:
                    while not owner._stop.is_set():
                        self.wfile.write(b"K")
                        self.wfile.flush()
                        owner._stop.wait(owner.interval)  # the attack, not synchronisation
                except OSError:
                    pass
                self.close_connection = True

            def _send(self, data: bytes) -> None:
                """``data`` at ``rate`` bytes per second, in 64 KiB pieces (the server's speed)."""
                self._head(str(len(data)))
                piece = 64 << 10
                try:
                    for i in range(0, len(data), piece):
                        self.wfile.write(data[i:i + piece])
                        self.wfile.flush()
                        owner._stop.wait(min(piece, len(data) - i) / owner.rate)
                except OSError:
                    self.close_connection = True

        self.httpd = http.server.ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def close(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

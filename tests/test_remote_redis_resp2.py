"""The Redis tier speaks RESP2, said: redis-py >= 8 opens each connection with ``HELLO 3`` and,
on a server without it (Redis < 6, many proxies, or a hostile server answering so), logs a
4-line warning of its own ("Server/proxy at ... does not support HELLO (RESP3). Falling back
to RESP2 ...") on the user's program's stderr at every connect, and before every kcache
command's answer. An answer that is no RESP2 (a RESP3 type) is a bad value.

The server is a fake Redis 5 on 127.0.0.1 (a thread here); the program and the CLI run as real
processes with KCACHE_REMOTE set."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from servers import LoopbackServer, _resp_commands

pytest.importorskip("redis")

CHILD = textwrap.dedent("""
    import sys
    from kcache import Store, make_key
    store = Store(sys.argv[1])
    print(store.get(make_key({"resp2": 1})), store.stats().remote_misses)
""")


ANSWERS = {b"HELLO": b"-ERR unknown command 'HELLO'\r\n", b"STRLEN": b":0\r\n",
           b"PING": b"+PONG\r\n", b"DEL": b":1\r\n"}


class Redis5(LoopbackServer):
    """Answers HELLO as Redis 5 does (an unknown command), STRLEN with 0 (no value), PING with
    PONG, anything else +OK. ``commands``: the command names seen."""

    def __init__(self):
        self.commands: list[bytes] = []
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        try:
            for words in _resp_commands(conn, self._stop):
                name = words[0].upper()
                self.commands.append(name)
                conn.sendall(ANSWERS.get(name, b"+OK\r\n"))
        except OSError:
            return


def _env(server: Redis5, tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env.update(KCACHE_REMOTE=f"redis://127.0.0.1:{server.port}/0",
               KCACHE_DIR=str(tmp_path / "root"))
    return env


def test_a_redis_without_hello_gets_no_foreign_warning_in_the_users_program(tmp_path):
    with Redis5() as server:
        done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "root")],
                              env=_env(server, tmp_path), capture_output=True, text=True,
                              timeout=60)
        commands = list(server.commands)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "1"]  # a miss the remote answered, counted
    assert done.stderr == ""  # no redis-py warning about HELLO
    assert b"STRLEN" in commands and b"HELLO" not in commands


def test_kcache_remote_check_on_a_redis_without_hello_says_one_line(tmp_path):
    with Redis5() as server:
        done = subprocess.run([sys.executable, "-m", "kcache", "remote", "check"],
                              env=_env(server, tmp_path), capture_output=True, text=True,
                              timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and len(done.stdout.splitlines()) == 1
    assert ": ok, answered in" in done.stdout

"""A remote's listing is bounded (kcache push and pull list the namespace first): a Redis that
answers SCAN with a new cursor and new names for ever made ``kcache pull`` run for ever,
its memory growing by ~35 MB/s until the machine ran out. The attacker is a fake RESP server
on 127.0.0.1 (tests/servers.py); the command runs as a real process under a memory limit."""
from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from kcache.tiers.remote.redis_tier import MAX_LISTED
from servers import EndlessScanRedis

pytestmark = [pytest.mark.slow,  # the listing runs to its bound: ~2,100 pages, 5-10 s
              pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")]

pytest.importorskip("redis")

CHILD_MEMORY = 1 << 30  # bytes (RLIMIT_DATA): the unbounded listing passed it within ~30 s


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (CHILD_MEMORY, CHILD_MEMORY))


@pytest.mark.parametrize("command", ["pull", "push"])
def test_a_listing_that_never_ends_stops_at_its_bound_with_one_line(command, tmp_path):
    (tmp_path / "root").mkdir(mode=0o700)  # push needs a root (to publish from)
    with EndlessScanRedis() as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
        env.update(KCACHE_DIR=str(tmp_path / "root"),
                   KCACHE_REMOTE=f"redis://127.0.0.1:{server.port}/0")
        done = subprocess.run([sys.executable, "-m", "kcache", command], env=env, capture_output=True,
                              text=True, timeout=300, preexec_fn=_limited)
        pages = server.pages
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr
    assert f"the listing went on past {MAX_LISTED} names and pages; stopped" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    # it stopped at the bound, not before: a listing of a million keys is still taken whole
    assert MAX_LISTED // (server.per_page + 1) <= pages <= MAX_LISTED // server.per_page + 1

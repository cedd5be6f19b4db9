"""A remote's listing is bounded and checked (kcache push and pull list the namespace first): a
Redis that answered SCAN with a new cursor and new names for ever made ``kcache pull`` run for
ever, its memory growing by ~35 MB/s until the machine ran out; one answering with names that
are not strings (integers, nested arrays) or a names field that is not an array made push and
pull end in a traceback. The attacker is a fake RESP server on 127.0.0.1 (tests/servers.py);
the command runs as a real process under a memory limit."""
from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from servers import EndlessScanRedis

pytest.importorskip("redis")
from kcache.tiers.remote.redis_tier import MAX_LISTED, MAX_PAGES  # noqa: E402

CHILD_MEMORY = 1 << 30  # bytes (RLIMIT_DATA): the unbounded listing passed it within ~30 s
BOUND = f"the listing went on past {MAX_LISTED} names or {MAX_PAGES} pages; stopped"


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (CHILD_MEMORY, CHILD_MEMORY))


def run_against(server: EndlessScanRedis, command: str, tmp_path) -> subprocess.CompletedProcess:
    """``kcache <command>`` in a child with KCACHE_REMOTE pointing at ``server``."""
    root = tmp_path / "root"
    root.mkdir(mode=0o700, exist_ok=True)  # push needs a root (to publish from)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env.update(KCACHE_DIR=str(root), KCACHE_REMOTE=f"redis://127.0.0.1:{server.port}/0")
    return subprocess.run([sys.executable, "-m", "kcache", command], env=env, capture_output=True,
                          text=True, timeout=300, preexec_fn=_limited)


def assert_one_line(done: subprocess.CompletedProcess, words: str) -> None:
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr, done.stderr[-2000:]
    assert words in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.slow  # the listing runs to its bound: 2,100 pages of names, or 16,385 empty ones (5-10 s)
@pytest.mark.parametrize("command, per_page", [("pull", 1000), ("push", 1000), ("pull", 0)])
def test_a_listing_that_never_ends_stops_at_its_bound_with_one_line(command, per_page, tmp_path):
    with EndlessScanRedis(per_page=per_page) as server:
        done = run_against(server, command, tmp_path)
        pages = server.pages
    assert_one_line(done, BOUND)
    # it stopped at the bound, not before: a listing of a million keys is still taken whole
    expected = MAX_LISTED // per_page + 1 if per_page else MAX_PAGES + 1
    assert pages == expected


@pytest.mark.parametrize("page", [
    b"*2\r\n$1\r\n0\r\n*2\r\n:5\r\n:6\r\n",  # names that are integers
    b"*2\r\n$1\r\n0\r\n*1\r\n*1\r\n$3\r\nabc\r\n",  # a name that is an array
    # a name that is a double: RESP3, which the tier does not speak (a protocol error)
    b"*2\r\n$1\r\n0\r\n*1\r\n,1.5\r\n",
    b"*2\r\n$1\r\n0\r\n:7\r\n",  # names that are not an array
    b"*2\r\n$2\r\n-1\r\n*0\r\n",  # a negative cursor (no page ever ends it)
], ids=["int-names", "nested-name", "double-name", "names-not-array", "negative-cursor"])
@pytest.mark.parametrize("command", ["pull", "push"])
def test_a_scan_answer_of_other_types_is_one_line_not_a_traceback(page, command, tmp_path):
    with EndlessScanRedis(page=page) as server:
        done = run_against(server, command, tmp_path)
    assert_one_line(done, "Protocol Error: b',1.5'" if b",1.5" in page
                    else "not a cursor and a list of names; not read")


@pytest.mark.parametrize("backend", ["file", "memory"])
def test_an_object_store_listing_stops_after_max_listed_names(backend, tmp_path, monkeypatch):
    """push and pull listed an object store's namespace in one fsspec ``find``: no deadline
    and no bound, so a huge or hostile bucket held the command as long, and in as much memory,
    as it liked. It is listed shard by shard, each ``ls`` one bounded call, and stops with a
    bad_value after MAX_LISTED names (5 here, 8 keys in 3 shards), as the Redis listing does."""
    import uuid

    pytest.importorskip("fsspec")
    from kcache import make_key
    from kcache.tiers.remote import fsspec_tier, open_remote
    from kcache.tiers.tier import TierError

    url = (tmp_path / "remote").as_uri() if backend == "file" else f"memory://kt-{uuid.uuid4().hex[:12]}"
    tier = open_remote(url, timeout=5.0)
    keys = [make_key({"listing": i}) for i in range(8)]
    for k in keys:
        tier.write(k, b"value")
    assert sorted(tier.keys()) == sorted(keys)  # the whole namespace, within the bound
    monkeypatch.setattr(fsspec_tier, "MAX_LISTED", 5)
    with pytest.raises(TierError) as exc:
        list(tier.keys())
    assert exc.value.kind == "bad_value" and "went on past 5 names; stopped" in str(exc.value)


def test_a_listing_keeps_only_names_under_its_own_namespace():
    """SCAN MATCH is the server's to honour: a name outside ``kcache:v<N>:`` (another
    namespace, or any prefix of the same length) is not taken for one of this namespace's keys."""
    from kcache.tiers.remote import open_remote
    from kcache.tiers.remote.base import version_tag
    ours, theirs = "a" * 64, "b" * 64
    prefix = f"kcache:{version_tag()}:".encode()
    names = [prefix + ours.encode(), b"x" * len(prefix) + theirs.encode(),
             b"other:" + prefix + theirs.encode()]
    page = b"*2\r\n$1\r\n0\r\n*%d\r\n" % len(names) + b"".join(
        b"$%d\r\n%s\r\n" % (len(n), n) for n in names)
    with EndlessScanRedis(page=page) as server:
        tier = open_remote(f"redis://127.0.0.1:{server.port}/0")
        try:
            assert list(tier.keys()) == [ours]
        finally:
            tier.close()

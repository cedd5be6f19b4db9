"""The object-store tier through fsspec: against moto's S3 server (through s3fs, on a loopback
port), a local folder (file://) and fsspec's memory file system; timeouts against a server
that never answers, refused connections, missing credentials, the switch-off."""
import os
import time
import uuid

import pytest

from kcache import Entry, make_key
from kcache.entry import format as fmt
from kcache.tiers.remote import open_remote
from kcache.tiers.tier import Tier, TierError
from servers import SilentServer, aws_env, refusing_port, s3_bucket, s3_endpoint  # noqa: F401

pytest.importorskip("fsspec")

LIMIT = 1 << 20  # bytes
TIMEOUT = 0.5  # seconds
T_OK = 10.0  # seconds: the timeout of tests that are not about timeouts (a loaded machine)
BOUND = 2 * TIMEOUT + 0.7  # see test_remote_redis.BOUND
V = f"v{fmt.FORMAT_VERSION}"


def key(*parts) -> str:
    return make_key({"test": list(parts)})


def entry_bytes(k: str, size: int = 1000) -> bytes:
    return fmt.encode(k, Entry({"cubin": os.urandom(size)}, {"kernel": "m:f", "arch": "sm_90a"}))


@pytest.fixture(params=["s3", "file", "memory"])
def url(request, tmp_path):
    """A fresh remote URL of each kind, with a prefix."""
    if request.param == "s3":
        pytest.importorskip("s3fs")
        return f"s3://{request.getfixturevalue('s3_bucket')}/team/cache"
    if request.param == "file":
        return f"file://{tmp_path}/remote"
    return f"memory://kcache-test-{uuid.uuid4().hex[:12]}/cache"


def listing(url: str) -> set[str]:
    """Every object under the URL's prefix, relative to it, listed by fsspec directly."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(url, skip_instance_cache=True, use_listings_cache=False)
    try:
        return {p[len(root.rstrip("/")) + 1:] for p in fs.find(root)}
    except FileNotFoundError:
        return set()


# -- the protocol --------------------------------------------------------------------------

@pytest.mark.slow
def test_round_trip_namespaced_and_versioned(url):
    tier = open_remote(url, timeout=T_OK, namespace="team-a")
    assert isinstance(tier, Tier)
    assert (tier.kind, tier.writable, tier.backfill) == ("fsspec", True, True)
    k = key("round trip")
    data = entry_bytes(k, 200_000)
    assert tier.read(k, LIMIT) is None
    tier.write(k, data)
    assert tier.read(k, LIMIT).data == data
    assert listing(url) == {f"team-a/{V}/{k[:2]}/{k}.kce"}  # no temp file left behind
    tier.write(k, b"replaced")  # a second write replaces the value
    assert tier.read(k, LIMIT).data == b"replaced"
    assert tier.remove(k) is True
    assert tier.remove(k) is False
    assert tier.read(k, LIMIT) is None


@pytest.mark.slow
def test_keys_lists_only_entry_names_of_this_namespace(url):
    import fsspec

    tier = open_remote(url, timeout=T_OK, namespace="ns")
    mine = {key("mine", i) for i in range(30)}
    for k in mine:
        tier.write(k, b"v")
    open_remote(url, timeout=T_OK, namespace="other").write(key("other"), b"v")
    fs, root = fsspec.core.url_to_fs(url, skip_instance_cache=True, use_listings_cache=False)
    for junk in (f"ns/{V}/zz/{key('bad shard')}.kce", f"ns/{V}/{key('x')[:2]}/notakey.kce",
                 f"ns/{V}/{key('y')[:2]}/{key('y')}.tmp", f"ns/v{fmt.FORMAT_VERSION + 1}/ab/{'ab' * 32}.kce",
                 f"ns/{V}/ab/deeper/{'ab' * 32}.kce"):
        fs.makedirs(os.path.dirname(f"{root}/{junk}"), exist_ok=True)
        fs.pipe_file(f"{root}/{junk}", b"junk")
    assert set(tier.keys()) == mine


def test_value_larger_than_limit_is_refused_unread(url, monkeypatch):
    tier = open_remote(url, timeout=T_OK)
    k = key("large")
    tier.write(k, b"\x00" * (2 << 20))
    seen = []
    real = tier._run

    def spy(method, *args, **kw):
        seen.append(method)
        return real(method, *args, **kw)

    monkeypatch.setattr(tier, "_run", spy)
    with pytest.raises(TierError) as exc:
        tier.read(k, 1000)
    assert exc.value.kind == "bad_value" and "larger than the limit" in str(exc.value)
    if not url.startswith("memory"):  # memory:// is synchronous: no _run
        assert seen == ["info"]  # the size said no: the value itself was never read


@pytest.mark.slow
def test_value_grown_after_the_size_check_is_read_within_the_bound(url, monkeypatch):
    tier = open_remote(url, timeout=T_OK)
    k = key("grown")
    tier.write(k, b"\x01" * (2 << 20))
    fs = tier._fs
    real_info = fs.info
    monkeypatch.setattr(fs, "info", lambda path, **kw: {**real_info(path, **kw), "size": 10})
    if getattr(fs, "async_impl", False):
        real_ainfo = fs._info

        async def small(path, **kw):
            return {**(await real_ainfo(path, **kw)), "size": 10}

        monkeypatch.setattr(fs, "_info", small)
    reads = []
    real_cat = fs.cat_file if not getattr(fs, "async_impl", False) else fs._cat_file
    if getattr(fs, "async_impl", False):
        async def cat(path, start=None, end=None, **kw):
            out = await real_cat(path, start=start, end=end, **kw)
            reads.append(len(out))
            return out

        monkeypatch.setattr(fs, "_cat_file", cat)
    else:
        def cat(path, start=None, end=None, **kw):
            out = real_cat(path, start=start, end=end, **kw)
            reads.append(len(out))
            return out

        monkeypatch.setattr(fs, "cat_file", cat)
    with pytest.raises(TierError) as exc:
        tier.read(k, 1000)
    assert exc.value.kind == "bad_value"
    assert reads == [1001]  # a ranged read of limit + 1 bytes, not 2 MiB


@pytest.mark.slow
def test_read_only_tier_refuses_writes(url):
    k = key("ro")
    open_remote(url, timeout=T_OK).write(k, b"published")
    ro = open_remote(url, timeout=T_OK, readonly=True)
    assert ro.writable is False
    for call, args in ((ro.write, (k, b"changed")), (ro.write, (key("new"), b"v")), (ro.remove, (k,))):
        with pytest.raises(TierError) as exc:
            call(*args)
        assert "read-only" in str(exc.value)
    assert ro.read(k, LIMIT).data == b"published"
    assert listing(url) == {f"kcache/{V}/{k[:2]}/{k}.kce"}
    ro.check()  # something there to read


@pytest.mark.slow
def test_check(url):
    open_remote(url, timeout=T_OK).check()  # writable: a probe written and removed
    assert listing(url) <= {f"kcache/{V}"}  # no probe left (file:// keeps the folder)


def test_no_lease_on_object_stores(url):
    tier = open_remote(url, timeout=T_OK)
    with tier.single_flight(key("flight"), LIMIT) as flight:
        assert (flight.held, flight.blob, flight.error) == (False, None, None)


# -- file:// specifics: what a local folder can hold ------------------------------------------

def test_file_url_special_files_are_bad_values_not_hangs(tmp_path):
    tier = open_remote(f"file://{tmp_path}")
    fifo, folder, link = key("fifo"), key("folder"), key("link")
    for k in (fifo, folder, link):
        (tmp_path / "kcache" / V / k[:2]).mkdir(parents=True, exist_ok=True)
    os.mkfifo(tmp_path / "kcache" / V / fifo[:2] / f"{fifo}.kce")
    (tmp_path / "kcache" / V / folder[:2] / f"{folder}.kce").mkdir()
    os.symlink(tmp_path / "kcache" / V / fifo[:2] / f"{fifo}.kce", tmp_path / "kcache" / V / link[:2] / f"{link}.kce")
    for k in (fifo, folder, link):
        t0 = time.monotonic()
        with pytest.raises(TierError) as exc:
            tier.read(k, LIMIT)
        assert exc.value.kind == "bad_value" and "not a regular object" in str(exc.value)
        assert time.monotonic() - t0 < 1


def test_file_url_write_is_atomic_by_rename(tmp_path, monkeypatch):
    tier = open_remote(f"file://{tmp_path}")
    k = key("atomic")
    tier.write(k, b"old value")
    moves = []
    real_mv = tier._fs.mv
    monkeypatch.setattr(tier._fs, "mv", lambda a, b, **kw: (moves.append((a, b)), real_mv(a, b, **kw)))
    tier.write(k, b"new value")
    [(tmp, dest)] = moves
    assert dest.endswith(f"{k}.kce") and os.path.basename(tmp).startswith(f".{k}.kce.") and tmp.endswith(".tmp")
    assert tier.read(k, LIMIT).data == b"new value"
    assert sorted(os.listdir(tmp_path / "kcache" / V / k[:2])) == [f"{k}.kce"]


def test_file_url_never_writes_or_removes_through_a_symlinked_folder(tmp_path):
    """A shared folder's other writers can swap a key's folder for a symlink: a publish or a
    removal through it would land outside the remote (a file of another user's)."""
    remote, outside = tmp_path / "remote", tmp_path / "outside"
    outside.mkdir()
    tier = open_remote(f"file://{remote}")
    k = key("through-a-link")
    (remote / "kcache" / V).mkdir(parents=True)
    os.symlink(outside, remote / "kcache" / V / k[:2])
    with pytest.raises(TierError) as exc:
        tier.write(k, entry_bytes(k))
    assert exc.value.kind == "io" and "symlink" in str(exc.value)
    assert os.listdir(outside) == []
    (outside / f"{k}.kce").write_bytes(b"another user's file")
    with pytest.raises(TierError):
        tier.remove(k)
    assert (outside / f"{k}.kce").read_bytes() == b"another user's file"
    other = key("beside")  # the remote's own folders still work
    value = entry_bytes(other)
    tier.write(other, value)
    assert tier.read(other, LIMIT).data == value and tier.remove(other)


def test_file_url_never_writes_through_a_symlinked_namespace_folder(tmp_path):
    """The namespace and version folders below the URL's folder are the shared folder's too:
    one swapped for a symlink moves the whole base elsewhere, and is refused as a key's."""
    remote, outside = tmp_path / "remote", tmp_path / "outside"
    (outside / V).mkdir(parents=True)
    remote.mkdir()
    os.symlink(outside, remote / "kcache")
    tier = open_remote(f"file://{remote}")
    k = key("through-the-namespace")
    with pytest.raises(TierError) as exc:
        tier.write(k, entry_bytes(k))
    assert exc.value.kind == "io"
    assert os.listdir(outside / V) == []  # not even the key's folder made there
    (outside / V / k[:2]).mkdir()
    (outside / V / k[:2] / f"{k}.kce").write_bytes(b"another user's file")
    with pytest.raises(TierError):
        tier.remove(k)
    assert (outside / V / k[:2] / f"{k}.kce").read_bytes() == b"another user's file"


def test_file_url_whose_own_folder_is_a_symlink_still_writes(tmp_path):
    """A URL naming a symlink (the user's choice) is followed, as before."""
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    os.symlink(real, link)
    tier = open_remote(f"file://{link}")
    k = key("via-a-linked-root")
    tier.write(k, entry_bytes(k))
    assert (real / "kcache" / V / k[:2] / f"{k}.kce").exists() and tier.remove(k)


# -- S3 specifics: a soft tier ---------------------------------------------------------------

def s3_tier(endpoint: str, **kw):
    pytest.importorskip("s3fs")
    return open_remote("s3://bucket-x/p", timeout=TIMEOUT, options={"endpoint_url": endpoint}, **kw)


def timed(fn, *args):
    t0 = time.monotonic()
    try:
        out = fn(*args)
        if hasattr(out, "__next__"):
            out = list(out)
    except TierError as exc:
        out = exc
    return out, time.monotonic() - t0


@pytest.mark.slow
def test_s3_silent_server_every_call_bounded_then_switched_off(aws_env):
    with SilentServer() as silent:
        tier = s3_tier(f"http://127.0.0.1:{silent.port}")
        k = key("silent")
        # the first call also builds s3fs's botocore client (CPU, no request): not a wait
        for name, call, args in (("read", tier.read, (k, LIMIT)), ("write", tier.write, (k, b"x" * 1000)),
                                 ("remove", tier.remove, (k,))):
            err, took = timed(call, *args)
            assert isinstance(err, TierError) and err.kind == "timeout", (name, err)
            assert took < (BOUND if name != "read" else BOUND + 5), (name, took)
        assert "3 consecutive errors" in tier.disabled_reason
        for call, args in ((tier.read, (k, LIMIT)), (tier.keys, ()), (tier.check, ())):
            err, took = timed(call, *args)
            assert err.kind == "unavailable" and took < 0.05


@pytest.mark.slow
def test_s3_put_to_a_silent_server_is_bounded(aws_env):
    """botocore sends "Expect: 100-continue" with a PUT and aiohttp waits for the interim
    answer without any timeout: the whole-call deadline is what bounds it."""
    with SilentServer() as silent:
        tier = s3_tier(f"http://127.0.0.1:{silent.port}")
        timed(tier.read, key("warm up"), LIMIT)  # builds the client
        for size in (1, 100_000):
            err, took = timed(tier.write, key("put", size), b"x" * size)
            assert err.kind == "timeout" and took < BOUND, (size, err, took)


def test_s3_connection_refused(aws_env):
    with refusing_port() as port:
        tier = s3_tier(f"http://127.0.0.1:{port}")
        kinds = [timed(tier.read, key("refused"), LIMIT)[0].kind for _ in range(4)]
        assert kinds == ["refused"] * 3 + ["unavailable"]


@pytest.mark.slow
def test_s3_missing_credentials_is_auth(s3_endpoint, aws_env, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    tier = s3_tier(s3_endpoint)
    err, took = timed(tier.write, key("no credentials"), b"v")
    assert isinstance(err, TierError) and err.kind == "auth", err
    assert took < BOUND + 5


def test_s3_missing_bucket(s3_endpoint, aws_env):
    tier = s3_tier(s3_endpoint)  # bucket-x was never created
    assert tier.read(key("x"), LIMIT) is None  # nothing there: a miss
    with pytest.raises(TierError) as exc:
        tier.check()
    assert exc.value.kind == "io" and "bucket" in str(exc.value).lower()

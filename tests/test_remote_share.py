"""Two cache roots in two processes ("two machines") share an entry through a remote tier, the
way the store will do it (docs/remote.md, "How the store uses a remote"): publish the verified
entry bytes after a local put, signed when a secret is set; on a local miss read the remote,
unwrap, verify, backfill. A tampered or wrongly signed value is refused."""
import multiprocessing as mp

import pytest

from kcache import CorruptEntry, Entry, Store, make_key
from kcache.tiers.remote import signing
from kcache.entry import format as fmt
from kcache.disk.layout import Layout
from kcache.tiers.remote import open_remote
from servers import aws_env, redis_url, s3_bucket, s3_endpoint, unique_namespace  # noqa: F401

pytestmark = pytest.mark.slow  # real processes through each backend

CTX = mp.get_context("fork")
SECRET = b"fleet-secret-0123456789abcdef"
LIMIT = fmt.MAX_FILE + signing.OVERHEAD  # bytes: the largest entry, signed
T_OK = 10.0  # seconds: the timeout of tests that are not about timeouts (a loaded machine)


@pytest.fixture(params=["redis", "s3"])
def remote_url(request):
    if request.param == "redis":
        pytest.importorskip("redis")
        return request.getfixturevalue("redis_url")
    pytest.importorskip("s3fs")
    return f"s3://{request.getfixturevalue('s3_bucket')}/fleet"


def publish(store: Store, remote, key: str, secret: bytes | None) -> None:
    """After a local put: the entry's bytes, as verified on disk, signed with a secret."""
    data = Layout(store.root).entry(key).read_bytes()
    fmt.decode(data, key)
    remote.write(key, signing.wrap(secret, data) if secret else data)


def fetch(store: Store, remote, key: str, secret: bytes | None) -> Entry | None:
    """On a local miss: read, unwrap, verify, backfill. None for a miss or a refused value."""
    blob = remote.read(key, LIMIT)
    if blob is None:
        return None
    try:
        header, entry = fmt.decode(signing.unwrap(secret, blob.data), key)
    except CorruptEntry:
        return None
    store.put(key, entry, components=header["components"])
    return entry


def _machine_a(root: str, url: str, ns: str, key: str, secret, results) -> None:
    try:
        store = Store(root)
        store.put(key, Entry({"cubin": b"\x7fELF compiled on A"}, {"kernel": "m:k", "arch": "sm_90a"}),
                  components={"kernel": "m:k"})
        publish(store, open_remote(url, timeout=T_OK, namespace=ns), key, secret)
        results.put("published")
    except Exception as exc:  # reported to the test instead of a silent exit
        results.put(repr(exc))


def _machine_b(root: str, url: str, ns: str, key: str, secret, results) -> None:
    store = Store(root)
    assert store.get(key) is None  # a local miss
    entry = fetch(store, open_remote(url, timeout=T_OK, namespace=ns), key, secret)
    again = Store(root).get(key)  # backfilled: the next read is local
    results.put((entry.artifacts if entry else None, again.artifacts if again else None))


@pytest.mark.parametrize("secret", [None, SECRET], ids=["unsigned", "signed"])
def test_two_roots_share_an_entry(tmp_path, remote_url, secret):
    ns, key = unique_namespace(), make_key({"share": 1})
    results = CTX.Queue()
    a = CTX.Process(target=_machine_a, args=(str(tmp_path / "a"), remote_url, ns, key, secret, results))
    a.start()
    assert results.get(timeout=120) == "published"
    a.join(60)
    b = CTX.Process(target=_machine_b, args=(str(tmp_path / "b"), remote_url, ns, key, secret, results))
    b.start()
    fetched, local = results.get(timeout=120)
    b.join(60)
    assert fetched == local == {"cubin": b"\x7fELF compiled on A"}


def test_tampered_and_wrongly_signed_values_are_refused(tmp_path, remote_url):
    ns, key = unique_namespace(), make_key({"share": 2})
    remote = open_remote(remote_url, timeout=T_OK, namespace=ns)
    a, b = Store(tmp_path / "a"), Store(tmp_path / "b")
    a.put(key, Entry({"cubin": b"genuine"}, {}))
    data = Layout(a.root).entry(key).read_bytes()
    evil = data.replace(b"genuine", b"planted")  # same length, checksum now wrong
    cases = [(evil, None), (signing.wrap(b"attacker-secret-0123456789", data), SECRET), (data, SECRET),
             (signing.wrap(SECRET, evil), None)]
    for value, secret in cases:
        remote.write(key, value)
        assert fetch(b, remote, key, secret) is None
        assert b.get(key) is None  # nothing backfilled
    remote.write(key, signing.wrap(SECRET, data))
    assert fetch(b, remote, key, SECRET).artifacts == {"cubin": b"genuine"}

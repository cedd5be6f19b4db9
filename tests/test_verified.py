"""kcache.verified: bytes verified before are not hashed again, and nothing else is skipped."""
import hashlib
import warnings

import pytest

from kcache import Entry, Store, make_key
from kcache.entry import format as fmt
from kcache.store import verified
from kcache.store.verified import VERIFIED, Verified


@pytest.fixture(autouse=True)
def fresh():
    VERIFIED.clear()
    yield
    VERIFIED.clear()


def _entry(fill: int = 1) -> Entry:
    return Entry({"cubin": bytes([fill]) * 5000}, {"kernel": "m:k", "compile_seconds": 1.0, "n": [1]})


def _path(store: Store, key: str):
    return store.layout.entry(key)


def _hashes(monkeypatch) -> list:
    """Count the checksum checks of whole entries that kcache.entry.decode makes: the
    BLAKE2b-256 of the file, or (a hit of an entry with per-artifact sums) the SHA-256 of
    each artifact (one entry's check counted once)."""
    calls = []
    real_blake, real_sha = hashlib.blake2b, hashlib.sha256
    by_sums = fmt._decode_by_sums

    def counting(*args, **kw):
        if kw.get("digest_size") == fmt.SUM_SIZE:
            calls.append(1)
        return real_blake(*args, **kw)

    def counting_sums(*args, **kw):
        found = by_sums(*args, **kw)
        if found is not None:
            calls.append(1)
        return found

    monkeypatch.setattr(fmt.hashlib, "blake2b", counting)
    monkeypatch.setattr(fmt, "_decode_by_sums", counting_sums)
    assert real_sha is hashlib.sha256
    return calls


def test_same_bytes_are_hashed_twice_then_compared(store, monkeypatch):
    k = make_key({"i": 1})
    assert store.put(k, _entry())
    calls = _hashes(monkeypatch)
    for _ in range(5):
        got = store.get(k)
        assert got.artifacts == _entry().artifacts and got.meta["kernel"] == "m:k"
    assert len(calls) == 2  # noted on the first verification, kept from the second
    assert store.stats().hits == 5  # every hit still counted


def test_a_changed_bit_is_a_full_verification_and_a_miss(store):
    k = make_key({"i": 2})
    assert store.put(k, _entry())
    for _ in range(3):
        assert store.get(k) is not None  # remembered now
    path = _path(store, k)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01  # in the cubin; same size, checksum not updated
    path.write_bytes(bytes(raw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert store.get(k) is None
    assert store.stats().corrupt == 1 and not path.exists()  # quarantined as ever


def test_a_replaced_entry_is_verified_and_served_anew(store):
    k = make_key({"i": 3})
    assert store.put(k, _entry(1))
    for _ in range(3):
        assert store.get(k).artifacts["cubin"][:1] == b"\x01"
    assert store.put(k, _entry(2))  # same size, other bytes
    assert store.get(k).artifacts["cubin"][:1] == b"\x02"


def test_what_a_get_returns_is_its_own(store):
    k = make_key({"i": 4})
    assert store.put(k, _entry())
    for _ in range(3):
        first = store.get(k)
    first.meta["n"].append(2)
    first.meta["kernel"] = "changed"
    first.artifacts["cubin"] = b"other"
    again = store.get(k)
    assert again.meta["n"] == [1] and again.meta["kernel"] == "m:k"
    assert again.artifacts["cubin"] == bytes([1]) * 5000


def test_keys_never_share_a_verdict(store):
    k1, k2 = make_key({"i": 5}), make_key({"i": 6})
    assert store.put(k1, _entry())
    for _ in range(3):
        assert store.get(k1) is not None
    data = _path(store, k1).read_bytes()
    _path(store, k2).parent.mkdir(parents=True, exist_ok=True)
    _path(store, k2).write_bytes(data)  # k1's bytes under k2's name: its header names k1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert store.get(k2) is None
    assert store.stats().corrupt == 1


def test_memory_is_bounded(monkeypatch):
    monkeypatch.setattr(verified, "MAX_BYTES", 3000)
    monkeypatch.setattr(verified, "MAX_ONE", 1500)
    book = Verified()
    blobs = {f"k{i}": bytes([i]) * 1000 for i in range(4)}
    for key, data in blobs.items():
        book.remember(key, data)
        assert not book.known(key, data)  # once: noted, not kept
        book.remember(key, data)
        assert book.known(key, data)
    assert not book.known("k0", blobs["k0"])  # the least recently used went first
    assert all(book.known(k, blobs[k]) for k in ("k1", "k2", "k3"))
    assert not book.known("k1", bytes([9]) * 1000)  # same length, other bytes
    big = b"x" * 2000
    book.remember("big", big)
    book.remember("big", big)
    assert not book.known("big", big)  # over MAX_ONE: never kept
    assert book._size <= 3000


def test_a_hits_check_by_sums_is_not_a_whole_check():
    """Bytes a hit checked by their artifacts' sums (kcache.entry) are not taken as checked
    whole: load, export and verify still check the file's checksum."""
    book = Verified()
    data = b"x" * 1000
    book.remember("k", data, whole=False)
    book.remember("k", data, whole=False)
    assert book.known("k", data) and not book.known("k", data, whole=True)
    book.remember("k", data)  # a whole check of the same bytes
    assert book.known("k", data, whole=True)


def test_a_trailing_checksum_damaged_alone_is_served_and_reported_by_verify(store):
    k = make_key({"i": 7})
    assert store.put(k, _entry())
    path = _path(store, k)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0x01  # the last byte of the whole-file checksum: every other byte intact
    path.write_bytes(bytes(raw))
    assert store.get(k).artifacts == _entry().artifacts  # checked by its sums
    assert [why for _p, why in store.verify().corrupt] == ["checksum mismatch"]
    raw[len(raw) // 2] ^= 0x01  # and now a bit of the cubin too
    path.write_bytes(bytes(raw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert store.get(k) is None

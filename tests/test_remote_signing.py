"""Signed values (kcache.signing): HMAC-SHA256 over the entry bytes; tampering with any part,
a wrong secret, an unsigned value where a secret is set are refused; bounded copies."""
import os
import tracemalloc

import pytest

from kcache.warn import KcacheWarning
from hypothesis import given, settings
from hypothesis import strategies as st

from kcache import ConfigError, CorruptEntry, Entry, make_key
from kcache.entry import format as fmt
from kcache.tiers.remote.signing import (MAGIC, MIN_SECRET, OVERHEAD, BadSignature, SignatureError, UnsignedValue,
                            is_signed, secret_from_env, unwrap, wrap)

SECRET = b"0123456789abcdef-team-secret"
OTHER = b"0123456789abcdef-other-secret"


@pytest.fixture
def data():
    k = make_key({"signing": 1})
    return fmt.encode(k, Entry({"cubin": os.urandom(5000)}, {"kernel": "m:f"}))


def flip(b: bytes, i: int) -> bytes:
    return b[:i] + bytes([b[i] ^ 0x01]) + b[i + 1:]


def test_round_trip(data):
    signed = wrap(SECRET, data)
    assert len(signed) == len(data) + OVERHEAD and signed.startswith(MAGIC) and is_signed(signed)
    assert signed[OVERHEAD:] == data  # the entry bytes unchanged
    assert unwrap(SECRET, signed) == data
    assert wrap(SECRET, data) == signed  # deterministic: republishing writes the same bytes


@pytest.mark.parametrize("where", ["magic", "version", "tag first", "tag last", "body first", "body middle",
                                   "body last"])
def test_any_tampered_byte_is_refused(data, where):
    signed = wrap(SECRET, data)
    i = {"magic": 0, "version": 9, "tag first": 10, "tag last": OVERHEAD - 1, "body first": OVERHEAD,
         "body middle": OVERHEAD + len(data) // 2, "body last": len(signed) - 1}[where]
    with pytest.raises(SignatureError) as exc:
        unwrap(SECRET, flip(signed, i))
    # a flipped magic makes it look unsigned; a flipped version names the version
    expected = {"magic": UnsignedValue, "version": BadSignature}.get(where, BadSignature)
    assert type(exc.value) is expected
    assert isinstance(exc.value, CorruptEntry)  # counted and never served, like any bad entry


def test_messages_name_the_problem(data):
    signed = wrap(SECRET, data)
    with pytest.raises(BadSignature, match="bad signature: the value was altered or signed with another secret"):
        unwrap(OTHER, signed)
    with pytest.raises(UnsignedValue, match="unsigned value refused"):
        unwrap(SECRET, data)
    with pytest.raises(BadSignature, match="unknown signature version 2"):
        unwrap(SECRET, signed[:9] + b"\x02" + signed[10:])
    with pytest.raises(BadSignature, match="truncated signed value: 20 bytes"):
        unwrap(SECRET, signed[:20])
    for exc in (BadSignature, UnsignedValue):
        assert SECRET.decode() not in str(exc)


def test_truncated_body_is_refused(data):
    signed = wrap(SECRET, data)
    for cut in (OVERHEAD, OVERHEAD + 1, len(signed) - 1):
        with pytest.raises(BadSignature):
            unwrap(SECRET, signed[:cut])


def test_unsigned_value_with_a_secret_unless_not_required(data):
    with pytest.raises(UnsignedValue):
        unwrap(SECRET, data)
    with pytest.raises(UnsignedValue):
        unwrap(SECRET, b"")
    assert unwrap(SECRET, data, require=False) == data  # e.g. a migration period, explicitly


def test_without_a_secret_nothing_is_checked(data):
    """No secret configured: the reader trusts the server (integrity only, from the entry's
    checksum): unsigned values as they are, signed ones stripped, whoever signed them."""
    assert unwrap(None, data) == data
    assert unwrap(None, wrap(OTHER, data)) == data
    tampered = flip(wrap(OTHER, data), OVERHEAD + 100)
    stripped = unwrap(None, tampered)
    with pytest.raises(CorruptEntry, match="checksum"):  # the entry check still catches damage
        fmt.decode(stripped, make_key({"signing": 1}))


def test_a_signed_value_moved_to_another_key_fails_the_entry_check(data):
    signed = wrap(SECRET, data)
    with pytest.raises(CorruptEntry, match="does not match"):
        fmt.decode(unwrap(SECRET, signed), make_key({"another": "key"}))


def test_short_secret_refused():
    with pytest.raises(ConfigError, match=f"at least {MIN_SECRET} bytes"):
        wrap(b"short", b"data")


def test_secret_precedence():
    assert secret_from_env({}) is None
    assert secret_from_env({"KCACHE_SECRET": "", "KCACHE_REMOTE_SECRET": ""}) is None
    with pytest.warns(KcacheWarning, match="KCACHE_SECRET holds only blanks: nothing is signed"):
        assert secret_from_env({"KCACHE_SECRET": " ", "KCACHE_REMOTE_SECRET": ""}) is None
    assert secret_from_env({"KCACHE_SECRET": "bundle-secret-0123456"}) == b"bundle-secret-0123456"
    assert secret_from_env({"KCACHE_SECRET": "bundle-secret-0123456",
                            "KCACHE_REMOTE_SECRET": "remote-secret-0123456"}) == b"remote-secret-0123456"


def test_unwrap_copies_the_body_once_at_most():
    body = fmt.MAGIC + os.urandom(16 << 20)
    signed = wrap(SECRET, body)
    tracemalloc.start()
    try:
        out = unwrap(SECRET, signed)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out == body
    assert peak < len(body) + (256 << 10), peak  # the returned copy, nothing more


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000), st.data())
def test_any_single_bit_flip_is_caught(body, draw):
    signed = wrap(SECRET, body)
    assert unwrap(SECRET, signed) == body
    i = draw.draw(st.integers(0, len(signed) - 1))
    bit = draw.draw(st.integers(0, 7))
    bad = signed[:i] + bytes([signed[i] ^ (1 << bit)]) + signed[i + 1:]
    with pytest.raises(SignatureError):
        unwrap(SECRET, bad)

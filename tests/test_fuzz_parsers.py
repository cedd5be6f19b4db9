"""Property-based fuzzing of what turns file bytes into values (attack round 11): mutations of
valid encodings (bit flips, cuts, inserted bytes, msgpack type bytes, length fields, hostile
values in valid envelopes) must give a value or the parser's documented error, never another
exception, within a time and memory bound. Deterministic (derandomized, no database) and
short; each defect found is also a plain regression test."""
import hashlib
import json
import os
import tracemalloc

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kcache import ConfigError, Entry, Store
from kcache.config import resolve, resolve_each
from kcache.entry import format as fmt
from kcache.errors import CorruptEntry, NewerFormat

FUZZ = settings(max_examples=150, deadline=10_000, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))

#: Text that file names, terminals and parsers treat specially.
EVIL_TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["\x00", "/a\x00b", "\ud800", "\udcff", "\x1b[2J", "[bold]x[/]", "a\nb",
                     "1e400", "nan", "-1", "9" * 5000, "~nobody\x00", "file:///a\x00", "\u202e"]))
_PACKABLE_TEXT = EVIL_TEXT.filter(lambda t: not any("\ud800" <= c <= "\udfff" for c in t))
#: What msgpack can encode (an entry header's values).
MSGPACK_VALUES = st.recursive(
    st.one_of(_PACKABLE_TEXT, st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
              st.floats(), st.binary(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(_PACKABLE_TEXT, inner, max_size=3)), max_leaves=8)
JSON_VALUES = st.recursive(
    st.one_of(EVIL_TEXT, st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats()),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(EVIL_TEXT, inner, max_size=3)), max_leaves=8)


def mutated(data: bytes, draw) -> bytes:
    """``data`` with 1-4 mutations: a bit flipped, cut, bytes inserted or deleted, a byte set
    to a msgpack type marker, four bytes set to an extreme length."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, max(len(out) - 1, 0)))
        op = draw(st.sampled_from(["flip", "cut", "insert", "delete", "marker", "length"]))
        if op == "flip" and out:
            out[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del out[i:]
        elif op == "insert":
            out[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del out[i:i + draw(st.integers(1, 8))]
        elif op == "marker" and out:
            out[i] = draw(st.sampled_from([0xc0, 0xc1, 0xc4, 0xc6, 0xc7, 0xc9, 0xca, 0xcb, 0xcf,
                                           0xd3, 0xd4, 0xdb, 0xdd, 0xdf, 0x9f, 0x8f, 0xbf]))
        elif op == "length":
            out[i:i + 4] = draw(st.sampled_from([b"\xff" * 4, b"\x7f\xff\xff\xff", bytes(4)]))
    return bytes(out)


def bounded(fn, *, peak: int):
    """``fn()``'s result or its exception, asserting the traced peak memory stayed under
    ``peak`` bytes."""
    tracemalloc.start()
    try:
        try:
            return fn()
        except Exception as exc:
            return exc
    finally:
        _size, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert top < peak, f"peak {top} bytes"


# --- config.json ------------------------------------------------------------------------------

def _root_with_config(tmp_path, text: str):
    root = tmp_path / "root"
    root.mkdir(mode=0o700, exist_ok=True)
    (root / "config.json").write_text(text)
    return root


@pytest.mark.parametrize("value", ["/tmp/a\u0000b", "/tmp/\ud800", ["/tmp/x", "\u0000"]])
def test_config_readonly_dirs_nul_or_surrogate_is_a_config_error(tmp_path, monkeypatch, value):
    """A config.json whose readonly_dirs holds a NUL ("\\u0000") or a lone surrogate was a
    ValueError from os.path.realpath: Store(root) raised it (not a ConfigError), 'kcache
    config show' could not show the settings ("a setting cannot be read: embedded null
    byte", exit 2) and named neither the file nor the setting."""
    from clikit import run
    for name in [n for n in os.environ if n.startswith("KCACHE_")]:
        monkeypatch.delenv(name)
    root = _root_with_config(tmp_path, json.dumps({"readonly_dirs": value}))
    with pytest.raises(ConfigError, match="readonly_dirs in .*config.json.*NUL"):
        Store(root)
    report = resolve_each(root=root)["readonly_roots"]
    assert isinstance(report.error, ConfigError)
    shown = run(["config", "show", "--dir", str(root)])
    assert shown.returncode == 1, shown.stderr
    assert "readonly_dirs in" in shown.stderr and "cannot be read" not in shown.stderr
    assert "max_size" in shown.stdout  # the other settings are still listed


def test_config_readonly_dirs_undecodable_name_still_a_path(tmp_path, monkeypatch):
    """\\udcff is how Python names an undecodable byte of a file name: still accepted."""
    for name in [n for n in os.environ if n.startswith("KCACHE_")]:
        monkeypatch.delenv(name)
    root = _root_with_config(tmp_path, json.dumps({"readonly_dirs": "/tmp/\udcff"}))
    assert [os.fsencode(p) for p in resolve(root).readonly_roots] == [b"/tmp/\xff"]


_CONFIG_KEYS = ("max_size", "readonly_dirs", "lock_timeout", "shared", "max_entry_size",
                "quarantine_age", "remote", "remote_namespace", "remote_readonly",
                "remote_timeout", "remote_ttl", "remote_wait", "unknown")


@pytest.mark.filterwarnings("ignore::kcache.warn.KcacheWarning")
@FUZZ
@given(st.dictionaries(st.sampled_from(_CONFIG_KEYS), JSON_VALUES, max_size=4))
def test_config_values_are_settings_or_config_errors(tmp_path_factory, conf):
    from kcache.tiers.remote import open_configured
    text = json.dumps(conf)
    root = _root_with_config(tmp_path_factory.mktemp("c"), text)
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("KCACHE_")}
    try:
        resolve_each(root=root)  # records errors, raises for none
        try:
            resolve(root)
        except ConfigError:
            pass
        open_configured({}, json.loads(text))  # never raises
    finally:
        os.environ.update(saved)


# --- signatures (a signatures file, an entry's meta.sigspec replayed by kcache warm) ----------

def _frontend():
    pytest.importorskip("numba.cuda")
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
    return FRONTEND


def _parse_quietly(text: str):
    """parse_signature's types or ValueError, asserting Python printed no warning of its own."""
    import warnings
    from kcache.dispatcher import sigspec
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            found = sigspec.parse_signature(_frontend(), text)
        except ValueError as exc:
            found = exc
    assert not [w for w in said if issubclass(w.category, SyntaxWarning)], [
        str(w.message) for w in said]
    return found


@pytest.mark.parametrize("text", ["void(1[::1])", "void(None[:, ::1])", "(1.5[::1],)"])
def test_signature_subscript_of_a_literal_is_refused_by_the_grammar(text):
    """'1[::1]' passed the grammar check and reached numba's eval, whose compile printed
    '<string>:1: SyntaxWarning: 'int' object is not subscriptable; perhaps you missed a
    comma?' on stderr, a line of Python's own before kcache's error."""
    found = _parse_quietly(text)
    assert isinstance(found, ValueError) and "is not a type" in str(found)


def test_warm_signatures_file_with_a_subscripted_literal_says_one_line(tmp_path):
    import subprocess
    import sys
    _frontend()
    sigs = tmp_path / "sigs.txt"
    sigs.write_text("examples.kernels:scaled_add void(1[::1])\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    done = subprocess.run([sys.executable, "-m", "kcache", "warm", "--signatures", str(sigs),
                           "--cc", "9.0", "--dir", str(tmp_path / "root")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "SyntaxWarning" not in done.stderr, done.stderr
    assert f"{sigs}:1: 1 is not a type" in done.stderr


_SIGSPECS = ["void(float32[::1], float64[:, ::1], int32)",
             "(Array(float32, 1, 'C', False, aligned=True), int64)",
             "void(Record({'a': {'type': int32, 'offset': 0}}, 4, False))",
             "void(UniTuple(int32, 3), Tuple((int32, float32)))",
             "void(NestedArray(float32, (2, 3)))"]
_PIECES = ["(", ")", "[", "]", ",", ":", "::1", "=", "'", "#", "\\", "\n", "float32", "Array",
           "UniTuple", "1048575", "0", "None", "{", "}", "*", ".", "__class__", "lambda", "f'",
           "1e9", "-1", "\x00"]


@st.composite
def _mutated_sigspec(draw):
    text = list(draw(st.sampled_from(_SIGSPECS)))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        if draw(st.booleans()):
            text[i:i] = list(draw(st.sampled_from(_PIECES)) * draw(st.integers(1, 40)))
        else:
            del text[i:i + draw(st.integers(1, 6))]
    return "".join(text)


@FUZZ
@given(_mutated_sigspec())
def test_signature_text_is_types_or_one_value_error(text):
    from kcache.dispatcher import sigfile
    found = _parse_quietly(text)
    assert isinstance(found, (tuple, ValueError))
    try:
        sigfile.parse_line(f"m:k {text}")
    except ValueError:
        pass


# --- entry files (a root, a layer, a bundle's or a remote's value) ----------------------------

_KEY = "ab" * 32


def _entry_parts():
    data = fmt.encode(_KEY, Entry({"cubin": b"\x7fELF" + bytes(60), "ptx": b".target sm_90\n"},
                                  {"kernel": "m:k", "signature": "(float32,)", "arch": "sm_90",
                                   "more": {"a": [1, 2.5, {"b": None}]}}),
                      {"producer": "numba", "toolchain": {"numba": "1"}})
    hlen, blen, _sum = fmt.parse_prefix(data[:fmt.PREFIX_SIZE], len(data))
    start = fmt.PREFIX_SIZE
    return data, data[start:start + hlen], data[start + hlen:start + hlen + blen]


_ENTRY, _HEADER, _BODY = _entry_parts()


def enveloped(header: bytes, body: bytes, **prefix) -> bytes:
    """An entry file of ``header`` and ``body`` with every checksum right (so a mutation
    reaches the decoder behind them); ``prefix`` overrides version, flags, lengths."""
    fields = dict(version=fmt.FORMAT_VERSION, flags=0, hlen=len(header), blen=len(body))
    fields.update(prefix)
    head = fmt._PREFIX.pack(fmt.MAGIC, fields["version"], fields["flags"], fields["hlen"],
                            fields["blen"], hashlib.blake2b(header, digest_size=16).digest())
    whole = head + header + body
    return whole + hashlib.blake2b(whole, digest_size=fmt.SUM_SIZE).digest()


@st.composite
def _hostile_entry(draw):
    how = draw(st.sampled_from(["file", "header", "header-bytes", "body", "prefix"]))
    if how == "file":
        return mutated(_ENTRY, draw)
    if how == "header":  # a hostile value in a valid header, every checksum right
        header = msgpack.unpackb(_HEADER, raw=False)
        place = draw(st.sampled_from([header, header["meta"], header["components"],
                                      header["sizes"], header["sums"]]))
        place[draw(st.sampled_from(["key", "kernel", "signature", "arch", "sigspec", "created",
                                    "compile_seconds", "sizes", "sums", "meta", "cubin"]))] = \
            draw(MSGPACK_VALUES)
        return enveloped(msgpack.packb(header, use_bin_type=True), _BODY)
    if how == "header-bytes":
        return enveloped(mutated(_HEADER, draw), _BODY)
    if how == "body":
        return enveloped(_HEADER, mutated(_BODY, draw))
    return enveloped(_HEADER, _BODY, version=draw(st.integers(0, 3)),
                     flags=draw(st.integers(0, 3)), hlen=draw(st.integers(0, 2**32 - 1)),
                     blen=draw(st.integers(0, 2**64 - 1)))


@FUZZ
@given(_hostile_entry())
def test_entry_bytes_decode_or_are_corrupt(data):
    """Every way in: a hit (per-artifact sums), the whole check, a header listing. Memory:
    the input's few copies plus a constant (the decoding limits)."""
    for decode in (lambda: fmt.decode(data, _KEY), lambda: fmt.decode(data, _KEY, whole=False),
                   lambda: fmt.decode_header(data, _KEY, len(data))):
        found = bounded(decode, peak=8 * len(data) + (1 << 20))
        assert isinstance(found, (tuple, dict, CorruptEntry, NewerFormat)), repr(found)


# --- bundles (kcache import, a layer): versions 2 and 3, their tags made right again ----------

def _bundles(tmp) -> dict:
    from kcache.tiers.bundle import v2
    items = []
    for i in range(3):
        key = f"{i:02x}" * 32
        items.append(({"key": key, "kernel": f"m:k{i}", "signature": "(int32,)",
                       "arch": "sm_90", "toolchain": {"numba": "1"}, "created": 1.0},
                      fmt.encode(key, Entry({"cubin": bytes([i]) * 200}, {"kernel": f"m:k{i}"}))))
    out = {}
    for version in (2, 3):
        for compress in (False, True):
            path = tmp / f"v{version}{compress}.kcb"
            v2.write_bundle(path, items, version=version, compress=compress)
            out[version, compress] = path.read_bytes()
    return out


def _retagged(data: bytes, version: int) -> bytes:
    """``data`` with its (unsigned) tag computed again over what it now holds."""
    from kcache.tiers.bundle import v3
    if version == 3 and len(data) >= v3.PREFIX.size:
        _magic, _v, _flags, hlen, ilen = v3.PREFIX.unpack_from(data)
        end = v3.PREFIX.size + hlen + ilen
        if end + 32 <= len(data):
            tag = hashlib.blake2b(data[:end], digest_size=32).digest()
            return data[:end] + tag + data[end + 32:]
    if version == 2 and len(data) > 32:
        return data[:-32] + hashlib.blake2b(data[:-32], digest_size=32).digest()
    return data


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    pytest.importorskip("zstandard")
    return _bundles(tmp_path_factory.mktemp("bundles"))


def _serve_all(path) -> None:
    """Open the bundle as kcache import does and read and decode every entry it lists."""
    from kcache.tiers.tier import TierError
    from kcache.tiers.bundle import BundleError
    from kcache.tiers.bundle.v2 import BundleTier
    try:
        tier = BundleTier(path, max_entry_size=1 << 20)
    except BundleError:
        return
    with tier:
        assert isinstance(tier.problems, dict) and isinstance(tier.records(), list)
        for key in tier.keys():
            try:
                blob = tier.read(key, 1 << 20)
                if blob is not None:
                    fmt.decode(blob.data, key, whole=False, intact=blob.intact)
            except (CorruptEntry, TierError):
                pass


@FUZZ
@given(st.data())
def test_bundle_bytes_index_or_are_refused(bundles, tmp_path_factory, data):
    version, compress = data.draw(st.sampled_from(sorted(bundles)))
    hostile = mutated(bundles[version, compress], data.draw)
    if data.draw(st.booleans()):
        hostile = _retagged(hostile, version)
    path = tmp_path_factory.mktemp("b") / "hostile.kcb"
    path.write_bytes(hostile)
    found = bounded(lambda: _serve_all(path), peak=64 * len(hostile) + (4 << 20))
    assert found is None, repr(found)


# --- stats shards and the toolchain memo (files of the root) ----------------------------------

@pytest.mark.filterwarnings("ignore::kcache.warn.KcacheWarning")
@FUZZ
@given(st.lists(st.tuples(st.integers(0, 15), st.booleans(),
                          st.one_of(MSGPACK_VALUES.map(msgpack.packb), st.binary(max_size=40))),
                max_size=3),
       st.one_of(MSGPACK_VALUES.map(msgpack.packb), st.binary(max_size=40)))
def test_stats_shards_and_toolchain_memo_are_counts_or_ignored(tmp_path_factory, shards, memo):
    from kcache import make_key, toolchain
    from kcache.store import stats
    root = tmp_path_factory.mktemp("s") / "root"
    store = Store(root)
    key = make_key({"fuzz": 1})
    store.put(key, Entry({"cubin": b"z"}, {"kernel": "m:k"}))
    stats.flush_all()
    for shard, hits, packed in shards:
        path = store.layout.stats_files(shard)[1 if hits else 0]
        path.write_bytes(packed)
        path.chmod(0o600)
    again = Store(root)
    counts = again.stats()
    import dataclasses
    assert all(v >= 0 for v in dataclasses.asdict(counts).values()
               if isinstance(v, (int, float)))
    again.get(key)
    again.put(make_key({"fuzz": 2}), Entry({"cubin": b"y"}, {}))
    stats.flush_all()
    memo_path = root / "v1" / "toolchain.msgpack"
    memo_path.write_bytes(memo)
    memo_path.chmod(0o600)
    assert toolchain.memoized(memo_path, lambda: {"numba": "1"}) == {"numba": "1"}

"""Property-based fuzzing of what turns file bytes into values (attack round 11): mutations of
valid encodings (bit flips, cuts, inserted bytes, msgpack type bytes, length fields, hostile
values in valid envelopes) must give a value or the parser's documented error, never another
exception, within a time and memory bound. Deterministic (derandomized, no database) and
short; each defect found is also a plain regression test."""
import json
import os
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kcache import ConfigError, Store
from kcache.config import resolve, resolve_each

FUZZ = settings(max_examples=150, deadline=2000, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))

#: Text that file names, terminals and parsers treat specially.
EVIL_TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["\x00", "/a\x00b", "\ud800", "\udcff", "\x1b[2J", "[bold]x[/]", "a\nb",
                     "1e400", "nan", "-1", "9" * 5000, "~nobody\x00", "file:///a\x00", "\u202e"]))
LEAF = st.one_of(EVIL_TEXT, st.none(), st.booleans(), st.integers(-2**70, 2**70),
                 st.floats(), st.binary(max_size=8))
VALUES = st.recursive(LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(EVIL_TEXT, inner, max_size=3)), max_leaves=8)
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

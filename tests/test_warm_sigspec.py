"""Signature text (dispatcher/sigspec.py) and signatures files (dispatcher/sigfile.py).

A sigspec must parse back to *equal* numba types (layout, readonly, alignment, records), text
from a file or a cache entry must never evaluate anything but numba types, and a bad line of
a signatures file is one error naming FILE:LINE."""
import os
import re

import numpy as np
import pytest

pytest.importorskip("numba.cuda")

pytestmark = pytest.mark.compat  # runs in every leg of tests/compat/run.sh (docs/compat.md)

from numba.cuda import types as T  # noqa: E402
from numba.cuda.np.numpy_support import from_dtype  # noqa: E402

from kcache.dispatcher import sigfile, sigspec  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND  # noqa: E402
from kcache.dispatcher.frontends.numba_cuda import signatures as _nc_signatures

PACKED = from_dtype(np.dtype([("a", np.int8), ("b", np.float64)]))
ALIGNED = from_dtype(np.dtype([("a", np.int8), ("b", np.float64)], align=True))
TITLED = from_dtype(np.dtype({"names": ["x", "y"], "formats": [np.int32, np.float32],
                              "titles": ["tx", None], "offsets": [0, 4]}))
TYPES = [
    T.float32, T.float64, T.int8, T.uint64, T.boolean, T.complex64, T.float16,
    T.float32[::1], T.float64[:, ::1], T.float64[::1, :], T.int32[:, :, :], T.float32[:],
    T.Array(T.float32, 1, "F"), T.Array(T.float64, 0, "C"),
    T.Array(T.float32, 1, "C", readonly=True), T.Array(T.int16, 2, "A", aligned=False),
    T.Array(T.float32, 3, "F", readonly=True, aligned=False),
    PACKED, ALIGNED, TITLED, T.Array(PACKED, 1, "C", aligned=False), T.Array(ALIGNED, 0, "C"),
    T.NestedArray(T.float32, (3, 2)), T.UniTuple(T.int32, 3), T.Tuple((T.int32, T.float64)),
]


@pytest.mark.parametrize("t", TYPES, ids=str)
def test_round_trip_gives_equal_types(t):
    argtypes = (t, T.int64)
    text = sigspec.format_signature(FRONTEND, argtypes)
    assert text.startswith("void(")
    assert sigspec.parse_signature(FRONTEND, text) == argtypes
    # numba-cuda itself reads the text to the same types (what numba.cuda.jit(text) does)
    assert _nc_signatures.normalize_signature(text) == argtypes
    # and the key component (repr of the types) inverts exactly, except where numba's repr
    # is not a constructor call (a record field title is printed unquoted): then None.
    component = _nc_signatures.signature_string(argtypes)
    expected = None if t is TITLED else argtypes
    assert sigspec.from_signature_component(FRONTEND, component) == expected


def test_simple_arrays_use_numba_slice_spelling():
    text = sigspec.format_signature(FRONTEND, (T.float32[::1], T.float64[:, ::1], T.int32[:]))
    assert text == "void(float32[::1], float64[:, ::1], int32[:])"
    assert sigspec.format_signature(FRONTEND, ()) == "void()"


@pytest.mark.parametrize("t", [T.CPointer(T.int32), T.none, T.IntegerLiteral(3), T.voidptr],
                         ids=str)
def test_types_without_a_text_form_are_unexpressible(t):
    with pytest.raises(sigspec.Unexpressible, match="no signature-string form"):
        sigspec.format_signature(FRONTEND, (t,))
    assert sigspec.format_or_none(FRONTEND, (t,)) is None


@pytest.mark.parametrize("text, complaint", [
    ("__import__('os').system('true')", r"call of .__import__.*is not allowed"),
    ("void(np.float32)", "Attribute expressions are not allowed"),
    ("void(float32.__class__)", "Attribute"),
    ("void(os)", "'os' is not a numba type name"),
    ("void(np)", "'np' is not a numba type name"),
    ("void(Dispatcher(1))", "call of 'Dispatcher' is not allowed"),
    ("void(*x)", "-arguments are not allowed"),
    ("void(Array(float32, **{'ndim': 1}))", "-arguments are not allowed"),
    ("void(UniTuple(int32, 99999999))", "constant 99999999 is not allowed"),
    ("void(float32[1])", "array dimensions"),
    ("void(float32[::1]", "not a signature"),
    ("float32(int32)", "must return void"),
    ("void([x for x in ()])", "'for' is not allowed"),
    ("void(" + "UniTuple(" * 40 + "int32" + ", 1)" * 40 + ")", "nested deeper"),
    ("void(" + "int32, " * 4000 + ")", "longer than"),
])
def test_hostile_or_bad_text_is_refused_before_evaluation(text, complaint, monkeypatch):
    evaluated = []
    monkeypatch.setattr(_nc_signatures, "normalize_signature",
                        lambda s: evaluated.append(s) or (_ for _ in ()).throw(TypeError(
                            "a kernel signature must return void")))
    with pytest.raises(ValueError, match=complaint):
        sigspec.parse_signature(FRONTEND, text)
    if complaint != "must return void":
        assert evaluated == []  # refused by the grammar, never handed to eval


#: Texts under MAX_SIGNATURE_CHARS that made CPython's parser raise MemoryError or
#: RecursionError before the token scan (issue 17, item 5).
DEEP = {
    "minus": "-" * 16000,
    "not": "not " * 4000,
    "subscripts": "[:]" * 5000,
    "calls": "()" * 5000,
    "subscripts-of-a-type": "void(float32" + "[:]" * 5000 + ")",
    "attributes": "void(" + "a." * 5000 + "a)",
    "lambdas": "lambda: " * 2000 + "int32",
    "parentheses": "void(" + "(" * 5000 + "int32" + ")" * 5000 + ")",
    "unclosed": "void(" + "[" * 8000,
    "fstring": "void(f'{" + "a." * 3000 + "a}')",
    "long-number": "void(UniTuple(int32, " + "9" * 5000 + "))",
}


@pytest.mark.parametrize("text", DEEP.values(), ids=DEEP.keys())
def test_deep_or_long_text_is_one_short_error_before_the_parser(text, monkeypatch):
    assert len(text) < sigspec.MAX_SIGNATURE_CHARS
    monkeypatch.setattr(_nc_signatures, "normalize_signature",
                        lambda s: pytest.fail("handed to numba's eval"))
    with pytest.raises(ValueError) as info:
        sigspec.parse_signature(FRONTEND, text)
    message = str(info.value)
    assert type(info.value) is ValueError and len(message) < 400 and "\n" not in message
    assert sigspec.from_signature_component(FRONTEND, text) is None  # never raises either


def test_token_scan_keeps_what_the_grammar_accepts():
    deep_record = "void(" + "UniTuple(" * 20 + "int32" + ", 1)" * 20 + ")"
    assert sigspec.parse_signature(FRONTEND, deep_record)[0].count == 1
    text = "void(Array(Record([('a#b', {'type': int8, 'offset': 0})], 1, False), 1, 'C'))"
    assert sigspec.parse_signature(FRONTEND, text)[0].ndim == 1


@pytest.mark.parametrize("text, count", [
    ("void(UniTuple(UniTuple(UniTuple(float32, 1048575), 1048575), 1048575))", "about 10**18"),
    ("void(Array(float32, 1048575, 'C'))", "2097155"),
    ("void(UniTuple(float32[::1], 5000))", "35000"),
    ("void(Tuple((int8, UniTuple(int8, 40000))))", "40001"),
])
def test_types_of_more_parameters_than_a_launch_passes_are_refused(text, count):
    """Within the grammar's bounds, but flattening to more kernel parameters than CUDA's
    32,764-byte parameter space holds: compiling 2**60 of them never ends."""
    with pytest.raises(ValueError, match=re.escape(f"flatten to {count} kernel parameters")):
        sigspec.parse_signature(FRONTEND, text)
    assert sigspec.from_signature_component(FRONTEND, text) is None
    big = sigspec.parse_signature(FRONTEND, "void(UniTuple(int8, 4096), float32[:, :, ::1])")
    assert big == (T.UniTuple(T.int8, 4096), T.float32[:, :, ::1])


def test_component_inversion_refuses_what_it_cannot_invert_exactly():
    # numba writes the component with each type's repr: other spellings of the same types
    # are not what an entry holds, so they are refused rather than guessed.
    assert sigspec.from_signature_component(FRONTEND, "(float32[::1],)") is None
    assert sigspec.from_signature_component(
        FRONTEND, "(Array(float32, 1, 'C', False, aligned=True),)") \
        == (T.float32[::1],)
    assert sigspec.from_signature_component(FRONTEND, "(nonsense(,)") is None
    assert sigspec.from_signature_component(FRONTEND, "(__import__('os'),)") is None
    assert sigspec.from_signature_component(FRONTEND, None) is None
    # A text that parses but prints differently is not accepted as that entry's signature.
    assert sigspec.from_signature_component(FRONTEND, "(float32,  int64)") is None


# --- signatures files --------------------------------------------------------------------------

def write(tmp_path, text, name="k.sigs"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_file_format_comments_blank_lines_and_duplicates(tmp_path):
    path = write(tmp_path, "\n".join([
        "# a comment",
        "",
        "pkg.mod:kern   void(float32[::1], int64)   # trailing comment",
        "   pkg.mod:Outer.kern void()",
        "pkg.mod:kern void(float32[::1],int64)",  # the same types: dropped
        "pkg.mod:rec void(Record([('a#b', {'type': int8, 'offset': 0})], 1, False))  # x",
    ]))
    lines = sigfile.read_signatures(FRONTEND, path)
    assert [(l.kernel, l.line) for l in lines] == [
        ("pkg.mod:kern", 3), ("pkg.mod:Outer.kern", 4), ("pkg.mod:rec", 6)]
    assert lines[0].signature == "void(float32[::1], int64)"
    assert lines[0].argtypes == (T.float32[::1], T.int64)
    assert lines[0].origin == f"{path}:3"
    assert "'a#b'" in lines[2].signature  # a '#' inside a field name is not a comment
    assert lines[2].argtypes[0].fields["a#b"].type == T.int8


@pytest.mark.parametrize("line, complaint", [
    ("pkg.mod:kern", "expected a kernel and a signature"),
    ("pkg.mod.kern void()", "not a kernel name"),
    ("pkg-mod:kern void()", "not a kernel name"),
    # a name no entry can hold (4096 characters): was imported, and printed whole by warm
    ("p" * 5000 + ":kern void()", "(5005 characters) is not a kernel name"),
    ("pkg.mod:kern void(float33[::1])", "'float33' is not a numba type name"),
    ("pkg.mod:kern void(__import__('os'))", "not allowed"),
    ("pkg.mod:kern float32(float32)", "must return void"),
    ("pkg.mod:kern # only a comment", "no signature"),
    ("pkg.mod:kern void(float32[:1])",  # numba's complaint, then the forms accepted
     "with no start or stop, got slice(None, 1, None). (e.g. void(float32[::1], int32); "
     "arrays: float32[:]"),
])
def test_bad_line_is_one_error_naming_file_and_line(tmp_path, line, complaint):
    path = write(tmp_path, f"# header\npkg.mod:ok void()\n{line}\n")
    with pytest.raises(sigfile.SignatureFileError) as info:
        sigfile.read_signatures(FRONTEND, path)
    message = str(info.value)
    assert message.startswith(f"{path}:3: ") and complaint in message
    assert "\n" not in message


@pytest.mark.parametrize("name", ["minus", "not", "subscripts", "calls"])
def test_hostile_line_is_one_cli_line_exit_2(tmp_path, name):
    """``kcache warm --signatures`` with a line under 16 KB that reached CPython's parser:
    one ``kcache: FILE:LINE: ...`` line, exit status 2, nothing compiled (a real process)."""
    import subprocess
    import sys
    path = write(tmp_path, f"pkg.mod:ok void()\npkg.mod:kern {DEEP[name]}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    env["HOME"] = env["XDG_CACHE_HOME"] = str(tmp_path / "home")
    proc = subprocess.run([sys.executable, "-m", "kcache", "warm", "--signatures", str(path),
                           "--cc", "9.0", "--dir", str(tmp_path / "cache")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kcache: {path}:2: "), proc.stderr[-2000:]
    assert len(lines[0]) < 500 and proc.stdout == ""
    assert not (tmp_path / "cache").exists()


def test_long_kernel_name_is_not_echoed_whole(tmp_path):
    for number, line in enumerate(["a" * 16000 + " void()", "b-" * 8000 + " void()",
                                   "m:" + "k" * 16000 + " # no signature"], 1):
        path = write(tmp_path, "pkg.mod:ok void()\n" * number + line + "\n")
        with pytest.raises(sigfile.SignatureFileError) as info:
            sigfile.read_signatures(FRONTEND, path)
        message = str(info.value)
        assert message.startswith(f"{path}:{number + 1}: ") and len(message) < 400, message


def test_unreadable_files_are_one_error(tmp_path):
    missing = tmp_path / "missing.sigs"
    with pytest.raises(sigfile.SignatureFileError, match="cannot read the signatures file"):
        sigfile.read_signatures(FRONTEND, missing)
    binary = tmp_path / "bin.sigs"
    binary.write_bytes(b"pkg.mod:k void()\n\xff\xfe\n")
    with pytest.raises(sigfile.SignatureFileError, match=r"bin.sigs:2: not UTF-8"):
        sigfile.read_signatures(FRONTEND, binary)
    with pytest.raises(sigfile.SignatureFileError, match="not a regular file"):
        sigfile.read_signatures(FRONTEND, tmp_path)
    fifo = tmp_path / "fifo.sigs"
    os.mkfifo(fifo)  # no writer: a blocking open would hang here
    with pytest.raises(sigfile.SignatureFileError, match="not a regular file"):
        sigfile.read_signatures(FRONTEND, fifo)
    big = tmp_path / "big.sigs"
    with open(big, "wb") as f:
        f.truncate(sigfile.MAX_FILE_BYTES + 1)
    with pytest.raises(sigfile.SignatureFileError, match="larger than"):
        sigfile.read_signatures(FRONTEND, big)


def test_shipped_signature_files_parse():
    from pathlib import Path
    examples = Path(__file__).resolve().parents[1] / "examples"
    assert len(sigfile.read_signatures(FRONTEND, examples / "kernels.sigs")) == 3
    assert len(sigfile.read_signatures(FRONTEND, examples / "cache_usecases.sigs")) == 9


# --- --cc lists (dispatcher/warm.py: the one place warm parses a cc) --------------------------

def test_cc_list_forms_and_errors():
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
    from kcache.dispatcher.warm import parse_cc_list
    assert parse_cc_list(FRONTEND, ["8.0,9.0"]) == [(8, 0), (9, 0)]
    assert parse_cc_list(FRONTEND, ["sm_80", "90", "sm_90a", " 9.0 "]) == [(8, 0), (9, 0)]
    with pytest.raises(ValueError, match=r"--cc ninety: not a compute capability"):
        parse_cc_list(FRONTEND, ["8.0,ninety"])
    with pytest.raises(ValueError, match="empty compute capability"):
        parse_cc_list(FRONTEND, ["8.0,"])
    with pytest.raises(ValueError, match=r"cc 99\.9 is not supported"):
        parse_cc_list(FRONTEND, ["99.9"])

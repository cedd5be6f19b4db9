"""Signatures in numba's short form (``float32[::1]``) from the text entries store, and
``--signature GLOB`` patterns (issue 35): kcache.entry.shortsig, which never imports numba.
The round trips check the short form against numba-cuda's own reading of signatures."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from kcache.entry.shortsig import MAX_SLICED_NDIM, short_signature, signature_matches

CASES = [
    ("(array(float32, 1d, C), array(float32, 1d, C), int32)", "(float32[::1], float32[::1], int32)"),
    ("(array(float64, 2d, C), int64)", "(float64[:, ::1], int64)"),
    ("(array(float32, 2d, F),)", "(float32[::1, :],)"),
    ("(array(int16, 3d, A), float32)", "(int16[:, :, :], float32)"),
    ("(array(float32, 1d, A),)", "(float32[:],)"),
    ("(readonly array(float32, 1d, C),)", "(readonly float32[::1],)"),
    ("(unaligned readonly array(uint8, 2d, A),)", "(unaligned readonly uint8[:, :],)"),
    ("(array(complex64, 1d, C), bool)", "(complex64[::1], bool)"),
    ("(array(datetime64[ns], 1d, C),)", "(datetime64[ns][::1],)"),
    ("(Tuple(array(int8, 2d, A), int64), UniTuple(float32 x 3))",
     "(Tuple(int8[:, :], int64), UniTuple(float32 x 3))"),
    ("(unaligned array(Record(a[type=float32;offset=0],b[type=int64;offset=4];12;False), 1d, C),)",
     "(unaligned Record(a[type=float32;offset=0],b[type=int64;offset=4];12;False)[::1],)"),
    # no slice form: as printed
    ("(array(float64, 0d, C),)", "(array(float64, 0d, C),)"),
    ("(array(float32, 1d, F),)", "(array(float32, 1d, F),)"),
    ("(array(float32, 9d, C),)", "(array(float32, 9d, C),)"),
    ("(Record(a[type=nestedarray(float32, (3,));offset=0];12;False),)",
     "(Record(a[type=nestedarray(float32, (3,));offset=0];12;False),)"),
    ("(float32[::1], int32)", "(float32[::1], int32)"),  # already short
]


@pytest.mark.parametrize("full, short", CASES, ids=[c[0][:40] for c in CASES])
def test_short_form(full, short):
    assert short_signature(full) == short


@pytest.mark.parametrize("text", ["", "array(", "x)(array(float32, 1d, C)", "array(]",
                                  "array(float32, 1d)", "array(float32, 1d, C, x)",
                                  "array(float32, 100d, C)", "array(, 1d, C)",
                                  "myarray(float32, 1d, C)", "np.array(float32, 1d, C)"])
def test_text_it_does_not_understand_is_unchanged(text):
    assert short_signature(text) == text


def test_values_that_are_not_text_come_back_as_they_are():
    assert short_signature(None) is None
    assert short_signature(b"array(") == b"array("


def test_deep_nesting_and_long_text_are_bounded():
    deep = "array(" * 5000 + "float32" + ", 1d, C)" * 5000
    assert isinstance(short_signature(deep), str)
    many = "(" + ", ".join(["array(float32, 2d, C)"] * 3000) + ")"
    assert short_signature(many) == "(" + ", ".join(["float32[:, ::1]"] * 3000) + ")"


# ------------------------------------------------------------------------ numba round trips

SCALARS = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
           "uint32", "uint64", "complex64", "complex128", "boolean"]


@st.composite
def arrays(draw):
    from numba.core import types
    dtype = getattr(types, draw(st.sampled_from(SCALARS)))
    ndim = draw(st.integers(1, MAX_SLICED_NDIM))
    layouts = ["C", "A"] + (["F"] if ndim > 1 else [])
    return types.Array(dtype, ndim, draw(st.sampled_from(layouts)))


@st.composite
def argtypes(draw):
    from numba.core import types
    scalar = st.sampled_from(SCALARS).map(lambda n: getattr(types, n))
    return tuple(draw(st.lists(st.one_of(arrays(), scalar), min_size=1, max_size=6)))


@settings(max_examples=200, deadline=None)
@given(argtypes())
def test_the_short_form_reads_back_as_the_same_types_in_numba(types_):
    """What ``kcache ls`` shows, pasted into ``numba.cuda.jit``/``compile_for``, is the same
    overload: numba-cuda's signature reading gives back equal types."""
    from kcache.dispatcher.frontends.numba_cuda.signatures import (
        signature_display, signature_string)
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
    from kcache.dispatcher.sigspec import parse_signature
    for printed in (signature_display(types_), signature_string(types_)):
        short = short_signature(printed)
        assert "array(" not in short
        assert parse_signature(FRONTEND, "void" + short) == types_, (printed, short)


@settings(max_examples=100, deadline=None)
@given(arrays(), st.booleans(), st.booleans())
def test_readonly_and_unaligned_are_named_in_front(array, readonly, aligned):
    from numba.core import types
    from kcache.dispatcher.frontends.numba_cuda.bridge import FRONTEND
    from kcache.dispatcher.sigspec import parse_signature
    typ = types.Array(array.dtype, array.ndim, array.layout, readonly=readonly, aligned=aligned)
    short = short_signature(str(typ))
    words = ("unaligned " if not aligned else "") + ("readonly " if readonly else "")
    assert short.startswith(words) and "array(" not in short
    assert parse_signature(FRONTEND, f"void({short[len(words):]})") == (array,)


@settings(max_examples=200, deadline=None)
@given(argtypes(), argtypes())
def test_different_overloads_stay_different(a, b):
    from kcache.dispatcher.frontends.numba_cuda.signatures import signature_display
    if a != b:
        assert short_signature(signature_display(a)) != short_signature(signature_display(b))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("array(float32, 1d, C)[]:readonly unaligned x,")),
               max_size=120))
def test_any_text_never_raises_is_idempotent_and_stays_short(text):
    short = short_signature(text)
    assert isinstance(short, str)
    assert short_signature(short) == short
    assert len(short) <= 2 * len(text) + 8
    if "array(" not in text:
        assert short == text


# --------------------------------------------------------------------------- patterns

SIG = "(array(float32, 2d, C), array(float32, 1d, C), int64)"


@pytest.mark.parametrize("pattern", [
    "(float32[:, ::1], float32[::1], int64)",  # the short form, whole
    "float32[:, ::1], float32[::1], int64",   # without the parentheses
    "float32[:,::1],float32[::1],int64",       # spaces do not matter
    "float32[:, ::1], *",                       # wildcards
    "*, int64", "*float32[::1]*", "*int?4*",
    SIG, "*array(float32, 2d, C)*",             # the full form
])
def test_patterns_that_match(pattern):
    assert signature_matches(SIG, pattern)


@pytest.mark.parametrize("pattern", [
    "float32[::1]",        # the first argument is 2-d; and a glob is matched whole
    "float32[:, ::1]",     # one argument of three
    "*float64*", "[:, ::1]*", "*float32[:]*",
    "float32[:1], *",      # brackets are literal, not a set of characters
    "",
])
def test_patterns_that_do_not_match(pattern):
    assert not signature_matches(SIG, pattern)


def test_a_one_argument_signature_matches_its_type_alone():
    assert signature_matches("(array(float32, 1d, C),)", "float32[::1]")
    assert signature_matches("(array(float32, 1d, C))", "float32[::1]")
    assert not signature_matches(None, "*")  # a program has no signature


def _reference_matches(signature: str, pattern: str) -> bool:
    """signature_matches as one backtracking regex (what it was): right, but ~n**k steps."""
    bare_pattern = "".join(pattern.split())
    regex = re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c)
                               for c in bare_pattern) + r"\Z", re.DOTALL)
    for form in {signature, short_signature(signature)}:
        bare = "".join(form.split())
        candidates = [bare]
        if bare.startswith("(") and bare.endswith(")"):
            candidates += [bare[1:-1], bare[1:-1].removesuffix(",")]
        if any(regex.match(text) for text in candidates):
            return True
    return False


@settings(max_examples=3000, deadline=None)
@given(st.text("ab(),[ ", max_size=10), st.text("ab),*?[", max_size=6))
def test_glob_matching_agrees_with_a_backtracking_regex(signature, pattern):
    assert signature_matches(signature, pattern) == _reference_matches(signature, pattern)


@pytest.mark.parametrize("signature, pattern, expected", [
    ("aXbXa", "a*a", True), ("a", "a*a", False), ("aa", "a*a", True),
    ("abcabd", "*abd", True), ("abcabd", "ab*ab?", True), ("abab", "*ab*ab*", True),
    ("aba", "*ab*ab*", False), ("x[1]y", "*[?]*", True), ("", "*", True), ("", "**", True),
    ("(array(float32, 1d, C),)", "*float32*", True),
])
def test_glob_cases(signature, pattern, expected):
    assert signature_matches(signature, pattern) is expected
    assert _reference_matches(signature, pattern) is expected


#: A 64 KiB signature (MAX_SIGNATURE) of float32 arguments: with k wildcards, a backtracking
#: regex tries ~n**k splits (18 s for three on 18 KB; about 15 minutes on 64 KB).
_HOSTILE = r'''
import sys
from kcache.entry.format import MAX_SIGNATURE
from kcache.entry.shortsig import signature_matches
body = "float32, " * (MAX_SIGNATURE // 9 - 2)
sig = "(" + body + "float64)"
assert len(sig) <= MAX_SIGNATURE
patterns = {"*float32*float32*float64*": True, "*float32*float32*float16*": False,
            "*float32*float32*float32*float32*int8": False, "*float32*?loat32*float64": True,
            "*float64*float32*": False}
for pattern, expected in patterns.items():
    assert signature_matches(sig, pattern) is expected, pattern
print("ok")
'''


def test_a_hostile_64_kib_signature_with_several_wildcards_does_not_hang():
    # a hang guard, not a speed goal: the greedy match takes milliseconds
    done = subprocess.run([sys.executable, "-c", _HOSTILE], capture_output=True, text=True,
                          timeout=20)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr[-2000:]

"""kcache.arch: every spelling of a compute capability numba-cuda uses, and bad ones."""
import subprocess
import sys

import pytest

from kcache import arch


@pytest.mark.parametrize("value, parsed", [
    ((9, 0), (9, 0, None)),
    ([9, 0], (9, 0, None)),
    ((9, 0, "a"), (9, 0, "a")),
    ((9, 0, ""), (9, 0, None)),
    ((8, 6), (8, 6, None)),
    ((8, 0, ""), (8, 0, None)),  # what numba-cuda's _ensure_cc gives below 9.0
    ("9.0", (9, 0, None)),
    ("9.0a", (9, 0, "a")),
    (" 8.6 ", (8, 6, None)),
    ("sm_90", (9, 0, None)),
    ("sm_90a", (9, 0, "a")),
    ("SM_90A", (9, 0, "a")),
    ("compute_90", (9, 0, None)),
    ("compute_90a", (9, 0, "a")),
    ("90", (9, 0, None)),
    ("90a", (9, 0, "a")),
    ("100", (10, 0, None)),
    ("sm_121", (12, 1, None)),
    ("12.1", (12, 1, None)),
    (90, (9, 0, None)),
    (75, (7, 5, None)),
    (100, (10, 0, None)),
    (121, (12, 1, None)),
    (9.0, (9, 0, None)),   # a float: the text its repr is (compile_for(cc=9.0))
    (8.6, (8, 6, None)),
    (12.0, (12, 0, None)),
])
def test_accepted_forms(value, parsed):
    assert arch.parse_cc(value) == parsed


def test_numpy_integers_are_integers():
    np = pytest.importorskip("numpy")
    assert arch.parse_cc((np.int64(9), np.int32(0))) == (9, 0, None)
    assert arch.parse_cc(np.int64(90)) == (9, 0, None)


def test_90_and_90a_are_one_target():
    # numba-cuda 0.30 compiles a cc 9.0 device as sm_90a (CUDACodeLibrary._ensure_cc).
    forms = [(9, 0), (9, 0, "a"), (9, 0, ""), "9.0", "9.0a", "sm_90", "sm_90a", "compute_90",
             "90", 90]
    assert {arch.full_cc(f) for f in forms} == {(9, 0, "a")}
    assert {arch.arch_name(f) for f in forms} == {"sm_90a"}
    assert arch.full_cc((8, 0)) == (8, 0, "") and arch.arch_name("8.6") == "sm_86"
    assert arch.arch_name(100) == "sm_100a" and arch.arch_name("12.1") == "sm_121a"


@pytest.mark.parametrize("bad", [
    (9,), (9, 0, "a", 1), (), [], "ninety", "", "9", "9.", ".0", "9.10", "sm_9", "sm90",
    "9.0b", "9_0", "sm_90 a", "1234", "0.5", "00", (0, 5), (9, 10), (100, 0), (-1, 0),
    (9.0, 0), ("9", "0"), (True, 0), (9, 0, 1), (9, 0, "x"), 9, 5, 1000, -90, True, None,
    9.55, 0.5, float("nan"), float("inf"), -9.0, 1e300, b"9.0", object(), {"major": 9},
])
def test_bad_forms_give_one_line_naming_the_accepted_ones(bad):
    with pytest.raises(ValueError) as info:
        arch.parse_cc(bad)
    message = str(info.value)
    assert "\n" not in message and "compute capability" in message
    assert "sm_90a" in message or "use" in message


def test_suffixes_numba_cuda_does_not_compile_are_refused():
    with pytest.raises(ValueError, match=r"'a' suffix exists from cc 9\.0; use 8\.0"):
        arch.parse_cc("sm_80a")
    with pytest.raises(ValueError, match=r"'a' suffix exists from cc 9\.0"):
        arch.parse_cc((8, 6, "a"))
    with pytest.raises(ValueError, match=r"suffix 'f'.*only 'a'"):
        arch.parse_cc("sm_100f")
    with pytest.raises(ValueError, match=r"suffix 'f'"):
        arch.parse_cc((10, 0, "f"))


def test_huge_inputs_are_refused_without_a_traceback_of_their_own():
    # int("9" * 5000) would hit Python's int-conversion limit; repr() of such an int too.
    huge = 10 ** 5000
    for bad in ("9" * 5000, "sm_" + "9" * 5000, "9." + "0" * 5000, huge, (huge, 0),
                (9, huge), "x" * 10**6, (9, 0, "a" * 10**6)):
        with pytest.raises(ValueError) as info:
            arch.parse_cc(bad)
        assert len(str(info.value)) < 300
    assert "bits" in str(pytest.raises(ValueError, arch.parse_cc, huge).value)


def test_arch_matches_for_the_cli_filter():
    nine = arch.parse_cc("9.0")
    nine_a = arch.parse_cc("sm_90a")
    assert arch.arch_matches("sm_90a", nine) and arch.arch_matches("sm_90", nine)
    assert arch.arch_matches("sm_90a", nine_a) and not arch.arch_matches("sm_90", nine_a)
    assert arch.arch_matches("sm_90a", arch.parse_cc(90))
    assert not arch.arch_matches("sm_80", nine) and not arch.arch_matches("sm_100a", nine)
    assert arch.arch_matches("sm_100a", arch.parse_cc("10.0"))
    # whatever a cache file holds as arch is no match, never an error
    for junk in (None, "", "garbage", "sm_" + "9" * 5000, 90, b"sm_90", ["sm_90"], "sm_80a"):
        assert arch.arch_matches(junk, nine) is False


@pytest.mark.exec_children  # what a fresh interpreter imports
def test_importing_arch_imports_no_numba():
    code = "import sys, kcache.arch; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_option_problem_speaks_the_command_line():
    """--cc errors name the option and CLI forms, never Python tuples; a suggestion is always
    one that would be accepted (issue 18)."""
    assert arch.option_problem("--cc", "9.0") is None
    line = arch.option_problem("--cc", "9")
    assert line.startswith("--cc 9: not a compute capability; use MAJOR.MINOR like 9.0 or sm_90")
    assert "(9, 0)" not in line
    # a filter takes any well-formed cc: the suggestion for a bad suffix is its cc
    assert arch.option_problem("--cc", "sm_99x").endswith("; use 9.9")
    assert arch.option_problem("--cc", "9.9") is None
    # a compiling command: only what the toolkit builds, suggested or accepted
    supported = [(8, 0), (9, 0)]
    line = arch.option_problem("--cc", "sm_99x", supported)
    assert line.endswith("use one the installed CUDA toolkit supports: 8.0, 9.0"), line
    assert arch.option_problem("--cc", "sm_90x", supported).endswith("; use 9.0")
    assert "cc 9.9 is not supported" in arch.option_problem("--cc", "9.9", supported)
    assert arch.option_problem("--cc", "sm_80a", supported).endswith("from cc 9.0; use 8.0")
    assert len(arch.option_problem("--cc", "\x1b[31m" + "9" * 5000)) < 200

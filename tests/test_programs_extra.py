"""Without cuda-core >= 1.2 (numba-cuda before 0.30.2 pins cuda-core < 1.0), ``import kcache``
works and ``kcache.ProgramCache`` / ``kcache.compile_program`` raise one line naming the
``programs`` extra (kcache/programs.py, docs/programs.md)."""
import subprocess
import sys
import textwrap
from importlib import metadata

import pytest

import kcache
from kcache.programs import bridge as programs

pytestmark = pytest.mark.compat

EXTRA = "pip install 'kcache-cuda[programs]'"

# cuda.core.utils made unimportable (None in sys.modules), as a cuda-core without it
_WITHOUT_UTILS = textwrap.dedent("""
    import json, sys
    sys.modules["cuda.core.utils"] = None
    import kcache
    from kcache import *  # every public name resolves
    out = {}
    for name, call in (("ProgramCache", lambda: kcache.ProgramCache()),
                       ("compile_program", lambda: kcache.compile_program(
                           "", "c++", None, "cubin"))):
        try:
            call()
        except kcache.KcacheError as exc:
            out[name] = [type(exc).__name__, str(exc), isinstance(exc, ImportError)]
    print(json.dumps(out))
""")


def test_without_cuda_core_utils_programs_raise_one_line_naming_the_extra(tmp_path):
    import json

    proc = subprocess.run([sys.executable, "-c", _WITHOUT_UTILS], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(out) == {"ProgramCache", "compile_program"}
    for name, (kind, message, import_error) in out.items():
        assert kind == "MissingExtra" and import_error
        assert message.startswith(f"kcache.{name} needs cuda-core >= 1.2")
        assert message.endswith(EXTRA) and "\n" not in message


@pytest.mark.parametrize("installed, says", [
    (None, "which is not installed"),
    ("0.7.0", "0.7.0 is installed (numba-cuda before 0.30.2 requires cuda-core < 1.0)"),
    ("1.1.1", "1.1.1 is installed"),
    ("1.2.2", "cuda-core 1.2.2 is installed but could not be imported (boom)"),
])
def test_the_line_says_what_is_installed(installed, says):
    line = programs.unavailable_line("kcache.ProgramCache", installed, ImportError("boom\nmore"))
    assert line.startswith("kcache.ProgramCache needs cuda-core >= 1.2")
    assert says in line and "\n" not in line and "kcache-cuda[programs]" in line


def _cuda_core_version():
    try:
        return tuple(int(n) for n in metadata.version("cuda-core").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return None


@pytest.mark.skipif((_cuda_core_version() or (0, 0)) >= (1, 2),
                    reason="cuda-core >= 1.2 is installed (tests/test_programs.py covers it)")
def test_with_the_installed_cuda_core_programs_name_the_extra():
    # the compatibility legs whose numba-cuda pins cuda-core < 1.0 (tests/compat/run.sh)
    with pytest.raises(kcache.MissingExtra) as caught:
        kcache.ProgramCache()
    assert str(caught.value).endswith(EXTRA)
    with pytest.raises(kcache.MissingExtra):
        kcache.compile_program("", "c++", None, "cubin")

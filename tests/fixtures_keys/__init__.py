"""Helpers for the kernel-key tests: write kernel modules to a directory, import them in this
process or fingerprint them in a fresh subprocess (no GPU needed: nothing is compiled)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = Path(__file__).with_name("child.py")
SIG = "(array(float32, 1d, C), array(float32, 1d, C))"


def write_modules(directory: Path, files: dict[str, str]) -> Path:
    """Write ``{module name: source}`` as ``<directory>/<name>.py`` (sources dedented)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        (directory / f"{name}.py").write_text(textwrap.dedent(source))
    return directory


def import_from(directory: Path, name: str):
    """Import ``<directory>/<name>.py`` as module ``name`` (replacing any module of that name),
    so two versions of one module can be compared in one process."""
    spec = importlib.util.spec_from_file_location(name, directory / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # other modules import it by name
    spec.loader.exec_module(module)
    return module


def key_in_subprocess(directory: Path, module: str, kernel: str, *, env: dict | None = None,
                      cwd: Path | None = None, **kwargs) -> dict:
    """Fingerprint ``module.kernel`` in a fresh interpreter; returns {"key", "components",
    "compiled"} where ``compiled`` counts the dispatcher's overloads afterwards (must be 0)."""
    job = {"path": str(directory), "module": module, "kernel": kernel, **kwargs}
    full_env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-B", str(CHILD), json.dumps(job)],
        capture_output=True, text=True, env=full_env, cwd=str(cwd or directory), timeout=120,
    )
    if proc.returncode != 0:
        raise AssertionError(f"child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])

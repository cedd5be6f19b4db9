"""How bench/run.py installs kcache for the timed processes: as a user does (issue 19).

``--install wheel`` (the default): a wheel built from this tree's sources
(``pip wheel --no-deps --no-build-isolation``), installed with ``pip install --target SITE``,
and bytecode compiled for everything the timed processes import: kcache in SITE, and the
packages around it (numpy, numba, numba-cuda, ...) where they are installed. Every timed
process then runs with ``PYTHONPATH=SITE`` (first), without ``PYTHONDONTWRITEBYTECODE``, from
a working directory outside the repository (a checkout's ./kcache would shadow the install).
Where a package's folder cannot be written (no ``__pycache__`` can be made next to its
sources), every module's bytecode goes to one writable ``PYTHONPYCACHEPREFIX`` instead,
compiled there before the timed runs: what a user's own install (bytecode next to the
sources) gives, read from another folder.

A ``--target`` folder is not a site directory, so its ``kcache-hook.pth`` is not run at
start: the GPU part's children import ``kcache._hook`` themselves, which is that line's work.

``--install as-is``: the interpreter's own kcache (an editable install, say), as before.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: What the wheel is built from (pyproject.toml's packages, setup.py's .pth file).
SOURCES = ("pyproject.toml", "setup.py", "README.md", "kcache-hook.pth", "kcache", "dispatcher",
           "cli")
#: What a timed process imports, for the bytecode compile (the folders of everything loaded).
PROBE = ("import json, os, sys\n"
         "import numpy, numba, numba.cuda, kcache, kcache.dispatcher, kcache._hook, kcache.cli\n"
         "for extra in ('msgpack', 'zstandard', 'rich', 'filelock', 'platformdirs'):\n"
         "    try:\n"
         "        __import__(extra)\n"
         "    except ImportError:\n"
         "        pass\n"
         "files = sorted({m.__file__ for m in list(sys.modules.values())\n"
         "                if isinstance(getattr(m, '__file__', None), str)})\n"
         "print(json.dumps({'files': files, 'path': sys.path, 'kcache': kcache.__file__}))\n")
#: Folders that timed processes never import from (compiling them would only cost time).
SKIP = r"[/\\](tests?|testing)[/\\]"

WHEEL = "wheel, bytecode compiled"


def run(cmd, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise SystemExit(f"bench: install: {' '.join(map(str, cmd))} exited {done.returncode}:\n"
                         f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done


def timed_env(site: Path | None, prefix: Path | None = None) -> dict:
    """The environment of a timed process: bytecode read and written, SITE first."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    if prefix is not None:
        env["PYTHONPYCACHEPREFIX"] = str(prefix)
    return env


def build_wheel(root: Path) -> Path:
    """A wheel of this tree, built from a copy of its sources (a stale build/ of the checkout
    cannot leak into it)."""
    src, dist = root / "src", root / "dist"
    src.mkdir(parents=True)
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--no-index", "-w", str(dist), str(src)], cwd=root)
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"bench: install: expected one wheel in {dist}, found {wheels}")
    return wheels[0]


def roots(files: list[str], path: list[str]) -> list[str]:
    """The top-level folders (or single-file modules) of the loaded ``files``: for each, the
    first component below the longest ``sys.path`` entry that holds it."""
    entries = sorted({os.path.abspath(p) for p in path if p}, key=len, reverse=True)
    out = set()
    for f in files:
        f = os.path.abspath(f)
        if not f.endswith(".py"):
            continue  # extension modules, frozen modules: no bytecode to compile
        base = next((e for e in entries if f.startswith(e + os.sep)), None)
        if base is None:
            continue
        out.add(os.path.join(base, os.path.relpath(f, base).split(os.sep)[0]))
    return sorted(out)


def writable(root: str) -> bool:
    folder = root if os.path.isdir(root) else os.path.dirname(root)
    cache = os.path.join(folder, "__pycache__")
    return os.access(cache if os.path.isdir(cache) else folder, os.W_OK)


def compile_roots(targets: list[str], env: dict) -> None:
    """Bytecode for ``targets`` (folders recursively, files), in parallel, where ``env``
    puts it (next to the sources, or under its PYTHONPYCACHEPREFIX)."""
    dirs = [t for t in targets if os.path.isdir(t)]
    files = [t for t in targets if not os.path.isdir(t)]
    cmd = [sys.executable, "-m", "compileall", "-q", "-j", "0", "-x", SKIP]
    if dirs:
        run(cmd + dirs, env=env)
    if files:
        run(cmd + files, env=env)


def wheel(root: Path) -> dict:
    """Build and install kcache's wheel under ``root`` and compile the bytecode of what the
    timed processes import; returns the install's description (the results' ``install_detail``)."""
    for old in ("src", "dist", "site", "pycache"):  # a --install-dir used before
        shutil.rmtree(root / old, ignore_errors=True)
    whl = build_wheel(root)
    site = root / "site"
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         "--target", str(site), str(whl)], cwd=root, env=timed_env(None))
    probe = json.loads(run([sys.executable, "-c", PROBE], cwd=root,
                           env=timed_env(site)).stdout.strip().splitlines()[-1])
    if not probe["kcache"].startswith(str(site) + os.sep):
        raise SystemExit(f"bench: install: the timed processes would import kcache from "
                         f"{probe['kcache']}, not from the wheel in {site}")
    targets = sorted(set(roots(probe["files"], probe["path"])) | {str(site)})
    prefix = None if all(writable(t) for t in targets) else root / "pycache"
    compile_roots(targets, timed_env(site, prefix))
    return {"install": WHEEL, "wheel": whl.name, "site": str(site),
            "pycache_prefix": str(prefix) if prefix else None, "compiled": len(targets),
            "kcache_file": probe["kcache"]}


def activate(detail: dict) -> None:
    """This process and every process it starts use the install of ``detail``."""
    site = detail.get("site")
    os.environ.update(timed_env(Path(site) if site else None,
                                Path(detail["pycache_prefix"]) if detail.get("pycache_prefix") else None))
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    if site:
        sys.path.insert(1, site)  # after bench/ (sys.path[0]), before the interpreter's own
    os.environ["BENCH_INSTALL"] = json.dumps(detail)


def as_is() -> dict:
    """The interpreter's own kcache, bytecode written where it can be."""
    import importlib.util
    spec = importlib.util.find_spec("kcache")
    return {"install": "as-is (the interpreter's own kcache, e.g. editable)",
            "kcache_file": spec.origin if spec else None, "site": None, "pycache_prefix": None}

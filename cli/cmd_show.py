"""``kcache show KEY-PREFIX``: every key component and header field of one entry.

``--ptx`` adds the PTX text, ``--sass`` the SASS disassembly of the cubin (nvdisasm, else
cuobjdump, when on PATH) and ``--extract DIR`` writes ``<DIR>/<kernel>.<arch>.cubin`` and
``.ptx`` (and ``.ltoir`` when the entry has LTO-IR).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from kcache.cli.common import (
    Problem, UsageError, ago, entry_record, human_seconds, human_size, iso, open_store,
    print_fields, print_json, resolve_prefix, want_json,
)

#: Artifact name -> file suffix written by --extract.
EXTRACT = {"cubin": ".cubin", "ptx": ".ptx", "ltoir": ".ltoir"}


def register(sub):
    """Add the ``show`` subparser to ``sub`` and return it."""
    p = sub.add_parser("show", help="show one entry's key components and header",
                       description="Show every key component and header field of one entry.")
    p.add_argument("prefix", metavar="KEY-PREFIX", help="a unique prefix of the entry's key")
    p.add_argument("--ptx", action="store_true", help="also print the PTX")
    p.add_argument("--sass", action="store_true",
                   help="also print the SASS of the cubin (needs nvdisasm or cuobjdump)")
    p.add_argument("--extract", metavar="DIR", type=Path,
                   help="write <DIR>/<kernel>.<arch>.cubin and .ptx")
    return p


def run(args) -> int:
    """Show the entry. JSON: the entry object plus ``components``, ``meta`` and, when asked,
    ``ptx``, ``sass`` and ``extracted`` (docs/cli.md)."""
    store = open_store(args)
    if args.extract is not None and args.extract.exists() and not args.extract.is_dir():
        raise UsageError(f"--extract {args.extract}: not a directory")
    tool = find_disassembler() if args.sass else None
    if args.sass and tool is None:
        raise Problem("cannot show SASS: neither nvdisasm nor cuobjdump is on PATH "
                      "(install the CUDA toolkit, or use --extract and disassemble elsewhere)")
    info = resolve_prefix(store, args.prefix)
    doc = entry_record(info)
    doc["components"] = info.components or {}
    doc["meta"] = info.meta or {}
    if args.ptx or args.sass or args.extract is not None:
        try:
            artifacts = store.load(info.key).artifacts  # full check: CorruptEntry -> exit 1
        except KeyError:
            raise Problem(f"entry {info.key[:12]} was removed meanwhile") from None
        if args.ptx:
            doc["ptx"] = _text(artifacts, "ptx")
        if args.sass:
            doc["sass"] = disassemble(tool, _artifact(artifacts, "cubin"))
        if args.extract is not None:
            doc["extracted"] = [str(p) for p in extract(info, artifacts, args.extract)]
    if want_json(args):
        print_json(doc)
        return 0
    print_fields(_fields(info), title=f"entry {info.key}")
    for label in ("ptx", "sass"):
        if label in doc:
            sys.stdout.write(f"\n# {label.upper()}\n")
            sys.stdout.write(doc[label].rstrip("\n") + "\n")
    for path in doc.get("extracted", ()):
        sys.stderr.write(f"kcache: wrote {path}\n")
    return 0


def _fields(info) -> list:
    rows = [
        ("key", info.key, info.key),
        ("kernel", info.kernel, info.kernel),
        ("signature", info.signature, info.signature),
        ("arch", info.arch, info.arch),
        ("file size", human_size(info.file_size), info.file_size),
    ]
    rows += [(f"size.{name}", human_size(n), n) for name, n in (info.sizes or {}).items()]
    rows += [
        ("hits", info.hits, info.hits),
        ("created", f"{iso(info.created)} ({ago(info.created)})", iso(info.created)),
        ("last used", f"{iso(info.last_used)} ({ago(info.last_used)})", iso(info.last_used)),
        ("compile time", human_seconds(info.compile_seconds), info.compile_seconds),
        ("root", info.root, info.root),
        ("read-only layer", "yes" if info.readonly else "no", bool(info.readonly)),
        ("path", info.path, info.path),
    ]
    rows += [(f"components.{k}", _shown(v), v) for k, v in flatten(info.components or {})]
    rows += [(f"meta.{k}", _shown(v), v) for k, v in flatten(info.meta or {})]
    return rows


def _shown(value):
    return "None" if value is None else value


def flatten(mapping: dict, prefix: str = ""):
    """Yield ``(dotted.name, value)`` for the leaves of nested dicts (lists stay whole)."""
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from flatten(value, name + ".")
        else:
            yield name, value


def _artifact(artifacts: dict, name: str) -> bytes:
    if name not in artifacts:
        have = ", ".join(sorted(artifacts)) or "none"
        raise Problem(f"this entry has no {name} (artifacts: {have})")
    return bytes(artifacts[name])


def _text(artifacts: dict, name: str) -> str:
    return _artifact(artifacts, name).decode("utf-8", errors="replace")


def find_disassembler() -> list[str] | None:
    """The SASS command to run on a cubin file: ``nvdisasm`` else ``cuobjdump -sass``."""
    if shutil.which("nvdisasm"):
        return ["nvdisasm"]
    if shutil.which("cuobjdump"):
        return ["cuobjdump", "-sass"]
    return None


def disassemble(tool: list[str], cubin: bytes) -> str:
    """Run ``tool`` on ``cubin`` (written to a temporary file); return its stdout.

    Raises :class:`Problem` when the tool fails or takes longer than 120 s.
    """
    with tempfile.TemporaryDirectory(prefix="kcache-sass-") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        try:
            done = subprocess.run(tool + [path], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise Problem(f"{tool[0]} failed: {exc}") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise Problem(f"{tool[0]} failed on the cubin: {why}")
    return done.stdout


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def extract(info, artifacts: dict, directory: Path) -> list[Path]:
    """Write the entry's cubin/PTX/LTO-IR as ``<directory>/<kernel>.<arch><suffix>``.

    The kernel name (``module:qualname``) is made file-safe (``:`` and ``<locals>`` become
    ``_``). Returns the paths written; raises :class:`Problem` when the entry has none.
    """
    stem = _UNSAFE.sub("_", info.kernel or info.key[:12]).strip("_") or info.key[:12]
    arch = _UNSAFE.sub("_", info.arch or "unknown")
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, suffix in EXTRACT.items():
        if name in artifacts:
            path = directory / f"{stem}.{arch}{suffix}"
            path.write_bytes(bytes(artifacts[name]))
            written.append(path)
    if not written:
        raise Problem(f"entry {info.key[:12]} has no cubin, PTX or LTO-IR to extract")
    return written

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
    SHORT_KEY, Problem, UsageError, ago, entry_record, escape_control, human_seconds,
    human_size, is_terminal, nonblank_arg, not_regular, open_store, plain_seconds, print_fields, print_json, problem_of,
    problem_text, resolve_prefix, want_json,
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
    p.add_argument("--extract", metavar="DIR", type=nonblank_arg("--extract"),
                   help="write <DIR>/<kernel>.<arch>.cubin and .ptx (and .ltoir when the "
                        "entry has LTO-IR)")
    return p


def run(args) -> int:
    """Show the entry. JSON: the entry object plus ``components``, ``meta`` and, when asked,
    ``ptx``, ``sass`` and ``extracted`` (docs/cli.md).

    The whole entry is read and checked (``Store.load``: lengths, checksum) every time. A
    corrupt entry, or one whose header cannot be read, is shown as far as it can be, with
    its ``problem``, and the exit status is 1 (with ``--ptx``/``--sass``/``--extract`` only
    the error is printed: there is nothing sound to print or write)."""
    from kcache.errors import CorruptEntry
    store = open_store(args)
    extract_to = Path(os.path.abspath(args.extract)) if args.extract is not None else None
    if extract_to is not None and extract_to.exists() and not extract_to.is_dir():
        raise UsageError(f"--extract {extract_to}: not a directory")
    info = resolve_prefix(store, args.prefix)  # a bad prefix is a usage error (2) first
    tool = find_disassembler() if args.sass else None
    if args.sass and tool is None:
        raise Problem("cannot show SASS: neither nvdisasm nor cuobjdump is on PATH "
                      "(install the CUDA toolkit, or use --extract and disassemble elsewhere)")
    problem = problem_of(info)
    artifacts = None
    if problem is None:
        try:
            artifacts = store.load(info.key).artifacts  # full check of lengths and checksum
        except KeyError:
            raise Problem(f"entry {info.key[:SHORT_KEY]} was removed meanwhile") from None
        except CorruptEntry as exc:
            problem = _reason(exc, info.path)
    wants_payload = args.ptx or args.sass or extract_to is not None
    if problem is not None:
        if wants_payload:
            raise Problem(f"entry {info.key[:SHORT_KEY]} is corrupt ({problem}); nothing "
                          "printed or written; run 'kcache verify --fix' to quarantine it")
        _print(args, info, problem, {})
        rm_hint = "" if not_regular(problem) else f", or 'kcache rm {info.key[:SHORT_KEY]}'"
        raise Problem(f"entry {info.key[:SHORT_KEY]} is corrupt ({problem}); run 'kcache "
                      f"verify --fix' to quarantine it{rm_hint}")
    extra = {}
    if args.ptx:
        extra["ptx"] = _text(artifacts, "ptx")
    if args.sass:
        extra["sass"] = disassemble(tool, _artifact(artifacts, "cubin"))
    if extract_to is not None:
        extra["extracted"] = [str(p) for p in extract(info, artifacts, extract_to)]
    _print(args, info, None, extra)
    return 0


def _reason(exc: Exception, path: Path) -> str:
    """The message of a CorruptEntry from ``Store.load`` without the leading path, in the
    CLI's wording (``problem_text``)."""
    text = " ".join(str(exc).split())
    prefix = f"{path}: "
    return problem_text(text[len(prefix):] if text.startswith(prefix) else text, path)


def _print(args, info, problem: str | None, extra: dict) -> None:
    doc = entry_record(info)
    doc["problem"] = problem
    doc["components"] = info.components or {}
    doc["meta"] = info.meta or {}
    doc.update(extra)
    if want_json(args):
        print_json(doc)
        return
    print_fields(_fields(doc), title=f"entry {info.key}")
    for label in ("ptx", "sass"):
        if label in doc:
            # On a terminal an escape sequence in the text must not reach it (piped: as is).
            text = escape_control(doc[label], keep="\n\t") if is_terminal() else doc[label]
            sys.stdout.write(f"\n# {label.upper()}\n")
            sys.stdout.write(text.rstrip("\n") + "\n")
    for path in doc.get("extracted", ()):
        sys.stderr.write(f"kcache: wrote {path}\n")


#: Fields of the entry object shown by plain ``show``, in this order (the JSON names).
FIELDS = ("key", "kernel", "signature", "arch", "file_size", "sizes", "hits", "created",
          "last_used", "compile_seconds", "root", "readonly", "path", "problem")


def _fields(doc: dict) -> list:
    """``(name, human, plain)`` rows: the entry object's fields under their JSON names,
    ``sizes.<artifact>``, then ``components.*`` and ``meta.*`` flattened."""
    rows = []
    for name in FIELDS:
        value = doc.get(name)
        if name == "problem" and value is None:
            continue
        if name == "sizes":
            rows += [(f"sizes.{k}", human_size(n), n) for k, n in (value or {}).items()]
        elif name == "file_size":
            rows.append((name, human_size(value), value))
        elif name == "compile_seconds":
            rows.append((name, human_seconds(value), plain_seconds(value)))
        elif name in ("created", "last_used"):
            rows.append((name, f"{value} ({ago(_ts(value))})" if value else None, value))
        elif name == "problem":
            rows.append((name, f"CORRUPT: {value}", value))
        else:
            rows.append((name, value, value))
    rows += [(f"components.{k}", v, v) for k, v in flatten(doc["components"])]
    rows += [(f"meta.{k}", v, v) for k, v in flatten(doc["meta"])]
    return rows


def _ts(text: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


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

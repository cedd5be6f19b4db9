"""``kcache show KEY-PREFIX``: every key component and header field of one entry.

``--ptx`` adds the PTX text, ``--sass`` the SASS disassembly of the cubin (nvdisasm, else
cuobjdump, when on PATH) and ``--extract DIR`` writes ``<DIR>/<kernel>.<arch>.cubin`` and
``.ptx`` (and ``.ltoir`` when the entry has LTO-IR); ``--artifact NAME -o FILE`` writes one
artifact's bytes unchanged (``-o -``: to stdout), e.g. a cached cubin for ``cuobjdump``.
"""
from __future__ import annotations

import errno
import os
import re
import stat
import sys
from pathlib import Path

from kcache.cli.args import nonblank_arg, want_json, want_wide
from kcache.cli.cache import open_store
from kcache.cli.entries import EntryView, entry_record, resolve_prefix
from kcache.cli.errors import Problem, UsageError
from kcache.cli.fmt import ago, human_seconds, human_size, plain_seconds
from kcache.cli.output import print_fields, print_json
from kcache.cli.problems import LAYER_HINT, not_regular, problem_text
from kcache.cli.text import escape
from kcache.cli.values import flatten, number

#: Most ``components.*`` and ``meta.*`` fields printed without ``--json`` (each map); a
#: header with more (hostile, or a bug) ends with a ``…`` line rather than flooding.
MAX_FIELDS = 1000

#: Characters of PTX or SASS text escaped and written at once.
_TEXT_PIECE = 1 << 20

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
    p.add_argument("--artifact", metavar="NAME", type=nonblank_arg("--artifact"),
                   help="write this artifact's bytes unchanged (cubin, ptx, ltoir, ...) to "
                        "-o FILE instead of showing the entry")
    p.add_argument("-o", "--output", metavar="FILE", type=nonblank_arg("--output"),
                   help="where --artifact writes ('-' for stdout)")
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
    if (args.artifact is None) != (args.output is None):
        raise UsageError("--artifact NAME and -o FILE go together (e.g. --artifact cubin "
                         "-o kernel.cubin)")
    view = resolve_prefix(store, args.prefix)  # a bad prefix is a usage error (2) first
    tool = find_disassembler() if args.sass else None
    if args.sass and tool is None:
        raise Problem("cannot show SASS: neither nvdisasm nor cuobjdump is on PATH "
                      "(install the CUDA toolkit, or use --extract and disassemble elsewhere)")
    problem = view.problem
    artifacts = None
    if problem is None:
        try:
            # full check of lengths and checksum, of the copy shown (not another root's)
            artifacts = store.load(view.key, view.info.root).artifacts
        except KeyError:
            raise Problem(f"entry {view.short_key} was removed meanwhile") from None
        except CorruptEntry as exc:
            problem = _reason(exc, view.info.path)
    wants_payload = args.ptx or args.sass or extract_to is not None or args.artifact is not None
    if problem is not None and view.readonly:
        if not wants_payload:
            _print(args, view, problem, {})
        raise Problem(f"entry {view.short_key} of the read-only layer {view.info.root} is "
                      f"corrupt ({problem}); {LAYER_HINT}")
    if problem is not None:
        if wants_payload:
            raise Problem(f"entry {view.short_key} is corrupt ({problem}); nothing "
                          "printed or written; run 'kcache verify --fix' to quarantine it")
        _print(args, view, problem, {})
        rm_hint = "" if not_regular(problem) else f", or 'kcache rm {view.short_key}'"
        raise Problem(f"entry {view.short_key} is corrupt ({problem}); run 'kcache "
                      f"verify --fix' to quarantine it{rm_hint}")
    if args.artifact is not None:
        return write_artifact(args, view, artifacts)
    extra = {}
    if args.ptx:
        extra["ptx"] = _text(artifacts, "ptx")
    if args.sass:
        extra["sass"] = disassemble(tool, _artifact(artifacts, "cubin"))
    if extract_to is not None:
        extra["extracted"] = [str(p) for p in extract(view, artifacts, extract_to)]
    _print(args, view, None, extra)
    return 0


def write_artifact(args, view: EntryView, artifacts: dict) -> int:
    """``--artifact NAME -o FILE``: the artifact's exact bytes to FILE (``-``: stdout, never a
    terminal). JSON (on stdout when FILE is not ``-``): ``{"key", "artifact", "output",
    "bytes"}``."""
    data = _artifact(artifacts, args.artifact)
    if args.output == "-":
        if sys.stdout.isatty():
            raise UsageError("-o -: stdout is a terminal; write the artifact to a file "
                             "instead (-o FILE)")
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return 0
    path = Path(os.path.abspath(args.output))
    if path.is_dir():
        raise UsageError(f"-o {path}: is a directory (give a file name)")
    try:
        write_into(path, data)
    except OSError as exc:
        raise Problem(f"cannot write {path}: {_why(exc, path)}") from None
    if want_json(args):
        print_json({"key": view.key, "artifact": args.artifact, "output": str(path),
                    "bytes": len(data)})
    else:
        sys.stderr.write(f"kcache: wrote {escape(str(path))} ({len(data)} bytes)\n")
    return 0


_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def write_into(path: Path, data: bytes) -> None:
    """``-o FILE``: the user's own path, written as ``cp`` writes it (symlinks followed; a
    regular file created or truncated; a device, or a FIFO a process reads, written into),
    but never waiting for a FIFO's reader: opened ``O_NONBLOCK`` (none: ENXIO). OSError."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | _CLOEXEC, 0o666)
    try:
        os.set_blocking(fd, True)  # a reader is there: it takes the bytes at its own pace
        _write_all(fd, data)
    finally:
        os.close(fd)


def write_new(path: Path, data: bytes) -> None:
    """``--extract``: a file whose name kcache made from the entry, so only ever a regular
    file: a symlink there is not followed (ELOOP), a FIFO, device or socket not written
    (ENXIO, or OSError naming what it is). OSError."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, 0o666)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EEXIST, "exists and is not a regular file: left as it is",
                          str(path))
        os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _why(exc: OSError, path: Path) -> str:
    """An output's OSError in words (ENXIO from ``O_NONBLOCK``: a FIFO no process reads, a
    socket, a device that is not there)."""
    if exc.errno == errno.ENXIO:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = 0
        if stat.S_ISSOCK(mode):
            return "a socket, not a file: nothing written"
        if stat.S_ISFIFO(mode):
            return "a FIFO no process is reading: nothing written"
        return "a device that is not there: nothing written"
    if exc.errno == errno.ELOOP:
        return "a symlink, not followed for a name kcache made: nothing written"
    return exc.strerror or str(exc)


def _reason(exc: Exception, path: Path) -> str:
    """The message of a CorruptEntry from ``Store.load`` without the leading path, in the
    CLI's wording (``problem_text``)."""
    text = " ".join(str(exc).split())
    prefix = f"{path}: "
    return problem_text(text[len(prefix):] if text.startswith(prefix) else text, path)


def _print(args, view: EntryView, problem: str | None, extra: dict) -> None:
    doc = entry_record(view)
    doc["problem"] = problem
    doc["components"] = view.info.components or {}
    doc["meta"] = view.info.meta or {}
    doc.update(extra)
    if want_json(args):
        print_json(doc)
        return
    print_fields(_fields(doc, view), title=f"entry {view.short_key}", wide=want_wide(args),
                 whole=is_whole)
    for label in ("ptx", "sass"):
        if label in doc:
            sys.stdout.write(f"\n# {label.upper()}\n")
            # Text from a cache file (or a tool reading it): escape sequences stay inert;
            # lines and tabs are kept. --extract writes the exact bytes. Escaped and written
            # a piece at a time: a 256 MiB PTX of ESC is 1 GiB once escaped.
            text = doc[label].rstrip("\n")
            for at in range(0, len(text), _TEXT_PIECE):
                sys.stdout.write(escape(text[at:at + _TEXT_PIECE], keep="\n\t"))
            sys.stdout.write("\n")
    for path in doc.get("extracted", ()):
        sys.stderr.write(f"kcache: wrote {escape(path)}\n")


#: Fields of the entry object shown by plain ``show``, in this order (the JSON names).
FIELDS = ("key", "kind", "kernel", "signature", "short_signature", "arch", "frontend",
          "entry_points", "file_size", "sizes", "hits", "created", "last_used",
          "compile_seconds", "root", "readonly", "layer", "layer_kind", "path", "problem")
#: Fields left out when they hold nothing: a kernel's entry_points, a root entry's layer.
SPARSE = frozenset(("problem", "entry_points", "layer", "layer_kind"))
#: Fields (by their last dotted name) whose value a terminal shows whole, wrapped under the
#: name when it does not fit beside it: what is read or copied exactly (a path, a key, a
#: signature for compile_for or warm, a kernel name for --kernel, the layer serving it).
WHOLE = frozenset(("key", "kernel", "signature", "short_signature", "sigspec", "entry_name",
                   "root", "path", "problem", "layer"))


def is_whole(name: str) -> bool:
    """Whether field ``name`` is one of :data:`WHOLE` (``meta.signature`` too)."""
    return name.rpartition(".")[2] in WHOLE


def _fields(doc: dict, view: EntryView) -> list:
    """``(name, human, plain)`` rows: the entry object's fields under their JSON names,
    ``sizes.<artifact>``, then ``components.*`` and ``meta.*`` flattened (at most
    :data:`MAX_FIELDS` each). Seconds are rounded in both forms (JSON keeps them exact)."""
    rows = []
    for name in FIELDS:
        value = doc.get(name)
        if name in SPARSE and value in (None, []):
            continue
        if name == "entry_points":
            value = ", ".join(value)  # lists are joined with ", " (docs/cli.md)
        if name == "sizes":
            rows += [(f"sizes.{k}", human_size(n), n) for k, n in value.items()]
        elif name == "file_size":
            rows.append((name, human_size(value), value))
        elif name == "compile_seconds":
            rows.append((name, human_seconds(value), plain_seconds(value)))
        elif name in ("created", "last_used"):
            when = getattr(view, name)
            rows.append((name, f"{value} ({ago(when)})" if value else None, value))
        elif name == "problem":
            rows.append((name, f"CORRUPT: {value}", value))
        else:
            rows.append((name, value, value))
    for group in ("components", "meta"):
        for key, value in flatten(doc[group], MAX_FIELDS):
            if key == "…":
                rows.append((f"{group}.…", f"(more fields: see 'kcache show {view.short_key} "
                             "--json')", None))
            elif _is_seconds(key) and number(value) is not None:
                rows.append((f"{group}.{key}", human_seconds(value), plain_seconds(value)))
            else:
                rows.append((f"{group}.{key}", value, value))
    return rows


def _is_seconds(name: str) -> bool:
    """A field holding seconds, by its name (``compile_seconds``, ``seconds``)."""
    last = name.rpartition(".")[2]
    return last == "seconds" or last.endswith("_seconds")


def _artifact(artifacts: dict, name: str) -> bytes:
    if name not in artifacts:
        have = ", ".join(sorted(artifacts)) or "none"
        raise Problem(f"this entry has no {name} (artifacts: {have})")
    return bytes(artifacts[name])


def _text(artifacts: dict, name: str) -> str:
    return _artifact(artifacts, name).decode("utf-8", errors="replace")


def find_disassembler() -> list[str] | None:
    """The SASS command to run on a cubin file: ``nvdisasm`` else ``cuobjdump -sass``."""
    import shutil
    if shutil.which("nvdisasm"):
        return ["nvdisasm"]
    if shutil.which("cuobjdump"):
        return ["cuobjdump", "-sass"]
    return None


def disassemble(tool: list[str], cubin: bytes) -> str:
    """Run ``tool`` on ``cubin`` (written to a temporary file); return its stdout.

    Raises :class:`Problem` when the tool fails or takes longer than 120 s.
    """
    import subprocess
    import tempfile
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


#: Longest file name stem --extract makes from a kernel name (file systems allow 255 bytes).
MAX_STEM = 120


def extract(view: EntryView, artifacts: dict, directory: Path) -> list[Path]:
    """Write the entry's cubin/PTX/LTO-IR as ``<directory>/<kernel>.<arch><suffix>``.

    The kernel name (``module:qualname``) is made file-safe (``:`` and ``<locals>`` become
    ``_``, at most :data:`MAX_STEM` characters). Returns the paths written; raises
    :class:`Problem` when the entry has none.
    """
    stem = _UNSAFE.sub("_", view.kernel or view.short_key).strip("_")[:MAX_STEM] or view.short_key
    arch = _UNSAFE.sub("_", view.arch or "unknown")[:MAX_STEM]
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, suffix in EXTRACT.items():
        if name in artifacts:
            path = directory / f"{stem}.{arch}{suffix}"
            try:
                write_new(path, bytes(artifacts[name]))
            except OSError as exc:
                raise Problem(f"cannot write {path}: {_why(exc, path)}") from None
            written.append(path)
    if not written:
        raise Problem(f"entry {view.short_key} has no cubin, PTX or LTO-IR to extract")
    return written

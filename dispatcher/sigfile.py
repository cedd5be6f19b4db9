"""Signatures files: which kernel signatures ``kcache warm`` compiles (docs/warm.md).

Plain UTF-8 text, one kernel and one signature per line::

    # kernel (module:qualname)          signature (as numba.cuda.jit takes it)
    examples.kernels:scaled_add         void(float32[::1], float32[::1], float32[::1])
    examples.kernels:clamp_square       void(float64[::1])   # a trailing comment

Blank lines and ``#`` comments are ignored; the kernel is the first word, the signature the
rest of the line (a sigspec, dispatcher/sigspec.py). ``KCACHE_RECORD`` writes the same format.
A bad line is one :class:`SignatureFileError` naming ``FILE:LINE`` and what is wrong.
"""
from __future__ import annotations

import dataclasses
import io
import os
import stat
import tokenize

from kcache.entry.format import MAX_NAME

from .sigspec import parse_signature

__all__ = ["SigLine", "SignatureFileError", "read_signatures", "parse_line", "format_line",
           "split_kernel", "MAX_FILE_BYTES", "HEADER"]

#: Largest signatures file read (bytes): far above any real one, small enough to read whole.
MAX_FILE_BYTES = 16 << 20
#: First lines of a file kcache creates.
HEADER = ("# kcache signatures file (docs/warm.md): kernel (module:qualname), then its "
          "signature.\n")
_EXAMPLE = "e.g. 'examples.kernels:scaled_add void(float32[::1], float32[::1], float32[::1])'"


class SignatureFileError(ValueError):
    """A signatures file that cannot be used; ``str()`` is one line, ``FILE:LINE: what``."""


@dataclasses.dataclass(frozen=True)
class SigLine:
    """One line of a signatures file: ``kernel`` ("module:qualname"), ``signature`` (the
    text as written, whitespace-trimmed), ``argtypes`` (tuple of numba types), ``path``,
    ``line`` (1-based)."""
    kernel: str
    signature: str
    argtypes: tuple
    path: str
    line: int

    @property
    def origin(self) -> str:
        return f"{self.path}:{self.line}"


def split_kernel(name: str, entry: bool = False) -> tuple[str, str]:
    """"pkg.mod:Outer.kernel" -> ("pkg.mod", "Outer.kernel"). ValueError unless both parts
    are dotted Python identifiers, MAX_NAME characters at most (an entry's bound: a 10 MB
    name of a signatures file was tried as an import and printed whole in warm's report).
    ``entry``: an entry's name, whose qualname may pass through a function
    ("mod:make_adder.<locals>.adder": a factory's closure, which replay finds by the module
    names holding it)."""
    module, sep, qualname = name.partition(":")
    parts = qualname.split(".")
    ok = sep and len(name) <= MAX_NAME and all(
        part.isidentifier() for part in module.split(".")) and all(
        part.isidentifier() or (entry and part == "<locals>" and 0 < i < len(parts) - 1)
        for i, part in enumerate(parts))
    if not ok:
        shown = repr(name) if len(name) <= 80 else f"{name[:60]!r}... ({len(name)} characters)"
        raise ValueError(f"{shown} is not a kernel name (module:qualname of at most {MAX_NAME} "
                         "characters, e.g. 'examples.kernels:scaled_add')")
    return module, qualname


def _strip_comment(text: str) -> str:
    """``text`` without a trailing ``#`` comment; a ``#`` inside a quoted record field name
    is kept (Python's tokenizer tells them apart)."""
    if "#" not in text:
        return text
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                return text[: tok.start[1]]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass  # unbalanced brackets etc.: the signature check reports the problem
    return text


def parse_line(text: str) -> tuple[str, str] | None:
    """One line -> ``(kernel, signature)`` text, or None for a blank or comment line.
    ValueError (without the file:line prefix) for a line that is not ``KERNEL SIGNATURE``
    or whose kernel name is malformed; the signature itself is checked by the caller."""
    stripped = text.strip()
    if not stripped or stripped.startswith("#"):
        return None
    parts = stripped.split(None, 1)
    if len(parts) < 2:
        raise ValueError(f"expected a kernel and a signature, {_EXAMPLE}")
    kernel, rest = parts
    split_kernel(kernel)
    signature = _strip_comment(rest).strip()
    if not signature:
        raise ValueError(f"no signature after {kernel[:80]} ({_EXAMPLE})")
    return kernel, signature


def format_line(kernel: str, signature: str) -> str:
    """The line (with its newline) for ``kernel`` and ``signature``."""
    return f"{kernel}  {signature}\n"


def read_signatures(frontend, path) -> list[SigLine]:
    """Every line of the signatures file ``path``, in order, duplicates dropped; signatures
    read as ``frontend``'s types (a ``frontends.base.Frontend``).

    Raises :class:`SignatureFileError` (one line: ``FILE:LINE: what``, accepted form) for a
    file that is missing, not a regular file, larger than :data:`MAX_FILE_BYTES`, not UTF-8,
    or has a line that is not a kernel name and a signature numba-cuda accepts."""
    shown = os.fspath(path)
    data = _read_bounded(shown)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SignatureFileError(f"{shown}:{line}: not UTF-8 text") from None
    out, seen = [], set()
    for number, raw in enumerate(text.splitlines(), 1):
        try:
            parsed = parse_line(raw)
            if parsed is None:
                continue
            kernel, signature = parsed
            argtypes = parse_signature(frontend, signature)
        except ValueError as exc:
            raise SignatureFileError(f"{shown}:{number}: {' '.join(str(exc).split())}") from None
        if (kernel, argtypes) not in seen:
            seen.add((kernel, argtypes))
            out.append(SigLine(kernel, signature, argtypes, shown, number))
    return out


def _read_bounded(path: str) -> bytes:
    """The bytes of regular file ``path`` (at most MAX_FILE_BYTES); SignatureFileError else.
    O_NONBLOCK so that a FIFO given by mistake does not hang the command."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise SignatureFileError(f"{path}: cannot read the signatures file "
                                 f"({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SignatureFileError(f"{path}: not a regular file (a signatures file is "
                                     "plain text)")
        if st.st_size > MAX_FILE_BYTES:
            raise SignatureFileError(f"{path}: {st.st_size} bytes, larger than the "
                                     f"{MAX_FILE_BYTES} bytes a signatures file may have")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise SignatureFileError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    return data

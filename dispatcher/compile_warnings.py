"""What the compiler said: warnings a compile emitted, kept in the entry and said again on a hit.

As ccache replays a compiler's diagnostics, a kernel served from an entry emits the warnings
its compile emitted (numba-cuda's ``NumbaWarning`` for an undefined variable, print()'s
too-many-arguments warning, a linker's log, ...), each time the entry is loaded into a process.
An entry holds them as ``meta["warnings"]``: ``[[category, message, filename, lineno], ...]``,
category as "module:qualname". On load a category is resolved as exception classes are
(``kernel_entry.resolve_class``): from builtins or numba's error modules already loaded,
nothing imported, and only a ``Warning`` subclass; anything else is said as numba-cuda's
``NumbaWarning``. Entries written before warnings were kept have none to say.
"""
from __future__ import annotations

import builtins
import contextlib
import sys
import threading
import warnings

from kcache.text import cut

#: Bounds on what an entry may make a process say (an entry is input like any other).
MAX_WARNINGS = 64
MAX_TEXT = 4096
MAX_LINE = (1 << 31) - 1  # a larger line number is no file's (the warnings module's limit is a C long)
#: Modules a warning category may come from, besides builtins (numba-cuda's and numba's).
_ERROR_MODULES = ("numba.cuda.core.errors", "numba.core.errors", "numba.cuda.cudadrv.error",
                  "numba.cuda.errors")
_FALLBACK = ("numba.cuda.core.errors", "NumbaWarning")


@contextlib.contextmanager
def captured():
    """Record the warnings this thread raises in the block (every one, whatever the filters)
    into the yielded list as ``warnings.WarningMessage``; when the block ends every warning
    held back meanwhile (other threads' too: the filters are the process's) is emitted again
    through the caller's filters, in order, so the compile itself warns exactly as before.
    Another thread's warning is not the compile's: it never reaches the list (an entry would
    say it again in every process it is served to), unless numba-cuda's own warning fixer
    records it during a compile pass and says it again from the compiling thread. A block that
    raises says them too, before its exception propagates."""
    me = threading.get_ident()
    seen, held = [], []
    try:
        with warnings.catch_warnings(record=True) as held:
            warnings.simplefilter("always")
            record = getattr(warnings, "_showwarnmsg_impl", None)  # held.append, set just now
            if record is not None:  # (restored by catch_warnings, as it sets it)
                def show(msg, record=record):
                    record(msg)
                    if threading.get_ident() == me:
                        seen.append(msg)
                warnings._showwarnmsg_impl = show
            yield seen if record is not None else held
    finally:
        # Also when the compile raises: numba-cuda's warnings of a failed compile (said before
        # its error) are shown without kcache, so they must be here too.
        for w in held:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


#: Stands in an entry's text for the kernel's Python function: numba-cuda names it by its
#: repr ("<function foo at 0x7f...>"), whose address is the compiling process's.
SUBJECT = "{kcache:py_func}"


def encode(seen, subject: str | None = None) -> list:
    """The entry form of recorded warnings (at most MAX_WARNINGS, texts cut to MAX_TEXT);
    ``subject``: the repr of the kernel's function, kept as :data:`SUBJECT`."""
    out = []
    for w in list(seen)[:MAX_WARNINGS]:
        cat = w.category
        text = str(w.message)
        if subject:
            text = text.replace(subject, SUBJECT)
        out.append([f"{cat.__module__}:{cat.__qualname__}", text[:MAX_TEXT],
                    str(w.filename)[:MAX_TEXT], int(w.lineno or 0)])
    return out


def replay(recorded, subject: str | None = None) -> int:
    """Emit an entry's warnings again (``warnings.warn_explicit``, so the user's filters apply),
    :data:`SUBJECT` replaced by ``subject`` (the repr of this process's kernel function).
    A malformed record is skipped: an entry never makes the call fail. Returns how many."""
    if not isinstance(recorded, list):
        return 0
    said = 0
    for item in recorded[:MAX_WARNINGS]:
        if not (isinstance(item, list) and len(item) == 4):
            continue
        name, text, filename, lineno = item
        if not (isinstance(text, str) and isinstance(filename, str) and isinstance(lineno, int)
                and not isinstance(lineno, bool) and len(text) <= MAX_TEXT
                and len(filename) <= MAX_TEXT and lineno <= MAX_LINE):
            continue
        category = resolve_category(name)
        # An entry may come from a bundle or another machine: an escape sequence in its text
        # must not reach the terminal raw (as everything the CLI shows from a cache), and
        # escaped it stays within the bound it was written under.
        text, filename = cut(text, MAX_TEXT, keep="\n\t"), cut(filename, MAX_TEXT)
        if subject:
            text = text.replace(SUBJECT, subject)
        # The instance is made without the category's __init__ (NumbaWarning's would add its
        # highlighting a second time): its text is the recorded one, as the compile said it.
        message = category.__new__(category)
        Warning.__init__(message, text)
        warnings.warn_explicit(message, category, filename, max(lineno, 0))
        said += 1
    return said


def resolve_category(name) -> type:
    """The Warning subclass "module:qualname" names, from builtins or numba's error modules
    already in ``sys.modules`` (nothing imported, no module ``__getattr__`` run); numba-cuda's
    NumbaWarning (or UserWarning, before numba-cuda is loaded) for anything else."""
    found = None
    if isinstance(name, str) and len(name) <= 512 and ":" in name:
        module_name, _, qualname = name.partition(":")
        found = _lookup(module_name, qualname)
    if isinstance(found, type) and issubclass(found, Warning):
        return found
    fallback = _lookup(*_FALLBACK)
    return fallback if isinstance(fallback, type) and issubclass(fallback, Warning) \
        else UserWarning


def _lookup(module_name: str, qualname: str):
    if module_name == "builtins":
        module = builtins
    elif module_name in _ERROR_MODULES:
        module = sys.modules.get(module_name)
    else:
        return None
    obj = module
    for part in qualname.split("."):
        try:
            obj = vars(obj).get(part)
        except TypeError:
            return None
        if obj is None:
            return None
    return obj

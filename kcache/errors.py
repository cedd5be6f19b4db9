"""Exceptions raised by the kcache store (re-exported from ``kcache``).

Cache *defects* (a broken entry, a read-only or full disk) are never raised into a user's
program: they become misses, counted and warned once. These exceptions are for callers that
ask explicitly (``Store.load``, ``Store.lock``, settings resolution).
"""


class KcacheError(Exception):
    """Base class of every kcache error."""


class MissingExtra(KcacheError, ImportError):
    """An optional dependency a feature needs is not installed, or too old to use; the message
    is one line that names the extra bringing it (``pip install 'kcache-cuda[programs]'``)."""


class ConfigError(KcacheError, ValueError):
    """A setting has a bad value; the message names the variable/setting and what is accepted."""


class LockTimeout(KcacheError, TimeoutError):
    """A per-key lock was not acquired in time; the message names the lock file and
    ``KCACHE_LOCK_TIMEOUT``."""


class CacheMissError(KcacheError, RuntimeError):
    """A kernel call would compile while compiling is forbidden (``KCACHE_REQUIRE_HIT=1``,
    ``kcache.install(require_hit=True)``). ``kernel`` ("module:qualname"), ``signature``,
    ``cc`` ((major, minor)) and ``reason`` (why there is no usable entry: the nearest entry's
    differences, as KCACHE_EXPLAIN logs them, or why the kernel is not cached) say which."""

    def __init__(self, message: str, *, kernel: str = "", signature: str = "", cc: tuple = (),
                 reason: str = ""):
        super().__init__(message)
        self.kernel, self.signature, self.cc, self.reason = kernel, signature, tuple(cc), reason


class CorruptEntry(KcacheError):
    """An entry's bytes (or the file holding them) failed a check.

    ``code`` names the check, one of :data:`CORRUPT_CODES` (e.g. ``"truncated"``,
    ``"checksum"``, ``"not_regular"``); ``str()`` is the one wording of the problem, e.g.
    "truncated: 40 of 15015 bytes" (docs/cli.md, "Problems")."""

    def __init__(self, message: str, code: str = "invalid"):
        super().__init__(message)
        self.code = code


#: ``CorruptEntry.code`` values: the file (too_large, not_regular, symlink, owner,
#: unreadable), the envelope (truncated, bad_magic, checksum, version, lengths,
#: size_mismatch), the header (header_checksum, header_undecodable, header, limits), the
#: body (artifacts), a signed value (signature), anything else (invalid).
CORRUPT_CODES = ("too_large", "not_regular", "symlink", "owner", "unreadable", "truncated",
                 "bad_magic", "checksum", "version", "lengths", "size_mismatch",
                 "header_checksum", "header_undecodable", "header", "limits", "artifacts",
                 "signature", "invalid")


class NewerFormat(KcacheError):
    """An entry file was written by a newer kcache format version; it is left untouched."""

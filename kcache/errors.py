"""Exceptions raised by the kcache store (re-exported from ``kcache``).

Cache *defects* (a broken entry, a read-only or full disk) are never raised into a user's
program: they become misses, counted and warned once. These exceptions are for callers that
ask explicitly (``Store.load``, ``Store.lock``, settings resolution).
"""


class KcacheError(Exception):
    """Base class of every kcache error."""


class ConfigError(KcacheError, ValueError):
    """A setting has a bad value; the message names the variable/setting and what is accepted."""


class LockTimeout(KcacheError, TimeoutError):
    """A per-key lock was not acquired in time; the message names the lock file and
    ``KCACHE_LOCK_TIMEOUT``."""


class CorruptEntry(KcacheError):
    """An entry file failed a check (magic, lengths, checksum, structure)."""


class NewerFormat(KcacheError):
    """An entry file was written by a newer kcache format version; it is left untouched."""

"""Tiers: the sources of entry bytes behind the store's one verification path.

A tier stores opaque bytes under keys and checks nothing about them: every byte a tier returns
crosses :meth:`kcache.Store.verify_bytes` (kcache.store.reading: format, bounds, schema,
checksum, and the signature when a secret is set) before the store uses it. The remote tiers
(Redis, object stores: kcache.tiers.remote) and bundles (kcache.tiers.bundle) implement this
protocol. The local roots are held apart (as ccache's Storage holds its local storage beside
a list of remote ones): :class:`kcache.tiers.local.LocalTier` is the writable root and each
read-only layer, with the richer interface the store needs of its own files (``touch``,
``mark_bad``, ``quarantine``, ``OSError``/``CorruptEntry`` raised for a file that must not be
used). ``Store`` reads the local tiers in order (root, layers), then the remote tier, copies a
remote hit into the writable root, and publishes after a local put to the writable remote.

Contract of every tier (docs/design.md, "Tiers"):

* ``read`` never returns more than ``limit`` bytes and never allocates more than that for a
  value: a larger value is a :class:`TierError` of kind ``"bad_value"``, read no further.
* a tier never raises anything but :class:`TierError` (or ``KeyError``-free ``None`` for an
  absent key) from ``read``/``write``/``remove``/``keys``: the store turns it into a miss or
  a failed publish, counted by ``kind``, warned once.
* every call is bounded in time (remote tiers: connect and read timeouts).
"""
from __future__ import annotations

from typing import Iterator, Protocol, runtime_checkable

from ..errors import KcacheError

#: Kinds of :class:`TierError`, counted apart in the stats (``remote_errors`` by kind).
ERROR_KINDS = ("timeout", "refused", "auth", "bad_value", "io", "unavailable")


class TierError(KcacheError):
    """A tier could not answer. ``kind`` is one of :data:`ERROR_KINDS`: ``timeout`` (no answer
    in time), ``refused`` (connection refused or reset), ``auth`` (credentials rejected),
    ``bad_value`` (a value that cannot be an entry: too large, not a regular file, ...),
    ``io`` (any other I/O error), ``unavailable`` (the tier switched itself off)."""

    def __init__(self, kind: str, message: str):
        if kind not in ERROR_KINDS:
            raise ValueError(f"TierError kind must be one of {ERROR_KINDS}, not {kind!r}")
        super().__init__(message)
        self.kind = kind


class Blob:
    """Bytes read from a tier, not yet verified.

    ``data``: the stored value; ``ident``: for a local file ``(st_dev, st_ino, st_size,
    st_mtime_ns)``, the identity of what was read (so a bad file is quarantined only if it
    is still that file, and a bad file of a read-only layer is not re-read); None elsewhere;
    ``mtime``: the file's last use (unix seconds) for local tiers, else None; ``intact``:
    True when the tier has just compared every byte with a digest of a checked index (a
    version-3 bundle's SHA-256): the verification path then skips the entry's own checksums,
    which would only say again that the bytes are undamaged, and checks all the rest.

    A hot-path record (one per read): a plain class with ``__slots__``, compared and hashed
    by its fields (docs/design.md, "Rules")."""

    __slots__ = ("data", "ident", "mtime", "intact")

    def __init__(self, data: bytes, ident: tuple | None = None, mtime: float | None = None,
                 intact: bool = False):
        self.data, self.ident, self.mtime, self.intact = data, ident, mtime, intact

    def _fields(self) -> tuple:
        return (self.data, self.ident, self.mtime, self.intact)

    def __eq__(self, other):
        return self._fields() == other._fields() if other.__class__ is self.__class__ else NotImplemented

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (f"Blob(data={self.data!r}, ident={self.ident!r}, mtime={self.mtime!r}, "
                f"intact={self.intact!r})")


@runtime_checkable
class Tier(Protocol):
    """A source of entry bytes (see the module docstring for the contract).

    ``name``: what messages and ``kcache dir`` show (a path, or a URL without secrets);
    ``kind``: ``"local"``, ``"layer"``, ``"redis"``, ``"fsspec"`` or ``"bundle"``;
    ``writable``: False for read-only layers, read-only remotes and bundles;
    ``backfill``: True when a hit here is copied into the writable local tier (remote tiers:
    the next read is local); False for local layers (as fast as the root itself)."""

    name: str
    kind: str
    writable: bool
    backfill: bool

    def read(self, key: str, limit: int) -> Blob | None:
        """The value under ``key``, or None when absent. ``limit``: the largest value
        accepted, in bytes. Raises TierError."""

    def write(self, key: str, data: bytes) -> None:
        """Publish ``data`` under ``key`` atomically (readers see the old value or the new,
        never a mix). Raises TierError."""

    def remove(self, key: str) -> bool:
        """Remove ``key``; True if something was removed. Raises TierError."""

    def keys(self) -> Iterator[str]:
        """Every key held (order unspecified). Raises TierError."""

    def close(self) -> None:
        """Release connections and descriptors; the tier is not used afterwards."""

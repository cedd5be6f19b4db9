"""The signing secret of bundles (``KCACHE_SECRET`` or ``--secret-file``), read once per command."""
from __future__ import annotations

import os

from kcache.cli.errors import UsageError

SECRET_ENV = "KCACHE_SECRET"
MAX_SECRET_FILE = 4096  # bytes


def add_secret_option(parser) -> None:
    """Add ``--secret-file FILE`` to ``parser``."""
    parser.add_argument("--secret-file", metavar="FILE",
                        help=f"sign (export) or require a signature (import) with the secret in "
                             f"FILE (default: ${SECRET_ENV}, if set)")


def secret_of(args) -> bytes | None:
    """The secret from ``--secret-file`` (its bytes, surrounding blanks stripped), else from
    KCACHE_SECRET, else None. Raises UsageError for a file that cannot be read, is not a
    regular file, is larger than 4 KiB or holds no secret, for a KCACHE_SECRET of blanks only
    (an empty one is no secret), and for a secret shorter than
    16 bytes (kcache.signing.MIN_SECRET, as for KCACHE_REMOTE_SECRET), never quoting it."""
    path = getattr(args, "secret_file", None)
    if path is None:
        text = os.environ.get(SECRET_ENV)
        if text and not text.strip():  # blanks only: meant as a secret ("" means unset)
            raise UsageError(f"{SECRET_ENV} holds only blanks (accepted: a secret of at least 16 "
                             f"bytes, or {SECRET_ENV} unset or empty for unsigned bundles)")
        return _long_enough(text.strip().encode("utf-8", "surrogateescape"), SECRET_ENV) \
            if text else None
    return _long_enough(_secret_file(path), f"the secret in --secret-file {path}")


def _long_enough(secret: bytes, name: str) -> bytes:
    from kcache.errors import ConfigError
    from kcache.tiers.remote.signing import check_secret
    try:
        return check_secret(secret, name)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _secret_file(path: str) -> bytes:
    from kcache.disk import fsio
    from kcache.errors import CorruptEntry
    try:
        data, _st = fsio.read_regular(os.path.abspath(path), MAX_SECRET_FILE)
    except FileNotFoundError:
        raise UsageError(f"--secret-file {path}: no such file") from None
    except CorruptEntry as exc:
        raise UsageError(f"--secret-file {path}: {exc} (accepted: a regular file of at most "
                         f"{MAX_SECRET_FILE} bytes)") from None
    except OSError as exc:
        raise UsageError(f"--secret-file {path}: {exc.strerror or exc}") from None
    secret = data.strip()
    if not secret:
        raise UsageError(f"--secret-file {path} is empty (accepted: a file holding the secret)")
    return secret

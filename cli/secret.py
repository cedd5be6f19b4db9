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
    regular file, is larger than 4 KiB or holds no secret."""
    from kcache import fsio
    from kcache.errors import CorruptEntry
    path = getattr(args, "secret_file", None)
    if path is None:
        text = os.environ.get(SECRET_ENV, "").strip()
        return text.encode() if text else None
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

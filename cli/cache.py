"""Opening the cache a command works on, and checking that it can be written."""
from __future__ import annotations

import argparse
import functools
import os
from pathlib import Path

from kcache.cli.args import one_line, root_arg
from kcache.cli.errors import Problem, UsageError


def open_store(args: argparse.Namespace):
    """Return a ``kcache.Store`` for ``--dir`` (else KCACHE_DIR, the config, the default).

    Raises :class:`UsageError` for a bad ``--dir`` (:func:`kcache.cli.args.root_arg`);
    errors of the configuration itself (``ConfigError``) propagate to the top-level handler
    (exit 2). A plain ValueError from reading a setting (e.g. a number too long for int())
    is a bad setting too, and said in one line rather than as a traceback.
    """
    from kcache import Store
    from kcache.errors import KcacheError
    try:
        store = Store(root_arg(args))
    except KcacheError:
        raise
    except ValueError as exc:
        raise UsageError(f"a setting cannot be read: {one_line(exc)[:200]} (see 'kcache "
                         "config show')") from None
    # KCACHE_DISABLE keeps programs off the cache; maintenance asked for explicitly (e.g.
    # `verify --fix`, which the store skips quarantining when disabled) still applies.
    store.disabled = False
    check_trusted(store)
    if getattr(args, "command", None) in READING_COMMANDS:
        check_exists(store, getattr(args, "command", None) in ROOT_COMMANDS)
    return store


#: Commands that read the entries already there: on a root that was named (``--dir``,
#: ``KCACHE_DIR``) but does not exist they would report an empty cache, hiding a typo.
#: The others (``warm``, ``import``, ``pull``, ``config``, ``dir``, ``remote``) may make it.
READING_COMMANDS = frozenset({"ls", "stats", "show", "verify", "export", "push", "prune", "rm",
                              "clear"})
#: Of those, the ones whose report is of the writable root (its entries, its counters).
ROOT_COMMANDS = frozenset({"stats", "prune", "rm", "clear"})


def check_exists(store, of_root: bool = False) -> None:
    """Raise :class:`Problem` (exit 1) when the cache root was named by ``--dir`` or
    ``KCACHE_DIR`` (not the default, which before its first use is an empty cache), does not
    exist, and no read-only dir is configured; with one, the command goes on (its layers are
    what it reads), after a line saying so when ``of_root`` (its report is of the root)."""
    origin = store.settings.origins.get("root", "default")
    if origin == "default" or store.root.exists():
        return
    named = "--dir" if origin == "argument" else origin.removeprefix("env ")
    if store.readonly_roots:
        if not of_root:
            return
        from kcache.cli.output import message
        message(f"kcache: the cache root {store.root} (from {named}) does not exist yet: only "
                "the read-only layers are read")
        return
    raise Problem(f"the cache root {store.root} (from {named}) does not exist: no cache "
                  "there (check the path; 'kcache dir' shows the roots in use)")


def check_trusted(store) -> None:
    """Raise :class:`Problem` (exit 1) when the cache root is not trusted (docs/security.md):
    the store does not use it, so a command would list, count or check nothing and say all
    is well. Each untrusted read-only dir is said in one line, and the command goes on
    without it. (The store's own warnings of these kinds are not printed by the CLI:
    ``kcache.cli.main.REPORTED_BY_COMMANDS``; the words are the same.)"""
    from kcache.cli.output import message
    for name, problem in store.untrusted.items():
        if name != store.local.name:
            message(f"kcache: the read-only layer {name} is not trusted and not used: {problem}")
    problem = store.untrusted.get(store.local.name)
    if problem is not None:
        raise Problem(f"the cache root {store.root} is not trusted and not used: {problem}")


def ensure_writable(store, nothing: str = "nothing was removed") -> None:
    """Raise :class:`Problem` (exit 1) when ``store.root`` cannot be written; ``nothing``
    ends the message (what did not happen)."""
    reason = write_problem(store.root, store)
    if reason:
        raise Problem(f"cannot write to {store.root} ({reason}): {nothing}")


def write_problem(root: Path, store=None) -> str | None:
    """Why ``root`` cannot be written (e.g. "Read-only file system (EROFS)"), or None.

    ``Store.check_writable()`` decides when a store is given (it also remembers an earlier
    write failure); without one (``kcache dir`` while a setting is bad, so no Store can be
    made) the store's own probe ``kcache.store.probe_writable`` does. Raises nothing.
    """
    if store is not None:
        return store.check_writable()
    from kcache.store import probe_writable
    return probe_writable(root)


@functools.lru_cache(maxsize=64)
def layer_kind(root) -> str:
    """"bundle" for a read-only layer that is a bundle file, else "directory"."""
    return "bundle" if os.path.isfile(root) else "directory"

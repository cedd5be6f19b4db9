"""``kcache dir``: the cache roots in use (the writable root, then the read-only dirs), whether
they are trusted, and the remote tier."""
from __future__ import annotations

from kcache.cli.args import want_json, want_wide
from kcache.cli.cache import layer_kind, write_problem
from kcache.cli.output import is_terminal, message, print_fields, print_json
from kcache.cli.remote import configured, describe, summary
from kcache.cli.text import escape


def register(sub):
    """Add the ``dir`` subparser to ``sub`` and return it."""
    return sub.add_parser("dir", help="print the cache roots in use",
                          description="Print the writable cache root and the read-only dirs "
                                      "(readonly_dirs), whether each is trusted, and the "
                                      "remote tier (its URL without credentials).")


def untrusted(root, dirs, shared: bool) -> dict[str, str]:
    """``{path: why}`` for the root and read-only dirs that fail the store's trust check
    (kcache.localtier.LocalTier.trust_problem with shared mode as resolved): the store does
    not use them."""
    from pathlib import Path

    from kcache.disk.fsio import Trust
    from kcache.store.layers import make_layer
    from kcache.tiers.local import LocalTier
    trust = Trust(bool(shared))
    # the root is a folder (made on first write: its absence is no problem), never a layer
    out = {}
    problem = LocalTier(Path(root), writable=True, trust=trust).trust_problem()
    if problem is not None:
        out[str(root)] = problem
    for path in dirs:  # a layer may be a bundle file (1: its size is not read)
        problem = make_layer(Path(path), trust, 1).trust_problem()
        if problem is not None:
            out.setdefault(path, problem)
    return out


def run(args) -> int:
    """Print the roots. JSON: ``{"root", "writable", "trusted", "untrusted": {path: why},
    "readonly_dirs", "readonly_roots" (the same list, its old name), "config_file",
    "remote" (URL without credentials, or null), "remote_readonly", "remote_namespace",
    "remote_signed"}``. ``writable`` is false for a root that is not trusted (the store
    writes nothing there).

    Works while a setting is bad (e.g. ``KCACHE_MAX_SIZE=lots``): the roots are still
    printed and the bad setting is named on stderr (``config show`` has the details).
    Piped, only the paths are printed (the root first, so ``cd "$(kcache dir)"`` works);
    a root or dir that is not trusted is said on stderr.
    """
    from kcache.cli.cmd_config import resolve
    resolved = resolve(args)
    root = resolved.root
    dirs = [str(p) for p in (resolved.value("readonly_dirs")
                             if not resolved.rows["readonly_dirs"].error else [])]
    shared = resolved.value("shared") if not resolved.rows["shared"].error else False
    distrust = untrusted(root, dirs, shared)
    trust_problem = distrust.get(str(root))
    problem = (f"not trusted: {trust_problem}" if trust_problem is not None
               else write_problem(root))  # the store's own probe (kcache.store.probe_writable)
    settings, remote_problem = configured(resolved.config)
    if want_json(args):
        print_json({"root": str(root), "writable": problem is None, "trusted": trust_problem is None,
                    "untrusted": distrust, "readonly_dirs": dirs, "readonly_roots": dirs,
                    "config_file": str(resolved.config_path), **summary(settings)})
    elif not is_terminal():
        # Piped: the root alone on the first line, so `cd "$(kcache dir)"` works.
        print(escape(str(root)))
        for path in dirs:
            print(escape(path))
        for path, why in distrust.items():
            what = "cache root" if path == str(root) else _label(path)
            message(f"kcache: the {what} {path} is not trusted and not used: {why}")
    else:
        pairs = [("root", str(root), str(root)),
                 ("trusted", "yes" if trust_problem is None else f"no ({trust_problem})",
                  trust_problem is None),
                 ("writable", "yes" if problem is None else f"no ({problem})", problem is None)]
        pairs += [(_label(p), p if p not in distrust else f"{p} (not trusted, not used: "
                   f"{distrust[p]})", p) for p in dirs]
        remote = describe(settings) if settings is not None else (
            "(bad setting: see below)" if remote_problem else "(none)")
        pairs.append(("remote", remote, settings.name if settings else None))
        print_fields(pairs, wide=want_wide(args))
    for text in resolved.errors:
        message(f"kcache: warning: {text} (see 'kcache config show')")
    if remote_problem and not any(row.error for name, row in resolved.rows.items()
                                  if name.startswith("remote")):
        # a problem of no config setting (the signing secret: environment only), which the
        # line above did not say
        message(f"kcache: warning: {remote_problem} (see 'kcache remote check')")
    return 0


def _label(layer: str) -> str:
    """"read-only dir", or "read-only bundle" for a bundle file served in place."""
    return "read-only bundle" if layer_kind(layer) == "bundle" else "read-only dir"

"""``kcache dir``: the cache roots in use (the writable root, then the read-only layers)."""
from __future__ import annotations

from kcache.cli.common import (
    is_terminal, message, print_fields, print_json, want_json, write_problem,
)


def register(sub):
    """Add the ``dir`` subparser to ``sub`` and return it."""
    return sub.add_parser("dir", help="print the cache roots in use",
                          description="Print the writable cache root and the read-only layers.")


def run(args) -> int:
    """Print the roots. JSON: ``{"root", "writable", "readonly_roots", "config_file"}``.

    Works while a setting is bad (e.g. ``KCACHE_MAX_SIZE=lots``): the roots are still
    printed and the bad setting is named on stderr (``config show`` has the details).
    """
    from kcache.cli.cmd_config import resolve
    resolved = resolve(args)
    root = resolved.root
    layers = [str(p) for p in (resolved.value("readonly_roots")
                               if not resolved.rows["readonly_roots"].error else [])]
    problem = write_problem(root)  # the store's own probe (kcache.store.probe_writable)
    if want_json(args):
        print_json({"root": str(root), "writable": problem is None,
                    "readonly_roots": layers, "config_file": str(resolved.config_path)})
    elif not is_terminal():
        # Piped: the root alone on the first line, so `cd "$(kcache dir)"` works.
        print(root)
        for layer in layers:
            print(layer)
    else:
        pairs = [("root", root, root),
                 ("writable", "yes" if problem is None else f"no ({problem})", problem is None)]
        pairs += [("read-only layer", p, p) for p in layers]
        print_fields(pairs)
    for text in resolved.errors:
        message(f"kcache: warning: {text} (see 'kcache config show')")
    return 0


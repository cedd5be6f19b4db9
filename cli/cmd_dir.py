"""``kcache dir``: the cache roots in use (the writable root, then the read-only layers)."""
from __future__ import annotations

from kcache.cli.common import (
    is_terminal, open_store, print_fields, print_json, want_json, write_problem,
)


def register(sub):
    """Add the ``dir`` subparser to ``sub`` and return it."""
    return sub.add_parser("dir", help="print the cache roots in use",
                          description="Print the writable cache root and the read-only layers.")


def run(args) -> int:
    """Print the roots. JSON: ``{"root", "writable", "readonly_roots", "config_file"}``."""
    store = open_store(args)
    layers = [str(p) for p in store.readonly_roots]
    problem = write_problem(store)
    if want_json(args):
        print_json({"root": str(store.root), "writable": problem is None,
                    "readonly_roots": layers, "config_file": str(store.root / "config.json")})
        return 0
    if not is_terminal():
        # Piped: the root alone on the first line, so `cd "$(kcache dir)"` works.
        print(store.root)
        for layer in layers:
            print(layer)
        return 0
    pairs = [("root", store.root, store.root),
             ("writable", "yes" if problem is None else f"no ({problem})", problem is None)]
    pairs += [("read-only layer", p, p) for p in layers]
    print_fields(pairs)
    return 0


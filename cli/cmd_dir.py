"""``kcache dir``: the cache roots in use (the writable root, then the read-only dirs)."""
from __future__ import annotations

from kcache.cli.args import want_json, want_wide
from kcache.cli.cache import write_problem
from kcache.cli.output import is_terminal, message, print_fields, print_json
from kcache.cli.text import escape


def register(sub):
    """Add the ``dir`` subparser to ``sub`` and return it."""
    return sub.add_parser("dir", help="print the cache roots in use",
                          description="Print the writable cache root and the read-only dirs "
                                      "(readonly_dirs).")


def run(args) -> int:
    """Print the roots. JSON: ``{"root", "writable", "readonly_dirs", "readonly_roots" (the
    same list, its old name), "config_file"}``.

    Works while a setting is bad (e.g. ``KCACHE_MAX_SIZE=lots``): the roots are still
    printed and the bad setting is named on stderr (``config show`` has the details).
    """
    from kcache.cli.cmd_config import resolve
    resolved = resolve(args)
    root = resolved.root
    dirs = [str(p) for p in (resolved.value("readonly_dirs")
                             if not resolved.rows["readonly_dirs"].error else [])]
    problem = write_problem(root)  # the store's own probe (kcache.store.probe_writable)
    if want_json(args):
        print_json({"root": str(root), "writable": problem is None, "readonly_dirs": dirs,
                    "readonly_roots": dirs, "config_file": str(resolved.config_path)})
    elif not is_terminal():
        # Piped: the root alone on the first line, so `cd "$(kcache dir)"` works.
        print(escape(str(root)))
        for path in dirs:
            print(escape(path))
    else:
        pairs = [("root", str(root), str(root)),
                 ("writable", "yes" if problem is None else f"no ({problem})", problem is None)]
        pairs += [("read-only dir", p, p) for p in dirs]
        print_fields(pairs, wide=want_wide(args))
    for text in resolved.errors:
        message(f"kcache: warning: {text} (see 'kcache config show')")
    return 0

"""``kcache config [show | get KEY | set KEY VALUE]``: effective settings and their origins."""
from __future__ import annotations

import os

from kcache.cli.common import (
    UsageError, add_common, human_seconds, human_size, is_terminal, message,
    print_json, print_table, want_json,
)

#: Settings shown by ``config show`` and accepted by ``config get``
#: (fields of kcache.config.Settings).
SHOWN = ("root", "max_size", "readonly_roots", "lock_timeout", "disabled", "shared")
#: Names accepted by ``config set`` -> the config.json key (kcache.config.SETTINGS).
SETTABLE = {"max_size": "max_size", "readonly_dirs": "readonly_dirs",
            "readonly_roots": "readonly_dirs", "lock_timeout": "lock_timeout",
            "shared": "shared"}
ENV = {"root": "KCACHE_DIR", "max_size": "KCACHE_MAX_SIZE",
       "readonly_roots": "KCACHE_READONLY_DIRS", "lock_timeout": "KCACHE_LOCK_TIMEOUT",
       "disabled": "KCACHE_DISABLE", "shared": "KCACHE_SHARED"}


def register(sub):
    """Add the ``config`` subparser (with ``show``, ``get``, ``set``) to ``sub``; return it."""
    p = sub.add_parser("config", help="show, get or set settings",
                       description="Show the effective settings and where each came from "
                                   "(argument, environment, config file, default); get one; "
                                   "or set one in <root>/config.json.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    add_common(actions.add_parser("show", help="every setting and its origin (default)"))
    get = actions.add_parser("get", help="one setting's value")
    get.add_argument("key", metavar="KEY", help=f"one of: {', '.join(SHOWN)}")
    add_common(get)
    put = actions.add_parser("set", help="write a setting to <root>/config.json")
    put.add_argument("key", metavar="KEY",
                     help=f"one of: {', '.join(sorted(set(SETTABLE.values())))}")
    put.add_argument("value", metavar="VALUE", help="e.g. 10G for max_size, 5m for lock_timeout")
    add_common(put)
    return p


def resolve(args):
    """``kcache.config.resolve`` for ``--dir`` (else KCACHE_DIR, else the default root)."""
    from kcache.config import resolve as resolve_settings
    root = getattr(args, "dir", None)
    return resolve_settings(root=root)


def _value(settings, name: str):
    value = getattr(settings, name)
    if name == "root":
        return str(value)
    if name == "readonly_roots":
        return [str(p) for p in value]
    return value


def _human(name: str, value) -> str:
    if name == "max_size":
        return f"{human_size(value)} ({value} bytes)"
    if name == "lock_timeout":
        return human_seconds(value)
    if name == "readonly_roots":
        return os.pathsep.join(value) or "(none)"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def run(args) -> int:
    """Dispatch to show/get/set (show when no action is given)."""
    action = args.action or "show"
    if action == "set":
        return run_set(args)
    settings = resolve(args)
    if action == "get":
        name = "readonly_roots" if args.key == "readonly_dirs" else args.key
        if name not in SHOWN:
            raise UsageError(f"unknown setting {args.key!r}; accepted: {', '.join(SHOWN)}")
        value = _value(settings, name)
        origin = settings.origins.get(name, "default")
        if want_json(args):
            print_json({"key": name, "value": value, "origin": origin})
        elif is_terminal():
            print(_human(name, value))
        else:
            print(os.pathsep.join(value) if isinstance(value, list) else value)
        return 0
    rows = [(n, _value(settings, n), settings.origins.get(n, "default")) for n in SHOWN]
    if want_json(args):
        print_json({"root": str(settings.root), "config_file": str(settings.config_path),
                    "settings": {n: {"value": v, "origin": o} for n, v, o in rows}})
        return 0
    print_table(("Setting", "Value", "Origin"),
                [(n, _human(n, v), o) for n, v, o in rows],
                [(n, os.pathsep.join(v) if isinstance(v, list) else v, o) for n, v, o in rows])
    return 0


def run_set(args) -> int:
    """Write ``KEY VALUE`` into ``<root>/config.json`` (validated by kcache.config).

    JSON: ``{"key", "value" (as stored: bytes, seconds, ...), "file"}``.
    """
    from kcache.config import read_config, write_setting
    name = SETTABLE.get(args.key)
    if name is None:
        raise UsageError(f"unknown setting {args.key!r}; accepted: "
                         f"{', '.join(sorted(set(SETTABLE.values())))}")
    settings = resolve(args)
    path = write_setting(settings.root, name, args.value)
    stored = read_config(settings.root).get(name)
    if want_json(args):
        print_json({"key": name, "value": stored, "file": str(path)})
    else:
        message(f"kcache: set {name} = {stored!r} in {path}")
    shown = "readonly_roots" if name == "readonly_dirs" else name
    env = ENV.get(shown)
    if env and os.environ.get(env):
        message(f"kcache: note: {env} is set in this environment and overrides the config file")
    return 0

"""``kcache config [show | get KEY | set KEY VALUE | unset KEY]``: effective settings and their origins."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from kcache.errors import KcacheError

from kcache.cli.args import add_common, check_setting_text, one_line, root_arg, want_json, want_wide
from kcache.cli.errors import Problem, UsageError
from kcache.cli.fmt import human_duration, human_size
from kcache.cli.output import Column, human_value, is_terminal, message, print_json, print_table
from kcache.cli.text import clip, escape

#: The remote tier's settings, under their config.json names (kcache.config.REMOTE_SETTINGS;
#: checked by kcache.remote). The password and the signing secret are never settings here:
#: they come from the environment only and are never shown.
REMOTE_SHOWN = ("remote", "remote_namespace", "remote_readonly", "remote_timeout", "remote_ttl",
                "remote_wait")
#: Settings shown by ``config show`` and accepted by ``config get``, under their CLI names.
SHOWN = ("root", "max_size", "readonly_dirs", "lock_timeout", "lock_stale", "disabled",
         "shared", "max_entry_size", "quarantine_age") + REMOTE_SHOWN
#: CLI name -> name of the setting in ``kcache.config`` (``SOURCES``, ``resolve_each``).
CONFIG_NAMES = {"readonly_dirs": "readonly_roots"}
#: Old names still accepted as input (with a note) -> the name they mean now. JSON documents
#: keep the old name as a second field (``settings.readonly_roots``), never dropped.
OLD_NAMES = {"readonly_roots": "readonly_dirs"}
#: Names ``config set``/``unset`` write (the config.json keys, kcache.config.SETTINGS).
SETTABLE = ("max_size", "readonly_dirs", "lock_timeout", "shared", "max_entry_size",
            "quarantine_age") + REMOTE_SHOWN
#: Terminal columns of ``config show``: the value shrinks in its middle, the origin goes last.
COLUMNS = (Column("Setting"), Column("Value", shrink=16), Column("Origin", shrink=12))


def register(sub):
    """Add the ``config`` subparser (with ``show``, ``get``, ``set``, ``unset``) to ``sub``;
    return it."""
    p = sub.add_parser("config", help="show, get, set or unset settings",
                       description="Show the effective settings and where each came from "
                                   "(argument, environment, config file, default); get one; "
                                   "or set/unset one in <root>/config.json.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    add_common(actions.add_parser("show", help="every setting and its origin (default)"))
    get = actions.add_parser("get", help="one setting's value")
    get.add_argument("key", metavar="KEY", help=f"one of: {', '.join(SHOWN)}")
    add_common(get)
    keys = ", ".join(SETTABLE)
    put = actions.add_parser("set", help="write a setting to <root>/config.json")
    put.add_argument("key", metavar="KEY", help=f"one of: {keys}")
    put.add_argument("value", metavar="VALUE", help="e.g. 10G for max_size, 5m for lock_timeout")
    add_common(put)
    unset = actions.add_parser("unset", help="remove a setting from <root>/config.json")
    unset.add_argument("key", metavar="KEY", help=f"one of: {keys}")
    add_common(unset)
    return p


@dataclasses.dataclass
class Row:
    """One setting: its value (the raw text when it is bad), origin and error (or None)."""

    name: str
    value: Any
    origin: str
    error: str | None = None


@dataclasses.dataclass
class Resolved:
    """Every setting of :data:`SHOWN`, resolved one by one so a bad one spoils no other.

    ``errors``: the messages of bad settings and of an unreadable config file;
    ``warnings``: config.json keys that are ignored (unknown settings)."""

    root: Path
    config_path: Path
    rows: dict[str, Row]
    errors: list[str]
    warnings: list[str] = dataclasses.field(default_factory=list)
    #: config.json's contents ({} when absent, bad, or in an untrusted root)
    config: dict = dataclasses.field(default_factory=dict)

    def value(self, name: str):
        return self.rows[name].value


def resolve(args) -> Resolved:
    """The settings for ``--dir`` (else KCACHE_DIR, else the default root), by CLI name.

    Every setting is resolved on its own by ``kcache.config.resolve_each`` (the precedence
    argument > environment > ``<root>/config.json`` > default and the parsers of
    ``kcache.config.resolve``), so a bad one (a ``ConfigError``) keeps its raw value, its
    origin and the error while the others are still resolved: ``config show`` and ``dir``
    still work and ``config set`` can fix it. A bad config.json is reported and its settings
    ignored. A bad root itself is raised (``ConfigError``, exit 2): nothing else can be found
    without it. A plain ValueError from a setting (kcache.config reads a number too long
    for ``int()``) is that setting's error too, never a traceback.
    """
    from kcache.config import CONFIG_FILE, resolve_each, unknown_keys_message
    try:
        reports = resolve_each(root=root_arg(args))
    except ValueError as exc:
        if isinstance(exc, KcacheError):
            raise
        raise UsageError(f"a setting cannot be read: {one_line(exc)[:200]}") from None
    if reports["root"].error is not None:
        raise reports["root"].error
    errors: list[str] = []
    conf = reports[CONFIG_FILE]
    if conf.error is not None:
        errors.append(_config_file_problem(conf.error, conf.value))
    # The same words as the store's warning (kcache.config), which stats etc. print.
    contents = conf.raw if isinstance(conf.raw, dict) else {}
    unknown = unknown_keys_message(contents, conf.value)
    warnings = [unknown] if unknown is not None else []
    rows = {}
    for name in SHOWN:
        if name in REMOTE_SHOWN:
            report = _remote_report(name, contents, conf.value)
        else:
            report = reports[CONFIG_NAMES.get(name, name)]
        if report.error is None:
            rows[name] = Row(name, _value(report.value, name), report.origin)
            continue
        text = one_line(report.error)
        rows[name] = Row(name, report.raw, report.origin, text)
        fix = _fix_hint(name, report.origin)
        errors.append(f"{text} ({fix})" if fix else text)
    return Resolved(reports["root"].value, conf.value, rows, errors, warnings, dict(contents))


def _remote_field(name: str) -> tuple[str, str]:
    """``(field, environment variable)`` of the remote setting ``name`` (kcache.remote.VARIABLES)."""
    from kcache.tiers.remote import VARIABLES
    return next((field, env) for field, (env, key) in VARIABLES.items() if key == name)


def _remote_report(name: str, conf: dict, path):
    """The remote setting ``name`` resolved as kcache.remote.remote_settings does (environment
    > config.json > default), as a kcache.config.SettingReport; the URL without secrets."""
    from kcache.config import SettingReport
    from kcache.errors import ConfigError
    from kcache.tiers.remote import DEFAULTS, check_setting, redact, shown
    field, env = _remote_field(name)
    if os.environ.get(env, "").strip():
        raw, origin, var = os.environ[env].strip(), f"env {env}", env
    elif conf.get(name) not in (None, ""):
        raw, origin, var = conf[name], f"config {path}", f"{name} in {path}"
    else:
        return SettingReport(DEFAULTS[field], "default", DEFAULTS[field])
    given = shown(raw) if field == "url" else raw  # never a password, even in a bad URL
    try:
        value = check_setting(field, raw, var)
    except ConfigError as exc:
        return SettingReport(None, origin, given, exc)
    return SettingReport(redact(value) if field == "url" else value, origin, given)


def _config_file_problem(error: Exception, path) -> str:
    """The message for a config.json that cannot be used: the words of the warning every
    other command gives (``kcache.config.resolve``): its error, what to do about it
    (``broken_config_hint``), and that its settings are ignored."""
    from kcache.config import broken_config_hint
    return f"{one_line(error)}{broken_config_hint(error)}; its settings are ignored"


def _fix_hint(name: str, origin: str) -> str:
    """How to fix a bad setting, by where it came from (empty for a default)."""
    env, key = _sources(name)
    if origin.startswith("env "):
        return f"fix or unset {env}"
    if origin.startswith("config "):
        return (f"fix it with 'kcache config set {key} VALUE' or "
                f"'kcache config unset {key}'")
    return ""


def _sources(name: str) -> tuple[str, str | None]:
    """``(environment variable, config.json key)`` of the setting ``name`` (a CLI name)."""
    if name in REMOTE_SHOWN:
        return _remote_field(name)[1], name
    from kcache.config import SOURCES
    source = SOURCES[CONFIG_NAMES.get(name, name)]
    return source.env, source.key


def _value(value, name: str):
    if name == "root":
        return str(value)
    if name == "readonly_dirs":
        return [str(p) for p in value]
    return value


def _human(row: Row) -> str:
    name, value = row.name, row.value
    if row.error:
        return f"{human_value(value)} (bad: see below)"
    if name in ("max_size", "max_entry_size"):
        return f"{human_size(value)} ({value} bytes)"
    if name in ("lock_timeout", "lock_stale", "remote_timeout", "remote_wait", "quarantine_age"):
        return human_duration(value)
    if name == "readonly_dirs":
        return os.pathsep.join(value) or "(none)"
    if name in ("remote", "remote_ttl") and value is None:
        return "(none)" if name == "remote" else "(no expiry)"
    if name == "remote_ttl":
        return human_duration(value)
    return human_value(value)


def _plain(value) -> str:
    """A value for plain output: lists joined with os.pathsep, booleans true/false, none
    empty; escaped (a path may hold any character)."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return escape(os.pathsep.join(str(v) for v in value))
    if isinstance(value, bool):
        return "true" if value else "false"
    return escape(str(value))


def _name(text: str, accepted) -> str:
    """The current name for setting ``text`` (an old name gets a note on stderr);
    UsageError naming the ``accepted`` ones for anything else."""
    name = OLD_NAMES.get(text)
    if name is not None:
        message(f"kcache: note: {text!r} is the old name of {name!r}; use {name!r}")
        return name
    if text in SHOWN and text not in accepted:  # shown by config, but not a config.json key
        where = "--dir or KCACHE_DIR" if text == "root" else _sources(text)[0]
        raise UsageError(f"{text} is not kept in config.json: it comes from {where}; "
                         f"accepted: {', '.join(accepted)}")
    if text not in accepted:
        raise UsageError(f"unknown setting {clip(text)}; accepted: {', '.join(accepted)}")
    return text


def run(args) -> int:
    """Dispatch to show/get/set/unset (show when no action is given).

    Exit 1 when a setting is bad (shown with its raw value, origin and error)."""
    action = args.action or "show"
    if action in ("set", "unset"):
        return run_set(args)
    if action == "get":
        name = _name(args.key, SHOWN)
        row = resolve(args).rows[name]
        if row.error:
            raise Problem(row.error)
        if want_json(args):  # an old name asked for is echoed as asked (scripts compare it)
            print_json({"key": args.key if args.key in OLD_NAMES else name,
                        "value": row.value, "origin": row.origin})
        elif is_terminal():
            print(_human(row))
        else:
            print(_plain(row.value))
        return 0
    resolved = resolve(args)
    rows = [resolved.rows[n] for n in SHOWN]
    if want_json(args):
        settings = {}
        for r in rows:
            settings[r.name] = {"value": r.value, "origin": r.origin}
            if r.error:
                settings[r.name]["error"] = r.error
        for old, new in OLD_NAMES.items():  # the old field stays, with the same content
            settings[old] = dict(settings[new])
        print_json({"root": str(resolved.root), "config_file": str(resolved.config_path),
                    "settings": settings, "errors": resolved.errors,
                    "warnings": resolved.warnings})
    else:
        print_table(COLUMNS, rows, human=lambda r: (r.name, _human(r), r.origin),
                    plain=lambda r: (r.name, _plain(r.value), r.origin),
                    names=("setting", "value", "origin"), wide=want_wide(args))
    for text in resolved.errors:
        message(f"kcache: {text}")
    return 1 if resolved.errors else 0


def run_set(args) -> int:
    """Write ``KEY VALUE`` into ``<root>/config.json`` (validated by kcache.config), or with
    ``unset`` remove ``KEY``. Works while other settings are bad, so they can be fixed.
    ``readonly_dirs`` naming a folder that does not exist is set, with a warning.

    JSON: ``{"key", "value" (as stored: bytes, seconds, ...; null when unset), "file",
    "changed"}``.
    """
    from kcache.config import read_config
    name = _name(args.key, SETTABLE)
    root = resolve(args).root
    path = root / "config.json"
    if path.is_dir():
        raise Problem(f"cannot write {path}: it is a directory (remove it first)")
    if args.action == "unset":
        current = _current(root)
        if current is not None and name not in current:
            if want_json(args):
                print_json({"key": name, "value": None, "file": str(path), "changed": False})
            else:
                message(f"kcache: {name} was not set in {path}; nothing changed")
            return 0
        path = _write(root, name, None, path)
    else:
        value = args.value
        if not str(value).strip():
            raise UsageError(f"config set {name}: the value is empty; use 'kcache config unset "
                             f"{name}' to remove the setting")
        check_setting_text(name, value)
        if name == "remote":
            _refuse_credentials(value)
        if name in REMOTE_SHOWN:  # the store's own checks (kcache.remote), bounds included
            from kcache.tiers.remote import check_setting
            check_setting(_remote_field(name)[0], value, name)
        path = _write(root, name, value, path)
    stored = read_config(root).get(name)
    if name == "remote" and isinstance(stored, str):
        from kcache.tiers.remote import redact
        stored = redact(stored)
    if want_json(args):
        print_json({"key": name, "value": stored, "file": str(path), "changed": True})
    elif args.action == "unset":
        message(f"kcache: unset {name} in {path}")
    else:
        message(f"kcache: set {name} = {_plain(stored)} in {path}")
    if name == "readonly_dirs" and args.action == "set":
        _warn_missing(stored)
    env = _sources(name)[0]
    if os.environ.get(env):
        message(f"kcache: note: {env} is set in this environment and overrides the config file")
    return 0


def _write(root: Path, name: str, value, path: Path) -> Path:
    """``kcache.config.write_setting``; a file system that refuses is one line saying what
    was not done (exit 1), as prune, rm and clear say it."""
    from kcache.config import write_setting
    try:
        return write_setting(root, name, value)
    except OSError as exc:
        from kcache.tiers.local import os_reason
        raise Problem(f"cannot write {exc.filename or path} ({os_reason(exc)}): {name} not "
                      f"{'unset' if value is None else 'set'}") from None


def _refuse_credentials(url: str) -> None:
    """UsageError for a remote URL holding a password (or a password/token option):
    config.json is read by the whole group in shared mode, so credentials stay in the
    environment (KCACHE_REMOTE_PASSWORD, the AWS variables). The URL is never echoed."""
    from urllib.parse import parse_qsl, urlsplit
    from kcache.tiers.remote import redact
    try:
        parts = urlsplit(url.strip())
        options = {k.lower() for k, _v in parse_qsl(parts.query)}
        has_password = bool(parts.password) or bool(options & {"password", "token", "secret"})
    except ValueError:
        return  # not a URL: write_setting says what is wrong
    if has_password:
        raise UsageError(f"config set remote: {redact(url)} is given with a password; config.json "
                         "is no place for it (the group reads it in shared mode): set the URL "
                         "without it and the password in KCACHE_REMOTE_PASSWORD")


def _warn_missing(paths) -> None:
    """One warning line naming the read-only dirs just set that are not existing folders:
    they are kept (a folder mounted later is read then), but a typo should not go unseen."""
    missing = [p for p in (paths or ()) if not os.path.isdir(p)]
    if missing:
        message(f"kcache: warning: readonly_dirs: {', '.join(missing)} "
                f"{'does' if len(missing) == 1 else 'do'} not exist (set anyway; "
                "read once it exists)")


def _current(root: Path) -> dict | None:
    """The settings in ``<root>/config.json`` ({} when absent; None when it is unusable, so
    ``unset`` leaves the decision to ``write_setting``)."""
    from kcache.config import read_config
    from kcache.errors import ConfigError
    try:
        conf = read_config(root)
    except ConfigError:
        return None
    return conf if isinstance(conf, dict) else None

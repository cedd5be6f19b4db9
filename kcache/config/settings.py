"""Settings resolution.

Precedence for every setting: explicit argument > environment > ``<root>/config.json`` >
default. The root itself comes from the argument, ``KCACHE_DIR`` or platformdirs'
``user_cache_dir("kcache")`` (the config file lives inside it, so it cannot choose the root).

| setting | environment | config.json key | default | accepted |
| --- | --- | --- | --- | --- |
| root | KCACHE_DIR | - | user cache dir | a directory path (not a file, not empty) |
| max_size | KCACHE_MAX_SIZE | max_size | 2 GiB | bytes, or number + K/M/G/T (binary), KiB.., KB.. (decimal); 1 .. 2**63-1 bytes |
| readonly_roots | KCACHE_READONLY_DIRS | readonly_dirs | () | os.pathsep list / JSON list of cache folders or bundle files (a file: a bundle layer) |
| lock_timeout | KCACHE_LOCK_TIMEOUT | lock_timeout | 600 s | seconds 0 .. 100 years, or a duration like 90s, 5m |
| lock_stale | KCACHE_LOCK_STALE | - | 30 s | a duration as for lock_timeout (under 1 s counts as 1 s); 0: never pass a stopped lock holder |
| disabled | KCACHE_DISABLE | - | False | 1/0, true/false, yes/no, on/off |
| shared | KCACHE_SHARED | shared | False | 1/0, true/false, yes/no, on/off |
| max_entry_size | KCACHE_MAX_ENTRY_SIZE | max_entry_size | 256 MiB | a size as for max_size (a larger entry file is refused unread) |
| quarantine_age | KCACHE_QUARANTINE_AGE | quarantine_age | 30 d | a duration; prune removes quarantined files older than this |

An environment variable that is empty or only blanks counts as unset (``KCACHE_DIR=`` gives
the default root); an empty ``root`` argument is a ConfigError. Paths (root, read-only roots)
are made absolute and normalised (``os.path.abspath(os.path.expanduser(p))``); blank, repeated read-only roots and one
equal to the root are dropped. Unknown keys in config.json are warned about once and ignored;
so is a config.json that is not a JSON object (not JSON, a list, a directory): its settings are
ignored with a warning naming the file, since a broken cache never stops the program, and
:func:`write_setting` replaces it (keeping the old one as ``config.json.bad``). Bad values raise :class:`~kcache.errors.ConfigError` naming the variable (or config.json and
its key), quoting the value given, and saying what is accepted. :func:`resolve_each` applies
the same precedence and checks but records each setting's error instead of raising (for
``kcache config show``); :func:`resolve` is built on it and raises the first error.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import stat
from pathlib import Path
from typing import Any


from ..disk import fsio
from ..errors import ConfigError, CorruptEntry
from ..warn import warn_once
from .values import (_MAX_NUMBER_TEXT, SIZE_ACCEPTED, _quote, parse_bool, parse_duration,  # noqa: F401
                     parse_size)

DEFAULT_MAX_SIZE = 2 << 30  # bytes
DEFAULT_LOCK_TIMEOUT = 600.0  # seconds; compiling one kernel can take minutes
DEFAULT_LOCK_STALE = 30.0  # seconds without a lock holder's heartbeat (kcache.locks): stopped
DEFAULT_MAX_ENTRY_SIZE = 256 << 20  # bytes; a cubin is rarely above a few MiB
DEFAULT_QUARANTINE_AGE = 30 * 86400.0  # seconds
CONFIG_NAME = "config.json"
MAX_CONFIG_FILE = 1 << 20  # bytes; a config.json larger than this is not read
SETTINGS = ("max_size", "readonly_dirs", "lock_timeout", "shared", "max_entry_size",
            "quarantine_age")
#: config.json keys of the remote tier (checked by kcache.remote.remote_settings when a store
#: opens the remote; the password and the signing secret are never read from a file)
REMOTE_SETTINGS = ("remote", "remote_namespace", "remote_readonly", "remote_timeout",
                   "remote_ttl", "remote_wait")
@dataclasses.dataclass
class Settings:
    """Resolved configuration. Sizes in bytes, times in seconds; ``origins`` maps each
    setting name to where it came from: "argument", "env KCACHE_X", "config <path>", "default"."""

    root: Path
    max_size: int
    readonly_roots: tuple[Path, ...]
    lock_timeout: float
    disabled: bool
    shared: bool
    origins: dict[str, str]
    max_entry_size: int = DEFAULT_MAX_ENTRY_SIZE
    quarantine_age: float = DEFAULT_QUARANTINE_AGE
    lock_stale: float = DEFAULT_LOCK_STALE
    #: config.json's contents as read ({} when absent, broken or in an untrusted root): the
    #: remote tier's settings are read from it (kcache.remote.remote_settings)
    config: dict = dataclasses.field(default_factory=dict)

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG_NAME


def _absolute(path: str | os.PathLike) -> Path:
    """``~`` expanded, made absolute (against the current directory) and normalised
    (``os.path.abspath``: ``a/../b`` becomes ``b`` lexically, symlinks kept), so the same
    setting names the same folder wherever a later command runs, and ``missing/../x`` never
    creates ``missing``."""
    return Path(os.path.abspath(os.path.expanduser(os.fspath(path))))


def _check_dir(path: Path, what: str, origin: str) -> Path:
    """``path`` made absolute; ConfigError if it exists and is not a directory."""
    path = _absolute(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} {str(path)!r} (from {origin}) is a file; accepted: a directory path (existing or not)")
    return path


def _check_root(root, origin: str) -> Path:
    if not str(root).strip():
        raise ConfigError(f"cache root {str(root)!r} (from {origin}) is empty; accepted: a directory path "
                          "(leave the setting out for the default)")
    return _check_dir(Path(root), "cache root", origin)


def broken_config_hint(error: ConfigError) -> str:
    """What to do about a broken config.json, for messages: a directory must be moved away
    (``write_setting`` never replaces one); a bad file can be edited, removed, or replaced by
    ``kcache config set``. Empty when the error already says it."""
    if "is a directory" in str(error):
        return ""  # the error itself says: remove or rename that directory
    return " (edit or remove that file, or 'kcache config set' a setting to replace it)"


def read_config(root: Path) -> dict[str, Any]:
    """Contents of ``<root>/config.json`` ({} if absent). ConfigError naming the file if it is
    not a JSON object or not a regular file (e.g. a directory). An unreadable file (permissions,
    I/O error) is warned once and ignored: defaults apply."""
    path = Path(root) / CONFIG_NAME
    try:  # never a FIFO, a symlink, a huge file or one of an untrusted owner (kcache.fsio)
        data, _st = fsio.read_regular(path, MAX_CONFIG_FILE, trust=fsio.Trust(_env_shared()))
        text = data.decode("utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except CorruptEntry as exc:
        if os.path.isdir(path) and not os.path.islink(path):
            raise ConfigError(f"config file {path} is a directory; accepted: a JSON file "
                              f"(remove or rename that directory)") from None
        raise ConfigError(f"config file {path} is {exc}; accepted: a JSON file of at most "
                          f"{MAX_CONFIG_FILE} bytes") from None
    except (OSError, UnicodeDecodeError) as exc:
        warn_once(f"config-unreadable:{path}", f"kcache: cannot read config file {path} ({exc}); its settings are ignored")
        return {}
    try:
        data = json.loads(text, parse_int=_json_int)
    except RecursionError:  # "[[[[..." nested deeper than the interpreter's stack
        raise ConfigError(f"config file {path} is not valid JSON (nested too deep); accepted: a "
                          f"JSON object with keys {', '.join(SETTINGS)}") from None
    except ValueError as exc:
        raise ConfigError(f"config file {path} is not valid JSON ({exc}); accepted: a JSON object with keys {', '.join(SETTINGS + REMOTE_SETTINGS)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a JSON object with keys {', '.join(SETTINGS)}")
    return data


def _json_int(text: str) -> int | str:
    """A JSON integer of config.json: an int, or its text when longer than _MAX_NUMBER_TEXT
    (Python refuses to convert past 4,300 digits), which the setting's parser then refuses
    as too large, naming the setting (rather than calling the whole file "not JSON")."""
    return int(text) if len(text) <= _MAX_NUMBER_TEXT else text


#: Unknown keys of a config.json its one warning names, and characters of each named: a
#: planted file of 20,000 keys, one 500 KB long, is one line, not 20,000 (5.6 MB).
_KEYS_NAMED, _KEY_CHARS = 3, 60


def unknown_keys_message(conf: dict, path) -> str | None:
    """The one line (without ``kcache: ``) saying which keys of ``conf`` (config file
    ``path``'s JSON object) are not settings, naming the first few (quoted, shortened) and
    how many more; None when there are none. The store warns it, ``kcache config show``
    lists it."""
    unknown = [name for name in conf if name not in SETTINGS and name not in REMOTE_SETTINGS]
    if not unknown:
        return None
    named = ", ".join(repr(name[:_KEY_CHARS]) + ("…" if len(name) > _KEY_CHARS else "")
                      for name in unknown[:_KEYS_NAMED])
    more = f" and {len(unknown) - _KEYS_NAMED} more" if len(unknown) > _KEYS_NAMED else ""
    words = "setting" if len(unknown) == 1 else "settings"
    return (f"config file {path}: unknown {words} {named}{more} ignored; accepted: "
            f"{', '.join(SETTINGS + REMOTE_SETTINGS)}")


def _warn_unknown_keys(conf: dict, path: Path) -> None:
    """One warning per config file (kind ``config-keys:<path>``): unknown_keys_message."""
    said = unknown_keys_message(conf, path)
    if said is not None:
        warn_once(f"config-keys:{path}", f"kcache: {said}")


class Source:
    """Where a setting may come from besides an argument: ``env`` (environment variable),
    ``key`` (config.json key, None when config.json cannot set it) and ``default``.

    A plain ``__slots__`` record (a row of the table below, read by every ``Store()``:
    docs/design.md, "Rules")."""

    __slots__ = ("env", "key", "default")

    def __init__(self, env: str, key: str | None, default: Any):
        self.env, self.key, self.default = env, key, default

    def __repr__(self) -> str:
        return f"Source(env={self.env!r}, key={self.key!r}, default={self.default!r})"


#: The settings other than the root, in the order they are resolved (and their errors
#: reported): the module table as data. ``readonly_roots`` is ``readonly_dirs`` in config.json.
SOURCES: dict[str, Source] = {
    "max_size": Source("KCACHE_MAX_SIZE", "max_size", DEFAULT_MAX_SIZE),
    "readonly_roots": Source("KCACHE_READONLY_DIRS", "readonly_dirs", ()),
    "lock_timeout": Source("KCACHE_LOCK_TIMEOUT", "lock_timeout", DEFAULT_LOCK_TIMEOUT),
    "disabled": Source("KCACHE_DISABLE", None, False),
    "shared": Source("KCACHE_SHARED", "shared", False),
    "max_entry_size": Source("KCACHE_MAX_ENTRY_SIZE", "max_entry_size", DEFAULT_MAX_ENTRY_SIZE),
    "quarantine_age": Source("KCACHE_QUARANTINE_AGE", "quarantine_age", DEFAULT_QUARANTINE_AGE),
    "lock_stale": Source("KCACHE_LOCK_STALE", None, DEFAULT_LOCK_STALE),
}
ROOT_ENV = "KCACHE_DIR"


def environment_snapshot(root: Path | None = None) -> tuple:
    """What a ``Store()`` resolves its settings from, besides its arguments: the environment
    variables :func:`resolve` reads, ``HOME`` and ``XDG_CACHE_HOME`` (the default root), the
    current folder (a relative root), the user, and the identity of ``<root>/config.json``
    (``root``: the store's root; its mtime, size and inode). Equal snapshots resolve alike."""
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = None
    conf = None
    if root is not None:
        try:
            # never out of the root
            st = os.stat(os.path.join(root, CONFIG_NAME), follow_symlinks=False)
            conf = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev)
        except OSError:
            pass
    return (_setting_values(), cwd, os.geteuid(), conf)


_SETTING_VARS = (ROOT_ENV, *(source.env for source in SOURCES.values()), "HOME", "XDG_CACHE_HOME")
_SETTING_KEYS = tuple(os.fsencode(name) for name in _SETTING_VARS)


def _setting_values() -> tuple:
    """The values of :data:`_SETTING_VARS` (None where unset), compared, never shown. Read
    from ``os.environ``'s own mapping of encoded names where it has one (CPython on POSIX:
    one C map instead of encoding each name, a third of a kernel's first call's check that
    the settings did not change since its definition)."""
    data = getattr(os.environ, "_data", None)
    if os.name == "posix" and isinstance(data, dict):
        return tuple(map(data.get, _SETTING_KEYS))
    return tuple(os.environ.get(name) for name in _SETTING_VARS)


#: The pseudo-setting of :func:`resolve_each` that reports ``<root>/config.json`` itself.
CONFIG_FILE = "config_file"


@dataclasses.dataclass(frozen=True)
class SettingReport:
    """One setting as :func:`resolve_each` found it.

    ``value``: the parsed value (bytes, seconds, Path, tuple of Path, bool), None when bad;
    ``origin``: "argument", "env KCACHE_X", "config <path>" or "default"; ``raw``: the value
    as given, before parsing (text from the environment, a JSON value from config.json, the
    argument or the default); ``error``: the :class:`~kcache.errors.ConfigError` that
    :func:`resolve` would raise for it, or None."""

    value: Any
    origin: str
    raw: Any
    error: ConfigError | None = None


def _pick(arg: Any, env: str, conf: dict, conf_key: str | None, conf_path: Path | None, default: Any,
          name: str) -> tuple[Any, str, str]:
    """(raw value, origin, variable name for messages) by precedence: argument > environment
    > config.json > default. The one place that precedence lives. An environment variable
    that is empty or blank counts as unset."""
    if arg is not None:
        return arg, "argument", name
    if os.environ.get(env, "").strip():
        return os.environ[env], f"env {env}", env
    if conf_key is not None and conf_key in conf:
        return conf[conf_key], f"config {conf_path}", f"{conf_key} in {conf_path}"
    return default, "default", name


def _paths(value: Any, var: str) -> tuple[Path, ...]:
    """Absolute paths of read-only layers (cache folders, or bundle files: a path that is a
    regular file is served as a bundle, kcache.tiers.bundle.layer) from an os.pathsep list or
    a list of paths; blank parts dropped, duplicates kept once; ConfigError naming ``var``
    for a wrong type, a NUL character or a lone surrogate (a config.json can hold them:
    ``"\\u0000"``, ``"\\ud800"``)."""
    if isinstance(value, (str, os.PathLike)):
        parts = str(value).split(os.pathsep)
    elif isinstance(value, (list, tuple)) and all(isinstance(p, (str, os.PathLike)) for p in value):
        parts = [str(p) for p in value]
    else:
        raise ConfigError(f"{var}={_quote(value)} is not a list of directories; accepted: paths "
                          f"(cache folders or bundle files) separated by {os.pathsep!r} or a list")
    if not all(map(_nameable, parts)):  # os.stat and realpath raise ValueError for them
        raise ConfigError(f"{var}={_quote(value)} holds a NUL character or a lone surrogate, "
                          "which no file name can; accepted: paths (cache folders or bundle "
                          f"files) separated by {os.pathsep!r} or a list")
    out: dict[Path, Path] = {}  # resolved -> as given (absolute), first one wins
    for part in parts:
        if part.strip():
            path = _absolute(Path(part))  # a folder, or a file: a bundle layer
            out.setdefault(path.resolve(), path)
    return tuple(out.values())


def _nameable(part: str) -> bool:
    """Whether ``part`` can be a file name here: no NUL, and encodable as the file system
    encodes names (``\\udc80``-``\\udcff`` stand for undecodable bytes; other surrogates
    cannot be encoded)."""
    try:
        return b"\0" not in os.fsencode(part)
    except UnicodeError:
        return False


def _positive_size(value: Any, var: str) -> int:
    size = parse_size(value, var)
    if size <= 0:
        raise ConfigError(f"{var}={_quote(value)} must be greater than 0; accepted: {SIZE_ACCEPTED}")
    return size


#: setting -> parser(raw, name for messages) -> value; each raises ConfigError.
_PARSERS = {"max_size": _positive_size, "readonly_roots": _paths, "lock_timeout": parse_duration,
            "disabled": parse_bool, "shared": parse_bool, "max_entry_size": _positive_size,
            "quarantine_age": parse_duration, "lock_stale": parse_duration}


def _report(raw: Any, origin: str, parse, var: str) -> SettingReport:
    """``parse(raw, var)`` as a report: its value, or its ConfigError."""
    try:
        return SettingReport(parse(raw, var), origin, raw)
    except ConfigError as exc:
        return SettingReport(None, origin, raw, exc)


def _env_shared() -> bool:
    """KCACHE_SHARED as set in the environment (False when unset or bad): the only source of
    shared mode that counts before a root's own config.json may be read."""
    try:
        return parse_bool(os.environ.get(SOURCES["shared"].env, ""), SOURCES["shared"].env)
    except ConfigError:
        return False


def config_trust_problem(root: Path) -> str | None:
    """Why ``<root>/config.json`` must not be read, or None: the root folder must be trusted
    (kcache.fsio.Trust) with shared mode taken from the environment only, so that a root
    owned by someone else cannot switch shared mode on (or set any other setting) through
    its own config.json. A missing root has no config.json to read."""
    try:
        st = os.stat(root)
    except OSError:
        return None
    return fsio.Trust(_env_shared()).folder_problem(st, f"the cache folder {root}")


def _read_config_report(root: Path | None, origin: str) -> SettingReport:
    """The ``"config_file"`` report of :func:`resolve_each` (see there). The config.json of a
    root that is not trusted is not read (its settings cannot reach this process)."""
    if root is None:
        return SettingReport(None, origin, {})
    path = root / CONFIG_NAME
    if config_trust_problem(root) is not None:
        return SettingReport(path, origin, {})
    try:
        conf = read_config(root)
    except ConfigError as exc:
        return SettingReport(path, origin, {}, exc)
    _warn_unknown_keys(conf, path)
    return SettingReport(path, origin, conf)


def resolve_each(root=None, max_size=None, readonly_roots=None, lock_timeout=None) -> dict[str, SettingReport]:
    """Resolve every setting on its own, recording errors instead of raising.

    Arguments as for :func:`resolve`. Returns ``{name: SettingReport}`` for ``"root"``,
    :data:`CONFIG_FILE` (``"config_file"``) and then each setting of :data:`SOURCES`, in that
    order, which is the order :func:`resolve` checks them in. The same precedence (argument >
    environment > ``<root>/config.json`` > default) and parsers apply as in :func:`resolve`
    (which is built on this), so a bad setting spoils no other: ``kcache config show`` lists
    them all and ``kcache config set`` can fix the bad one.

    The ``"config_file"`` report: ``value`` is the path of ``<root>/config.json``, ``raw``
    its contents (a dict; {} when absent, unreadable or bad), ``origin`` the root's origin,
    ``error`` the ConfigError of a file that is not a JSON object or not a regular file (its
    settings are then ignored: the others fall back to the environment and defaults). When
    the root is bad (a file, or an empty argument), config.json is not read (``value`` None)
    and the read-only roots are not compared with the root. Unknown config.json keys are
    warned once (``KcacheWarning``). Raises nothing for a bad value."""
    return _resolve_rows(root, max_size, readonly_roots, lock_timeout)


def _resolve_rows(root, max_size, readonly_roots, lock_timeout) -> dict[str, SettingReport]:
    """The work of :func:`resolve_each` (which reports it) and :func:`resolve` (which builds
    Settings from it): the one place the precedence and checks are applied."""
    raw, origin, _ = _pick(root, ROOT_ENV, {}, None, None, None, "root")
    if raw is None:
        import platformdirs  # only for the default root
        raw = platformdirs.user_cache_dir("kcache", appauthor=False)
    reports = {"root": _report(raw, origin, _check_root, origin)}
    good_root: Path | None = reports["root"].value
    reports[CONFIG_FILE] = _read_config_report(good_root, origin)
    conf, cpath = reports[CONFIG_FILE].raw, reports[CONFIG_FILE].value
    if readonly_roots is not None and not isinstance(readonly_roots, (str, os.PathLike)):
        readonly_roots = list(readonly_roots)  # e.g. a generator: read it once
    args = {"max_size": max_size, "readonly_roots": readonly_roots, "lock_timeout": lock_timeout}
    for name, src in SOURCES.items():
        raw, origin, var = _pick(args.get(name), src.env, conf, src.key, cpath, src.default, name)
        reports[name] = _report(raw, origin, _PARSERS[name], var)
    ro = reports["readonly_roots"]
    if ro.error is None and good_root is not None:  # the root is searched first anyway
        kept = tuple(p for p in ro.value if p.resolve() != good_root.resolve())
        reports["readonly_roots"] = SettingReport(kept, ro.origin, ro.raw, ro.error)
    return reports


def resolve(root=None, max_size=None, readonly_roots=None, lock_timeout=None) -> Settings:
    """Resolve every setting (see the module table). Arguments: ``root`` (path),
    ``max_size`` (bytes or size text), ``readonly_roots`` (iterable of paths or pathsep text),
    ``lock_timeout`` (seconds or duration text). Raises ConfigError on any bad value: the
    first one :func:`resolve_each` found (root, then config.json, then each setting in the
    order of :data:`SOURCES`). A config.json that is not a JSON object (or is a directory) is
    not an error here: it is warned about once (``KcacheWarning``, naming the file) and its
    settings are ignored, so a broken cache never stops the program."""
    reports = _resolve_rows(root, max_size, readonly_roots, lock_timeout)
    for name, report in reports.items():
        if report.error is None:
            continue
        if name == CONFIG_FILE:
            # a broken config.json is a broken cache: never stop the program (same wording as
            # ``kcache config show``)
            warn_once(f"config-broken:{report.value}", f"kcache: {report.error}{broken_config_hint(report.error)}; "
                      "its settings are ignored")
            continue
        raise report.error
    origins = {name: r.origin for name, r in reports.items() if name != CONFIG_FILE}
    values = {name: reports[name].value for name in SOURCES}
    conf = reports[CONFIG_FILE].raw if reports[CONFIG_FILE].error is None else {}
    return Settings(root=reports["root"].value, origins=origins, config=dict(conf), **values)


def _normalize(name: str, value: Any) -> Any:
    if name == "readonly_dirs":
        return [str(p) for p in _paths(value, name)]
    if name in REMOTE_SETTINGS:
        from ..tiers import remote  # optional: only a remote setting loads the remote tier
        field = next(f for f, (_env, key) in remote.VARIABLES.items() if key == name)
        checked = remote.check_setting(field, value, name)  # seconds for durations
        return 0.0 if checked is None else checked  # a TTL of 0 (no expiry) is stored as 0
    return _PARSERS[name](value, name)


def _shared_mode(conf: dict) -> bool:
    """Whether the root is in shared mode by KCACHE_SHARED, else by ``conf``."""
    raw = os.environ.get(SOURCES["shared"].env, "").strip() or conf.get("shared", False)
    try:
        return parse_bool(raw, "shared")
    except ConfigError:
        return False


def _make_root(root: Path, mode: int) -> None:
    """Create the cache root as the store does (kcache.localtier): exactly ``mode``, 0700 or
    in shared mode 02770 (so the group can use a root that ``config set`` created first)."""
    try:
        root.mkdir(parents=True, mode=mode)
    except FileExistsError:
        return
    os.chmod(root, mode)  # mkdir's mode is narrowed by the umask


def write_setting(root, name: str, value: Any) -> Path:
    """Set (or, with ``value=None``, remove) ``name`` in ``<root>/config.json``; returns its path.

    ``name`` is one of :data:`SETTINGS` or :data:`REMOTE_SETTINGS`; the value is validated and
    stored normalized (sizes in bytes, durations in seconds). Written atomically
    (temp file + os.replace), the read, change and write under ``<root>/.config.json.lock``
    (filelock: an fcntl lock, freed when its holder dies), so concurrent calls keep each
    other's settings. A config.json that is not a JSON object (not JSON, a list) is
    replaced by one holding only ``name``, after copying it to ``config.json.bad`` and warning
    once (``KcacheWarning``). Raises ConfigError for an unknown name or bad value, or a
    config.json that is a directory; OSError naming config.json when it cannot be written."""
    if name not in SETTINGS and name not in REMOTE_SETTINGS:
        raise ConfigError(f"unknown setting {name!r}; accepted: {', '.join(SETTINGS + REMOTE_SETTINGS)}")
    root = _check_root(Path(root), "argument")
    path = root / CONFIG_NAME
    normalized = None if value is None else _normalize(name, value)
    try:
        _make_root(root, 0o2770 if _shared_mode({} if value is None else {name: normalized}) else 0o700)
        with _config_lock(root):
            _write_locked(root, path, name, normalized)
    except OSError as exc:  # name config.json, not its temp file; the lock file if it failed
        lock = str(_lock_path(root))
        raise OSError(exc.errno, exc.strerror, lock if exc.filename == lock else str(path)) from None
    return path


def _lock_path(root: Path) -> Path:
    return root / ("." + CONFIG_NAME + ".lock")


CONFIG_LOCK_TIMEOUT = 30.0  # seconds another writer of config.json may hold its lock


def _config_lock(root: Path):
    """The lock of ``root``'s config.json (a file beside it, 0660 in a root its group may write,
    else 0600). Entered: OSError(EBUSY) after CONFIG_LOCK_TIMEOUT; opened ``O_NOFOLLOW`` by
    filelock (>= 3.20.1), so a symlink planted there is an error, never followed."""
    import filelock  # imported when a setting is written

    group = os.stat(root).st_mode & stat.S_IWGRP
    path = str(_lock_path(root))
    lock = filelock.FileLock(path, mode=0o660 if group else 0o600, timeout=CONFIG_LOCK_TIMEOUT)

    @contextlib.contextmanager
    def held():
        try:
            lock.acquire()
        except filelock.Timeout:
            raise OSError(errno.EBUSY, f"another process held it for {CONFIG_LOCK_TIMEOUT:g} s",
                          path) from None
        except OSError as exc:  # named when the lock file itself is at fault (a symlink: never
            # followed; a folder); a read-only or full root is said of config.json
            own = exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO)
            raise OSError(exc.errno, exc.strerror, path if own else None) from None
        try:
            yield
        finally:
            lock.release()

    return held()


def _write_locked(root: Path, path: Path, name: str, normalized: Any) -> None:
    """:func:`write_setting`'s read, change and write of config.json (its lock held)."""
    broken = None
    try:
        conf = read_config(root)
    except ConfigError as exc:
        if os.path.isdir(path) and not os.path.islink(path):
            raise  # never replace a directory: the user made it, it may hold anything
        broken, conf = exc, {}
    if normalized is None:
        conf.pop(name, None)
    else:
        conf[name] = normalized
    shared = _shared_mode(conf)
    mode = 0o660 if shared else 0o600  # a group sharing the cache reads it too
    _make_root(root, 0o2770 if shared else 0o700)
    if broken is not None:  # keep what was there, unread (it may be a FIFO or a symlink)
        backup = path.with_name(CONFIG_NAME + ".bad")
        os.replace(path, backup)
        warn_once(f"config-replaced:{path}", f"kcache: {broken}; replaced it by a config file holding "
                  f"only {name}; the old one is kept as {backup}")
    fsio.write_atomic(path, (json.dumps(conf, indent=2, sort_keys=True) + "\n").encode(), mode=mode)

"""Settings resolution.

Precedence for every setting: explicit argument > environment > ``<root>/config.json`` >
default. The root itself comes from the argument, ``KCACHE_DIR`` or platformdirs'
``user_cache_dir("kcache")`` (the config file lives inside it, so it cannot choose the root).

| setting | environment | config.json key | default | accepted |
| --- | --- | --- | --- | --- |
| root | KCACHE_DIR | - | user cache dir | a directory path (not a file) |
| max_size | KCACHE_MAX_SIZE | max_size | 2 GiB | bytes, or number + K/M/G/T (binary), KiB.., KB.. (decimal) |
| readonly_roots | KCACHE_READONLY_DIRS | readonly_dirs | () | os.pathsep list / JSON list of paths |
| lock_timeout | KCACHE_LOCK_TIMEOUT | lock_timeout | 600 s | seconds >= 0, or a duration like 90s, 5m |
| disabled | KCACHE_DISABLE | - | False | 1/0, true/false, yes/no, on/off |
| shared | KCACHE_SHARED | shared | False | 1/0, true/false, yes/no, on/off |

Bad values raise :class:`~kcache.errors.ConfigError` naming the variable and what is accepted.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import platformdirs

from . import atomic
from .errors import ConfigError

DEFAULT_MAX_SIZE = 2 << 30  # bytes
DEFAULT_LOCK_TIMEOUT = 600.0  # seconds; compiling one kernel can take minutes
CONFIG_NAME = "config.json"
SETTINGS = ("max_size", "readonly_dirs", "lock_timeout", "shared")

_SIZE_UNITS = {"": 1, "b": 1}
for _i, _u in enumerate("kmgt", start=1):
    _SIZE_UNITS[_u] = 1024**_i
    _SIZE_UNITS[_u + "ib"] = 1024**_i
    _SIZE_UNITS[_u + "b"] = 1000**_i
_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*")
SIZE_ACCEPTED = "bytes (e.g. 1048576) or a number with a unit: K, M, G, T or KiB, MiB, GiB, TiB (1024-based), KB, MB, GB, TB (1000-based), e.g. 500M, 2G, 2GiB"

_DUR_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DUR_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]?)\s*")
DURATION_ACCEPTED = "seconds (e.g. 30, 1.5) or a number with a unit s, m, h, d, w (e.g. 90s, 30m, 12h, 7d, 2w)"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def parse_size(value: str | int, name: str = "size") -> int:
    """Parse a size into bytes: an int, or text like "500M", "2G", "2GiB", "1.5GB", "1048576".

    K/M/G/T and KiB/MiB/GiB/TiB are 1024-based; KB/MB/GB/TB are 1000-based. Raises
    ConfigError naming ``name`` for anything else (negative, unknown unit, not a number)."""
    if isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} is not a size; accepted: {SIZE_ACCEPTED}")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"{name}={value!r} is negative; accepted: {SIZE_ACCEPTED}")
        return value
    m = _SIZE_RE.fullmatch(str(value))
    unit = m and _SIZE_UNITS.get(m.group(2).lower())
    if not m or unit is None:
        raise ConfigError(f"{name}={value!r} is not a size; accepted: {SIZE_ACCEPTED}")
    return int(float(m.group(1)) * unit)


def parse_duration(value: str | float | int, name: str = "duration") -> float:
    """Parse a duration into seconds: a number, or text like "90s", "30m", "12h", "7d", "2w".

    Raises ConfigError naming ``name`` for a negative, non-finite or unparsable value."""
    if isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} is not a duration; accepted: {DURATION_ACCEPTED}")
    if isinstance(value, (int, float)):
        if value < 0 or not math.isfinite(value):
            raise ConfigError(f"{name}={value!r} must be a finite number of seconds >= 0; accepted: {DURATION_ACCEPTED}")
        return float(value)
    m = _DUR_RE.fullmatch(str(value))
    if not m or m.group(2).lower() not in _DUR_UNITS:
        raise ConfigError(f"{name}={value!r} is not a duration; accepted: {DURATION_ACCEPTED}")
    return float(m.group(1)) * _DUR_UNITS[m.group(2).lower()]


def parse_bool(value: str | bool, name: str) -> bool:
    """Parse 1/0, true/false, yes/no, on/off (any case); ConfigError naming ``name`` otherwise."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{name}={value!r} is not a boolean; accepted: 1/0, true/false, yes/no, on/off")


def format_size(n: int) -> str:
    """Human-readable 1024-based size: 512 -> "512 B", 1536 -> "1.5 KiB", 2**31 -> "2.0 GiB"."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


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

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG_NAME


def _check_root(root: Path, origin: str) -> Path:
    root = Path(os.path.expanduser(str(root)))
    if root.exists() and not root.is_dir():
        raise ConfigError(f"cache root {str(root)!r} (from {origin}) is a file; accepted: a directory path (existing or not)")
    return root


def read_config(root: Path) -> dict[str, Any]:
    """Contents of ``<root>/config.json`` ({} if absent). ConfigError if it is not a JSON object."""
    path = Path(root) / CONFIG_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError:
        return {}  # an unreadable config must not break the program; defaults apply
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"config file {path} is not valid JSON ({exc}); accepted: a JSON object with keys {', '.join(SETTINGS)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a JSON object with keys {', '.join(SETTINGS)}")
    return data


def _pick(name: str, arg: Any, env: str, conf: dict, conf_key: str, conf_path: Path, default: Any):
    """(raw value, origin, variable name for messages) by precedence."""
    if arg is not None:
        return arg, "argument", name
    if os.environ.get(env, "") != "":
        return os.environ[env], f"env {env}", env
    if conf_key in conf:
        return conf[conf_key], f"config {conf_path}", f"{conf_key} in {conf_path}"
    return default, "default", name


def _paths(value: Any, var: str) -> tuple[Path, ...]:
    if isinstance(value, (str, os.PathLike)):
        parts = str(value).split(os.pathsep)
    elif isinstance(value, (list, tuple)) and all(isinstance(p, (str, os.PathLike)) for p in value):
        parts = [str(p) for p in value]
    else:
        raise ConfigError(f"{var}={value!r} is not a list of directories; accepted: paths separated by {os.pathsep!r} or a list")
    return tuple(Path(os.path.expanduser(p)) for p in parts if p)


def resolve(root=None, max_size=None, readonly_roots=None, lock_timeout=None) -> Settings:
    """Resolve every setting (see the module table). Arguments: ``root`` (path),
    ``max_size`` (bytes or size text), ``readonly_roots`` (iterable of paths or pathsep text),
    ``lock_timeout`` (seconds or duration text). Raises ConfigError on any bad value."""
    origins: dict[str, str] = {}
    if root is not None:
        origins["root"] = "argument"
    elif os.environ.get("KCACHE_DIR"):
        root, origins["root"] = os.environ["KCACHE_DIR"], "env KCACHE_DIR"
    else:
        root, origins["root"] = platformdirs.user_cache_dir("kcache", appauthor=False), "default"
    root = _check_root(Path(root), origins["root"])
    conf = read_config(root)
    cpath = root / CONFIG_NAME

    raw, origins["max_size"], var = _pick("max_size", max_size, "KCACHE_MAX_SIZE", conf, "max_size", cpath, DEFAULT_MAX_SIZE)
    size = parse_size(raw, var)
    if size <= 0:
        raise ConfigError(f"{var}={raw!r} must be greater than 0; accepted: {SIZE_ACCEPTED}")

    raw, origins["readonly_roots"], var = _pick("readonly_roots", None if readonly_roots is None else list(readonly_roots) if not isinstance(readonly_roots, (str, os.PathLike)) else readonly_roots,
                                                "KCACHE_READONLY_DIRS", conf, "readonly_dirs", cpath, ())
    ro = _paths(raw, var)

    raw, origins["lock_timeout"], var = _pick("lock_timeout", lock_timeout, "KCACHE_LOCK_TIMEOUT", conf, "lock_timeout", cpath, DEFAULT_LOCK_TIMEOUT)
    timeout = parse_duration(raw, var)

    raw, origins["disabled"], var = _pick("disabled", None, "KCACHE_DISABLE", {}, "", cpath, False)
    disabled = parse_bool(raw, var)
    raw, origins["shared"], var = _pick("shared", None, "KCACHE_SHARED", conf, "shared", cpath, False)
    shared = parse_bool(raw, var)
    return Settings(root, size, ro, timeout, disabled, shared, origins)


def _normalize(name: str, value: Any) -> Any:
    if name == "max_size":
        size = parse_size(value, name)
        if size <= 0:
            raise ConfigError(f"max_size={value!r} must be greater than 0; accepted: {SIZE_ACCEPTED}")
        return size
    if name == "lock_timeout":
        return parse_duration(value, name)
    if name == "shared":
        return parse_bool(value, name)
    return [str(p) for p in _paths(value, name)]


def write_setting(root, name: str, value: Any) -> Path:
    """Set (or, with ``value=None``, remove) ``name`` in ``<root>/config.json``; returns its path.

    ``name`` is one of max_size, readonly_dirs, lock_timeout, shared; the value is validated and
    stored normalized (max_size in bytes, lock_timeout in seconds). Written atomically
    (temp file + os.replace). Raises ConfigError for an unknown name or bad value."""
    if name not in SETTINGS:
        raise ConfigError(f"unknown setting {name!r}; accepted: {', '.join(SETTINGS)}")
    root = _check_root(Path(root), "argument")
    conf = read_config(root)
    if value is None:
        conf.pop(name, None)
    else:
        conf[name] = _normalize(name, value)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = root / CONFIG_NAME
    atomic.write_atomic(path, (json.dumps(conf, indent=2, sort_keys=True) + "\n").encode())
    return path

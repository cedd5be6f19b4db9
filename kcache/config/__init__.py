"""Settings: their values as text (values: sizes, durations, booleans) and their resolution
from arguments, the environment and ``<root>/config.json`` (settings: Settings, resolve,
resolve_each, write_setting). ``kcache.config`` keeps every name it has exported."""
from .settings import *  # noqa: F401,F403
from .values import *  # noqa: F401,F403

"""Old import path of kcache.disk.paths (docs cite it); nothing inside kcache imports this module."""
from .disk.paths import *  # noqa: F401,F403

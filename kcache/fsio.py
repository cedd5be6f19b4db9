"""Old import path of kcache.disk.fsio (docs cite it); nothing inside kcache imports this module."""
from .disk.fsio import *  # noqa: F401,F403

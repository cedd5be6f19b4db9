"""Old import path of kcache.disk.locks (docs cite it); nothing inside kcache imports this module."""
from .disk.locks import *  # noqa: F401,F403

"""Old import path of kcache.store.stats (docs cite kcache.stats); nothing inside kcache
imports this module."""
from .store.stats import *  # noqa: F401,F403

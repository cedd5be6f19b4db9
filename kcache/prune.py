"""Old import path of kcache.store.reports (docs cite kcache.prune.TEMP_MAX_AGE); nothing
inside kcache imports this module."""
from .store.reports import *  # noqa: F401,F403

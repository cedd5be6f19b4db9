"""Old import path of kcache.entry.artifacts (docs cite it); nothing inside kcache imports it."""
from .entry.artifacts import *  # noqa: F401,F403

"""Old import path of kcache.tiers.bundle (docs cite kcache.bundle.BundleTier); nothing inside
kcache imports this module."""
from .tiers.bundle.v2 import *  # noqa: F401,F403

"""Old import path of kcache.tiers.remote (docs cite kcache.remote); nothing inside kcache
imports this module."""
from .tiers.remote import *  # noqa: F401,F403
from .tiers.remote import (DEFAULT_LEASE_TTL, DEFAULT_MAX_ERRORS, DEFAULT_MAX_WAIT,  # noqa: F401
                           DEFAULT_NAMESPACE, DEFAULT_TIMEOUT, DEFAULTS, MAX_TIMEOUT, MAX_WAIT,
                           NAMESPACE_ACCEPTED, NAMESPACE_RE, REDIS_SCHEMES, URL_ACCEPTED, VARIABLES,
                           Flight, Unopened, check_namespace, check_timeout, check_url, describe,
                           redact, shown, url_credentials)

"""Entries: the file format (format: encode, decode, the bounds), the checks of the artifacts
an entry carries (artifacts: cubin, PTX, LTO-IR) and the header as listings give it (info:
EntryInfo). ``kcache.entry`` keeps the names it has always exported."""
from .format import *  # noqa: F401,F403
from .info import EntryInfo  # noqa: F401

"""Why clear/prune/remove_many left an entry file in place (``NotRemoved.reason`` starts so),
and how old a temp file must be to be swept: plain constants, apart from the reports of
kcache.prune, so that a read (which only names them) does not import those classes."""

TEMP_MAX_AGE = 3600.0  # seconds; a writer never takes that long between create and replace

BUSY = "busy (locked by another process)"
NOT_REGULAR = "not a regular file"
NEWER = "written by a newer kcache format version (never deleted)"

"""The CLI's own exceptions, mapped to exit statuses by ``kcache.cli.main``.

0 ok; 1 the operation met or found problems (:class:`Problem`, :class:`NotFound`); 2 usage
error (:class:`UsageError`). Each carries one line for stderr.
"""


class UsageError(Exception):
    """Bad input from the user (an unknown option value, a malformed key prefix, an
    ambiguous prefix): one line on stderr, exit status 2."""


class Problem(Exception):
    """The operation could not be done or found problems: one line on stderr, exit status 1."""


class NotFound(Problem):
    """Well-formed input naming something that is not there (a key prefix no entry has):
    exit status 1, as ``grep`` does for no match; 2 stays for usage errors."""

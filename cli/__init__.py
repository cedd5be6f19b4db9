"""The kcache command-line interface (see docs/cli.md).

``main`` is the console script ``kcache = "kcache.cli:main"``. This package never imports
numba or ``kcache.dispatcher`` (only a future ``warm`` command will), and imports rich only
when it draws a table or a progress bar, so that ``kcache ls`` starts quickly.
"""
from kcache.cli.main import main

__all__ = ["main"]

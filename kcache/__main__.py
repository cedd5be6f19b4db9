"""``python -m kcache``: the same as the ``kcache`` command (see docs/cli.md)."""
from kcache.cli import main
raise SystemExit(main())

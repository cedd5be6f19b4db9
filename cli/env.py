"""Every ``KCACHE_*`` environment variable, in one table: what ``kcache --help`` lists in its
epilog, what docs/cli-reference.md and docs/guide.md show. tests/test_docs.py greps the code
for ``KCACHE_[A-Z_]+`` and fails when a variable the code reads is missing here, so a new
setting cannot go undocumented.

Plain data (no import of the store): ``kcache --help`` pays nothing for it.
"""
from __future__ import annotations

from typing import NamedTuple


class Variable(NamedTuple):
    """One variable: its name, what it does (one line), its default, the config.json key that
    sets the same thing (or None), and the page that says more."""

    name: str
    meaning: str
    default: str
    config_key: str | None
    doc: str


#: In the order a user meets them: the cache, programs, CLI/maintenance, bundles, remote.
VARIABLES = (
    Variable("KCACHE_DIR", "the cache root", "the platform cache dir (~/.cache/kcache on Linux)",
             None, "store.md#configuration"),
    Variable("KCACHE_MAX_SIZE", "size cap of the root; least recently used entries are evicted "
             "past it (e.g. 10G)", "2 GiB", "max_size", "guide.md#size-cap-and-eviction"),
    Variable("KCACHE_READONLY_DIRS", "caches read after the root and never written "
             "(os.pathsep list)", "none", "readonly_dirs", "security.md#read-only-layers"),
    Variable("KCACHE_LOCK_TIMEOUT", "how long a process waits for another one compiling the "
             "same kernel (e.g. 90s, 30m)", "600 s", "lock_timeout", "store.md#configuration"),
    Variable("KCACHE_LOCK_STALE", "a lock holder without a heartbeat this long (stopped) "
             "is not waited for (0: always wait)", "30 s", None, "store.md#configuration"),
    Variable("KCACHE_SHARED", "1: a cache for a Unix group (setgid folders, group-writable "
             "files)", "off", "shared", "security.md#private-and-shared-mode"),
    Variable("KCACHE_MAX_ENTRY_SIZE", "entry files larger than this are refused unread",
             "256 MiB", "max_entry_size", "security.md#limits"),
    Variable("KCACHE_QUARANTINE_AGE", "prune removes quarantined files older than this",
             "30 days", "quarantine_age", "security.md#limits"),
    Variable("KCACHE_DISABLE", "1: programs neither read nor write the cache (kcache "
             "commands ignore it)", "off", None, "guide.md#settings-and-where-they-come-from"),
    Variable("KCACHE_ENABLE", "1: numba.cuda.jit(cache=True) and numba_cuda_mlir.cuda.jit("
             "cache=True) kernels use kcache instead of their front-end's cache; all: every "
             "kernel", "off", None, "guide.md#transparent-mode"),
    Variable("KCACHE_EXPLAIN", "1 (true, yes, on): log why each miss missed (logger kcache.explain)", "off",
             None, "guide.md#explaining-a-miss"),
    Variable("KCACHE_REQUIRE_HIT", "1: a kernel call that would compile raises "
             "kcache.CacheMissError; warn: warned once per kernel, then compiled", "off", None,
             "guide.md#an-image-that-must-never-compile"),
    Variable("KCACHE_RECACHE", "1 (true, yes, on): compile each kernel looked up and "
             "overwrite its entry even when present (ccache --recache)", "off", None,
             "guide.md#compiling-again-over-an-entry"),
    Variable("KCACHE_RECORD", "FILE: record the kernel signatures a run launches, for "
             "kcache warm --signatures FILE", "off", None, "warm.md"),
    Variable("KCACHE_SECRET", "HMAC secret signing bundles (export/import) and, without "
             "KCACHE_REMOTE_SECRET, remote values", "none", None, "security.md"),
    Variable("KCACHE_REMOTE", "remote tier URL: redis://, rediss://, unix://, s3://, any "
             "fsspec URL", "none", "remote", "remote.md"),
    Variable("KCACHE_REMOTE_PASSWORD", "Redis password when the URL has none", "none", None,
             "remote.md#settings"),
    Variable("KCACHE_REMOTE_NAMESPACE", "prefix of the remote's keys", "kcache",
             "remote_namespace", "remote.md#settings"),
    Variable("KCACHE_REMOTE_READONLY", "1: read the remote, never publish to it", "off",
             "remote_readonly", "remote.md#settings"),
    Variable("KCACHE_REMOTE_SECRET", "signing secret of remote values (at least 16 bytes)",
             "KCACHE_SECRET", None, "remote.md#settings"),
    Variable("KCACHE_REMOTE_TIMEOUT", "seconds for each remote connect and read (a whole call: "
             "2 x, + 1 s per MiB, at most 10 x)", "1 s", "remote_timeout", "remote.md#settings"),
    Variable("KCACHE_REMOTE_TTL", "how long a Redis value lives (0: no expiry)", "none",
             "remote_ttl", "remote.md#settings"),
    Variable("KCACHE_REMOTE_WAIT", "how long to wait for another machine compiling the same "
             "kernel (Redis)", "60 s", "remote_wait", "remote.md#settings"),
)

#: Names that only the test suite reads (never documented for users).
TEST_ONLY_PREFIX = "KCACHE_TEST_"


def names() -> tuple[str, ...]:
    """The documented variable names, in table order."""
    return tuple(v.name for v in VARIABLES)


def epilog() -> str:
    """The ``kcache --help`` epilog: exit statuses, then one line per variable."""
    import textwrap

    width = max(len(v.name) for v in VARIABLES)
    lines = ["exit status: 0 ok, 1 the operation found problems, 2 usage error", "",
             "environment (argument > environment > <root>/config.json > default):"]
    for v in VARIABLES:  # 79 columns, the meaning wrapped under itself
        # no-break spaces keep "[default: 1 s]" on one line (textwrap splits on ASCII blanks),
        # when it fits on one: a longer one wraps between its words, never inside a path
        default = f"[default: {v.default}]"
        if len(default) <= 79 - (width + 4):
            default = default.replace(" ", "\u00a0")
        lines += [row.replace("\u00a0", " ") for row in textwrap.wrap(
            f"{v.meaning} {default}", width=79, initial_indent=f"  {v.name:<{width}}  ",
            subsequent_indent=" " * (width + 4), break_long_words=False,
            break_on_hyphens=False)]
    lines += ["", "docs: docs/README.md; every command and flag: docs/cli-reference.md"]
    return "\n".join(lines)

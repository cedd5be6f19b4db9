"""``kcache warm``: compile kernels for chosen compute capabilities without a GPU (docs/warm.md).

Imports each TARGET (a .py file, a folder, a module or package name), finds its kernels and
their eager signatures, adds the lines of ``--signatures`` files and, with ``--replay``, the
stale entries of the cache whose kernels are defined in the TARGETs (no other module is ever
imported for an entry), then compiles every (kernel, signature, cc) missing from the cache in
``--jobs`` worker processes. Exit status: 0 all compiled or cached; 1 something failed, the
run warmed nothing, ``--replay`` without a TARGET, or ``--strict`` with a kernel of unknown
signature (one line on stderr says which); 2 bad usage (a bad TARGET, ``--cc`` or signatures
file line: one line on stderr).
"""
from __future__ import annotations

import argparse
import time

from kcache.cli.args import want_json, want_wide
from kcache.cli.cache import ensure_writable, open_store
from kcache.cli.errors import Problem, UsageError
from kcache.cli.fmt import entries_text, human_seconds, plain_seconds, plural
from kcache.cli.output import Column, is_terminal, message, print_json, print_table
from kcache.cli.text import line

MAX_JOBS = 256
#: kcache.dispatcher.frontends.NAMES (kept here: the parser must not import the dispatcher).
FRONTENDS = ("numba-cuda", "numba-cuda-mlir")
#: The device a module-name TARGET's parent packages see while ``--replay`` without ``--cc``
#: finds its modules (only device functions compiled at import read it; no key does).
REPLAY_IMPORT_CC = (9, 0)
#: Header of the plain (piped) table: the JSON result fields (docs/warm.md).
PLAIN_NAMES = ("kernel", "display", "arch", "status", "key", "compile_seconds", "reason")
COLUMNS = (
    Column("Kernel", shrink=16, keep=24, cut="kernel"),
    Column("Signature", shrink=12, drop=2, cut="distinct"),
    Column("Arch"),
    Column("Result"),
    Column("Time", right=True, drop=1),
)
_WORDS = {"compiled": "compiled", "cached": "already cached", "would_compile": "would compile",
          "failed": "failed", "skipped": "skipped"}


def register(sub):
    """Add the ``warm`` subparser to ``sub`` and return it."""
    p = sub.add_parser(
        "warm", help="compile kernels for chosen compute capabilities (no GPU needed)",
        description="Import TARGETs, find their kernels and compile each known signature "
                    "(eager signatures, --signatures files, --replay) for each --cc, in "
                    "--jobs processes. Entries already cached are not compiled again. JSON "
                    "schema and signatures file format: docs/warm.md.")
    p.add_argument("targets", nargs="*", metavar="TARGET",
                   help="a .py file, a folder (walked), or a module or package name")
    p.add_argument("--cc", action="append", metavar="CC[,CC...]", default=[],
                   help="compute capabilities, e.g. 8.0,9.0 (also 80, sm_90, sm_90a; "
                        "repeatable); with --replay: only these (default: every cc "
                        "recorded)")
    p.add_argument("--jobs", "-j", type=_jobs_arg, metavar="N",
                   help="processes that compile, this one included (default: the cores "
                        "this process may use)")
    p.add_argument("--signatures", action="append", metavar="FILE", default=[],
                   help="signatures file: 'module:qualname signature' per line (repeatable)")
    p.add_argument("--replay", action="store_true",
                   help="compile again, for the current toolchain, the entries an earlier "
                        "one made of the kernels defined in the TARGETs (only modules found "
                        "in the TARGETs are imported)")
    p.add_argument("--dry-run", "-n", action="store_true",
                   help="list what would be compiled; compile and write nothing")
    p.add_argument("--check", action="store_true",
                   help="--dry-run that fails (exit status 1) when a kernel would be "
                        "compiled: the cache is not up to date (a container build's check; "
                        "as uv lock --check)")
    p.add_argument("--recache", action="store_true",
                   help="compile entries already cached too and overwrite them (as "
                        "KCACHE_RECACHE=1; ccache's --recache): for a suspected bad entry")
    p.add_argument("--include-tests", action="store_true",
                   help="also walk tests (tests/ and test/ folders, test_*.py, *_test.py)")
    p.add_argument("--strict", action="store_true",
                   help="also fail (exit status 1) when a kernel found has no known signature")
    # choices: what completion offers (the type's own message answers a bad one first)
    p.add_argument("--frontend", type=_frontend_name, metavar="NAME", choices=FRONTENDS,
                   help="the compiler front-end whose kernels are warmed: numba-cuda or "
                        "numba-cuda-mlir (or mlir, as ls shows it; default: numba-cuda when "
                        "installed, else numba-cuda-mlir)")
    return p


def _frontend(args):
    """The front-end ``--frontend`` names, else ``frontends.default()``. Problem (exit 1) when
    it is not installed."""
    from kcache.dispatcher import frontends
    try:
        if args.frontend is not None:
            return frontends.by_name(args.frontend)
        return frontends.default()
    except ImportError as exc:  # the extras as kcache.jit names them
        if args.frontend is None:  # frontends.default's line names both, and their extras
            raise Problem(f"warm: {exc}") from None
        raise Problem(f"warm needs {args.frontend} ({exc}); "
                      f"{frontends.install_hint([args.frontend])}") from None


def _frontend_name(text: str) -> str:
    """``--frontend``'s value: a front-end's name, or its short name (``mlir``, as ``ls``
    shows it)."""
    name = {"mlir": "numba-cuda-mlir"}.get(text, text)
    if name not in FRONTENDS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a front-end kcache knows; "
                                         f"accepted: {', '.join(FRONTENDS)} (or mlir)")
    return name


def _jobs_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= MAX_JOBS:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_JOBS}: {text!r}")
    return value


def run(args) -> int:
    """Warm the cache; print the report (JSON: docs/warm.md). Returns 1 if anything failed."""
    start = time.perf_counter()
    args.dry_run = args.dry_run or args.check  # a check compiles and writes nothing
    if not (args.targets or args.signatures or args.replay):
        raise UsageError("warm needs a TARGET, --signatures FILE or --replay (see 'kcache "
                         "warm --help')")
    if not args.cc and (args.signatures or (args.targets and not args.replay)):
        raise UsageError("warm needs --cc, e.g. --cc 8.0,9.0 (forms: 8.0, 80, sm_90, sm_90a)")
    FRONTEND = _frontend(args)  # the front-end warm compiles with, handed to everything below
    reason = FRONTEND.refusal()
    if reason is not None:  # a release kcache does not support: nothing can be warmed
        raise Problem(reason)
    from kcache.dispatcher import discover, replay, sigfile, warm
    try:
        ccs = warm.parse_cc_list(FRONTEND, args.cc) if args.cc else []
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        lines = [line for path in args.signatures
                 for line in sigfile.read_signatures(FRONTEND, path)]
    except sigfile.SignatureFileError as exc:
        raise UsageError(str(exc)) from None
    store = open_store(args)
    if not args.dry_run:
        ensure_writable(store, "nothing was compiled")
    plan = warm.Plan(FRONTEND)
    try:
        if ccs and (args.targets or lines):
            warm.plan_targets(plan, args.targets, lines, ccs, args.include_tests)
        elif args.targets:  # --replay without --cc: the TARGETs' modules, nothing imported
            warm.find_modules(plan, args.targets, REPLAY_IMPORT_CC, args.include_tests)
    except discover.TargetError as exc:
        raise UsageError(str(exc)) from None
    if args.replay:
        replay.plan_replay(plan, _KernelsOnly(store), ccs or None,
                           plan.modules if args.targets else None)
    jobs = args.jobs or warm.default_jobs()
    args.recache = args.recache or _recache_env()  # KCACHE_RECACHE=1 means --recache here too
    used: dict = {}  # how many processes compiled (the --jobs setting is at most that)
    with _Progress(len(plan.tasks), quiet=want_json(args)) as progress:
        outcomes = warm.run_tasks(plan.tasks, frontend=FRONTEND, root=store.root, jobs=jobs,
                                  dry_run=args.dry_run, path_entries=plan.path_entries,
                                  on_done=progress.done, recache=args.recache, report=used)
    if not args.dry_run:
        warm.drop_evicted(plan.tasks, outcomes, store)
    processes = used.get("processes", 1)
    rows = plan.rows + [warm.row_of(t, outcomes[t.id]) for t in plan.tasks]
    seconds = time.perf_counter() - start
    counts = {status: sum(r.status == status for r in rows) for status in warm.STATUSES}
    if want_json(args):
        print_json(_document(args, store, ccs, jobs, rows, counts, plan, seconds, warm,
                             processes))
    else:
        _print_report(args, rows, counts, plan, seconds, processes, args.dry_run)
    status, why = _exit_status(args, counts, plan)
    if why:
        message(f"kcache: warm: {why}")
    return status


def _exit_status(args, counts: dict, plan) -> tuple[int, str | None]:
    """warm's exit status and, when it is 1 for a reason the table does not show, the line
    that says why (docs/warm.md): a build step that warms nothing must not pass."""
    if counts["failed"]:
        return 1, None
    if args.replay and not args.targets:
        return 1, ("--replay imports only modules found in the TARGETs named: name them, "
                   "e.g. kcache warm --replay src/ --cc 9.0 (nothing was imported; the "
                   "recorded kernels are listed)")
    warmed = counts["compiled"] + counts["cached"] + counts["would_compile"] + plan.current
    if not warmed:
        done = "would be compiled" if args.dry_run else "was compiled"
        return 1, f"warmed nothing: no kernel {done} and none is cached"
    if args.check and counts["would_compile"]:
        from kcache.dispatcher.process import explain_enabled
        n = counts["would_compile"]
        why = "" if explain_enabled() else "; KCACHE_EXPLAIN=1 says why"
        return 1, (f"--check: {plural(n, 'kernel')} would be compiled: the cache is not up "
                   f"to date (the rows marked would compile{why})")
    if args.strict and plan.without_signatures:
        n = len(plan.without_signatures)
        return 1, f"--strict: {plural(n, 'kernel')} found without a known signature"
    return 0, None


class _KernelsOnly:
    """``store`` whose ``entries()`` are its kernel entries only: ``--replay`` compiles
    numba-cuda kernels again; a cuda.core program entry (docs/programs.md) holds no Python
    function to compile, so it is skipped."""

    def __init__(self, store) -> None:
        self._store = store

    def __getattr__(self, name):
        return getattr(self._store, name)

    def entries(self, **kwargs):
        from kcache.entry.format import entry_kind
        return (info for info in self._store.entries(**kwargs)
                if entry_kind(info.components) == "kernel")


def _recache_env() -> bool:
    from kcache.dispatcher.process import recache_enabled
    return recache_enabled()


def _document(args, store, ccs, jobs, rows, counts, plan, seconds, warm,
              processes: int) -> dict:
    return {
        "root": str(store.root),
        "frontend": plan.frontend.name,
        "cc": [warm.cc_text(cc) for cc in ccs],
        "jobs": jobs,
        "processes": processes,
        "dry_run": bool(args.dry_run),
        "check": bool(args.check),
        "replay": bool(args.replay),
        "strict": bool(args.strict),
        "recache": bool(args.recache),
        "current_entries": plan.current,
        "seconds": seconds,
        "summary": counts,
        "remote_hits": sum(row.remote for row in rows),
        "results": [row.as_json() for row in rows],
        "without_signatures": list(plan.without_signatures),
        "other_frontends": {name: list(found) for name, found in plan.other_frontends.items()},
    }


def _print_report(args, rows, counts, plan, seconds, processes, dry_run) -> None:
    """The table (fitted to a terminal, TSV under the JSON names when piped), then each row's
    reason on a terminal (a failure's, a skip's, a would-compile's under KCACHE_EXPLAIN: a
    reason does not fit a table cell), then the summary."""
    from kcache.entry.shortsig import short_signature
    # numba's short form where space is short (--wide, piped and --json: the full form)
    shown = (lambda text: text) if want_wide(args) else short_signature
    print_table(
        COLUMNS, rows,
        human=lambda r: (r.kernel, shown(r.display) or "", r.arch, _word(r.status, r.remote),
                         human_seconds(r.compile_seconds) if r.compile_seconds else ""),
        plain=lambda r: (r.kernel, r.display, r.arch, r.status, r.key,
                         plain_seconds(r.compile_seconds), r.reason),
        names=PLAIN_NAMES, wide=want_wide(args))
    if is_terminal():
        for r in rows:
            if r.reason:
                where = " ".join(x for x in (shown(r.display), r.arch) if x)
                print(line(f"{_WORDS[r.status]}: {r.kernel} {where}: {r.reason}"))
    fetched = sum(r.remote for r in rows)  # cached, found in the remote: downloaded
    said = {**_WORDS, "cached": _WORDS["cached"] + (f" ({fetched} from the remote)" if fetched
                                                    else "")}
    done = ", ".join(f"{counts[s]} {said[s]}" for s in ("compiled", "cached", "would_compile",
                                                         "failed", "skipped")
                     if counts[s] or s in ("compiled", "cached", "failed"))
    if plan.current:
        done += f", {entries_text(plan.current)} of this toolchain already there"
    what = "dry run: " if dry_run else ""
    message(f"kcache: warm: {what}{done} in {seconds:.1f} s ({plural(processes, 'job')})")
    if plan.without_signatures:
        message(f"kcache: warm: {plural(len(plan.without_signatures), 'kernel')} without a "
                f"known signature, not compiled: {_names(plan.without_signatures)} (list them "
                "in a --signatures "
                "file, or record a run with KCACHE_RECORD=FILE; docs/warm.md)")
    for name, found in plan.other_frontends.items():
        message(f"kcache: warm: {plural(len(found), name + ' kernel')} found, not warmed by "
                f"this {plan.frontend.name} run: {_names(found)} (warm them with --frontend "
                f"{name})")


def _word(status: str, remote) -> str:
    """How a row's status reads (a cached entry found in the remote: "from the remote")."""
    return "from the remote" if status == "cached" and remote else _WORDS[status]


def _names(found: list, shown: int = 5) -> str:
    """The first ``shown`` of ``found``, then how many more."""
    more = f" and {len(found) - shown} more" if len(found) > shown else ""
    return ", ".join(found[:shown]) + more


def _kernel_of(task, outcome: dict) -> str:
    """The kernel's name in the report: replay's "module:attr" of a kernel bound to a module
    name its entry's module:qualname does not reach (dispatcher/replay_find.py)."""
    return outcome.get("kernel") or task.kernel


class _Progress:
    """A rich progress bar on a terminal (stderr); plain lines on stderr otherwise (none with
    --json)."""

    def __init__(self, total: int, quiet: bool):
        self.total, self.quiet, self.n = total, quiet, 0
        self.bar = None

    def __enter__(self):
        import sys
        if self.total and sys.stderr.isatty():
            from kcache.cli.output import counting_progress
            self.bar = counting_progress("warm", self.total, transient=is_terminal())
            self.bar.start()
            self.task = self.bar.add_task("", total=self.total)
        return self

    def done(self, task, outcome) -> None:
        self.n += 1
        status = outcome["status"]
        if self.bar is not None:
            self.bar.update(self.task, advance=1,
                            description=self.bar.describe(_word(status, outcome.get("remote")),
                                                          _kernel_of(task, outcome)))
        elif not self.quiet:
            detail = outcome.get("reason") or (
                f"{outcome['compile_seconds']:.2f} s" if outcome.get("compile_seconds") else "")
            from kcache.entry.shortsig import short_signature
            word = _word(status, outcome.get("remote"))
            message(f"kcache: warm: [{self.n}/{self.total}] {word}: {_kernel_of(task, outcome)} "
                    f"{short_signature(task.display)} {outcome.get('arch') or ''} "
                    f"{detail}".rstrip())

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False

"""``kcache warm``: plan (kernel, signature, cc) compiles and run them in several processes.

The plan comes from the TARGETs' kernels (eager signatures, dispatcher/discover.py), from
signatures files (dispatcher/sigfile.py) and, with ``--replay``, from stale entries
(dispatcher/replay.py). Each :class:`Task` is plain data (strings, numbers, tuples and dicts
of them), handed to a worker through ``concurrent.futures`` (a pipe between this process and
the workers it started; nothing is ever unpickled from a file or a cache); each worker
imports the kernel's module itself and calls ``compile_for_report`` for one signature and one
cc. numba's compiler is not thread-safe and ``compile_for`` patches numba globals
(``offline_target``), hence processes, started with "spawn" (fresh interpreters:
nothing of this process's numba state is inherited). This process compiles too, from the
same queue; ``jobs=1`` starts no worker, and neither do fewer than TASKS_PER_WORKER compiles.

An entry already in the cache is found with ``Store.header`` (an existence check: no hit is
counted, nothing is compiled); ``dry_run`` stops there for every task.
"""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import multiprocessing
import os
import queue
import re
import sys
import threading
import traceback
import warnings

from kcache import Store
from kcache import arch as _arch
from kcache.text import QUOTE_LIMIT, cut
from kcache.warn import KcacheWarning

from . import discover, replay_find, sigspec
from .aot import CompileForError, check_cc, compile_for_report, evicted_reason, still_stored
from .components import Uncacheable, arch_name
from .keying import kernel_key
from .process import STATE, explain_enabled
from .sigfile import split_kernel

__all__ = ["Task", "Row", "parse_cc_list", "cc_text", "plan_targets", "find_modules",
           "run_tasks", "STATUSES", "default_jobs"]

#: Row statuses, in the order the summary lists them.
STATUSES = ("compiled", "cached", "would_compile", "failed", "skipped")


def parse_cc_list(frontend, values) -> list:
    """``["8.0,9.0", "sm_90a"]`` (each value a comma-separated list, as ``--cc`` is given,
    possibly repeated) -> compute capabilities in order, duplicates dropped. Each item in
    any form ``compile_for`` takes (``8.0``, ``90``, ``sm_90``, ``sm_90a``) and supported by
    the installed toolkit (``frontend``'s, a ``frontends.base.Frontend``). Raises ValueError
    naming the bad item. Parsed by ``check_cc`` (``kcache.arch.parse_cc`` plus the
    toolkit's list)."""
    out = []
    for value in values:
        items = [item.strip() for item in str(value).split(",")]
        for item in items:
            if not item:
                raise ValueError(f"--cc {value!r}: empty compute capability (accepted: a "
                                 "comma-separated list such as 8.0,9.0 or sm_80,sm_90a)")
            try:
                cc = check_cc(frontend, item)
            except ValueError as exc:
                problem = _arch.option_problem("--cc", item, frontend.supported_ccs())
                raise ValueError(problem or f"--cc {item!r}: {exc}") from None
            if cc not in out:
                out.append(cc)
    if not out:
        raise ValueError("--cc needs at least one compute capability, e.g. --cc 8.0,9.0")
    return out


def cc_text(cc) -> str:
    """(9, 0) -> "9.0"."""
    return f"{cc[0]}.{cc[1]}"


#: Compiles that make starting one more worker worthwhile: fewer are done by warm itself
#: (a compile takes 0.2-1 s, starting a worker about 2 s of CPU, during which warm compiles).
TASKS_PER_WORKER = 4


def default_jobs() -> int:
    """The cores this process may run on (``os.sched_getaffinity``, else ``os.cpu_count``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclasses.dataclass
class Task:
    """One (kernel, signature, cc) to compile. Plain data (it is sent to worker processes).

    ``kernel`` "module:qualname"; ``path_entry``: folder the module needs on ``sys.path``
    (None: already there); ``sigspec``: the signature as text (None: the kernel's eager
    signature number ``eager_index``, for types that have no text form); ``display``:
    numba's spelling of the argument types; ``cc`` (major, minor); ``origin``: "eager",
    "FILE:LINE" or "replay"; ``cache_key``/``own_cache_key``: replay compiles with the
    entry's cache_key; ``expect``: replay's entry components (the kernel must still match
    them but for the toolchain)."""
    id: int
    kernel: str
    path_entry: str | None
    sigspec: str | None
    eager_index: int | None
    display: str
    cc: tuple
    origin: str
    cache_key: str | None = None
    own_cache_key: bool = False
    expect: dict | None = None

    @property
    def replay(self) -> bool:
        return self.expect is not None


@dataclasses.dataclass
class Row:
    """One line of warm's report (docs/warm.md, JSON "results")."""
    kernel: str
    status: str
    origin: str
    signature: str | None = None
    display: str | None = None
    cc: str | None = None
    arch: str | None = None
    key: str | None = None
    compile_seconds: float | None = None
    reason: str | None = None
    remote: bool = False  # cached: found in the remote tier (downloaded), not in the root

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


def row_of(task: Task, outcome: dict) -> Row:
    """The report row of ``task`` given its worker ``outcome`` (its reason may quote an
    entry's text, replay's kernels: one escaped line of at most REASON_LIMIT characters)."""
    reason = outcome.get("reason")
    return Row(kernel=outcome.get("kernel") or task.kernel, status=outcome["status"],
               origin=task.origin, signature=task.sigspec, display=task.display,
               cc=cc_text(task.cc),
               arch=outcome.get("arch") or arch_name(task.cc), key=outcome.get("key"),
               compile_seconds=outcome.get("compile_seconds"),
               reason=None if reason is None else cut(reason, REASON_LIMIT),
               remote=bool(outcome.get("remote")))


REASON_LIMIT = 2 * QUOTE_LIMIT  # characters of a row's reason


# --- planning ---------------------------------------------------------------------------------

@dataclasses.dataclass
class Plan:
    """What warm will do, for kernels of ``frontend`` (a ``frontends.base.Frontend``):
    ``tasks``; ``rows`` known before running (modules that failed to
    import, files that cannot be imported by name); ``without_signatures`` (kernels found
    with no known signature); ``path_entries`` (folders workers put on sys.path);
    ``modules`` (``{module name: path entry}`` of the modules found in the TARGETs: the only
    ones replay imports); ``current`` (replay: entries of those modules' kernels made by
    the current toolchain already, warm without a compile); ``other_frontends`` (``{front-end
    name: ["module:qualname", ...]}``: kernels found that another front-end made, not warmed
    by this run)."""
    frontend: object
    tasks: list = dataclasses.field(default_factory=list)
    rows: list = dataclasses.field(default_factory=list)
    without_signatures: list = dataclasses.field(default_factory=list)
    other_frontends: dict = dataclasses.field(default_factory=dict)
    path_entries: list = dataclasses.field(default_factory=list)
    modules: dict = dataclasses.field(default_factory=dict)
    current: int = 0
    _seen: dict = dataclasses.field(default_factory=dict)

    def add(self, *, kernel, path_entry, argtypes, sigspec_text, eager_index, cc, origin,
            **extra) -> Task | None:
        """Add a task unless the same (kernel, argument types, cc) is planned already (for
        replay's, of the same components: a factory's closures share their entries' name)."""
        memo = (kernel, self.frontend.signature_string(argtypes), tuple(cc))
        expect = extra.get("expect")
        variant = memo + (replay_find.variant(expect),) if expect is not None else memo
        if memo in self._seen or variant in self._seen:
            return None
        task = Task(len(self.tasks), kernel, path_entry, sigspec_text, eager_index,
                    self.frontend.signature_display(argtypes), tuple(cc), origin, **extra)
        self._seen[variant] = task
        self.tasks.append(task)
        if path_entry and path_entry not in self.path_entries:
            self.path_entries.append(path_entry)
        return task


def plan_targets(plan: Plan, targets, sig_lines, ccs, include_tests=False) -> Plan:
    """Add to ``plan`` a task per (kernel, signature, cc): kernels found in ``targets``
    (their eager signatures) and every line of ``sig_lines`` (``sigfile.SigLine``), for
    each cc of ``ccs``. Imports the targets' modules (``discover.import_module``). Raises
    ``discover.TargetError`` for a TARGET that is no file, folder or module."""
    refs = find_modules(plan, targets, ccs[0], include_tests)
    by_kernel: dict = {}
    for line in sig_lines:
        by_kernel.setdefault(line.kernel, []).append(line)
    entries = {}
    for ref in refs:
        entries[ref.name] = ref.path_entry
        try:
            module = discover.import_module(plan.frontend, ref, ccs[0])
        except (Exception, SystemExit) as exc:  # whatever the module raises at import
            plan.rows.append(Row(kernel=ref.name, status="failed", origin="import",
                                 reason=f"cannot import {ref.name}{_raised_at(exc, ref)}"
                                        f"{_other_frontend_raised(plan.frontend, exc)}: "
                                        f"{failure_text(exc)}"))
            continue
        for name, found in discover.other_kernels(plan.frontend, module).items():
            plan.other_frontends.setdefault(name, []).extend(k.name for k in found)
        for found in discover.kernels_of(plan.frontend, module):
            eager = plan.frontend.eager_signatures(found.dispatcher)
            if not eager and found.name not in by_kernel:
                plan.without_signatures.append(found.name)
            for index, argtypes in enumerate(eager):
                text = sigspec.format_or_none(plan.frontend, argtypes)
                for cc in ccs:
                    plan.add(kernel=found.name, path_entry=ref.path_entry, argtypes=argtypes,
                             sigspec_text=text, eager_index=None if text else index, cc=cc,
                             origin="eager")
    for kernel, lines in by_kernel.items():
        module = kernel.partition(":")[0]
        for line in lines:
            for cc in ccs:
                plan.add(kernel=kernel, path_entry=entries.get(module), argtypes=line.argtypes,
                         sigspec_text=line.signature, eager_index=None, cc=cc,
                         origin=line.origin)
    return plan


def find_modules(plan: Plan, targets, cc, include_tests=False) -> list:
    """The modules of ``targets`` (``discover.resolve_targets``: files and folders are only
    walked, a module name's parent packages are imported inside ``import_context(cc)``),
    noted in ``plan.modules``; a skipped row for each file that cannot be imported by name.
    Returns the ``discover.ModuleRef`` list. Raises ``discover.TargetError``."""
    refs, unimportable = discover.resolve_targets(plan.frontend, targets, cc, include_tests)
    for what, reason in unimportable:
        plan.rows.append(Row(kernel=what, status="skipped", origin="walk", reason=reason))
    for ref in refs:
        plan.modules.setdefault(ref.name, ref.path_entry)
    return refs


# --- running ----------------------------------------------------------------------------------

def run_tasks(tasks, *, frontend, root, jobs: int, dry_run: bool, path_entries=(),
              on_done=None, recache: bool = False, report: dict | None = None) -> dict:
    """Run ``tasks`` (of ``frontend``'s kernels: ``Plan.frontend``); returns
    ``{task id: outcome}`` (outcome: ``status``, ``key``, ``arch``,
    ``compile_seconds``, ``reason``). ``root``: the cache root (path); ``jobs``: processes
    that compile, this one included (up to ``jobs - 1`` workers are started, one per
    TASKS_PER_WORKER compiles); ``on_done(task,
    outcome)`` is called in this thread as each one ends. ``recache``: an entry present is
    compiled and stored again (``kcache warm --recache``, ``KCACHE_RECACHE``), not "cached".
    ``report`` (a dict) gets ``processes``: how many compiled, this one included.

    Every task is first checked here (kernel found, key computed, entry looked up: cheap, no
    compile); only those that need a compile are shared out. A task that fails is an
    outcome, never an exception; a worker that dies fails the tasks it was running, and this
    process compiles the rest."""
    # the front-end pickles as a reference to its bridge's object: a worker has the same one
    settings = {"root": str(root), "dry_run": bool(dry_run), "path_entries": list(path_entries),
                "cwd": os.getcwd(), "frontend": frontend,
                "recache": bool(recache)}
    outcomes = {}

    def done(task, outcome):
        outcomes[task.id] = outcome
        if on_done is not None:
            on_done(task, outcome)

    runner = _Runner(settings)
    pending = []
    for task in tasks:
        outcome = runner.check(task)
        if outcome is None:
            pending.append(task)
        else:
            done(task, outcome)
    # A worker costs an interpreter and numba (about 2 s of CPU) before its first compile:
    # one is started for every TASKS_PER_WORKER compiles, up to jobs - 1.
    workers = max(0, min(jobs - 1, len(pending) // TASKS_PER_WORKER))
    if report is not None:
        report["processes"] = workers + 1
    if workers < 1:
        for task in pending:
            done(task, runner.run(task))
        return outcomes
    _Shared(runner, pending, workers, settings).run(done)
    return outcomes


def drop_evicted(tasks, outcomes: dict, store) -> None:
    """Mark failed, in ``outcomes`` (of :func:`run_tasks`), each entry reported compiled or
    cached that is no longer in ``store``: a later put of the same warm evicted it (a size cap
    smaller than what was warmed). A build must not ship a cache that lacks them."""
    for task in tasks:
        outcome = outcomes[task.id]
        if (outcome["status"] in ("compiled", "cached") and outcome.get("key")
                and not still_stored(store, outcome["key"])):
            outcomes[task.id] = {**outcome, "status": "failed", "reason": evicted_reason(store)}


class _Shared:
    """Compiles ``tasks`` in this process and ``workers`` spawned ones, from one queue.

    Each worker has one task at a time; when it ends, a callback (in the pool's thread)
    hands it the next one at once, so a worker never waits for this process, which takes
    tasks from the same queue between reports. This process being one of the compilers
    saves starting a worker (an interpreter plus numba: about 2 s of CPU) and lets the
    compiling start while the workers are still starting."""

    def __init__(self, runner, tasks, workers: int, settings: dict):
        self.runner, self.workers, self.settings = runner, workers, settings
        self.todo = collections.deque(tasks)
        self.results: queue.SimpleQueue = queue.SimpleQueue()
        self.total = len(tasks)
        self.pool = None

    def run(self, done) -> None:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(
                self.workers, mp_context=context, initializer=_init_worker,
                initargs=(self.settings,)) as self.pool:
            for _ in range(self.workers):
                self._feed()
            finished = 0
            while finished < self.total:
                try:
                    task, outcome = self.results.get_nowait()
                except queue.Empty:
                    task = self._take()
                    if task is None:  # nothing left here: wait for the workers
                        task, outcome = self.results.get()
                    else:
                        outcome = self.runner.run(task)
                done(task, outcome)
                finished += 1

    def _take(self):
        try:
            return self.todo.popleft()
        except IndexError:
            return None

    def _feed(self) -> None:
        """Give a worker the next task (called again when that one ends)."""
        task = self._take()
        if task is None:
            return
        try:
            future = self.pool.submit(_run_in_worker, dataclasses.asdict(task))
        except Exception:  # the pool broke (a worker died): this process takes it back
            self.todo.appendleft(task)
            return
        future.add_done_callback(lambda f, task=task: self._ended(task, f))

    def _ended(self, task, future) -> None:
        try:
            outcome = future.result()
        except Exception as exc:  # BrokenProcessPool: the worker died (e.g. a crash in NVVM)
            outcome = {"status": "failed", "reason": f"worker process failed: "
                       f"{failure_text(exc)}"}
        self.results.put((task, outcome))
        self._feed()


def _init_worker(settings: dict) -> None:
    # As the kcache command does: a store warning is one line (logger "kcache"), not also a
    # `warnings` message with its source line, from every worker.
    warnings.simplefilter("ignore", KcacheWarning)
    _end_with_parent()
    STATE.warm_runner = _Runner(settings)


def _end_with_parent() -> None:
    """End this worker when the kcache warm process that started it ends. Killed (SIGKILL,
    the OOM killer, a CI job's time limit ending its main process), it left its workers
    for good: a spawned worker holds both ends of its task queue, so it never sees that
    queue end, and waited for a task, an interpreter with numba loaded, until a reboot."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    from kcache.store.stats import flush_all as flush_counts  # here: no import while ending

    def watch() -> None:
        parent.join()  # returns when the parent's end of the sentinel pipe closes: its end
        # os._exit skips multiprocessing's exit finalizers, the flush of this worker's batched
        # counts (its compiles of the last second) among them: they are written first
        flush_counts()  # raises nothing (a book it cannot write is warned about)
        os._exit(1)  # what this worker was doing was for that process alone

    threading.Thread(target=watch, name="kcache-warm-parent", daemon=True).start()


def _run_in_worker(task: dict) -> dict:
    return STATE.warm_runner.run(Task(**{**task, "cc": tuple(task["cc"])}))


class _Runner:
    """Runs tasks in one process: imports each module once, keeps one store."""

    def __init__(self, settings: dict):
        self.frontend = settings["frontend"]
        for entry in reversed([settings["cwd"], *settings["path_entries"]]):
            if entry not in sys.path:
                sys.path.insert(0, entry)
        self.store = Store(settings["root"])
        self.store.disabled = False  # warm was asked for explicitly (as the CLI's open_store)
        self.dry_run, self.recache = settings["dry_run"], settings.get("recache", False)
        self.modules: dict = {}
        self.resolved: dict = {}  # task id -> (kernel, argtypes, cache_key, arch) after check
        self.names: dict = {}  # task id -> "module:attr" replay found its kernel by (or None)
        self._listed = None  # the store's entries, listed for the first explained dry run row

    def check(self, task: Task) -> dict | None:
        """The outcome of ``task`` short of compiling: failed/skipped (kernel or signature
        not found, uncacheable, replay's kernel changed), cached (an existence check: no hit
        counted), would_compile (dry run); None when it needs a compile. Its ``arch`` is the
        front-end's for the cc (numba-cuda-mlir compiles 9.0 as sm_90), or the entry's."""
        outcome = self._check(task)
        if outcome is not None:
            outcome.setdefault("arch", self.frontend.arch_name(task.cc))
        return self._named(task, outcome)

    def _named(self, task: Task, outcome: dict | None) -> dict | None:
        """``outcome`` with the name replay found its kernel by, "module:attr", where the
        entry's name is not it (replay_find)."""
        if outcome is not None and self.names.get(task.id):
            outcome["kernel"] = self.names[task.id]
        return outcome

    def _check(self, task: Task) -> dict | None:
        try:
            kernel = self._kernel(task)
            argtypes = self._argtypes(task, kernel)
        except discover.OtherFrontendKernel as exc:
            # A recorded file of a program using both front-ends names the other's kernels
            # too: the run for that front-end warms them (both runs pass).
            return {"status": "skipped", "reason": str(exc)}
        except Exception as exc:
            # Replay: the code moved on since the entry was made; not a failure of warm.
            return {"status": "skipped" if task.replay else "failed", "reason": str(exc)}
        never = self.frontend.never_served_reason(kernel)
        if never is not None:  # warming it would store an entry no program reads
            return {"status": "skipped", "reason": never}
        cache_key = task.cache_key if task.own_cache_key else _own_cache_key(kernel)
        try:
            key, components = self._key(task, kernel, argtypes)
        except Uncacheable as exc:
            return {"status": "failed", "reason": f"cannot be cached: {exc}"}
        except Exception as exc:
            return {"status": "failed", "reason": failure_text(exc)}
        arch = self.frontend.arch_name(task.cc)  # the key's target.cc is the full cc
        if task.replay:
            changed = replay_find.changed(task.expect, components)
            if changed:
                return {"status": "skipped", "arch": arch,
                        "reason": f"changed since the entry was made: {changed}"}
        info = None if self.recache else self.store.header(key)
        if info is not None:
            return {"status": "cached", "key": key, "arch": info.arch or arch}
        if self.dry_run:
            return {"status": "would_compile", "key": key, "arch": arch,
                    "reason": self._explained(components)}
        self.resolved[task.id] = (kernel, argtypes, cache_key, arch)
        return None

    def _key(self, task: Task, kernel, argtypes) -> tuple:
        """(key, components) of ``kernel`` for ``task``'s types and cc."""
        cache_key = task.cache_key if task.own_cache_key else _own_cache_key(kernel)
        # No toolchain memo in a dry run: it writes nothing in the cache root.
        memo_store = None if self.dry_run else self.store
        return kernel_key(self.frontend, kernel, argtypes, task.cc, None, cache_key, memo_store)

    def _explained(self, components: dict) -> str | None:
        """Under ``KCACHE_EXPLAIN``: why a dry run's kernel would compile, as a miss says it
        (misses.explain_miss; the store's headers listed once for the whole run)."""
        if not explain_enabled():
            return None
        from .misses import explain_miss, one_line
        if self._listed is None:
            try:
                self._listed = list(self.store.entries())
            except Exception:  # explain_miss says the cache cannot be read
                self._listed = None
        return one_line(explain_miss(self.store, components, self.frontend, self._listed))

    def run(self, task: Task) -> dict:
        """Check ``task`` (again, in a worker: another process may have stored it since),
        then compile it if needed; returns its outcome."""
        outcome = self.check(task)
        if outcome is not None:
            return outcome
        kernel, argtypes, cache_key, arch = self.resolved.pop(task.id)
        return self._named(task, self._compile(kernel, argtypes, task, cache_key, arch))

    def _compile(self, kernel, argtypes, task, cache_key, arch) -> dict:
        try:
            with self.frontend.eager_device_functions(task.cc):
                [result] = compile_for_report(self.frontend, kernel, [argtypes],
                                              cc=[task.cc], store=self.store,
                                              cache_key=cache_key,
                                              recache=self.recache)
        except CompileForError as exc:
            reasons = "; ".join(sorted({f.reason for f in exc.failures}))
            return {"status": "failed", "arch": arch, "reason": reasons}
        except Exception as exc:  # numba's compile errors: reported, the other tasks go on
            return {"status": "failed", "arch": arch, "reason": failure_text(exc)}
        return {"status": "cached" if result.cached else "compiled", "key": result.key,
                "arch": result.arch, "compile_seconds": result.compile_seconds,
                "remote": result.remote}

    def _kernel(self, task: Task):
        module_name, qualname = split_kernel(task.kernel, entry=task.replay)
        module = self.modules.get(module_name)
        if module is None:
            ref = discover.ModuleRef(module_name, task.path_entry, task.kernel)
            try:
                module = discover.import_module(self.frontend, ref, task.cc)
            except Exception as exc:
                raise LookupError(f"cannot import {module_name}: {failure_text(exc)}") from None
            self.modules[module_name] = module
        if task.replay:  # an entry's name: a kernel bound to another module name is found too
            kernel, self.names[task.id] = replay_find.find(
                self.frontend, module, qualname, task.expect,
                lambda k: self._key(task, k, self._argtypes(task, k))[1])
            return kernel
        return discover.find_kernel(self.frontend, module, qualname)

    def _argtypes(self, task: Task, kernel) -> tuple:
        if task.sigspec is not None:
            return sigspec.parse_signature(self.frontend, task.sigspec)
        eager = self.frontend.eager_signatures(kernel)
        if task.eager_index is None or task.eager_index >= len(eager):
            raise LookupError(f"{task.kernel} has no eager signature {task.display}")
        argtypes = eager[task.eager_index]
        if self.frontend.signature_display(argtypes) != task.display:
            raise LookupError(f"{task.kernel}: eager signatures differ between processes")
        return argtypes


def _own_cache_key(kernel):
    options = getattr(kernel, "_kcache", None)
    return getattr(options, "cache_key", None)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PIPELINE = re.compile(r"^Failed in \S+ mode pipeline \(step: [^)]*\)\s*")


def _raised_at(exc: BaseException, ref) -> str:
    """`` (file.py:LINE)``: the last line of the target's own files the import went through
    (a typo in a kernel's signature string raises in numba's parser, far from the user's
    line), or "" when none is (relative to the target's folder)."""
    if not ref.path_entry:
        return ""
    folder = os.path.abspath(ref.path_entry) + os.sep
    ours = [f for f in traceback.extract_tb(exc.__traceback__)  # "<string>": an eval's
            if os.path.abspath(f.filename).startswith(folder) and os.path.isfile(f.filename)]
    if not ours:
        return ""
    return f" ({os.path.relpath(ours[-1].filename, folder)}:{ours[-1].lineno})"


def _other_frontend_raised(frontend, exc: BaseException) -> str:
    """`` (numba-cuda-mlir raised it: ...)`` when another front-end than ``frontend`` raised
    ``exc`` (an eager signature of its kernels compiled at import asks for a GPU: only a run
    for that front-end imports its modules without one), else ""."""
    from .frontends.base import of_module_name
    other = of_module_name(type(exc).__module__)
    if other is None or other == frontend.name:
        return ""
    return f" ({other} raised it: warm its kernels with --frontend {other})"


def failure_text(exc: BaseException, limit: int = 400) -> str:
    """``"TypingError: ..."``: the exception's type and message on one line, terminal escape
    sequences removed, at most ``limit`` characters. For numba's compile errors, the
    pipeline preamble and the source excerpt (from `` File "...``) are left out: the
    message between them says what is wrong."""
    text = " ".join(_ANSI.sub("", str(exc)).split())
    text = _PIPELINE.sub("", text)
    source = text.find(' File "')
    if source > 0:
        text = text[:source].rstrip()
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return cut(text, limit)  # control characters other than ANSI colours escaped

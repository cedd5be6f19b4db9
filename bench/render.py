"""Render docs/benchmarks.md (and its plots) from the results files of bench/run.py.

The Markdown is a pure function of the two JSON files (tests/test_bench.py checks that the
committed page is what they render to); the plots (PNG) need matplotlib, a bench-only
dependency: ``pip install matplotlib``. A part whose file is missing (the GPU part before the
GPU run) is rendered as a placeholder that says how to fill it.
"""
from __future__ import annotations

import statistics
from pathlib import Path

MODES = ("kcache", "numba", "none")
MODE_NAMES = {"kcache": "kcache (`KCACHE_ENABLE=1`)", "numba": "numba-cuda `cache=True`",
              "none": "no cache", "floor": "floor (a cache that costs nothing)",
              "layer": "kcache from a bundle layer (`KCACHE_READONLY_DIRS=FILE`)"}
APP_MODES = ("kcache", "layer", "numba", "none", "floor")
APP_PARTS = [("interpreter start", "interpreter"), ("imports (numpy, numba.cuda, kcache's hook)", "imports"),
             ("kernel definitions (the module's import)", "definitions"),
             ("CUDA context and arrays", "context"),
             ("lookups (a cache read; without a cache, the compile)", "lookups"),
             ("module loads (`cuModuleLoadData`)", "loads"), ("launches and synchronize", "launches")]
APP_GOAL = "<= 1.10 x floor (issue 19)"
#: Issue 36's goals while no run has measured them: a module of N kernels served from a
#: bundle layer (bench/gpu.py's layer_goal), and kcache's own part of a further hit from it.
LAYER_GOALS = {100: "<= 1.10 x floor (issue 36)", 1000: "<= 1.25 x floor (issue 36)"}
OWN_LAYER_GOAL = "<= 0.25 ms (issue 36)"
GPU_COMMAND = "bash bench/gpu_run.sh"
CPU_COMMAND = "python bench/run.py cpu"
BACKENDS = {"redis": "Redis", "s3": "S3 (moto)"}
IMAGES = {"first_call": "img/bench-first-call.png", "app": "img/bench-app-ready.png"}


# --- numbers ---------------------------------------------------------------------------------

def num(value, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "count":
        return f"{value:.0f}"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "%":
        return f"{value:.1f} %"
    a = abs(value)
    text = f"{value:.0f}" if a >= 100 else f"{value:.1f}" if a >= 10 else f"{value:.2f}"
    return f"{text} {unit.replace('us', 'µs')}"


def cell(fig: dict | None) -> str:
    """``median (min - max)`` of a figure, or ``-``."""
    if not fig or not fig["n"]:
        return "-"
    if fig["unit"] == "count" and fig["min"] == fig["max"]:
        return num(fig["median"], "count")
    return f"**{num(fig['median'], fig['unit'])}** ({num(fig['min'], fig['unit'])} - " \
           f"{num(fig['max'], fig['unit'])})"


def verdict(fig: dict | None) -> str:
    if not fig or fig.get("met") is None:
        return "pending (GPU run)" if not fig else ""
    return "met" if fig["met"] else "**missed**"


def index(doc: dict | None) -> dict:
    return {f["id"]: f for f in doc["figures"]} if doc else {}


def header(doc: dict, part: str) -> list[str]:
    m, v = doc["machine"], doc["versions"]
    gpu = "; ".join(m.get("gpu", [])) or "no GPU"
    load = doc["load_average"]
    lines = [f"Measured {doc['date']} on {m.get('cpu') or '?'} ({m.get('cpu_count')} CPUs, "
             f"{m.get('memory_gib', '?')} GiB), {gpu}; {m.get('platform')}; Python "
             f"{v.get('python')}, numba-cuda {v.get('numba-cuda', '-')}, numba {v.get('numba', '-')}, "
             f"numpy {v.get('numpy', '-')}, kcache {v.get('kcache', '-')} "
             f"(commit {v.get('kcache_commit', '?')}). The {part} part ran for "
             f"{doc['seconds']:.0f} s (its measurements "
             f"{sum(sec['seconds'] for sec in doc['sections'].values()):.0f} s); 1-minute load "
             f"average {load['before'][0]:.1f} at the start, {load['after'][0]:.1f} at the end."]
    if doc.get("install"):
        lines += ["", f"kcache as the timed processes imported it: {doc['install']} "
                      "(bench/install.py)."]
    else:
        source = (", every module compiled from source in every process "
                  "(PYTHONDONTWRITEBYTECODE=1)" if part == "GPU" else "")
        lines += ["", f"kcache as the timed processes imported it: the editable install{source} "
                      "(a run from before issue 19)."]
    for name, sec in doc["sections"].items():
        if sec.get("date") and sec["date"] != doc["date"]:
            lines += ["", f"Section `{name}` is from an earlier run: {sec['date']}, commit "
                          f"{sec.get('kcache_commit') or '?'}, kcache installed "
                          f"{sec.get('install') or 'editable, no bytecode'}."]
    if doc.get("fake"):
        lines += ["", "**This is a `--fake` run (no GPU): kernels were compiled, never "
                      "launched; the timings mean nothing.**"]
    if not doc.get("complete"):
        lines += ["", "**The run did not complete**: the sections below are those it finished."]
    for name, sec in doc["sections"].items():
        if sec.get("error"):
            lines += ["", f"Section `{name}` failed: `{sec['error']}`."]
        for note in sec.get("notes", []):
            lines += ["", f"Section `{name}`: {note}."]
    return lines


def mode_table(figs: dict, rows: list[tuple[str, str]]) -> list[str]:
    """A table with one row per (label, figure id prefix) and one column per mode."""
    out = ["| | " + " | ".join(MODE_NAMES[m] for m in MODES) + " |",
           "| --- |" + " --- |" * len(MODES)]
    for label, prefix in rows:
        out.append(f"| {label} | " + " | ".join(cell(figs.get(f"{prefix}.{m}")) for m in MODES) + " |")
    return out


# --- the GPU part ----------------------------------------------------------------------------

FIRST_ROWS = [
    ("first kernel call of the process", "first_call"),
    ("each further kernel's first call", "further_first_call"),
    ("process start to the first kernel call done", "start_to_first_call"),
    ("of which: interpreter start", "interpreter"),
    ("of which: imports (numpy, numba.cuda, kernels)", "imports"),
    ("of which: CUDA context and allocations", "setup"),
    ("overload lookup of the first call", "lookup_first"),
    ("overload lookup of each further first call", "lookup_further"),
    ("five first calls summed, empty cache", "cold_total"),
]


PHASES = [("key (the kernel's key, all of it)", "key"),
          ("of which: the transitive fingerprint of the code", "fingerprint"),
          ("store read (open, read, verify the entry, count the hit)", "store_read"),
          ("rebuild the kernel object from the entry", "rebuild"),
          ("module load (cuModuleLoadData of the cubin)", "module_load"),
          ("launch and synchronize (the call minus the lookup)", "launch")]


def phase_table(figs: dict) -> list[str]:
    """Where each further kernel's first call (a hit) goes, phase by phase."""
    rows = [(label, figs.get(f"phase.{pid}.kcache")) for label, pid in PHASES]
    if not any(f for _label, f in rows):
        return []
    out = ["### Where a hit's time goes", "",
           "Each further kernel's first call with kcache, phase by phase (each phase of "
           "`KCacheDispatcher.compile` timed in the processes that time the lookup apart; "
           "the fingerprint is part of the key). Median **bold**, (min - max).", "",
           "| phase | kcache |", "| --- | --- |"]
    out += [f"| {label} | {cell(f)} |" for label, f in rows if f]
    return out + [""]


def floor_table(figs: dict) -> list[str]:
    """numba-cuda's own part of a first call (no cache can remove it) against kcache's."""
    typing, floor = figs.get("typing_first.kcache"), figs.get("floor_first.kcache")
    if typing is None or floor is None:
        return []
    f_typing, f_floor = figs.get("typing_further.kcache"), figs.get("floor_further.kcache")
    load = figs.get("phase.module_load.kcache")
    first, further = figs.get("first_call.kcache"), figs.get("further_first_call.kcache")
    lookup_first, lookup_further = figs.get("lookup_first.kcache"), figs.get("lookup_further.kcache")
    med = lambda f: f["median"] if f else float("nan")  # noqa: E731
    first_floor = med(typing) + med(floor)
    further_floor = med(f_typing) + med(f_floor) + med(load)
    return ["### numba-cuda's floor: what no cache removes", "",
            "Two parts of a first call are numba-cuda's own, whatever serves the overload: "
            "typing the arguments (`typeof_pyval`, timed before the lookup in the processes "
            "that time the lookup apart; slow the first time in a process) and the launch "
            "itself, timed in processes that look every overload up (and load its module) "
            "before the clock starts (\"preloaded\"). A further kernel also needs its "
            "module loaded (`cuModuleLoadData`, the phase table). Median **bold**, (min - max).",
            "", "| | first call of a process | each further first call |", "| --- | --- | --- |",
            f"| typing the arguments (numba-cuda) | {cell(typing)} | {cell(f_typing)} |",
            f"| launch and synchronize, overload preloaded (numba-cuda) | {cell(floor)} | "
            f"{cell(f_floor)} |",
            f"| module load (the driver) | in the launch above | {cell(load)} |",
            f"| **floor: a cache that costs nothing** | **{first_floor:.2f} ms** | "
            f"**{further_floor:.2f} ms** |",
            f"| the call with kcache (first table) | {cell(first)} | {cell(further)} |",
            f"| **the call minus the floor: kcache's own part** (difference of the medians) | "
            f"**{med(first) - first_floor:.2f} ms** | **{med(further) - further_floor:.2f} ms** |",
            f"| kcache's overload lookup, timed apart (instrumented processes; includes the "
            f"module load) | {cell(lookup_first)} | {cell(lookup_further)} |",
            f"| goal (issue 8) | 1.5 ms | 0.5 ms |", ""]


def own_table(figs: dict) -> list[str]:
    """kcache's own part of a hit, timed inside the call, with its phases."""
    first, further = figs.get("own_first.kcache"), figs.get("own_further.kcache")
    if first is None or further is None:
        return []

    def phase(fig, name):
        values = sorted(fig["extra"].get(name) or [])
        return f"{values[len(values) // 2]:.2f} ms" if values else "-"
    rows = [("key (fingerprint, components, digest)", "key"), ("store read (open, read, verify, "
            "count)", "read"), ("rebuild the kernel object", "rebuild")]
    out = ["### kcache's own part of a hit, timed inside the call", "",
           "`kcache.dispatcher.own_phases()`: each overload lookup timed phase by phase inside "
           "`KCacheDispatcher.compile` (perf_counter_ns), in the warm-cache processes of the first "
           "table; kcache's own part is the lookup minus the driver's module load. Median "
           "**bold**, (min - max); the phases are medians.", "",
           "| | first kernel of a process | each further kernel |", "| --- | --- | --- |"]
    out += [f"| of which: {label} | {phase(first, p)} | {phase(further, p)} |" for label, p in rows]
    out += [f"| **kcache's own part** | {cell(first)} | {cell(further)} |",
            f"| goal (issue 19) | {first['goal'] or ''} {verdict(first)} | "
            f"{further['goal'] or ''} {verdict(further)} |", ""]
    return out


def before_after_table(figs: dict) -> list[str]:
    """This tree against an earlier revision (``bench/run.py gpu --baseline DIR``)."""
    base = figs.get("before_after.first_call.kcache-base")
    if base is None:
        return []
    rev = base["extra"].get("rev", "?")
    rows = [("first kernel call of the process", "first_call"),
            ("each further kernel's first call", "further_first_call"),
            ("overload lookup of the first call", "lookup_first"),
            ("overload lookup of each further first call", "lookup_further"),
            ("kcache's own part of the first kernel's hit", "own_first"),
            ("kcache's own part of each further kernel's hit", "own_further")]
    rows = [(label, fid) for label, fid in rows if f"before_after.{fid}.kcache" in figs]
    out = ["### Before and after", "",
           f"The same warm-cache processes for kcache at `{rev}` (installed by "
           "bench/baseline.py) and for this tree, alternating in one run. Median **bold**, "
           "(min - max).", "", f"| | kcache at `{rev}` | kcache (this tree) |", "| --- | --- | --- |"]
    out += [f"| {label} | {cell(figs.get(f'before_after.{fid}.kcache-base'))} | "
            f"{cell(figs.get(f'before_after.{fid}.kcache'))} |" for label, fid in rows]
    return out + [""]


MLIR_MODES = ("kcache", "numba_cuda_mlir", "none")
MLIR_NAMES = {"kcache": "kcache (`KCACHE_ENABLE=1`)",
              "numba_cuda_mlir": "numba-cuda-mlir `cache=True`", "none": "no cache"}


def mlir_section(figs: dict) -> list[str]:
    """numba-cuda-mlir kernels (bench/mlir_first.py, section ``mlir``), when measured."""
    out = ["### numba-cuda-mlir kernels", ""]
    if not any(fid.startswith("mlir_") for fid in figs):
        return out + ["Not measured yet: `python bench/mlir_first.py` on the GPU machine "
                      "writes this section's figures into bench/results/gpu.json (docs/mlir.md).",
                      ""]
    out += ["Three kernels (axpy calling a device function, an atomic reduction, a scale), "
            "numba-cuda-mlir 0.6, each process on a cache filled by an earlier one. Median "
            "**bold**, (min - max).", "",
            "| | " + " | ".join(MLIR_NAMES[m] for m in MLIR_MODES) + " |",
            "| --- |" + " --- |" * len(MLIR_MODES)]
    for label, prefix in (("first kernel call of the process", "mlir_first"),
                          ("each further kernel's first call", "mlir_further")):
        out.append(f"| {label} | " + " | ".join(cell(figs.get(f"{prefix}.{m}"))
                                                for m in MLIR_MODES) + " |")
    fleet = figs.get("mlir_concurrent.compiles")
    return out + ["", f"8 kcache processes starting together on an empty cache: {cell(fleet)} "
                      "compiles in all (goal: 3, each kernel once).", ""]


def gpu_section(doc: dict | None, plots: bool, earlier: dict | None = None) -> list[str]:
    out = ["## GPU: kernels served from the cache", ""]
    if doc is None:
        return out + [
            "**To be filled by the GPU run.** The lead runs the GPU part on the H200 machine "
            f"(`{GPU_COMMAND}`, about 6-8 minutes; the exact command with the carried wheels is in "
            "bench/run.py's docstring) and renders this page from its JSON. Until then, the "
            "figures of the earlier GPU runs are in [bench-dispatch.md](bench-dispatch.md) "
            "(first call from a warm cache 2.65-2.90 ms with kcache against 800-851 ms with "
            "numba-cuda's `cache=True`; kcache's own work on a cold miss 2.3 % of the compile "
            "time).", ""]
    figs = index(doc)
    out += header(doc, "GPU") + [""]
    out += ["### First kernel calls in a fresh process", "",
            "Five kernels (axpy calling a device function, a tiled shared-memory matmul, an atomic "
            "reduction, a stencil, a scale), each process on a cache filled by an earlier one. "
            "Median **bold**, (min - max) over the runs.", ""]
    out += mode_table(figs, FIRST_ROWS) + [""]
    if plots:
        out += [f"![first-call latency per mode]({IMAGES['first_call']})", ""]
    out += phase_table(figs)
    out += floor_table(figs)
    out += own_table(figs)
    imp = figs.get("import_dispatcher.kcache")
    if imp is not None:
        out += ["### What `KCACHE_ENABLE=1` adds to the imports, on the GPU machine", "",
                "Fresh processes, timed inside each after `import numba.cuda` (bytecode written by "
                "a first process): the hook, `import kcache.dispatcher` and `install`; then the "
                "first `cache=True` kernel's definition, where kcache opens the store.", "",
                "| figure | median (min - max) | goal | |", "| --- | --- | --- | --- |",
                f"| import kcache.dispatcher | {cell(imp)} | {imp['goal'] or ''} | {verdict(imp)} |",
                f"| the first cached kernel's definition | "
                f"{cell(figs.get('first_definition.kcache'))} | | |", ""]
    out += before_after_table(figs)
    own, pct = figs.get("own_cold.kcache"), figs.get("own_cold_pct.kcache")
    out += ["### kcache's own share of a cold miss", "",
            "In the cold processes (empty cache), each first call minus the compile time kcache "
            "timed itself, summed over the five kernels: the key, the lock, encoding and "
            "publishing the entry, the counters and the launch.", "",
            "| figure | value | goal | |", "| --- | --- | --- | --- |",
            f"| kcache's own time per cold process | {cell(own)} | | |",
            f"| as a share of the compile time | {cell(pct)} | {pct['goal'] if pct else ''} | {verdict(pct)} |",
            ""]
    out += mlir_section(figs)
    fleet = [figs.get(f"fleet_compiles.{m}") for m in MODES]
    n = next((f["extra"].get("processes") for f in fleet if f), "N")
    out += [f"### {n} processes starting together on an empty cache", "",
            "Each process calls the five kernels; they are released at once after their set-up. "
            "With kcache one process compiles each kernel while the others wait for it (readying "
            "their own compiler meanwhile: docs/store.md, \"Work while waiting\"), so the kernels "
            "are compiled one after another; numba-cuda's cache and no cache compile in every "
            "process at once.", ""]
    out += mode_table(figs, [("compiles in all the processes", "fleet_compiles"),
                             ("release to the last process done", "fleet_wall")]) + [""]
    sizes = app_sizes(doc)
    out += ["### An application's kernels", "",
            "A module of N generated kernels (each calling a shared device function): time from "
            "process start to every kernel launched once and done, split into its parts (timers "
            "in the process; they add up to the total). The floor is the same process with each "
            "kernel's overload rebuilt from its cubin, all read from one file at start, and put "
            "into the dispatcher's overloads: no key, no store, no cache's imports; the launches "
            "go through numba-cuda's dispatch as a hit's do. Caches were filled before the "
            "timed runs (kcache's by `kcache.compile_for` for the device's cc, numba-cuda's by "
            "a launch of each kernel). kcache from a bundle layer is the same process with every "
            "kernel served from one file: the warm directory root written by `kcache export`, "
            "named in `KCACHE_READONLY_DIRS`, with a new `KCACHE_DIR` without entries each run, "
            "holding the code analyses an untimed first process left (docs/keys.md; the "
            "directory root's were left by its fill) (each run's counters, `kcache stats` and "
            "the root are checked: every kernel a hit, nothing compiled, no entry written). "
            "Median **bold**, (min - max).", ""]
    if sizes:
        if not any(f"app_ready.layer.{n}" in figs for n in sizes):
            out += ["kcache from a bundle layer: pending (GPU run); this run measured the other "
                    "modes only.", ""]
        for n in sizes:
            out += app_table(figs, n)
        out += app_own_table(figs)
        if plots:
            out += [f"![time to all kernels launched against the number of kernels, per mode]"
                    f"({IMAGES['app']})", ""]
    elif earlier is not None and app_sizes(earlier):
        v = earlier["versions"]
        out += [f"Not measured in this run: it ended at its time limit before this section. "
                f"From the last run that measured it ({earlier['date']}, commit "
                f"{v.get('kcache_commit', '?')}, `bench/results/gpu-earlier.json`; no floor, "
                f"no split, kcache editable and without bytecode):", ""]
        for n in app_sizes(earlier):
            out += app_table(index(earlier), n)
    else:
        out += ["Not measured in this run.", ""]
    return out


def app_sizes(doc: dict) -> list[int]:
    return sorted({f["extra"]["kernels"] for f in doc["figures"] if f["id"].startswith("app_ready.")})


#: The parts of an app run where a cache does its work (the others, interpreter, imports and
#: the CUDA context, are the same process in every mode).
_CACHE_PARTS = ("definitions", "lookups", "loads", "launches")


def above_floor(figs: dict, mode: str, n: int) -> tuple[float, float] | None:
    """(ms, % of the floor's total median): ``mode``'s medians of the parts where a cache does
    its work, summed, minus the floor's. Steadier than the ratio of the totals, whose
    imports vary by up to 100 ms from one process to the next; None without the figures."""
    try:
        own = sum(figs[f"app_phase.{p}.{mode}.{n}"]["median"] for p in _CACHE_PARTS)
        floor = sum(figs[f"app_phase.{p}.floor.{n}"]["median"] for p in _CACHE_PARTS)
        total = figs[f"app_ready.floor.{n}"]["median"] * 1e3
    except KeyError:
        return None
    return own - floor, (own - floor) / total * 100


def _gc_cell(fig: dict | None) -> str:
    if fig is None:
        return "-"
    return f"{cell(fig)}; in the loop {num(statistics.median(fig['extra']['loop_ms']), 'ms')}"


def _full_cell(fig: dict | None) -> str:
    if fig is None:
        return "-"
    extra = fig["extra"]
    return (f"{statistics.median(extra['full']):g}; in the loop "
            f"{statistics.median(extra['loop_full']):g}")


def app_table(figs: dict, n: int) -> list[str]:
    """One size: a column per mode, the total, its parts, the compiles and the ratio to the
    floor (of the medians)."""
    modes = [m for m in APP_MODES if f"app_ready.{m}.{n}" in figs]
    out = [f"**{n} kernels**", "", "| | " + " | ".join(MODE_NAMES[m] for m in modes) + " |",
           "| --- |" + " --- |" * len(modes),
           "| **process start to all launched** | " +
           " | ".join(cell(figs[f"app_ready.{m}.{n}"]) for m in modes) + " |"]
    for label, part in APP_PARTS:
        if any(f"app_phase.{part}.{m}.{n}" in figs for m in modes):
            out.append(f"| of which: {label} | " + " | ".join(
                cell(figs.get(f"app_phase.{part}.{m}.{n}")) for m in modes) + " |")
    if any(f"app_gc.{m}.{n}" in figs for m in modes):
        out.append("| the garbage collector's time within those parts (median of each) | " +
                   " | ".join(_gc_cell(figs.get(f"app_gc.{m}.{n}")) for m in modes) + " |")
        out.append("| the garbage collector's full collections per run (median of each) | " +
                   " | ".join(_full_cell(figs.get(f"app_gc.{m}.{n}")) for m in modes) + " |")
    runs = [figs[f"app_ready.{m}.{n}"]["n"] for m in modes]
    compiles = [figs[f"app_ready.{m}.{n}"]["extra"].get("compiles") for m in modes]
    out.append("| runs | " + " | ".join(str(r) for r in runs) + " |")
    out.append("| compiles per run (median) | " +
               " | ".join(num(c, "count") if c is not None else "-" for c in compiles) + " |")
    ratios = [figs[f"app_ready.{m}.{n}"]["extra"].get("vs_floor") for m in modes]
    if any(r is not None for r in ratios):
        out.append("| against the floor (medians) | " +
                   " | ".join(num(r, "x") if r is not None else "-" for r in ratios) + " |")
        above = [above_floor(figs, m, n) for m in modes]
        if any(a is not None for a in above):
            out.append("| the cache's parts above the floor's (summed medians of " +
                       ", ".join(_CACHE_PARTS) + "; share of the floor's total) | " +
                       " | ".join("-" if a is None or m == "floor" else
                                  f"{num(a[0], 'ms')} ({a[1]:.1f} %)" for m, a in zip(modes, above))
                       + " |")
    for m in ("kcache", "layer"):
        f = figs.get(f"app_ready.{m}.{n}")
        if f and f.get("goal"):
            out.append(f"| goal ({MODE_NAMES[m].split(' (')[0]}) | {f['goal']}: "
                       f"{verdict(f) or 'not judged (fake run)'} |" + " |" * (len(modes) - 1))
    return out + [""]


def app_own_table(figs: dict) -> list[str]:
    """kcache's own part of each further hit in the application runs: from the bundle layer
    and from the directory root, with their phases (each run's median, then the median)."""
    layer, root = figs.get("own_further.layer"), figs.get("own_further_app.kcache")
    if layer is None and root is None:
        return []
    n = (layer or root)["extra"].get("kernels")

    def phase(fig, name):
        values = sorted((fig or {"extra": {}})["extra"].get(name) or [])
        return f"{values[len(values) // 2]:.3f} ms" if values else "-"
    rows = [("key (fingerprint, components, digest)", "key"),
            ("store read (find, read, verify, count)", "read"),
            ("rebuild the kernel object", "rebuild")]
    out = [f"**kcache's own part of each further kernel's hit, {n} kernels**", "",
           "Timed inside each lookup (`kcache.dispatcher.own_phases()`, as in the first table's "
           "own part), every kernel of a run but its first, over the runs above: the lookup "
           "minus the driver's module load. Median **bold**, (min - max); the phases are "
           "medians of each run's median.", "",
           "| | from the directory root | from the bundle layer |", "| --- | --- | --- |"]
    out += [f"| of which: {label} | {phase(root, p)} | {phase(layer, p)} |" for label, p in rows]
    out += [f"| **kcache's own part** | {cell(root)} | {cell(layer)} |",
            f"| goal (issue 36) | | " + ": ".join(filter(None, (
                (layer or {}).get("goal") or OWN_LAYER_GOAL,
                verdict(layer) if layer else "pending (GPU run)"))) + " |", ""]
    return out


# --- the CPU part ----------------------------------------------------------------------------

def cpu_section(doc: dict | None) -> list[str]:
    out = ["## CPU: the store and the command (no GPU)", ""]
    if doc is None:
        return out + [f"**To be filled**: `{CPU_COMMAND}`.", ""]
    figs = index(doc)
    out += header(doc, "CPU") + [""]
    out += ["This machine is shared with other work (see the load averages): wall times include "
            "waiting for a core; CPU times are given where a process is timed.", ""]
    by_section = {}
    for f in doc["figures"]:
        by_section.setdefault(f["section"], []).append(f)

    def took(name):
        sec = doc["sections"].get(name)
        if not sec:
            return []
        return [f"(This section took {sec['seconds']:.0f} s; 1-minute load average "
                f"{sec['load_average'][0]:.1f} when it ended.)", ""]

    def table(figures, extra_col=None):
        head = "| figure | median (min - max) | runs | goal | |"
        rows = [head, "| --- | --- | --- | --- | --- |"]
        for f in figures:
            label = f"{BACKENDS.get(f['mode'], f['mode'])}: {f['label']}" if f["mode"] else f["label"]
            rows.append(f"| {label} | {cell(f)} | {f['n']} | {f['goal'] or ''} | {verdict(f)} |")
        return rows + [""]

    if "store" in by_section:
        out += ["### Store lookup at 10 and 100,000 entries", "",
                "`Store.get` of random keys in fresh processes; each run is the median of 5 x "
                "1,000 gets.", ""] + took("store") + table(by_section["store"])
    if "cli" in by_section:
        bare = figs.get("cli_bare.wall")
        out += ["### CLI start-up per command", "",
                "Process start to exit, stdout piped, on a cache of 200 entries; per round, each "
                "command minus `python -c pass` of the same round "
                f"(bare Python itself: {cell(bare)}).", "", *took("cli"),
                "| command | above bare Python, wall | CPU above bare (median) | goal | |",
                "| --- | --- | --- | --- | --- |"]
        for f in by_section["cli"]:
            if f["id"] == "cli_bare.wall":
                continue
            cpu = f["extra"].get("cpu_above_ms") or []
            cpu_med = num(sorted(cpu)[len(cpu) // 2], "ms") if cpu else "-"
            out.append(f"| `{f['label']}` | {cell(f)} | {cpu_med} | {f['goal'] or ''} | {verdict(f)} |")
        out.append("")
    if "scale" in by_section:
        out += ["### `ls` and `prune` at scale", "",
                "Caches written straight in the entry format (then recounted); each run a "
                "complete `python -m kcache ...` process.", ""] + took("scale") + table(by_section["scale"])
    if "warm" in by_section:
        out += ["### `kcache warm` throughput, `--jobs 1` against `--jobs 2`", "",
                "Generated kernels, each compiled for cc 8.0 and 9.0 into a fresh root per run, "
                "the two settings alternating.", ""] + took("warm") + table(by_section["warm"])
    if "import" in by_section:
        out += ["### What `KCACHE_ENABLE=1` adds to the imports, on the 2-core machine", "",
                "In fresh processes (bytecode compiled), timed inside each after `import "
                "numba.cuda`: `import kcache._hook`, which with numba.cuda imported is `import "
                "kcache.dispatcher` and `install(\"cache\")`, as the `.pth` line does; then the "
                "definition of the first `cache=True` kernel, where kcache opens the store and "
                "imports what a hit needs (the rest comes with a miss, a write or maintenance), "
                "against the same definition with numba-cuda's own cache.", ""] + took("import") + \
            table(by_section["import"])
    sec = doc["sections"].get("remote", {})
    out += ["### Remote hit against local hit", ""]
    if "remote" in by_section:
        out += ["Redis and S3 (moto's server) on loopback, through the public `Store` API "
                "(bench/bench_remote.py).", ""] + took("remote") + table(by_section["remote"])
    else:
        why = "; ".join(sec.get("notes", [])) or sec.get("error") or "not run"
        out += [f"Not measured in this run ({why}).", ""]
    return out


# --- the page --------------------------------------------------------------------------------

def goals(gpu: dict | None, cpu: dict | None) -> list[str]:
    rows = []
    gpu_ids = [("first_call.kcache", "first kernel call, warm cache (kcache)"),
               ("further_first_call.kcache", "each further kernel's first call (kcache)"),
               ("own_first.kcache", "kcache's own part of the first kernel's hit"),
               ("own_further.kcache", "kcache's own part of each further kernel's hit"),
               ("import_dispatcher.kcache", "import kcache.dispatcher, KCACHE_ENABLE=1 (H200)"),
               ("own_cold_pct.kcache", "kcache's own share of a cold miss"),
               ("fleet_compiles.kcache", "compiles when processes start together (kcache)"),
               ("mlir_first.kcache", "numba-cuda-mlir: first kernel call, warm cache (kcache)"),
               ("mlir_further.kcache", "numba-cuda-mlir: each further kernel's first call "
                                       "(kcache)"),
               ("mlir_concurrent.compiles", "numba-cuda-mlir: compiles when 8 processes start "
                                            "together (kcache)")]
    g = index(gpu)
    for fid, label in gpu_ids:
        f = g.get(fid)
        goal = f["goal"] if f else {"first_call.kcache": "<= 1.5 ms (issue 8)",
                                    "further_first_call.kcache": "<= 0.5 ms (issue 8)",
                                    "own_cold_pct.kcache": "<= 3 % (issue 8)",
                                    "own_first.kcache": "<= 0.5 ms (issue 19)",
                                    "own_further.kcache": "<= 0.2 ms (issue 19)",
                                    "import_dispatcher.kcache": "<= 15 ms (H200)",
                                    "fleet_compiles.kcache": "each kernel once",
                                    "mlir_first.kcache": "<= 10 ms (issue 34)",
                                    "mlir_further.kcache": "no slower than numba-cuda-mlir's "
                                                           "own cache (issue 34)",
                                    "mlir_concurrent.compiles": "3 (each kernel once)"}[fid]
        rows.append(f"| {label} | {goal} | {cell(f)} | {verdict(f) if f else 'pending (GPU run)'} |")
    sizes = app_sizes(gpu) if gpu else []
    for mode, what in (("kcache", "kcache against the floor"),
                       ("layer", "kcache from a bundle layer against the floor")):
        for n in sizes or [100, 1000]:
            rows.append(_app_goal_row(g.get(f"app_ready.{mode}.{n}"),
                                      f"{n} kernels, process start to all launched ({what})",
                                      APP_GOAL if mode == "kcache" else
                                      LAYER_GOALS.get(n, LAYER_GOALS[100 if n <= 100 else 1000])))
    f = g.get("own_further.layer")
    rows.append(f"| kcache's own part of each further kernel's hit from a bundle layer | "
                f"{f['goal'] if f else OWN_LAYER_GOAL} | {cell(f)} | "
                f"{verdict(f) if f else 'pending (GPU run)'} |")
    for f in (cpu or {}).get("figures", []):
        if f.get("goal") and f["section"] != "cli":
            rows.append(f"| {f['label']} | {f['goal']} | {cell(f)} | {verdict(f)} |")
    cli = [f for f in (cpu or {}).get("figures", []) if f["section"] == "cli" and f.get("goal")]
    if cli:
        missed = [f["label"] for f in cli if f["met"] is False]
        worst = max(cli, key=lambda f: f["median"])
        rows.append(f"| CLI start-up, every command | <= 150 ms above bare Python (issue 8) | "
                    f"slowest: `{worst['label']}` {cell(worst)} | "
                    f"{'**missed** by ' + ', '.join(f'`{m}`' for m in missed) if missed else 'met'} |")
    return ["## Goals", "", "| goal | target | measured: median (min - max) | |",
            "| --- | --- | --- | --- |", *rows, ""]


def _app_goal_row(f: dict | None, label: str, goal: str) -> str:
    """A goals-table row of an app figure against the floor (``goal`` while unmeasured)."""
    if f is None:
        return f"| {label} | {goal} | - | pending (GPU run) |"
    vs = f["extra"].get("vs_floor")
    floor = f["extra"].get("floor_median")
    against = (f": **{vs:.2f}x** the floor's {num(floor, f['unit'])}" if vs is not None
               else ": no floor measured")
    return (f"| {label} | {f['goal'] or goal} | {cell(f)}{against} | "
            f"{verdict(f) if f.get('goal') else 'not judged'} |")


def missed(gpu: dict | None, cpu: dict | None) -> list[str]:
    out = []
    for doc in (gpu, cpu):
        for f in (doc or {}).get("figures", []):
            if f.get("met") is False:
                vs = f["extra"].get("vs_floor")
                against = f", {vs:.2f}x the floor" if vs is not None else ""
                out.append(f"- {f['label']}: {num(f['median'], f['unit'])} (median of {f['n']}"
                           f"{against}), goal {f['goal']}.")
    if not out:
        return []
    return ["## Where a goal is missed", "",
            "Plainly, from the figures above (what is known about each is in the notes below):",
            "", *out, ""]


def render_markdown(gpu: dict | None, cpu: dict | None, plots: bool = True,
                    earlier: dict | None = None) -> str:
    lines = [
        "# Benchmarks",
        "",
        "One harness, `bench/run.py`, measures kcache against numba-cuda's own cache and against "
        "no cache, on the same kernels in the same run: the GPU part on the H200 machine, the "
        "CPU part (the store and the `kcache` command at scale) on the 2-core development "
        "machine. Every figure is the median, with min and max, of at least 5 runs; each run is "
        "a fresh process unless said otherwise. The modes:",
        "",
        "- **kcache**: the transparent switch, `KCACHE_ENABLE=1`, kernels declared "
        "`@cuda.jit(cache=True)` (no code change);",
        "- **numba-cuda `cache=True`**: numba-cuda's own cache (`__pycache__/*.nbi`, `*.nbc`);",
        "- **no cache**: `@cuda.jit`, every process compiles;",
        "- **kcache from a bundle layer** (the application section): kcache with every kernel "
        "served from one bundle file named in `KCACHE_READONLY_DIRS` (`kcache export` of the "
        "warm cache), the writable root without entries;",
        "- **floor** (the application section): the same process with every overload rebuilt "
        "from a cubin read from one file, no key and no store: what a cache that cost nothing "
        "would leave.",
        "",
        "The timed processes import kcache as a user's install does: a wheel of the tree, "
        "bytecode compiled, `PYTHONDONTWRITEBYTECODE` unset (`--install wheel`, "
        "bench/install.py; each part's header says how its run installed it).",
        "",
        "Generated by `python bench/run.py render` from `bench/results/gpu.json` and "
        "`bench/results/cpu.json` (plots need `pip install matplotlib`); do not edit by hand. "
        "How to run each part: `python bench/run.py --help` and the docstrings of bench/gpu.py "
        "and bench/cpu.py.",
        "",
    ]
    lines += goals(gpu, cpu)
    lines += gpu_section(gpu, plots and gpu is not None, earlier)
    lines += cpu_section(cpu)
    lines += missed(gpu, cpu)
    lines += NOTES
    return "\n".join(lines).rstrip("\n") + "\n"


NOTES = [
    "## Notes on the method",
    "",
    "- GPU timings: each kernel call ends with `cuda.synchronize()`; the CUDA context and "
    "the device arrays are created before the clock of the first call starts (their cost is "
    "the \"CUDA context and allocations\" row). \"Process start\" is the parent's clock just "
    "before it starts the process.",
    "- kcache mode runs with `KCACHE_ENABLE=1`, as a user would switch an existing project; "
    "where the install has no `kcache-hook.pth`, the child imports `kcache._hook` itself, "
    "which is what that one-line file does.",
    "- The two missed GPU goals. The first call of a process is out of the goal's reach for "
    "any cache in front of numba-cuda 0.30: numba-cuda's own parts of it (typing the "
    "arguments the first time: its `typeof` is a `functools.singledispatch` whose first "
    "dispatch per argument class is slow; then the launch; the floor table) add up to more "
    "than 1.5 ms before any lookup. A further kernel's first call leaves kcache about 0.1 ms "
    "of the 0.5 ms goal once numba-cuda's typing and launch and the driver's module load are "
    "paid; kcache's own part (the key with its transitive fingerprint, reading and verifying "
    "the entry, rebuilding the kernel) is about 0.5 ms, spread over those parts (the phase "
    "table).",
    "- Since 46ce477 the store is opened, and the key components every kernel shares are put "
    "in canonical form, when the first cached kernel is defined; the counter thread starts "
    "without waiting for it; the key's encoding went from 74 to 18 us. On the 2-core machine "
    "(no GPU, offline target, 21 fresh processes) the first lookup went from 3.3 ms to about "
    "1.5 ms and each further one from 0.86 to about 0.7 ms. On the GPU machine the "
    "difference is within the run-to-run variation: in five alternating comparisons on "
    "2026-12-01 (this page's before and after table is one) the first call was lower in four "
    "and the lookups in three.",
    "- Imports on the GPU machine: its Python runs with `PYTHONDONTWRITEBYTECODE=1` and the "
    "carried packages are installed without bytecode; in runs made before issue 19 (the "
    "part's header says which) every module (numba-cuda's in every mode, kcache's ~60 in "
    "kcache mode) was therefore compiled from source in every process, and kcache's share of "
    "the imports row (0.3-0.55 s there) was mostly that. Since, bench/install.py installs "
    "kcache from a wheel and compiles the bytecode of everything the timed processes import "
    "(next to the sources, or under one `PYTHONPYCACHEPREFIX` where a folder is not "
    "writable), and the timed processes run without `PYTHONDONTWRITEBYTECODE`. With bytecode, on the CPU "
    "machine, `KCACHE_ENABLE=1` adds 0.1-0.2 s to `import numpy, numba.cuda` and the kernels' "
    "module (kcache.dispatcher and the store it opens; `-X importtime`).",
    "- What `import kcache.dispatcher` imports (issue 19): only what `install` needs (the "
    "package, `install`, `jit`, the numba-cuda compatibility module). The store, the key and "
    "the rest of a hit's code come with the first `cache=True` kernel's definition (the "
    "\"first definition\" rows), during the program's imports as before, and what only a "
    "miss, a write or maintenance needs (filelock, maintenance and its reports, the remote "
    "tiers, `compile_for`, the signature recorder) when first used: a process served from the "
    "cache imports filelock only to write its counters, in the background or at exit "
    "(tests/test_lazy_imports.py keeps it so). At 5519f97 the import was 52-61 ms on the "
    "2-core machine (issue 19); in an alternating run of 9 processes each on 2026-12-02 "
    "(1-minute load average 5-6) it was 124 ms against 8.8 ms for this tree, the first "
    "definition 39 ms against 92 ms, the two together 164 ms against 101 ms.",
    "- kcache's own part of a hit is timed by kcache itself: `kcache.dispatcher.own_phases()` "
    "lists, per overload lookup of the process, the key, the store read, the rebuild, the "
    "driver's module load and the whole lookup (perf_counter_ns, a few hundred nanoseconds "
    "per lookup); the own part is the lookup minus the module load (and, on a miss, the "
    "compile). A hit writes nothing: its use (the entry's mtime, the LRU clock) is recorded "
    "in memory and written with the counters, at most a second later and before any "
    "eviction or prune of the process.",
    "- Cold totals (five first calls on an empty cache) vary between 1.1 and 2.3 s for "
    "identical processes in every mode, so they cannot show a 3 % effect; kcache's own time "
    "is measured exactly (each call minus the compile kcache timed) and is what its goal is "
    "read against.",
    "- `kcache warm` throughput: with 16 kernels (32 compiles) the fixed part of a run "
    "(interpreter, `import numba.cuda`, discovery in the parent; a worker's own start) "
    "limits `--jobs 2` to about 1.3x (measured 1.32x on 2026-12-01); the table is for 64 "
    "kernels (128 compiles), the size of a small application.",
    "- The older pages keep their profiles and the reasoning behind earlier changes: "
    "[bench-dispatch.md](bench-dispatch.md) (where a hit's time goes), "
    "[bench-store.md](bench-store.md), [bench-cli.md](bench-cli.md) (what `import kcache` "
    "costs, per module), [bench-warm.md](bench-warm.md) (why `--jobs 2` cannot show its "
    "speed-up on a loaded 2-core machine), [keys.md](keys.md#cost-and-caching) (the key's "
    "cost without a GPU).",
    "",
]


def plots(gpu: dict | None, images: Path) -> list[Path]:
    """Write the PNG plots of the GPU part into ``images``; return their paths."""
    if gpu is None:
        return []
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = index(gpu)
    images.mkdir(parents=True, exist_ok=True)
    written = []
    colors = {"kcache": "#2a7ab0", "numba": "#d9822b", "none": "#888888"}

    rows = [("first call", "first_call"), ("each further\nfirst call", "further_first_call"),
            ("process start to\nfirst call done", "start_to_first_call")]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.26
    for i, mode in enumerate(MODES):
        med, lo, hi, xs = [], [], [], []
        for j, (_, prefix) in enumerate(rows):
            f = figs.get(f"{prefix}.{mode}")
            if not f:
                continue
            xs.append(j + (i - 1) * width)
            med.append(f["median"])
            lo.append(f["median"] - f["min"])
            hi.append(f["max"] - f["median"])
        ax.bar(xs, med, width, yerr=[lo, hi], capsize=3, label=MODE_NAMES[mode].replace("`", ""),
               color=colors[mode])
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)), [r[0] for r in rows])
    ax.set_ylabel("milliseconds (log scale)")
    ax.set_title("First kernel calls in a fresh process, warm cache (median, min-max)")
    ax.legend(frameon=False)
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    path = images / Path(IMAGES["first_call"]).name
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    written.append(path)

    sizes = app_sizes(gpu)
    if sizes:
        colors["floor"] = "#222222"
        colors["layer"] = "#2e9e5b"
        fig, ax = plt.subplots(figsize=(8, 4.6))
        for mode in APP_MODES:
            pts = [(n, figs[f"app_ready.{mode}.{n}"]) for n in sizes if f"app_ready.{mode}.{n}" in figs]
            if not pts:
                continue
            ax.errorbar([n for n, _ in pts], [f["median"] for _, f in pts],
                        yerr=[[f["median"] - f["min"] for _, f in pts],
                              [f["max"] - f["median"] for _, f in pts]],
                        marker="o", capsize=3, label=MODE_NAMES[mode].replace("`", ""),
                        color=colors[mode], linestyle="--" if mode == "floor" else "-")
        ax.set_xscale("log")
        ax.set_yscale("log")  # no cache at 1,000 kernels is ~30x the others
        ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
        ax.set_xlabel("kernels in the module")
        ax.set_ylabel("seconds from process start (log scale)")
        ax.set_title("Time until every kernel has been launched once (median, min-max)")
        ax.legend(frameon=False)
        ax.grid(alpha=0.3, which="both")
        fig.tight_layout()
        path = images / Path(IMAGES["app"]).name
        fig.savefig(path, dpi=110, metadata={"Software": None})
        plt.close(fig)
        written.append(path)
    return written

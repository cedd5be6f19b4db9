"""The results files of a front-end's own test suite run three ways (bench/numba_suite.py,
bench/mlir_suite.py): their form, merging, the table and the section of docs/compat.md."""
from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PASSES = ("baseline", "cold", "warm")
FIELDS = ("failed", "errors", "skipped")


def write(path, part: dict) -> None:
    """``part`` as JSON at ``path``, replaced atomically (a cut run leaves the last one)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps(part, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def commit() -> str | None:
    """``BENCH_COMMIT`` (a copied tree whose git metadata is not its own), else git's."""
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    git = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True)
    return git.stdout.strip() or None


def summarize(results: dict, environment: dict, left_out: dict) -> dict:
    """The results file's form: per pass, ``ran`` and sorted test ids (details and the
    store's counters kept apart). ``results``: {module: {pass: record}}."""
    part = dict(environment, modules=sorted(results), skipped_modules=dict(left_out),
                details={}, store={})
    for kind in PASSES:
        agg = {"ran": 0, **{field: [] for field in FIELDS}}
        for m, passes in results.items():
            rec = passes[kind]
            agg["ran"] += rec.get("ran", 0)
            for field in FIELDS:
                agg[field].extend(rec.get(field, []))
            part["details"].setdefault(kind, {}).update(rec.get("details", {}))
            if rec.get("store") is not None:
                part["store"].setdefault(kind, {})[m] = rec["store"]
        part[kind] = {"ran": agg["ran"], **{field: sorted(set(agg[field])) for field in FIELDS}}
    part["tests"] = part["baseline"]["ran"]
    return part


def merge(parts: list, environment_fields: tuple, left_out: dict) -> dict:
    """Several runs' results files as one (the environment of the first)."""
    merged = {k: parts[0].get(k) for k in environment_fields}
    merged["modules"] = sorted({m for p in parts for m in p["modules"]})
    merged["skipped_modules"] = dict(left_out)
    merged["details"], merged["store"] = {}, {}
    for kind in PASSES:
        merged[kind] = {"ran": sum(p[kind]["ran"] for p in parts),
                        **{f: sorted({t for p in parts for t in p[kind][f]}) for f in FIELDS}}
        for p in parts:
            merged["details"].setdefault(kind, {}).update(p.get("details", {}).get(kind, {}))
            merged["store"].setdefault(kind, {}).update(p.get("store", {}).get(kind, {}))
    merged["tests"] = merged["baseline"]["ran"]
    return merged


def only_under_kcache(results: dict, kind: str) -> dict:
    """{field: [test ids]} that failed, errored or were skipped in ``kind`` but not baseline."""
    base = results["baseline"]
    return {field: sorted(set(results[kind][field]) - set(base[field])) for field in FIELDS}


def table(results: dict) -> str:
    rows = ["| run | tests run | failures | errors | skipped | only under kcache |",
            "| --- | --- | --- | --- | --- | --- |"]
    names = {"baseline": "without kcache", "cold": "`KCACHE_ENABLE=all`, empty cache (first pass)",
             "warm": "`KCACHE_ENABLE=all`, same cache again (second pass)"}
    for kind in PASSES:
        r = results[kind]
        extra = "" if kind == "baseline" else str(sum(
            len(v) for v in only_under_kcache(results, kind).values()))
        rows.append(f"| {names[kind]} | {r['ran']} | {len(r['failed'])} | {len(r['errors'])} | "
                    f"{len(r['skipped'])} | {extra} |")
    return "\n".join(rows)


def pass_lines(results: dict) -> list[str]:
    """The lines under the table: the store's counters after each kcache pass, then the
    tests that failed only under kcache in each."""
    lines = []
    for kind in ("cold", "warm"):
        counts = results.get("store", {}).get(kind, {})
        if counts:
            hits = sum((c or {}).get("hits") or 0 for c in counts.values())
            compiles = sum((c or {}).get("compiles") or 0 for c in counts.values())
            lines.append(f"- {kind} pass, the store's counters over all modules after the "
                         f"pass: {hits} hits, {compiles} compiles stored.")
    for kind in ("cold", "warm"):
        only = only_under_kcache(results, kind)
        listed = [f"`{t}` ({field})" for field, tests in only.items() for t in tests]
        lines.append(f"- Only under kcache, {kind} pass: " + (", ".join(listed) or "none") + ".")
    return lines


def put_section(compat: Path, start: str, end: str, section: str, title: str) -> None:
    """``section`` (from ``start`` to ``end``) in place of the one in ``compat``, or added
    at its end under the heading ``title``."""
    text = compat.read_text()
    if start in text:
        before, rest = text.split(start, 1)
        after = rest.split(end, 1)[1] if end in rest else ""
        text = before + section + after
    else:
        text = text.rstrip("\n") + f"\n\n## {title}\n\n" + section + "\n"
    compat.write_text(text)


def run_modules(wanted: list, run_one, summarize, out, *, jobs: int, budget: float,
                tool: str, label=lambda m: m) -> None:
    """``run_one(module, deadline)`` for each module of ``wanted``, ``jobs`` side by side;
    a module not started before ``budget`` seconds have passed returns None and is listed
    as not run. ``summarize(results)`` is written to ``out`` as each module ends (a cut run
    still counts), and its table printed at the end."""
    results, not_run = {}, []
    deadline = time.monotonic() + budget
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_one, m, deadline): m for m in wanted}
        for future in concurrent.futures.as_completed(futures):
            m = futures[future]
            passes = future.result()
            if passes is None:
                not_run.append(m)
                continue
            results[m] = passes
            print(f"{label(m)} " + "  ".join(
                f"{k} {len(passes[k]['failed']) + len(passes[k]['errors'])}/{passes[k]['ran']}"
                for k in PASSES), flush=True)
            write(out, summarize(results))
    part = summarize(results)
    write(out, part)
    print(table(part))
    if not_run:
        print(f"{tool}: {len(not_run)} modules not started within --budget "
              f"{budget:.0f} s: {','.join(sorted(not_run))}")

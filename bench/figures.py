"""The shape of benchmark results: figures (min / median / max over runs), the machine they
were measured on, and the JSON file that bench/run.py writes and bench/render.py reads.

A results file:

    {"part": "gpu" | "cpu", "fake": bool, "date": ISO 8601 UTC, "seconds": wall time of the run,
     "machine": {...}, "versions": {...}, "load_average": {"before": [1, 5, 15 min], "after": ...},
     "complete": bool (false while a run is in progress or was cut short),
     "install": how kcache was installed for the timed processes ("wheel, bytecode compiled"),
     "install_detail": {...} (bench/install.py),
     "sections": {name: {"seconds": float, "error": str | null, "notes": [str], "date": str,
                         "kcache_commit": str, "install": str}},
     "figures": [figure, ...]}

    figure = {"id": str, "section": str, "label": str, "mode": str | null, "unit": "ms" | "s" |
              "us" | "x" | "count", "values": [float, ...], "n": int, "min", "median", "max",
              "goal": str | null, "met": bool | null, "extra": {...}}
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

#: Runs behind each figure, at least (issue 11: min / median / max over >= 5 runs).
MIN_RUNS = 5


def figure(id: str, section: str, label: str, values, unit: str, *, mode: str | None = None,
           goal: str | None = None, met=None, **extra) -> dict:
    """One figure from its raw ``values`` (every run kept, so the JSON can be re-read)."""
    values = [float(v) for v in values]
    return {"id": id, "section": section, "label": label, "mode": mode, "unit": unit,
            "values": values, "n": len(values),
            "min": min(values) if values else None,
            "median": statistics.median(values) if values else None,
            "max": max(values) if values else None,
            "goal": goal, "met": met, "extra": extra}


def machine() -> dict:
    """What the figures were measured on: CPU model and count, memory, OS, GPU (nvidia-smi,
    when present), Python."""
    info = {"cpu_count": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "cpu": platform.processor() or None}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
                break
    except OSError:
        pass
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=20)
        if done.returncode == 0 and done.stdout.strip():
            info["gpu"] = done.stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def versions() -> dict:
    """Versions of kcache and the toolchain (importlib.metadata, as kcache's keys see them)."""
    from importlib import metadata
    out = {"python": platform.python_version()}
    # kcache's distribution is kcache-cuda (PyPI's "kcache" is another project); the results
    # keep the field name "kcache".
    for name in ("kcache", "numba", "numba-cuda", "llvmlite", "numpy", "cuda-bindings",
                 "cuda-core", "filelock", "msgpack", "redis", "fsspec", "matplotlib"):
        try:
            out[name] = metadata.version("kcache-cuda" if name == "kcache" else name)
        except metadata.PackageNotFoundError:
            pass
    if os.environ.get("BENCH_COMMIT"):  # a copied tree whose git metadata is not its own
        out["kcache_commit"] = os.environ["BENCH_COMMIT"]
        return out
    repo = str(Path(__file__).resolve().parents[1])
    try:
        rev = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=20)
        if rev.returncode == 0:
            dirty = subprocess.run(["git", "-C", repo, "diff", "--quiet", "HEAD"],
                                   capture_output=True, timeout=20).returncode != 0
            out["kcache_commit"] = rev.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return out


class Results:
    """A results file being written: figures are added as sections finish, and the file is
    rewritten after each section, so a run cut short still leaves what it measured."""

    def __init__(self, path: Path, part: str, fake: bool = False, install: dict | None = None,
                 sections=None):
        self.path = path
        install = install or {}
        self.doc = {"part": part, "fake": fake,
                    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "seconds": 0.0, "machine": machine(), "versions": versions(),
                    "load_average": {"before": list(os.getloadavg()), "after": None},
                    "complete": False, "install": install.get("install"),
                    "install_detail": install, "sections": {}, "figures": []}
        if sections is not None:  # some sections only: the others' figures are kept
            old = load(path) if path.exists() else None
            if old is not None and old.get("part") == part and bool(old.get("fake")) == fake:
                merge_into(self.doc, old, keep=lambda name: name not in sections)
        self._start = _now()

    def section(self, name: str, seconds: float, error: str | None = None, notes=()):
        v = self.doc["versions"]
        self.doc["sections"][name] = {"seconds": seconds, "error": error, "notes": list(notes),
                                      "load_average": list(os.getloadavg()),
                                      "date": self.doc["date"],
                                      "kcache_commit": v.get("kcache_commit"),
                                      "install": self.doc["install"]}
        self.save()

    def add(self, *figures: dict) -> None:
        self.doc["figures"].extend(figures)

    def save(self, complete: bool = False) -> None:
        self.doc["seconds"] = _now() - self._start
        self.doc["load_average"]["after"] = list(os.getloadavg())
        self.doc["complete"] = complete
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1) + "\n")
        os.replace(tmp, self.path)


def merge_into(doc: dict, old: dict, keep) -> None:
    """Copy into ``doc`` the sections of ``old`` (and their figures) for which ``keep(name)``
    holds, each with the date and commit it was measured at (a section run alone replaces
    only itself in the results file)."""
    for name, sec in old.get("sections", {}).items():
        if not keep(name):
            continue
        sec = dict(sec)
        sec.setdefault("date", old.get("date"))
        sec.setdefault("kcache_commit", old.get("versions", {}).get("kcache_commit"))
        sec.setdefault("install", old.get("install"))
        doc["sections"][name] = sec
        doc["figures"].extend(f for f in old.get("figures", []) if f["section"] == name)


def merge(docs: list[dict]) -> dict:
    """One results document from several of the same part: each section from the document
    that measured it last (the section's own date; a section a run only kept from its
    results file carries its older date); the run's own fields (date, machine, versions)
    from the newest document."""
    def when(doc, name):
        return doc["sections"][name].get("date") or doc.get("date") or ""
    newest = max(docs, key=lambda d: d.get("date") or "")
    out = json.loads(json.dumps(newest))
    out["sections"], out["figures"] = {}, []
    order = list(dict.fromkeys(n for d in docs for n in d.get("sections", {})))
    for name in order:
        source = max((d for d in docs if name in d.get("sections", {})),
                     key=lambda d: when(d, name))
        merge_into(out, source, keep=lambda n: n == name)
    out["complete"] = all(d.get("complete") for d in docs)
    return out


def _now() -> float:
    import time
    return time.perf_counter()


def load(path: Path) -> dict | None:
    """A results file, or None when it does not exist."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None


def log(text: str) -> None:
    """Progress on stderr (stdout stays free)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()

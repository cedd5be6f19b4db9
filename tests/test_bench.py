"""bench/run.py, the benchmark harness: its GPU flow runs without a GPU (--fake: real
processes, real compiles and compile counts, no launch), its CPU part runs, and
docs/benchmarks.md is what the committed results render to. The figures themselves are
benchmarks, never asserted here (speed goals are met in bench/, not in timed tests)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import gpu  # noqa: E402
import install  # noqa: E402
import render  # noqa: E402
from figures import Results, figure, load, merge  # noqa: E402

APP_MODES = ("kcache", "numba", "none", "floor")  # and "layer" where bundle layers are served
APP_PARTS = ("interpreter", "imports", "definitions", "context", "lookups", "loads", "launches")


def bundle_layers_served(tmp_path) -> bool:
    """True when this tree's store takes a bundle file in its read-only layers (issue 36);
    before that a file there is refused (ConfigError) and the app section's layer mode must
    fail with its check's message, never give a figure."""
    from kcache import Store
    from kcache.config import ConfigError
    probe = tmp_path / "probe.kcb"
    probe.write_bytes(b"")
    probe.chmod(0o600)
    try:
        Store(tmp_path / "probe-root", readonly_dirs=[probe])
    except ConfigError:
        return False
    return True


def check_app_section(done, doc: dict, figs: dict, sizes, layers: bool) -> None:
    """The app section with its layer mode: served (figures checked with the others), or
    not yet (the section's error is the layer check's, naming the compiles it saw; the other
    modes' figures kept; exit 1)."""
    if layers:
        assert done.returncode == 0, done.stderr[-4000:]
        assert doc["sections"]["app"]["error"] is None
        check_app(figs, sizes, modes=APP_MODES + ("layer",))
        own = figs["own_further.layer"]
        n = max(sizes)
        assert own["n"] == n - 1 and own["extra"]["kernels"] == n  # one run, each further kernel
        assert own["goal"] == "<= 0.25 ms (issue 36)"
        assert any("the bundle layer written by `kcache export`" in note
                   for note in doc["sections"]["app"]["notes"])
    else:
        assert done.returncode == 1
        error = doc["sections"]["app"]["error"]
        n = min(sizes)
        assert error.startswith(f"layer, {n} kernels: not every kernel was served from the "
                                "bundle layer"), error
        assert f"compiles {n} (want 0)" in error and "hits 0 (want " in error
        assert not any(fid.startswith("app_ready.layer.") or fid == "own_further.layer"
                       for fid in figs)
        check_app(figs, sizes)
    # the directory root's own part of a further hit, in the same runs
    assert figs["own_further_app.kcache"]["n"] == max(sizes) - 1


def run_bench(*args, timeout=900):
    return subprocess.run([sys.executable, str(BENCH / "run.py"), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


@pytest.mark.slow
def test_gpu_flow_without_a_gpu(tmp_path):
    pytest.importorskip("numba.cuda")
    out = tmp_path / "gpu.json"
    done = run_bench("gpu", "--fake", "--quick", "--install", "as-is", "--out", str(out))
    doc = json.loads(out.read_text())
    assert doc["part"] == "gpu" and doc["fake"] and doc["complete"]
    assert doc["install"].startswith("as-is")
    assert {name: s["error"] for name, s in doc["sections"].items()
            if name != "app"} == {"first_calls": None, "fleet": None}
    figs = {f["id"]: f for f in doc["figures"]}
    for mode in ("kcache", "numba", "none"):
        for fid in ("first_call", "further_first_call", "start_to_first_call", "cold_total"):
            assert figs[f"{fid}.{mode}"]["n"] >= 1
    # two processes released together on an empty cache: kcache compiles each of the five
    # kernels once (single flight across processes); without a cache each process compiles
    # all five; numba-cuda's cache compiles in each process unless the other one happened to
    # save that kernel first
    assert figs["fleet_compiles.kcache"]["values"] == [5.0]
    assert figs["fleet_compiles.none"]["values"] == [10.0]
    assert 5 <= figs["fleet_compiles.numba"]["values"][0] <= 10
    check_app_section(done, doc, figs, (3, 4), bundle_layers_served(tmp_path))
    # kcache's own part of each warm hit, timed inside the call, with its phases
    own_first, own_further = figs["own_first.kcache"], figs["own_further.kcache"]
    assert own_first["n"] == 1 and own_further["n"] == 4  # five kernels, one warm process
    for f in (own_first, own_further):
        assert all(v > 0 for v in f["values"])
        assert all(0 <= k + r + b <= v + 1e-9 for k, r, b, v in
                   zip(f["extra"]["key"], f["extra"]["read"], f["extra"]["rebuild"], f["values"]))
    assert figs["import_dispatcher.kcache"]["n"] >= 9
    # a fake run judges no goal
    assert all(f["met"] is None for f in doc["figures"])


def check_app(figs: dict, sizes, modes=APP_MODES) -> None:
    """The application section's figures: every mode at every size, split into parts that add
    up to the total; filled caches (kcache by compile_for, numba-cuda by a launch), the bundle
    layer and the floor (overloads rebuilt from the one file) compile nothing, no cache
    compiles each kernel."""
    for n in sizes:
        for mode in modes:
            ready = figs[f"app_ready.{mode}.{n}"]
            parts = [figs[f"app_phase.{part}.{mode}.{n}"] for part in APP_PARTS]
            for r, run in enumerate(ready["values"]):
                assert sum(p["values"][r] for p in parts) / 1e3 == pytest.approx(run, rel=1e-6)
            assert ready["extra"]["compiles"] == (n if mode == "none" else 0)
            # the collector's time, counted by gc.callbacks in the child: within the parts
            collector = figs[f"app_gc.{mode}.{n}"]
            for r, ms in enumerate(collector["values"]):
                assert 0 <= collector["extra"]["loop_ms"][r] <= ms <= 1e3 * ready["values"][r]
                assert 0 <= collector["extra"]["loop_full"][r] <= collector["extra"]["full"][r]
        assert figs[f"app_ready.floor.{n}"]["extra"]["vs_floor"] == 1.0
        assert figs[f"app_ready.kcache.{n}"]["goal"] is None  # superseded by the layer's (36)
        if "layer" in modes:
            assert figs[f"app_ready.layer.{n}"]["goal"] == "<= 1.10 x floor (issue 36)"


@pytest.mark.slow
def test_app_section_alone_with_kcache_from_a_wheel_keeps_the_other_sections(tmp_path):
    pytest.importorskip("numba.cuda")
    out = tmp_path / "gpu.json"
    kept = figure("fleet_wall.kcache", "fleet", "release to the last done", [1.0], "s",
                  mode="kcache")
    earlier = Results(out, "gpu", fake=True)
    earlier.add(kept)
    earlier.section("fleet", 1.0)
    earlier.save(complete=True)
    site = tmp_path / "install"
    # one size: the app section at two sizes is test_gpu_flow_without_a_gpu's
    done = run_bench("gpu", "--fake", "--quick", "--sections", "app", "--app-sizes", "3",
                     "--install-dir", str(site), "--out", str(out))
    doc = json.loads(out.read_text())
    assert doc["install"] == "wheel, bytecode compiled"
    detail = doc["install_detail"]
    assert detail["wheel"].startswith("kcache_cuda-") and detail["wheel"].endswith(".whl")
    assert detail["kcache_file"].startswith(str(site / "site"))
    assert list(doc["sections"]) == ["fleet", "app"]
    figs = {f["id"]: f for f in doc["figures"]}
    assert figs["fleet_wall.kcache"]["values"] == [1.0]       # kept from the earlier run
    # the layer written by the wheel install's own `kcache` command, served to it
    check_app_section(done, doc, figs, (3,), bundle_layers_served(tmp_path))
    assert not any(f["id"].endswith(".4") for f in figs.values())  # only the size asked for
    # bytecode of the installed kcache was written (the timed processes read it)
    assert list((site / "site" / "kcache" / "store" / "__pycache__").glob("facade.*.pyc")) or \
        detail["pycache_prefix"]


def layer_doc(n: int, **changes) -> dict:
    """An app child's document of a layer run of ``n`` kernels, every one a hit."""
    own = [[0.3, 0.1, 0.15, 0.03, 0.05, True] for _ in range(n)]
    doc = {"counts": {"hits": n, "misses": 0, "compiles": 0}, "compiles": 0, "own": own,
           "layers": ["/img/kernels.kcb"], "untrusted": {}, "warnings": []}
    doc.update(changes)
    return doc


def test_a_layer_run_counts_only_when_every_kernel_came_from_the_layer(tmp_path):
    root = tmp_path / "root"
    (root / "v1" / "stats").mkdir(parents=True)
    served = {"hits": 3, "misses": 0, "compiles": 0}
    gpu.check_layer_run(layer_doc(3), served, root, 3)
    gpu.check_layer_run(layer_doc(3), None, root, 3)  # before `kcache stats`: the process's
    # a layer refused: every kernel compiled; the process's warning is named
    refused = layer_doc(3, counts={"hits": 0, "misses": 3, "compiles": 3}, compiles=3,
                        own=[[9.0, 0.1, 0.1, 0, 0, False]] * 3, layers=[],
                        untrusted={"/img/kernels.kcb": "writable by others"},
                        warnings=["kcache: layer /img/kernels.kcb refused"])
    with pytest.raises(gpu.LayerError) as err:
        gpu.check_layer_run(refused, None, root, 3)
    text = str(err.value)
    assert text.startswith("layer, 3 kernels: not every kernel was served from the bundle layer "
                           "(no layer in the store): hits 0 (want 3), misses 3 (want 0), "
                           "compiles 3 (want 0)")
    assert "hits among them 0" in text and "layers refused: /img/kernels.kcb writable by others" \
        in text and "the process said: kcache: layer /img/kernels.kcb refused" in text
    # the counters the command reads after the process disagree (a hit of the root's own)
    with pytest.raises(gpu.LayerError, match=r"stats misses 1 \(want 0\)"):
        gpu.check_layer_run(layer_doc(3), dict(served, misses=1), root, 3)
    # an entry in the writable root: it was compiled and stored there, or served from there
    shard = root / "v1" / "entries" / "ab"
    shard.mkdir(parents=True)
    (shard / ("ab" * 32 + ".kce")).write_bytes(b"x")
    with pytest.raises(gpu.LayerError, match=r"entries in the writable root 1 \(want 0\)"):
        gpu.check_layer_run(layer_doc(3), served, root, 3)


def app_doc(ready: float, n: int, own=None) -> dict:
    """An app child's document with the fields app_figures reads."""
    parts = {p: ready / len(APP_PARTS) for p in APP_PARTS}
    return {"ready_s": ready, "compiles": 0, "parts": parts, "own": own,
            "gc": {"seconds": 0.01, "loop_seconds": 0.0, "full": 1, "loop_full": 0}}


def test_layer_figures_and_their_goals():
    raw = {}
    for n, floor, layer in ((100, 0.7, 0.75), (1000, 0.9, 1.2)):
        own = [[0.5, 0.2, 0.2, 0.05, 0.05, True]] + \
            [[0.2 + i / 1e4, 0.08, 0.09, 0.02, 0.05, True] for i in range(n - 1)]
        raw[("floor", n)] = [app_doc(floor, n) for _ in range(3)]
        raw[("layer", n)] = [app_doc(layer, n, own) for _ in range(3)]
        raw[("kcache", n)] = [app_doc(layer * 1.1, n, own) for _ in range(3)]
    figs = {f["id"]: f for f in gpu.app_figures(raw, [100, 1000])}
    small, large = figs["app_ready.layer.100"], figs["app_ready.layer.1000"]
    assert (small["goal"], small["met"]) == ("<= 1.10 x floor (issue 36)", True)  # 1.07x
    assert (large["goal"], large["met"]) == ("<= 1.25 x floor (issue 36)", False)  # 1.33x
    assert large["extra"]["vs_floor"] == pytest.approx(1.2 / 0.9)
    assert figs["app_phase.lookups.layer.1000"]["n"] == 3
    # each further kernel of the 1,000-kernel layer runs (the first of each process left out)
    own = figs["own_further.layer"]
    assert own["n"] == 3 * 999 and own["extra"]["kernels"] == 1000 and own["extra"]["runs"] == 3
    assert (own["goal"], own["met"]) == ("<= 0.25 ms (issue 36)", True)
    assert own["extra"]["read"] == [0.09] * 3   # each run's median phase
    beside = figs["own_further_app.kcache"]
    assert beside["goal"] is None and beside["values"] == own["values"]
    # a lookup that was not a hit: no own-part figure (a miss is not a hit's time)
    raw[("layer", 1000)][0]["own"] = [o[:-1] + [False] for o in raw[("layer", 1000)][0]["own"]]
    assert "own_further.layer" not in {f["id"] for f in gpu.app_figures(raw, [100, 1000])}
    assert gpu.layer_goal(4) == 1.10 and gpu.layer_goal(500) == 1.25


@pytest.mark.slow
def test_gpu_part_refuses_to_run_without_a_gpu(tmp_path):
    pytest.importorskip("numba.cuda")
    from numba import cuda
    if cuda.is_available():
        pytest.skip("a GPU is present")
    done = run_bench("gpu", "--out", str(tmp_path / "gpu.json"))  # refused before any install
    assert done.returncode == 2
    assert "--fake" in done.stderr
    assert not (tmp_path / "gpu.json").exists() or not json.loads(
        (tmp_path / "gpu.json").read_text())["figures"]


@pytest.mark.slow
def test_cpu_part_runs(tmp_path):
    out = tmp_path / "cpu.json"
    done = run_bench("cpu", "--quick", "--only", "store,scale,import", "--install", "as-is",
                     "--out", str(out))
    assert done.returncode == 0, done.stderr[-4000:]
    doc = json.loads(out.read_text())
    figs = {f["id"]: f for f in doc["figures"]}
    assert {"store_get.10", "store_get.large", "store_get.ratio", "ls", "prune_dry", "prune",
            "import_dispatcher.kcache", "first_definition.kcache",
            "first_definition.numba"} <= set(figs)
    assert doc["load_average"]["before"] and doc["machine"]["cpu_count"]


def test_bad_arguments_are_one_line():
    done = run_bench("gpu", "--app-sizes", "ten")
    assert done.returncode == 2 and "numbers separated by commas" in done.stderr
    done = run_bench("gpu", "--fake", "--sections", "app,nope")
    assert done.returncode == 2 and "unknown section(s) nope" in done.stderr


def test_a_section_run_alone_replaces_only_itself(tmp_path):
    path = tmp_path / "gpu.json"
    first = Results(path, "gpu")
    first.add(figure("a.1", "first_calls", "a", [1.0], "ms"), figure("b.1", "app", "b", [2.0], "s"))
    first.section("first_calls", 1.0)
    first.section("app", 1.0)
    first.save(complete=True)
    again = Results(path, "gpu", install={"install": "wheel, bytecode compiled"},
                    sections=["app"])
    again.add(figure("b.2", "app", "b", [3.0], "s"))
    again.section("app", 2.0)
    again.save(complete=True)
    doc = load(path)
    assert [f["id"] for f in doc["figures"]] == ["a.1", "b.2"]
    assert doc["sections"]["first_calls"]["date"] == first.doc["date"]
    assert doc["sections"]["app"]["install"] == "wheel, bytecode compiled"
    assert doc["install"] == "wheel, bytecode compiled"
    # a fake run never merges into a real one
    fake = Results(path, "gpu", fake=True, sections=["app"])
    assert fake.doc["figures"] == [] and fake.doc["sections"] == {}


def test_merge_takes_each_section_from_the_run_that_measured_it_last():
    def doc(date, sections, kept=()):
        secs = {s: {"seconds": 1.0, "error": None, "date": date} for s in sections}
        secs.update({s: {"seconds": 1.0, "error": None, "date": "d0"} for s in kept})
        return {"part": "gpu", "fake": False, "date": date, "versions": {"kcache_commit": date},
                "install": "wheel, bytecode compiled", "complete": True, "sections": secs,
                "figures": [figure(f"{s}.x", s, s, [float(secs[s]["date"][-1])], "s")
                            for s in secs]}
    # two device calls: the second ran the app alone and kept older first_calls and fleet
    merged = merge([doc("d1", ["first_calls", "fleet"]), doc("d2", ["app"], kept=["first_calls",
                                                                                   "fleet"])])
    assert list(merged["sections"]) == ["first_calls", "fleet", "app"]
    assert {f["id"]: f["values"] for f in merged["figures"]} == \
        {"first_calls.x": [1.0], "fleet.x": [1.0], "app.x": [2.0]}
    assert merged["sections"]["fleet"]["date"] == "d1" and merged["sections"]["app"]["date"] == "d2"
    assert merged["date"] == "d2"


def test_install_compiles_the_top_folders_of_what_is_imported(tmp_path):
    site = str(tmp_path / "site")
    files = [f"{site}/numba/core/typing.py", f"{site}/numba/__init__.py", f"{site}/six.py",
             f"{site}/numpy/core/_multiarray_umath.so", "/elsewhere/x.py"]
    assert install.roots(files, [site, str(tmp_path)]) == [f"{site}/numba", f"{site}/six.py"]


def fake_gpu_doc(layers: bool = True):
    """A GPU results document (``layers``: with the bundle layer's figures, issue 36)."""
    figs = []
    for mode, first in (("kcache", 2.0), ("numba", 800.0), ("none", 900.0)):
        figs.append(figure(f"first_call.{mode}", "first_calls", "first kernel call", [first] * 5,
                           "ms", mode=mode, goal="<= 1.5 ms" if mode == "kcache" else None,
                           met=False if mode == "kcache" else None))
    for n in (100, 1000):
        floor = n / 100
        for mode, ready in (("kcache", floor * 1.2), ("numba", floor * 2), ("none", n / 10),
                            ("floor", floor), ("layer", floor * 1.15)):
            if mode == "layer" and not layers:
                continue
            goal = {"kcache": "<= 1.10 x floor (issue 19)",
                    "layer": f"<= {1.10 if n == 100 else 1.25:.2f} x floor (issue 36)"}.get(mode)
            figs.append(figure(f"app_ready.{mode}.{n}", "app", f"{mode}, {n} kernels: ready",
                               [ready] * 5, "s", mode=mode, goal=goal,
                               met=(ready / floor <= float(goal.split()[1])) if goal else None,
                               kernels=n, compiles=0,
                               vs_floor=ready / floor, floor_median=floor))
            for part in APP_PARTS:
                figs.append(figure(f"app_phase.{part}.{mode}.{n}", "app", part,
                                   [1e3 * ready / len(APP_PARTS)] * 5, "ms", mode=mode,
                                   kernels=n, part=part))
            figs.append(figure(f"app_gc.{mode}.{n}", "app", "collector", [40.0] * 5, "ms",
                               mode=mode, kernels=n, loop_ms=[5.0] * 5, full=[2] * 5,
                               loop_full=[1 if mode == "kcache" else 0] * 5))
    if layers:
        for fid, mode, ms, goal in (("own_further.layer", "layer", 0.3, "<= 0.25 ms (issue 36)"),
                                    ("own_further_app.kcache", "kcache", 0.45, None)):
            figs.append(figure(fid, "app", f"own part ({mode})", [ms] * 10, "ms", mode=mode,
                               goal=goal, met=False if goal else None, kernels=1000, runs=5,
                               key=[0.1] * 5, read=[0.12] * 5, rebuild=[0.02] * 5,
                               load=[0.05] * 5))
    return {"part": "gpu", "fake": False, "date": "2026-12-01T00:00:00Z", "seconds": 1.0,
            "machine": {"cpu": "x", "cpu_count": 16, "gpu": ["NVIDIA H200, 580, 141 GiB"]},
            "versions": {"python": "3.12"}, "load_average": {"before": [0, 0, 0], "after": [0, 0, 0]},
            "complete": True, "install": "wheel, bytecode compiled", "sections": {},
            "figures": figs}


def test_render_fills_the_gpu_part_from_its_json_and_says_where_a_goal_is_missed():
    cpu = load(REPO / "bench" / "results" / "cpu.json")
    without = render.render_markdown(None, cpu)
    assert "To be filled by the GPU run" in without
    assert "img/bench-first-call.png" not in without
    with_gpu = render.render_markdown(fake_gpu_doc(), cpu)
    assert "To be filled by the GPU run" not in with_gpu
    assert "img/bench-first-call.png" in with_gpu and "img/bench-app-ready.png" in with_gpu
    assert "NVIDIA H200" in with_gpu
    assert "- first kernel call: 2.00 ms (median of 5), goal <= 1.5 ms." in with_gpu
    assert "kcache as the timed processes imported it: wheel, bytecode compiled" in with_gpu
    # the application: a table per size with every mode and the split, the goal against the
    # floor in the goals table and among the missed ones
    assert "**1000 kernels**" in with_gpu and "floor (a cache that costs nothing)" in with_gpu
    assert "| 1000 kernels, process start to all launched (kcache against the floor) | <= 1.10 " \
           "x floor (issue 19) | **12.0 s** (12.0 s - 12.0 s): **1.20x** the floor's 10.0 s | " \
           "**missed** |" in with_gpu
    assert "| of which: module loads (`cuModuleLoadData`) |" in with_gpu
    assert "| the garbage collector's time within those parts (median of each) | **40.0 ms** " \
           "(40.0 ms - 40.0 ms); in the loop 5.00 ms |" in with_gpu
    assert "| the garbage collector's full collections per run (median of each) | 2; in the " \
           "loop 1 | 2; in the loop 0 |" in with_gpu
    assert "- kcache, 100 kernels: ready: 1.20 s (median of 5, 1.20x the floor), goal <= 1.10 " \
           "x floor (issue 19)." in with_gpu
    # the bundle layer (issue 36): a column beside kcache's, its goals in the goals table,
    # its own part beside the directory root's, and what it misses said plainly
    assert "| 1000 kernels, process start to all launched (kcache from a bundle layer against " \
           "the floor) | <= 1.25 x floor (issue 36) | **11.5 s** (11.5 s - 11.5 s): **1.15x** " \
           "the floor's 10.0 s | met |" in with_gpu
    assert "| 100 kernels, process start to all launched (kcache from a bundle layer against " \
           "the floor) | <= 1.10 x floor (issue 36) | **1.15 s** (1.15 s - 1.15 s): **1.15x** " \
           "the floor's 1.00 s | **missed** |" in with_gpu
    assert "| kcache's own part of each further kernel's hit from a bundle layer | <= 0.25 ms " \
           "(issue 36) | **0.30 ms** (0.30 ms - 0.30 ms) | **missed** |" in with_gpu
    assert "| | kcache (`KCACHE_ENABLE=1`) | kcache from a bundle layer " \
           "(`KCACHE_READONLY_DIRS=FILE`) | numba-cuda `cache=True` | no cache | floor" in with_gpu
    assert "| goal (kcache from a bundle layer) | <= 1.25 x floor (issue 36): met |" in with_gpu
    assert "| of which: store read (find, read, verify, count) | 0.120 ms | 0.120 ms |" in with_gpu
    assert "| **kcache's own part** | **0.45 ms** (0.45 ms - 0.45 ms) | **0.30 ms** (0.30 ms - " \
           "0.30 ms) |" in with_gpu
    assert "| goal (issue 36) | | <= 0.25 ms (issue 36): **missed** |" in with_gpu
    assert "- layer, 100 kernels: ready: 1.15 s (median of 5, 1.15x the floor), goal <= 1.10 " \
           "x floor (issue 36)." in with_gpu


def test_layer_goals_are_pending_until_a_run_measures_them():
    page = render.render_markdown(fake_gpu_doc(layers=False), None)
    for n, goal in ((100, "1.10"), (1000, "1.25")):
        assert f"| {n} kernels, process start to all launched (kcache from a bundle layer " \
               f"against the floor) | <= {goal} x floor (issue 36) | - | pending (GPU run) |" in page
    assert "| kcache's own part of each further kernel's hit from a bundle layer | <= 0.25 ms " \
           "(issue 36) | - | pending (GPU run) |" in page
    assert "kcache from a bundle layer: pending (GPU run)" in page
    assert "from the bundle layer |" not in page  # no own-part table without its figures


@pytest.mark.slow
def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    paths = render.plots(fake_gpu_doc(), tmp_path)
    assert sorted(p.name for p in paths) == ["bench-app-ready.png", "bench-first-call.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_committed_page_is_what_the_committed_results_render_to():
    results = REPO / "bench" / "results"
    earlier = results / "gpu-earlier.json"  # sections the last GPU run did not reach
    expected = render.render_markdown(load(results / "gpu.json"), load(results / "cpu.json"),
                                      earlier=load(earlier) if earlier.exists() else None)
    assert (REPO / "docs" / "benchmarks.md").read_text() == expected, (
        "docs/benchmarks.md differs from bench/results/*.json: run 'python bench/run.py render'")

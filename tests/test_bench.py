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

import render  # noqa: E402
from figures import figure, load  # noqa: E402


def run_bench(*args, timeout=900):
    return subprocess.run([sys.executable, str(BENCH / "run.py"), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


@pytest.mark.slow
def test_gpu_flow_without_a_gpu(tmp_path):
    pytest.importorskip("numba.cuda")
    out = tmp_path / "gpu.json"
    done = run_bench("gpu", "--fake", "--quick", "--out", str(out))
    assert done.returncode == 0, done.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["part"] == "gpu" and doc["fake"] and doc["complete"]
    assert {name: s["error"] for name, s in doc["sections"].items()} == \
        {"first_calls": None, "fleet": None, "app": None}
    figs = {f["id"]: f for f in doc["figures"]}
    for mode in ("kcache", "numba", "none"):
        for fid in ("first_call", "further_first_call", "start_to_first_call", "cold_total"):
            assert figs[f"{fid}.{mode}"]["n"] >= 1
        assert f"app_ready.{mode}.3" in figs
    # two processes released together on an empty cache: kcache compiles each of the five
    # kernels once (single flight across processes); without a cache each process compiles
    # all five; numba-cuda's cache compiles in each process unless the other one happened to
    # save that kernel first
    assert figs["fleet_compiles.kcache"]["values"] == [5.0]
    assert figs["fleet_compiles.none"]["values"] == [10.0]
    assert 5 <= figs["fleet_compiles.numba"]["values"][0] <= 10
    # warm processes of the application module: kcache and numba-cuda compile nothing
    assert figs["app_ready.kcache.3"]["extra"]["compiles"] == 0
    assert figs["app_ready.numba.3"]["extra"]["compiles"] == 0
    assert figs["app_ready.none.3"]["extra"]["compiles"] == 3
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


@pytest.mark.slow
def test_gpu_part_refuses_to_run_without_a_gpu(tmp_path):
    pytest.importorskip("numba.cuda")
    from numba import cuda
    if cuda.is_available():
        pytest.skip("a GPU is present")
    done = run_bench("gpu", "--out", str(tmp_path / "gpu.json"))
    assert done.returncode == 2
    assert "--fake" in done.stderr
    assert not (tmp_path / "gpu.json").exists() or not json.loads(
        (tmp_path / "gpu.json").read_text())["figures"]


@pytest.mark.slow
def test_cpu_part_runs(tmp_path):
    out = tmp_path / "cpu.json"
    done = run_bench("cpu", "--quick", "--only", "store,scale,import", "--out", str(out))
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


def fake_gpu_doc():
    figs = []
    for mode, first in (("kcache", 2.0), ("numba", 800.0), ("none", 900.0)):
        figs.append(figure(f"first_call.{mode}", "first_calls", "first kernel call", [first] * 5,
                           "ms", mode=mode, goal="<= 1.5 ms" if mode == "kcache" else None,
                           met=False if mode == "kcache" else None))
        for n in (10, 100):
            figs.append(figure(f"app_ready.{mode}.{n}", "app", "ready", [n / 10] * 5, "s",
                               mode=mode, kernels=n))
    return {"part": "gpu", "fake": False, "date": "2026-12-01T00:00:00Z", "seconds": 1.0,
            "machine": {"cpu": "x", "cpu_count": 16, "gpu": ["NVIDIA H200, 580, 141 GiB"]},
            "versions": {"python": "3.12"}, "load_average": {"before": [0, 0, 0], "after": [0, 0, 0]},
            "complete": True, "sections": {}, "figures": figs}


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

"""The benchmarks under bench/ run at tiny sizes and print well-formed figure lines (make bench-smoke, which
.ci/run runs; the runs are marked ``bench`` and left out of ``make test``: about 2 of its 11 minutes went to them).

Nothing about speed is asserted here (speed goals are the benchmarks' figures, read by people): only that
every benchmark produces its figures, each line parses (bench.common.parse_line) and its numbers are finite.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import Figure, parse_line
from tests.steps.s3_server import minio_binary

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench_cache(tmp_path_factory) -> Path:
    """Prepared data shared by the smoke runs (each size is prepared once)."""
    return tmp_path_factory.mktemp("bench_cache")

# benchmark script -> figure names its --smoke run must print
EXPECTED = {
    "trainer_overhead.py": ["trainer_overhead"],
    "worker_scaling.py": ["scaling_trainer"],
    "input_headroom.py": ["input_headroom"],
    "pipeline_overhead.py": ["pipeline_overhead", "pipeline_step_launch-training", "pipeline_launch_replica",
                             "pipeline_overhead_reuse", "pipeline_overhead_reuse_own",
                             "pipeline_step_prepare-dataset_reuse"],
    # data_reuse_bucket needs the MinIO binary (hack/kfp/build.sh --minio); without it: one line, no such figure
    "data_reuse.py": ["data_reuse_prepare_step", "data_reuse_own", "data_reuse_end_to_end",
                      *(["data_reuse_bucket"] if minio_binary() else [])],
    "launcher_scale.py": ["launcher_requests_per_replica_4", "launcher_wait_requests_per_replica_4",
                          "launcher_verdict_s_4", "launcher_create_s_4",
                          "launcher_create_vs_one_by_one_4"],
    "time_to_accuracy.py": ["time_to_accuracy", "accuracy_2w", "accuracy_1w"],
    "real_node.py": [],  # the real node is not brought up by a smoke run: it says so and prints no figure
    "two_nodes.py": [],  # nor are the two real nodes
    "kfp_overhead.py": [],  # nor the real node with Argo and KFP
}


def test_a_figure_line_parses_back():
    f = Figure("x_y", 3.0, "a", 4.0, "b", "examples/s", ">= 0.95", 2, "note | with bar")
    d = parse_line(f.line())
    assert d is not None
    assert (d["name"], d["ratio"], d["a"], d["b"], d["cores"], d["verdict"]) == ("x_y", 0.75, 3.0, 4.0, 2, "missed")
    assert parse_line("bench x: nothing") is None
    assert Figure("z", 1.0, "a", 1.0, "b", "s", "<= 1.3", 1).verdict == "met"
    assert Figure("z", 1.0, "a", 1.0, "b", "s", "", 1).verdict == "info"


@pytest.mark.slow
@pytest.mark.bench
@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_benchmark_smoke_run_prints_its_figures(script, tmp_path, bench_cache, mnist_tfds_data_dir):
    p = subprocess.run([sys.executable, f"bench/{script}", "--smoke", "--cache-dir", str(bench_cache),
                        "--out", str(tmp_path / "figures.jsonl")],
                       check=False, cwd=REPO, capture_output=True, text=True, timeout=280)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    figures = {d["name"]: d for d in map(parse_line, p.stdout.splitlines()) if d}
    if not EXPECTED[script]:
        assert "skipped, no figures" in p.stdout and not figures, p.stdout
    if script == "data_reuse.py" and minio_binary() is None:
        assert "bench data_reuse: data_reuse_bucket skipped: no MinIO binary at" in p.stdout
    missing = [n for n in EXPECTED[script] if n not in figures]
    assert not missing, f"{script} printed no {missing}:\n{p.stdout}"
    for d in figures.values():
        assert math.isfinite(d["a"]) and math.isfinite(d["b"]) and d["b"] > 0, d
        assert d["cores"] >= 1
    assert len((tmp_path / "figures.jsonl").read_text().splitlines()) == len(figures)

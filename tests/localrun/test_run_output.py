"""`make run` as a person sees it, for real (a small MNIST run): a short output, the whole logs in files, and
the run then tracked with the ``tfk8s`` command and looked at in its HTML report."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tfk8s.steps.prepare_dataset import default_tfds_data_dir

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 40
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(default_tfds_data_dir() is None, reason="needs ../shared/data or TFDS_DATA_DIR (MNIST)"),
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    volume = tmp_path_factory.mktemp("volume")
    done = subprocess.run(
        [sys.executable, str(REPO / "pipelines" / "train.py"), "--local", "--volume", str(volume),
         "--param", "max_examples=2000", "--param", "epochs=2", "--param", "min_accuracy=0.5"],
        capture_output=True, text=True, timeout=540, check=False, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return volume, done.stdout, done.stderr


def tfk8s(volume: Path, *args: str) -> tuple[int, str]:
    from tfk8s.cmd import main

    out, old = io.StringIO(), sys.stdout
    sys.stdout = out
    try:
        code = main([*args, "--volume", str(volume)])
    finally:
        sys.stdout = old
    return code, out.getvalue()


def test_make_run_prints_a_short_readable_run(run):
    volume, stdout, stderr = run
    lines = stdout.splitlines()
    assert len(lines) <= MAX_LINES, stdout
    steps = [m.group(1) for line in lines if (m := re.match(r"tfk8s: ([a-z-]+) ok \(\d+\.\ds\)$", line))]
    assert steps == ["ensure-volume", "prepare-dataset", "launch-training", "export-model", "evaluate-model",
                     "push-model"]
    assert any(line.startswith("tfk8s: progress tfk8s-") and " Succeeded  100%" in line for line in lines)
    assert "test accuracy :" in stdout and "report        :" in stdout and "tensorboard --logdir" in stdout
    assert "executor_input" not in stdout + stderr and "cpu_feature_guard" not in stdout + stderr
    assert "\x1b" not in stdout and "\r" not in stdout
    # the whole output of every step is in its output.log
    logs = sorted(volume.glob("pipeline-root/*/*/output.log"))
    assert {p.parent.name for p in logs} == set(steps)
    launch_log = next(p for p in logs if p.parent.name == "launch-training").read_text()
    assert "Got executor_input" in launch_log and "[worker-1] epoch 2/2" in launch_log


def test_the_finished_run_is_tracked_and_its_report_has_both_plots(run):
    volume, _, _ = run
    code, out = tfk8s(volume, "get", "-o", "json")
    (item,) = json.loads(out)
    assert item["state"] == "Succeeded" and item["total"] == {"worker": 2} and item["progress"] == 1.0
    name = item["name"]
    assert tfk8s(volume, "wait", name) == (0, f"{name} Succeeded\n")
    code, out = tfk8s(volume, "describe", name)
    assert "State:         Succeeded" in out and "TF_CONFIG of worker-0" in out and "tensorboard --logdir" in out
    code, out = tfk8s(volume, "logs", name, "worker-1")
    assert "epoch 2/2" in out
    run_dir = volume / "runs" / item["record"]["run_id"]
    summary = json.loads((run_dir / "train" / "training_summary.json").read_text())["job"]
    assert sorted(summary["replica_logs"]) == ["worker-0", "worker-1"]
    assert all(Path(p).is_file() for p in summary["replica_logs"].values())
    assert summary["record"] == str(run_dir / "train" / "job.json")
    page = (run_dir / "report.html").read_text()
    assert re.search(r"<img id='curves' [^>]*src='data:image/png;base64,", page)
    assert re.search(r"<img id='confusion' [^>]*src='data:image/png;base64,", page)
    assert "BLESSED" in page
    # tfk8s report RUN writes the same page again
    code, out = tfk8s(volume, "report", item["record"]["run_id"], "--output", str(run_dir / "again.html"))
    assert code == 0 and Path(out.strip()) == run_dir / "again.html"
    assert "<img id='curves'" in (run_dir / "again.html").read_text()


def test_a_failing_replica_still_prints_its_last_lines(tmp_path):
    program = 'python -c "import sys; print(\'loading shards\'); print(\'boom\', file=sys.stderr); sys.exit(3)"'
    done = subprocess.run(
        [sys.executable, str(REPO / "pipelines" / "train.py"), "--local", "--volume", str(tmp_path),
         "--param", "max_examples=500", "--param", f"command={program}"],
        capture_output=True, text=True, timeout=300, check=False, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode != 0
    lines = done.stdout.splitlines()
    assert len(lines) <= MAX_LINES, done.stdout
    failed = next(i for i, line in enumerate(lines) if line.startswith("tfk8s: launch-training FAILED"))
    m = re.search(r"replica (worker-[01]) failed with exit code 3: Error$", lines[failed + 1])
    assert m, lines[failed + 1]  # both exit 3 at once: either is the first
    assert [x.strip() for x in lines[failed + 2:failed + 5]] == [f"last 2 log lines of {m.group(1)}:",
                                                                  "loading shards", "boom"]
    assert "\x1b" not in done.stdout + done.stderr
    assert "Inner task failed: 'launch-training'" in done.stderr


def test_an_unblessed_run_ends_saying_why_in_words(tmp_path):
    """The README's `make run ARGS="--param epochs=1"` whose accuracy falls under the gate: the closing block's
    `why` line is the failed check as a sentence (it was once printed one character at a time, "a; c; c; u; ..."),
    and no replica's log opens with TensorFlow's CUDA lines on a machine without a GPU."""
    done = subprocess.run(
        [sys.executable, str(REPO / "pipelines" / "train.py"), "--local", "--volume", str(tmp_path),
         "--param", "max_examples=1000", "--param", "epochs=1", "--param", "min_accuracy=0.999"],
        capture_output=True, text=True, timeout=540, check=False, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (why,) = [line for line in done.stdout.splitlines() if line.startswith("  why ")]
    assert re.fullmatch(r"  why           : accuracy 0\.\d{4} < min_accuracy 0\.9990 "
                        r"\(built-in evaluation on the test split\)", why), done.stdout
    assert "quality gate  : NOT blessed, not pushed" in done.stdout
    logs = "".join(p.read_text() for p in tmp_path.glob("runs/*/train/replica-logs/*.log"))
    assert logs and "cuda" not in logs.lower(), logs[:2000]
    # the run held its data set until its evaluate step ended, and holds it no more
    (hold,) = [json.loads(p.read_text()) for p in tmp_path.glob("runs/*/data-hold.json")]
    assert (hold["state"], hold["why"]) == ("released", "its evaluate-model step, the last that reads it, ended")
    code, out = tfk8s(tmp_path, "datasets", "-o", "json")
    assert code == 0 and [d["in_use_by"] for d in json.loads(out)] == [[]]

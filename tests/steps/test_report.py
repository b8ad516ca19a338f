"""The run's HTML report, checked as a person would: written from a run folder (real TensorBoard event files
as the trainer writes them, an evaluation with real label names, a job record with a restart), then rendered
in headless Chromium and the screenshot looked at (skipped cleanly without Chromium)."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tfk8s.core.progress import Progress, write_progress
from tfk8s.steps.report import collect_run, read_scalars, write_evaluation, write_run_report
from tfk8s.tracking import records as jobs

LABELS = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
SCREENSHOT_DIR_ENV = "TFK8S_SCREENSHOT_DIR"  # keep the screenshot there to look at it


def _write_scalars(log_dir: Path, series: dict[str, list[float]]) -> None:
    """TensorBoard scalars the way trainer/task.py writes them (tf.summary.write + the scalars plugin)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    from tensorflow.core.framework import summary_pb2

    meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    writer = tf.summary.create_file_writer(str(log_dir))
    with writer.as_default():
        for tag, values in series.items():
            for step, value in enumerate(values):
                tf.summary.write(tag, tf.constant(value, tf.float32), step=step, metadata=meta)
    writer.close()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("volume") / "runs" / "42"
    train = run / "train"
    _write_scalars(train / "logs" / "train", {"epoch_loss": [0.9, 0.45, 0.3], "epoch_accuracy": [0.7, 0.85, 0.9],
                                              "epoch_examples_per_sec": [4000.0, 4200.0, 4100.0]})
    _write_scalars(train / "logs" / "eval", {"epoch_loss": [0.6, 0.4, 0.35], "epoch_accuracy": [0.78, 0.86, 0.88]})
    (train / "training_summary.json").write_text(json.dumps({"job": {"name": "tfk8s-42"}, "metrics": {
        "epochs": 3, "global_batch_size": 512, "strategy": "multi_worker_mirrored", "final_loss": 0.3,
        "final_accuracy": 0.9, "examples_per_sec": 8100.0, "wall_time_s": 41.5, "train_examples": 60000}}))
    now = time.time()
    jobs.write_record(train / "job.json", {
        "name": "tfk8s-42", "backend": "kubernetes", "namespace": "ml", "state": "Succeeded", "created": now - 60,
        "finished": now, "replicas": {"worker": 2}, "replica_states": {"worker-0": "Succeeded", "worker-1": "Succeeded"},
        "restarts": 1, "restart_reasons": [{"time": now - 30, "message": "worker-1 failed with exit code 137: "
                                            "OOMKilled; retryable: recreating worker-0, worker-1 (restart 1 of 3)"}],
        "paths": {"train_dir": str(train), "replica_logs": str(train / "replica-logs")},
        "tensorboard_command": f"tensorboard --logdir {train / 'logs'}"})
    for i, eps in enumerate((4050.0, 4010.0)):
        write_progress(train / "progress" / f"worker-{i}.json",
                       Progress(f"worker-{i}", now, "done", 3, 3, 351, 351, eps, 0.3))
    cm = [[0] * 10 for _ in range(10)]
    for i in range(10):
        cm[i][i] = 850 + 10 * i
        cm[i][(i + 1) % 10] = 60
        cm[i][(i + 3) % 10] = 15
    write_evaluation(run, {"num_examples": 10000, "accuracy": 0.8825, "loss": 0.33, "confusion_matrix": cm,
                           "label_names": LABELS, "precision": [0.88] * 10, "recall": [0.88] * 10,
                           "blessed": False, "reasons": ["accuracy 0.8825 < min_accuracy 0.9800"],
                           "export": {"path": "/mnt/tfk8s/models/fashion-cnn/1", "version": 1}})
    return run


def test_scalars_are_read_back_from_the_event_files(run_dir):
    scalars = read_scalars(run_dir / "train" / "logs" / "train")
    assert [s for s, _ in scalars["epoch_loss"]] == [0, 1, 2]
    assert [round(v, 4) for _, v in scalars["epoch_accuracy"]] == [0.7, 0.85, 0.9]
    data = collect_run(run_dir)
    assert data["throughput"] == {"worker-0": 4050.0, "worker-1": 4010.0}
    assert data["job"]["restarts"] == 1 and data["evaluation"]["label_names"] == LABELS


def test_report_embeds_the_curves_confusion_matrix_and_throughput_as_pngs(run_dir):
    from PIL import Image

    page = write_run_report(run_dir).read_text()
    images = dict(re.findall(r"<img id='(\w+)' alt='[^']*' src='data:image/png;base64,([^']+)'>", page))
    assert set(images) == {"curves", "confusion", "throughput"}
    for name, data in images.items():
        img = Image.open(io.BytesIO(base64.b64decode(data)))
        assert img.format == "PNG" and img.width >= 400, name
    assert "NOT BLESSED" in page and "0.8825" in page
    assert "<th>strategy</th><td>multi_worker_mirrored</td>" in page and "<td>8,100</td>" in page
    assert "worker-1 failed with exit code 137: OOMKilled" in page and "<p>1 restart: " in page
    assert "Ankle boot" in page and "T-shirt/top" in page  # the table beside the heat map: real names
    assert "tensorboard --logdir" in page and "pip install &#x27;tfk8s[tensorboard]&#x27;" in page
    assert "<script" not in page and "http" not in page  # stands alone in the KFP UI's sandboxed frame


def test_report_renders_in_headless_chromium(run_dir, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    from PIL import Image

    page = write_run_report(run_dir, tmp_path / "report.html")
    shot = Path(os.environ.get(SCREENSHOT_DIR_ENV) or tmp_path) / "report.png"
    subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1200,3000", f"--screenshot={shot}", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    img = Image.open(shot).convert("RGB")
    assert img.size == (1200, 3000)
    pixels = list(img.get_flattened_data() if hasattr(img, "get_flattened_data") else img.getdata())
    # the heat map's darkest blue (matplotlib "Blues") and the curves' training line (C0) were drawn
    dark_blue = sum(1 for r, g, b in pixels if b > 90 and r < 40 and g < 90)
    line_blue = sum(1 for r, g, b in pixels if abs(r - 31) < 20 and abs(g - 119) < 20 and abs(b - 180) < 20)
    assert dark_blue > 5000 and line_blue > 300, (dark_blue, line_blue)
    assert sum(1 for p in pixels if p != (255, 255, 255)) > 0.1 * len(pixels)


def test_a_model_that_was_not_evaluated_says_why_instead_of_an_accuracy(tmp_path):
    run = tmp_path / "runs" / "7"
    (run / "train").mkdir(parents=True)
    write_evaluation(run, {"blessed": False, "reasons": ["loss 0.2 reported by the program"], "evaluated": False,
                           "not_evaluated": "its serving signature takes 'text', the data set has images"})
    page = write_run_report(run).read_text()
    assert "NOT BLESSED — not evaluated: its serving signature takes &#x27;text&#x27;" in page
    assert "<img" not in page and "not evaluated</p>" in page


def test_the_sidecar_evaluators_final_checkpoint_and_the_preemptions_are_in_the_report(tmp_path):
    run = tmp_path / "runs" / "9"
    (run / "train").mkdir(parents=True)
    (run / "train" / "training_summary.json").write_text(json.dumps({"job": {"name": "tfk8s-9"}, "metrics": {},
        "evaluator": {"checkpoint": 3, "epochs": 3, "final": True, "loss": 0.0812, "accuracy": 0.9734,
                      "evaluations": 3}}))
    jobs.write_record(run / "train" / "job.json", {"name": "tfk8s-9", "state": "Succeeded", "restarts": 1,
                                                   "preemptions": 2, "restart_reasons": []})
    page = write_run_report(run).read_text()
    section = page.split("<h2 id='evaluator'>Sidecar evaluator</h2>", 1)[1].split("<h2>", 1)[0]
    assert "the final checkpoint (3 of 3 epochs)" in section and "0.9734" in section and "0.0812" in section
    assert "1 restart and 2 preemptions (not counted against max_restarts)" in page
    (run / "train" / "training_summary.json").write_text(json.dumps({"job": {}, "metrics": {}, "evaluator": {
        "checkpoint": 2, "epochs": 3, "final": False, "accuracy": 0.95, "loss": 0.1}}))
    assert "not the final checkpoint (2 of 3 epochs)" in write_run_report(run).read_text()


def test_the_exported_version_is_shown_as_an_integer_although_kfp_metadata_holds_it_as_a_float(tmp_path):
    run = tmp_path / "runs" / "8"
    (run / "train").mkdir(parents=True)
    write_evaluation(run, {"blessed": True, "reasons": [], "evaluated": False,
                           "export": {"path": "/v/models/m/3", "version": 3.0}})
    page = write_run_report(run).read_text()
    assert "/v/models/m/3 (version 3)" in page and "version 3.0" not in page


def test_tfk8s_report_and_the_pipelines_help_print_no_tensorflow_start_up_lines(run_dir):
    """The event files are read without TensorFlow (tfk8s.steps.event_files): `tfk8s report` prints its path and
    nothing else (it printed oneDNN, CUDA and CPU-feature lines, which TF_CPP_MIN_LOG_LEVEL does not silence)."""
    import sys

    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run([sys.executable, "-m", "tfk8s", "report", str(run_dir), "--output",
                           str(run_dir / "again.html")], capture_output=True, text=True, timeout=120, cwd=repo,
                          env=env, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{run_dir / 'again.html'}\n", "")
    assert "<img id='curves'" in (run_dir / "again.html").read_text()
    for argv in (["--help"], ["--local", "--help"]):
        done = subprocess.run([sys.executable, "pipelines/train.py", *argv], capture_output=True, text=True,
                              timeout=120, cwd=repo, env=env, check=False)
        assert done.returncode == 0 and done.stdout.startswith("usage: python pipelines/train.py")
        assert done.stderr == "", done.stderr


def test_a_thousand_class_heat_map_draws_the_most_confused_classes_readably(tmp_path):
    """Issue 25 item 10: a 1,000-class heat map was 1,000 unreadable rows; now the 29 most confused classes by
    name, the rest as one "other" row and column, the whole matrix named; the page stays small and quick."""
    import numpy as np
    from PIL import Image

    from tfk8s.steps.evaluation import compute_metrics
    from tfk8s.steps.report import REPORT_MAX_CLASSES

    rng = np.random.default_rng(1)
    labels = rng.integers(0, 1000, 20_000)
    probs = rng.random((labels.size, 1000))
    probs[np.arange(labels.size), labels] += 30 * (rng.random(labels.size) < 0.8)
    probs[labels == 7, 3] += 60  # class 7 is mistaken for class 3: both among the most confused
    result = compute_metrics(labels, probs / probs.sum(axis=1, keepdims=True), [f"c{i}" for i in range(1000)])
    from tfk8s.steps.evaluation import cap_confusion

    drawn = cap_confusion(result.label_names, result.confusion_matrix, REPORT_MAX_CLASSES).label_names
    assert {"c3", "c7"} <= set(drawn) and len(drawn) == REPORT_MAX_CLASSES
    run = tmp_path / "runs" / "big"
    (run / "train").mkdir(parents=True)
    write_evaluation(run, {**result.to_dict(), "blessed": True, "reasons": [], "evaluated": True})
    start = time.monotonic()
    page = write_run_report(run).read_text()
    took = time.monotonic() - start
    note = re.search(r"<p id='confusion-classes'[^>]*>(.*?)</p>", page).group(1)
    assert note.startswith(f"The heat map shows the {REPORT_MAX_CLASSES - 1} most confused of 1000 classes")
    assert "the other 971 summed as one row and column" in note and str(run / "evaluation.json") in note
    png = re.search(r"<img id='confusion' alt='confusion matrix' src='data:image/png;base64,([^']+)'", page).group(1)
    width, height = Image.open(io.BytesIO(base64.b64decode(png))).size
    assert width <= 1400 and height <= 1300, (width, height)  # 30 cells a side in at most ~13 inches at 100 dpi
    print(f"1,000-class report: {len(page) / 1024:.0f} KiB, heat map {width}x{height}, written in {took:.1f} s")
    assert took < 30

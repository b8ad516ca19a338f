"""The whole pipeline, for real, on this machine: kfp.local runs every component, the launcher runs 2
TensorFlow workers as local processes (MultiWorkerMirroredStrategy), on a real MNIST subset."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tfk8s.steps.prepare_dataset import default_tfds_data_dir

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(default_tfds_data_dir() is None, reason="needs ../shared/data or TFDS_DATA_DIR (MNIST)"),
]


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory):
    from pipelines.train import run_local

    volume = tmp_path_factory.mktemp("volume")
    result = run_local(volume, {"max_examples": 4000, "epochs": 2, "workers": 2, "min_accuracy": 0.5})
    return volume, result


def test_two_workers_train_a_model_well_above_chance(pipeline_run):
    volume, result = pipeline_run
    assert result["accuracy"] > 0.6  # chance is 0.1
    (run_dir,) = (volume / "runs").iterdir()
    # written by the launch step: the job, plus what the program reported in its metrics file
    summary = json.loads((run_dir / "train" / "training_summary.json").read_text())
    assert summary["job"]["replicas"] == {"chief": 0, "worker": 2, "ps": 0, "evaluator": 0}
    assert summary["job"]["coordinator"] == "worker-0" and set(summary["job"]["exit_codes"]) == {"worker-0", "worker-1"}
    assert summary["metrics"]["epochs"] == 2 and 0 < summary["metrics"]["accuracy"] <= 1
    assert not (run_dir / "train" / "scratch").exists()  # worker-1's model dir was removed
    # each worker's output was streamed and kept
    logs = {p.name: p.read_text() for p in (run_dir / "train" / "replica-logs").iterdir()}
    assert set(logs) == {"worker-0.log", "worker-1.log"}
    assert all("epoch 2/2" in text for text in logs.values())


def test_exported_model_is_versioned_and_predicts(pipeline_run):
    volume, result = pipeline_run
    assert result["version"] == 1
    assert Path(result["export_path"]) == volume / "models" / "mnist-cnn" / "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import tensorflow_datasets as tfds

    ds = tfds.load("mnist", split="test[:200]", data_dir=default_tfds_data_dir(), download=False)
    batch = next(iter(tfds.as_numpy(ds.batch(200))))
    serve = tf.saved_model.load(result["export_path"]).signatures["serving_default"]
    (probs,) = serve(tf.constant(batch["image"])).values()
    probs = probs.numpy()
    assert probs.shape == (200, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-4)
    assert (probs.argmax(axis=1) == batch["label"]).mean() > 0.6


def test_blessed_model_is_pushed_and_an_unblessed_one_fails_the_run_and_is_not(pipeline_run):
    from pipelines.train import run_local

    volume, result = pipeline_run
    assert result["blessed"] is True
    serving = volume / "serving" / "mnist-cnn"
    assert sorted(p.name for p in serving.iterdir()) == ["1"]
    assert (serving / "1" / "saved_model.pb").read_bytes() == (volume / "models/mnist-cnn/1/saved_model.pb").read_bytes()
    summary = Path(result["summary"]).read_text()
    assert "**Verdict: BLESSED**" in summary and "| worker | 2 |" in summary

    # A second run on the same volume that cannot pass the gate: exported as version 2, not pushed, run fails.
    with pytest.raises(RuntimeError, match="reject-model"):
        run_local(volume, {"max_examples": 2000, "epochs": 1, "min_accuracy": 0.999, "fail_on_unblessed": True})
    assert sorted(p.name for p in (volume / "models" / "mnist-cnn").iterdir()) == ["1", "2"]
    assert sorted(p.name for p in serving.iterdir()) == ["1"]


def test_a_diverged_training_ends_not_blessed_saying_why_with_valid_json_everywhere(tmp_path):
    """The built-in trainer at learning rate 1e9: NaN loss at the second step; it stops, saves, reports
    diverged=true; the export and evaluation go on (the test loss of the NaN model is left out of Metrics)."""
    from pipelines.train import run_local

    result = run_local(tmp_path, {"max_examples": 3000, "epochs": 1, "batch_size": 64, "learning_rate": 1e9,
                                  "workers": 2})
    assert not result["blessed"]
    # The Metrics artifact's metadata as KFP's UI shows it (ui_metadata): lists "; "-joined into one string.
    assert result["metrics"]["reasons"] == "not blessed: training diverged (loss NaN)"
    assert result["metrics"]["left_out"] == "loss is nan (not a finite number): left out of the metrics"
    summary = json.loads((Path(result["run_dir"]) / "train" / "training_summary.json").read_text())
    assert (summary["metrics"]["diverged"], summary["metrics"]["loss"]) == (True, "NaN")

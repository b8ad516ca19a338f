"""Real TensorFlow on the local backend: a worker ``kill -9``ed mid-epoch is recovered, and the model is as good
as an undisturbed run's (the restart resumes from BackupAndRestore instead of starting over)."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest

from tests.trainer.test_task import _test_accuracy
from tfk8s.core.cluster import ReplicaCounts
from tfk8s.core.job import TrainingJob
from tfk8s.launcher.local import python_command, run_local

REPO = Path(__file__).resolve().parents[2]
EPOCHS = 3


def _train(data_dir: Path, model_dir: Path, lines: list[str]) -> TrainingJob:
    return TrainingJob(
        name="recovery-test", counts=ReplicaCounts(worker=2),
        command=python_command("trainer.task", "--epochs", str(EPOCHS), "--batch-size", "64", "--learning-rate", "3e-3",
                               "--max-train-examples", "2000", "--seed", "0"),
        env={"TMPDIR": str(model_dir.parent), "TF_CPP_MIN_LOG_LEVEL": "2", "TF_USE_LEGACY_KERAS": "1"},
        timeout_s=400, train_dir=str(model_dir), data_dir=str(data_dir))


def _worker_pid(index: int) -> int:
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            cfg = json.loads(child.environ().get("TF_CONFIG", "{}"))
        except (psutil.Error, ValueError):
            continue
        if cfg.get("task") == {"type": "worker", "index": index}:
            return child.pid
    raise AssertionError(f"no worker-{index} process")


@pytest.mark.slow
def test_a_worker_killed_mid_epoch_is_recreated_with_its_peer_and_resumes_to_an_equally_good_model(
        mnist_subset_dir, tmp_path):
    undisturbed: list[str] = []
    base = run_local(_train(mnist_subset_dir, tmp_path / "undisturbed", undisturbed), log_sink=undisturbed.append,
                     cwd=REPO)
    assert base.restarts == 0
    killed = threading.Event()
    lines: list[str] = []

    def sink(line: str) -> None:
        lines.append(line)
        # worker-1 finished epoch 1 (BackupAndRestore wrote its backup): SIGKILL it a moment into epoch 2
        if line.startswith("[worker-1] epoch 1/") and not killed.is_set():
            killed.set()
            threading.Timer(0.5, lambda: os.kill(_worker_pid(1), signal.SIGKILL)).start()

    result = run_local(_train(mnist_subset_dir, tmp_path / "killed", lines), log_sink=sink, cwd=REPO)
    log = "\n".join(lines)
    assert killed.is_set() and result.restarts == 1, log[-3000:]
    assert result.exit_codes == {"worker-0": 0, "worker-1": 0}
    assert "replica worker-1 exited -9 (killed by signal SIGKILL); retryable: recreating worker-0, worker-1" in log
    # resumed: epoch 1 ran once, the restarted set went on from epoch 2 (not from scratch)
    assert sum(line.startswith("[worker-0] epoch 1/") for line in lines) == 1
    assert sum(line.startswith("[worker-0] epoch 3/") for line in lines) == 1
    backup = tmp_path / "killed" / "checkpoints" / "backup"
    resumed = [ln for ln in lines if ln.startswith("[worker-0] resumed from epoch ")]
    assert resumed in ([f"[worker-0] resumed from epoch {k} of {EPOCHS} (backup in {backup})"] for k in (1, 2)), log[-3000:]
    accuracy, _ = _test_accuracy(tmp_path / "killed" / "saved_model", mnist_subset_dir)
    baseline, _ = _test_accuracy(tmp_path / "undisturbed" / "saved_model", mnist_subset_dir)
    print(f"test accuracy after a kill -9 and restart: {accuracy:.4f}, undisturbed: {baseline:.4f}")
    assert accuracy >= baseline - 0.02, (accuracy, baseline)
    assert accuracy > 0.8, accuracy

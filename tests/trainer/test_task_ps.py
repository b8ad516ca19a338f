"""ParameterServerStrategy and the evaluator replica: roles, per-worker input shards, the evaluator process, and
real jobs through the local launcher on the prepared MNIST subset."""

from __future__ import annotations

import dataclasses
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SUBSET_EXAMPLES
from tests.trainer.test_task import REPO, _plan, _test_accuracy, _tf_config
from tfk8s.core.cluster import ReplicaCounts, ReplicaType

EVAL_LINE = re.compile(r"evaluator: checkpoint (\d+): loss=([0-9.]+) accuracy=([0-9.]+)")


# --- roles and arguments (no TensorFlow needed) ------------------------------------------------------------------

def test_under_ps_the_chief_coordinates_while_workers_and_ps_serve(mnist_subset_dir, tmp_path):
    from trainer.task import ROLE_SERVE, ROLE_TRAIN

    def plan(rtype, index=0):
        return _plan(mnist_subset_dir, tmp_path, "--batch-size", "65",
                     tf_config=_tf_config(2, index, chief=1, ps=2, rtype=rtype))

    chief, w1, ps1 = plan(ReplicaType.CHIEF), plan(ReplicaType.WORKER, 1), plan(ReplicaType.PS, 1)
    assert (chief.role, chief.strategy, chief.is_chief, chief.num_workers) == (ROLE_TRAIN, "parameter_server", True, 2)
    assert (w1.role, w1.is_chief) == (ROLE_SERVE, False)
    assert (ps1.role, ps1.is_chief) == (ROLE_SERVE, False)
    # a step runs on one worker: the global batch need not divide among the workers (65 and 2 workers)
    assert chief.steps_per_epoch == -(-SUBSET_EXAMPLES // 65)
    # 5 processes on this host: the default of cores / processes is raised to 2 inter-op threads (1 deadlocks)
    assert chief.inter_op_threads >= 2 and w1.inter_op_threads >= 2
    assert set(chief.ctx.cluster) == {"chief", "worker", "ps"}


def test_checkpoint_number_is_the_epoch_in_the_model_checkpoint_name():
    from trainer.task import _checkpoint_number

    assert _checkpoint_number("/m/checkpoints/ckpt-12") == 12
    assert _checkpoint_number("/m/checkpoints/ckpt") == -1


# --- the evaluator process ---------------------------------------------------------------------------------------

def _lines(proc: subprocess.Popen) -> queue.Queue:
    """The process's output lines, read by a thread (so a test can wait for one with a timeout)."""
    q: queue.Queue = queue.Queue()

    def read():
        for line in proc.stdout:
            q.put(line.rstrip("\n"))
        q.put(None)

    threading.Thread(target=read, daemon=True).start()
    return q


def _wait_for(q: queue.Queue, needle: str, seen: list[str], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        line = q.get(timeout=max(0.1, deadline - time.monotonic()))
        if line is None:
            raise AssertionError(f"the process ended before printing {needle!r}:\n" + "\n".join(seen[-30:]))
        seen.append(line)
        if needle in line:
            return line


def test_evaluator_evaluates_each_new_checkpoint_and_exits_0_on_sigterm(mnist_subset_dir, tmp_path):
    import tf_keras

    from tfk8s.core.data_format import load_metadata
    from tfk8s.runtime.shards import make_dataset
    from trainer.model import build_model

    meta = load_metadata(str(mnist_subset_dir))
    model_dir = tmp_path / "model"
    tf_keras.utils.set_random_seed(0)
    model = build_model(meta, 1e-3)
    model.save_weights(str(model_dir / "checkpoints" / "ckpt-1"))
    test = make_dataset(str(mnist_subset_dir), "test", batch_size=500, shuffle=False, repeat=False)
    want = model.evaluate(test, verbose=0, return_dict=True)

    env = {**os.environ, "TF_CONFIG": _tf_config(2, 0, rtype=ReplicaType.EVALUATOR), "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer.task", "--data-dir", str(mnist_subset_dir), "--train-dir", str(model_dir),
         # 5 epochs: checkpoints 1 and 2 are not the final one (ckpt-<epochs>), which would end it by itself
         "--batch-size", "500", "--epochs", "5"],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        q, seen = _lines(proc), []
        first = EVAL_LINE.search(_wait_for(q, "evaluator: checkpoint 1:", seen, 120))
        assert abs(float(first[2]) - want["loss"]) < 2e-4 and abs(float(first[3]) - want["accuracy"]) < 2e-4

        # a second checkpoint whose output layer is all zeros: uniform probabilities, loss exactly ln(10)
        out = model.get_layer("probabilities")
        out.set_weights([np.zeros_like(w) for w in out.get_weights()])
        model.save_weights(str(model_dir / "checkpoints" / "ckpt-2"))
        second = EVAL_LINE.search(_wait_for(q, "evaluator: checkpoint 2:", seen, 60))
        assert float(second[2]) == pytest.approx(np.log(10), abs=1e-4)

        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert time.monotonic() - t0 < 10  # promptly, not after a grace period
        _wait_for(q, "evaluator: stopped by SIGTERM after 2 evaluation(s)", seen, 5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert list((model_dir / "logs" / "eval").glob("events.out.tfevents.*"))
    assert not (model_dir / "saved_model").exists()  # the evaluator trains and saves nothing


# --- real jobs through the local launcher -------------------------------------------------------------------------

@pytest.mark.slow
def test_ps_job_trains_the_evaluator_evaluates_the_final_checkpoint_and_the_launcher_stops_ps_and_worker(
        mnist_subset_dir, tmp_path):
    import json

    from tfk8s.core.builtin_trainer import trainer_args
    from tfk8s.launcher.backends import get_backend
    from tfk8s.steps.launch_training import build_job, run_job

    train_dir, scratch = tmp_path / "train", tmp_path / "scratch"
    scratch.mkdir()
    lines: list[str] = []
    job = build_job(name="trainer-ps-test", counts=ReplicaCounts(chief=1, worker=1, ps=1, evaluator=1),
                    args=trainer_args(mnist_subset_dir, train_dir, 1, 64, 3e-3) + ["--seed", "0"],
                    backend=get_backend("local"), timeout_s=240, env={"TMPDIR": str(scratch)},
                    train_dir=train_dir,
                    data_dir=mnist_subset_dir)
    # Under ParameterServerStrategy a worker never exits: the default 30 s grace for lagging workers only waits.
    job = dataclasses.replace(job, grace_period_s=1.0)
    t0 = time.monotonic()
    outcome = run_job(job, get_backend("local"), train_dir, log_sink=lines.append)
    wall_s = time.monotonic() - t0

    # the evaluator had evaluator_grace_s after the chief's success to evaluate ckpt-1 (the final one), and did
    assert outcome.launch.exit_codes == {"chief-0": 0, "evaluator-0": 0}, "\n".join(lines[-40:])
    assert outcome.launch.stopped == ["worker-0", "ps-0"]
    summary = json.loads((train_dir / "training_summary.json").read_text())
    assert summary == outcome.summary
    metrics = summary["metrics"]  # what the chief reported (tfk8s.runtime.report), kept by the launch step
    assert {k: metrics[k] for k in ("epochs", "global_batch_size", "num_replicas_in_sync", "num_workers",
                                    "strategy", "train_examples", "steps_per_epoch", "diverged")} == {
        "epochs": 1, "global_batch_size": 64, "num_replicas_in_sync": 1, "num_workers": 1,
        "strategy": "parameter_server", "train_examples": SUBSET_EXAMPLES, "steps_per_epoch": 47, "diverged": False}
    assert 0.5 < metrics["accuracy"] <= 1.0 and 0.0 < metrics["loss"] < 1.5  # measured ~0.77 / ~0.75
    assert outcome.metrics["examples_per_sec"] > 100
    assert 0 < metrics["epoch_times_s"][0] < metrics["wall_time_s"]

    assert [ln.split()[0] for ln in lines if "] epoch 1/1:" in ln] == ["[chief-0]"]  # only the coordinator runs fit
    assert any(ln.startswith("[ps-0] ") and "serving grpc://" in ln for ln in lines)
    assert any(ln.startswith("[worker-0] ") and "serving grpc://" in ln for ln in lines)
    assert "[evaluator-0] evaluator: evaluated the final checkpoint (1 of 1 epochs); done" in lines
    assert summary["evaluator"]["checkpoint"] == 1 and summary["evaluator"]["final"] is True
    assert (train_dir / "checkpoints" / "ckpt-1.index").is_file()
    assert not list((train_dir / "checkpoints" / "backup").glob("*"))  # BackupAndRestore ran and cleaned up
    assert list((train_dir / "logs" / "train").glob("events.out.tfevents.*"))

    accuracy, fn = _test_accuracy(Path(outcome.saved_model_dir), mnist_subset_dir)
    print(f"ps job: {wall_s:.1f}s wall, test accuracy {accuracy:.4f}")
    assert accuracy > 0.6, accuracy  # 47 asynchronous steps of 64 examples; chance is 0.1; measured ~0.88
    (spec,) = fn.structured_input_signature[1].values()
    assert spec.dtype.name == "uint8" and spec.shape.as_list() == [None, 28, 28, 1]


@pytest.mark.slow
def test_evaluator_beside_two_workers_evaluates_the_final_checkpoint_into_the_summary_and_report(
        mnist_subset_dir, tmp_path):
    """kubeflow/trainer#1658: the evaluator was stopped when the chief succeeded, before the final checkpoint; it
    now gets evaluator_grace_s for it, exits by itself, and its last figures are in the summary and the report."""
    from tfk8s.core.builtin_trainer import trainer_args
    from tfk8s.core.data_format import load_metadata
    from tfk8s.launcher.backends import get_backend
    from tfk8s.runtime.shards import make_dataset
    from tfk8s.steps.launch_training import build_job, run_job
    from trainer.model import build_model

    train_dir = tmp_path / "train"
    lines: list[str] = []
    job = build_job(name="trainer-eval-test", counts=ReplicaCounts(worker=2, evaluator=1),
                    args=trainer_args(mnist_subset_dir, train_dir, 3, 64, 3e-3, max_train_examples=1500)
                    + ["--seed", "0"], backend=get_backend("local"), timeout_s=240, train_dir=train_dir,
                    data_dir=mnist_subset_dir)
    outcome = run_job(job, get_backend("local"), train_dir, log_sink=lines.append)

    assert outcome.launch.exit_codes == {"worker-0": 0, "worker-1": 0, "evaluator-0": 0}, "\n".join(lines[-40:])
    assert outcome.launch.stopped == []
    evals = [EVAL_LINE.search(ln) for ln in lines if ln.startswith("[evaluator-0] evaluator: checkpoint ")]
    assert evals, "\n".join(ln for ln in lines if ln.startswith("[evaluator-0]"))
    numbers = [int(m[1]) for m in evals]
    print(f"evaluator beside 2 workers: {[m[0] for m in evals]}")
    assert numbers == sorted(set(numbers)) and numbers[-1] == 3 and set(numbers) <= {1, 2, 3}
    assert "[evaluator-0] evaluator: evaluated the final checkpoint (3 of 3 epochs); done" in lines
    assert list((train_dir / "logs" / "eval").glob("events.out.tfevents.*"))
    final = outcome.summary["evaluator"]
    assert (final["checkpoint"], final["final"], final["evaluations"]) == (3, True, len(evals))
    assert (final["loss"], final["accuracy"]) == pytest.approx((float(evals[-1][2]), float(evals[-1][3])), abs=1e-4)
    from tfk8s.steps.report import write_run_report

    page = write_run_report(train_dir.parent).read_text()
    assert "the final checkpoint (3 of 3 epochs)" in page and f"{final['accuracy']:.4f}" in page

    # the evaluator's numbers are the test metrics of the checkpoint it names
    last = evals[-1]
    meta = load_metadata(str(mnist_subset_dir))
    model = build_model(meta, 3e-3)
    model.load_weights(str(train_dir / "checkpoints" / f"ckpt-{last[1]}")).expect_partial()
    got = model.evaluate(make_dataset(str(mnist_subset_dir), "test", batch_size=64, shuffle=False, repeat=False),
                         verbose=0, return_dict=True)
    assert abs(float(last[2]) - got["loss"]) < 2e-4 and abs(float(last[3]) - got["accuracy"]) < 2e-4
    assert got["accuracy"] > 0.5  # at least 24 synchronous steps of 64 examples; chance is 0.1

"""The launch step: turn the pipeline's parameters into a :class:`~tfk8s.launcher.TrainingJob`, run it on a
backend, and collect what the chief wrote (SavedModel, training_summary.json).

Backends: ``local`` (:mod:`tfk8s.launcher.local`) and ``kubernetes`` (:mod:`tfk8s.launcher.kubernetes`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tfk8s.cluster import ReplicaCounts
from tfk8s.contract import remove_scratch
from tfk8s.launcher import LaunchError, LaunchResult, TrainingJob

BACKENDS = ("local", "kubernetes")
REPLICA_LOG_DIR = "replica-logs"  # under the train dir: one <type>-<index>.log per replica, all attempts

# Defaults measured with 2 workers on 2 shared CPU cores, full MNIST (60,000 training examples): ~8-9 s per
# epoch, test accuracy 0.984-0.988 over 11 runs (1 epoch: 0.980-0.982, not robust). A large global batch keeps
# the number of all-reduce steps (~20 ms each on CPU) low; the trainer's cosine decay of the learning rate to
# 0 over all steps makes 2 epochs enough. The trainer's flags, the launch step and the pipeline share them.
DEFAULT_EPOCHS = 2
DEFAULT_BATCH_SIZE = 512
DEFAULT_LEARNING_RATE = 6e-3
# A job-level deadline by default, so that a program that hangs without ever reporting progress (which the
# progress watchdog cannot judge) fails within a day instead of at the Kubernetes backstop (7 days); MNIST trains
# in about a minute, and a longer training sets timeout_s (0: no deadline).
DEFAULT_TIMEOUT_S = 24 * 3600
TRAINER_MODULE = "trainer.task"
# Keras 3's fit() breaks under multi-worker strategies (keras-team/keras#20585): every replica uses tf-keras.
TRAINER_ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


@dataclass(frozen=True)
class TrainingOutcome:
    """A finished launch: the backend's result, the chief's SavedModel and its training summary."""

    launch: LaunchResult
    saved_model_dir: str
    summary: dict


def trainer_args(data_dir: str | os.PathLike, train_dir: str | os.PathLike, epochs: int, batch_size: int,
                 learning_rate: float, max_train_examples: int = 0) -> list[str]:
    """The trainer's command-line flags (``python -m trainer.task --help``); batch_size is the global batch."""
    args = ["--data-dir", str(data_dir), "--model-dir", str(train_dir), "--epochs", str(epochs),
            "--batch-size", str(batch_size), "--learning-rate", repr(float(learning_rate))]
    if max_train_examples:
        args += ["--max-train-examples", str(max_train_examples)]
    return args


def build_job(*, name: str, counts: ReplicaCounts, args: list[str], backend: str, success_policy: str = "",
              timeout_s: float | None = None, env: Mapping[str, str] | None = None,
              train_dir: str | os.PathLike = "", data_dir: str | os.PathLike = "",
              progress_timeout_s: float = 0) -> TrainingJob:
    """The training job every backend runs: each replica runs ``python -m trainer.task <args>``.

    The local backend runs the launcher's own interpreter; in a cluster the image's ``python``. With ps
    replicas (ParameterServerStrategy) the workers never exit by themselves, so the grace period lagging
    workers get after the chief's success is 0. ``train_dir`` and ``progress_timeout_s`` arm the progress
    watchdog (:class:`~tfk8s.launcher.TrainingJob`).

    Raises:
        ValueError: unknown backend (the message lists the known ones) or invalid job fields.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    python = sys.executable if backend == "local" else "python"
    # Under ParameterServerStrategy the workers serve the chief and never exit: stop them at once after it.
    grace = {"grace_period_s": 0.0} if counts.ps else {}
    return TrainingJob(name=name, counts=counts, command=(python, "-m", TRAINER_MODULE, *args),
                       env={**TRAINER_ENV, **(env or {})}, success_policy=success_policy,
                       timeout_s=timeout_s or None, train_dir=str(train_dir or ""), data_dir=str(data_dir or ""),
                       progress_timeout_s=progress_timeout_s, **grace)


def run_job(job: TrainingJob, backend: str, train_dir: str | os.PathLike, *,
            kubernetes_params: Mapping | None = None, log_sink: Callable[[str], None] | None = None,
            max_restarts: int | None = None) -> TrainingOutcome:
    """Run ``job`` on ``backend`` and read the chief's outputs from ``train_dir``.

    Args:
        kubernetes_params: keyword arguments of ``KubernetesSettings.from_params`` (kubernetes backend only).
        max_restarts: the local backend's restart budget (default: ``kubernetes_params["max_restarts"]``, else
            :data:`tfk8s.launcher.policy.DEFAULT_MAX_RESTARTS`); on Kubernetes it is the settings'.

    Raises:
        LaunchError (and subclasses): a replica failed, the job timed out, or the chief succeeded without
            writing its SavedModel / training_summary.json.
    """
    from tfk8s.tracking import tracked

    namespace = ""
    if backend == "kubernetes":
        from tfk8s.kube.settings import KubernetesSettings

        namespace = KubernetesSettings.from_params(**dict(kubernetes_params or {})).namespace
    try:
        # The job record (<train dir>/job.json), every replica's log kept on the volume, the progress display.
        with tracked(job, backend, train_dir, log_sink, namespace=namespace) as track:
            result = _run(job, backend, train_dir, kubernetes_params, track.sink, max_restarts)
            outcome = _collect(job, result, train_dir)
            track.recorder.result = result
        return outcome
    finally:
        remove_scratch(train_dir)  # the non-coordinators' model dirs (tfk8s.contract)


def _run(job: TrainingJob, backend: str, train_dir, kubernetes_params, sink, max_restarts: int | None
         ) -> LaunchResult:
    if backend == "local":
        from tfk8s.launcher.local import run_local
        from tfk8s.launcher.policy import DEFAULT_MAX_RESTARTS

        if max_restarts is None:
            max_restarts = int((kubernetes_params or {}).get("max_restarts", DEFAULT_MAX_RESTARTS))
        result = run_local(job, log_sink=sink, log_dir=Path(train_dir) / REPLICA_LOG_DIR, max_restarts=max_restarts)
    elif backend == "kubernetes":
        from tfk8s.kube.settings import KubernetesSettings
        from tfk8s.launcher.kubernetes import run_kubernetes

        settings = KubernetesSettings.from_params(**dict(kubernetes_params or {}))
        result = run_kubernetes(job, settings, log_sink=sink)
    else:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    return result


def _collect(job: TrainingJob, result: LaunchResult, train_dir) -> TrainingOutcome:
    saved_model = Path(train_dir) / "saved_model"
    summary_file = Path(train_dir) / "training_summary.json"
    if not (saved_model / "saved_model.pb").is_file() or not summary_file.is_file():
        raise LaunchError(
            f"{job.name} succeeded but the chief wrote no SavedModel/summary under {train_dir}: in a cluster, "
            "check that the PVC is mounted at the same path in the replicas and the launcher"
        )
    return TrainingOutcome(result, str(saved_model), json.loads(summary_file.read_text()))

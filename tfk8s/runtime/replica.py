"""This replica as the contract describes it (:func:`context`), and the process-wide state the runtime keeps:
progress reports, divergence, where training resumed, epoch times.

The contract's variables (:mod:`tfk8s.core.contract`; ``docs/training-program.md``) and their defaults for a
program run alone, outside tfk8s (under ``./tfk8s-output``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tfk8s.core import contract
from tfk8s.core.cluster import Replica, ReplicaType, Strategy, coordinator_of, parse_tf_config, strategy_of
from tfk8s.core.layout import TrainLayout
from tfk8s.core.progress import ProgressReporter

# The contract's environment variables (tfk8s.core.contract; docs/training-program.md).
JOB_NAME_ENV = contract.ENV_JOB_NAME
DATA_DIR_ENV = contract.ENV_DATA_DIR
MODEL_DIR_ENV = contract.ENV_MODEL_DIR
CHECKPOINT_DIR_ENV = contract.ENV_CHECKPOINT_DIR
TENSORBOARD_DIR_ENV = contract.ENV_TENSORBOARD_DIR
PROGRESS_FILE_ENV = contract.ENV_PROGRESS_FILE
METRICS_FILE_ENV = contract.ENV_METRICS_FILE

DEFAULT_OUTPUT_DIR = "tfk8s-output"  # under the working directory, for a program run outside tfk8s


@dataclass(frozen=True)
class Context:
    """This replica as the contract describes it (see :func:`context`).

    Attributes:
        replica_type: ``chief``, ``worker``, ``ps`` or ``evaluator`` (``chief`` for a process without TF_CONFIG).
        replica_index: 0-based index within the type.
        cluster: the cluster spec from TF_CONFIG (``{}`` for one process).
        job_name, data_dir, model_dir, checkpoint_dir, tensorboard_dir, progress_file, metrics_file: from the
            contract's variables (``data_dir``/``progress_file``/``metrics_file`` None when unset).
    """

    replica_type: str
    replica_index: int
    cluster: dict[str, list[str]] = field(default_factory=dict)
    job_name: str = "local"
    data_dir: str | None = None
    model_dir: str = ""
    checkpoint_dir: str = ""
    tensorboard_dir: str = ""
    progress_file: str | None = None
    metrics_file: str | None = None

    @property
    def replica(self) -> Replica:
        """This replica's type and task index."""
        return Replica(ReplicaType(self.replica_type), self.replica_index)

    @property
    def label(self) -> str:
        """``<type>-<index>``, e.g. ``worker-1`` (the launchers' log prefix)."""
        return self.replica.label

    def _count(self, rtype: ReplicaType) -> int:
        return len(self.cluster.get(rtype.value, []))

    @property
    def num_workers(self) -> int:
        """Training processes that read data: chief + workers (1 for one process)."""
        return max(1, self._count(ReplicaType.CHIEF) + self._count(ReplicaType.WORKER))

    @property
    def strategy_kind(self) -> Strategy:
        """The strategy the cluster calls for (:func:`tfk8s.core.cluster.strategy_of`)."""
        return strategy_of(self._count(ReplicaType.CHIEF), self._count(ReplicaType.WORKER),
                           self._count(ReplicaType.PS))

    @property
    def is_coordinator(self) -> bool:
        """The replica whose outputs count: the cluster's coordinator (:func:`tfk8s.core.cluster.coordinator_of`),
        or the single process; never the evaluator."""
        if self.replica.replica_type is ReplicaType.EVALUATOR:
            return False
        if not self.cluster:
            return True
        return self.replica == coordinator_of(bool(self._count(ReplicaType.CHIEF)))


def context(environ: Mapping[str, str] | None = None) -> Context:
    """This replica's :class:`Context`, from TF_CONFIG and the ``TFK8S_*`` variables of ``environ``
    (default ``os.environ``), with the module docstring's defaults for what is unset.

    Raises:
        tfk8s.core.cluster.ClusterConfigError: TF_CONFIG is set but not valid.
    """
    env = os.environ if environ is None else environ
    cluster, replica = parse_tf_config(env.get("TF_CONFIG"))
    rtype, index = (replica.replica_type.value, replica.index) if replica else ("chief", 0)
    ctx = Context(rtype, index, cluster, job_name=env.get(JOB_NAME_ENV) or "local",
                  data_dir=env.get(DATA_DIR_ENV) or None,
                  progress_file=env.get(PROGRESS_FILE_ENV) or None, metrics_file=env.get(METRICS_FILE_ENV) or None)
    out = TrainLayout(Path(DEFAULT_OUTPUT_DIR).absolute())  # a train dir of its own, as tfk8s would lay it out
    own_model = out.saved_model if ctx.is_coordinator else out.scratch_model(ctx.label)
    return replace(ctx, model_dir=env.get(MODEL_DIR_ENV) or str(own_model),
                   checkpoint_dir=env.get(CHECKPOINT_DIR_ENV) or str(out.checkpoints),
                   tensorboard_dir=env.get(TENSORBOARD_DIR_ENV) or str(out.tensorboard))


_STATE: dict[str, Any] = {"strategy": None, "diverged": False, "reporter": None, "resumed_from": 0,
                          "epoch_times": []}


def reporter(ctx: Context) -> ProgressReporter:
    """The progress reporter of this replica (one per process, writing ``TFK8S_PROGRESS_FILE``)."""
    if _STATE["reporter"] is None or _STATE["reporter"].replica != ctx.label:
        _STATE["reporter"] = ProgressReporter(ctx.progress_file, ctx.label)
    return _STATE["reporter"]


def diverged() -> bool:
    """Whether :func:`callbacks`' NaN check stopped a training of this process (loss NaN or inf)."""
    return bool(_STATE["diverged"])


def progress(state: str = "running", *, force: bool = False, **fields) -> bool:
    """Report this replica's progress to ``TFK8S_PROGRESS_FILE`` from a custom training loop (at most every 2 s
    unless ``force`` or the state changes; :func:`callbacks` does it for ``fit``). ``fields``: ``epoch``
    (1-based), ``epochs``, ``step`` (global steps done), ``steps`` (planned), ``examples_per_sec``, ``loss``
    (:mod:`tfk8s.core.progress`). Returns whether the file was written; a no-op outside tfk8s."""
    return reporter(context()).update(state, force=force, **fields)


def resumed_from_epoch() -> int:
    """The epochs already done when :func:`callbacks`' BackupAndRestore resumed this process (0: fresh)."""
    return int(_STATE["resumed_from"])


def epoch_times() -> list[float]:
    """Seconds of each epoch this process ran (measured by :func:`callbacks`' progress callback)."""
    return list(_STATE["epoch_times"])

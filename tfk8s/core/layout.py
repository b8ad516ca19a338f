"""Where everything lives on the shared volume: the ONE place its folder and file names are spelled.

::

    <root>/                                 the PVC's mount path (DEFAULT_ROOT) in a cluster, --volume locally
      runs/<run id>/
        data.json                           the run's data record: the prepared folder it read (prepare dataset)
        data/                               sharded TFRecords + metadata.json, only with reuse_data=false
        train/                              the launch step's train dir (TrainLayout):
          saved_model/                        the coordinator's TFK8S_MODEL_DIR, exported by the next step
          scratch/<type>-<index>/saved_model/ every other replica's TFK8S_MODEL_DIR, removed after the job
          checkpoints/                        TFK8S_CHECKPOINT_DIR: ckpt-<epoch> weights, backup/ (BackupAndRestore)
          logs/train/, logs/eval/             TFK8S_TENSORBOARD_DIR: TensorBoard event files
          progress/<type>-<index>.json        TFK8S_PROGRESS_FILE (tfk8s.core.progress)
          metrics/<type>-<index>.json         TFK8S_METRICS_FILE (tfk8s.core.contract)
          replica-logs/<type>-<index>.log     every replica's whole log, every attempt (tfk8s.tracking)
          job.json                            the job record (tfk8s.tracking.records)
          training_summary.json               the job plus the coordinator's metrics (launch step)
        evaluation.json, report.html        the evaluation and the HTML report              (evaluate)
      datasets/<data set>/<version>/        the prepared-data store (tfk8s.core.data_store)  (prepare dataset)
        <key>/                              sharded TFRecords + metadata.json + manifest.json, reused by
                                            every run of the same key (data set, version, splits, caps...)
        <key>.lock                          held (flock) by the one run preparing <key>
        .staging-<key>-<host>-<pid>/        a preparation in progress, renamed to <key>/ when complete
      datasets/.resolved/<digest>.json      what a prepare request (name, TFDS folder, TFDS version) resolved to,
                                            so a reuse needs no TFDS import (tfk8s.core.data_store)
      models/<model name>/<version>/        every exported SavedModel, TF Serving layout     (export)
      serving/<model name>/<version>/       blessed versions only: point TF Serving here     (push)
      pipeline-root/                        kfp.local's artifacts (--local runs only)

The launcher mounts the same PVC at the same path into every replica, so these paths mean the same thing in
every pod. Plain Python (standard library only).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = "/mnt/tfk8s"
"""Where every step and every replica mounts the PVC in a cluster (the ``volume_root`` parameter)."""

RUNS_DIR = "runs"
DATA_DIR = "data"
DATA_RECORD_FILE = "data.json"  # under the run dir: which prepared folder the run read
DATA_HOLD_FILE = "data-hold.json"  # under the run dir: the run's hold on that folder (tfk8s.core.data_store.reading)
DATASETS_DIR = "datasets"  # the prepared-data store
RESOLVED_DIR = ".resolved"  # under DATASETS_DIR: prepare requests resolved (data_store.remember_resolution)
MANIFEST_FILE = "manifest.json"  # in a store folder: its key's identity and every file's size, mtime, sha256
LOCK_SUFFIX = ".lock"
STAGING_PREFIX = ".staging-"
TRASH_PREFIX = ".removing-"  # a store folder being deleted (renamed first, so it is never half-read as valid)
TRAIN_DIR = "train"
MODELS_DIR = "models"
SERVING_DIR = "serving"
PIPELINE_ROOT_DIR = "pipeline-root"
EVALUATION_FILE = "evaluation.json"
REPORT_FILE = "report.html"
# under the train dir
SAVED_MODEL_DIR = "saved_model"
SCRATCH_DIR = "scratch"
CHECKPOINT_DIR = "checkpoints"
BACKUP_DIR = "backup"  # under the checkpoint dir
TENSORBOARD_DIR = "logs"
TENSORBOARD_TRAIN = "train"  # under the TensorBoard dir: the trainers' scalars
TENSORBOARD_EVAL = "eval"  # ... and an evaluator's
PROGRESS_DIR = "progress"
METRICS_DIR = "metrics"
REPLICA_LOG_DIR = "replica-logs"
RECORD_FILE = "job.json"
SUMMARY_FILE = "training_summary.json"
EVALUATION_NAME = "evaluation"  # eval_command's progress and metrics file stem (progress/, metrics/)

MIN_KFP_BACKEND = "2.5"
"""The oldest KFP backend that substitutes ``dsl.PIPELINE_JOB_ID_PLACEHOLDER`` (the run id) in a component's
inputs (kubeflow/pipelines#11599); older ones pass the placeholder through as text."""
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _check_segment(what: str, value: str) -> str:
    if not value or not _SAFE.match(value) or value in (".", ".."):
        raise ValueError(
            f"{what} {value!r} must be a single path segment of letters, digits, '.', '_' or '-' "
            f"(it names a folder on the volume)"
        )
    return value


@dataclass(frozen=True)
class TrainLayout:
    """The paths under one run's train dir (``<root>/runs/<run id>/train``, the launch step's); see the module
    docstring. Pure: computes paths, creates nothing.

    Attributes:
        root: the train dir.
    """

    root: Path

    def __init__(self, root: str | os.PathLike):
        object.__setattr__(self, "root", Path(root))

    @property
    def run_dir(self) -> Path:
        """``<root>/runs/<run id>``: the train dir's parent."""
        return self.root.parent

    @property
    def saved_model(self) -> Path:
        """The coordinator's ``TFK8S_MODEL_DIR``."""
        return self.root / SAVED_MODEL_DIR

    @property
    def scratch(self) -> Path:
        """The non-coordinators' model dirs, removed after the job."""
        return self.root / SCRATCH_DIR

    def scratch_model(self, label: str) -> Path:
        """``scratch/<label>/saved_model``: the ``TFK8S_MODEL_DIR`` of replica ``label`` (not the coordinator)."""
        return self.scratch / label / SAVED_MODEL_DIR

    @property
    def checkpoints(self) -> Path:
        """``TFK8S_CHECKPOINT_DIR``."""
        return self.root / CHECKPOINT_DIR

    @property
    def backup(self) -> Path:
        """BackupAndRestore's folder, under the checkpoints."""
        return self.checkpoints / BACKUP_DIR

    @property
    def tensorboard(self) -> Path:
        """``TFK8S_TENSORBOARD_DIR``."""
        return self.root / TENSORBOARD_DIR

    @property
    def progress_dir(self) -> Path:
        return self.root / PROGRESS_DIR

    def progress_file(self, label: str) -> Path:
        """``progress/<label>.json``: ``TFK8S_PROGRESS_FILE`` of replica ``label`` (e.g. ``worker-1``)."""
        return self.progress_dir / f"{label}.json"

    @property
    def metrics_dir(self) -> Path:
        return self.root / METRICS_DIR

    def metrics_file(self, label: str) -> Path:
        """``metrics/<label>.json``: ``TFK8S_METRICS_FILE`` of replica ``label``."""
        return self.metrics_dir / f"{label}.json"

    @property
    def replica_logs(self) -> Path:
        return self.root / REPLICA_LOG_DIR

    def replica_log(self, label: str) -> Path:
        """``replica-logs/<label>.log``: every attempt's output of replica ``label``."""
        return self.replica_logs / f"{label}.log"

    @property
    def record(self) -> Path:
        """The job record, ``job.json``."""
        return self.root / RECORD_FILE

    @property
    def summary(self) -> Path:
        """``training_summary.json``."""
        return self.root / SUMMARY_FILE

    @property
    def evaluation(self) -> Path:
        """``<run dir>/evaluation.json``."""
        return self.run_dir / EVALUATION_FILE

    @property
    def report(self) -> Path:
        """``<run dir>/report.html``."""
        return self.run_dir / REPORT_FILE

    def folders(self) -> tuple[Path, ...]:
        """The folders the launch step creates before any replica starts (the replicas write into them)."""
        return (self.root, self.checkpoints, self.tensorboard, self.progress_dir, self.metrics_dir)


def recreated_line(label: str, restart: int | str, why: str = "restart") -> str:
    """The separator line between two attempts of replica ``label`` in its log file (``replica-logs/``; the
    launch step writes it for both backends), stamped with the UTC time; ``why`` is ``restart`` (counted
    against max_restarts) or ``preemption``."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return (f"----- tfk8s {stamp}: {label} recreated ({why} {restart}); the new attempt's lines follow its "
            f"predecessor's last ones -----")


def tensorboard_command(train_dir: str | os.PathLike) -> str:
    """The exact command that shows a run's TensorBoard logs (``pip install 'tfk8s[tensorboard]'`` first)."""
    return f"tensorboard --logdir {TrainLayout(train_dir).tensorboard}"


def check_model_name(name: str) -> str:
    """``name`` if it can name a model's folders (``models/<name>/``, ``serving/<name>/``).

    Raises:
        ValueError: not a single path segment of letters, digits, ``.``, ``_`` or ``-``.
    """
    return _check_segment("model name", name)


@dataclass(frozen=True)
class VolumeLayout:
    """The volume's top level: the runs, every model's exports and served versions, and (``--local``) kfp.local's
    pipeline root. Pure: computes paths, creates nothing.

    Raises:
        ValueError: an empty ``root`` (the message names the PVC mount path to pass).
    """

    root: Path

    def __init__(self, root: str | os.PathLike):
        if not str(root):
            raise ValueError(f"volume root is empty: pass the PVC mount path, e.g. {DEFAULT_ROOT}")
        object.__setattr__(self, "root", Path(root))

    @property
    def runs(self) -> Path:
        """``<root>/runs``: one folder per pipeline run."""
        return self.root / RUNS_DIR

    def run(self, run_id: str) -> RunLayout:
        """The layout of run ``run_id`` (:class:`RunLayout`; the id is checked there)."""
        return RunLayout(str(self.root), run_id)

    def export_base(self, model_name: str) -> Path:
        """``<root>/models/<model name>``: every exported version, blessed or not.

        Raises:
            ValueError: a model name that is not one path segment (:func:`check_model_name`).
        """
        return self.root / MODELS_DIR / check_model_name(model_name)

    def serving_base(self, model_name: str) -> Path:
        """``<root>/serving/<model name>``: blessed versions only; the base path for TF Serving's config.

        Raises:
            ValueError: a model name that is not one path segment (:func:`check_model_name`).
        """
        return self.root / SERVING_DIR / check_model_name(model_name)

    @property
    def pipeline_root(self) -> Path:
        """``<root>/pipeline-root``: kfp.local's artifacts of ``--local`` runs."""
        return self.root / PIPELINE_ROOT_DIR

    def records(self) -> list[Path]:
        """Every job record, ``<root>/runs/*/train/job.json``, unsorted."""
        return list(self.runs.glob(f"*/{TRAIN_DIR}/{RECORD_FILE}"))

    def data_records(self) -> list[Path]:
        """Every run's data record, ``<root>/runs/*/data.json``, unsorted."""
        return list(self.runs.glob(f"*/{DATA_RECORD_FILE}"))

    @property
    def datasets(self) -> Path:
        """``<root>/datasets``: the prepared-data store (:mod:`tfk8s.core.data_store`)."""
        return self.root / DATASETS_DIR

    def dataset_base(self, dataset: str, version: str) -> Path:
        """``<root>/datasets/<data set>/<version>``: every prepared key of one TFDS data set version.

        Raises:
            ValueError: a name or version that is not one path segment.
        """
        return self.datasets / _check_segment("data set name", dataset) / _check_segment("data set version",
                                                                                         version)

    def prepared(self, dataset: str, version: str, key: str) -> Path:
        """``<root>/datasets/<data set>/<version>/<key>``: one complete preparation (shards, metadata.json,
        manifest.json)."""
        return self.dataset_base(dataset, version) / _check_segment("data key", key)

    def resolved(self, digest: str) -> Path:
        """``<root>/datasets/.resolved/<digest>.json``: what one prepare request resolved to
        (:func:`tfk8s.core.data_store.remember_resolution`)."""
        return self.datasets / RESOLVED_DIR / (_check_segment("request digest", digest) + ".json")

    def prepared_lock(self, dataset: str, version: str, key: str) -> Path:
        """``<...>/<key>.lock``: the lock file the run preparing ``key`` holds (``fcntl.flock``)."""
        return self.dataset_base(dataset, version) / (_check_segment("data key", key) + LOCK_SUFFIX)

    def prepared_staging(self, dataset: str, version: str, key: str, owner: str) -> Path:
        """``<...>/.staging-<key>-<owner>``: where ``owner`` (``<host>-<pid>``) writes ``key`` before renaming
        it into place (same folder, so the rename is atomic)."""
        return self.dataset_base(dataset, version) / f"{STAGING_PREFIX}{_check_segment('data key', key)}-{owner}"


@dataclass(frozen=True)
class RunLayout:
    """Paths of one pipeline run on the volume.

    Raises:
        ValueError: if ``root`` is empty, or ``run_id``/``model_name`` would escape their folder.
    """

    root: str
    run_id: str
    model_name: str = "model"

    def __post_init__(self) -> None:
        if not self.root:
            raise ValueError(f"volume root is empty: pass the PVC mount path, e.g. {DEFAULT_ROOT}")
        if self.run_id.startswith("{{") and self.run_id.endswith("}}"):
            raise ValueError(
                f"run id {self.run_id!r} is a KFP placeholder the backend did not replace: Kubeflow Pipelines "
                f"backends older than {MIN_KFP_BACKEND} pass dsl.PIPELINE_JOB_ID_PLACEHOLDER through as text. Upgrade "
                f"the KFP installation to {MIN_KFP_BACKEND} or newer, or run the Argo export "
                f"(python pipelines/train.py --compile --format argo), which uses the workflow's uid")
        _check_segment("run id", self.run_id)
        _check_segment("model name", self.model_name)

    @property
    def run_dir(self) -> Path:
        return Path(self.root) / RUNS_DIR / self.run_id

    @property
    def data_dir(self) -> Path:
        """The run's own sharded TFRecords and metadata.json (prepared only with ``reuse_data=false``; else the
        run reads a store folder, :meth:`VolumeLayout.prepared`, named by :attr:`data_record`)."""
        return self.run_dir / DATA_DIR

    @property
    def data_record(self) -> Path:
        """``<run dir>/data.json``: the folder the run's replicas read, its key and who prepared it."""
        return self.run_dir / DATA_RECORD_FILE

    @property
    def data_hold(self) -> Path:
        """``<run dir>/data-hold.json``: whether a step of the run still reads its data (:mod:`tfk8s.core.data_store`,
        "holds")."""
        return self.run_dir / DATA_HOLD_FILE

    @property
    def train_dir(self) -> Path:
        """The launch step's train dir (:class:`TrainLayout`)."""
        return self.run_dir / TRAIN_DIR

    @property
    def train(self) -> TrainLayout:
        return TrainLayout(self.train_dir)

    @property
    def export_base(self) -> Path:
        """``<root>/models/<model name>`` (:meth:`VolumeLayout.export_base`)."""
        return VolumeLayout(self.root).export_base(self.model_name)

    @property
    def serving_base(self) -> Path:
        """``<root>/serving/<model name>`` (:meth:`VolumeLayout.serving_base`)."""
        return VolumeLayout(self.root).serving_base(self.model_name)

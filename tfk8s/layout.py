"""Where everything lives on the shared volume: one root, laid out per run, exports shared across runs.

::

    <root>/
      runs/<run id>/data/          sharded TFRecords + metadata.json      (prepare_dataset)
      runs/<run id>/train/         backup/ (BackupAndRestore), checkpoints/ (per epoch, for the evaluator),
                                   logs/{train,eval}/ (TensorBoard), saved_model/ (the chief's),
                                   training_summary.json, replica-logs/ (every replica's whole log),
                                   progress/ (tfk8s.progress), job.json (tfk8s.jobs)  (launch_training)
      runs/<run id>/evaluation.json, report.html   the evaluation and the HTML report (evaluate_model)
      models/<model name>/<version>/   every exported SavedModel, TF Serving layout (export_model)
      serving/<model name>/<version>/  blessed versions only: point TF Serving here (push_model)

``<root>`` is the PVC's mount path in a cluster (``/mnt/tfk8s``) and a local folder with ``--local``.
The launcher mounts the same PVC at the same path into every replica, so these paths mean the same
thing in every pod.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = "/mnt/tfk8s"
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
            raise ValueError("volume root is empty: pass the PVC mount path, e.g. /mnt/tfk8s")
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
        return Path(self.root) / "runs" / self.run_id

    @property
    def data_dir(self) -> Path:
        """Sharded TFRecords and metadata.json."""
        return self.run_dir / "data"

    @property
    def train_dir(self) -> Path:
        """The trainer's ``--model-dir``: checkpoints, logs, saved_model, training_summary.json."""
        return self.run_dir / "train"

    @property
    def export_base(self) -> Path:
        """``<root>/models/<model name>``: every exported version, blessed or not."""
        return Path(self.root) / "models" / self.model_name

    @property
    def serving_base(self) -> Path:
        """``<root>/serving/<model name>``: blessed versions only; the base path for TF Serving's config."""
        return Path(self.root) / "serving" / self.model_name

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

import errno
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
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


class VolumeWriteError(RuntimeError):
    """Writing to the shared volume failed for a reason of the volume (read-only, full, not writable, a root
    that cannot exist); the message names the path and the fix. Raised by :func:`volume_writes`."""


_READ_ONLY = ("read-only file system",)
_FULL = ("no space left on device", "disk quota exceeded")


def _why(error: BaseException) -> tuple[str, str] | None:
    """``(kind, path)`` of a volume failure (``read-only``, ``full``, ``denied``, ``missing``), else None.

    Understands OSError's errno, :class:`shutil.Error` (``copytree``'s list of failures) and TensorFlow's
    file errors (by their message: ``tf.io.gfile`` raises ``tf.errors.OpError``, not OSError).
    """
    if isinstance(error, shutil.Error) and error.args and isinstance(error.args[0], list):
        for entry in error.args[0]:
            text = str(entry[-1]).lower() if isinstance(entry, tuple) and entry else str(entry).lower()
            dst = str(entry[1]) if isinstance(entry, tuple) and len(entry) > 1 else ""
            if any(m in text for m in _FULL):
                return "full", dst
            if any(m in text for m in _READ_ONLY):
                return "read-only", dst
        return None
    if isinstance(error, OSError) and error.errno is not None:
        path = str(error.filename or "")
        kind = {errno.EROFS: "read-only", errno.ENOSPC: "full", errno.EDQUOT: "full", errno.EACCES: "denied",
                errno.EPERM: "denied", errno.ENOENT: "missing", errno.ENOTDIR: "missing"}.get(error.errno)
        return (kind, path) if kind else None
    text = str(getattr(error, "message", "") or error).lower()
    if type(error).__module__.startswith("tensorflow"):
        if any(m in text for m in _FULL):
            return "full", ""
        if any(m in text for m in _READ_ONLY):
            return "read-only", ""
        if "permission denied" in text:
            return "denied", ""
    return None


def _missing_fix(where: Path) -> str:
    """Why ``where`` cannot be created: the nearest existing ancestor is a file, or none is writable."""
    for ancestor in where.parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                return (f"{ancestor} is a file, not a folder, so nothing can be created below it: pass an existing "
                        f"writable folder as --volume / volume_root")
            return (f"it cannot be created in {ancestor}: pass an existing writable folder as --volume / "
                    f"volume_root")
    return "pass an existing writable folder as --volume / volume_root"


def _related(failed: str, path: str | os.PathLike) -> bool:
    """Whether ``failed`` is ``path``, one of its parents or inside it."""
    if not failed:
        return False
    a, b = Path(os.path.abspath(failed)), Path(os.path.abspath(path))
    return a == b or a in b.parents or b in a.parents


@contextmanager
def volume_writes(path: str | os.PathLike, what: str) -> Iterator[None]:
    """Turn a failure of the volume while writing ``what`` under ``path`` into one :class:`VolumeWriteError`
    naming the path and the fix (instead of ``OSError: [Errno 30] ...`` or ``shutil.Error`` with a traceback).
    Other errors pass unchanged. What a step writes is staged and renamed into place, so earlier runs and
    exports stay intact.

    Raises:
        VolumeWriteError: the volume is read-only, full, not writable by this user, or ``path`` cannot exist.
    """
    try:
        yield
    except Exception as e:  # TensorFlow's file errors (tf.errors.OpError) are no OSError; re-raised below
        why = _why(e)
        if why is None:
            raise
        kind, at = why
        if kind in ("missing", "denied") and not _related(at, path):
            raise  # e.g. a missing input elsewhere: not the volume's fault
        where = at or str(path)
        if kind == "read-only":
            fix = ("the volume is read-only: mount it read-write (a ReadWriteMany PVC, not mounted readOnly; "
                   "locally a writable --volume folder)")
        elif kind == "full":
            fix = ("the volume is full: free space (old runs under <root>/runs/, unneeded versions under "
                   "<root>/models/), or use a larger volume (pvc_size when the pipeline creates the PVC)")
        elif kind == "denied":
            fix = ("permission denied: make the volume writable by this user (in a cluster the project image "
                   "runs as UID 10001: the PVC needs fsGroup 10001 or matching ownership)")
        else:
            fix = _missing_fix(Path(where))
        raise VolumeWriteError(f"cannot write {what} to {where}: {fix}") from None

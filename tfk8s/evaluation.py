"""Metrics of a classifier on a data split, and the quality gate (TFX Evaluator's "blessing").

:func:`compute_metrics` is pure NumPy (testable without TensorFlow); :func:`evaluate_saved_model` runs an
exported SavedModel's serving signature over a split written by ``prepare_dataset``.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass(frozen=True)
class EvalResult:
    """Evaluation of a classifier on ``num_examples`` examples.

    Attributes:
        accuracy: fraction of correct argmax predictions, in [0, 1].
        loss: mean sparse categorical cross-entropy (natural log) of the predicted probabilities.
        precision, recall: per class, in class-index order (0.0 where a class has no predictions/examples).
        confusion_matrix: ``[num_classes][num_classes]`` counts, row = true class, column = predicted class.
        label_names: class names in index order.
    """

    num_examples: int
    accuracy: float
    loss: float
    precision: list[float]
    recall: list[float]
    confusion_matrix: list[list[int]]
    label_names: list[str]

    def to_dict(self) -> dict:
        """All fields as a JSON-serialisable dict."""
        return asdict(self)


def compute_metrics(labels: np.ndarray, probabilities: np.ndarray, label_names: list[str]) -> EvalResult:
    """Accuracy, loss, per-class precision/recall and the confusion matrix.

    Args:
        labels: int array ``[N]`` of true class indices in ``[0, C)``.
        probabilities: float array ``[N, C]`` of predicted class probabilities (rows sum to ~1).
        label_names: ``C`` class names.

    Raises:
        ValueError: on mismatched shapes, an empty set, or labels outside ``[0, C)``.
    """
    labels = np.asarray(labels).astype(np.int64).reshape(-1)
    probabilities = np.asarray(probabilities, dtype=np.float64)
    num_classes = len(label_names)
    if probabilities.ndim != 2 or probabilities.shape != (labels.shape[0], num_classes):
        raise ValueError(
            f"probabilities must have shape [N={labels.shape[0]}, C={num_classes}], got {probabilities.shape}"
        )
    if labels.size == 0:
        raise ValueError("cannot evaluate on 0 examples: is the split empty?")
    if labels.min() < 0 or labels.max() >= num_classes:
        raise ValueError(f"labels must lie in [0, {num_classes}), got [{labels.min()}, {labels.max()}]")
    predicted = probabilities.argmax(axis=1)
    cm = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(cm, (labels, predicted), 1)
    tp = np.diag(cm).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.nan_to_num(tp / cm.sum(axis=0))
        recall = np.nan_to_num(tp / cm.sum(axis=1))
    eps = 1e-7
    picked = np.clip(probabilities[np.arange(labels.size), labels], eps, 1.0)
    return EvalResult(
        num_examples=int(labels.size),
        accuracy=float(tp.sum() / labels.size),
        loss=float(-np.log(picked).mean()),
        precision=[float(x) for x in precision],
        recall=[float(x) for x in recall],
        confusion_matrix=cm.tolist(),
        label_names=list(label_names),
    )


def evaluate_saved_model(model_dir: str | os.PathLike, data_dir: str | os.PathLike, split: str = "test",
                         batch_size: int = 512) -> EvalResult:
    """Run a SavedModel's ``serving_default`` signature over ``split`` of a prepared data set.

    Args:
        model_dir: an exported version folder (``<export base>/<version>``).
        data_dir: a folder written by :func:`tfk8s.dataset.prepare_dataset` (metadata.json + shards).
        split: the split to evaluate.
        batch_size: examples per forward pass.

    Raises:
        tfk8s.export.ExportError: the model does not load or has no serving signature.
        ValueError: the split is missing, or the model's output does not have one column per class.
    """
    import tensorflow as tf

    from tfk8s.dataset import load_metadata
    from tfk8s.export import SERVING_SIGNATURE, serving_signature
    from trainer.data import make_dataset

    serving_signature(model_dir)  # clear error if it is not a servable model
    fn = tf.saved_model.load(str(model_dir)).signatures[SERVING_SIGNATURE]
    (input_name,) = fn.structured_input_signature[1].keys()
    metadata = load_metadata(str(data_dir))
    labels, probs = [], []
    for images, batch_labels in make_dataset(str(data_dir), split, batch_size=batch_size, shuffle=False,
                                             repeat=False):
        (out,) = fn(**{input_name: images}).values()
        probs.append(out.numpy())
        labels.append(batch_labels.numpy())
    return compute_metrics(np.concatenate(labels), np.concatenate(probs), list(metadata.label_names))


@dataclass(frozen=True)
class Thresholds:
    """The quality gate, after TFX's Evaluator: absolute floor and allowed regression vs the baseline.

    Attributes:
        min_accuracy: the candidate's accuracy must be >= this (0 disables).
        max_accuracy_drop: if a baseline (last blessed model) exists, the candidate may be at most this much
            below its accuracy (absolute, e.g. 0.005 = half a point). Negative disables.
    """

    min_accuracy: float = 0.0
    max_accuracy_drop: float = -1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_accuracy <= 1.0 or math.isnan(self.min_accuracy):
            raise ValueError(f"min_accuracy must be in [0, 1], got {self.min_accuracy}")


@dataclass(frozen=True)
class Blessing:
    """The gate's verdict: ``blessed`` and the reasons (one line per check, passed or failed)."""

    blessed: bool
    reasons: list[str] = field(default_factory=list)


def bless(candidate: EvalResult, thresholds: Thresholds, baseline_accuracy: float | None = None) -> Blessing:
    """Apply ``thresholds`` to ``candidate`` (and to its difference from ``baseline_accuracy``)."""
    reasons, ok = [], True
    if candidate.accuracy >= thresholds.min_accuracy:
        reasons.append(f"accuracy {candidate.accuracy:.4f} >= min_accuracy {thresholds.min_accuracy:.4f}")
    else:
        ok = False
        reasons.append(f"accuracy {candidate.accuracy:.4f} < min_accuracy {thresholds.min_accuracy:.4f}")
    if baseline_accuracy is not None and thresholds.max_accuracy_drop >= 0:
        drop = baseline_accuracy - candidate.accuracy
        verdict = "<=" if drop <= thresholds.max_accuracy_drop else ">"
        ok = ok and drop <= thresholds.max_accuracy_drop
        reasons.append(
            f"accuracy drop vs last blessed {baseline_accuracy:.4f} is {drop:+.4f} {verdict} "
            f"max_accuracy_drop {thresholds.max_accuracy_drop:.4f}"
        )
    return Blessing(ok, reasons)

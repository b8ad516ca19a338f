"""Metrics of a classifier on a data split, and the quality gate (TFX Evaluator's "blessing").

:func:`compute_metrics` is pure NumPy (testable without TensorFlow); :func:`evaluate_saved_model` runs an
exported SavedModel's serving signature over a split written by ``prepare_dataset``.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field

import numpy as np

from tfk8s.steps.parameters import DEFAULT_MAX_ACCURACY_DROP, DEFAULT_MIN_ACCURACY


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


# The ClassificationMetrics artifact's classes: KFP's launcher sends the artifact's metadata to ML Metadata as a
# protobuf Struct in one gRPC message, limited to 4 MiB before KFP 2.16 (about 616 classes' full matrix cross it;
# 1,000 classes make 10.5 MiB). 50 classes are about 27 KiB.
MAX_CONFUSION_CLASSES = 50


@dataclass(frozen=True)
class CappedConfusion:
    """A confusion matrix cut to at most ``max_classes`` classes (:func:`cap_confusion`).

    Attributes:
        label_names: the classes shown, in class-index order, then ``"(other N classes)"`` when some were summed.
        matrix: ``[len(label_names)][len(label_names)]`` counts, row = true class, column = predicted class; the
            "other" row/column sums every class not shown, so the counts still add up to the examples.
        num_classes: the classes of the full matrix.
        shown: the classes shown by name (``num_classes`` when nothing was cut).
    """

    label_names: list[str]
    matrix: list[list[int]]
    num_classes: int
    shown: int

    @property
    def capped(self) -> bool:
        """Whether some classes were summed into "other"."""
        return self.shown < self.num_classes

    def describe(self) -> str:
        """One sentence: what the matrix shows ("all 10 classes", or "the 49 most confused of 1000 classes ...")."""
        if not self.capped:
            return f"all {self.num_classes} classes"
        return (f"the {self.shown} most confused of {self.num_classes} classes (most examples mistaken for or as "
                f"them); the other {self.num_classes - self.shown} summed as one row and column")


def cap_confusion(label_names: list[str], matrix: list[list[int]],
                  max_classes: int = MAX_CONFUSION_CLASSES) -> CappedConfusion:
    """At most ``max_classes`` classes of a confusion matrix: the ``max_classes - 1`` classes most involved in
    mistakes (their row's and column's off-diagonal counts, ties to the lower index), in index order, and one
    ``"(other N classes)"`` row and column summing the rest; a matrix small enough is returned whole.

    Args:
        label_names: ``C`` class names.
        matrix: ``[C][C]`` counts, row = true class.
        max_classes: at least 2.

    Raises:
        ValueError: ``max_classes`` < 2, or the matrix is not ``[C][C]``.
    """
    if max_classes < 2:
        raise ValueError(f"max_classes={max_classes}: must be >= 2 (the classes shown and 'other')")
    cm = np.asarray(matrix, dtype=np.int64)
    n = len(label_names)
    if cm.shape != (n, n):
        raise ValueError(f"confusion matrix of shape {cm.shape} for {n} class names: expected ({n}, {n})")
    if n <= max_classes:
        return CappedConfusion(list(label_names), cm.tolist(), n, n)
    mistakes = cm.sum(axis=0) + cm.sum(axis=1) - 2 * np.diag(cm)
    keep = np.sort(np.argsort(-mistakes, kind="stable")[: max_classes - 1])
    rest = np.setdiff1d(np.arange(n), keep)
    out = np.zeros((max_classes, max_classes), dtype=np.int64)
    out[:-1, :-1] = cm[np.ix_(keep, keep)]
    out[:-1, -1] = cm[np.ix_(keep, rest)].sum(axis=1)
    out[-1, :-1] = cm[np.ix_(rest, keep)].sum(axis=0)
    out[-1, -1] = cm[np.ix_(rest, rest)].sum()
    names = [label_names[i] for i in keep] + [f"(other {rest.size} classes)"]
    return CappedConfusion(names, out.tolist(), n, int(keep.size))


def evaluate_saved_model(model_dir: str | os.PathLike, data_dir: str | os.PathLike, split: str = "test",
                         batch_size: int = 512) -> EvalResult:
    """Run a SavedModel's ``serving_default`` signature over ``split`` of a prepared data set.

    Args:
        model_dir: an exported version folder (``<export base>/<version>``).
        data_dir: a folder written by :func:`tfk8s.steps.prepare_dataset.prepare_dataset` (metadata.json + shards).
        split: the split to evaluate.
        batch_size: examples per forward pass.

    Raises:
        tfk8s.steps.model_versions.ExportError: the model does not load or has no serving signature.
        ValueError: the split is missing, or the model's output does not have one column per class.
    """
    import tensorflow as tf

    from tfk8s.runtime.shards import load_metadata, make_dataset
    from tfk8s.steps.model_versions import SERVING_SIGNATURE, serving_signature

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
        min_accuracy: the candidate's accuracy must be >= this (0 disables; default the pipeline's
            ``min_accuracy``, :data:`tfk8s.steps.parameters.DEFAULT_MIN_ACCURACY`).
        max_accuracy_drop: if a baseline (last blessed model) exists, the candidate may be at most this much
            below its accuracy (absolute, e.g. 0.005 = half a point). Negative disables.
    """

    min_accuracy: float = DEFAULT_MIN_ACCURACY
    max_accuracy_drop: float = DEFAULT_MAX_ACCURACY_DROP

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_accuracy <= 1.0 or math.isnan(self.min_accuracy):
            raise ValueError(f"min_accuracy must be in [0, 1], got {self.min_accuracy}")


@dataclass(frozen=True)
class Blessing:
    """The gate's verdict: ``blessed`` and the reasons (one line per check, passed or failed)."""

    blessed: bool
    reasons: list[str] = field(default_factory=list)

    @property
    def why_not(self) -> str:
        """``"not blessed: <why>"`` for a model that is not blessed (its first such reason, else its failed
        checks), ``""`` for a blessed one: the line every place the verdict shows (summary, HTML report, KFP
        Markdown) gives beside it."""
        if self.blessed:
            return ""
        for reason in self.reasons:
            if reason.startswith("not blessed:"):
                return reason
        failed = [r for r in self.reasons if " < " in r or " > " in r]
        return "not blessed: " + ("; ".join(failed or self.reasons) or "no evaluation and no gate metric")


def bless(candidate: EvalResult, thresholds: Thresholds, baseline_accuracy: float | None = None) -> Blessing:
    """Apply ``thresholds`` to ``candidate``'s accuracy (and to its difference from ``baseline_accuracy``);
    :func:`gate` on the built-in evaluation's metrics."""
    return gate({"accuracy": candidate.accuracy, "loss": candidate.loss}, thresholds, "accuracy",
                baseline_accuracy)

def serving_misfit(signature: dict, metadata) -> str | None:
    """Why the data set's examples cannot be fed to a model's ``serving_default`` signature, or None when they
    can: what TF Serving's default Predict needs of a model that is pushed (issue 25: a model without it was
    blessed on its program's own metrics, and every default Predict failed).

    The examples fit when the data set is one ``prepare_dataset`` wrote (``metadata``: image shape and dtype) and
    the signature takes one input of the images' dtype and shape ``[batch, *image_shape]`` (unknown dims match).
    The outputs are not looked at (a program's own model may return logits, or several heads).

    Args:
        signature: ``{"inputs": {...}, "outputs": {...}}`` or ``{}`` (no serving signature), as
            :func:`tfk8s.steps.model_versions.serving_signature` describes it.
        metadata: :class:`tfk8s.steps.prepare_dataset.DatasetMetadata`, or None for a data folder without
            metadata.json.

    Returns:
        A sentence such as ``"the model's serving signature takes float32 [None, 784]; the data set's images
        are uint8 [28, 28, 1]"``, or None.
    """
    if not signature:
        return "the model has no 'serving_default' signature"
    if metadata is None:
        return "the data folder has no metadata.json (image shape, classes), which the built-in evaluation needs"
    inputs = signature.get("inputs") or {}
    want = [None, *metadata.image_shape]
    if len(inputs) != 1:
        return f"the model's serving signature takes {len(inputs)} inputs ({sorted(inputs)}), not one image tensor"
    (spec,) = inputs.values()
    shape = spec.get("shape")
    shape_ok = shape is not None and len(shape) == len(want) and all(
        a is None or b is None or a == b for a, b in zip(shape, want, strict=True))
    if spec.get("dtype") != metadata.image_dtype or not shape_ok:
        return (f"the model's serving signature takes {spec.get('dtype')} {shape}; the data set's images are "
                f"{metadata.image_dtype} {list(metadata.image_shape)}")
    return None


def builtin_misfit(signature: dict, metadata) -> str | None:
    """Why the built-in classification evaluation cannot run a model, or None when it can.

    It can when the data set's examples fit the model's ``serving_default`` signature (:func:`serving_misfit`)
    and the signature returns one output of ``num_classes`` probabilities per example.

    Args:
        signature: ``{"inputs": {...}, "outputs": {...}}`` or ``{}`` (no serving signature).
        metadata: :class:`tfk8s.steps.prepare_dataset.DatasetMetadata`, or None for a data folder without metadata.json.

    Returns:
        A sentence such as ``"the model's serving signature takes float32 [None, 28, 28]; the data set's
        images are uint8 [28, 28, 1]"``, or None.
    """
    if metadata is None:
        return "the data folder has no metadata.json (image shape, classes), which the built-in evaluation needs"
    misfit = serving_misfit(signature, metadata)
    if misfit is not None:
        return misfit
    outputs = signature.get("outputs") or {}
    if len(outputs) != 1:
        return f"the model's serving signature has {len(outputs)} outputs ({sorted(outputs)}), not one"
    (out,) = outputs.values()
    out_shape = out.get("shape") or []
    if not out_shape or out_shape[-1] not in (None, metadata.num_classes):
        return (f"the model's output has shape {out_shape}, not one probability per class "
                f"([None, {metadata.num_classes}])")
    return None


def unservable(why: str) -> Blessing:
    """The verdict on a model that was not evaluated and that TF Serving could not serve the data set's examples
    with (:func:`serving_misfit` said ``why``): not blessed, whatever its program reported, so it is never pushed.

    Returns:
        ``Blessing(False, ["not blessed: <why>: ..."])`` naming the two ways out (a serving signature that takes
        the examples, or ``eval_command``).
    """
    return Blessing(False, [
        (f"not blessed: not servable: {why}, so a pushed version would fail every default Predict (TF Serving); "
        "the training program's own metrics bless only a model whose serving_default signature takes the data "
        "set's examples: export one (model.export(dir) for Keras 3, tf.saved_model.save(..., signatures=...)) "
        "or pass eval_command to evaluate it (docs/training-program.md)")])


def gate(metrics: dict, thresholds: Thresholds, metric: str = "accuracy", baseline_value: float | None = None,
         *, diverged: bool = False, source: str = "evaluation") -> Blessing:
    """The quality gate on any reported metric: ``metrics[metric] >= thresholds.min_accuracy`` and, with a
    baseline, a drop of at most ``thresholds.max_accuracy_drop``. Never raises on what a program reported.

    Args:
        metrics: name -> value (finite numbers count; anything else is "not reported").
        metric: the gate metric (pipeline parameter ``gate_metric``).
        baseline_value: the last blessed model's value of ``metric`` on the same data, if known.
        diverged: the training stopped on a NaN/inf loss (the program reported ``diverged: true``).
        source: where ``metrics`` come from, for the reasons ("evaluation", "the training program").

    Returns:
        The verdict with one reason per check; "not blessed: ..." reasons when it is not blessed.
    """
    if diverged:
        return Blessing(False, ["not blessed: training diverged (loss NaN)"])
    value = metrics.get(metric)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        reported = sorted(k for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool))
        why = "is not a finite number" if metric in metrics else "was not reported"
        return Blessing(False, [(
            f"not blessed: gate_metric {metric!r} {why} by {source} (numeric metrics: {reported}); report it "
            f"(tfk8s.runtime.report or TFK8S_METRICS_FILE, docs/training-program.md) or choose another gate_metric")])
    reasons, ok = [], True
    floor = thresholds.min_accuracy
    if value >= floor:
        reasons.append(f"{metric} {value:.4f} >= min_accuracy {floor:.4f} ({source})")
    else:
        ok = False
        reasons.append(f"{metric} {value:.4f} < min_accuracy {floor:.4f} ({source})")
    if baseline_value is not None and thresholds.max_accuracy_drop >= 0:
        drop = baseline_value - value
        verdict = "<=" if drop <= thresholds.max_accuracy_drop else ">"
        ok = ok and drop <= thresholds.max_accuracy_drop
        reasons.append(f"{metric} drop vs last blessed {baseline_value:.4f} is {drop:+.4f} {verdict} "
                       f"max_accuracy_drop {thresholds.max_accuracy_drop:.4f}")
    return Blessing(ok, reasons)


@dataclass(frozen=True)
class EvaluationOutcome:
    """What the evaluate step found and decided.

    Attributes:
        evaluated: whether the exported model was evaluated (built-in or ``eval_command``).
        how: ``"built-in classification evaluation"``, ``"eval_command"`` or ``""``.
        metrics: the values the gate looked at (the evaluation's, else the training program's).
        blessing: the gate's verdict.
        result: the built-in evaluation's full result (confusion matrix...), else None.
        baseline: ``{"path", "accuracy", <gate metric>}`` of the last blessed model, if compared.
        reason: ``"not evaluated: <why>"`` when not evaluated, else ``""``.
    """

    evaluated: bool
    how: str
    metrics: dict
    blessing: Blessing
    result: EvalResult | None = None
    baseline: dict | None = None
    reason: str = ""

    def to_dict(self) -> dict:
        """JSON-serialisable: every field, the built-in result as a dict."""
        return {"evaluated": self.evaluated, "how": self.how, "metrics": self.metrics,
                "blessed": self.blessing.blessed, "reasons": self.blessing.reasons,
                "result": self.result.to_dict() if self.result else None, "baseline": self.baseline,
                "reason": self.reason}

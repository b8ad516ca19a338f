"""The evaluate step: the exported model's metrics, the quality gate (TFX Evaluator's blessing) and the run's
reports (the Markdown summary, :mod:`tfk8s.steps.summary`; the HTML page, :mod:`tfk8s.steps.report`).

:func:`evaluate_model_step` is the step, which the KFP component's body and its CLI (what the Argo export runs)
both call: :func:`evaluate_and_gate` evaluates and gates, then the step works out which metrics go into the Metrics
artifact and why some are left out, the confusion matrix, the summary and the report, so that the component only
copies the result into its artifacts and the CLI prints it.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfk8s.steps.parameters import DEFAULT_MAX_ACCURACY_DROP, DEFAULT_MIN_ACCURACY


def evaluate_and_gate(*, model_dir: str, data_dir: str, min_accuracy: float = DEFAULT_MIN_ACCURACY,
                      max_accuracy_drop: float = DEFAULT_MAX_ACCURACY_DROP, serving_base: str | None = None,
                      split: str = "test", gate_metric: str = "accuracy", eval_command: str = "",
                      training_summary: dict | None = None, train_dir: str | None = None, log_sink=None):
    """Evaluate the exported model ``model_dir`` and apply the quality gate (TFX Evaluator) on ``gate_metric``.

    How (the first that applies; never a crash over what a program reported):

    1. the built-in classification evaluation on ``split`` of ``data_dir``, when the model's serving signature
       fits the data set's features (:func:`tfk8s.steps.evaluation.builtin_misfit`); the baseline is the last blessed
       model (the highest version under ``serving_base``) evaluated on the same data;
    2. else ``eval_command``, run under the training-program contract (:func:`tfk8s.steps.eval_command.run_eval_command`):
       its metrics file's values are the evaluation's;
    3. else "not evaluated: <why>", and the gate decides on the metrics the training program reported, but only
       for a model TF Serving can serve the data set's examples with: an export without a ``serving_default``
       signature that takes them (:func:`tfk8s.steps.evaluation.serving_misfit`), or whose signature failed on
       them in the built-in evaluation, is "not blessed: not servable: <why>" whatever the program reported
       (issue 25: such a model was pushed and every default Predict failed).

    A training summary whose metrics say ``diverged: true`` is "not blessed: training diverged (loss NaN)".

    Args:
        training_summary: ``training_summary.json`` of the launch step (``{"job", "metrics", ...}``).
        train_dir: the run's train folder; ``eval_command`` reports to ``<train dir>/metrics/evaluation.json``.

    Returns:
        :class:`tfk8s.steps.evaluation.EvaluationOutcome`.
    """
    from tfk8s.core.data_format import load_metadata
    from tfk8s.steps.evaluation import (
        Blessing,
        EvaluationOutcome,
        Thresholds,
        builtin_misfit,
        evaluate_saved_model,
        gate,
        serving_misfit,
        unservable,
    )
    from tfk8s.steps.model_versions import latest_version_dir, serving_signature

    thresholds = Thresholds(min_accuracy=min_accuracy, max_accuracy_drop=max_accuracy_drop)
    trained = dict((training_summary or {}).get("metrics") or {})
    diverged = trained.get("diverged") is True
    try:
        metadata = load_metadata(data_dir)
    except (OSError, ValueError):
        metadata = None
    signature = serving_signature(model_dir, required=False)
    misfit = builtin_misfit(signature, metadata)
    unserved = serving_misfit(signature, metadata)  # None: TF Serving can take the data set's examples
    if misfit is None:
        try:
            result = evaluate_saved_model(model_dir, data_dir, split)
        except Exception as e:  # noqa: BLE001 - whatever the model does with the images, the gate must decide
            first = (str(e).splitlines() or [""])[0][:300]
            misfit = f"the built-in evaluation failed ({type(e).__name__}: {first})"
            unserved = f"its serving signature failed on the data set's examples ({type(e).__name__}: {first})"
    if misfit is None:
        baseline = None
        baseline_dir = latest_version_dir(serving_base) if serving_base else None
        if baseline_dir and thresholds.max_accuracy_drop >= 0 and gate_metric in ("accuracy", "loss"):
            base = evaluate_saved_model(baseline_dir, data_dir, split)
            baseline = {"path": baseline_dir, "accuracy": base.accuracy, gate_metric: getattr(base, gate_metric)}
        values = {"accuracy": result.accuracy, "loss": result.loss, "examples": result.num_examples}
        blessing = gate(values, thresholds, gate_metric, baseline and baseline[gate_metric], diverged=diverged,
                        source=f"built-in evaluation on the {split} split")
        return EvaluationOutcome(True, "built-in classification evaluation", values, blessing, result=result,
                                 baseline=baseline)
    if eval_command:
        from tfk8s.steps.eval_command import run_eval_command

        values, failure = run_eval_command(eval_command, model_dir=model_dir, data_dir=data_dir,
                                           train_dir=train_dir, log_sink=log_sink)
        if failure is None:
            blessing = gate(values, thresholds, gate_metric, diverged=diverged, source="eval_command")
            return EvaluationOutcome(True, "eval_command", values, blessing)
        reason = f"not evaluated: {failure}"
        return EvaluationOutcome(False, "", {}, gate({}, thresholds, gate_metric, diverged=diverged,
                                                     source="eval_command (failed)"), reason=reason)
    reason = (f"not evaluated: {misfit}, so the built-in classification evaluation cannot run it; pass "
              f"eval_command to evaluate it (docs/training-program.md)")
    numbers = {k: v for k, v in trained.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    blessing = gate(numbers, thresholds, gate_metric, diverged=diverged, source="the training program's metrics")
    if unserved is not None and not diverged:
        blessing = Blessing(False, unservable(unserved).reasons + blessing.reasons)  # the gate's own checks too
    return EvaluationOutcome(False, "", numbers, blessing, reason=reason)


def _int_version(version):
    """An export's version as the integer it is: KFP artifact metadata (a protobuf Struct) turns 1 into 1.0."""
    return int(version) if isinstance(version, float) and version.is_integer() else version


def write_report_step(*, evaluation, export: dict, output: str | None = None,
                      run_dir: str | None = None) -> str:
    """Save the evaluation as ``<run dir>/evaluation.json`` and write the run's HTML report
    (:mod:`tfk8s.steps.report`) to ``<run dir>/report.html`` and, if given, to ``output`` (the KFP HTML artifact).

    Args:
        evaluation: :class:`tfk8s.steps.evaluation.EvaluationOutcome` (the built-in result's fields, or the metrics
            the gate saw and ``not_evaluated`` when there is none).

    ``run_dir``: the run's folder (``<root>/runs/<run id>``, :class:`tfk8s.core.layout.RunLayout`: the launch step's
    train dir's parent); without one (no training summary named it), the folder of ``output``. The data dir is
    never used: prepared data lives apart from the runs that read it (``<root>/datasets/...``).

    Returns:
        the path of ``<run dir>/report.html``.

    Raises:
        ValueError: neither ``run_dir`` nor ``output`` was given.
    """
    import shutil

    from tfk8s.steps.report import write_evaluation, write_run_report

    if not run_dir and not output:
        raise ValueError("write_report_step: give run_dir (the run's folder) or output (the report's path)")
    run_dir = Path(run_dir) if run_dir else Path(output).parent
    fields = evaluation.result.to_dict() if evaluation.result is not None else dict(evaluation.metrics)
    write_evaluation(run_dir, {**fields, "blessed": evaluation.blessing.blessed,
                               "reasons": evaluation.blessing.reasons, "evaluated": evaluation.evaluated,
                               "not_evaluated": evaluation.reason,
                               "export": {"path": export.get("path"), "version": _int_version(export.get("version"))}})
    page = write_run_report(run_dir)
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(page, output)
    return str(page)


def serving_base(volume_root: str, model_name: str) -> str | None:
    """``<volume root>/serving/<model name>``, where the blessed versions (the gate's baseline) live; None
    without a volume root."""
    from tfk8s.core.layout import VolumeLayout

    return str(VolumeLayout(volume_root).serving_base(model_name)) if volume_root else None


@dataclass
class EvaluateOutputs:
    """What the evaluate component writes into its artifacts (:func:`evaluate_model_step`).

    Attributes:
        outcome: the evaluation and the gate's verdict.
        metrics: the finite numbers for the Metrics artifact (the evaluation's, plus the training's
            ``train_examples_per_sec`` and ``train_wall_time_s``).
        metadata: the Metrics artifact's metadata: ``blessed``, ``evaluated``, ``how``, ``not_evaluated``,
            ``reasons``, ``not_blessed`` ("not blessed: <why>", empty when blessed), ``left_out`` (the non-finite
            values, in words: they would make the artifact invalid JSON).
        confusion: ``(label names, matrix)`` for the ClassificationMetrics artifact, of the built-in evaluation,
            else None: at most :data:`tfk8s.steps.evaluation.MAX_CONFUSION_CLASSES` classes
            (:func:`tfk8s.steps.evaluation.cap_confusion`: the most confused, the rest summed as "other"), so the
            artifact stays far under the 4 MiB ML Metadata takes whatever the class count.
        confusion_metadata: the ClassificationMetrics artifact's metadata beside it: ``confusion_classes`` (what the
            matrix shows, in words) and ``full_confusion_matrix`` (the file on the volume holding the whole matrix:
            ``<run dir>/evaluation.json``, keys ``label_names`` and ``confusion_matrix``).
        summary: the Markdown run summary.
        report: the path of the run's HTML report (``<run dir>/report.html``).
    """

    outcome: Any
    metrics: dict[str, float]
    metadata: dict[str, Any]
    confusion: tuple[list[str], list[list[int]]] | None
    summary: str
    report: str
    notes: list[str] = field(default_factory=list)
    confusion_metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def blessed(self) -> bool:
        return bool(self.outcome.blessing.blessed)

    @property
    def reasons(self) -> str:
        return "; ".join(self.outcome.blessing.reasons)


def evaluate_model_step(*, exported: Mapping[str, Any], dataset: Mapping[str, Any], training: Mapping[str, Any],
                        min_accuracy: float = DEFAULT_MIN_ACCURACY,
                        max_accuracy_drop: float = DEFAULT_MAX_ACCURACY_DROP, gate_metric: str = "accuracy",
                        eval_command: str = "", volume_root: str = "", model_name: str = "",
                        report_output: str | None = None, serving_base: str | None = None,
                        split: str = "test") -> EvaluateOutputs:
    """The evaluate step: :func:`evaluate_and_gate` on the export, then its Metrics, summary and report.

    Args:
        exported: the export step's Model metadata (``path``, ``version``, ``model_name``, ``serving_signature``;
            :func:`exported_metadata` from a path).
        dataset: the prepare step's Dataset metadata (``path``).
        training: the launch step's Model metadata (``training_summary``, ``job_name``, ``train_<metric>``...;
            :func:`training_metadata` from a summary file).
        volume_root: the volume; the baseline is the last blessed version under ``<root>/serving/<model name>``.
        model_name: the model under ``<root>/serving/`` whose last blessed version is the baseline (empty: the
            export's).
        report_output: where to copy the HTML report too (the KFP HTML artifact's path); without it and without a
            training summary (which names the run's folder) no report is written.
        serving_base: the baseline's folder, instead of the one ``volume_root`` and ``model_name`` give.
        split: the data set's split the built-in evaluation reads.

    Returns:
        :class:`EvaluateOutputs`.
    """
    from tfk8s.core.data_hold import reading
    from tfk8s.core.layout import EVALUATION_FILE, VolumeLayout
    from tfk8s.steps.evaluation import cap_confusion
    from tfk8s.steps.launch_training import read_summary_file
    from tfk8s.steps.summary import run_files, run_summary_markdown

    name = model_name or exported["model_name"]
    if exported.get("serving_signature") is None:  # unknown (the CLI's --model-dir, the Argo export): read it here
        exported = {**exported, "serving_signature": _signature_or_none(exported["path"])}
    if serving_base is None:
        serving_base = str(VolumeLayout(volume_root).serving_base(name)) if volume_root else None
    summary_file = training.get("training_summary", "")
    train_dir = os.path.dirname(summary_file) or None
    # the run's data is held until this step, the last that reads it, ends (tfk8s datasets delete refuses it)
    record = dataset.get("data_record")
    run_dir = Path(record).parent if record else (Path(train_dir).parent if train_dir else None)
    with reading(run_dir, "evaluate-model", last=True) if run_dir else contextlib.nullcontext():
        outcome = evaluate_and_gate(
            model_dir=exported["path"], data_dir=dataset["path"], min_accuracy=min_accuracy,
            max_accuracy_drop=max_accuracy_drop, serving_base=serving_base, gate_metric=gate_metric,
            eval_command=eval_command, training_summary=read_summary_file(summary_file), train_dir=train_dir,
            split=split)
    metrics: dict[str, float] = {}
    left_out = []  # a NaN/inf value (e.g. the test loss of a diverged model) would make the artifact invalid JSON
    for key, value in outcome.metrics.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            if math.isfinite(value):
                metrics[key] = float(value)
            else:
                left_out.append(f"{key} is {value} (not a finite number): left out of the metrics")
    for key in ("examples_per_sec", "wall_time_s"):
        value = training.get(f"train_{key}")
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            metrics[f"train_{key}"] = float(value)
    metadata = {"blessed": outcome.blessing.blessed, "evaluated": outcome.evaluated, "how": outcome.how,
                "not_evaluated": outcome.reason, "reasons": outcome.blessing.reasons, "left_out": "; ".join(left_out),
                "not_blessed": outcome.blessing.why_not}
    confusion, capped = None, None
    if outcome.result is not None:
        capped = cap_confusion(list(outcome.result.label_names), outcome.result.confusion_matrix)
        confusion = (capped.label_names, capped.matrix)
    version = _int_version(exported["version"])
    # the run's files are beside its training summary; without one (a training step that reported none) the
    # run's folder is unknown: the prepared data lives apart from every run (datasets/<name>/<version>/<key>)
    text = run_summary_markdown(training=training, export=exported, evaluation=outcome,
                                pushed_to=f"{serving_base}/{version}" if outcome.blessing.blessed else None,
                                files=run_files(train_dir) if train_dir else {})
    page = ""
    if report_output or train_dir:
        page = write_report_step(evaluation=outcome, export=dict(exported),
                                 output=report_output, run_dir=os.path.dirname(train_dir) if train_dir else None)
    confusion_metadata = {}
    if capped is not None:
        confusion_metadata = {"confusion_classes": capped.describe(),
                              "full_confusion_matrix": str(Path(page).parent / EVALUATION_FILE) if page else ""}
    return EvaluateOutputs(outcome, metrics, metadata, confusion, text, page, confusion_metadata=confusion_metadata)


def _signature_or_none(model_dir: str) -> dict | None:
    """The export's ``serving_default`` signature (``{}``: it has none), or None when it cannot be read here (the
    evaluation says why)."""
    from tfk8s.steps.model_versions import ExportError, serving_signature

    try:
        return serving_signature(model_dir, required=False)
    except ExportError:
        return None


def ui_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` as KFP's UI can show it in the Metrics artifact's table (its "Scalar Metrics" viewer lists every
    custom property): a list becomes one string (``"; "``-joined: the UI draws a list value as its protobuf
    internals), an empty string or list is left out (drawn as ``""``); numbers, booleans and other strings stay.

    Args:
        metadata: :attr:`EvaluateOutputs.metadata` (``blessed``, ``evaluated``, ``how``, ``reasons``...).

    Returns:
        A new dict; ``reasons`` (a list of sentences) as one string, ``not_blessed`` only when not blessed.
    """
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if isinstance(value, list | tuple):
            value = "; ".join(str(v) for v in value)
        if value == "" or value is None:
            continue
        out[key] = value
    return out


def exported_metadata(model_dir: str, model_name: str = "") -> dict[str, Any]:
    """The export step's Model metadata for an export folder ``<root>/models/<name>/<version>`` (the CLI's
    ``--model-dir``): ``path``, ``version``, ``model_name`` (given, else the folder's parent's name) and
    ``serving_signature`` (unknown here: None)."""
    path = Path(model_dir.rstrip("/"))
    version: Any = int(path.name) if path.name.isdigit() else path.name
    return {"path": str(model_dir), "version": version, "model_name": model_name or path.parent.name,
            "serving_signature": None}


def training_metadata(summary_file: str = "", saved_model_dir: str = "") -> dict[str, Any]:
    """The launch step's Model metadata, as far as its ``training_summary.json`` (the CLI's ``--training-summary``,
    else the one beside ``saved_model_dir``, ``<train dir>/saved_model``) gives it: ``training_summary``,
    ``job_name``, ``restarts``, ``cluster_spec``, ``notes`` and each metric as ``train_<name>``; ``{}`` without
    either."""
    from tfk8s.core.layout import TrainLayout
    from tfk8s.steps.launch_training import read_summary_file

    if not summary_file and saved_model_dir:
        summary_file = str(TrainLayout(Path(saved_model_dir.rstrip("/")).parent).summary)

    summary = read_summary_file(summary_file)
    if not summary:
        return {"training_summary": summary_file} if summary_file else {}
    job = summary.get("job") or {}
    return {"training_summary": summary_file, "job_name": job.get("name", "?"), "restarts": job.get("restarts", 0),
            "cluster_spec": job.get("cluster_spec") or {}, "notes": list(summary.get("notes") or []),
            **{f"train_{k}": v for k, v in (summary.get("metrics") or {}).items()
               if isinstance(v, int | float | str | bool)}}

"""The run's Markdown summary for the KFP UI: replicas and their TF_CONFIG layout, training, evaluation,
export and the quality gate's verdict."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from tfk8s.steps.evaluation import Blessing, EvalResult, EvaluationOutcome


def _plain(value):
    """KFP stores every metadata number as a float: give integral ones back as ints (``2.0`` -> ``2``)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _fmt(value) -> str:
    value = _plain(value)
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def run_summary_markdown(*, training: Mapping, export: Mapping, evaluation: EvaluationOutcome | None = None,
                         result: EvalResult | None = None, blessing: Blessing | None = None,
                         baseline: Mapping | None = None, pushed_to: str | None = None,
                         files: Mapping[str, str] | None = None) -> str:
    """Render the summary.

    Args:
        training: the launch step's Model metadata: ``job_name``, ``cluster_spec``, ``restarts``, ``notes`` and
            the program's reported metrics prefixed ``train_`` (epochs, accuracy, loss, examples_per_sec, ...).
        export: the export step's metadata: ``path``, ``version``, ``serving_signature``.
        evaluation: the evaluate step's outcome (built-in evaluation, eval_command, or not evaluated); or,
            for the built-in evaluation only, ``result`` + ``blessing`` (+ ``baseline``).
        pushed_to: where the blessed model will be pushed (None when it is not).
        files: where the run's files are, ``{what: path or command}`` in display order (replica logs, the HTML
            report, TensorBoard...), listed last; see :func:`run_files`.

    Returns:
        GitHub-flavoured Markdown (what the KFP UI renders for a Markdown artifact).
    """
    if evaluation is None:
        evaluation = EvaluationOutcome(result is not None, "built-in classification evaluation" if result else "",
                                       {"accuracy": result.accuracy, "loss": result.loss} if result else {},
                                       blessing or Blessing(False), result=result,
                                       baseline=dict(baseline) if baseline else None)
    result, blessing, baseline = evaluation.result, evaluation.blessing, evaluation.baseline
    training, export = _plain(training), _plain(export)
    spec = training.get("cluster_spec") or {}
    lines = ["# tfk8s training run", ""]
    verdict = "BLESSED" if blessing.blessed else "NOT BLESSED"
    if result is not None:
        lines += [(f"**Verdict: {verdict}** — test accuracy {result.accuracy:.4f} on {result.num_examples} "
                   "examples."), ""]
    elif evaluation.evaluated:
        shown = ", ".join(f"{k} {_fmt(v)}" for k, v in evaluation.metrics.items())
        lines += [f"**Verdict: {verdict}** — evaluated by {evaluation.how}: {shown}.", ""]
    else:
        lines += [f"**Verdict: {verdict}** — {evaluation.reason}.", ""]
    if not blessing.blessed:
        lines += [f"**{blessing.why_not}**", ""]
    job_line = f"Training job `{training.get('job_name', '?')}`, restarts: {training.get('restarts', 0)}."
    lines += ["## Replicas", "", job_line, "", "| replica type | replicas | addresses |", "|---|---|---|"]
    for rtype, addresses in spec.items():
        lines.append(f"| {rtype} | {len(addresses)} | {', '.join(f'`{a}`' for a in addresses)} |")
    if spec:
        first = next(iter(spec))
        example = {"cluster": spec, "task": {"type": first, "index": 0}, "environment": "cloud"}
        lines += ["", f"TF_CONFIG of `{first}-0` (every replica gets its own `task`):", "", "```json",
                  json.dumps(example, indent=2), "```"]
    lines += ["", "## Training (reported by the program)", "", "| | |", "|---|---|"]
    for key, value in training.items():
        if key.startswith("train_"):
            lines.append(f"| {key[len('train_'):].replace('_', ' ')} | {_fmt(value)} |")
    for note in training.get("notes") or []:
        lines += ["", f"note: {note}"]
    if result is not None:
        lines += ["", "## Evaluation (test split)", "",
                  f"accuracy **{result.accuracy:.4f}**, loss {result.loss:.4f}",
                  "", "| class | precision | recall |", "|---|---|---|"]
        for name, p, r in zip(result.label_names, result.precision, result.recall, strict=True):
            lines.append(f"| {name} | {p:.4f} | {r:.4f} |")
    elif evaluation.evaluated:
        lines += ["", f"## Evaluation ({evaluation.how})", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {_fmt(v)} |" for k, v in evaluation.metrics.items()]
    else:
        lines += ["", "## Evaluation", "", evaluation.reason]
    lines += ["", "## Export", "", f"version **{export.get('version')}** at `{export.get('path')}`"]
    sig = export.get("serving_signature")
    if sig:
        inputs, outputs = json.dumps(sig.get("inputs")), json.dumps(sig.get("outputs"))
        lines += ["", f"serving signature `serving_default`: inputs `{inputs}`, outputs `{outputs}`"]
    elif sig is not None:  # {}: read, and none there (None: not known here, so nothing is claimed)
        lines += ["", "no `serving_default` signature (TF Serving needs one to serve this model)"]
    lines += ["", "## Quality gate", ""]
    if baseline:
        lines.append(f"baseline: last blessed model `{baseline['path']}`, accuracy {baseline['accuracy']:.4f}")
        lines.append("")
    lines += [f"- {reason}" for reason in blessing.reasons]
    lines.append("")
    lines.append(f"pushed to `{pushed_to}`" if pushed_to else "not pushed: only a blessed model is served")
    if files:
        lines += ["", "## Files", "", "| | |", "|---|---|"]
        lines += [f"| {what} | `{where}` |" for what, where in files.items()]
    return "\n".join(lines) + "\n"


def run_files(train_dir: str | Path) -> dict[str, str]:
    """Where a run's files are, for the summary: each replica's whole log (``replica-logs/<label>.log``, every
    attempt, kept after the pods are gone), the job record, checkpoints, TensorBoard logs and the exact
    ``tensorboard`` command, and the HTML report. Only what exists is listed."""
    from tfk8s.core.layout import TrainLayout, tensorboard_command

    train = TrainLayout(train_dir)
    out: dict[str, str] = {}
    for log in sorted(train.replica_logs.glob("*.log")):
        out[f"log of {log.stem}"] = str(log)
    for what, path in (("job record (tfk8s describe)", train.record), ("checkpoints", train.checkpoints),
                       ("TensorBoard logs", train.tensorboard), ("HTML report", train.report)):
        if path.exists() or what == "HTML report":
            out[what] = str(path)
    if train.tensorboard.is_dir():
        out["TensorBoard (pip install 'tfk8s[tensorboard]')"] = tensorboard_command(train.root)
    return out

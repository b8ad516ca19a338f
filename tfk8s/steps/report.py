"""The run's HTML report, a page to look at: training curves, the confusion matrix as a heat map, throughput
per replica, restarts, where everything is.

Everything comes from the run's folder on the volume (``<root>/runs/<run id>/``), so the evaluate step (a KFP
``HTML`` artifact, also saved as ``<run dir>/report.html``) and ``tfk8s report RUN`` write the same page:

- ``train/logs/{train,eval}/`` TensorBoard event files: loss and accuracy per epoch (``epoch_loss``,
  ``epoch_accuracy``... as the trainer writes them; an evaluator's ``eval`` scalars when there is one);
- ``train/training_summary.json``: the training's figures and the sidecar evaluator's last ones; ``train/job.json``:
  replicas, restarts (and preemptions) and why;
- ``train/progress/<replica>.json``: each replica's last reported examples/sec;
- ``evaluation.json`` (written by the evaluate step): test metrics, confusion matrix with the label names,
  the quality gate's verdict, the export.

The pictures are drawn with matplotlib (Agg, no display) and embedded as PNG data URIs: the file stands alone
(no scripts, no network), as the KFP UI shows an HTML artifact in a sandboxed frame. The event files are read
without TensorFlow (:mod:`tfk8s.steps.event_files`), so ``tfk8s report`` prints nothing but the report's path.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfk8s.core.layout import (
    EVALUATION_FILE,
    REPORT_FILE,
    TENSORBOARD_EVAL,
    TENSORBOARD_TRAIN,
    TRAIN_DIR,
    TrainLayout,
)
from tfk8s.core.progress import read_job_progress
from tfk8s.steps.evaluation import Blessing, cap_confusion
from tfk8s.steps.event_files import read_scalars  # without TensorFlow: no start-up lines, 5 s less
from tfk8s.tracking.records import read_record


def write_evaluation(run_dir: str | os.PathLike, evaluation: Mapping[str, Any]) -> Path:
    """Write ``<run dir>/evaluation.json`` (the evaluate step's result, for :func:`write_run_report`).

    Args:
        evaluation: ``EvalResult.to_dict()`` plus ``blessed``, ``reasons`` and ``export`` (path, version).
    """
    path = Path(run_dir) / EVALUATION_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(dict(evaluation), indent=1))
    os.replace(tmp, path)
    return path


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def collect_run(run_dir: str | os.PathLike) -> dict[str, Any]:
    """What the report shows, read from the run's folder (any part may be missing: it is then left out).

    Returns:
        ``{"run_dir", "run_id", "job" (job.json), "summary" (training_summary.json), "evaluator" (the sidecar
        evaluator's last figures, ``{}`` without), "evaluation", "train_scalars", "eval_scalars", "throughput"
        ({replica: examples/sec})}``.
    """
    run = Path(run_dir)
    train = TrainLayout(run / TRAIN_DIR)
    progress = read_job_progress(train.root)
    throughput = {label: p.examples_per_sec for label, p in progress.items() if p.examples_per_sec}
    summary = _read_json(train.summary)
    return {
        "run_dir": str(run), "run_id": run.name,
        "job": read_record(train.record) or {},
        "summary": _training_figures(summary),
        "evaluator": summary.get("evaluator") if isinstance(summary.get("evaluator"), dict) else {},
        "evaluation": _read_json(train.evaluation),
        "train_scalars": read_scalars(train.tensorboard / TENSORBOARD_TRAIN),
        "eval_scalars": read_scalars(train.tensorboard / TENSORBOARD_EVAL),
        "throughput": throughput,
    }


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _series(scalars: Mapping[str, list[tuple[int, float]]], *names: str) -> list[tuple[int, float]]:
    for name in names:
        if scalars.get(name):
            return list(scalars[name])
    return []


def curves_figure(train: Mapping[str, list[tuple[int, float]]], evaluation: Mapping[str, list[tuple[int, float]]],
                  test: Mapping[str, Any] | None = None) -> Any:
    """Loss and accuracy per epoch, training (and evaluation, when an evaluator wrote any) side by side; the
    test set's final figures as a marker after the last epoch. Epochs are shown 1-based."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.6))
    axes = fig.subplots(1, 2)
    for ax, metric in zip(axes, ("loss", "accuracy"), strict=True):
        tr = _series(train, f"epoch_{metric}", metric)
        ev = _series(evaluation, f"epoch_{metric}", f"evaluation_{metric}_vs_iterations", metric)
        if tr:
            ax.plot([s + 1 for s, _ in tr], [v for _, v in tr], marker="o", label="training")
        if ev:
            ax.plot([s + 1 for s, _ in ev], [v for _, v in ev], marker="s", label="evaluation")
        if test and metric in test:
            ax.axhline(test[metric], color="C2", linestyle="--", label=f"test set (final): {test[metric]:.4f}")
        ax.set_title(metric.capitalize() + " per epoch")
        ax.set_xlabel("epoch")
        ax.set_ylabel(metric)
        if tr:
            ax.set_xticks(range(1, max(s for s, _ in tr) + 2))
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best")
        else:
            ax.text(0.5, 0.5, "no values recorded", ha="center", va="center", transform=ax.transAxes)
    return fig


# Classes the report's heat map draws by name (the most confused; the rest summed): 30 cells a side keep every
# label and count legible in the figure's 12 inches.
REPORT_MAX_CLASSES = 30


def confusion_figure(matrix: list[list[int]], label_names: list[str]) -> Any:
    """The confusion matrix as a heat map (rows: true class, columns: predicted), each cell's count written
    in it (up to 30 classes), the classes under their real names. :func:`render_html` draws at most
    :data:`REPORT_MAX_CLASSES` classes (:func:`tfk8s.steps.evaluation.cap_confusion`), so a 1,000-class model's
    map stays readable."""
    import numpy as np
    from matplotlib.figure import Figure

    cm = np.asarray(matrix, dtype=float)
    n = len(label_names)
    size = max(4.5, min(12.0, 0.55 * n + 2.5))
    fig = Figure(figsize=(size + 1.2, size))
    ax = fig.subplots()
    image = ax.imshow(cm, cmap="Blues")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="examples")
    ax.set_xticks(range(n), labels=label_names, rotation=45 if max(map(len, label_names)) > 3 else 0,
                  ha="right" if max(map(len, label_names)) > 3 else "center")
    ax.set_yticks(range(n), labels=label_names)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    ax.set_title("Confusion matrix (test set)")
    top = cm.max() if cm.size else 0
    if n <= 30:
        for i in range(n):
            for j in range(n):
                count = int(cm[i, j])
                color = "white" if top and count > top / 2 else ("#999999" if count == 0 else "black")
                ax.text(j, i, str(count), ha="center", va="center", fontsize=8, color=color)
    return fig


def throughput_figure(per_replica: Mapping[str, float], total: float | None,
                      per_epoch: list[tuple[int, float]] | None = None) -> Any:
    """Throughput: each replica's last reported examples/sec (its progress file) and the whole training's
    (the summary, first-epoch warm-up included) as bars; examples/sec per epoch (TensorBoard's
    ``epoch_examples_per_sec``) beside them when recorded."""
    from matplotlib.figure import Figure

    labels = [f"{k} (last report)" for k in per_replica]
    values = list(per_replica.values())
    if total:
        labels.append("whole training (summary)")
        values.append(total)
    fig = Figure(figsize=(11 if per_epoch else 6, 0.5 * max(len(labels), 3) + 1.4))
    axes = fig.subplots(1, 2 if per_epoch else 1, squeeze=False)[0]
    fig.subplots_adjust(wspace=0.45)
    ax = axes[0]
    colors = ["#4c72b0"] * len(per_replica) + (["#dd8452"] if total else [])
    bars = ax.barh(labels, values, color=colors)
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=3)
    ax.invert_yaxis()
    ax.set_xlabel("examples per second")
    ax.set_title("Throughput per replica")
    ax.set_xlim(0, max(values) * 1.25 if values else 1)
    if per_epoch:
        ep = axes[1]
        ep.plot([s + 1 for s, _ in per_epoch], [v for _, v in per_epoch], marker="o", color="#55a868")
        ep.set_title("Throughput per epoch (all workers)")
        ep.set_xlabel("epoch")
        ep.set_ylabel("examples per second")
        ep.set_xticks(range(1, max(s for s, _ in per_epoch) + 2))
        ep.set_ylim(0, max(v for _, v in per_epoch) * 1.2)
        ep.grid(alpha=0.3)
    return fig


def _h(text: Any) -> str:
    return html.escape(str(text))


def _kv_table(rows: list[tuple[str, Any]]) -> str:
    return "<table>" + "".join(f"<tr><th>{_h(k)}</th><td>{_h(v)}</td></tr>" for k, v in rows) + "</table>"


_CSS = """
body{font-family:-apple-system,Segoe UI,Roboto,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1100px;
color:#222;padding:0 16px}
h1{font-size:1.6em;margin-bottom:4px} h2{font-size:1.2em;margin-top:28px;border-bottom:1px solid #ddd;
padding-bottom:4px} table{border-collapse:collapse;margin:8px 0} th,td{text-align:left;padding:3px 12px 3px 0;
vertical-align:top} th{color:#555;font-weight:600} code{background:#f4f4f4;padding:1px 4px;border-radius:3px}
.verdict{font-size:1.1em;padding:8px 12px;border-radius:4px;display:inline-block;margin:8px 0}
.ok{background:#e3f4e1;color:#1d5e17} .bad{background:#fbe4e2;color:#8a1f11} img{max-width:100%}
.muted{color:#777}
"""


def _training_figures(summary: Mapping[str, Any] | None) -> dict:
    """The training's figures from ``training_summary.json``: the launch step writes ``{"job", "metrics",
    ...}`` (the program's reported metrics under ``metrics``; ``accuracy``/``loss`` also shown as the final
    training ones); an older summary is flat."""
    summary = dict(summary or {})
    if "job" not in summary:
        return summary
    figures = dict(summary.get("metrics") or {})
    for new, old in (("accuracy", "final_accuracy"), ("loss", "final_loss")):
        if new in figures:
            figures.setdefault(old, figures[new])
    figures.setdefault("wall_time_s", (summary.get("job") or {}).get("wall_time_s"))
    return {k: v for k, v in figures.items() if v is not None}


def _evaluator_section(evaluator: Mapping[str, Any]) -> list[str]:
    """The sidecar evaluator's last evaluation: which checkpoint (the final one or not), its loss and accuracy."""
    if not evaluator:
        return []
    checkpoint, epochs = evaluator.get("checkpoint"), evaluator.get("epochs")
    which = ("the final checkpoint" if evaluator.get("final") else "not the final checkpoint") + \
        (f" ({checkpoint} of {epochs} epochs)" if checkpoint is not None and epochs else "")
    rows = [("last evaluation", which)]
    for key in ("accuracy", "loss"):
        if isinstance(evaluator.get(key), int | float):
            rows.append((key, f"{evaluator[key]:.4f}"))
    if evaluator.get("evaluations"):
        rows.append(("evaluations", evaluator["evaluations"]))
    return ["<h2 id='evaluator'>Sidecar evaluator</h2>", _kv_table(rows)]


def render_html(data: Mapping[str, Any]) -> str:
    """The report for :func:`collect_run`'s ``data``, one self-contained HTML page."""
    job, summary, ev = data.get("job") or {}, data.get("summary") or {}, data.get("evaluation") or {}
    if isinstance(summary.get("metrics"), dict):  # the launch step's training_summary.json: {"job", "metrics"}
        summary = summary["metrics"]
    parts = [(f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>tfk8s run {_h(data.get('run_id'))}"
             f"</title><style>{_CSS}</style></head><body>"),
             f"<h1>tfk8s training run <code>{_h(data.get('run_id'))}</code></h1>"]
    if ev:
        blessed = bool(ev.get("blessed"))
        if ev.get("evaluated") is False or "accuracy" not in ev:
            why = ev.get("not_evaluated") or "no evaluation of the test split"
            what = why if why.startswith("not evaluated") else f"not evaluated: {why}"
        elif "num_examples" in ev:
            what = f"test accuracy {ev['accuracy']:.4f} on {ev['num_examples']} examples"
        else:  # the user's eval_command: the metrics it reported
            what = ", ".join(f"{k} {v:.4g}" for k, v in ev.items()
                             if isinstance(v, int | float) and not isinstance(v, bool))
        parts.append(f"<div class='verdict {'ok' if blessed else 'bad'}'>{'BLESSED' if blessed else 'NOT BLESSED'}"
                     f" — {_h(what)}</div>")
        if not blessed:
            why_not = Blessing(False, [str(r) for r in ev.get("reasons") or []]).why_not
            parts.append(f"<p id='why-not' class='bad'>{_h(why_not)}</p>")
    else:
        parts.append("<p class='muted'>not evaluated (no evaluation.json in the run folder)</p>")
    rows = [(k, job[k]) for k in ("name", "backend", "state") if job.get(k)]
    if job.get("namespace"):
        rows.append(("namespace", job["namespace"]))
    replicas = ", ".join(f"{n} {t}" for t, n in (job.get("replicas") or {}).items())
    if replicas:
        rows.append(("replicas", replicas))
    shown = {"strategy": ("strategy", "{}"), "epochs": ("epochs", "{}"),
             "global_batch_size": ("global batch size", "{}"), "train_examples": ("training examples", "{:,}"),
             "final_loss": ("final training loss", "{:.4f}"), "final_accuracy": ("final training accuracy", "{:.4f}"),
             "examples_per_sec": ("examples/sec (all workers)", "{:,.0f}"), "wall_time_s": ("wall time", "{:.1f} s")}
    for key, (what, fmt) in shown.items():
        if key in summary:
            try:
                rows.append((what, fmt.format(summary[key])))
            except (ValueError, TypeError):
                rows.append((what, summary[key]))
    parts += ["<h2>Job</h2>", _kv_table(rows)]

    train, evs = data.get("train_scalars") or {}, data.get("eval_scalars") or {}
    parts.append("<h2>Training curves</h2>")
    if train or evs:
        test = {k: ev[k] for k in ("loss", "accuracy") if k in ev}
        parts.append(f"<img id='curves' alt='loss and accuracy per epoch' src='{_png(curves_figure(train, evs, test))}'>")
    else:
        parts.append("<p class='muted'>no TensorBoard scalars under train/logs</p>")

    parts += _evaluator_section(data.get("evaluator") or {})

    parts.append("<h2>Confusion matrix</h2>")
    if ev.get("confusion_matrix"):
        names = ev.get("label_names") or [str(i) for i in range(len(ev["confusion_matrix"]))]
        drawn = cap_confusion(list(names), ev["confusion_matrix"], REPORT_MAX_CLASSES)
        parts.append(f"<img id='confusion' alt='confusion matrix' "
                     f"src='{_png(confusion_figure(drawn.matrix, drawn.label_names))}'>")
        if drawn.capped:
            parts.append(f"<p id='confusion-classes' class='muted'>The heat map shows {_h(drawn.describe())}; the "
                         f"whole {drawn.num_classes}&times;{drawn.num_classes} matrix is in "
                         f"<code>{_h(str(Path(data.get('run_dir') or '.') / EVALUATION_FILE))}</code> "
                         f"(<code>confusion_matrix</code>, <code>label_names</code>).</p>")
        prec = ev.get("precision") or []
        rec = ev.get("recall") or []
        parts.append("<table><tr><th>class</th><th>precision</th><th>recall</th></tr>" + "".join(
            f"<tr><td>{_h(n)}</td><td>{p:.4f}</td><td>{r:.4f}</td></tr>"
            for n, p, r in zip(names, prec, rec, strict=False)) + "</table>")
    else:
        parts.append("<p class='muted'>not evaluated</p>")

    parts.append("<h2>Throughput</h2>")
    per_replica = data.get("throughput") or {}
    total = summary.get("examples_per_sec")
    per_epoch = _series(train, "epoch_examples_per_sec")
    if per_replica or total:
        parts.append(f"<img id='throughput' alt='examples per second per replica' "
                     f"src='{_png(throughput_figure(per_replica, total, per_epoch))}'>")
        parts.append("<p class='muted'>Each replica's bar is the examples/sec in its last progress report (the "
                     "built-in trainer reports the job's rate as that replica sees it: under "
                     "MultiWorkerMirroredStrategy every replica takes part in every step). The whole training's "
                     "figure includes the first epoch's warm-up.</p>")
    else:
        parts.append("<p class='muted'>no throughput reported</p>")

    parts.append("<h2>Restarts</h2>")
    reasons = job.get("restart_reasons") or []
    n, pre = int(job.get("restarts") or 0), int(job.get("preemptions") or 0)
    counted = f"{n} restart{'' if n == 1 else 's'}"
    if pre:
        counted += f" and {pre} preemption{'' if pre == 1 else 's'} (not counted against max_restarts)"
    parts.append(f"<p>{counted}{': every recreation of a replica (or of its group) and why' if reasons else ''}</p>")
    if reasons:
        import time as _time

        parts.append("<table>" + "".join(
            f"<tr><td>{_h(_time.strftime('%H:%M:%S', _time.localtime(r['time'])))}</td><td>{_h(r['message'])}</td>"
            f"</tr>" for r in reasons) + "</table>")

    if ev.get("reasons"):
        parts += ["<h2>Quality gate</h2>", "<ul>" + "".join(f"<li>{_h(r)}</li>" for r in ev["reasons"]) + "</ul>"]
    paths = job.get("paths") or {}
    files = [(what, paths[key]) for key, what in (("replica_logs", "replica logs"), ("checkpoints", "checkpoints"),
                                                  ("tensorboard", "TensorBoard logs"), ("saved_model", "model"))
             if paths.get(key)]
    export = ev.get("export") or {}
    if export.get("path"):
        version = export.get("version")
        if isinstance(version, float) and version.is_integer():  # KFP artifact metadata holds numbers as floats
            version = int(version)
        files.append(("exported model", f"{export['path']} (version {version})"))
    if job.get("tensorboard_command"):
        files.append(("TensorBoard", f"{job['tensorboard_command']}  (pip install 'tfk8s[tensorboard]')"))
    if files:
        parts += ["<h2>Files</h2>", _kv_table(files)]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_run_report(run_dir: str | os.PathLike, output: str | os.PathLike | None = None) -> Path:
    """Write the report of the run in ``run_dir`` to ``output`` (default ``<run dir>/report.html``).

    Raises:
        FileNotFoundError: ``run_dir`` has no ``train`` folder (not a run's folder).
    """
    run = Path(run_dir)
    if not (run / TRAIN_DIR).is_dir():
        raise FileNotFoundError(f"{run} is not a run folder (no train/ in it): pass <volume>/runs/<run id>")
    out = Path(output) if output else run / REPORT_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(render_html(collect_run(run)))
    os.replace(tmp, out)
    return out

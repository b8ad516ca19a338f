"""evaluate_model: the exported model on the test split -> accuracy, loss, per-class precision/recall and the
confusion matrix, shown in the KFP UI, and the quality gate's verdict (blessing)."""

import argparse
import os
from pathlib import Path
from typing import NamedTuple

from kfp import dsl
from kfp.dsl import HTML, ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output

from components import DEFAULT_IMAGE
from tfk8s.steps.cli import add_results_dir_argument, emit, main_guard

CLI_IO = {
    # Outside KFP (the Argo export, any container engine): each input artifact -> the CLI flag taking its
    # path; each output -> the field of the CLI's JSON result (see --results-dir) holding its path or value.
    "inputs": {"exported_model": "--model-dir", "dataset": "--data-dir", "model": None},  # model: KFP UI only
    "outputs": {"blessed": "blessed", "reasons": "reasons"},
}


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def evaluate_model(
    exported_model: Input[Model],
    dataset: Input[Dataset],
    model: Input[Model],
    metrics: Output[Metrics],
    classification: Output[ClassificationMetrics],
    summary: Output[Markdown],
    report: Output[HTML],
    min_accuracy: float = 0.98,
    max_accuracy_drop: float = -1.0,
    gate_metric: str = "accuracy",
    eval_command: str = "",
    volume_root: str = "/mnt/tfk8s",
    model_name: str = "",
) -> NamedTuple("GateOutputs", [("blessed", bool), ("reasons", str)]):
    """Evaluate the exported model (the built-in classification evaluation when its serving signature fits
    the data set, else ``eval_command``, else "not evaluated: <why>") and apply the quality gate on
    ``gate_metric``; outputs Metrics, the confusion matrix (built-in evaluation), a Markdown run summary, an
    HTML report with pictures (training curves, confusion matrix heat map, throughput, restarts), and whether
    the model is blessed (with the reasons)."""
    from collections import namedtuple

    from tfk8s.steps.evaluate_model import evaluate_and_report

    out = evaluate_and_report(exported=exported_model.metadata, dataset=dataset.metadata, training=model.metadata,
                              min_accuracy=min_accuracy, max_accuracy_drop=max_accuracy_drop,
                              gate_metric=gate_metric, eval_command=eval_command, volume_root=volume_root,
                              model_name=model_name, report_output=report.path)
    for key, value in out.metrics.items():
        metrics.log_metric(key, value)
    metrics.metadata.update(out.metadata)
    if out.confusion is not None:  # capped: the most confused classes; the whole matrix is on the volume
        classification.log_confusion_matrix(*out.confusion)
        classification.metadata.update(out.confusion_metadata)
    with open(summary.path, "w") as f:
        f.write(out.summary)
    print(out.summary, flush=True)
    print(f"tfk8s: report {out.report}", flush=True)
    return namedtuple("GateOutputs", ["blessed", "reasons"])(out.blessed, out.reasons)


@main_guard
def main(argv: list[str] | None = None) -> None:
    """CLI: ``python -m components.evaluate_model --help``; prints the metrics and verdict as JSON."""
    p = argparse.ArgumentParser(prog="python -m components.evaluate_model", description=__doc__)
    p.add_argument("--model-dir", required=True, help="an exported version folder <base>/<version>")
    p.add_argument("--data-dir", required=True, help="folder written by prepare_dataset")
    p.add_argument("--split", default="test")
    p.add_argument("--min-accuracy", type=float, default=0.98, help="gate: lowest accuracy blessed")
    p.add_argument(
        "--max-accuracy-drop",
        type=float,
        default=-1.0,
        help="gate: largest accuracy drop vs the last blessed model (<0: no check)",
    )
    p.add_argument("--serving-base", default="", help="where blessed versions live (the baseline's base)")
    p.add_argument("--volume-root", default="", help="with --model-name: serving base <root>/serving/<name>")
    p.add_argument("--model-name", default="", help="the model under <root>/serving/ (see --volume-root)")
    p.add_argument("--gate-metric", default="accuracy", help="the metric the gate checks (default: accuracy)")
    p.add_argument("--eval-command", default="", help="evaluates a model the built-in evaluation does not fit "
                   "(docs/training-program.md)")
    p.add_argument("--training-summary", default="", help="training_summary.json of the launch step (its "
                   "metrics are gated when the model is not evaluated)")
    add_results_dir_argument(p)
    a = p.parse_args(argv)
    from tfk8s.steps.evaluate_model import evaluate_model_step, serving_base
    from tfk8s.steps.launch_training import read_summary_file

    outcome = evaluate_model_step(
        model_dir=a.model_dir,
        data_dir=a.data_dir,
        min_accuracy=a.min_accuracy,
        max_accuracy_drop=a.max_accuracy_drop,
        # no name: the export's own, <root>/models/<name>/<version> (as the pipeline's model metadata says)
        serving_base=a.serving_base or serving_base(a.volume_root,
                                                    a.model_name or Path(a.model_dir.rstrip("/")).parent.name),
        split=a.split,
        gate_metric=a.gate_metric,
        eval_command=a.eval_command,
        training_summary=read_summary_file(a.training_summary),
        train_dir=os.path.dirname(a.training_summary) or None,
    )
    out = outcome.to_dict()
    emit(out, a.results_dir)


if __name__ == "__main__":
    main()

"""evaluate_model: the exported model on the test split -> accuracy, loss, per-class precision/recall and the
confusion matrix, shown in the KFP UI, and the quality gate's verdict (blessing)."""

import argparse
from typing import NamedTuple

from kfp import dsl
from kfp.dsl import HTML, ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output

from components import DEFAULT_IMAGE
from tfk8s.cli import main_guard
from tfk8s.step_results import add_results_dir_argument, emit

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
    import math
    import os
    from collections import namedtuple

    from tfk8s.layout import RunLayout
    from tfk8s.report import run_files, run_summary_markdown
    from tfk8s.steps import evaluate_model_step
    from tfk8s.training import read_summary_file

    name = model_name or exported_model.metadata["model_name"]
    serving_base = RunLayout(volume_root, "evaluate", name).serving_base
    summary_file = model.metadata.get("training_summary", "")
    training_summary = read_summary_file(summary_file)
    outcome = evaluate_model_step(
        model_dir=exported_model.metadata["path"],
        data_dir=dataset.metadata["path"],
        min_accuracy=min_accuracy,
        max_accuracy_drop=max_accuracy_drop,
        serving_base=str(serving_base),
        gate_metric=gate_metric,
        eval_command=eval_command,
        training_summary=training_summary,
        train_dir=os.path.dirname(summary_file) or None,
    )
    left_out = []  # a NaN/inf value (e.g. the test loss of a diverged model) would make the artifact invalid JSON
    for key, value in outcome.metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if math.isfinite(value):
                metrics.log_metric(key, float(value))
            else:
                left_out.append(f"{key} is {value} (not a finite number): left out of the metrics")
    for key in ("examples_per_sec", "wall_time_s"):
        value = model.metadata.get(f"train_{key}")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            metrics.log_metric(f"train_{key}", float(value))
    metrics.metadata.update({"blessed": outcome.blessing.blessed, "evaluated": outcome.evaluated,
                             "how": outcome.how, "not_evaluated": outcome.reason,
                             "reasons": outcome.blessing.reasons, "left_out": "; ".join(left_out)})
    if outcome.result is not None:
        classification.log_confusion_matrix(outcome.result.label_names, outcome.result.confusion_matrix)
    version = int(exported_model.metadata["version"])
    text = run_summary_markdown(
        training=model.metadata,
        export=exported_model.metadata,
        evaluation=outcome,
        pushed_to=f"{serving_base}/{version}" if outcome.blessing.blessed else None,
        files=run_files(os.path.dirname(summary_file) or os.path.join(os.path.dirname(dataset.metadata["path"]),
                                                                      "train")),
    )
    with open(summary.path, "w") as f:
        f.write(text)
    print(text, flush=True)
    from tfk8s.steps import write_report_step

    page = write_report_step(data_dir=dataset.metadata["path"], evaluation=outcome, export=exported_model.metadata,
                             output=report.path,
                             run_dir=os.path.dirname(os.path.dirname(summary_file)) if summary_file else None)
    print(f"tfk8s: report {page}", flush=True)
    return namedtuple("GateOutputs", ["blessed", "reasons"])(outcome.blessing.blessed,
                                                             "; ".join(outcome.blessing.reasons))


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
    from pathlib import Path

    from tfk8s.layout import RunLayout
    from tfk8s.steps import evaluate_model_step
    from tfk8s.training import read_summary_file

    outcome = evaluate_model_step(
        model_dir=a.model_dir,
        data_dir=a.data_dir,
        min_accuracy=a.min_accuracy,
        max_accuracy_drop=a.max_accuracy_drop,
        serving_base=a.serving_base
        or (str(RunLayout(a.volume_root, "evaluate", a.model_name).serving_base) if a.volume_root else None),
        split=a.split,
        gate_metric=a.gate_metric,
        eval_command=a.eval_command,
        training_summary=read_summary_file(a.training_summary),
        train_dir=str(Path(a.training_summary).parent) if a.training_summary else None,
    )
    out = outcome.to_dict()
    emit(out, a.results_dir)


if __name__ == "__main__":
    main()

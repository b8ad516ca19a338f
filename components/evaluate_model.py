"""evaluate_model: the exported model on the test split -> accuracy, loss, per-class precision/recall and the
confusion matrix, shown in the KFP UI, and the quality gate's verdict (blessing)."""

import argparse
from typing import NamedTuple

from kfp import dsl
from kfp.dsl import HTML, ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output

from components import DEFAULT_IMAGE
from tfk8s.steps.cli import add_results_dir_argument, emit, main_guard

CLI_IO = {
    # Outside KFP (the Argo export, any container engine): each input artifact -> the CLI flag taking its
    # path; each output -> the field of the CLI's JSON result (see --results-dir) holding its path or value.
    "inputs": {"exported_model": "--model-dir", "dataset": "--data-dir", "model": "--saved-model-dir"},
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
    from tfk8s.steps.cli import failure_reported

    with failure_reported("evaluate_model"):  # the reason as the pod's termination message (KFP's UI, --wait)
        from collections import namedtuple

        from tfk8s.steps.cli import upstream_metadata
        from tfk8s.steps.evaluate_model import evaluate_model_step, ui_metadata

        out = evaluate_model_step(exported=upstream_metadata(exported_model.metadata),
                                  dataset=upstream_metadata(dataset.metadata), training=upstream_metadata(model.metadata),
                                  min_accuracy=min_accuracy, max_accuracy_drop=max_accuracy_drop,
                                  gate_metric=gate_metric, eval_command=eval_command, volume_root=volume_root,
                                  model_name=model_name, report_output=report.path)
        for key, value in out.metrics.items():
            metrics.log_metric(key, value)
        metrics.metadata.update(ui_metadata(out.metadata))  # what KFP's UI lists in the Metrics table
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
    from tfk8s.steps.parameters import EVALUATE, add_step_arguments, step_arguments

    p = argparse.ArgumentParser(prog="python -m components.evaluate_model", description=__doc__)
    p.add_argument("--model-dir", required=True, help="an exported version folder <root>/models/<name>/<version>")
    p.add_argument("--data-dir", required=True, help="folder written by prepare_dataset")
    p.add_argument("--saved-model-dir", default="", help="the launch step's SavedModel (<train dir>/saved_model): "
                   "its training summary beside it (unless --training-summary) is gated when the model is not "
                   "evaluated, and names the run's folder, where the report is written")
    p.add_argument("--training-summary", default="", help="training_summary.json of the launch step (default: "
                   "beside --saved-model-dir)")
    p.add_argument("--split", default="test", help="the split the built-in evaluation reads (default: test)")
    p.add_argument("--serving-base", default="", help="where blessed versions live (the baseline's base; "
                   "default: <volume root>/serving/<model name>)")
    p.add_argument("--report", default="", help="also copy the HTML report here")
    # --min-accuracy, --max-accuracy-drop, --gate-metric, --eval-command, --volume-root, --model-name (empty: the
    # export's, <root>/models/<name>/<version>)
    add_step_arguments(p, EVALUATE)
    add_results_dir_argument(p)
    a = p.parse_args(argv)
    from tfk8s.steps.evaluate_model import evaluate_model_step, exported_metadata, training_metadata

    out = evaluate_model_step(
        exported=exported_metadata(a.model_dir, a.model_name), dataset={"path": a.data_dir},
        training=training_metadata(a.training_summary, a.saved_model_dir), report_output=a.report or None,
        serving_base=a.serving_base or None, split=a.split, **step_arguments(a, EVALUATE))
    emit({**out.outcome.to_dict(), "report": out.report, "summary": out.summary}, a.results_dir)

if __name__ == "__main__":
    main()

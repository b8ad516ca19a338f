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
    volume_root: str = "/mnt/tfk8s",
    model_name: str = "mnist-cnn",
) -> NamedTuple("GateOutputs", [("blessed", bool), ("reasons", str)]):
    """Evaluate the exported model on the test split against the quality gate (and the last blessed model);
    outputs Metrics, the confusion matrix under the real label names, a Markdown run summary, an HTML report
    with pictures (training curves, confusion matrix heat map, throughput, restarts), and whether the model is
    blessed (with the reasons)."""
    from collections import namedtuple
    from pathlib import Path

    from tfk8s.layout import RunLayout
    from tfk8s.report import run_files, run_summary_markdown
    from tfk8s.steps import evaluate_model_step

    serving_base = RunLayout(volume_root, "evaluate", model_name).serving_base
    result, blessing, baseline = evaluate_model_step(
        model_dir=exported_model.metadata["path"],
        data_dir=dataset.metadata["path"],
        min_accuracy=min_accuracy,
        max_accuracy_drop=max_accuracy_drop,
        serving_base=str(serving_base),
    )
    metrics.log_metric("accuracy", result.accuracy)
    metrics.log_metric("loss", result.loss)
    metrics.log_metric("examples", result.num_examples)
    for key in ("examples_per_sec", "wall_time_s", "final_accuracy"):
        if f"train_{key}" in model.metadata:
            metrics.log_metric(f"train_{key}", float(model.metadata[f"train_{key}"]))
    metrics.metadata["blessed"] = blessing.blessed
    classification.log_confusion_matrix(result.label_names, result.confusion_matrix)
    version = int(exported_model.metadata["version"])
    text = run_summary_markdown(
        training=model.metadata,
        export=exported_model.metadata,
        result=result,
        blessing=blessing,
        baseline=baseline,
        pushed_to=f"{serving_base}/{version}" if blessing.blessed else None,
        files=run_files(Path(dataset.metadata["path"]).parent / "train"),
    )
    with open(summary.path, "w") as f:
        f.write(text)
    print(text, flush=True)
    from tfk8s.steps import write_report_step

    page = write_report_step(data_dir=dataset.metadata["path"], result=result, blessing=blessing,
                             export=exported_model.metadata, output=report.path)
    print(f"tfk8s: report {page}", flush=True)
    return namedtuple("GateOutputs", ["blessed", "reasons"])(blessing.blessed, "; ".join(blessing.reasons))


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
    add_results_dir_argument(p)
    a = p.parse_args(argv)
    from tfk8s.layout import RunLayout
    from tfk8s.steps import evaluate_model_step

    result, blessing, baseline = evaluate_model_step(
        model_dir=a.model_dir,
        data_dir=a.data_dir,
        min_accuracy=a.min_accuracy,
        max_accuracy_drop=a.max_accuracy_drop,
        serving_base=a.serving_base
        or (str(RunLayout(a.volume_root, "evaluate", a.model_name).serving_base) if a.volume_root else None),
        split=a.split,
    )
    out = {**result.to_dict(), "blessed": blessing.blessed, "reasons": blessing.reasons, "baseline": baseline}
    emit(out, a.results_dir)


if __name__ == "__main__":
    main()

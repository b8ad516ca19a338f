"""evaluate_model: the exported model on the test split -> accuracy, loss, per-class precision/recall and the
confusion matrix, shown in the KFP UI, and the quality gate's verdict (blessing)."""

import argparse
import json

from kfp import dsl
from kfp.dsl import ClassificationMetrics, Dataset, Input, Metrics, Model, Output

from components import DEFAULT_IMAGE

CLI_IO = {
    # Outside KFP (the Argo export, any container engine): each input artifact -> the CLI flag taking its
    # path; each output -> the field of the CLI's JSON result (see --results-dir) holding its path or value.
    "inputs": {"exported_model": "--model-dir", "dataset": "--data-dir"},
    "outputs": {"Output": "blessed"},
}


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def evaluate_model(
    exported_model: Input[Model],
    dataset: Input[Dataset],
    metrics: Output[Metrics],
    classification: Output[ClassificationMetrics],
    min_accuracy: float = 0.98,
) -> bool:
    """Evaluate the exported model on the test split; returns whether it is blessed."""
    from tfk8s.steps import evaluate_model_step

    result, blessing = evaluate_model_step(
        model_dir=exported_model.metadata["path"],
        data_dir=dataset.metadata["path"],
        min_accuracy=min_accuracy,
    )
    metrics.log_metric("accuracy", result.accuracy)
    metrics.log_metric("loss", result.loss)
    metrics.log_metric("examples", result.num_examples)
    classification.log_confusion_matrix(result.label_names, result.confusion_matrix)
    print("\n".join(blessing.reasons), flush=True)
    return blessing.blessed


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m components.evaluate_model", description=__doc__)
    p.add_argument("--model-dir", required=True, help="an exported version folder <base>/<version>")
    p.add_argument("--data-dir", required=True, help="folder written by prepare_dataset")
    p.add_argument("--split", default="test")
    p.add_argument("--min-accuracy", type=float, default=0.98)
    p.add_argument(
        "--results-dir",
        default="",
        help="also write each field of the JSON result to DIR/<field> (Argo reads them as output parameters)",
    )
    a = p.parse_args(argv)
    from tfk8s.step_results import write_results
    from tfk8s.steps import evaluate_model_step

    result, blessing = evaluate_model_step(
        model_dir=a.model_dir, data_dir=a.data_dir, min_accuracy=a.min_accuracy, split=a.split
    )
    out = {**result.to_dict(), "blessed": blessing.blessed, "reasons": blessing.reasons}
    print(json.dumps(out, indent=2))
    write_results(a.results_dir, out)


if __name__ == "__main__":
    main()

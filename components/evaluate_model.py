"""evaluate_model: the exported model on the test split -> accuracy, loss, per-class precision/recall and the
confusion matrix, shown in the KFP UI, and the quality gate's verdict (blessing)."""

import argparse
import json

from kfp import dsl
from kfp.dsl import ClassificationMetrics, Dataset, Input, Metrics, Model, Output

from components import DEFAULT_IMAGE


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
    a = p.parse_args(argv)
    from tfk8s.steps import evaluate_model_step

    result, blessing = evaluate_model_step(
        model_dir=a.model_dir, data_dir=a.data_dir, min_accuracy=a.min_accuracy, split=a.split
    )
    print(
        json.dumps({**result.to_dict(), "blessed": blessing.blessed, "reasons": blessing.reasons}, indent=2)
    )


if __name__ == "__main__":
    main()

"""export_model: the chief's SavedModel -> ``<volume root>/models/<model name>/<version>/`` (TF Serving
layout), atomically, never overwriting a version, after checking it loads and has a serving signature."""

import argparse

from kfp import dsl
from kfp.dsl import Input, Model, Output

from components import DEFAULT_IMAGE
from tfk8s.steps.cli import add_results_dir_argument, emit, main_guard

CLI_IO = {
    # Outside KFP (the Argo export, any container engine): each input artifact -> the CLI flag taking its
    # path; each output -> the field of the CLI's JSON result (see --results-dir) holding its path or value.
    "inputs": {"model": "--saved-model-dir"},
    "outputs": {"exported_model": "path"},
}


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def export_model(
    model: Input[Model],
    exported_model: Output[Model],
    volume_root: str = "/mnt/tfk8s",
    model_name: str = "",
):
    """Export the trained model (any SavedModel) as a new version; the Model artifact's metadata carries the
    export path, version, serving signature and model name (empty: derived from the data set)."""
    from tfk8s.steps.cli import failure_reported

    with failure_reported("export_model"):  # the reason as the pod's termination message (KFP's UI, --wait)
        from tfk8s.steps.export_model import default_model_name, export_model_step

        model_name = model_name or default_model_name(model.metadata.get("dataset") or "model",
                                                      bool(model.metadata.get("builtin_trainer", True)))
        result = export_model_step(
            saved_model_dir=model.metadata["path"], volume_root=volume_root, model_name=model_name
        )
        exported_model.metadata.update(
            {
                "path": result.path,
                "version": result.version,
                "serving_signature": result.signature,
                "model_name": model_name,
            }
        )
        with open(exported_model.path, "w") as f:
            f.write(result.path)


@main_guard
def main(argv: list[str] | None = None) -> None:
    """CLI: ``python -m components.export_model --help``; prints path, version and signature as JSON."""
    from tfk8s.steps.parameters import EXPORT, add_step_arguments

    p = argparse.ArgumentParser(prog="python -m components.export_model", description=__doc__)
    p.add_argument(
        "--saved-model-dir", required=True, help="the chief's SavedModel (<train dir>/saved_model)"
    )
    add_step_arguments(p, EXPORT)  # --volume-root, --model-name (the parameter table)
    add_results_dir_argument(p)
    a = p.parse_args(argv)
    from tfk8s.steps.export_model import export_model_step, model_name_of

    r = export_model_step(
        saved_model_dir=a.saved_model_dir, volume_root=a.volume_root,
        model_name=a.model_name or model_name_of(a.saved_model_dir),
    )
    out = {"path": r.path, "version": r.version, "serving_signature": r.signature}
    emit(out, a.results_dir)


if __name__ == "__main__":
    main()

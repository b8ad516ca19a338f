"""export_model: the chief's SavedModel -> ``<volume root>/models/<model name>/<version>/`` (TF Serving
layout), atomically, never overwriting a version, after checking it loads and has a serving signature."""


import argparse
import json

from kfp import dsl
from kfp.dsl import Input, Model, Output

from components import DEFAULT_IMAGE


def run(*, saved_model_dir: str, volume_root: str, model_name: str):
    """Export ``saved_model_dir`` as the next version of ``model_name``.

    Returns:
        :class:`tfk8s.export.ExportResult` (path, version, serving signature).

    Raises:
        tfk8s.export.ExportError: not a loadable SavedModel with a ``serving_default`` signature.
    """
    from tfk8s.export import export_saved_model
    from tfk8s.layout import RunLayout

    base = RunLayout(volume_root, "export", model_name).export_base
    return export_saved_model(saved_model_dir, base)


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def export_model(
    model: Input[Model],
    exported_model: Output[Model],
    volume_root: str = "/mnt/tfk8s",
    model_name: str = "mnist-cnn",
):
    """Export the trained model as a new version; the Model artifact's metadata carries the export path,
    version and serving signature."""
    from components.export_model import run

    result = run(saved_model_dir=model.metadata["path"], volume_root=volume_root, model_name=model_name)
    exported_model.metadata.update({"path": result.path, "version": result.version,
                                    "serving_signature": result.signature, "model_name": model_name})
    with open(exported_model.path, "w") as f:
        f.write(result.path)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m components.export_model", description=__doc__)
    p.add_argument("--saved-model-dir", required=True, help="the chief's SavedModel (<train dir>/saved_model)")
    p.add_argument("--volume-root", default="/mnt/tfk8s", help="root of the shared volume")
    p.add_argument("--model-name", default="mnist-cnn", help="names the export base <root>/models/<name>")
    a = p.parse_args(argv)
    r = run(saved_model_dir=a.saved_model_dir, volume_root=a.volume_root, model_name=a.model_name)
    print(json.dumps({"path": r.path, "version": r.version, "serving_signature": r.signature}, indent=2))


if __name__ == "__main__":
    main()

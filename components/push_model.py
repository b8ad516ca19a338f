"""push_model: promote a blessed export to ``<volume root>/serving/<model name>/<version>/`` (TFX Pusher),
atomically and without overwriting; point TF Serving's model base path there. ``reject_model`` fails the
run with the gate's reasons when the pipeline is asked to fail on an unblessed model."""

import argparse
import sys

from kfp import dsl
from kfp.dsl import Input, Model, Output

from components import DEFAULT_IMAGE
from tfk8s.steps.cli import (
    add_results_dir_argument,
    emit,
    main_guard,
)

CLI_IO = {
    # Outside KFP (the Argo export, any container engine), per component of this module: each input artifact ->
    # the CLI flag taking its path; each output -> the field of the CLI's JSON result (see --results-dir).
    "push_model": {
        "inputs": {"exported_model": "--model-dir"},
        "outputs": {"pushed_model": "path"},
        "service_account": "tfk8s-launcher",  # kserve=apply creates or patches the InferenceService (its Role)
    },
    # reject_model has no CLI of its own: run the component's function itself with its one argument
    # (reject_cli: its failure as one error line and the termination message, like the other steps' CLIs).
    "reject_model": {
        "command": [
            "python",
            "-c",
            "import sys; from components.push_model import reject_cli; reject_cli(sys.argv[-1])",
        ],
    },
}


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def push_model(
    exported_model: Input[Model],
    pushed_model: Output[Model],
    volume_root: str = "/mnt/tfk8s",
    model_name: str = "",
    model_uri: str = "",
    s3_endpoint: str = "",
    kserve: str = "",
    pvc_name: str = "tfk8s-data",
    namespace: str = "",
):
    """Copy the blessed version into the serving base (and to ``model_uri``'s bucket when set; a KServe
    InferenceService printed or applied with ``kserve``); the Model artifact carries the served path/version
    (model_name empty: the export's), the bucket's ``uploaded_uri`` and the InferenceService's name."""
    from tfk8s.steps.cli import failure_reported

    with failure_reported("push_model"):  # the reason as the pod's termination message (KFP's UI, --wait)
        from tfk8s.steps.cli import upstream_metadata
        from tfk8s.steps.push_model import push_model_step

        exported = upstream_metadata(exported_model.metadata)
        model_name = model_name or exported["model_name"]
        r = push_model_step(  # the export step's signature: the model is not loaded (nor TensorFlow imported) again
            model_dir=exported["path"], volume_root=volume_root, model_name=model_name,
            signature=exported.get("serving_signature"), model_uri=model_uri, s3_endpoint=s3_endpoint,
            kserve=kserve, pvc_name=pvc_name, namespace=namespace,
        )
        pushed_model.metadata.update(
            {"path": r.path, "version": r.version, "serving_signature": r.signature, "model_name": model_name,
             "uploaded_uri": r.uploaded_uri,
             "inference_service": r.inference_service.get("metadata", {}).get("name", ""),
             "kserve_applied": r.kserve_applied}
        )
        with open(pushed_model.path, "w") as f:
            f.write(r.path)


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def reject_model(reasons: str):
    """Fail the run because the model was not blessed (only when the pipeline's fail_on_unblessed is set)."""
    from tfk8s.steps.cli import failure_reported

    with failure_reported("reject_model"):  # the reason as the pod's termination message (KFP's UI, --wait)
        raise RuntimeError(f"model not blessed, so not pushed: {reasons}")


def reject_cli(reasons: str) -> None:
    """The Argo export's reject-model step: :func:`reject_model`'s function (which writes its failure as the
    container's termination message: ``argo get`` shows it), the failure printed as ``reject_model: error: ...``.

    Raises:
        SystemExit: 1, always (a model that is not blessed fails the run).
    """
    try:
        reject_model.python_func(reasons=reasons)
    except RuntimeError as e:
        print(f"reject_model: error: {e}", file=sys.stderr)
        raise SystemExit(1) from None


@main_guard
def main(argv: list[str] | None = None) -> None:
    """CLI: ``python -m components.push_model --help``; prints the pushed path and version as JSON."""
    from tfk8s.steps.parameters import PUSH, add_step_arguments

    p = argparse.ArgumentParser(prog="python -m components.push_model", description=__doc__)
    p.add_argument("--model-dir", required=True, help="the blessed export <root>/models/<name>/<version>")
    add_step_arguments(p, PUSH)  # --volume-root, --model-name (empty: the export's, <root>/models/<name>/<version>)
    add_results_dir_argument(p)
    a = p.parse_args(argv)
    from pathlib import Path

    from tfk8s.steps.push_model import push_model_step

    model_name = a.model_name or Path(a.model_dir.rstrip("/")).parent.name
    r = push_model_step(model_dir=a.model_dir, volume_root=a.volume_root, model_name=model_name,
                        model_uri=a.model_uri, s3_endpoint=a.s3_endpoint, kserve=a.kserve, pvc_name=a.pvc_name,
                        namespace=a.namespace)
    out = {"path": r.path, "version": r.version, "serving_signature": r.signature, "uploaded_uri": r.uploaded_uri,
           "inference_service": r.inference_service, "kserve_applied": r.kserve_applied}
    emit(out, a.results_dir)


if __name__ == "__main__":
    main()

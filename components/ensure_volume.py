"""ensure_volume: before anything mounts it, check that the shared volume (a PersistentVolumeClaim) exists,
or create it when asked; locally, create the folder standing for it. A missing volume then fails the run at
once with the fix, instead of leaving every pod Pending."""

import argparse

from kfp import dsl

from components import DEFAULT_IMAGE
from tfk8s.steps.cli import add_results_dir_argument, emit, main_guard

CLI_IO = {
    "inputs": {},
    "outputs": {"Output": "name"},
    "service_account": "tfk8s-launcher",  # reads (and may create) the PersistentVolumeClaim
}


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def ensure_volume(
    backend: str = "kubernetes",
    volume_root: str = "/mnt/tfk8s",
    pvc_name: str = "tfk8s-data",
    namespace: str = "",
    create_pvc: bool = False,
    pvc_size: str = "20Gi",
    pvc_storage_class: str = "",
) -> str:
    """Check (or create) the shared volume; returns the claim's name."""
    from tfk8s.steps.cli import failure_reported

    with failure_reported("ensure_volume"):  # the reason as the pod's termination message (KFP's UI, --wait)
        from tfk8s.steps.ensure_volume import ensure_volume_step

        status = ensure_volume_step(backend=backend, volume_root=volume_root, pvc_name=pvc_name, namespace=namespace,
                                    create_pvc=create_pvc, pvc_size=pvc_size, pvc_storage_class=pvc_storage_class)
        return status.get("name", volume_root)


@main_guard
def main(argv: list[str] | None = None) -> None:
    """CLI: ``python -m components.ensure_volume --help``; prints the result as JSON."""
    from tfk8s.steps.parameters import ENSURE, add_step_arguments, step_arguments

    p = argparse.ArgumentParser(prog="python -m components.ensure_volume", description=__doc__)
    add_step_arguments(p, ENSURE)  # --backend, --volume-root (local: the folder standing for the volume), --pvc-name ...
    add_results_dir_argument(p)
    a = p.parse_args(argv)
    from tfk8s.steps.ensure_volume import ensure_volume_step

    out = ensure_volume_step(**step_arguments(a, ENSURE))
    emit(out, a.results_dir)


if __name__ == "__main__":
    main()

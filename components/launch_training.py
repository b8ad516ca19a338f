"""launch_training: run the distributed TensorFlow training job, one replica per chief/worker/ps/evaluator,
wait for it, stream the replicas' logs, fail clearly, and clean up every replica.

Every replica runs ``--command`` (the user's program, see docs/training-program.md) or, without one, the
built-in trainer. ``--backend local`` runs the replicas as processes on 127.0.0.1; ``--backend kubernetes``
creates one Job and one headless Service per replica (``--dry-run`` prints them as YAML instead; with
``--backend local``, each process it would start, its command, TF_CONFIG and environment). The flags
are the launch step's parameters of :data:`tfk8s.steps.parameters.PARAMETERS`, the Kubernetes ones those of
:class:`tfk8s.launcher.kubernetes.settings.KubernetesParams`.
"""

import argparse

from components import DEFAULT_IMAGE
from tfk8s.steps.cli import add_results_dir_argument, emit, kfp_stand_ins, main_guard

if __name__ == "__main__":  # the CLI (the Argo export's step, a launcher pod): no KFP import before the replicas
    dsl, Dataset, Input, Metrics, Model, Output = kfp_stand_ins()
else:
    from kfp import dsl
    from kfp.dsl import Dataset, Input, Metrics, Model, Output

CLI_IO = {
    # Outside KFP (the Argo export, any container engine): each input artifact -> the CLI flag taking its
    # path; each output -> the field of the CLI's JSON result (see --results-dir) holding its path or value.
    "inputs": {"dataset": "--data-dir"},
    "outputs": {"model": "saved_model"},
    # the ServiceAccount this step runs as in the Argo export: it creates the replicas' Jobs and Services
    "service_account": "tfk8s-launcher",
    # Argo: a launcher stopped by SIGTERM (its pod deleted or evicted, a node drain: exit 143) or whose pod
    # vanished (node Error) is started again; it stopped its replicas on the way out, the new one creates them
    # under the same job name (the trainer is meant to resume from its backup; not yet seen on Argo). A failed
    # training (exit 1) is not retried, and neither is a stopped or terminated Workflow (Argo retries nothing
    # while it shuts down). Not on KFP: its retry policy cannot tell a drain from a failure.
    "retry": {"limit": 2, "retryPolicy": "Always",
              "expression": "asInt(lastRetry.exitCode) == 143 || lastRetry.status == 'Error'"},
}


# The defaults are literals (KFP runs this function's source without module globals); tests/steps/test_parameters.py
# asserts that they, and the annotations, equal tfk8s.steps.parameters.PARAMETERS, the one definition.
@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def launch_training(
    dataset: Input[Dataset],
    model: Output[Model],
    metrics: Output[Metrics],
    volume_root: str = "/mnt/tfk8s",
    run_id: str = "local",
    backend: str = "kubernetes",
    chief: int = 0,
    workers: int = 2,
    ps: int = 0,
    evaluator: int = 0,
    command: str = "",
    epochs: int = 2,
    batch_size: int = 512,
    learning_rate: float = 0.006,
    max_train_examples: int = 0,
    success_policy: str = "",
    timeout_s: int = 86400,
    progress_timeout_s: int = 600,
    job_name_prefix: str = "tfk8s",
    max_restarts: int = 3,
    max_preemptions: int = 20,
    stop_grace_s: int = 10,
    restart_exit_code: int = 42,
    startup_timeout_s: int = 300,
    evaluator_grace_s: int = 60,
    namespace: str = "",
    image: str = "ghcr.io/tfk8s/tfk8s:0.1.0",
    pvc_name: str = "tfk8s-data",
    kubernetes: dict = {},  # noqa: B006 - KFP reads the default; it is never mutated
):
    """Train on the prepared data set with one replica per chief/worker/ps/evaluator; outputs the
    coordinator's SavedModel (Model artifact: path, job, training summary) and the training Metrics its
    program reported (non-finite values left out, said in the metadata's ``notes``)."""
    from tfk8s.steps.cli import failure_reported

    with failure_reported("launch_training"):  # the reason as the pod's termination message (KFP's UI, --wait)
        from tfk8s.steps.cli import upstream_metadata
        from tfk8s.steps.launch_training import launch_training_outputs, launch_training_step
        from tfk8s.steps.parameters import LAUNCH_PARAMETERS, LaunchSpec

        # this function's arguments are the table's launch parameters (tests/steps/test_parameters.py): handed on
        # by name, read once into typed objects
        arguments = locals()
        given = {name: arguments[name] for name in LAUNCH_PARAMETERS}
        spec = LaunchSpec.from_params(given, backend=backend, volume_root=volume_root)
        outcome = launch_training_step(data_dir=dataset.metadata["path"], run_id=run_id, spec=spec)
        meta, numbers = launch_training_outputs(outcome, upstream_metadata(dataset.metadata))
        model.metadata.update(meta)
        with open(model.path, "w") as f:
            f.write(outcome.saved_model_dir)
        for key, value in numbers.items():
            metrics.log_metric(key, value)


@main_guard
def main(argv: list[str] | None = None) -> None:
    """CLI: ``python -m components.launch_training --help``; prints the outcome as JSON, or with
    ``--dry-run`` what the backend would start as YAML (every Kubernetes object; each local process)."""
    from tfk8s.steps.launch_training import launch_training_step
    from tfk8s.steps.parameters import LaunchSpec, add_launch_arguments, launch_params_from_args

    p = argparse.ArgumentParser(prog="python -m components.launch_training", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True, help="the data folder (written by prepare_dataset)")
    p.add_argument("--run-id", default="local", help="the pipeline run's id (names the job and its folder)")
    p.add_argument("--dry-run", action="store_true", help="print what the backend would start as YAML and exit "
                   "(kubernetes: every object; local: each process, its command, TF_CONFIG and environment)")
    # the table's flags (--volume-root, --backend, --workers ...), with the kubernetes dict's keys as flags of
    # their own (--cpu 2 ...)
    add_launch_arguments(p)
    add_results_dir_argument(p)
    a = p.parse_args(argv)
    spec = LaunchSpec.from_params(launch_params_from_args(a), backend=a.backend, volume_root=a.volume_root)
    result = launch_training_step(data_dir=a.data_dir, run_id=a.run_id, spec=spec, dry_run=a.dry_run)
    if a.dry_run:
        import yaml

        print(yaml.safe_dump_all(result, sort_keys=False), end="")
    else:
        emit({"job_name": result.launch.job_name, "saved_model": result.saved_model_dir,
              "summary": result.summary}, a.results_dir)


if __name__ == "__main__":
    main()

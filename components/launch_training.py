"""launch_training: run the distributed TensorFlow training job, one replica per chief/worker/ps/evaluator,
wait for it, stream the replicas' logs, fail clearly, and clean up every replica.

``--backend local`` runs the replicas as processes on 127.0.0.1; ``--backend kubernetes`` creates one Job and
one headless Service per replica (``--dry-run`` prints them as YAML instead).
"""

import argparse

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from components import DEFAULT_IMAGE
from tfk8s.cli import main_guard
from tfk8s.launcher.policy import DEFAULT_PROGRESS_TIMEOUT_S
from tfk8s.step_results import add_results_dir_argument, emit
from tfk8s.training import DEFAULT_BATCH_SIZE, DEFAULT_EPOCHS, DEFAULT_LEARNING_RATE, DEFAULT_TIMEOUT_S

CLI_IO = {
    # Outside KFP (the Argo export, any container engine): each input artifact -> the CLI flag taking its
    # path; each output -> the field of the CLI's JSON result (see --results-dir) holding its path or value.
    "inputs": {"dataset": "--data-dir"},
    "outputs": {"model": "saved_model"},
    # the ServiceAccount this step runs as in the Argo export: it creates the replicas' Jobs and Services
    "service_account": "tfk8s-launcher",
}


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def launch_training(
    dataset: Input[Dataset],
    model: Output[Model],
    metrics: Output[Metrics],
    volume_root: str = "/mnt/tfk8s",
    run_id: str = "local",
    chief: int = 0,
    workers: int = 2,
    ps: int = 0,
    evaluator: int = 0,
    epochs: int = 2,
    batch_size: int = 512,
    learning_rate: float = 0.006,
    max_train_examples: int = 0,
    backend: str = "kubernetes",
    job_name_prefix: str = "tfk8s",
    success_policy: str = "",
    timeout_s: int = 86400,
    progress_timeout_s: int = 600,
    namespace: str = "",
    image: str = "ghcr.io/tfk8s/tfk8s:0.1.0",  # a literal: KFP runs this source without module globals
    pvc_name: str = "",
    cpu: str = "1",
    memory: str = "2Gi",
    gpus: int = 0,
    node_selector: str = "",
    tolerations: str = "",
    service_account: str = "",
    replica_overrides: str = "",
    cluster_domain: str = "",
    schedule_timeout_s: int = 600,
    max_restarts: int = 3,
    ttl_seconds_after_finished: int = 3600,
    kueue_queue: str = "",
    scheduler_name: str = "",
):
    """Train on the prepared data set with one replica per chief/worker/ps/evaluator; outputs the chief's
    SavedModel (Model artifact: path + training summary) and training Metrics."""
    from tfk8s.steps import KUBERNETES_PARAMS, launch_training_step

    params = locals()
    outcome = launch_training_step(
        data_dir=dataset.metadata["path"],
        volume_root=volume_root,
        run_id=run_id,
        chief=chief,
        workers=workers,
        ps=ps,
        evaluator=evaluator,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        max_train_examples=max_train_examples,
        backend=backend,
        job_name_prefix=job_name_prefix,
        success_policy=success_policy,
        timeout_s=timeout_s,
        progress_timeout_s=progress_timeout_s,
        kubernetes_params={k: params[k] for k in KUBERNETES_PARAMS},
    )
    s = outcome.summary
    model.metadata.update(
        {
            "path": outcome.saved_model_dir,
            "job_name": outcome.launch.job_name,
            "restarts": outcome.launch.restarts,
            "cluster_spec": outcome.launch.cluster_spec,
            **{f"train_{k}": v for k, v in s.items()},
        }
    )
    with open(model.path, "w") as f:
        f.write(outcome.saved_model_dir)
    for key in ("final_accuracy", "final_loss", "examples_per_sec", "wall_time_s"):
        if key in s:
            metrics.log_metric(f"train_{key}", float(s[key]))


@main_guard
def main(argv: list[str] | None = None) -> None:
    """CLI: ``python -m components.launch_training --help``; prints the outcome as JSON, or with
    ``--dry-run`` every Kubernetes object as YAML."""
    p = argparse.ArgumentParser(prog="python -m components.launch_training", description=__doc__)
    p.add_argument("--data-dir", required=True, help="folder written by prepare_dataset (metadata.json)")
    p.add_argument("--volume-root", default="/mnt/tfk8s", help="root of the shared volume")
    p.add_argument("--run-id", default="local", help="the pipeline run's id (names the job and its folder)")
    p.add_argument("--chief", type=int, default=0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--ps", type=int, default=0)
    p.add_argument("--evaluator", type=int, default=0)
    p.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS)
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="global batch size")
    p.add_argument("--learning-rate", type=float, default=DEFAULT_LEARNING_RATE)
    p.add_argument("--max-train-examples", type=int, default=0, help="cap on training examples (0: all)")
    p.add_argument("--backend", choices=("local", "kubernetes"), default="kubernetes")
    p.add_argument("--job-name-prefix", default="tfk8s")
    p.add_argument("--success-policy", choices=("", "AllWorkers"), default="")
    p.add_argument("--timeout-s", type=int, default=DEFAULT_TIMEOUT_S,
                   help="job-level deadline in seconds (0: none; default: %(default)s, a day)")
    p.add_argument("--progress-timeout-s", type=int, default=DEFAULT_PROGRESS_TIMEOUT_S,
                   help="seconds a replica that reported progress may go without a new report before it counts "
                   "as hung and is restarted (0: no watchdog; default: %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="print the Kubernetes objects as YAML and exit")
    from tfk8s.kube.cli import add_kubernetes_arguments
    from tfk8s.steps import KUBERNETES_PARAMS, launch_training_step

    add_kubernetes_arguments(p)
    add_results_dir_argument(p)
    a = p.parse_args(argv)
    result = launch_training_step(
        data_dir=a.data_dir,
        volume_root=a.volume_root,
        run_id=a.run_id,
        chief=a.chief,
        workers=a.workers,
        ps=a.ps,
        evaluator=a.evaluator,
        epochs=a.epochs,
        batch_size=a.batch_size,
        learning_rate=a.learning_rate,
        max_train_examples=a.max_train_examples,
        backend="kubernetes" if a.dry_run else a.backend,
        job_name_prefix=a.job_name_prefix,
        success_policy=a.success_policy,
        timeout_s=a.timeout_s,
        progress_timeout_s=a.progress_timeout_s,
        kubernetes_params={k: getattr(a, k) for k in KUBERNETES_PARAMS},
        dry_run=a.dry_run,
    )
    if a.dry_run:
        import yaml

        print(yaml.safe_dump_all(result, sort_keys=False), end="")
    else:
        out = {
            "job_name": result.launch.job_name,
            "saved_model": result.saved_model_dir,
            "summary": result.summary,
        }
        emit(out, a.results_dir)


if __name__ == "__main__":
    main()

"""The steps as plain functions: what each KFP component and its CLI call.

They import neither KFP nor a Kubernetes client at module load, so a component body (which runs under KFP's
lightweight runtime, where ``kfp.dsl.component`` does not exist) and a test can both import them.
Each step only wires parameters to the modules that do the work and reads/writes paths from
:class:`tfk8s.layout.RunLayout`.
"""

from __future__ import annotations

import json

KUBERNETES_PARAMS = (
    "namespace",
    "image",
    "pvc_name",
    "cpu",
    "memory",
    "gpus",
    "node_selector",
    "tolerations",
    "service_account",
    "replica_overrides",
    "cluster_domain",
    "schedule_timeout_s",
    "max_restarts",
    "ttl_seconds_after_finished",
    "kueue_queue",
    "scheduler_name",
)
"""Parameters of the launch step passed through to ``tfk8s.kube.settings.KubernetesSettings.from_params``."""


def ensure_volume_step(*, backend: str, volume_root: str, pvc_name: str, namespace: str = "",
                       create_pvc: bool = False, pvc_size: str = "20Gi", pvc_storage_class: str = "",
                       api_client=None) -> dict:
    """Make sure the shared volume exists before any step mounts it.

    ``local``: create the folder ``volume_root``. ``kubernetes``: check that PersistentVolumeClaim ``pvc_name``
    exists in ``namespace`` (empty: this pod's), or create it when ``create_pvc`` (see
    :func:`tfk8s.kube.volume.ensure_pvc`).

    Returns:
        ``{"backend", "volume_root"}`` plus, on Kubernetes, the claim's ``name``, ``namespace``, ``created``,
        ``phase`` and ``access_modes``.

    Raises:
        ValueError: unknown backend or empty pvc_name.
        tfk8s.kube.errors.VolumeError: the claim is missing (and not to be created) or unusable.
    """
    from pathlib import Path

    from tfk8s import params

    params.check({"backend": backend, "volume_root": volume_root, "pvc_name": pvc_name})
    if backend == "local":
        Path(volume_root).mkdir(parents=True, exist_ok=True)
        return {"backend": backend, "volume_root": volume_root}
    from tfk8s.kube.api import KubeApi
    from tfk8s.kube.settings import resolve_namespace
    from tfk8s.kube.volume import ensure_pvc
    from tfk8s.launcher.kubernetes import load_api_client

    client = api_client or load_api_client()
    try:
        status = ensure_pvc(KubeApi(client, resolve_namespace(namespace)), pvc_name, create=create_pvc,
                            size=pvc_size, storage_class=pvc_storage_class)
    finally:
        if api_client is None:
            client.close()
    return {"backend": backend, "volume_root": volume_root, **status}


def prepare_dataset_step(
    *,
    dataset_name: str,
    tfds_data_dir: str,
    volume_root: str,
    run_id: str,
    num_shards: int,
    num_workers: int,
    max_examples: int,
    chief: int = 0,
    download: bool = True,
) -> dict:
    """Prepare the data set under ``<volume_root>/runs/<run_id>/data``.

    Args:
        num_shards: shards per split; 0 chooses 4 per chief/worker replica (tf.data's FILE auto-shard policy
            needs at least as many files as readers).
        num_workers, chief: worker and chief replicas; together they read the shards.
        max_examples: cap per split (0: all), for smoke runs.
        download: let TFDS download the data set when it is not in the data directory (the default; offline
            it fails within seconds with the fix).

    Returns:
        The metadata as a dict (see :class:`tfk8s.dataset.DatasetMetadata`), plus ``path`` (the data folder).

    Raises:
        ValueError: fewer shards than readers, or no reader at all.
        tfk8s.dataset.DatasetUnavailableError: the data set is not there and cannot be downloaded.
    """
    from tfk8s.dataset import default_tfds_data_dir, prepare_dataset
    from tfk8s.layout import RunLayout

    readers = num_workers + chief
    if readers < 1:
        raise ValueError(f"num_workers + chief must be >= 1, got {readers}")
    shards = num_shards or 4 * readers
    if shards < readers:
        raise ValueError(
            f"num_shards={shards} < {readers} chief/worker replicas: each needs its own shard file"
        )
    out = RunLayout(volume_root, run_id).data_dir
    md = prepare_dataset(
        dataset_name,
        out,
        tfds_data_dir=tfds_data_dir or default_tfds_data_dir(),
        num_shards=shards,
        max_examples=max_examples or None,
        download=download,
    )
    return {**json.loads(md.to_json()), "path": str(out)}


def launch_training_step(
    *,
    data_dir: str,
    volume_root: str,
    run_id: str,
    chief: int,
    workers: int,
    ps: int,
    evaluator: int,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    max_train_examples: int = 0,
    backend: str,
    job_name_prefix: str = "tfk8s",
    success_policy: str = "",
    timeout_s: int = 0,
    kubernetes_params: dict | None = None,
    dry_run: bool = False,
    progress_timeout_s: int = 0,
):
    """Build the training job from the step's parameters and run it (or, with ``dry_run``, return the
    Kubernetes objects it would create).

    ``progress_timeout_s`` (0: off) arms the progress watchdog; ``kubernetes_params["max_restarts"]`` is the
    restart budget on either backend.

    Returns:
        A :class:`tfk8s.training.TrainingOutcome`, or with ``dry_run`` the list of manifests (dicts).

    Raises:
        tfk8s.launcher.LaunchError: the training failed (the message names the replica and reason).
        ValueError: invalid parameters (replica counts, backend, names).
    """
    from tfk8s import params
    from tfk8s.cluster import ReplicaCounts
    from tfk8s.launcher import job_name
    from tfk8s.layout import RunLayout
    from tfk8s.training import build_job, run_job, trainer_args

    checked = {"chief": chief, "workers": workers, "ps": ps, "evaluator": evaluator, "epochs": epochs,
               "batch_size": batch_size, "learning_rate": learning_rate, "backend": backend,
               "success_policy": success_policy, "timeout_s": timeout_s, "volume_root": volume_root,
               "progress_timeout_s": progress_timeout_s}
    if backend == "kubernetes":
        checked["pvc_name"] = (kubernetes_params or {}).get("pvc_name", "")
    params.check(checked)  # before any replica exists
    layout = RunLayout(volume_root, run_id)
    counts = ReplicaCounts(chief=chief, worker=workers, ps=ps, evaluator=evaluator)
    args = trainer_args(data_dir, layout.train_dir, epochs, batch_size, learning_rate, max_train_examples)
    job = build_job(
        name=job_name(run_id, job_name_prefix),
        counts=counts,
        args=args,
        backend=backend,
        success_policy=success_policy,
        timeout_s=timeout_s,
        train_dir=layout.train_dir,
        data_dir=data_dir,
        progress_timeout_s=progress_timeout_s,
    )
    kube = {**(kubernetes_params or {}), "volume_mount_path": volume_root}
    if dry_run:
        from tfk8s.kube.settings import KubernetesSettings
        from tfk8s.launcher.kubernetes import render_manifests

        return render_manifests(job, KubernetesSettings.from_params(**kube))
    return run_job(job, backend, layout.train_dir, kubernetes_params=kube)


def export_model_step(*, saved_model_dir: str, volume_root: str, model_name: str):
    """Export ``saved_model_dir`` as the next version under ``<volume_root>/models/<model_name>``.

    Returns:
        :class:`tfk8s.export.ExportResult` (path, version, serving signature).

    Raises:
        tfk8s.export.ExportError: not a loadable SavedModel with a ``serving_default`` signature.
    """
    from tfk8s.export import export_saved_model
    from tfk8s.layout import RunLayout

    layout = RunLayout(volume_root, "export", model_name)
    return export_saved_model(saved_model_dir, layout.export_base, reserved_bases=(layout.serving_base,))


def evaluate_model_step(*, model_dir: str, data_dir: str, min_accuracy: float, max_accuracy_drop: float = -1.0,
                        serving_base: str | None = None, split: str = "test"):
    """Evaluate ``model_dir`` on ``split`` of ``data_dir`` and apply the quality gate (TFX Evaluator).

    The baseline is the last blessed model (the highest version under ``serving_base``), evaluated on the
    same data, so the regression check compares like with like.

    Returns:
        ``(EvalResult, Blessing, baseline)`` where baseline is ``{"path", "accuracy"}`` or None.

    Raises:
        tfk8s.export.ExportError: the candidate does not load or has no serving signature.
    """
    from tfk8s.evaluation import Thresholds, bless, evaluate_saved_model
    from tfk8s.export import latest_version_dir

    thresholds = Thresholds(min_accuracy=min_accuracy, max_accuracy_drop=max_accuracy_drop)
    result = evaluate_saved_model(model_dir, data_dir, split)
    baseline = None
    baseline_dir = latest_version_dir(serving_base) if serving_base else None
    if baseline_dir and thresholds.max_accuracy_drop >= 0:
        baseline = {"path": baseline_dir, "accuracy": evaluate_saved_model(baseline_dir, data_dir, split).accuracy}
    return result, bless(result, thresholds, baseline and baseline["accuracy"]), baseline


def write_report_step(*, data_dir: str, result, blessing, export: dict, output: str | None = None) -> str:
    """Save the evaluation as ``<run dir>/evaluation.json`` and write the run's HTML report
    (:mod:`tfk8s.html_report`) to ``<run dir>/report.html`` and, if given, to ``output`` (the KFP HTML artifact).

    The run dir is the data dir's parent (``<root>/runs/<run id>``, :class:`tfk8s.layout.RunLayout`).

    Returns:
        the path of ``<run dir>/report.html``.
    """
    import shutil
    from pathlib import Path

    from tfk8s.html_report import write_evaluation, write_run_report

    run_dir = Path(data_dir).parent
    write_evaluation(run_dir, {**result.to_dict(), "blessed": blessing.blessed, "reasons": blessing.reasons,
                               "export": {"path": export.get("path"), "version": export.get("version")}})
    page = write_run_report(run_dir)
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(page, output)
    return str(page)


def push_model_step(*, model_dir: str, volume_root: str, model_name: str):
    """Promote a blessed export to ``<volume_root>/serving/<model_name>/<version>`` (TFX Pusher).

    Returns:
        :class:`tfk8s.export.ExportResult` of the pushed version.

    Raises:
        tfk8s.export.ExportError: not a servable version folder, or that version was pushed already.
    """
    from tfk8s.export import push_saved_model
    from tfk8s.layout import RunLayout

    return push_saved_model(model_dir, RunLayout(volume_root, "push", model_name).serving_base)

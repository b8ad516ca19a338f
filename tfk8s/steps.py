"""The steps as plain functions: what each KFP component and its CLI call.

They import neither KFP nor a Kubernetes client at module load, so a component body (which runs under KFP's
lightweight runtime, where ``kfp.dsl.component`` does not exist) and a test can both import them.
Each step only wires parameters to the modules that do the work and reads/writes paths from
:class:`tfk8s.layout.RunLayout`.
"""

from __future__ import annotations

import json


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
        from tfk8s.layout import volume_writes

        with volume_writes(volume_root, "the volume root"):
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
    data_dir: str = "",
) -> dict:
    """Prepare the data set under ``<volume_root>/runs/<run_id>/data``, or check the user's ``data_dir``.

    Args:
        num_shards: shards per split; 0 chooses 4 per chief/worker replica (tf.data's FILE auto-shard policy
            needs at least as many files as readers).
        num_workers, chief: worker and chief replicas; together they read the shards.
        max_examples: cap per split (0: all), for smoke runs.
        download: let TFDS download the data set when it is not in the data directory (the default; offline
            it fails within seconds with the fix).
        data_dir: a folder the user prepared (TFRecords + metadata.json, or a ``tf.data`` snapshot), absolute
            or relative to ``volume_root``; when given nothing is prepared (:func:`tfk8s.dataset.inspect_data_dir`).

    Returns:
        The metadata as a dict (see :class:`tfk8s.dataset.DatasetMetadata`), plus ``path`` (the data folder);
        for a user's folder without metadata.json: ``dataset``, ``format``, ``path``, ``splits`` (may be empty).

    Raises:
        ValueError: fewer shards than readers, no reader at all, or a user ``data_dir`` that is missing, empty
            or of no known layout (the message names it and the accepted layouts).
        tfk8s.dataset.DatasetUnavailableError: the data set is not there and cannot be downloaded.
    """
    from tfk8s.dataset import default_tfds_data_dir, inspect_data_dir, prepare_dataset
    from tfk8s.layout import RunLayout, volume_writes

    if data_dir:
        return inspect_data_dir(resolve_data_dir(data_dir, volume_root))
    readers = num_workers + chief
    if readers < 1:
        raise ValueError(f"num_workers + chief must be >= 1, got {readers}")
    shards = num_shards or 4 * readers
    if shards < readers:
        raise ValueError(
            f"num_shards={shards} < {readers} chief/worker replicas: each needs its own shard file"
        )
    out = RunLayout(volume_root, run_id).data_dir
    with volume_writes(out, "the prepared data set"):
        md = prepare_dataset(
            dataset_name,
            out,
            tfds_data_dir=tfds_data_dir or default_tfds_data_dir(),
            num_shards=shards,
            max_examples=max_examples or None,
            download=download,
        )
    return {**json.loads(md.to_json()), "path": str(out)}


def resolve_data_dir(data_dir: str, volume_root: str) -> str:
    """A user's ``data_dir``: absolute as given, else relative to the volume root (where it lives in a cluster)."""
    from pathlib import Path

    path = Path(data_dir)
    return str(path if path.is_absolute() else Path(volume_root) / path)


def launch_training_step(
    *,
    data_dir: str,
    volume_root: str,
    run_id: str,
    backend: str,
    params: dict | None = None,
    dry_run: bool = False,
    log_sink=None,
):
    """Build the training job from the launch parameters and run it (or, with ``dry_run``, return the
    Kubernetes objects it would create).

    Args:
        data_dir: the prepared data folder (the Dataset artifact's ``path``).
        params: the launch parameters by name (:data:`tfk8s.specs.LAUNCH_PARAMETERS`: replica counts,
            ``command``, the built-in trainer's hyperparameters, ``progress_timeout_s`` (the watchdog),
            ``max_restarts`` (the restart budget on either backend), ``kubernetes`` dict...); missing ones keep
            their defaults, other keys are ignored.

    Returns:
        A :class:`tfk8s.training.TrainingOutcome`, or with ``dry_run`` the list of manifests (dicts).

    Raises:
        tfk8s.launcher.LaunchError: the training failed (the message names the replica, reason and fix).
        ValueError: invalid parameters (replica counts, backend, names, command placeholders, data_dir).
    """
    from tfk8s import params as pipeline_params
    from tfk8s.dataset import inspect_data_dir
    from tfk8s.launcher import job_name
    from tfk8s.layout import RunLayout, volume_writes
    from tfk8s.specs import LAUNCH_PARAMETERS, LaunchSpec
    from tfk8s.training import build_job, run_job, steps_warning, trainer_args

    given = {k: v for k, v in (params or {}).items() if k in LAUNCH_PARAMETERS}
    pipeline_params.check({**{k: p.default for k, p in LAUNCH_PARAMETERS.items()}, **given,
                           "backend": backend, "volume_root": volume_root})  # before any replica exists
    spec = LaunchSpec.from_params(given)
    if not dry_run:
        info = inspect_data_dir(data_dir)  # a bad or empty data folder fails before any replica starts
        if spec.is_builtin_trainer and info.get("format") != "tfk8s":
            raise ValueError(f"data_dir {data_dir} is a {info.get('format')} folder without metadata.json, which "
                             f"the built-in trainer needs (image shape, classes): pass your own program as "
                             f"command, or prepare the data with dataset_name (docs/training-program.md)")
        if spec.is_builtin_trainer:
            examples = info.get("splits", {}).get("train", 0)
            examples = examples.get("num_examples", 0) if isinstance(examples, dict) else examples
            if spec.trainer.max_train_examples:
                examples = min(examples, spec.trainer.max_train_examples)
            warning = steps_warning(examples, spec.trainer.batch_size, spec.trainer.epochs)
            if warning:
                (log_sink or print)(warning)
    layout = RunLayout(volume_root, run_id)
    t = spec.trainer
    job = build_job(
        name=job_name(run_id, spec.job_name_prefix),
        counts=spec.replicas,
        args=trainer_args(data_dir, layout.train_dir, t.epochs, t.batch_size, t.learning_rate,
                          t.max_train_examples),
        command=spec.command,
        backend=backend,
        success_policy=spec.success_policy,
        timeout_s=spec.timeout_s,
        train_dir=layout.train_dir,
        data_dir=data_dir,
        progress_timeout_s=spec.progress_timeout_s,
    )
    from dataclasses import asdict

    kube = {**asdict(spec.kubernetes), "volume_mount_path": volume_root}
    if dry_run:
        from tfk8s.kube.settings import KubernetesSettings
        from tfk8s.launcher.kubernetes import render_manifests

        return render_manifests(job, KubernetesSettings.from_params(**kube))
    with volume_writes(layout.train_dir, "the training's files"):
        return run_job(job, backend, layout.train_dir, kubernetes_params=kube, log_sink=log_sink)


def launch_training_outputs(outcome, dataset_metadata: dict | None = None) -> tuple[dict, dict[str, float]]:
    """What the launch component puts in its outputs: the Model artifact's metadata and the training Metrics.

    Returns:
        ``(metadata, metrics)``: metadata holds ``path``, ``job_name``, ``restarts``, ``cluster_spec``,
        ``training_summary`` (the file), ``dataset``, ``builtin_trainer``, ``notes`` and every reported metric
        as ``train_<name>`` (non-finite ones as the strings "NaN"/"Infinity", so KFP's JSON stays valid);
        metrics holds the finite numbers only.
    """
    from pathlib import Path

    from tfk8s.training import TRAINER_MODULE

    job = outcome.summary["job"]
    meta = {
        "path": outcome.saved_model_dir,
        "job_name": job["name"],
        "restarts": job["restarts"],
        "cluster_spec": job["cluster_spec"],
        "training_summary": str(Path(outcome.saved_model_dir).parent / "training_summary.json"),
        "dataset": (dataset_metadata or {}).get("dataset", ""),
        "builtin_trainer": TRAINER_MODULE in job["command"],
        "notes": list(outcome.notes),
        **{f"train_{k}": v for k, v in outcome.summary["metrics"].items()
           if isinstance(v, (int, float, str, bool))},
    }
    return meta, dict(outcome.metrics)


def default_model_name(dataset: str, builtin_trainer: bool = True) -> str:
    """The model's name when none is given: ``<data set>-cnn`` for the built-in trainer (``mnist-cnn``),
    ``<data set>-model`` for a user's program; characters a folder name cannot hold become ``-``.

    Raises:
        ValueError: ``dataset`` is empty.
    """
    import re

    if not dataset:
        raise ValueError("cannot derive a model name without a data set name: pass model_name")
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", dataset).strip("-.") or "data"
    return f"{base}-{'cnn' if builtin_trainer else 'model'}"


def export_model_step(*, saved_model_dir: str, volume_root: str, model_name: str):
    """Export ``saved_model_dir`` (any SavedModel) as the next version under ``<volume_root>/models/<model_name>``.

    Returns:
        :class:`tfk8s.export.ExportResult` (path, version, serving signature or ``{}`` without one).

    Raises:
        tfk8s.export.ExportError: not a loadable SavedModel.
    """
    from tfk8s.export import export_saved_model
    from tfk8s.layout import RunLayout, volume_writes

    layout = RunLayout(volume_root, "export", model_name)
    with volume_writes(layout.export_base, "the exported model"):
        return export_saved_model(saved_model_dir, layout.export_base, reserved_bases=(layout.serving_base,))


def evaluate_model_step(*, model_dir: str, data_dir: str, min_accuracy: float, max_accuracy_drop: float = -1.0,
                        serving_base: str | None = None, split: str = "test", gate_metric: str = "accuracy",
                        eval_command: str = "", training_summary: dict | None = None,
                        train_dir: str | None = None, log_sink=None):
    """Evaluate the exported model ``model_dir`` and apply the quality gate (TFX Evaluator) on ``gate_metric``.

    How (the first that applies; never a crash over what a program reported):

    1. the built-in classification evaluation on ``split`` of ``data_dir``, when the model's serving signature
       fits the data set's features (:func:`tfk8s.evaluation.builtin_misfit`); the baseline is the last blessed
       model (the highest version under ``serving_base``) evaluated on the same data;
    2. else ``eval_command``, run under the training-program contract (:func:`tfk8s.evaluation_command.run_eval_command`):
       its metrics file's values are the evaluation's;
    3. else "not evaluated: <why>", and the gate decides on the metrics the training program reported.

    A training summary whose metrics say ``diverged: true`` is "not blessed: training diverged (loss NaN)".

    Args:
        training_summary: ``training_summary.json`` of the launch step (``{"job", "metrics", ...}``).
        train_dir: the run's train folder; ``eval_command`` reports to ``<train dir>/metrics/evaluation.json``.

    Returns:
        :class:`tfk8s.evaluation.EvaluationOutcome`.
    """
    from tfk8s.dataset import load_metadata
    from tfk8s.evaluation import EvaluationOutcome, Thresholds, builtin_misfit, evaluate_saved_model, gate
    from tfk8s.export import latest_version_dir, serving_signature

    thresholds = Thresholds(min_accuracy=min_accuracy, max_accuracy_drop=max_accuracy_drop)
    trained = dict((training_summary or {}).get("metrics") or {})
    diverged = trained.get("diverged") is True
    try:
        metadata = load_metadata(data_dir)
    except (OSError, ValueError):
        metadata = None
    signature = serving_signature(model_dir, required=False)
    misfit = builtin_misfit(signature, metadata)
    if misfit is None:
        try:
            result = evaluate_saved_model(model_dir, data_dir, split)
        except Exception as e:  # noqa: BLE001 - whatever the model does with the images, the gate must decide
            misfit = f"the built-in evaluation failed ({type(e).__name__}: {str(e).splitlines()[0][:300]})"
    if misfit is None:
        baseline = None
        baseline_dir = latest_version_dir(serving_base) if serving_base else None
        if baseline_dir and thresholds.max_accuracy_drop >= 0 and gate_metric in ("accuracy", "loss"):
            base = evaluate_saved_model(baseline_dir, data_dir, split)
            baseline = {"path": baseline_dir, "accuracy": base.accuracy, gate_metric: getattr(base, gate_metric)}
        values = {"accuracy": result.accuracy, "loss": result.loss, "examples": result.num_examples}
        blessing = gate(values, thresholds, gate_metric, baseline and baseline[gate_metric], diverged=diverged,
                        source=f"built-in evaluation on the {split} split")
        return EvaluationOutcome(True, "built-in classification evaluation", values, blessing, result=result,
                                 baseline=baseline)
    if eval_command:
        from tfk8s.evaluation_command import run_eval_command

        values, failure = run_eval_command(eval_command, model_dir=model_dir, data_dir=data_dir,
                                           train_dir=train_dir, log_sink=log_sink)
        if failure is None:
            blessing = gate(values, thresholds, gate_metric, diverged=diverged, source="eval_command")
            return EvaluationOutcome(True, "eval_command", values, blessing)
        reason = f"not evaluated: {failure}"
        return EvaluationOutcome(False, "", {}, gate({}, thresholds, gate_metric, diverged=diverged,
                                                     source="eval_command (failed)"), reason=reason)
    reason = (f"not evaluated: {misfit}, so the built-in classification evaluation cannot run it; pass "
              f"eval_command to evaluate it (docs/training-program.md)")
    numbers = {k: v for k, v in trained.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    blessing = gate(numbers, thresholds, gate_metric, diverged=diverged, source="the training program's metrics")
    return EvaluationOutcome(False, "", numbers, blessing, reason=reason)


def _int_version(version):
    """An export's version as the integer it is: KFP artifact metadata (a protobuf Struct) turns 1 into 1.0."""
    return int(version) if isinstance(version, float) and version.is_integer() else version


def write_report_step(*, data_dir: str, evaluation, export: dict, output: str | None = None,
                      run_dir: str | None = None) -> str:
    """Save the evaluation as ``<run dir>/evaluation.json`` and write the run's HTML report
    (:mod:`tfk8s.html_report`) to ``<run dir>/report.html`` and, if given, to ``output`` (the KFP HTML artifact).

    Args:
        evaluation: :class:`tfk8s.evaluation.EvaluationOutcome` (the built-in result's fields, or the metrics
            the gate saw and ``not_evaluated`` when there is none).

    ``run_dir``: the run's folder (``<root>/runs/<run id>``, :class:`tfk8s.layout.RunLayout`: the launch step's
    train dir's parent); default the data dir's parent (where prepare_dataset writes it; not for a user's
    data_dir).

    Returns:
        the path of ``<run dir>/report.html``.
    """
    import shutil
    from pathlib import Path

    from tfk8s.html_report import write_evaluation, write_run_report

    run_dir = Path(run_dir) if run_dir else Path(data_dir).parent
    fields = evaluation.result.to_dict() if evaluation.result is not None else dict(evaluation.metrics)
    write_evaluation(run_dir, {**fields, "blessed": evaluation.blessing.blessed,
                               "reasons": evaluation.blessing.reasons, "evaluated": evaluation.evaluated,
                               "not_evaluated": evaluation.reason,
                               "export": {"path": export.get("path"), "version": _int_version(export.get("version"))}})
    page = write_run_report(run_dir)
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(page, output)
    return str(page)


def push_model_step(*, model_dir: str, volume_root: str, model_name: str, signature: dict | None = None):
    """Promote a blessed export to ``<volume_root>/serving/<model_name>/<version>`` (TFX Pusher).

    ``signature``: the export step's serving signature; given, the model is not loaded again.

    Returns:
        :class:`tfk8s.export.ExportResult` of the pushed version.

    Raises:
        tfk8s.export.ExportError: not a servable version folder, or that version was pushed already.
    """
    from tfk8s.export import push_saved_model
    from tfk8s.layout import RunLayout, volume_writes

    serving_base = RunLayout(volume_root, "push", model_name).serving_base
    with volume_writes(serving_base, "the pushed model"):
        return push_saved_model(model_dir, serving_base, signature)

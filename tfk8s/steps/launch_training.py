"""The launch step: the launch parameters -> a :class:`~tfk8s.core.job.TrainingJob`, run on a backend
(:mod:`tfk8s.launcher.backends`) with its job record, kept logs and progress display (:mod:`tfk8s.tracking`);
then what the coordinator left is checked (its SavedModel, its metrics file) and
``<train dir>/training_summary.json`` written (the job plus the reported metrics), whatever program ran.

The program is the built-in trainer (``python -m trainer.task``) or the user's own ``command``; both get the
contract of :mod:`tfk8s.core.contract` (``docs/training-program.md``).
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tfk8s.core import builtin_trainer, contract
from tfk8s.core.cluster import Replica, ReplicaCounts, ReplicaType, coordinator
from tfk8s.core.errors import LaunchError, ReplicaFailedError
from tfk8s.core.job import LaunchResult, RunPolicy, TrainingJob
from tfk8s.core.layout import TrainLayout, tensorboard_command
from tfk8s.tracking.progress_view import PLAIN_PREFIX

if TYPE_CHECKING:
    from tfk8s.launcher.backends import Backend
    from tfk8s.steps.parameters import LaunchSpec

FEW_STEPS = 20  # an epoch with fewer global steps than this gets a warning (see steps_warning)


@dataclass(frozen=True)
class TrainingOutcome:
    """A finished launch.

    Attributes:
        launch: the backend's result.
        saved_model_dir: the coordinator's SavedModel (``<train dir>/saved_model``).
        summary: what ``training_summary.json`` holds: ``{"job": {...}, "metrics": {...}, "notes": [...]}`` and,
            with a sidecar evaluator that reported, ``"evaluator": {...}`` (its last figures).
        metrics: the finite numeric metrics the coordinator reported (for the training Metrics artifact).
        notes: sentences about values left out of ``metrics`` (not finite) and similar.
    """

    launch: LaunchResult
    saved_model_dir: str
    summary: dict
    metrics: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def build_job(*, name: str, counts: ReplicaCounts, args: Sequence[str] = (), backend: Backend,
              env: Mapping[str, str] | None = None, train_dir: str | os.PathLike = "",
              data_dir: str | os.PathLike = "", command: Sequence[str] = (), run_policy: RunPolicy | None = None,
              **policy_fields) -> TrainingJob:
    """The training job every backend runs.

    Args:
        args: the built-in trainer's flags (:func:`tfk8s.core.builtin_trainer.trainer_args`), used when
            ``command`` is empty.
        command: the user's program (argv, placeholders allowed); empty: ``python -m trainer.task <args>``.
            With the local backend a leading ``python``/``python3`` becomes the launcher's own interpreter
            (:func:`tfk8s.core.contract.local_python`); in a cluster it is the image's.
        train_dir, data_dir: the contract's directories (every replica gets :func:`tfk8s.core.contract.replica_env`).
        run_policy: the job's :class:`~tfk8s.core.job.RunPolicy`, whole (None: its defaults); a ``timeout_s`` of 0
            means no deadline.
        backend: the backend that runs it (:func:`tfk8s.launcher.backends.get_backend`): it says what argv
            every replica runs (:meth:`~tfk8s.launcher.backends.Launch.program`).
        policy_fields: :class:`~tfk8s.core.job.RunPolicy` fields laid over ``run_policy`` (``max_restarts=1``,
            ``progress_timeout_s=...``, which arms the progress watchdog with ``train_dir``).

    With ps replicas (ParameterServerStrategy) the workers never exit by themselves, so the grace period lagging
    workers get after the chief's success is 0 (unless ``grace_period_s`` is given).

    Raises:
        ValueError: invalid job fields or placeholders.
    """
    from dataclasses import replace

    argv = backend.program(tuple(command) or ("python", "-m", builtin_trainer.TRAINER_MODULE, *args))
    # Under ParameterServerStrategy the workers serve the chief and never exit: stop them at once after it.
    extra: dict = {"grace_period_s": 0.0} if counts.ps else {}
    extra.update(policy_fields)
    policy = replace(run_policy or RunPolicy(), **extra)
    policy = replace(policy, timeout_s=policy.timeout_s or None)
    return TrainingJob(name=name, counts=counts, command=argv, env={**builtin_trainer.TRAINER_ENV, **(env or {})},
                       train_dir=str(train_dir or ""), data_dir=str(data_dir or ""), run_policy=policy)


def steps_warning(train_examples: int, batch_size: int, epochs: int, replicas: int = 1) -> str | None:
    """A warning when an epoch has only a handful of global steps (the defaults fit MNIST's 60,000 examples:
    1,500 examples at global batch 512 give 3 steps an epoch, too few for the optimizer to get anywhere).

    Args:
        replicas: the chief/worker replicas the global batch is split over (without ps): the suggested batch
            size is a multiple of it, so that the parameter check accepts it.

    Returns:
        The warning, a ``tfk8s: `` line the console shows (naming the numbers and a batch size that passes the
        checks), or None when there are at least :data:`FEW_STEPS` steps per epoch.
    """
    if train_examples <= 0 or batch_size <= 0:
        return None
    steps = math.ceil(train_examples / batch_size)  # the built-in trainer's steps_per_epoch
    if steps >= FEW_STEPS:
        return None
    replicas = max(1, replicas)
    better = max(replicas, train_examples // FEW_STEPS // replicas * replicas)
    return (f"{PLAIN_PREFIX}WARNING: {train_examples} training examples at global batch_size {batch_size} give "
            f"{steps} steps per epoch ({steps * epochs} in all): too few to train well; lower batch_size (e.g. "
            f"--param batch_size={better}, {math.ceil(train_examples / better)} steps per epoch"
            f"{f', a multiple of the {replicas} chief/worker replicas' if replicas > 1 else ''}) or use more data")


def run_job(job: TrainingJob, backend: Backend, train_dir: str | os.PathLike, *, options: object = None,
            log_sink: Callable[[str], None] | None = None) -> TrainingOutcome:
    """Run ``job`` on ``backend`` with its record, kept logs and progress display (:func:`tfk8s.tracking.tracked.tracked`),
    check the coordinator's SavedModel, read its metrics file and write ``<train dir>/training_summary.json``.
    Before the backend starts anything, every folder of the contract (:func:`tfk8s.core.contract.job_folders`:
    each replica's ``TFK8S_MODEL_DIR`` and its Vertex AI / SageMaker aliases, the checkpoint and TensorBoard
    folders) exists. The non-coordinators' scratch model dirs are removed at every end.

    Args:
        backend: the backend that runs it (:func:`tfk8s.launcher.backends.get_backend`).
        options: the backend's typed options, already checked (what :meth:`~tfk8s.launcher.backends.Launch.options`
            returned, :attr:`tfk8s.steps.parameters.LaunchSpec.options`; local: None).

    Raises:
        LaunchError (and subclasses): a replica failed (its name, exit code, reason, last lines), the job timed
            out, or the coordinator exited 0 without a SavedModel in its ``TFK8S_MODEL_DIR``.
    """
    from tfk8s.tracking.tracked import tracked

    runner = backend
    layout = TrainLayout(train_dir)
    for folder in layout.folders():
        folder.mkdir(parents=True, exist_ok=True)  # the launcher mounts the volume where replicas do
    # every folder the contract names (TFK8S_MODEL_DIR and its AIP_/SM_ aliases...), for both backends: a program
    # writing a file into its model dir (Keras 3's model.save(".../model.keras")) must not find it missing
    for folder in contract.job_folders(job.name, job.counts, train_dir, job.data_dir):
        folder.mkdir(parents=True, exist_ok=True)
    # The job record (<train dir>/job.json), every replica's log kept on the volume, the progress display.
    with tracked(job, backend.name, train_dir, log_sink, namespace=runner.namespace(options),
                 keep_logs=not runner.keeps_replica_logs, local_paths=runner.local_paths) as track:
        try:
            result = runner.run(job, track.sink, options)
        except ReplicaFailedError as e:
            if not builtin_trainer.is_builtin(job.command):  # the user's program: where its log is, what to fix
                e.args = ((f"{e}\nthe training program failed on replica {e.replica.label}: fix the program or the "
                           f"command parameter ({' '.join(job.command)[:200]}); its whole log: "
                           f"{layout.replica_log(e.replica.label)}; the contract: {contract.DOCS}"),)
            raise
        finally:
            contract.remove_scratch(train_dir)  # the non-coordinators' model dirs (tfk8s.core.contract)
        outcome = collect(job, result, train_dir, log_sink=track.sink)
        track.recorder.result = result
    return outcome


class NoSavedModelError(LaunchError):
    """The coordinator exited 0 but left no SavedModel in its ``TFK8S_MODEL_DIR``."""


def _dataset_name(data_dir: str) -> str:
    """The ``dataset`` of the prepared data's ``metadata.json`` in ``data_dir``; "" when there is none (a
    tf.data snapshot, your own files)."""
    import json

    from tfk8s.core.data_format import METADATA_FILE

    try:
        return str(json.loads((Path(data_dir) / METADATA_FILE).read_text()).get("dataset") or "")
    except (OSError, ValueError, AttributeError):
        return ""


def collect(job: TrainingJob, result: LaunchResult, train_dir: str | os.PathLike, *,
            log_sink: Callable[[str], None] | None = None) -> TrainingOutcome:
    """After a successful job: check the coordinator's SavedModel, read its metrics, write the summary.

    Raises:
        NoSavedModelError: no ``saved_model.pb`` in the coordinator's ``TFK8S_MODEL_DIR``; the message says
            what the contract asks and where it is documented.
        ValueError: the coordinator's metrics file is not a JSON object.
    """
    sink = log_sink or (lambda line: print(line, flush=True))
    train = Path(train_dir)
    coord = coordinator(job.counts)
    saved_model = contract.model_dir(train, coord, coord)
    if not (saved_model / "saved_model.pb").is_file():
        found = sorted(p.name for p in saved_model.iterdir()) if saved_model.is_dir() else []
        held = f"it holds {found}" if found else "nothing is there"
        if any(name.endswith((".keras", ".h5")) for name in found):  # Keras 3's model.save(dir) refuses a folder
            fix = ("a .keras/.h5 file is a Keras model file, not a SavedModel: with Keras 3 export the model with "
                   "model.export(os.environ['TFK8S_MODEL_DIR']); with tf-keras save it with "
                   "model.save(os.environ['TFK8S_MODEL_DIR'])")
        else:
            fix = ("the training program must save the trained model there, e.g. "
                   "model.save(os.environ['TFK8S_MODEL_DIR']) (tf-keras), model.export(os.environ['TFK8S_MODEL_DIR']) "
                   "(Keras 3) or tf.saved_model.save(model, os.environ['TFK8S_MODEL_DIR']), or take the path from the "
                   "command's {model_dir} placeholder")
        raise NoSavedModelError(
            f"replica {coord.label} (the coordinator) exited 0 but saved no SavedModel in its TFK8S_MODEL_DIR "
            f"{saved_model} ({held}): {fix}; see {contract.DOCS}. In a cluster, also check that the PVC is mounted "
            f"at the same path in the replicas and the launcher")
    layout = TrainLayout(train)
    summary_file = layout.summary
    reported, numbers, notes = contract.read_metrics(contract.metrics_file(train, coord))
    if not reported:
        notes.append(f"the program reported no metrics ({contract.ENV_METRICS_FILE} of {coord.label} was not "
                     f"written; see {contract.DOCS})")
    if reported.get("diverged") is True:
        notes.append("training diverged (loss NaN or infinite): the program stopped it")
    evaluator = _evaluator_metrics(job, result, train, notes)
    summary = {
        "job": {
            "name": result.job_name,
            "replicas": {t: job.counts.count(t) for t in ("chief", "worker", "ps", "evaluator")},
            "coordinator": coord.label,
            "command": list(job.command),
            "cluster_spec": result.cluster_spec,
            "restarts": result.restarts,
            "preemptions": result.preemptions,
            "wall_time_s": round(result.wall_time_s, 3),
            "exit_codes": result.exit_codes,
            "stopped": result.stopped,
            # every replica's whole log (all attempts, kept after the pods are gone) and the job record
            "replica_logs": {r.label: str(layout.replica_log(r.label)) for r in job.counts.replicas()},
            "record": str(layout.record),
            "tensorboard_command": tensorboard_command(train),
        },
        "saved_model": str(saved_model),
        # what names the model when the pipeline gives no model_name (tfk8s.steps.export_model.model_name_of)
        "dataset": _dataset_name(job.data_dir),
        "builtin_trainer": builtin_trainer.is_builtin(job.command),
        "metrics": reported,
        **({"evaluator": evaluator} if evaluator else {}),
        "notes": notes,
    }
    _write_json(summary_file, summary)
    for note in notes:
        sink(f"note: {note}")
    return TrainingOutcome(result, str(saved_model), summary, numbers, notes)


def _evaluator_metrics(job: TrainingJob, result: LaunchResult, train: Path, notes: list[str]) -> dict:
    """The sidecar evaluator's last figures (its ``TFK8S_METRICS_FILE``; the built-in trainer's evaluator writes
    the checkpoint, loss and accuracy after every evaluation), ``{}`` without an evaluator or a file; a note
    when it did not get to the final checkpoint within ``evaluator_grace_s``."""
    if not job.counts.evaluator:
        return {}
    label = Replica(ReplicaType.EVALUATOR, 0).label
    try:
        reported, _, _ = contract.read_metrics(contract.metrics_file(train, Replica(ReplicaType.EVALUATOR, 0)))
    except ValueError as e:
        notes.append(f"the evaluator's metrics file is unreadable: {e}")
        return {}
    if reported and reported.get("final") is False and label in result.stopped:
        notes.append(f"the evaluator's last evaluation was of checkpoint {reported.get('checkpoint')} of "
                     f"{reported.get('epochs')}: it was stopped evaluator_grace_s={job.evaluator_grace_s:g}s after "
                     f"the job succeeded; raise evaluator_grace_s to evaluate the final checkpoint")
    return reported


def _write_json(path: Path, data: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, allow_nan=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_summary_file(path: str | os.PathLike | None) -> dict:
    """A ``training_summary.json`` as written by :func:`collect`; ``{}`` when no path is given, the file is
    missing or is not a JSON object (the evaluation then has no training metrics to fall back on)."""
    if not path or not Path(path).is_file():
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def launch_training_step(*, data_dir: str, run_id: str, spec: LaunchSpec, dry_run: bool = False,
                         log_sink: Callable[[str], None] | None = None):
    """Build the training job from the launch and run it (or, with ``dry_run``, return what the backend would
    start: the Kubernetes objects, or the local processes with their TF_CONFIG, environment and command;
    :meth:`tfk8s.launcher.backends.Launch.dry_run`).

    Args:
        data_dir: the prepared data folder (the Dataset artifact's ``path``).
        run_id: the pipeline run's id (names the job and its folder under the volume root).
        spec: the launch parameters, read and checked once (:meth:`tfk8s.steps.parameters.LaunchSpec.from_params`:
            the backend and the volume root, replica counts, ``command``, the built-in trainer's hyperparameters,
            the run policy, the backend's options).

    Returns:
        A :class:`tfk8s.steps.launch_training.TrainingOutcome`, or with ``dry_run`` the backend's documents
        (dicts: Kubernetes manifests; local, one per process).

    Raises:
        tfk8s.core.errors.LaunchError: the training failed (the message names the replica, reason and fix).
        ValueError: a bad ``data_dir`` (not a data folder, or without the metadata the built-in trainer needs).
    """
    from tfk8s.core.data_format import FORMAT_NAME, inspect_data_dir
    from tfk8s.core.job import job_name
    from tfk8s.core.layout import RunLayout
    from tfk8s.core.volume import volume_writes

    if not dry_run:
        info = inspect_data_dir(data_dir)  # a bad or empty data folder fails before any replica starts
        if spec.is_builtin_trainer and info.get("format") != FORMAT_NAME:
            raise ValueError(f"data_dir {data_dir} is a {info.get('format')} folder without metadata.json, which "
                             f"the built-in trainer needs (image shape, classes): pass your own program as "
                             f"command, or prepare the data with dataset_name (docs/training-program.md)")
        if spec.is_builtin_trainer:
            examples = info.get("splits", {}).get("train", 0)
            examples = examples.get("num_examples", 0) if isinstance(examples, dict) else examples
            if spec.trainer.max_train_examples:
                examples = min(examples, spec.trainer.max_train_examples)
            warning = steps_warning(examples, spec.trainer.batch_size, spec.trainer.epochs,
                                    0 if spec.replicas.ps else spec.replicas.num_trainers)
            if warning:
                (log_sink or print)(warning)
    backend = spec.backend
    layout = RunLayout(spec.volume_root, run_id)
    t = spec.trainer
    job = build_job(
        name=job_name(run_id, spec.job_name_prefix),
        counts=spec.replicas,
        args=builtin_trainer.trainer_args(data_dir, layout.train_dir, t.epochs, t.batch_size, t.learning_rate,
                                          t.max_train_examples),
        command=spec.command,
        backend=backend,
        train_dir=layout.train_dir,
        data_dir=data_dir,
        run_policy=spec.run_policy,
    )
    if dry_run:
        rendered = backend.dry_run(job, spec.options)
        for note in rendered.notes:  # stderr: the YAML on stdout stays ready for kubectl apply -f -
            print(f"# {note}", file=sys.stderr, flush=True)
        return rendered.documents
    from tfk8s.core.data_hold import reading

    # the run holds its data from here to its evaluate step (tfk8s datasets delete): released here if it fails
    with volume_writes(layout.train_dir, "the training's files"), reading(layout.run_dir, "launch-training", last=False):
        return run_job(job, backend, layout.train_dir, options=spec.options, log_sink=log_sink)


def launch_training_outputs(outcome, dataset_metadata: dict | None = None) -> tuple[dict, dict[str, float]]:
    """What the launch component puts in its outputs: the Model artifact's metadata and the training Metrics.

    Returns:
        ``(metadata, metrics)``: metadata holds ``path``, ``job_name``, ``restarts``, ``cluster_spec``,
        ``training_summary`` (the file), ``dataset``, ``builtin_trainer``, ``notes`` and every reported metric
        as ``train_<name>`` (non-finite ones as the strings "NaN"/"Infinity", so KFP's JSON stays valid);
        metrics holds the finite numbers only.
    """
    job = outcome.summary["job"]
    meta = {
        "path": outcome.saved_model_dir,
        "job_name": job["name"],
        "restarts": job["restarts"],
        "cluster_spec": job["cluster_spec"],
        "training_summary": str(TrainLayout(Path(outcome.saved_model_dir).parent).summary),
        "dataset": (dataset_metadata or {}).get("dataset", ""),
        "builtin_trainer": builtin_trainer.is_builtin(job["command"]),
        "notes": list(outcome.notes),
        **{f"train_{k}": v for k, v in outcome.summary["metrics"].items()
           if isinstance(v, (int, float, str, bool))},
    }
    return meta, dict(outcome.metrics)

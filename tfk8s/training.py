"""The launch step: turn a :class:`~tfk8s.specs.LaunchSpec` into a :class:`~tfk8s.launcher.TrainingJob`, run
it on a backend, check what the coordinator left (its SavedModel, its metrics file) and write
``<train dir>/training_summary.json`` (the job plus the reported metrics), whatever program ran.

The program is the built-in trainer (``python -m trainer.task``) or the user's own ``command``; both get the
contract of :mod:`tfk8s.contract` (``docs/training-program.md``). Backends: ``local``
(:mod:`tfk8s.launcher.local`) and ``kubernetes`` (:mod:`tfk8s.launcher.kubernetes`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tfk8s import contract
from tfk8s.cluster import ReplicaCounts, coordinator
from tfk8s.launcher import LaunchError, LaunchResult, ReplicaFailedError, TrainingJob
from tfk8s.specs import (  # noqa: F401 (re-exported)
    DEFAULT_BATCH_SIZE,
    DEFAULT_EPOCHS,
    DEFAULT_LEARNING_RATE,
    DEFAULT_TIMEOUT_S,
)

BACKENDS = ("local", "kubernetes")
REPLICA_LOG_DIR = "replica-logs"  # under the train dir: one <type>-<index>.log per replica, all attempts
TRAINER_MODULE = "trainer.task"
# Keras 3's fit() breaks under multi-worker strategies (keras-team/keras#20585): every replica uses tf-keras
# (a user's program too: tf.keras then is tf-keras, as in TensorFlow's multi-worker tutorial).
TRAINER_ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
FEW_STEPS = 20  # an epoch with fewer global steps than this gets a warning (see steps_warning)


@dataclass(frozen=True)
class TrainingOutcome:
    """A finished launch.

    Attributes:
        launch: the backend's result.
        saved_model_dir: the coordinator's SavedModel (``<train dir>/saved_model``).
        summary: what ``training_summary.json`` holds: ``{"job": {...}, "metrics": {...}, "notes": [...]}``.
        metrics: the finite numeric metrics the coordinator reported (for the training Metrics artifact).
        notes: sentences about values left out of ``metrics`` (not finite) and similar.
    """

    launch: LaunchResult
    saved_model_dir: str
    summary: dict
    metrics: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def trainer_args(data_dir: str | os.PathLike, train_dir: str | os.PathLike, epochs: int, batch_size: int,
                 learning_rate: float, max_train_examples: int = 0) -> list[str]:
    """The built-in trainer's flags (``python -m trainer.task --help``); batch_size is the global batch.

    The launchers hand every replica its directories in the contract's variables (:mod:`tfk8s.contract`);
    ``--train-dir`` only fills those left unset (a trainer run by hand), with the same layout."""
    args = ["--data-dir", str(data_dir), "--train-dir", str(train_dir), "--epochs", str(epochs),
            "--batch-size", str(batch_size), "--learning-rate", repr(float(learning_rate))]
    if max_train_examples:
        args += ["--max-train-examples", str(max_train_examples)]
    return args


def build_job(*, name: str, counts: ReplicaCounts, args: Sequence[str] = (), backend: str,
              success_policy: str = "", timeout_s: float | None = None, env: Mapping[str, str] | None = None,
              train_dir: str | os.PathLike = "", data_dir: str | os.PathLike = "",
              command: Sequence[str] = (), progress_timeout_s: float = 0) -> TrainingJob:
    """The training job every backend runs.

    Args:
        args: the built-in trainer's flags (:func:`trainer_args`), used when ``command`` is empty.
        command: the user's program (argv, placeholders allowed); empty: ``python -m trainer.task <args>``.
            With the local backend a leading ``python``/``python3`` becomes the launcher's own interpreter
            (:func:`tfk8s.contract.local_python`); in a cluster it is the image's.
        train_dir, data_dir: the contract's directories (every replica gets :func:`tfk8s.contract.replica_env`).
        progress_timeout_s: with ``train_dir``, arms the progress watchdog (:class:`~tfk8s.launcher.TrainingJob`).

    With ps replicas (ParameterServerStrategy) the workers never exit by themselves, so the grace period lagging
    workers get after the chief's success is 0.

    Raises:
        ValueError: unknown backend (the message lists the known ones), invalid job fields or placeholders.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    argv = tuple(command) or ("python", "-m", TRAINER_MODULE, *args)
    if backend == "local":
        argv = contract.local_python(argv)
    # Under ParameterServerStrategy the workers serve the chief and never exit: stop them at once after it.
    grace = {"grace_period_s": 0.0} if counts.ps else {}
    return TrainingJob(name=name, counts=counts, command=argv, env={**TRAINER_ENV, **(env or {})},
                       success_policy=success_policy, timeout_s=timeout_s or None, train_dir=str(train_dir or ""),
                       data_dir=str(data_dir or ""), progress_timeout_s=progress_timeout_s, **grace)


def steps_warning(train_examples: int, batch_size: int, epochs: int) -> str | None:
    """A warning when an epoch has only a handful of global steps (the defaults fit MNIST's 60,000 examples:
    1,500 examples at global batch 512 give 2 steps an epoch, too few for the optimizer to get anywhere).

    Returns:
        The warning (naming the numbers and the fix), or None when there are at least :data:`FEW_STEPS`.
    """
    if train_examples <= 0 or batch_size <= 0:
        return None
    steps = train_examples // batch_size
    if steps >= FEW_STEPS:
        return None
    better = max(1, train_examples // FEW_STEPS)
    return (f"WARNING: {train_examples} training examples at global batch_size {batch_size} give {steps} steps "
            f"per epoch ({steps * epochs} in all): too few to train well; lower batch_size (e.g. "
            f"--param batch_size={better}, or a multiple of the chief/worker replicas near it) or use more data")


def run_job(job: TrainingJob, backend: str, train_dir: str | os.PathLike, *,
            kubernetes_params: Mapping | None = None, log_sink: Callable[[str], None] | None = None,
            max_restarts: int | None = None) -> TrainingOutcome:
    """Run ``job`` on ``backend``, check the coordinator's SavedModel, read its metrics file and write
    ``<train dir>/training_summary.json``. The non-coordinators' scratch model dirs are removed at every end.

    Args:
        kubernetes_params: keyword arguments of ``KubernetesSettings.from_params`` (kubernetes backend only).
        max_restarts: the local backend's restart budget (default: ``kubernetes_params["max_restarts"]``, else
            :data:`tfk8s.launcher.policy.DEFAULT_MAX_RESTARTS`); on Kubernetes it is the settings'.

    Raises:
        LaunchError (and subclasses): a replica failed (its name, exit code, reason, last lines), the job timed
            out, or the coordinator exited 0 without a SavedModel in its ``TFK8S_MODEL_DIR``.
    """
    from tfk8s.tracking import tracked

    train = Path(train_dir)
    for sub in ("", contract.CHECKPOINT_DIR, contract.TENSORBOARD_DIR, "progress", contract.METRICS_DIR):
        (train / sub).mkdir(parents=True, exist_ok=True)  # the launcher mounts the volume where replicas do
    namespace = ""
    if backend == "kubernetes":
        from tfk8s.kube.settings import KubernetesSettings

        namespace = KubernetesSettings.from_params(**dict(kubernetes_params or {})).namespace
    # The job record (<train dir>/job.json), every replica's log kept on the volume, the progress display.
    with tracked(job, backend, train_dir, log_sink, namespace=namespace) as track:
        try:
            result = _run(job, backend, kubernetes_params, track.sink, train, max_restarts)
        except ReplicaFailedError as e:
            if TRAINER_MODULE not in job.command:  # the user's program: say where its log is and what to fix
                e.args = ((f"{e}\nthe training program failed on replica {e.replica.label}: fix the program or the "
                           f"command parameter ({' '.join(job.command)[:200]}); its whole log: "
                           f"{train / REPLICA_LOG_DIR / (e.replica.label + '.log')}; the contract: {contract.DOCS}"),)
            raise
        finally:
            contract.remove_scratch(train)  # the non-coordinators' model dirs (tfk8s.contract)
        outcome = collect(job, result, train, log_sink=track.sink)
        track.recorder.result = result
    return outcome


def _run(job: TrainingJob, backend: str, kubernetes_params, sink, train: Path, max_restarts: int | None
         ) -> LaunchResult:
    if backend == "local":
        from tfk8s.launcher.local import run_local
        from tfk8s.launcher.policy import DEFAULT_MAX_RESTARTS

        if max_restarts is None:
            max_restarts = int((kubernetes_params or {}).get("max_restarts", DEFAULT_MAX_RESTARTS))
        return run_local(job, log_sink=sink, log_dir=train / REPLICA_LOG_DIR, max_restarts=max_restarts)
    if backend == "kubernetes":
        from tfk8s.kube.settings import KubernetesSettings
        from tfk8s.launcher.kubernetes import run_kubernetes

        settings = KubernetesSettings.from_params(**dict(kubernetes_params or {}))
        return run_kubernetes(job, settings, log_sink=sink)
    raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


class NoSavedModelError(LaunchError):
    """The coordinator exited 0 but left no SavedModel in its ``TFK8S_MODEL_DIR``."""


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
        raise NoSavedModelError(
            f"replica {coord.label} (the coordinator) exited 0 but saved no SavedModel in its TFK8S_MODEL_DIR "
            f"{saved_model} ({'it holds ' + str(found) if found else 'nothing is there'}): the training program "
            f"must save the trained model there, e.g. model.save(os.environ['TFK8S_MODEL_DIR']) (tf.keras) or "
            f"tf.saved_model.save(model, os.environ['TFK8S_MODEL_DIR']), or take the path from the command's "
            f"{{model_dir}} placeholder; see {contract.DOCS}. In a cluster, also check that the PVC is mounted "
            f"at the same path in the replicas and the launcher")
    summary_file = train / contract.SUMMARY_FILE
    reported, numbers, notes = contract.read_metrics(contract.metrics_file(train, coord))
    if not reported:
        notes.append(f"the program reported no metrics ({contract.ENV_METRICS_FILE} of {coord.label} was not "
                     f"written; see {contract.DOCS})")
    if reported.get("diverged") is True:
        notes.append("training diverged (loss NaN or infinite): the program stopped it")
    summary = {
        "job": {
            "name": result.job_name,
            "replicas": {t: job.counts.count(t) for t in ("chief", "worker", "ps", "evaluator")},
            "coordinator": coord.label,
            "command": list(job.command),
            "cluster_spec": result.cluster_spec,
            "restarts": result.restarts,
            "wall_time_s": round(result.wall_time_s, 3),
            "exit_codes": result.exit_codes,
            "stopped": result.stopped,
            # every replica's whole log (all attempts, kept after the pods are gone) and the job record
            "replica_logs": {r.label: str(train / REPLICA_LOG_DIR / f"{r.label}.log") for r in job.counts.replicas()},
            "record": str(train / "job.json"),
            "tensorboard_command": f"tensorboard --logdir {train / 'logs'}",
        },
        "saved_model": str(saved_model),
        "metrics": reported,
        "notes": notes,
    }
    _write_json(summary_file, summary)
    for note in notes:
        sink(f"note: {note}")
    return TrainingOutcome(result, str(saved_model), summary, numbers, notes)


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


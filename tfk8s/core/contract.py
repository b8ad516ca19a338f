"""The training-program contract: what every replica of every backend is handed, besides TF_CONFIG.

A training program - ours (``python -m trainer.task``) or the user's own - learns where things are from these
environment variables, built by ONE pure function, :func:`replica_env`, that every backend calls (the local
backend and :mod:`tfk8s.launcher.kubernetes.objects`). The full contract, for program authors: ``docs/training-program.md``.

=========================  ==============================================================================
``TFK8S_JOB_NAME``         the training job's name (``tfk8s-<run id>``)
``TFK8S_REPLICA_TYPE``     ``chief`` | ``worker`` | ``ps`` | ``evaluator``
``TFK8S_REPLICA_INDEX``    the task index within the type, 0-based
``TFK8S_DATA_DIR``         the prepared data (shards + ``metadata.json``), read-only
``TFK8S_MODEL_DIR``        the coordinator (chief-0, or worker-0 without a chief): ``<train dir>/saved_model``;
                           every other replica: ``<train dir>/scratch/<type>-<index>/saved_model``, removed
                           by the launch step after the job (MultiWorkerMirroredStrategy needs every worker
                           to save: tensorflow#38635)
``TFK8S_CHECKPOINT_DIR``   ``<train dir>/checkpoints``: shared, survives restarts (BackupAndRestore in
                           ``backup/`` below it)
``TFK8S_TENSORBOARD_DIR``  ``<train dir>/logs`` (``train/``, ``eval/``)
``TFK8S_PROGRESS_FILE``    ``<train dir>/progress/<type>-<index>.json`` (format: :mod:`tfk8s.core.progress`)
``TFK8S_METRICS_FILE``     ``<train dir>/metrics/<type>-<index>.json``: optional, one JSON object the program
                           writes at the end (:func:`write_metrics`); the launch step reads the coordinator's
=========================  ==============================================================================

The same values are placeholders in the user's command, substituted per replica (:func:`substitute`):
``{data_dir}``, ``{model_dir}``, ``{checkpoint_dir}``, ``{tensorboard_dir}``, ``{job_name}``,
``{replica_type}``, ``{replica_index}``; a literal brace is written ``{{`` / ``}}`` (Python's
``str.format`` rules). The launch step (not the program) writes ``<train dir>/training_summary.json``.

Programs written for Vertex AI custom training or SageMaker run unchanged: :func:`replica_env` also sets those
platforms' variables that have a meaning here, as aliases of the ``TFK8S_*`` values (:data:`PLATFORM_ALIASES`,
one table), plus SageMaker's host list (:func:`sagemaker_hosts`). Which ones, and which have no equivalent:
``docs/training-program.md`` ("Programs from Vertex AI and SageMaker").

Plain Python: no TensorFlow, KFP or Kubernetes, so user programs, the trainer and the launchers import it.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import string
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tfk8s.core.cluster import Replica, ReplicaCounts, ReplicaType, cluster_spec
from tfk8s.core.cluster import coordinator as coordinator_of_job
from tfk8s.core.layout import TrainLayout
from tfk8s.core.progress import PROGRESS_FILE_ENV

ENV_JOB_NAME = "TFK8S_JOB_NAME"
ENV_REPLICA_TYPE = "TFK8S_REPLICA_TYPE"
ENV_REPLICA_INDEX = "TFK8S_REPLICA_INDEX"
ENV_DATA_DIR = "TFK8S_DATA_DIR"
ENV_MODEL_DIR = "TFK8S_MODEL_DIR"
ENV_CHECKPOINT_DIR = "TFK8S_CHECKPOINT_DIR"
ENV_TENSORBOARD_DIR = "TFK8S_TENSORBOARD_DIR"
ENV_PROGRESS_FILE = PROGRESS_FILE_ENV  # "TFK8S_PROGRESS_FILE", defined by tfk8s.core.progress
ENV_METRICS_FILE = "TFK8S_METRICS_FILE"

CONTRACT_ENV = (ENV_JOB_NAME, ENV_REPLICA_TYPE, ENV_REPLICA_INDEX, ENV_DATA_DIR, ENV_MODEL_DIR,
                ENV_CHECKPOINT_DIR, ENV_TENSORBOARD_DIR, ENV_PROGRESS_FILE, ENV_METRICS_FILE)
"""Every variable :func:`replica_env` sets (a user's ``env`` may not set them: the launcher does)."""

PLATFORM_ALIASES: dict[str, tuple[str, str]] = {
    # Vertex AI custom training (CustomJobSpec.baseOutputDirectory; aiplatform.training_utils): Cloud Storage
    # URIs of folders, ending in "/" (``<base output dir>/model/``); used as they are by model.save and callbacks.
    "AIP_MODEL_DIR": (ENV_MODEL_DIR, "/"),
    "AIP_CHECKPOINT_DIR": (ENV_CHECKPOINT_DIR, "/"),
    "AIP_TENSORBOARD_LOG_DIR": (ENV_TENSORBOARD_DIR, "/"),
    # Vertex AI managed datasets: a wildcard URI of a split's files (``gs://bucket/path/training-*``)
    "AIP_TRAINING_DATA_URI": (ENV_DATA_DIR, "/train-*"),
    "AIP_TEST_DATA_URI": (ENV_DATA_DIR, "/test-*"),
    "CLOUD_ML_JOB_ID": (ENV_JOB_NAME, ""),
    # SageMaker (sagemaker-training-toolkit ENVIRONMENT_VARIABLES.md): local folders, no trailing "/"
    "SM_MODEL_DIR": (ENV_MODEL_DIR, ""),
    "SM_CHANNEL_TRAIN": (ENV_DATA_DIR, ""),
    "SM_CHANNEL_TRAINING": (ENV_DATA_DIR, ""),
    "SM_CHANNEL_TEST": (ENV_DATA_DIR, ""),
    "SM_CHANNEL_TESTING": (ENV_DATA_DIR, ""),
    "SM_OUTPUT_DATA_DIR": (ENV_TENSORBOARD_DIR, ""),
}
"""Another platform's variable -> ``(the TFK8S_* variable it aliases, a suffix)``: its value is the
``TFK8S_*`` value followed by the suffix. The only place the aliases are defined."""

PLATFORM_CONSTANTS: dict[str, str] = {
    "AIP_DATA_FORMAT": "tfrecord",  # what AIP_*_DATA_URI name (Vertex's own values: jsonl, csv, bigquery)
    "SM_CHANNELS": json.dumps(sorted(k.removeprefix("SM_CHANNEL_").lower() for k in PLATFORM_ALIASES
                                     if k.startswith("SM_CHANNEL_")), separators=(",", ":")),
}
"""Platform variables whose value is the same for every replica of every job."""

ENV_SM_HOSTS = "SM_HOSTS"
ENV_SM_CURRENT_HOST = "SM_CURRENT_HOST"
ENV_SM_RESOURCE_CONFIG = "SM_RESOURCE_CONFIG"
ENV_SM_NUM_GPUS = "SM_NUM_GPUS"
"""Set by the Kubernetes backend only (the replica type's ``gpus``): :func:`replica_env` cannot know it."""

PLATFORM_ENV = (*PLATFORM_ALIASES, *PLATFORM_CONSTANTS, ENV_SM_HOSTS, ENV_SM_CURRENT_HOST, ENV_SM_RESOURCE_CONFIG)
"""Every Vertex AI / SageMaker variable :func:`replica_env` sets besides :data:`CONTRACT_ENV`."""

PLACEHOLDERS: dict[str, str] = {
    "data_dir": ENV_DATA_DIR,
    "model_dir": ENV_MODEL_DIR,
    "checkpoint_dir": ENV_CHECKPOINT_DIR,
    "tensorboard_dir": ENV_TENSORBOARD_DIR,
    "job_name": ENV_JOB_NAME,
    "replica_type": ENV_REPLICA_TYPE,
    "replica_index": ENV_REPLICA_INDEX,
}
"""Placeholder name in a command -> the contract variable whose per-replica value replaces it."""

DOCS = "docs/training-program.md"
"""Where the contract is documented for program authors (error messages point here)."""


class PlaceholderError(ValueError):
    """A command names a placeholder that does not exist, or has an unbalanced brace."""


def model_dir(train_dir: str | os.PathLike, replica: Replica, coordinator: Replica) -> Path:
    """``TFK8S_MODEL_DIR`` of ``replica``: the coordinator's ``<train dir>/saved_model`` (the one exported),
    else the replica's own scratch ``<train dir>/scratch/<type>-<index>/saved_model``."""
    layout = TrainLayout(train_dir)
    return layout.saved_model if replica == coordinator else layout.scratch_model(replica.label)


def metrics_file(train_dir: str | os.PathLike, replica: Replica) -> Path:
    """``TFK8S_METRICS_FILE`` of ``replica``: ``<train dir>/metrics/<type>-<index>.json``."""
    return TrainLayout(train_dir).metrics_file(replica.label)


def sagemaker_hosts(counts: ReplicaCounts | None, replica: Replica) -> list[str]:
    """``SM_HOSTS``: the names of the training cluster's replicas, ``<type>-<index>`` (``["worker-0",
    "worker-1"]``), in TF_CONFIG's order (chief, workers, ps; by index), so ``hosts[0]`` is the coordinator, as
    SageMaker programs that save on ``hosts[0]`` expect. Names, not addresses (SageMaker's ``algo-1`` has no
    port): the addresses are TF_CONFIG's, in the same order. The evaluator is not in the cluster, so not here.

    Args:
        counts: the job's replica counts; None: a one-process run, ``[replica's name]``.
        replica: the replica asking (used only without ``counts``).
    """
    if counts is None:
        return [replica.label]
    return [name for names in cluster_spec(counts, lambda r: r.label).values() for name in names]


def platform_aliases(env: Mapping[str, str]) -> dict[str, str]:
    """The :data:`PLATFORM_ALIASES` of the ``TFK8S_*`` values in ``env`` (those present): e.g. ``AIP_MODEL_DIR``
    is ``env["TFK8S_MODEL_DIR"] + "/"``. A caller that changes a ``TFK8S_*`` value after :func:`replica_env`
    (the evaluate step's ``eval_command``) updates its aliases with this."""
    return {alias: env[source] + suffix for alias, (source, suffix) in PLATFORM_ALIASES.items() if source in env}


def replica_env(job_name: str, replica: Replica, coordinator: Replica, train_dir: str | os.PathLike,
                data_dir: str | os.PathLike, counts: ReplicaCounts | None = None) -> dict[str, str]:
    """The contract's environment variables of one replica: every name of :data:`CONTRACT_ENV` and of
    :data:`PLATFORM_ENV` (the Vertex AI / SageMaker aliases).

    Pure: computes paths, creates nothing. Both backends call it, next to TF_CONFIG.

    Args:
        job_name: the training job's name.
        replica: the replica (type + index).
        coordinator: the replica whose model is the job's (:func:`tfk8s.core.cluster.coordinator`).
        train_dir: the run's train folder on the shared volume (``RunLayout.train_dir``).
        data_dir: the prepared data folder (shards + metadata.json).
        counts: the job's replica counts, for ``SM_HOSTS`` (:func:`sagemaker_hosts`); None: one process.

    Returns:
        ``{"TFK8S_JOB_NAME": ..., ..., "TFK8S_METRICS_FILE": ..., "AIP_MODEL_DIR": ..., "SM_HOSTS": ...}``,
        all values strings (``SM_HOSTS``, ``SM_CHANNELS`` and ``SM_RESOURCE_CONFIG`` JSON, as SageMaker's).
    """
    env = _tfk8s_env(job_name, replica, coordinator, train_dir, data_dir)
    hosts = sagemaker_hosts(counts, replica)
    env.update(platform_aliases(env))
    env.update(PLATFORM_CONSTANTS)
    env[ENV_SM_HOSTS] = json.dumps(hosts, separators=(",", ":"))
    env[ENV_SM_CURRENT_HOST] = replica.label
    env[ENV_SM_RESOURCE_CONFIG] = json.dumps({"current_host": replica.label, "hosts": hosts}, separators=(",", ":"))
    return env


def _tfk8s_env(job_name: str, replica: Replica, coordinator: Replica, train_dir: str | os.PathLike,
               data_dir: str | os.PathLike) -> dict[str, str]:
    train = TrainLayout(train_dir)
    return {
        ENV_JOB_NAME: job_name,
        ENV_REPLICA_TYPE: ReplicaType(replica.replica_type).value,
        ENV_REPLICA_INDEX: str(replica.index),
        ENV_DATA_DIR: str(data_dir),
        ENV_MODEL_DIR: str(model_dir(train.root, replica, coordinator)),
        ENV_CHECKPOINT_DIR: str(train.checkpoints),
        ENV_TENSORBOARD_DIR: str(train.tensorboard),
        ENV_PROGRESS_FILE: str(train.progress_file(replica.label)),
        ENV_METRICS_FILE: str(train.metrics_file(replica.label)),
    }


def placeholders_in(command: Sequence[str]) -> list[str]:
    """The placeholder names used in ``command`` (in order, repeated ones once).

    Raises:
        PlaceholderError: an unbalanced ``{`` or ``}``, or a placeholder with a format spec or conversion
            (``{model_dir!r}``, ``{x:>3}``), naming the argument and how to write a literal brace.
    """
    names: list[str] = []
    for arg in command:
        try:
            parsed = list(string.Formatter().parse(arg))
        except ValueError as e:
            raise PlaceholderError(
                f"command argument {arg!r}: {e}; write a literal brace as '{{{{' or '}}}}'") from None
        for _, name, spec, conversion in parsed:
            if name is None:
                continue
            if spec or conversion or not name:
                raise PlaceholderError(
                    f"command argument {arg!r}: '{{{name}{'!' + conversion if conversion else ''}"
                    f"{':' + spec if spec else ''}}}' is not a placeholder; use one of "
                    f"{_known()}, or write a literal brace as '{{{{' or '}}}}'")
            if name not in names:
                names.append(name)
    return names


def check_command(command: Sequence[str]) -> None:
    """Check ``command``'s placeholders before any replica starts.

    Raises:
        PlaceholderError: an unknown placeholder (the message names it and the known ones) or a bad brace.
    """
    unknown = [n for n in placeholders_in(command) if n not in PLACEHOLDERS]
    if unknown:
        raise PlaceholderError(
            f"command uses unknown placeholder {', '.join('{' + n + '}' for n in unknown)}: the known ones are "
            f"{_known()} (see {DOCS}); write a literal brace as '{{{{' or '}}}}'")


def substitute(command: Sequence[str], env: Mapping[str, str]) -> tuple[str, ...]:
    """``command`` with every placeholder replaced by this replica's value from ``env`` (:func:`replica_env`).

    ``{{`` and ``}}`` become literal braces. An argument without braces is returned unchanged.

    Raises:
        PlaceholderError: an unknown placeholder or bad brace (:func:`check_command`), or a known one whose
            variable is missing from ``env``.
    """
    check_command(command)
    values = {}
    for name, var in PLACEHOLDERS.items():
        if var in env:
            values[name] = env[var]
    out = []
    for arg in command:
        if "{" not in arg and "}" not in arg:
            out.append(arg)
            continue
        missing = [n for n in placeholders_in([arg]) if n not in values]
        if missing:
            raise PlaceholderError(f"command argument {arg!r}: no value for {missing} in this replica's "
                                   f"environment (the launcher sets {list(PLACEHOLDERS.values())})")
        out.append(arg.format_map(values))
    return tuple(out)


def _known() -> str:
    return ", ".join("{" + n + "}" for n in PLACEHOLDERS)


def parse_command(value: str | Sequence[str]) -> tuple[str, ...]:
    """The pipeline parameter ``command`` as argv: a JSON list of strings, or a shell-style string (shlex).

    Returns:
        The argv; ``()`` for an empty value (meaning: the built-in trainer).

    Raises:
        ValueError: a JSON list with non-strings, or a string shlex cannot split (unclosed quote); the
            message names the parameter and shows both accepted forms.
    """
    example = ('e.g. \'["python", "train.py", "--model_dir", "{model_dir}"]\' or '
               '"python train.py --model_dir {model_dir}"')
    if not isinstance(value, str):
        argv = list(value)
    else:
        text = value.strip()
        if not text:
            return ()
        if text.startswith("["):
            try:
                argv = json.loads(text)
            except ValueError as e:
                raise ValueError(f"command looks like a JSON list but is not valid JSON ({e}); {example}") from None
            if not isinstance(argv, list):
                raise ValueError(f"command must be a JSON list of strings or a shell-style string; {example}")
        else:
            try:
                argv = shlex.split(text)
            except ValueError as e:
                raise ValueError(f"command {value!r} cannot be split like a shell line ({e}); {example}") from None
    if not all(isinstance(a, str) for a in argv):
        raise ValueError(f"command must be a JSON list of strings (argv) or a shell-style string, got {value!r}; {example}")
    return tuple(argv)


def local_python(command: Sequence[str]) -> tuple[str, ...]:
    """With the local backend, a leading ``python``/``python3`` is the launcher's own interpreter
    (``sys.executable``), so a local run uses the environment tfk8s runs in."""
    argv = tuple(command)
    if argv and argv[0] in ("python", "python3"):
        return (sys.executable, *argv[1:])
    return argv


FOLDER_ENV = (ENV_MODEL_DIR, ENV_CHECKPOINT_DIR, ENV_TENSORBOARD_DIR)
"""The contract's variables that name a folder the program writes into (the data folder is read-only and the
prepare step's; the progress and metrics files' folders are :meth:`tfk8s.core.layout.TrainLayout.folders`)."""


def replica_folders(env: Mapping[str, str]) -> list[Path]:
    """The folders one replica's contract environment (:func:`replica_env`) names for it to write into, which
    must exist before its program starts: :data:`FOLDER_ENV` (``TFK8S_MODEL_DIR``...) and every alias of them
    in :data:`PLATFORM_ALIASES` (``AIP_MODEL_DIR``, ``SM_MODEL_DIR``, ``SM_OUTPUT_DATA_DIR``...), so that a
    Keras 3 ``model.save(os.path.join(os.environ["SM_MODEL_DIR"], "model.keras"))`` finds its folder.

    Returns:
        The distinct folders, in :data:`FOLDER_ENV` order then the aliases' (an alias's trailing ``/`` dropped).
    """
    names = [*FOLDER_ENV, *(alias for alias, (source, _) in PLATFORM_ALIASES.items() if source in FOLDER_ENV)]
    out: list[Path] = []
    for name in names:
        if env.get(name) and Path(env[name]) not in out:
            out.append(Path(env[name]))
    return out


def job_folders(job_name: str, counts: ReplicaCounts, train_dir: str | os.PathLike,
                data_dir: str | os.PathLike) -> list[Path]:
    """:func:`replica_folders` of every replica of a job (the coordinator's ``<train dir>/saved_model``, each
    other replica's scratch ``saved_model``, the checkpoint and TensorBoard folders): what the launch step creates
    on the volume before it hands the job to either backend. Pure: creates nothing.

    Returns:
        The distinct folders, replica by replica in :meth:`ReplicaCounts.replicas` order.
    """
    coord = coordinator_of_job(counts)
    out: list[Path] = []
    for replica in counts.replicas():
        for folder in replica_folders(replica_env(job_name, replica, coord, train_dir, data_dir, counts)):
            if folder not in out:
                out.append(folder)
    return out


def remove_scratch(train_dir: str | os.PathLike) -> None:
    """Remove ``<train dir>/scratch`` (the non-coordinators' model dirs) after the job; missing is fine."""
    shutil.rmtree(TrainLayout(train_dir).scratch, ignore_errors=True)


def _encode(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    return value


def write_metrics(path: str | os.PathLike, metrics: Mapping[str, Any]) -> Path:
    """Write ``metrics`` as the metrics file (``TFK8S_METRICS_FILE``): one JSON object, written atomically.

    Non-finite floats are written as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` so the file stays
    valid JSON; numpy scalars are converted with ``.item()``.

    Raises:
        OSError: the folder cannot be created or written.
    """
    def plain(v: Any) -> Any:
        return v.item() if hasattr(v, "item") and not isinstance(v, list | tuple | Mapping) else v

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(_encode({str(k): plain(v) for k, v in metrics.items()}), indent=2, allow_nan=False)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(data + "\n")
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


_NON_FINITE = {"nan": math.nan, "infinity": math.inf, "-infinity": -math.inf, "inf": math.inf, "-inf": -math.inf}


def read_metrics(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, float], list[str]]:
    """Read a metrics file and split it into what the training Metrics artifact can show.

    Returns:
        ``(reported, numbers, notes)``: ``reported`` is the whole object (non-finite values as the strings
        :func:`write_metrics` writes, so it stays valid JSON); ``numbers`` the finite numeric values (booleans
        as 0/1 are left out: ``diverged`` stays in ``reported``); ``notes`` one sentence per value left out
        of ``numbers`` because it is not finite (e.g. ``"loss is NaN (not a finite number): left out of the
        metrics"``). A missing file gives ``({}, {}, [])``.

    Raises:
        ValueError: the file is not a JSON object (the message names the file and the format).
    """
    p = Path(path)
    if not p.is_file():
        return {}, {}, []
    try:
        data = json.loads(p.read_text())
    except ValueError as e:
        raise ValueError(f"metrics file {p} is not valid JSON ({e}): write one JSON object of name -> number "
                         f"(tfk8s.runtime.report does it; see {DOCS})") from None
    if not isinstance(data, dict):
        raise ValueError(f"metrics file {p} must hold one JSON object of name -> number, got "  # noqa: TRY004
                         f"{type(data).__name__} (see {DOCS})")
    reported: dict[str, Any] = {}
    numbers: dict[str, float] = {}
    notes: list[str] = []
    for key, value in data.items():
        if isinstance(value, str) and value.strip().lower() in _NON_FINITE:
            value = _NON_FINITE[value.strip().lower()]
        if isinstance(value, bool) or not isinstance(value, int | float):
            reported[key] = value
            continue
        if not math.isfinite(value):
            word = "NaN" if math.isnan(value) else ("infinite" if value > 0 else "-infinite")
            notes.append(f"{key} is {word} (not a finite number): left out of the metrics")
        else:
            numbers[key] = float(value)
        reported[key] = _encode(value)
    return reported, numbers, notes

"""The pipeline's parameters: the launch step's parameter table (the ONE definition the pipeline, the component
and its CLI share), the typed :class:`LaunchSpec` built from it, and every parameter checked together.

A launch is a :class:`LaunchSpec`: the replica counts (:class:`~tfk8s.core.cluster.ReplicaCounts`), the program
every replica runs (``command``; empty: the built-in trainer with its :class:`TrainerSpec`), the job's success
policy / timeout / name prefix / restart budget, and the Kubernetes settings
(:class:`~tfk8s.launcher.kubernetes.settings.KubernetesParams`). Its parameters (:data:`LAUNCH_PARAMETERS`) are
what the pipeline and the ``launch_training`` component take and what ``python -m components.launch_training``
offers as flags (generated from the table): the Kubernetes settings are one ``kubernetes`` dict parameter, e.g.
``--param kubernetes='{"cpu": "2", "memory": "4Gi"}'``, except :data:`OWN_PARAMETERS` (``namespace``,
``image``, ``pvc_name``, which other steps use, and ``max_restarts``, which both backends use).

:func:`check` is what ``python pipelines/train.py --local/--run/--schedule`` runs before starting (seconds,
nothing written), and what the launch step runs again before creating any replica (a run started from the KFP
UI). Every message names the pipeline parameter (as in ``--param key=value``) and the fix. Nothing here
imports KFP, TensorFlow or a Kubernetes client.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tfk8s import DEFAULT_IMAGE
from tfk8s.core.builtin_trainer import DEFAULT_BATCH_SIZE, DEFAULT_EPOCHS, DEFAULT_LEARNING_RATE
from tfk8s.core.cluster import ClusterConfigError, ReplicaCounts
from tfk8s.core.contract import check_command, parse_command
from tfk8s.core.job import SUCCESS_POLICIES
from tfk8s.core.layout import DEFAULT_ROOT, check_model_name
from tfk8s.core.policy import (
    DEFAULT_EVALUATOR_GRACE_S,
    DEFAULT_MAX_RESTARTS,
    DEFAULT_PROGRESS_TIMEOUT_S,
    DEFAULT_RESTART_EXIT_CODE,
    DEFAULT_STARTUP_TIMEOUT_S,
    STOP_GRACE_S,
)
from tfk8s.launcher.backends import BACKENDS, mounts_claim
from tfk8s.launcher.kubernetes.settings import (
    DNS1123_LABEL,
    DNS1123_LABEL_RULE,
    DNS1123_SUBDOMAIN,
    KubernetesParams,
    KubernetesSettings,
    parse_json,
)

# A job-level deadline by default, so that a program that hangs without ever reporting progress (which the
# progress watchdog cannot judge) fails within a day instead of at the Kubernetes backstop (7 days); MNIST trains
# in about a minute, and a longer training sets timeout_s (0: no deadline).
DEFAULT_TIMEOUT_S = 24 * 3600
OWN_PARAMETERS = (*KubernetesParams.SHARED, "max_restarts")
"""Settings of the replicas that are pipeline parameters of their own, not keys of the ``kubernetes`` dict."""


@dataclass(frozen=True)
class TrainerSpec:

    """The built-in trainer's hyperparameters (``python -m trainer.task``); ignored by a user's ``command``.

    Attributes:
        epochs: training epochs.
        batch_size: the global batch (split evenly over the chief/worker replicas without ps).
        learning_rate: initial learning rate (cosine decay to 0).
        max_train_examples: cap on training examples (0: all), for smoke runs.
    """

    epochs: int = DEFAULT_EPOCHS
    batch_size: int = DEFAULT_BATCH_SIZE
    learning_rate: float = DEFAULT_LEARNING_RATE
    max_train_examples: int = 0


@dataclass(frozen=True)
class LaunchSpec:
    """Everything the launch step needs besides where the data is and which backend runs it.

    Attributes:
        replicas: chief / worker / ps / evaluator counts.
        trainer: the built-in trainer's hyperparameters.
        command: the user's program (argv, may hold the placeholders of :mod:`tfk8s.core.contract`); empty: the
            built-in trainer.
        success_policy: ``""`` (the chief, or worker 0) or ``"AllWorkers"``.
        timeout_s: job-level deadline in seconds (0: none).
        progress_timeout_s: seconds a replica that reported progress may go without a new report before it
            counts as hung (0: no watchdog; :class:`tfk8s.core.job.TrainingJob`).
        job_name_prefix: prefix of the job name ``<prefix>-<run id>``.
        max_restarts: the restart budget on either backend (:attr:`tfk8s.core.job.TrainingJob.max_restarts`).
        stop_grace_s, restart_exit_code, startup_timeout_s, evaluator_grace_s: how replicas are stopped and
            judged (:class:`tfk8s.core.job.TrainingJob`'s fields of the same names).
        kubernetes: the Kubernetes backend's settings (also namespace, image, pvc_name).
    """

    replicas: ReplicaCounts = field(default_factory=ReplicaCounts)
    trainer: TrainerSpec = field(default_factory=TrainerSpec)
    command: tuple[str, ...] = ()
    success_policy: str = ""
    timeout_s: int = DEFAULT_TIMEOUT_S
    progress_timeout_s: int = DEFAULT_PROGRESS_TIMEOUT_S
    job_name_prefix: str = "tfk8s"
    max_restarts: int = DEFAULT_MAX_RESTARTS
    stop_grace_s: int = STOP_GRACE_S
    restart_exit_code: int = DEFAULT_RESTART_EXIT_CODE
    startup_timeout_s: int = DEFAULT_STARTUP_TIMEOUT_S
    evaluator_grace_s: int = DEFAULT_EVALUATOR_GRACE_S
    kubernetes: KubernetesParams = field(default_factory=KubernetesParams)

    @property
    def is_builtin_trainer(self) -> bool:
        """True when no ``command`` was given: the replicas run ``python -m trainer.task``."""
        return not self.command

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> LaunchSpec:
        """The spec from the launch parameters (:data:`LAUNCH_PARAMETERS` names; other keys are ignored, a
        missing one keeps its default).

        Raises:
            ValueError: a bad replica combination, command or ``kubernetes`` dict; the message names the
                parameter. (Value ranges are checked together by :func:`tfk8s.steps.params.check`.)
        """
        get = {k: params[k] for k in LAUNCH_PARAMETERS if k in params}
        d = {k: p.default for k, p in LAUNCH_PARAMETERS.items()}
        d.update(get)
        try:
            counts = ReplicaCounts(chief=d["chief"], worker=d["workers"], ps=d["ps"], evaluator=d["evaluator"])
        except ClusterConfigError as e:
            raise ValueError(str(e).replace("worker >= 1", "workers >= 1")) from None
        kube = kubernetes_params(d["kubernetes"], {k: d[k] for k in KubernetesParams.SHARED})
        return cls(
            replicas=counts,
            trainer=TrainerSpec(epochs=d["epochs"], batch_size=d["batch_size"],
                                learning_rate=float(d["learning_rate"]),
                                max_train_examples=d["max_train_examples"]),
            command=parse_command(d["command"]),
            success_policy=d["success_policy"],
            timeout_s=d["timeout_s"],
            progress_timeout_s=d["progress_timeout_s"],
            job_name_prefix=d["job_name_prefix"],
            max_restarts=d["max_restarts"],
            stop_grace_s=d["stop_grace_s"],
            restart_exit_code=d["restart_exit_code"],
            startup_timeout_s=d["startup_timeout_s"],
            evaluator_grace_s=d["evaluator_grace_s"],
            kubernetes=kube,
        )


def kubernetes_params(value: Any, shared: Mapping[str, Any] | None = None) -> KubernetesParams:
    """The ``kubernetes`` parameter (a dict or its JSON) with the pipeline's own ``namespace``/``image``/
    ``pvc_name`` (``shared``) laid over it.

    Raises:
        ValueError: not an object, a key of :data:`OWN_PARAMETERS` (a parameter of its own), or an unknown key
            (the message names it, a close match and the known ones).
    """
    given = kube_dict(value)
    taken = sorted(set(given) & set(OWN_PARAMETERS))
    if taken:
        raise ValueError(f"kubernetes must not set {taken}: they are pipeline parameters of their own "
                         f"(--param {taken[0]}=...)")
    return replace(KubernetesParams.from_dict(given), **dict(shared or {}))


def kube_dict(value: Any) -> dict:
    """The ``kubernetes`` parameter as a dict (a JSON string is parsed; empty: ``{}``).

    Raises:
        ValueError: not a JSON object.
    """
    if isinstance(value, str) and not value.strip():
        return {}
    return dict(parse_json(value, "kubernetes", dict, '{"cpu": "2", "memory": "4Gi"}'))


@dataclass(frozen=True)
class Parameter:
    """One launch parameter: its default, type (``int``, ``float``, ``str``, ``dict``) and help text."""

    default: Any
    kind: type
    help: str


_K = KubernetesParams.defaults()
_T = TrainerSpec()
LAUNCH_PARAMETERS: dict[str, Parameter] = {
    "chief": Parameter(0, int, "chief replicas, 0 or 1 (1 is required with ps)"),
    "workers": Parameter(2, int, "worker replicas"),
    "ps": Parameter(0, int, "parameter servers (ParameterServerStrategy; needs chief=1 and workers >= 1)"),
    "evaluator": Parameter(0, int, "0 or 1 sidecar evaluator (the built-in trainer evaluates each checkpoint)"),
    "command": Parameter("", str, (
        "the program every replica runs: a JSON list (argv) or a shell-style string, placeholders "
        "{data_dir} {model_dir} {checkpoint_dir} {tensorboard_dir} {job_name} {replica_type} {replica_index}; "
        "empty: the built-in trainer (python -m trainer.task). See docs/training-program.md")),
    "epochs": Parameter(_T.epochs, int, "built-in trainer: training epochs"),
    "batch_size": Parameter(_T.batch_size, int, "built-in trainer: global batch size (without ps: a multiple "
                                                "of chief + workers)"),
    "learning_rate": Parameter(_T.learning_rate, float, "built-in trainer: initial learning rate (cosine decay "
                                                        "to 0)"),
    "max_train_examples": Parameter(0, int, "built-in trainer: cap on training examples (0: all)"),
    "success_policy": Parameter("", str, "'' (the chief, or worker 0, succeeds) or 'AllWorkers'"),
    "timeout_s": Parameter(DEFAULT_TIMEOUT_S, int, "job-level deadline of the training in seconds (default a "
                                                   "day; 0: none)"),
    "progress_timeout_s": Parameter(DEFAULT_PROGRESS_TIMEOUT_S, int, (
        "seconds a replica that has reported progress may go without a new report before it counts as hung and "
        "is restarted (as a retryable failure); 0: no watchdog")),
    "job_name_prefix": Parameter("tfk8s", str, "prefix of the training job's name (<prefix>-<run id>)"),
    "max_restarts": Parameter(DEFAULT_MAX_RESTARTS, int, (
        "recreations allowed for retryable failures (exit >= 128 or restart_exit_code, killed by a signal, "
        "OOMKilled, no progress...), on either backend; preemptions (eviction, the scheduler's preemption, node "
        "loss, a Kueue suspension) do not use it")),
    "stop_grace_s": Parameter(STOP_GRACE_S, int, (
        "seconds a replica gets between SIGTERM and SIGKILL when it is stopped (its pod's "
        "terminationGracePeriodSeconds): time to checkpoint on a preemption notice, e.g. with TensorFlow's "
        "PreemptionCheckpointHandler")),
    "restart_exit_code": Parameter(DEFAULT_RESTART_EXIT_CODE, int, (
        "the exit code of a program asking to be restarted after saving on SIGTERM (TensorFlow's "
        "TerminationConfig: 42): retryable, not a program error; 0: none")),
    "startup_timeout_s": Parameter(DEFAULT_STARTUP_TIMEOUT_S, int, (
        "seconds a chief/worker that reported it is starting may take to its first step before it counts as "
        "hung (a cluster that never forms); programs that never report progress are not watched; 0: off")),
    "evaluator_grace_s": Parameter(DEFAULT_EVALUATOR_GRACE_S, int, (
        "seconds the evaluator may still run after the job succeeded, to evaluate the final checkpoint, before "
        "it is stopped")),
    "namespace": Parameter(_K["namespace"], str, KubernetesParams.help("namespace")),
    "image": Parameter(_K["image"], str, KubernetesParams.help("image")),
    "pvc_name": Parameter(_K["pvc_name"], str, KubernetesParams.help("pvc_name")),
    "kubernetes": Parameter({}, dict, (
        "Kubernetes settings of the replicas, any of: " + ", ".join(
            k for k in KubernetesParams.names() if k not in KubernetesParams.SHARED)
        + '; e.g. {"cpu": "2", "memory": "4Gi", "node_selector": {"pool": "gpu"}}')),
}
"""The launch step's parameters: names, defaults, types, help (pipeline = component = CLI)."""


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per :data:`LAUNCH_PARAMETERS` entry (``--workers``, ``--command``, ``--kubernetes JSON``...), and
    the ``kubernetes`` dict's keys as flags of their own (``--cpu 2``...; :func:`tfk8s.steps.cli.add_kubernetes_arguments`),
    which win over the same keys in ``--kubernetes``."""
    from tfk8s.steps.cli import add_kubernetes_arguments

    group = parser.add_argument_group("launch")
    for name, p in LAUNCH_PARAMETERS.items():
        kind = json.loads if p.kind is dict else p.kind
        group.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, default=p.default,
                           help=f"{p.help} (default: {json.dumps(p.default)})")
    add_kubernetes_arguments(parser, skip=KubernetesParams.SHARED, unset_default=True)


def launch_params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed values of :func:`add_launch_arguments`' flags, keyed by parameter name; the ``kubernetes``
    flags given are merged into ``kubernetes``."""
    from tfk8s.steps.cli import kubernetes_params_from_args

    params = {name: getattr(args, name) for name in LAUNCH_PARAMETERS}
    flags = {k: v for k, v in kubernetes_params_from_args(args).items() if k not in KubernetesParams.SHARED}
    params["kubernetes"] = {**(params["kubernetes"] or {}), **flags}
    return params


def problems(params: Mapping[str, Any]) -> list[str]:
    """Everything wrong with ``params`` (pipeline parameter names; a missing key is not checked).

    Returns:
        One sentence per problem, empty when all is well.
    """
    out: list[str] = []
    get = params.get
    counts = None
    if all(k in params for k in ("chief", "workers", "ps", "evaluator")):
        try:
            counts = ReplicaCounts(chief=get("chief"), worker=get("workers"), ps=get("ps"),
                                   evaluator=get("evaluator"))
        except ClusterConfigError as e:
            out.append(str(e).replace("worker >= 1", "workers >= 1").replace("use more workers", "raise workers"))
    for key, minimum in (("epochs", 1), ("batch_size", 1), ("max_examples", 0), ("num_shards", 0),
                         ("timeout_s", 0), ("progress_timeout_s", 0), ("max_restarts", 0), ("schedule_timeout_s", 1),
                         ("gpus", 0), ("stop_grace_s", 0), ("startup_timeout_s", 0), ("evaluator_grace_s", 0)):
        if key in params and get(key) < minimum:
            out.append(f"{key} must be >= {minimum}, got {get(key)}")
    if "restart_exit_code" in params and not 0 <= get("restart_exit_code") <= 255:
        out.append(f"restart_exit_code must be an exit code 0-255 (0: none), got {get('restart_exit_code')}")
    if "learning_rate" in params and not get("learning_rate") > 0:
        out.append(f"learning_rate must be > 0, got {get('learning_rate')}")
    if "min_accuracy" in params and not 0 <= get("min_accuracy") <= 1:
        out.append(f"min_accuracy must be in [0, 1], got {get('min_accuracy')}")
    if counts is not None:
        readers = counts.num_trainers
        if not counts.ps and get("batch_size", 1) >= 1 and get("batch_size", readers) % readers:
            b = get("batch_size")
            out.append(f"batch_size {b} is the global batch, split evenly over the {readers} chief/worker "
                       f"replicas: make it a multiple of {readers}, e.g. {b - b % readers or readers}")
        if get("num_shards", 0) and get("num_shards") < readers:
            out.append(f"num_shards {get('num_shards')} < {readers} chief/worker replicas: each reads its own "
                       f"shard files; use 0 (4 per replica) or at least {readers}")
    if "success_policy" in params and get("success_policy") not in SUCCESS_POLICIES:
        out.append(f"success_policy must be '' (chief, or worker 0) or 'AllWorkers', got {get('success_policy')!r}")
    if "backend" in params and get("backend") not in BACKENDS:
        out.append(f"backend must be one of {BACKENDS}, got {get('backend')!r}")
    if params.get("model_name"):  # empty: derived from the data set
        try:
            check_model_name(get("model_name"))
        except ValueError as e:
            out.append(str(e))
    out += _command_problems(params)
    if "gate_metric" in params and not str(get("gate_metric")).strip():
        out.append("gate_metric is empty: name the metric the quality gate checks, e.g. accuracy")
    if mounts_claim(str(get("backend"))):  # Kubernetes: every step and replica mounts the PVC
        if "volume_root" in params and get("volume_root") != DEFAULT_ROOT:
            out.append(f"volume_root must be {DEFAULT_ROOT} on Kubernetes (where every step and replica mounts the "
                       f"PVC), got {get('volume_root')!r}; it is for --local runs")
        if "pvc_name" in params and not get("pvc_name"):
            out.append("pvc_name is empty: name the PersistentVolumeClaim for data, checkpoints and models "
                       "(without it the model would be written to a pod's ephemeral storage)")
        out += _kubernetes_problems(params)
    else:  # not used by this backend, but a typo, a bad quantity or claim name is said now, not on a cluster
        out += _kubernetes_problems({k: params[k] for k in ("kubernetes", "pvc_name") if params.get(k)})
    out += _claim_name_as_volume_name(params.get("pvc_name"))  # the KFP pipeline mounts it on every backend
    return out


def _claim_name_as_volume_name(pvc_name: Any) -> list[str]:
    """A claim name Kubernetes accepts (a DNS-1123 subdomain, which the launcher checks) that KFP cannot mount:
    kfp-kubernetes' ``mount_pvc`` names the pod's volume after the claim, and a pod's volume name must be a
    DNS-1123 label (no dots, at most 63 characters). Without this, ``data.v1`` passes ensure-volume and the first
    step that mounts it fails at pod creation ("spec.volumes[0].name: Invalid value")."""
    name = str(pvc_name or "")
    if not DNS1123_SUBDOMAIN.match(name) or len(name) > 253:
        return []  # not a claim name at all: the launcher's own check says so
    if DNS1123_LABEL.match(name) and len(name) <= 63:
        return []
    fixed = name.replace(".", "-")[:63].strip("-")
    return [(f"pvc_name {name!r} is a valid claim name, but KFP names each step's pod volume after the claim, "
             f"which must be {DNS1123_LABEL_RULE}: rename the claim, e.g. {fixed!r}")]


def _kubernetes_problems(params: Mapping[str, Any]) -> list[str]:
    """What :meth:`KubernetesSettings.from_params` refuses in the ``kubernetes`` dict and the Kubernetes
    parameters of their own (namespace, image, pvc_name), checked with the given ones only."""
    try:
        shared = {k: params[k] for k in KubernetesParams.SHARED if k in params}
        given = {**kube_dict(params.get("kubernetes")), **shared}
        if not given:
            return []
        kubernetes_params(params.get("kubernetes"), shared)  # unknown keys, own parameters
        KubernetesSettings.from_params(**{"image": DEFAULT_IMAGE, **given})
    except ValueError as e:
        return [str(e)]
    return []


def _command_problems(params: Mapping[str, Any]) -> list[str]:
    out = []
    for key in ("command", "eval_command"):
        if params.get(key):
            try:
                check_command(parse_command(params[key]))
            except ValueError as e:
                out.append(f"{key}: {e}")
    return out


def check(params: Mapping[str, Any]) -> None:
    """Raise if :func:`problems` finds any.

    Raises:
        ValueError: listing every problem, one per line.
    """
    found = problems(params)
    if found:
        raise ValueError("invalid pipeline parameters:\n  - " + "\n  - ".join(found))

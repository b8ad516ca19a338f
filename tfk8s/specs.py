"""The launch step's settings as typed specs: the ONE definition the pipeline, the component and the CLI share.

A launch is a :class:`LaunchSpec`: the replica counts (:class:`~tfk8s.cluster.ReplicaCounts`), the program
every replica runs (``command``; empty: the built-in trainer with its :class:`TrainerSpec`), the job's
success policy / timeout / name prefix / restart budget, and the Kubernetes settings
(:class:`~tfk8s.kube.settings.KubernetesParams`). Its parameters (:data:`LAUNCH_PARAMETERS`) are what the
pipeline and the ``launch_training`` component take and what ``python -m components.launch_training`` offers
as flags (generated from the table below): the Kubernetes settings are one ``kubernetes`` dict parameter, e.g.
``--param kubernetes='{"cpu": "2", "memory": "4Gi"}'``, except ``namespace``, ``image``, ``pvc_name`` and
``max_restarts``, which other steps or both backends use and which stay parameters of their own.

Nothing here imports KFP, TensorFlow or a Kubernetes client.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfk8s.cluster import ClusterConfigError, ReplicaCounts
from tfk8s.contract import parse_command
from tfk8s.kube.settings import KubernetesParams
from tfk8s.launcher.policy import DEFAULT_PROGRESS_TIMEOUT_S

# Defaults measured with 2 workers on 2 shared CPU cores, full MNIST (60,000 training examples): ~8-9 s per
# epoch, test accuracy 0.984-0.988 over 11 runs (1 epoch: 0.980-0.982, not robust). A large global batch keeps
# the number of all-reduce steps (~20 ms each on CPU) low; the trainer's cosine decay of the learning rate to
# 0 over all steps makes 2 epochs enough. The trainer's flags, the launch step and the pipeline share them.
DEFAULT_EPOCHS = 2
DEFAULT_BATCH_SIZE = 512
DEFAULT_LEARNING_RATE = 6e-3
# The built-in trainer's steps per call of its compiled step function (not a pipeline parameter: the arithmetic
# is the same). Measured with bench/worker_scaling.py on the quiet machine (2 cores, 1 thread per worker,
# per-worker batch 256, 2026-12-01): 2 workers 16,460 examples/s with 1 step per call, 18,070 with 8 (+10%);
# 1 worker +5%. The per-batch callbacks (progress file, NaN check) then run once per 8 steps: a NaN loss stops
# training at the end of that call, on every worker alike.
DEFAULT_STEPS_PER_EXECUTION = 8
# A job-level deadline by default, so that a program that hangs without ever reporting progress (which the
# progress watchdog cannot judge) fails within a day instead of at the Kubernetes backstop (7 days); MNIST trains
# in about a minute, and a longer training sets timeout_s (0: no deadline).
DEFAULT_TIMEOUT_S = 24 * 3600


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
        command: the user's program (argv, may hold the placeholders of :mod:`tfk8s.contract`); empty: the
            built-in trainer.
        success_policy: ``""`` (the chief, or worker 0) or ``"AllWorkers"``.
        timeout_s: job-level deadline in seconds (0: none).
        progress_timeout_s: seconds a replica that reported progress may go without a new report before it
            counts as hung (0: no watchdog; :class:`tfk8s.launcher.TrainingJob`).
        job_name_prefix: prefix of the job name ``<prefix>-<run id>``.
        kubernetes: the Kubernetes backend's settings (also namespace, image, pvc_name, max_restarts).
    """

    replicas: ReplicaCounts = field(default_factory=ReplicaCounts)
    trainer: TrainerSpec = field(default_factory=TrainerSpec)
    command: tuple[str, ...] = ()
    success_policy: str = ""
    timeout_s: int = DEFAULT_TIMEOUT_S
    progress_timeout_s: int = DEFAULT_PROGRESS_TIMEOUT_S
    job_name_prefix: str = "tfk8s"
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
                parameter. (Value ranges are checked together by :func:`tfk8s.params.check`.)
        """
        get = {k: params[k] for k in LAUNCH_PARAMETERS if k in params}
        d = {k: p.default for k, p in LAUNCH_PARAMETERS.items()}
        d.update(get)
        try:
            counts = ReplicaCounts(chief=d["chief"], worker=d["workers"], ps=d["ps"], evaluator=d["evaluator"])
        except ClusterConfigError as e:
            raise ValueError(str(e).replace("worker >= 1", "workers >= 1")) from None
        given = kube_dict(d["kubernetes"])
        kube = KubernetesParams.from_dict(given)
        taken = sorted(set(given) & set(KubernetesParams.SHARED))
        if taken:
            raise ValueError(f"kubernetes must not set {taken}: they are pipeline parameters of their own "
                             f"(--param {taken[0]}=...)")
        from dataclasses import replace

        kube = replace(kube, **{k: d[k] for k in KubernetesParams.SHARED})
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
            kubernetes=kube,
        )


def kube_dict(value: Any) -> dict:
    """The ``kubernetes`` parameter as a dict (a JSON string is parsed; empty: ``{}``).

    Raises:
        ValueError: not a JSON object.
    """
    if value is None:
        return {}
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = json.loads(value)
        except ValueError as e:
            raise ValueError(f'kubernetes is not valid JSON ({e}): pass an object, e.g. {{"cpu": "2"}}') from None
    if not isinstance(value, Mapping):
        # ValueError, not TypeError: every caller reports ValueErrors as a bad parameter with its fix
        raise ValueError(f'kubernetes must be an object of settings, e.g. {{"cpu": "2"}}, got {value!r}')  # noqa: TRY004
    return dict(value)


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
    "max_restarts": Parameter(_K["max_restarts"], int, KubernetesParams.help("max_restarts")),
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
    """One flag per :data:`LAUNCH_PARAMETERS` entry (``--workers``, ``--command``, ``--kubernetes JSON``...)."""
    group = parser.add_argument_group("launch")
    for name, p in LAUNCH_PARAMETERS.items():
        kind = json.loads if p.kind is dict else p.kind
        group.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, default=p.default,
                           help=f"{p.help} (default: {json.dumps(p.default)})")


def launch_params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed values of :func:`add_launch_arguments`' flags, keyed by parameter name."""
    return {name: getattr(args, name) for name in LAUNCH_PARAMETERS}

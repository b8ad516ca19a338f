"""The pipeline's parameters checked together, and the launch step's typed :class:`LaunchSpec`.

Every parameter is defined once, in :data:`tfk8s.steps.parameters.PARAMETERS` (name, type, default, help, check,
the steps that take it); :data:`LAUNCH_PARAMETERS` is its launch step's part.

A launch is a :class:`LaunchSpec`: the replica counts (:class:`~tfk8s.core.cluster.ReplicaCounts`), the program
every replica runs (``command``; empty: the built-in trainer with its :class:`TrainerSpec`), the job's run policy
(:class:`~tfk8s.core.job.RunPolicy`: success policy, timeout, restart budget, graces and watchdogs, carried whole
to the :class:`~tfk8s.core.job.TrainingJob`), its name prefix, and the Kubernetes settings
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
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tfk8s import DEFAULT_IMAGE
from tfk8s.core.builtin_trainer import DEFAULT_BATCH_SIZE, DEFAULT_EPOCHS, DEFAULT_LEARNING_RATE
from tfk8s.core.cluster import ClusterConfigError, ReplicaCounts
from tfk8s.core.contract import parse_command
from tfk8s.core.job import RUN_POLICY_FIELDS, RunPolicy
from tfk8s.core.layout import DEFAULT_ROOT
from tfk8s.launcher.backends import mounts_claim
from tfk8s.launcher.kubernetes.settings import (
    DNS1123_LABEL,
    DNS1123_LABEL_RULE,
    DNS1123_SUBDOMAIN,
    KubernetesParams,
    KubernetesSettings,
    parse_json,
)
from tfk8s.steps.parameters import DEFAULT_TIMEOUT_S, LAUNCH, PARAMETERS, Parameter, add_step_arguments

__all__ = ["DEFAULT_TIMEOUT_S", "LAUNCH_PARAMETERS", "LaunchSpec", "Parameter", "TrainerSpec", "check", "problems"]

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
        run_policy: how the job is judged and bounded (:class:`tfk8s.core.job.RunPolicy`: ``max_restarts``, the
            restart budget on either backend; ``timeout_s``, 0: no deadline; ``success_policy``; the graces and
            watchdogs), carried whole to the :class:`~tfk8s.core.job.TrainingJob`.
        job_name_prefix: prefix of the job name ``<prefix>-<run id>``.
        kubernetes: the Kubernetes backend's settings (also namespace, image, pvc_name).
    """

    replicas: ReplicaCounts = field(default_factory=ReplicaCounts)
    trainer: TrainerSpec = field(default_factory=TrainerSpec)
    command: tuple[str, ...] = ()
    run_policy: RunPolicy = field(default_factory=lambda: RunPolicy(**_run_policy_defaults()))
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
            ValueError: a bad replica combination, command, run policy or ``kubernetes`` dict; the message names
                the parameter. (Value ranges are checked together by :func:`tfk8s.steps.params.check`.)
        """
        get = {k: params[k] for k in LAUNCH_PARAMETERS if k in params}
        d = {k: p.default_for(LAUNCH) for k, p in LAUNCH_PARAMETERS.items()}
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
            run_policy=RunPolicy(**{k: d[k] for k in RUN_POLICY_FIELDS if k in d}),
            job_name_prefix=d["job_name_prefix"],
            kubernetes=kube,
        )


def _run_policy_defaults() -> dict[str, Any]:
    """The run policy's fields that are pipeline parameters, at the table's defaults."""
    return {k: PARAMETERS[k].default for k in RUN_POLICY_FIELDS if k in PARAMETERS}


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


LAUNCH_PARAMETERS: dict[str, Parameter] = {
    name: p for name, p in PARAMETERS.items() if LAUNCH in p.steps and name not in ("volume_root", "backend")}
"""The launch step's parameters (:data:`tfk8s.steps.parameters.PARAMETERS` taken by ``launch_training``, less
``volume_root`` and ``backend``, which say where rather than what): what :class:`LaunchSpec` is built from."""


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per parameter of the launch step (:func:`tfk8s.steps.parameters.add_step_arguments`:
    ``--volume-root``, ``--backend``, ``--workers``, ``--command``, ``--kubernetes JSON``...), and
    the ``kubernetes`` dict's keys as flags of their own (``--cpu 2``...; :func:`tfk8s.steps.cli.add_kubernetes_arguments`),
    which win over the same keys in ``--kubernetes``."""
    from tfk8s.steps.cli import add_kubernetes_arguments

    add_step_arguments(parser, LAUNCH)
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
    for name, p in PARAMETERS.items():  # each value alone, by the table's check
        if name in params and p.check is not None:
            found = p.problem(get(name))
            if found:
                out.append(found)
    for key, minimum in (("schedule_timeout_s", 1), ("gpus", 0)):  # flat Kubernetes keys of older callers
        if key in params and get(key) < minimum:
            out.append(f"{key} must be >= {minimum}, got {get(key)}")
    if counts is not None:
        readers = counts.num_trainers
        if not counts.ps and get("batch_size", 1) >= 1 and get("batch_size", readers) % readers:
            b = get("batch_size")
            out.append(f"batch_size {b} is the global batch, split evenly over the {readers} chief/worker "
                       f"replicas: make it a multiple of {readers}, e.g. {b - b % readers or readers}")
        if get("num_shards", 0) and get("num_shards") < readers:
            out.append(f"num_shards {get('num_shards')} < {readers} chief/worker replicas: each reads its own "
                       f"shard files; use 0 (4 per replica) or at least {readers}")
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


def check(params: Mapping[str, Any]) -> None:
    """Raise if :func:`problems` finds any.

    Raises:
        ValueError: listing every problem, one per line.
    """
    found = problems(params)
    if found:
        raise ValueError("invalid pipeline parameters:\n  - " + "\n  - ".join(found))

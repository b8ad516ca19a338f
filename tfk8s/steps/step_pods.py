"""The pipeline steps' own pods: their resource requests and limits, annotations and labels.

A namespace with a ResourceQuota on ``cpu``/``memory`` (a Kubeflow profile's, typically) admits only pods whose
containers declare requests (``must specify cpu,memory``, kubeflow/pipelines#7699), and a pod without any is
BestEffort, the first a node evicts. Every step therefore declares requests and limits
(:data:`STEP_PODS`), which ``pipelines/train.py`` compiles into the KFP IR (``set_cpu_request`` ...) and the Argo
export carries from it (:mod:`tfk8s.submit.argo`).

These are compile-time settings, not run parameters: a KFP task's resources may name a pipeline parameter only
as a whole value (a ``dict`` parameter keyed by step cannot be indexed), it is resolved only by the KFP backend's
driver, and the Argo export has no driver. So they are changed where the pipeline is compiled or submitted:
``python pipelines/train.py --compile|--run|--schedule --steps JSON`` (:func:`step_pods`), e.g.
``{"prepare_dataset": {"memory_limit": "8Gi"}, "*": {"labels": {"team.example.com/cost-center": "ml"}}}``.

A CPU limit too, by default at least one whole CPU (two for the TensorFlow steps): a namespace with a quota on
``limits.cpu`` (``must specify limits.cpu``, a Kubeflow profile's kind) or a LimitRange whose ``max`` is on the Pod
item refuses a pod without one. Generous on purpose: a CPU limit only throttles (CFS quota), and a step is
often alone on its node's idle CPUs (TensorFlow's import, TFDS' preparation).

Each step's container also runs as non-root (:data:`RUN_AS_NON_ROOT`, ``kfp_kubernetes.set_security_context``),
which with the KFP compiler's own defaults (no privilege escalation, every capability dropped, seccomp
``RuntimeDefault``) and the Argo export's (:mod:`tfk8s.submit.argo`) passes Pod Security ``restricted``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tfk8s.launcher.kubernetes.settings import (
    DEFAULT_ANNOTATIONS,
    check_metadata,
    merge_metadata,
    parse_quantity,
)

ALL_STEPS = "*"
RUN_AS_NON_ROOT = True
"""Every step's container declares ``runAsNonRoot`` (Pod Security ``restricted`` requires it set): the project
image runs as its numeric user 10001; an image of yours must name a numeric non-root ``USER`` too."""
STEP_KEYS = ("cpu", "memory", "cpu_limit", "memory_limit", "annotations", "labels")


@dataclass(frozen=True)
class StepPod:
    """One step's pod: requests (``cpu``, ``memory``), limits (``cpu_limit`` empty: none; ``memory_limit``), its
    annotations and labels (checked as the replicas' are, :func:`~tfk8s.launcher.kubernetes.settings.check_metadata`).

    Raises:
        ValueError: a bad quantity, a limit below its request, a bad key or value; the message names it.
    """

    cpu: str
    memory: str
    memory_limit: str
    cpu_limit: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("cpu", "memory", "cpu_limit", "memory_limit"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise ValueError(f"{name} must be a Kubernetes quantity as a string, e.g. \"500m\", \"2Gi\"; "  # noqa: TRY004
                                 f"got {value!r}")
            if name == "cpu_limit" and not value:
                continue
            try:
                if parse_quantity(value) <= 0:
                    raise ValueError(f"must be > 0, got {value!r}")
            except ValueError as e:
                raise ValueError(f"{name}: {e}") from None
        for name in ("cpu", "memory"):
            limit = getattr(self, f"{name}_limit")
            if limit and parse_quantity(limit) < parse_quantity(getattr(self, name)):
                raise ValueError(f"{name}_limit {limit!r} is below the request {name}={getattr(self, name)!r}: "
                                 f"raise the limit or lower the request")
        object.__setattr__(self, "annotations", check_metadata(self.annotations, "annotations", labels=False))
        object.__setattr__(self, "labels", check_metadata(self.labels, "labels", labels=True))


_NOT_EVICTED = dict(DEFAULT_ANNOTATIONS)  # the launch step: evicting it fails the run and deletes the replicas

STEP_PODS: Mapping[str, StepPod] = {
    # step (component function)  requests               limits
    "ensure_volume": StepPod(cpu="100m", memory="256Mi", cpu_limit="1", memory_limit="1Gi"),
    "prepare_dataset": StepPod(cpu="250m", memory="1Gi", cpu_limit="2", memory_limit="4Gi"),  # TFDS' work
    "launch_training": StepPod(cpu="100m", memory="512Mi", cpu_limit="1", memory_limit="2Gi",
                               annotations=_NOT_EVICTED),
    "export_model": StepPod(cpu="250m", memory="1Gi", cpu_limit="2", memory_limit="4Gi"),  # TF loads the model
    "evaluate_model": StepPod(cpu="250m", memory="1Gi", cpu_limit="2", memory_limit="4Gi"),
    "push_model": StepPod(cpu="100m", memory="256Mi", cpu_limit="1", memory_limit="2Gi"),
    "reject_model": StepPod(cpu="100m", memory="256Mi", cpu_limit="1", memory_limit="1Gi"),
}
"""Every step's pod by default: requests that fit a 2-CPU node beside the replicas (the steps run one at a time;
the launch step's 100m runs beside its replicas), limits generous enough for TensorFlow's import and TFDS' work
(a quota on ``limits.cpu``/``limits.memory`` needs both). The launch step is not to be evicted by an autoscaler (:data:`DEFAULT_ANNOTATIONS`): it owns the
replicas, which go with it."""


def step_pods(overrides: Any = None) -> dict[str, StepPod]:
    """:data:`STEP_PODS` with ``overrides`` (JSON text or an object: step name, or ``"*"`` for every step, to an
    object of :data:`STEP_KEYS`) applied: ``"*"`` first, then the step's own; annotations and labels merge key
    by key (a null value drops one, e.g. the launch step's ``karpenter.sh/do-not-disrupt``), the rest replace.

    Raises:
        ValueError: not JSON, an unknown step or key, a bad value; the message names ``--steps``, the step, the
            key and the fix.
    """
    if isinstance(overrides, str):
        try:
            overrides = json.loads(overrides) if overrides.strip() else {}
        except ValueError as e:
            raise ValueError(f"--steps is not valid JSON ({e}); e.g. '{{\"prepare_dataset\": "
                             f"{{\"memory_limit\": \"8Gi\"}}}}'") from None
    overrides = dict(overrides or {})
    known = [*STEP_PODS, ALL_STEPS]
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ValueError(f"--steps has unknown steps {unknown}: use {known}")
    out = {}
    for step, pod in STEP_PODS.items():
        for where in (ALL_STEPS, step):
            entry = overrides.get(where) or {}
            if not isinstance(entry, Mapping):
                raise ValueError(  # noqa: TRY004 - a bad value of --steps, like the others
                    f"--steps[{where!r}] must be a JSON object of {list(STEP_KEYS)}, got {entry!r}")
            bad = sorted(set(entry) - set(STEP_KEYS))
            if bad:
                raise ValueError(f"--steps[{where!r}] has unknown keys {bad}: use {list(STEP_KEYS)}")
            changes = {k: v for k, v in entry.items() if k not in ("annotations", "labels")}
            try:
                for k in ("annotations", "labels"):
                    if k in entry:
                        changes[k] = merge_metadata(getattr(pod, k), entry[k], what=k, labels=k == "labels")
                pod = replace(pod, **changes)
            except ValueError as e:
                raise ValueError(f"--steps[{where!r}]: {e}") from None
        out[step] = pod
    return out


def apply(task: Any, step: str, pods: Mapping[str, StepPod], kfp_kubernetes: Any) -> Any:
    """Set ``pods[step]`` on a KFP ``task`` (requests, limits, pod annotations and labels) and its container's
    ``runAsNonRoot``; returns ``task``."""
    pod = pods[step]
    task.set_cpu_request(pod.cpu).set_memory_request(pod.memory).set_memory_limit(pod.memory_limit)
    if pod.cpu_limit:
        task.set_cpu_limit(pod.cpu_limit)
    # the container's runAsNonRoot; KFP's compiler adds the rest of `restricted` (no privilege escalation, ALL
    # capabilities dropped, seccomp RuntimeDefault), the Argo export the same (tfk8s.submit.argo)
    kfp_kubernetes.set_security_context(task, run_as_non_root=RUN_AS_NON_ROOT)
    for key, value in pod.annotations.items():
        kfp_kubernetes.add_pod_annotation(task, key, value)
    for key, value in pod.labels.items():
        kfp_kubernetes.add_pod_label(task, key, value)
    return task


def markdown_table() -> str:
    """The defaults as docs/kubernetes.md shows them (a test keeps them equal)."""
    rows = ["| step | cpu | memory | cpu_limit | memory_limit | annotations |", "|---|---|---|---|---|---|"]
    for step, pod in STEP_PODS.items():
        notes = ", ".join(f"`{k}: {v}`" for k, v in pod.annotations.items()) or "-"
        rows.append(f"| `{step}` | `{pod.cpu}` | `{pod.memory}` | `{pod.cpu_limit or '-'}` | `{pod.memory_limit}` "
                    f"| {notes} |")
    return "\n".join(rows) + "\n"

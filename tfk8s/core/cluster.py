"""Replica types, replica names, the cluster spec and TF_CONFIG.

One place builds these for every backend (local processes and Kubernetes), following the Kubeflow Training
Operator's TFJob controller (``pkg/controller.v1/tensorflow/tensorflow.go``):

- the cluster spec maps each lower-case replica type to the ordered list of its ``host:port`` addresses;
- the evaluator is *not* part of the training cluster (TF's ``RunConfig`` convention), but it still gets a
  TF_CONFIG whose ``task`` is ``{"type": "evaluator", "index": 0}``;
- TF_CONFIG is ``{"cluster": ..., "task": {"type": ..., "index": ...}, "environment": "cloud"}``;
- a replica's name is ``<job>-<type>-<index>``.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass


class ReplicaType(str, enum.Enum):
    """The replica types of a TFJob, in the order they are listed and started."""

    CHIEF = "chief"
    WORKER = "worker"
    PS = "ps"
    EVALUATOR = "evaluator"

    def __str__(self) -> str:  # "worker", not "ReplicaType.WORKER", in names and messages
        return self.value


class Strategy(str, enum.Enum):
    """The ``tf.distribute`` strategy a cluster calls for (:func:`strategy_of`)."""

    DEFAULT = "default"  # one process
    MULTI_WORKER_MIRRORED = "multi_worker_mirrored"  # several chief/workers, no ps
    PARAMETER_SERVER = "parameter_server"  # ps, a chief coordinating, workers running the steps

    def __str__(self) -> str:
        return self.value


def strategy_of(chief: int, worker: int, ps: int) -> Strategy:
    """The strategy of a cluster with these counts: ParameterServerStrategy with ps, MultiWorkerMirroredStrategy
    with more than one chief/worker, else the default strategy (one process)."""
    if ps:
        return Strategy.PARAMETER_SERVER
    return Strategy.MULTI_WORKER_MIRRORED if chief + worker > 1 else Strategy.DEFAULT


def coordinator_of(has_chief: bool) -> Replica:
    """The replica whose success is the job's success and whose model is the job's: chief-0, or worker-0 when
    there is no chief (the Training Operator's rule)."""
    return Replica(ReplicaType.CHIEF if has_chief else ReplicaType.WORKER, 0)


class ClusterConfigError(ValueError):
    """The requested replica counts cannot form a TensorFlow cluster; the message says how to fix them."""


@dataclass(frozen=True, order=True)
class Replica:
    """One replica of a training job: its type and task index (0-based within the type)."""

    replica_type: ReplicaType
    index: int

    @property
    def label(self) -> str:
        """Short display name used as a log prefix, e.g. ``worker-1``."""
        return f"{self.replica_type.value}-{self.index}"


_COUNT_RULES = {
    # each count's pipeline parameter (workers for worker) and its rule with the fix, said once
    "chief": ("chief", "0 or 1 (1: a chief coordinates the job; 0: worker-0 does)"),
    "worker": ("workers", "an integer >= 0, e.g. workers=2 (workers=0 needs chief=1)"),
    "ps": ("ps", "an integer >= 0 (0: no parameter servers; ps >= 1 needs chief=1 and workers >= 1)"),
    "evaluator": ("evaluator", "0 or 1"),
}


@dataclass(frozen=True)
class ReplicaCounts:
    """How many replicas of each type a training job has.

    Rules (the same as the Training Operator's TFJob validation plus what TF's strategies need):

    - ``chief`` and ``evaluator`` are 0 or 1;
    - there is at least one chief or worker (someone must train);
    - parameter servers need a chief (``ParameterServerStrategy``'s coordinator) and at least one worker
      (which runs the steps), see :meth:`strategy`.

    Raises:
        ClusterConfigError: on negative counts or a combination that breaks the rules above.
    """

    chief: int = 0
    worker: int = 2
    ps: int = 0
    evaluator: int = 0

    def __post_init__(self) -> None:
        for rtype in ReplicaType:
            n = self.count(rtype)
            if not isinstance(n, int) or n < 0:
                name, rule = _COUNT_RULES[str(rtype)]
                raise ClusterConfigError(f"{name}={n!r}: {name} (the number of {rtype} replicas) must be {rule}")
        if self.chief > 1:
            raise ClusterConfigError(f"chief must be 0 or 1, got {self.chief}: use more workers instead")
        if self.evaluator > 1:
            raise ClusterConfigError(f"evaluator must be 0 or 1, got {self.evaluator}")
        if self.chief + self.worker == 0:
            raise ClusterConfigError("a training job needs at least one chief or worker: set worker >= 1")
        if self.ps and not self.chief:
            raise ClusterConfigError(
                f"ps={self.ps} needs chief=1: ParameterServerStrategy is coordinated by the chief"
            )
        if self.ps and not self.worker:
            raise ClusterConfigError(
                f"ps={self.ps} needs worker >= 1: under ParameterServerStrategy the workers run the steps"
            )

    def count(self, replica_type: ReplicaType | str) -> int:
        """Number of replicas of ``replica_type``."""
        return int(getattr(self, ReplicaType(replica_type).value))

    def replicas(self) -> Iterator[Replica]:
        """Every replica in start order: chief, workers, ps, evaluator; by index within a type."""
        for rtype in ReplicaType:
            for index in range(self.count(rtype)):
                yield Replica(rtype, index)

    @property
    def total(self) -> int:
        """Number of replicas of all types."""
        return sum(self.count(t) for t in ReplicaType)

    @property
    def num_trainers(self) -> int:
        """Replicas that run the training loop and read data shards (chief + workers)."""
        return self.chief + self.worker

    def strategy(self) -> Strategy:
        """The ``tf.distribute`` strategy these counts call for (:func:`strategy_of`)."""
        return strategy_of(self.chief, self.worker, self.ps)


def replica_name(job_name: str, replica: Replica) -> str:
    """The name of a replica's objects (Job, Service, process label): ``<job>-<type>-<index>``.

    Same as the Training Operator's ``GenGeneralName``. ``job_name`` is assumed already valid
    (see :func:`tfk8s.core.job.job_name`).
    """
    return f"{job_name}-{replica.replica_type.value}-{replica.index}"


def coordinator(counts: ReplicaCounts) -> Replica:
    """The replica whose success is the job's success: the chief, or worker 0 when there is no chief
    (:func:`coordinator_of`)."""
    return coordinator_of(bool(counts.chief))


ClusterSpec = dict[str, list[str]]


def cluster_spec(counts: ReplicaCounts, address: Callable[[Replica], str]) -> ClusterSpec:
    """Build the TensorFlow cluster spec.

    Args:
        counts: replica counts per type.
        address: maps a replica to its ``host:port`` (a local port, or a headless Service's DNS name).

    Returns:
        ``{"chief": [...], "worker": [...], "ps": [...]}`` holding only the types with replicas, each list
        ordered by task index. The evaluator is left out: it is not part of the training cluster.
    """
    spec: ClusterSpec = {}
    for replica in counts.replicas():
        if replica.replica_type is ReplicaType.EVALUATOR:
            continue
        spec.setdefault(replica.replica_type.value, []).append(address(replica))
    return spec


def tf_config(spec: Mapping[str, list[str]], replica: Replica) -> dict:
    """TF_CONFIG for one replica, in the Training Operator's layout.

    Returns:
        ``{"cluster": spec, "task": {"type": <type>, "index": <index>}, "environment": "cloud"}``.

    Raises:
        ClusterConfigError: if a non-evaluator replica's index is not in ``spec``.
    """
    rtype = replica.replica_type.value
    if replica.replica_type is not ReplicaType.EVALUATOR and replica.index >= len(spec.get(rtype, [])):
        raise ClusterConfigError(f"replica {replica.label} is not in the cluster spec {dict(spec)}")
    return {
        "cluster": {k: list(v) for k, v in spec.items()},
        "task": {"type": rtype, "index": replica.index},
        "environment": "cloud",
    }


def tf_config_json(spec: Mapping[str, list[str]], replica: Replica) -> str:
    """:func:`tf_config` serialised as the TF_CONFIG environment variable's value (compact JSON)."""
    return json.dumps(tf_config(spec, replica), separators=(",", ":"))


def parse_tf_config(value: str | None) -> tuple[ClusterSpec, Replica | None]:
    """Parse a TF_CONFIG value as read by a replica.

    Returns:
        ``(cluster spec, this replica)``; ``({}, None)`` when ``value`` is empty or None (a single process).

    Raises:
        ClusterConfigError: when the value is not JSON or lacks ``task.type``/``task.index``.
    """
    if not value:
        return {}, None
    try:
        cfg = json.loads(value)
        task = cfg.get("task") or {}
        replica = Replica(ReplicaType(task["type"]), int(task["index"])) if task else None
    except (ValueError, KeyError, TypeError) as e:
        raise ClusterConfigError(f"TF_CONFIG is not valid ({e}): {value[:200]}") from e
    return dict(cfg.get("cluster") or {}), replica

"""What a failed replica means and what the launcher does about it: one policy for every backend.

The rules as data (:data:`RULES`, in the spirit of JobSet's ``failurePolicy``), and the functions both backends
call (:mod:`tfk8s.launcher.local`, :mod:`tfk8s.launcher.kubernetes.backend` through :mod:`tfk8s.launcher.kubernetes.classify`):

==================================================  ==============  ============================================
failure                                             kind            what the launcher does
==================================================  ==============  ============================================
exit code 1-127                                     permanent       fail the step (an error of the program)
exit code >= 128 (128 + signal), killed by a        retryable       recreate the replica's restart group while
signal (a local process: ``-signal``), OOMKilled,                   ``max_restarts`` lasts, then fail
eviction, preemption, node loss, pod deleted
no progress for ``progress_timeout_s`` (hung)       retryable       the same (the replica is stopped first)
image pull / container config error (Kubernetes)    fail fast       fail the step with the kubelet's message
job deadline (``timeout_s``)                        timeout         fail the step, every replica stopped
==================================================  ==============  ============================================

Exit codes follow the Kubeflow Training Operator (``pkg/util/train/train_util.go`` ``IsRetryableExitCode``:
1-127 permanent, 128-255 retryable).

Groups (:func:`decision_group`, :func:`restart_group`): under MultiWorkerMirroredStrategy a collective cannot
lose a member, so a chief or worker failure recreates every chief and worker, and their failures are judged
together (a retryable root cause wins over the peers' follow-on exit 1s); under ParameterServerStrategy a ps
failure recreates the chief (the coordinator loses the variables the ps held) and every ps, a worker or the
chief alone is recreated by itself (workers reconnect); an evaluator is always alone.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tfk8s.core.cluster import Replica, ReplicaCounts, ReplicaType, Strategy

RETRYABLE_EXIT_CODE_MIN = 128
NO_PROGRESS = "NoProgress"
"""The reason of a replica treated as hung by the progress watchdog."""
DEFAULT_PROGRESS_TIMEOUT_S = 600
"""Seconds without a progress report (after a first one) before a replica counts as hung: ten times what a
slow epoch step or a checkpoint save of the built-in trainer takes, well below the job timeout."""
DEFAULT_MAX_RESTARTS = 3
STOP_GRACE_S = 10
"""Seconds between SIGTERM and SIGKILL when a replica is stopped, on both backends (the local process group's
signals; a pod's ``terminationGracePeriodSeconds`` and the grace of the launcher's deletes). Kept short:
TensorFlow's preemption notifier (``tf.distribute.experimental.PreemptionCheckpointHandler``, installed by
``BackupAndRestore`` under some strategies) swallows SIGTERM in some states, so stopping relies on the SIGKILL
that follows."""


class FailureKind(enum.Enum):
    """How the launcher reacts to a failure."""

    PERMANENT = "permanent"  # fail the job
    RETRYABLE = "retryable"  # recreate while the restart budget lasts
    IMAGE_PULL = "image-pull"  # fail fast, the kubelet's message
    CONTAINER_CONFIG = "container-config"  # fail fast, the kubelet's message
    TIMEOUT = "timeout"  # the job's deadline passed


@dataclass(frozen=True)
class Rule:
    """One row of the policy: a failure, its kind, and what the launcher does."""

    failure: str
    kind: FailureKind
    action: str


RULES: tuple[Rule, ...] = (
    Rule("exit code 1-127", FailureKind.PERMANENT, "fail the step"),
    Rule("exit code >= 128, killed by a signal, OOMKilled, evicted, preempted, node lost, pod deleted",
         FailureKind.RETRYABLE, "recreate the restart group while max_restarts lasts"),
    Rule(f"no progress for progress_timeout_s ({NO_PROGRESS})", FailureKind.RETRYABLE,
         "stop it, then as any retryable failure"),
    Rule("image pull error", FailureKind.IMAGE_PULL, "fail the step with the kubelet's message"),
    Rule("container config error", FailureKind.CONTAINER_CONFIG, "fail the step with the kubelet's message"),
    Rule("job deadline passed", FailureKind.TIMEOUT, "fail the step"),
)


def exit_code_kind(code: int) -> FailureKind | None:
    """The kind of a replica's non-zero exit: None for 0 (success); 1-127 permanent; >= 128 (a container's
    128 + signal number) and negative codes (a local process killed by signal ``-code``, as
    :class:`subprocess.Popen` reports it) retryable."""
    if code == 0:
        return None
    if code < 0 or code >= RETRYABLE_EXIT_CODE_MIN:
        return FailureKind.RETRYABLE
    return FailureKind.PERMANENT


_TRAINERS = (ReplicaType.CHIEF, ReplicaType.WORKER)
_COORDINATION = (ReplicaType.CHIEF, ReplicaType.PS)


def decision_group(counts: ReplicaCounts, replica: Replica) -> tuple[Replica, ...]:
    """The replicas whose failures are judged together with ``replica``'s (a failure brings down those that
    depend on it, which then fail too): under MultiWorkerMirroredStrategy every chief and worker; under
    ParameterServerStrategy, for the chief or a ps, the chief and every ps; else ``replica`` alone. In replica
    order."""
    strategy = counts.strategy()
    if strategy is Strategy.MULTI_WORKER_MIRRORED and replica.replica_type in _TRAINERS:
        return tuple(r for r in counts.replicas() if r.replica_type in _TRAINERS)
    if strategy is Strategy.PARAMETER_SERVER and replica.replica_type in _COORDINATION:
        return tuple(r for r in counts.replicas() if r.replica_type in _COORDINATION)
    return (replica,)


def restart_group(counts: ReplicaCounts, replica: Replica) -> tuple[Replica, ...]:
    """The replicas recreated when ``replica`` fails retryably: its :func:`decision_group`, except that under
    ParameterServerStrategy the chief alone is recreated by itself (the ps keep their variables; it restores
    from its checkpoint). In replica order."""
    if replica.replica_type is ReplicaType.CHIEF and counts.strategy() is Strategy.PARAMETER_SERVER:
        return (replica,)
    return decision_group(counts, replica)

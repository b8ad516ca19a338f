"""What a failed replica means and what the launcher does about it: one policy for every backend.

The rules as data (:data:`RULES`, in the spirit of JobSet's ``failurePolicy``), and the functions that apply them:
each backend classifies what it observes (:mod:`tfk8s.launcher.local`'s exit codes,
:mod:`tfk8s.launcher.kubernetes.classify`'s pod and Job status) into a :class:`Failure`, and the launch engine
(:mod:`tfk8s.launcher.engine`) decides, the same for both, what the launcher does:

==================================================  ==============  ============================================
failure                                             kind            what the launcher does
==================================================  ==============  ============================================
exit code 1-127 (but the restart exit code)         permanent       fail the step (an error of the program)
the restart exit code (42: TF's TerminationConfig)  retryable       recreate the replica's restart group while
exit code >= 128 (128 + signal), killed by a                        ``max_restarts`` lasts, then fail
signal (a local process: ``-signal``), OOMKilled,
pod deleted
evicted, preempted by the scheduler, node lost,     preempted       recreate the restart group without counting
a Kueue suspension (``DisruptionTarget``)                           against ``max_restarts`` (a suspended job
                                                                    waits for re-admission up to the schedule
                                                                    timeout)
no progress for ``progress_timeout_s``, or no       retryable       stop it, then as any retryable failure
first progress within ``startup_timeout_s`` (hung)
image pull / container config error (Kubernetes)    fail fast       fail the step with the kubelet's message
node lost with ``spread=required`` (Kubernetes)     permanent       fail the step naming the node
an admission refuses a pod for good (Kubernetes)    refused         fail the step at once, the admission's message
not scheduled / not started within                  schedule-       fail the step with the scheduler's or the
``schedule_timeout_s`` (Kubernetes)                 timeout         kubelet's message
job deadline (``timeout_s``)                        timeout         fail the step, every replica stopped
==================================================  ==============  ============================================

Exit codes follow the Kubeflow Training Operator (``pkg/util/train/train_util.go`` ``IsRetryableExitCode``:
1-127 permanent, 128-255 retryable), but for one: TensorFlow's ``PreemptionCheckpointHandler`` saves a checkpoint
when its replica gets SIGTERM (a preemption notice) and exits with ``TerminationConfig``'s restart code, 42 by
default outside Google Cloud (``tensorflow/python/distribute/failure_handling/failure_handling.py``,
``BorgTerminationConfig``: ``sys.exit(42)``), asking to be restarted: :data:`DEFAULT_RESTART_EXIT_CODE`, the
launch parameter ``restart_exit_code`` (0: none). Preemptions are not the program's fault (JobSet, Kueue and
Kubeflow Trainer do not count them either, kubernetes-sigs/jobset#1117): they are restarted as often as they
come, within the job's deadline; program failures count.

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
DEFAULT_RESTART_EXIT_CODE = 42
"""The exit code of a replica that saved on a preemption notice and asks to be restarted: TensorFlow's
``TerminationConfig`` default outside Google Cloud (see the module docstring); retryable, not permanent."""
RESTART_REQUESTED = "RestartRequested"
"""The reason of a replica that exited with the restart exit code (it saved on SIGTERM and asks to be restarted)."""
NO_PROGRESS = "NoProgress"
"""The reason of a replica treated as hung by the progress watchdog (no progress, or no first progress)."""
NODE_LOST = "NodeLost"
"""The reason of a replica whose node was lost: a preemption, or a permanent failure where a lost node cannot be
replaced (Kubernetes ``spread=required``: :func:`tfk8s.launcher.engine.decide`'s ``node_loss_permanent``)."""
DEFAULT_PROGRESS_TIMEOUT_S = 600
"""Seconds without a progress report (after a first one) before a replica counts as hung: ten times what a
slow epoch step or a checkpoint save of the built-in trainer takes, well below the job timeout."""
DEFAULT_STARTUP_TIMEOUT_S = 300
"""Seconds a chief/worker that has reported it is ``starting`` may take to report its first step before it
counts as hung (:mod:`tfk8s.launcher.watchdog`): a cluster that never forms (a proxy catching the replicas'
gRPC, tensorflow#24887; a peer that answers TCP but not gRPC) fails in minutes instead of at the job deadline.
The built-in trainer's first step comes 5-15 s after ``starting`` on 2 CPU cores; the runtime's own wait for
peers gives up after 300 s too."""
DEFAULT_MAX_RESTARTS = 3
DEFAULT_MAX_PREEMPTIONS = 20  # RunPolicy.max_preemptions: generous, a bound on a loop, not a budget to plan with
STOP_GRACE_S = 10
"""Seconds between SIGTERM and SIGKILL when a replica is stopped (the default of the launch parameter
``stop_grace_s``), on both backends (the local process group's signals; a pod's ``terminationGracePeriodSeconds``
and the grace of the launcher's deletes). Short by default: TensorFlow's preemption notifier
(``tf.distribute.experimental.PreemptionCheckpointHandler``, installed by ``BackupAndRestore`` under some
strategies) swallows SIGTERM in some states, so stopping relies on the SIGKILL that follows; a program that
checkpoints on SIGTERM (``PreemptionCheckpointHandler``) needs the time its save takes (Kubeflow Trainer and
SageMaker give 30-120 s)."""
DEFAULT_EVALUATOR_GRACE_S = 60
"""Seconds the evaluator may still run after the job succeeded, to evaluate the final checkpoint and exit by
itself (the built-in trainer's evaluates MNIST's 10,000 test examples in 2-5 s on 2 cores); it is stopped after
that (kubeflow/trainer#1658)."""
PREEMPTION_POD_REASONS = frozenset({"Evicted", "NodeLost", "Shutdown", "NodeShutdown", "Terminated",
                                    "Preempted", "Preempting"})
"""A failed pod's ``status.reason`` that says it was preempted, not that its program failed: the kubelet's
node-pressure eviction, a lost node, a graceful node shutdown (spot and preemptible VMs: ``Terminated``,
"Pod was terminated in response to imminent node shutdown")."""


class FailureKind(enum.Enum):
    """How the launcher reacts to a failure."""

    PERMANENT = "permanent"  # fail the job
    RETRYABLE = "retryable"  # recreate while the restart budget lasts
    PREEMPTED = "preempted"  # recreate, not counted against the restart budget
    IMAGE_PULL = "image-pull"  # fail fast, the kubelet's message
    CONTAINER_CONFIG = "container-config"  # fail fast, the kubelet's message
    REFUSED = "refused"  # an admission refused the replica's pod for good (Kubernetes): fail fast, its message
    SCHEDULE_TIMEOUT = "schedule-timeout"  # not scheduled, or not started, within the schedule timeout (Kubernetes)
    TIMEOUT = "timeout"  # the job's deadline passed


@dataclass(frozen=True)
class Failure:
    """Why a replica failed.

    Attributes:
        kind: what the launcher does about it.
        reason: short machine-readable reason (``Error``, ``OOMKilled``, ``Signal``, ``Evicted``,
            ``ImagePullBackOff``, ``PodDeleted``, ``NoProgress``...).
        message: the kubelet's / scheduler's / controller's message, or a description (a hung replica's
            ``no progress for ...``).
        exit_code: the container's (a local process's) exit code, when it has one.
    """

    kind: FailureKind
    reason: str
    message: str = ""
    exit_code: int | None = None

    @property
    def retryable(self) -> bool:
        """Recreated (while the budget lasts, or, for a preemption, always)."""
        return self.kind in (FailureKind.RETRYABLE, FailureKind.PREEMPTED)

    @property
    def preempted(self) -> bool:
        """Not the program's fault: recreated without counting against ``max_restarts``."""
        return self.kind is FailureKind.PREEMPTED


@dataclass(frozen=True)
class Rule:
    """One row of the policy: a failure, its kind, and what the launcher does."""

    failure: str
    kind: FailureKind
    action: str


RULES: tuple[Rule, ...] = (
    Rule("exit code 1-127 (but restart_exit_code)", FailureKind.PERMANENT, "fail the step"),
    Rule(f"exit code restart_exit_code ({DEFAULT_RESTART_EXIT_CODE}: saved on SIGTERM, asks to be restarted), exit "
         "code >= 128, killed by a signal, OOMKilled, pod deleted, evicted for its own use (ephemeral storage over its "
         "limit, usage over its request under node pressure)",
         FailureKind.RETRYABLE, "recreate the restart group while max_restarts lasts"),
    Rule("evicted, preempted by the scheduler (DisruptionTarget), node lost or shut down, suspended by Kueue",
         FailureKind.PREEMPTED, "recreate the restart group, not counted against max_restarts but up to "
         "max_preemptions (a suspended job waits for re-admission up to schedule_timeout_s)"),
    Rule(f"no progress for progress_timeout_s, or no first step within startup_timeout_s ({NO_PROGRESS})",
         FailureKind.RETRYABLE, "stop it, then as any retryable failure"),
    Rule("image pull error", FailureKind.IMAGE_PULL, "fail the step with the kubelet's message"),
    Rule("container config error", FailureKind.CONTAINER_CONFIG, "fail the step with the kubelet's message"),
    Rule("node lost with spread=required (Kubernetes: the group cannot be recreated on the surviving nodes)",
         FailureKind.PERMANENT, "fail the step naming the node"),
    Rule("an admission refuses a replica's pod for good: a ResourceQuota, a LimitRange, Pod Security, a webhook's "
         "denial, an invalid pod spec (Kubernetes)", FailureKind.REFUSED,
         "fail the step at once with the admission's message"),
    Rule("not scheduled, or scheduled but not started, within schedule_timeout_s (Kubernetes)",
         FailureKind.SCHEDULE_TIMEOUT, "fail the step with the scheduler's or the kubelet's message"),
    Rule("job deadline passed", FailureKind.TIMEOUT, "fail the step"),
)


def exit_code_kind(code: int, restart_exit_code: int = DEFAULT_RESTART_EXIT_CODE) -> FailureKind | None:
    """The kind of a replica's non-zero exit: None for 0 (success); ``restart_exit_code`` (0: none) retryable;
    other codes 1-127 permanent; >= 128 (a container's 128 + signal number) and negative codes (a local process
    killed by signal ``-code``, as :class:`subprocess.Popen` reports it) retryable."""
    if code == 0:
        return None
    if code < 0 or code >= RETRYABLE_EXIT_CODE_MIN or (restart_exit_code and code == restart_exit_code):
        return FailureKind.RETRYABLE
    return FailureKind.PERMANENT


def restart_requested(code: int | None, restart_exit_code: int) -> bool:
    """Whether exit code ``code`` is the program's request to be restarted (:data:`DEFAULT_RESTART_EXIT_CODE`)."""
    return bool(restart_exit_code) and code == restart_exit_code


def restart_note(restarts: int, max_restarts: int) -> str:
    """``(restart 2 of max_restarts=3)``: a counted recreation, as both backends' messages say it (the job record
    and the replica logs' separators read it back)."""
    return f"(restart {restarts} of max_restarts={max_restarts})"


def preemption_note(preemptions: int, max_restarts: int) -> str:
    """``(preemption 1, not counted against max_restarts=3)``: a recreation after a preemption."""
    return f"(preemption {preemptions}, not counted against max_restarts={max_restarts})"


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

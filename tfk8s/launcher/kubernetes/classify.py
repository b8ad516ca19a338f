"""What a replica's pod and Job status mean: running, succeeded, or failed how, and is that retryable.

Rules (the shared table :mod:`tfk8s.core.policy`; Kubeflow Training Operator, ``pkg/util/train/train_util.go`` ``IsRetryableExitCode`` and the TFJob
``ExitCode`` restart policy, plus the kubelet's own reasons):

- exit code 0: success; 1-127: a permanent error of the program (not retried), but the restart exit code
  (42: the program saved on SIGTERM and asks to be restarted, ``RestartRequested``): retryable;
- exit code >= 128 (killed by a signal, 128 + signal number), ``OOMKilled`` (137, named as such), other pod-level
  failures (``status.reason`` such as ``UnexpectedAdmissionError``), and a pod deleted before it finished (by a
  person, say): retryable, counted against ``max_restarts``;
- preemptions, whatever the exit code: a ``DisruptionTarget`` condition (the scheduler's preemption, the
  Eviction API, the taint manager or pod GC of a lost node, the kubelet's node shutdown) or a pod-level reason of
  :data:`tfk8s.core.policy.PREEMPTION_POD_REASONS` (``Evicted``, ``NodeLost``, ``Terminated``...), also on the
  last state of a deleted pod; and a Job suspended (by Kueue) after its pod ran: ``preempted``, recreated
  without counting against ``max_restarts`` (:func:`preempted_failure`), up to ``max_preemptions``; but an
  eviction the pod caused (its own ephemeral-storage use over its limit, or its usage over its request as the
  kubelet's pick under node pressure: :func:`own_eviction`) is retryable, counted against ``max_restarts``;
- a **lost node**: the pod still ``Running`` in the API, but its ``Ready`` condition ``False`` with no reason while
  ``ContainersReady`` stays ``True``: the node lifecycle controller's mark when the node stopped sending its
  heartbeat for ``--node-monitor-grace-period`` (50 s upstream; the kubelet never writes that pair: it says
  ``ContainersNotReady``): ``NodeLost``, a preemption, long before the taint eviction of the pod
  (:func:`node_lost_failure`; seen on a real node, docs/kubernetes.md "Two real nodes");
- TensorFlow's own verdict that a peer is gone (the survivor of a lost node exits 1 with ``The following tasks
  are unhealthy (stopped sending heartbeats)``, a ``Deadline Exceeded`` of ``RPC:
  /tensorflow.CoordinationService/Heartbeat`` or ``cluster check alive failed, ... is down``): permanent as its
  exit code says, but named ``PeerLost`` so that its group waits ``peer_lost_wait_s`` for that peer's own verdict
  (its node lost: a preemption) instead of ``group_settle_s`` (:data:`PEER_LOST`);
- a container that cannot start (``StartError``, ``ContainerCannotRun``: a missing executable): permanent;
- an image the kubelet cannot pull (``ErrImagePull``, ``ImagePullBackOff``...) and a container it cannot
  create (``CreateContainerConfigError``...): failed fast with the kubelet's message, while still Pending;
- the Job failing with ``DeadlineExceeded`` (its ``activeDeadlineSeconds``): the job timed out;
- the ``tensorflow`` container terminated while the pod is still Running (a webhook-injected sidecar keeps
  it up): its exit code decides, as above.
"""

from __future__ import annotations

import enum
import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfk8s.core.policy import (  # Failure, FailureKind: shared by both backends
    DEFAULT_RESTART_EXIT_CODE,
    NODE_LOST,
    PREEMPTION_POD_REASONS,
    RESTART_REQUESTED,
    Failure,
    FailureKind,
    exit_code_kind,
    restart_requested,
)
from tfk8s.launcher.kubernetes.objects import CONTAINER_NAME

IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                                "RegistryUnavailable", "SignatureValidationFailed"})
CONTAINER_CONFIG_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
START_FAILURE_REASONS = frozenset({"StartError", "ContainerCannotRun"})
# NODE_LOST (tfk8s.core.policy): Failure.reason of a replica whose node was lost (node_lost_failure)
PEER_LOST = "PeerLost"  # Failure.reason of a replica that exited because TensorFlow lost one of its peers
# What TensorFlow says when a peer stopped answering, as seen on two real nodes: the coordination service's leader
# (task 0) about a task whose heartbeats stopped; a task whose heartbeat RPC to a lost leader timed out; MWMS's own
# health check
PEER_LOST_MARKERS = ("The following tasks are unhealthy (stopped sending heartbeats)",
                     "RPC: /tensorflow.CoordinationService/Heartbeat", "cluster check alive failed")


class Phase(enum.Enum):
    """Where a replica's pod is: waiting to run, running, or finished."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True)
class PodState:
    """A replica pod's status, interpreted.

    Attributes:
        phase: pending, running or finished.
        scheduled: the pod is bound to a node.
        started: its container has run (its log can be read).
        exit_code: the container's exit code once terminated.
        failure: why it failed (also set while Pending for image pull / container config errors).
        waiting_reason: while unscheduled, the ``PodScheduled`` condition's reason (``Unschedulable``).
        waiting_message: while unscheduled, the scheduler's message (``0/3 nodes are available: ...``).
        finished_at: the container's ``terminated.finishedAt`` (RFC 3339), once terminated.
    """

    phase: Phase
    scheduled: bool = False
    started: bool = False
    exit_code: int | None = None
    failure: Failure | None = None
    waiting_reason: str = ""
    waiting_message: str = ""
    finished_at: str = ""

    @property
    def terminal(self) -> bool:
        return self.phase in (Phase.SUCCEEDED, Phase.FAILED)


@dataclass(frozen=True)
class JobState:
    """A replica Job's status: suspended (e.g. by Kueue until admitted), complete, or failed with a reason."""

    suspended: bool = False
    complete: bool = False
    failed_reason: str = ""
    failed_message: str = ""


def _condition(obj: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def _container_status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for cs in statuses:
        if cs.get("name") == CONTAINER_NAME:
            return cs
    return statuses[0] if statuses else {}


def signal_name(exit_code: int) -> str:
    """``"SIGKILL"`` for exit code 137 (128 + 9); ``"signal N"`` when unknown."""
    try:
        return signal.Signals(exit_code - 128).name
    except ValueError:
        return f"signal {exit_code - 128}"


def _terminated_failure(term: Mapping[str, Any], restart_exit_code: int = DEFAULT_RESTART_EXIT_CODE) -> Failure:
    code = term.get("exitCode")
    reason = term.get("reason") or ""
    text = (term.get("message") or "").strip()  # its termination message (on failure, the log tail)
    if reason == "OOMKilled":
        return Failure(FailureKind.RETRYABLE, "OOMKilled",
                       "the container exceeded its memory limit", code)
    if reason in START_FAILURE_REASONS:
        return Failure(FailureKind.PERMANENT, reason, text or "the container could not start", code)
    if restart_requested(code, restart_exit_code):
        return Failure(FailureKind.RETRYABLE, RESTART_REQUESTED,
                       f"exit code {code}: the program saved on SIGTERM and asks to be restarted", code)
    kind = exit_code_kind(code, restart_exit_code) if code is not None and code > 0 else None
    if kind is FailureKind.PERMANENT:
        said = next((line.strip() for line in text.splitlines() if any(m in line for m in PEER_LOST_MARKERS)), "")
        if said:
            return Failure(FailureKind.PERMANENT, PEER_LOST, f"TensorFlow lost a peer: {said}", code)
        return Failure(FailureKind.PERMANENT, reason or "Error", "", code)
    if kind is FailureKind.RETRYABLE:
        named = reason if reason and reason != "Error" else "Signal"
        return Failure(FailureKind.RETRYABLE, named, f"killed by {signal_name(code)}", code)
    return Failure(FailureKind.RETRYABLE, reason or "PodFailed", text, code)


def node_lost_failure(pod: Mapping[str, Any] | None) -> Failure | None:
    """``NodeLost`` (a preemption) when the pod's node was lost, None otherwise.

    The sign, as a real node lost shows it (docs/kubernetes.md, "Two real nodes"): the pod not finished and
    bound to a node, its ``Ready`` condition ``False`` with no reason while ``ContainersReady`` is ``True``.
    Only the node lifecycle controller writes that pair (``MarkPodsNotReady``, once the node's kubelet has not
    renewed its Lease for ``--node-monitor-grace-period``, 50 s upstream, when it also taints the node
    ``node.kubernetes.io/unreachable``); the kubelet's own ``Ready=False`` has a reason (``ContainersNotReady``,
    ``ReadinessGatesNotReady``). Read from the pod alone: the launcher's Role reads no Nodes."""
    if not pod:
        return None
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    if not node or status.get("phase") not in ("Running", "Pending"):
        return None
    ready, containers = _condition(pod, "Ready"), _condition(pod, "ContainersReady")
    if ready and ready.get("status") == "False" and not ready.get("reason") and containers \
            and containers.get("status") == "True":
        return Failure(FailureKind.PREEMPTED, NODE_LOST,
                       f"its node {node} was lost: no heartbeat from its kubelet for the cluster's "
                       f"--node-monitor-grace-period, so the node lifecycle controller marked its pods not Ready")
    return None


def lost_node(pod: Mapping[str, Any] | None) -> str:
    """The node of a pod whose node was lost (:func:`node_lost_failure`), "" otherwise."""
    return ((pod or {}).get("spec") or {}).get("nodeName") or "" if node_lost_failure(pod) else ""


# The kubelet's eviction messages (pkg/kubelet/eviction/helpers.go, eviction_manager.go) that blame the pod itself.
_OWN_LIMIT = (
    re.compile(r"Pod ephemeral local storage usage exceeds the total limit of containers (?P<limit>\S+?)\.?(?:\s|$)"),
    re.compile(r"Container (?P<container>\S+) exceeded its local ephemeral storage limit \"?(?P<limit>[^\"\s]+)\"?"),
    re.compile(r"[Uu]sage of (?P<what>EmptyDir volume \"?[^\"]+\"?|ephemeral-storage)\s.*?exceeds the limit "
               r"\"?(?P<limit>[^\"\s.]+)"),
)
_NODE_LOW = re.compile(r"The node was low on resource: (?P<resource>[\w/-]+)")
_OVER_REQUEST = re.compile(r"Container (?P<container>\S+) was using (?P<usage>\S+), request is (?P<request>\S+?),")


def own_eviction(message: str, exit_code: int | None = None) -> Failure | None:
    """The kubelet's eviction of a pod for its own use, as a retryable failure counted against ``max_restarts``
    (``Evicted``), or None when ``message`` does not blame the pod (a preemption).

    The pod caused it when the kubelet says its ephemeral storage exceeded a limit (``Pod ephemeral local
    storage usage exceeds the total limit of containers 1Gi``, ``Container tensorflow exceeded its local
    ephemeral storage limit "1Gi"``, ``Usage of EmptyDir volume "x" exceeds the limit "1Gi"``), or, under node
    pressure (``The node was low on resource: memory``), names its container's usage over its request (``Container
    tensorflow was using 3Gi, request is 2Gi, has larger consumption of memory``: the kubelet evicts pods over
    their requests first). A bare node-pressure message is the node's problem: a preemption. The failure's message
    names the resource, the limit (or request) and the fix.
    """
    for pattern in _OWN_LIMIT:
        m = pattern.search(message)
        if m:
            return Failure(FailureKind.RETRYABLE, "Evicted",
                           f"evicted for its own ephemeral-storage use over its limit {m.group('limit')} ({message.strip()}): "
                           f"write big files to the shared volume (TFK8S_MODEL_DIR, TFK8S_CHECKPOINT_DIR...) rather "
                           f"than the container's filesystem or /tmp", exit_code)
    low, over = _NODE_LOW.search(message), _OVER_REQUEST.search(message)
    if low and over:
        resource = low.group("resource")
        setting = {"memory": "memory", "cpu": "cpu"}.get(resource, "")
        fix = (f"raise its {setting} request (kubernetes setting {setting}, or replica_overrides) to cover its use"
               if setting else "keep its use within its request (write big files to the shared volume)")
        return Failure(FailureKind.RETRYABLE, "Evicted",
                       f"evicted under node {resource} pressure as a pod over its request: {over.group('container')} "
                       f"used {over.group('usage')} of {resource}, request {over.group('request')} "
                       f"({message.strip()}): {fix}", exit_code)
    return None


def preempted_failure(pod: Mapping[str, Any] | None, exit_code: int | None = None) -> Failure | None:
    """The preemption a pod's status shows (a ``DisruptionTarget`` condition, or a pod-level reason of
    :data:`~tfk8s.core.policy.PREEMPTION_POD_REASONS`), None when it shows none; an eviction the pod caused
    (:func:`own_eviction`, from the kubelet's message in either) is returned as the retryable failure it is."""
    if not pod:
        return None
    status = pod.get("status") or {}
    disruption = _condition(pod, "DisruptionTarget")
    for said in (status.get("message"), disruption and disruption.get("message")):
        own = own_eviction(said or "", exit_code)
        if own is not None:
            return own
    if disruption and disruption.get("status") == "True":
        return Failure(FailureKind.PREEMPTED, disruption.get("reason") or "DisruptionTarget",
                       disruption.get("message") or "", exit_code)
    if status.get("reason") in PREEMPTION_POD_REASONS:
        return Failure(FailureKind.PREEMPTED, status["reason"], status.get("message") or "", exit_code)
    return None


def classify_pod(pod: Mapping[str, Any], restart_exit_code: int = DEFAULT_RESTART_EXIT_CODE) -> PodState:
    """Interpret a pod (the dict the API returns) of one replica; see the module docstring for the rules."""
    status = pod.get("status") or {}
    phase_s = status.get("phase") or "Pending"
    cs = _container_status(pod)
    state = cs.get("state") or {}
    term = state.get("terminated")
    waiting = state.get("waiting") or {}
    sched = _condition(pod, "PodScheduled")
    scheduled = bool((sched and sched.get("status") == "True") or (pod.get("spec") or {}).get("nodeName")
                     or phase_s in ("Running", "Succeeded", "Failed"))
    started = state.get("running") is not None or term is not None
    exit_code = term.get("exitCode") if term else None
    finished_at = (term.get("finishedAt") or "") if term else ""
    if phase_s == "Succeeded":
        return PodState(Phase.SUCCEEDED, scheduled, started, exit_code if exit_code is not None else 0,
                        finished_at=finished_at)
    if term and phase_s != "Failed":
        # The training container has exited but another container (a webhook-injected sidecar: a log shipper,
        # a proxy) keeps the pod Running: the training container's exit decides.
        if exit_code == 0:
            return PodState(Phase.SUCCEEDED, True, True, 0, finished_at=finished_at)
        failure = preempted_failure(pod, exit_code) or _terminated_failure(term, restart_exit_code)
        return PodState(Phase.FAILED, True, True, exit_code, failure, finished_at=finished_at)
    if phase_s == "Failed":
        preempted = preempted_failure(pod, exit_code)
        if preempted:
            failure = preempted
        elif status.get("reason"):  # UnexpectedAdmissionError, OutOfcpu...: not the program's, but counted
            failure = Failure(FailureKind.RETRYABLE, status["reason"], status.get("message") or "", exit_code)
        elif term:
            failure = _terminated_failure(term, restart_exit_code)
        else:
            failure = Failure(FailureKind.RETRYABLE, "PodFailed", status.get("message") or "", None)
        return PodState(Phase.FAILED, scheduled, started, exit_code, failure, finished_at=finished_at)
    lost = node_lost_failure(pod)
    if lost:  # its node is gone: its containers' last state will never be reported
        return PodState(Phase.FAILED, scheduled, started, None, lost)
    reason = waiting.get("reason") or ""
    failure = None
    if reason in IMAGE_PULL_REASONS:
        failure = Failure(FailureKind.IMAGE_PULL, reason, waiting.get("message") or "")
    elif reason in CONTAINER_CONFIG_REASONS:
        failure = Failure(FailureKind.CONTAINER_CONFIG, reason, waiting.get("message") or "")
    waiting_reason = waiting_message = ""
    if sched and sched.get("status") != "True":
        waiting_reason, waiting_message = sched.get("reason") or "Unschedulable", sched.get("message") or ""
    phase = Phase.RUNNING if phase_s == "Running" or state.get("running") is not None else Phase.PENDING
    return PodState(phase, scheduled, started, None, failure, waiting_reason, waiting_message)


def classify_job(job: Mapping[str, Any]) -> JobState:
    """Interpret a replica's Job: suspended, ``Complete``, or ``Failed`` with its reason
    (``DeadlineExceeded``, ``BackoffLimitExceeded``...)."""
    failed = _condition(job, "Failed")
    complete = _condition(job, "Complete")
    is_failed = bool(failed and failed.get("status") == "True")
    return JobState(
        suspended=bool((job.get("spec") or {}).get("suspend")),
        complete=bool(complete and complete.get("status") == "True"),
        failed_reason=(failed.get("reason") or "Failed") if is_failed else "",
        failed_message=(failed.get("message") or "") if is_failed else "",
    )

"""A failed replica's error, as a person needs it: the reason, its last log lines (captured before its pod is
deleted), the latest events of its pod and Job, and what to do; the error class says which way it failed
(:mod:`tfk8s.launcher.kubernetes.errors`). Also the errors of a replica whose pod an admission refused, and of one
never scheduled or never started (the engine's verdicts, with what the cluster said). Functions over the run
(:class:`~tfk8s.launcher.kubernetes.state.KubeRun`).
"""

from __future__ import annotations

from typing import Any

from tfk8s.core.diagnosis import LogTail
from tfk8s.core.errors import ReplicaFailedError
from tfk8s.launcher import engine
from tfk8s.launcher.kubernetes import objects
from tfk8s.launcher.kubernetes.admission import QUOTA_EXCEEDED
from tfk8s.launcher.kubernetes.classify import NODE_LOST, Failure, FailureKind, Phase, classify_job
from tfk8s.launcher.kubernetes.errors import (
    AdmissionRefusedError,
    ContainerConfigError,
    ImagePullError,
    KubernetesApiError,
    PermanentFailureError,
    QuotaExceededError,
    RestartBudgetExhaustedError,
    ScheduleTimeoutError,
)
from tfk8s.launcher.kubernetes.kueue import pending_reason
from tfk8s.launcher.kubernetes.logs import LIVE_LOGS, LogStream
from tfk8s.launcher.kubernetes.state import KubeRun, ReplicaState

EVENTS_SHOWN = 10
ERROR_CLASSES: dict[FailureKind, type[ReplicaFailedError]] = {
    FailureKind.PERMANENT: PermanentFailureError,
    FailureKind.IMAGE_PULL: ImagePullError,
    FailureKind.CONTAINER_CONFIG: ContainerConfigError,
    FailureKind.RETRYABLE: RestartBudgetExhaustedError,
    FailureKind.PREEMPTED: RestartBudgetExhaustedError,  # max_preemptions reached
    FailureKind.REFUSED: AdmissionRefusedError,  # QuotaExceededError for the reason QuotaExceeded
    FailureKind.SCHEDULE_TIMEOUT: ScheduleTimeoutError,
}


def follow_log(run: KubeRun, rep: ReplicaState) -> None:
    """Start reading the log of ``rep``'s started pod, once per pod, by the launcher's documented policy
    (``docs/kubernetes.md``, *Logs*): the coordinator (chief, else worker 0) and up to
    :data:`~tfk8s.launcher.kubernetes.logs.LIVE_LOGS` other replicas are followed live, each in a thread of its
    own, as they start; any other replica's log is read whole when it ends (or before its pod is deleted: a
    restart, the cleanup; :func:`read_logs`) by the bounded pool of readers
    (:class:`~tfk8s.launcher.kubernetes.logs.LogReaders`). Every line goes to the sink with its ``[worker-1]``
    prefix either way, so every replica's log is kept on the volume whole."""
    pod = rep.pod_name
    if not pod or pod in run.logs:
        return
    if rep.terminal:  # a failed one's log is needed at once (its error, a restart): not queued behind others
        _start(run, rep, live=False, own_thread=bool(rep.view and rep.view.phase is not Phase.SUCCEEDED))
        return
    if rep.replica != run.coordinator:
        run.live_logs = [x for x in run.live_logs if not x.done]
        if len(run.live_logs) >= LIVE_LOGS:
            return  # read when it ends
    stream = _start(run, rep, live=True)
    if rep.replica != run.coordinator:
        run.live_logs.append(stream)


def _start(run: KubeRun, rep: ReplicaState, *, live: bool, own_thread: bool = False) -> LogStream:
    """Start the log stream of ``rep``'s pod: followed (``live``) in its own thread, or read as it is now by the
    pool (by a thread of its own with ``own_thread``: a failed replica's log, needed at once)."""
    pod, api = rep.pod_name, run.api
    opener = (lambda: api.open_log(pod, objects.CONTAINER_NAME)) if live else \
        (lambda: api.read_log(pod, objects.CONTAINER_NAME))
    stream = LogStream(rep.replica.label, pod, opener, run.emit, run.settings.log_tail_lines)
    run.logs[pod] = stream
    stream.start(None if live or own_thread else run.readers)
    return stream


def read_logs(run: KubeRun, reps: list[ReplicaState], timeout_s: float) -> None:
    """Read (by the pool) the log of each of ``reps``' started pods not read yet, as it is now, and wait up to
    ``timeout_s`` seconds in all for those reads (not for the streams followed live): before their pods are
    deleted (a restart, the cleanup), so that every line is in."""
    waiting: list[LogStream] = []
    for rep in reps:
        pod = rep.pod_name
        if not pod:
            continue
        stream = run.logs.get(pod)
        if stream is None and rep.view and rep.view.started:
            stream = _start(run, rep, live=False)
        if stream is not None and not stream.live:  # a followed one is drained by its caller's rule
            waiting.append(stream)
    deadline = run.clock() + timeout_s
    for stream in waiting:
        stream.drain(deadline - run.clock())


def drain_log(run: KubeRun, rep: ReplicaState) -> LogTail:
    """The failed replica's last log lines and exception, captured before its pod is deleted (from its
    log stream, read now by a thread of its own when it has none; else its log's tail, else its termination
    message)."""
    pod = rep.pod_name
    tail = LogTail(run.settings.log_tail_lines)
    if not pod:
        return tail
    stream = run.logs.get(pod)
    if stream is None and rep.view and rep.view.started:
        stream = _start(run, rep, live=False, own_thread=True)
    if stream is not None:
        stream.drain(run.settings.log_wait_s)
        tail = stream.tail
    if not tail and rep.view and rep.view.started:
        try:
            tail.extend(run.api.read_log_tail(pod, objects.CONTAINER_NAME, run.settings.log_tail_lines))
        except KubernetesApiError as e:
            run.log(f"cannot read the log of {rep.replica.label}: {e}")
    if not tail:  # terminationMessagePolicy FallbackToLogsOnError keeps the log's tail here
        for cs in ((rep.pod() or {}).get("status") or {}).get("containerStatuses") or []:
            kept = ((cs.get("state") or {}).get("terminated") or {}).get("message") or ""
            tail.extend(kept.splitlines())
    return tail


def print_events(run: KubeRun, rep: ReplicaState) -> list[dict[str, Any]]:
    """Print (and return) the latest events of the replica's pod and Job."""
    found: list[dict[str, Any]] = []
    for name in [n for n in (rep.pod_name, rep.name) if n]:
        try:
            found += run.api.list_events(name)
        except KubernetesApiError as e:
            run.log(f"cannot list the events of {name}: {e}")
    found.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    for e in found[-EVENTS_SHOWN:]:
        obj = e.get("involvedObject") or {}
        run.log(f"event {e.get('type', '')} {e.get('reason', '')} {obj.get('kind', '')}/{obj.get('name', '')}:"
                 f" {e.get('message', '')}")
    return found


def replica_error(run: KubeRun, rep: ReplicaState, failure: Failure, budget: str = "") -> ReplicaFailedError:
    """The error of the job failed by ``rep``'s ``failure`` (the engine's :class:`~tfk8s.launcher.engine.Fail`;
    its class by the failure's kind, :data:`ERROR_CLASSES`): the reason, its last log lines, the events printed,
    and what to do; ``budget`` is the engine's sentence for a retryable failure with the restart budget used up
    (:func:`tfk8s.launcher.engine.budget_used_up`). An admission's refusal and a schedule deadline have no log:
    :func:`refused_error`, :func:`schedule_error` and :func:`start_error`."""
    if failure.kind is FailureKind.REFUSED:
        return refused_error(run, rep, failure)
    if failure.kind is FailureKind.SCHEDULE_TIMEOUT:
        return (start_error if failure.reason == engine.NOT_STARTED else schedule_error)(run, rep, failure)
    lines = drain_log(run, rep)
    print_events(run, rep)
    cls = ERROR_CLASSES[failure.kind]
    label = rep.replica.label
    rtype = rep.replica.replica_type.value
    if failure.kind is FailureKind.IMAGE_PULL:
        advice = ("check the image name and tag, that the nodes can reach the registry, and the "
                  "imagePullSecrets of the service account")
    elif failure.kind is FailureKind.CONTAINER_CONFIG:
        advice = "fix the pod's configuration (a missing Secret or ConfigMap, an invalid command or env)"
    elif failure.reason == NODE_LOST:  # spread=required (the engine's node_loss_permanent)
        advice = ("spread=required never lets two chief/workers share a node, so the group cannot be recreated "
                  "on the surviving nodes: the step fails at once instead of waiting schedule_timeout_s for a node "
                  "to replace the lost one; use spread=preferred to recreate it on the surviving nodes")
    elif failure.reason == "JobDeleted":
        advice = "rerun the step"
    elif failure.kind is FailureKind.PERMANENT and failure.reason in ("StartError", "ContainerCannotRun"):
        advice = "check the command and that the image contains it"
    elif failure.kind is FailureKind.PERMANENT:
        advice = (f"the training program of {label} exited with an error (exit codes 1-127 are not retried): "
                  f"see its last log lines")
    elif failure.reason == "OOMKilled":
        limit = run.settings.replica(rtype).memory_limit or run.settings.replica(rtype).memory
        advice = (f"{label} ran out of its memory limit {limit} after {run.engine.restarts} restarts: raise memory "
                  f"(replica_overrides {{\"{rtype}\": {{\"memory\": \"...\"}}}}) or lower the batch size")
    else:  # a retryable failure with the restart budget used up (tfk8s.launcher.engine.budget_used_up)
        advice = budget
    detail = f"{failure.message}; {advice}" if failure.message else advice
    return cls(rep.replica, failure.reason, failure.exit_code, lines, detail)


def refused_error(run: KubeRun, rep: ReplicaState, failure: Failure) -> ReplicaFailedError:
    """An admission refused ``rep``'s pod for good (the engine's verdict on the refusal read from its Job's
    ``FailedCreate`` event, :func:`tfk8s.launcher.kubernetes.admission.refusal`): :class:`QuotaExceededError`
    for a ResourceQuota, else :class:`AdmissionRefusedError`, with the refusal's message; the events printed."""
    print_events(run, rep)
    cls = QuotaExceededError if failure.reason == QUOTA_EXCEEDED else AdmissionRefusedError
    return cls(rep.replica, failure.reason, None, (), failure.message)


def schedule_error(run: KubeRun, rep: ReplicaState, failure: Failure) -> ScheduleTimeoutError:
    """A replica not scheduled within ``schedule_timeout_s`` (the engine's ``failure``, whose message says so and
    what to do): the reason and message are what the cluster said, from the Job (suspended by Kueue, and why),
    the pod (the scheduler's condition) or the latest Warning event, after them the engine's sentence."""
    events = print_events(run, rep)
    warnings = [e for e in events if e.get("type") == "Warning"]
    view = rep.view
    if rep.job and classify_job(rep.job).suspended:
        queue_name = run.settings.kueue_queue or "?"
        why = pending_reason(run, rep)
        reason, message = "Suspended", (f"the Job is suspended: queue {queue_name} has not admitted it"
                                        + (f" (Kueue: {why})" if why else ""))
    elif view and view.waiting_message:
        reason, message = view.waiting_reason, view.waiting_message
    elif warnings:
        reason, message = warnings[-1].get("reason") or failure.reason, warnings[-1].get("message") or ""
    elif rep.pod() is None:
        reason, message = "NoPod", "the Job controller created no pod"
    else:
        reason, message = failure.reason, "the pod was not bound to a node"
    return ScheduleTimeoutError(rep.replica, reason, None, (), f"{message}; {failure.message}")


def start_error(run: KubeRun, rep: ReplicaState, failure: Failure) -> ScheduleTimeoutError:
    """A pod bound to a node whose container has not started within ``schedule_timeout_s`` (the engine's
    ``failure``; a volume that cannot be attached or mounted, a sandbox that cannot be created...): the kubelet's
    Warning events say why, then where the pod was scheduled and the engine's sentence."""
    events = print_events(run, rep)
    warnings = [e for e in events if e.get("type") == "Warning"]
    pod = rep.pod() or {}
    node = (pod.get("spec") or {}).get("nodeName") or "its node"
    waiting: dict[str, Any] = {}
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == objects.CONTAINER_NAME:
            waiting = (cs.get("state") or {}).get("waiting") or {}
    if warnings:
        reason, message = warnings[-1].get("reason") or failure.reason, warnings[-1].get("message") or ""
    else:
        reason = waiting.get("reason") or failure.reason
        message = waiting.get("message") or f"the container is still waiting ({reason})"
    return ScheduleTimeoutError(rep.replica, reason, None, (),
                                f"{message}; pod {rep.pod_name} was scheduled on {node} but {failure.message}")

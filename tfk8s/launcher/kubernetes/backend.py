"""The Kubernetes backend's loop: observe (the watches) -> decide (:mod:`tfk8s.launcher.engine`) -> act (Jobs, pods).

Semantics follow the Kubeflow Training Operator's TFJob controller; the rules are :mod:`tfk8s.core.policy`'s
(what a failure is) and :mod:`tfk8s.launcher.engine`'s (success and its grace periods, the group settle window,
the restart budget, preemptions, the timeout; and Kubernetes' own verdicts: an admission's refusal, the schedule
deadlines, a node lost under ``spread=required``), the same as the local backend's. This module observes and acts;
the work it calls lives beside it, as functions over the run's state
(:class:`~tfk8s.launcher.kubernetes.state.KubeRun`): creating or re-attaching to the objects
(:mod:`~tfk8s.launcher.kubernetes.creation`), what a pod's status means (:mod:`~tfk8s.launcher.kubernetes.classify`),
a failed replica's error (:mod:`~tfk8s.launcher.kubernetes.failures`) and the cleanup
(:mod:`~tfk8s.launcher.kubernetes.cleanup`).

- **Wait.** Two watches (pods and Jobs of the job, by label selector; :mod:`~tfk8s.launcher.kubernetes.watch`)
  feed one queue; the main thread applies each batch of events, turns each replica they were about (and each
  whose timer is due: a deadline, a look at its progress file) into a view
  (:class:`~tfk8s.launcher.engine.ReplicaView`, kept in :class:`~tfk8s.launcher.engine.Views`), then asks the
  engine. Nothing polls per replica; a batch costs what its replicas cost, not what the job's do.
- **Success** (``SuccessPolicy``): the chief succeeded (worker 0 without a chief), or with ``AllWorkers``
  every chief/worker did; ps and evaluator never count. Then lagging workers get ``job.grace_period_s`` and the
  evaluator ``job.evaluator_grace_s`` seconds to finish by themselves (the evaluator: its final checkpoint);
  whatever still runs (ps, laggards) is stopped.
- **Failure.** A retryable failure recreates the replica's restart group while ``job.max_restarts`` lasts, a
  preemption (:mod:`~tfk8s.launcher.kubernetes.classify`: evicted, preempted, node lost, its Job suspended by
  Kueue, which then holds the new Jobs until it admits them again, up to ``schedule_timeout_s``) always, without
  counting against it; the failures of a group are judged together (a retryable one wins over its peers' follow-on exit 1s; a permanent
  one waits up to ``group_settle_s`` for the members still running, whose status may come later), else the
  earliest failure is reported. Image pull and container config errors fail at once with the kubelet's
  message; a replica unscheduled after ``schedule_timeout_s`` fails with the scheduler's message, one scheduled
  but not started ``schedule_timeout_s`` later with the kubelet's Warning event (FailedMount...); a pod-less
  Job's admission refusal (quota, LimitRange, Pod Security, a webhook's denial) fails at once; ``job.timeout_s``
  fails the job. Each is the engine's verdict on what this module observed (the times a replica was created and
  bound, the refusal read from its Job's events, the lost nodes of its pods:
  :class:`~tfk8s.launcher.engine.ReplicaView`); this module turns the verdict into its error
  (:func:`~tfk8s.launcher.kubernetes.failures.replica_error`).
- **Logs.** Every replica's log is printed with a ``[worker-1]`` prefix (:mod:`~tfk8s.launcher.kubernetes.logs`):
  the coordinator's and up to ``LIVE_LOGS`` others followed live, the rest read whole when they end or before
  their pods are deleted (:func:`~tfk8s.launcher.kubernetes.failures.follow_log`); a failed replica's last lines
  and the events of its pod and Job are printed before any pod is deleted.
- **Hangs** (:mod:`tfk8s.launcher.watchdog`): a started replica that reported progress in its current attempt
  and then nothing new for ``job.progress_timeout_s``, or a chief/worker with no first step
  ``job.startup_timeout_s`` after it said it was starting, is a retryable failure (``NoProgress``), as locally.
- **Cleanup** at every end (success, failure, timeout, SIGTERM or SIGINT): every object deleted and checked gone.
"""

from __future__ import annotations

import queue
from typing import Any

from tfk8s.core.cluster import Replica
from tfk8s.core.errors import JobTimeoutError
from tfk8s.core.job import LaunchResult
from tfk8s.core.policy import NO_PROGRESS
from tfk8s.launcher import engine
from tfk8s.launcher.kubernetes import objects
from tfk8s.launcher.kubernetes.admission import refusal
from tfk8s.launcher.kubernetes.classify import (
    PEER_LOST,
    Failure,
    FailureKind,
    Phase,
    PodState,
    classify_job,
    classify_pod,
    lost_node,
    preempted_failure,
)
from tfk8s.launcher.kubernetes.cleanup import cleanup, force_delete, wait_until
from tfk8s.launcher.kubernetes.creation import create_job, launch
from tfk8s.launcher.kubernetes.errors import KubernetesApiError
from tfk8s.launcher.kubernetes.failures import drain_log, follow_log, print_events, read_logs, replica_error
from tfk8s.launcher.kubernetes.kueue import note_pending, wait_for_old_workloads
from tfk8s.launcher.kubernetes.logs import LOG_READ_S
from tfk8s.launcher.kubernetes.state import KubeRun, ReplicaState, parse_time
from tfk8s.launcher.kubernetes.watch import Changed, Synced, WatchFailed, WatchItem
from tfk8s.launcher.stopping import stop_signals

MAX_WAIT_S = 5.0  # the main loop re-evaluates at least this often, events or not
PEER_LINES_SHOWN = 5  # last log lines shown of each peer that failed with a group's root cause
QUOTA_CHECK_S = 2.0  # a Job without a pod this long has its events checked for a quota refusal, this often
QUOTA_SCAN_S = 0.5  # how often the replicas are looked at for such Jobs


# -- entry point ----------------------------------------------------------------------------------------------------
def run(run: KubeRun) -> LaunchResult:
    """Create or re-attach, wait for the outcome, and always clean up.

    Returns:
        the :class:`LaunchResult` (``restarts``: recreations used, a whole worker set counting once).

    Raises:
        PermanentFailureError, ImagePullError, ContainerConfigError, RestartBudgetExhaustedError,
        ScheduleTimeoutError, QuotaExceededError, AdmissionRefusedError: a replica failed (see
        :mod:`tfk8s.launcher.kubernetes.errors`).
        JobTimeoutError: ``job.timeout_s`` passed.
        LauncherTerminatedError: the launcher got SIGTERM or SIGINT (:mod:`tfk8s.launcher.stopping`).
        KubernetesApiError: an API call failed (e.g. forbidden: apply ``manifests/rbac.yaml``).
        CleanupError: the job succeeded but some of its objects could not be deleted.
    """
    error: BaseException | None = None
    with stop_signals(run.job.name, run.log, "is being deleted; rerun the step to train again") as stop:
        if not stop.caught:
            run.log("not running in the main thread: SIGTERM and SIGINT cannot be caught here, so the replicas "
                    "are cleaned up on errors but not on those signals (their ownerReferences still apply)")
        try:
            launch(run)
            return wait(run)
        except BaseException as e:
            error = e
            raise
        finally:
            stop.cleaning = True  # a second signal is noted, not obeyed: every object is deleted first
            cleanup(run, error)


# -- observe -> decide -> act ---------------------------------------------------------------------------------------
def wait(run: KubeRun) -> LaunchResult:
    """Until the engine says success (returned) or failure (raised): apply the watch events, observe every
    replica (and, for the Jobs without a pod, their admission refusals), carry out the engine's decision."""
    while True:
        pump(run, next_wait_s(run))
        now = run.clock()
        if run.engine.success_at is None:
            check_quota(run, now)
        views, _ = observe(run, now)
        decision = engine.decide(run.job, views, now, run.engine, group_settle_s=settle_s(run),
                                 schedule_timeout_s=run.settings.schedule_timeout_s,
                                 node_loss_permanent=node_loss_permanent(run))
        for note in decision.notes:
            run.log(note)
        if isinstance(decision, engine.Succeeded):
            return LaunchResult(run.job.name, dict(run.exit_codes), [r.label for r in decision.stop],
                                decision.seconds, run.engine.restarts,
                                objects.training_cluster_spec(run.job, run.settings), run.engine.preemptions)
        if isinstance(decision, engine.Restart):
            restart(run, decision)
        elif isinstance(decision, engine.Fail):
            raise replica_error(run, run.replicas[decision.replica], decision.failure, decision.budget)
        elif isinstance(decision, engine.TimedOut):
            raise JobTimeoutError(decision.message)
        elif run.engine.success_at is None:
            note_pending(run, now, run.kueue_said)


def node_loss_permanent(run: KubeRun) -> bool:
    """``spread=required``: no two chief/workers share a node, so the surviving nodes cannot take a lost one's
    replicas (the engine fails the job instead of recreating them)."""
    return run.settings.spread == "required"


def next_wait_s(run: KubeRun) -> float:
    """Seconds until something may change without an event: the engine's times (grace periods, deadline, settle
    windows, schedule deadlines) and the replicas' timers (:func:`replica_timer`: the wait for a failed pod's
    status, the next look at a progress file)."""
    now = run.clock()
    times = [now + MAX_WAIT_S, *engine.wake_times(run.job, run.engine, group_settle_s=settle_s(run), now=now,
                                                  views=run.views,
                                                  schedule_timeout_s=run.settings.schedule_timeout_s)]
    if (t := run.next_timer()) is not None:
        times.append(t)
    return max(0.0, min(times) - now)


def replica_timer(run: KubeRun, rep: ReplicaState, now: float) -> float | None:
    """When ``rep`` must be observed again with no event about it (None: only on events): its failed Job's wait
    for the pod's status (``log_wait_s``), and for a running replica with a progress file the next look at it
    (:data:`MAX_WAIT_S` later, or its hang deadline if sooner). The schedule deadlines need no new observation:
    the engine judges them from the views' times (:func:`tfk8s.launcher.engine.wake_times`)."""
    s, view, times = run.settings, rep.view, []
    if rep.job_failed_at is not None:
        times.append(rep.job_failed_at + s.log_wait_s)
    if view and view.started and not view.terminal and rep.progress is not None and rep.progress.enabled:
        hung_at = rep.progress.deadline()
        times.append(now + MAX_WAIT_S if hung_at is None else min(now + MAX_WAIT_S, hung_at))
    return min(times) if times else None


def pump(run: KubeRun, timeout_s: float) -> None:
    """Apply the next watch item (waiting up to ``timeout_s`` seconds), then every item already queued."""
    try:
        item = run.events.get(timeout=timeout_s) if timeout_s > 0 else run.events.get_nowait()
    except queue.Empty:
        return
    while True:
        apply(run, item)
        try:
            item = run.events.get_nowait()
        except queue.Empty:
            return


def apply(run: KubeRun, item: WatchItem) -> None:
    """Apply one watch item to the replicas' states (a failed watch raises its error)."""
    if isinstance(item, WatchFailed):
        raise item.error
    if isinstance(item, Synced):
        run.changed.update(run.replicas)  # a fresh listing: look at every replica again
        names = {(o.get("metadata") or {}).get("name") for o in item.items}
        for rep in run.replicas.values():
            if item.kind == "pods":
                for name in [n for n in rep.pods if n not in names]:
                    pod_deleted(run, rep, rep.pods[name])
            elif rep.job_seen and rep.name not in names and not rep.terminal and not _job_complete(rep):
                rep.job_deleted = True
        for obj in item.items:
            upsert(run, item.kind, obj)
    elif isinstance(item, Changed):
        if item.type == "DELETED":
            rep = owner(run, item.obj)
            if rep is None:
                return
            run.changed.add(rep.replica)
            if item.kind == "pods":
                pod_deleted(run, rep, item.obj)
            else:
                rep.job, rep.job_seen = item.obj, True  # its last state: Complete when deleted by its TTL
                if not rep.terminal and not _job_complete(rep):
                    rep.job_deleted = True
        else:
            upsert(run, item.kind, item.obj)


def _job_complete(rep: ReplicaState) -> bool:
    """The replica's Job says ``Complete`` (its pod succeeded; a watch on the pod may lag behind)."""
    js = rep.job_state()
    return bool(js and js.complete)


def owner(run: KubeRun, obj: dict[str, Any]) -> ReplicaState | None:
    """The replica whose *current* attempt ``obj`` belongs to (None: another job's, or an old attempt's)."""
    parsed = objects.replica_from_labels((obj.get("metadata") or {}).get("labels"))
    if parsed is None or parsed[0] not in run.replicas:
        return None
    rep = run.replicas[parsed[0]]
    return rep if parsed[1] == rep.attempt else None


def upsert(run: KubeRun, kind: str, obj: dict[str, Any]) -> None:
    """Keep the latest state of a pod or Job of a current attempt (and whether its Job was suspended after its pod
    was seen: Kueue took the admission back)."""
    rep = owner(run, obj)
    if rep is None:
        return
    run.changed.add(rep.replica)
    if kind == "pods":
        rep.pods[obj["metadata"]["name"]] = obj
    else:
        suspended = classify_job(obj).suspended
        was_running = rep.job is not None and not rep.job_state().suspended
        if not suspended:
            rep.suspended_after_pod = False
        elif was_running and rep.pods:
            rep.suspended_after_pod = True
        rep.job, rep.job_seen = obj, True


def pod_deleted(run: KubeRun, rep: ReplicaState, pod: dict[str, Any]) -> None:
    """Note a pod of ``rep`` deleted before it finished (by someone else, or preempted)."""
    run.changed.add(rep.replica)
    name = pod["metadata"]["name"]
    last = pod if pod.get("status") else rep.pods.get(name, pod)  # its final state (a DisruptionTarget)
    rep.pods[name] = last
    if classify_pod(last, run.job.restart_exit_code).terminal:
        return
    if preempted_failure(last) is not None or not _job_suspended_now(run, rep):
        rep.gone_pods.add(name)


def _job_suspended_now(run: KubeRun, rep: ReplicaState) -> bool:
    """Whether ``rep``'s Job is suspended while its pod ran, read from the API now if its watch does not say so
    yet: the Job controller deletes the pod of a Job that Kueue suspended (with no DisruptionTarget), after the
    Job's update, but the two watches have no order between them and the pod's deletion may come first."""
    if rep.suspended_after_pod:
        return True
    selector = (f"{run.selector},{objects.LABEL_REPLICA_TYPE}={rep.replica.replica_type.value},"
                f"{objects.LABEL_REPLICA_INDEX}={rep.replica.index}")
    for obj in run.api.list_jobs(selector).get("items") or []:
        upsert(run, "jobs", obj)
    return rep.suspended_after_pod


def observe(run: KubeRun, now: float) -> tuple[engine.Views, set[Replica]]:
    """The replicas as the engine reads them, observed again only where something changed: those a watch event
    was about since the last call (``run.changed``) and those whose timer is due (:func:`replica_timer`); every
    replica once the job has succeeded (failures no longer count). Follows the logs of started pods
    (:func:`~tfk8s.launcher.kubernetes.failures.follow_log`), records exit codes, says each replica's end once.

    Returns:
        ``run.views`` updated, and the replicas observed now.
    """
    views = run.views
    assert views is not None, "KubeRun.new() sets the views"
    succeeded = run.engine.success_at is not None
    todo = run.changed | run.due(now)
    if succeeded != run.observed_success:
        todo, run.observed_success = set(run.replicas), succeeded
    run.changed = set()
    for r in views.in_order(todo):
        rep = run.replicas[r]
        rep.view = rep.pod_state(run.job.restart_exit_code)
        if rep.suspended_after_pod and not rep.terminal:
            # Kueue took back the admission of a Job whose pod ran (a higher-priority workload): preempted
            rep.view = PodState(Phase.FAILED, True, True, None, Failure(
                FailureKind.PREEMPTED, "Suspended", f"Job {rep.name} was suspended while its pod ran (its "
                f"queue {run.settings.kueue_queue or '?'} preempted the workload); the recreated Jobs wait "
                f"for re-admission up to schedule_timeout_s={run.settings.schedule_timeout_s:g}s"))
        if rep.view and rep.view.scheduled and rep.scheduled_at is None:
            rep.scheduled_at = now
        if _job_complete(rep) and not rep.terminal:
            # The Job controller saw the pod succeed; the pod's own update may come late, or never (the
            # TTL controller deletes a finished Job and its pod right away).
            rep.view = PodState(Phase.SUCCEEDED, True, True, 0)
        if rep.view and rep.view.started and rep.pod_name not in run.logs:
            follow_log(run, rep)  # live, or read when it ends
        if rep.view and rep.view.terminal and not rep.reported:
            rep.reported = True
            code = rep.view.exit_code
            if code is not None:
                run.exit_codes[rep.replica.label] = code
            if rep.view.phase is Phase.SUCCEEDED:
                run.log(f"{rep.replica.label} succeeded")
            elif run.engine.success_at is not None:
                run.log(f"{rep.replica.label} failed after the job succeeded ({rep.view.failure}); ignored")
        finished = parse_time(rep.view.finished_at if rep.view else None)
        scheduled = bool(rep.view and rep.view.scheduled)
        views.set(engine.ReplicaView(
            r, terminal=rep.terminal, succeeded=bool(rep.view and rep.view.phase is Phase.SUCCEEDED),
            failure=failure_of(run, rep, now) if run.engine.success_at is None else None,
            finished_at=finished.timestamp() if finished else None,
            started=bool(rep.view and rep.view.started), created_at=rep.created_at,
            scheduled_at=rep.scheduled_at if scheduled else None, refused=rep.refused,
            lost_nodes=tuple(sorted({node for pod in rep.pods.values() if (node := lost_node(pod))}))))
        run.wake(r, replica_timer(run, rep, now))
    return views, todo


def failure_of(run: KubeRun, rep: ReplicaState, now: float) -> Failure | None:
    """How ``rep``'s current attempt failed, from its pod, its Job and its progress file (None: it has not)."""
    view = rep.view
    js = rep.job_state()
    if js and js.failed_reason == "DeadlineExceeded":  # the Job controller killed the pod: a timeout
        backstop = "" if run.job.timeout_s is not None else \
            f"={run.settings.backstop_deadline_s}, the backstop of a job without timeout_s"
        return Failure(FailureKind.TIMEOUT, js.failed_reason,
                       f"the Job {rep.name} hit its activeDeadlineSeconds{backstop}")
    if view and view.failure:
        return view.failure
    if view and view.terminal:
        return None
    if rep.gone_pods:
        gone = min(rep.gone_pods)
        return preempted_failure(rep.pods.get(gone)) or Failure(
            FailureKind.RETRYABLE, "PodDeleted", f"pod {gone} was deleted before it finished (by someone "
            f"else than the launcher, without a DisruptionTarget condition)")
    if rep.job_deleted:
        return Failure(FailureKind.PERMANENT, "JobDeleted",
                       f"Job {rep.name} was deleted by someone else while the replica ran")
    if js and js.failed_reason:
        # The pod's own status says more, and its watch event may still be on its way: give it a moment.
        rep.job_failed_at = rep.job_failed_at if rep.job_failed_at is not None else now
        if not rep.pods or now - rep.job_failed_at >= run.settings.log_wait_s:
            return Failure(FailureKind.RETRYABLE, js.failed_reason, js.failed_message)
    if view and view.started and rep.progress is not None:
        stalled = rep.progress.poll()  # reported, then nothing new for progress_timeout_s: hung
        if stalled is not None:
            return Failure(FailureKind.RETRYABLE, NO_PROGRESS, rep.progress.describe(stalled))
    return None


def check_quota(run: KubeRun, now: float) -> None:
    """Observe whether an admission refused a replica's pod for good (the ResourceQuota's ``exceeded quota``, a
    LimitRange, Pod Security, a webhook's denial, an invalid spec: :func:`~tfk8s.launcher.kubernetes.admission.
    refusal`; a webhook that timed out is no refusal): the Job controller's ``FailedCreate`` Warning event carries
    the refusal's words, kept as the replica's ``refused`` (its view's, which the engine fails at once). Looked at
    only for a Job without a pod :data:`QUOTA_CHECK_S` after its creation, every :data:`QUOTA_CHECK_S` seconds,
    with one request for all such Jobs (the namespace's ``FailedCreate`` events of Jobs), not one per replica."""
    if now - run.quota_scan_at < QUOTA_SCAN_S:
        return  # the replicas are looked at this often, not after every batch of events
    run.quota_scan_at = now
    due = [rep for rep in run.replicas.values() if not rep.pods and rep.refused is None
           and now - rep.created_at >= QUOTA_CHECK_S
           and (rep.quota_checked_at is None or now - rep.quota_checked_at >= QUOTA_CHECK_S)]
    if not due:
        return
    for rep in due:
        rep.quota_checked_at = now
    try:
        events = run.api.list_events_by_reason("FailedCreate", "Job")
    except KubernetesApiError as e:
        run.log(f"cannot list the FailedCreate events of the Jobs: {e}")
        return
    for rep in due:
        found = [e for e in events if (e.get("involvedObject") or {}).get("name") == rep.name
                 and e.get("reason") == "FailedCreate"]
        for event in reversed(found):  # the latest refusal counts
            said = refusal(event.get("message") or "", rep.replica, rep.name, run.settings.namespace)
            if said is not None:
                rep.refused = (said.reason, said.message)
                run.changed.add(rep.replica)
                break


def settle_s(run: KubeRun) -> float:
    """The engine's settle window for a group's permanent failure: ``group_settle_s``, or ``peer_lost_wait_s``
    while a replica has failed because TensorFlow lost one of its peers (``PeerLost``: the survivor of a lost
    node, whose loss the cluster reports only after ``--node-monitor-grace-period``; then that peer's
    ``NodeLost``, a preemption, is the cause)."""
    s = run.settings
    failed = run.views.failures if run.views is not None else {}
    peer_lost = any(run.replicas[r].view and (f := run.replicas[r].view.failure) and f.reason == PEER_LOST
                    for r in failed)
    return max(s.group_settle_s, s.peer_lost_wait_s) if peer_lost else s.group_settle_s


def lost_nodes(run: KubeRun, group: tuple[Replica, ...]) -> list[str]:
    """The lost nodes (:func:`~tfk8s.launcher.kubernetes.classify.lost_node`) of the group's current pods."""
    return sorted({node for r in group for pod in run.replicas[r].pods.values() if (node := lost_node(pod))})


def restart(run: KubeRun, decision: engine.Restart) -> None:
    """Act on the engine's restart: print its note, the cause's last lines and events (and its failed peers'
    last lines), delete the group's Jobs and pods, wait for the pods (and, under Kueue, the old Jobs' Workloads)
    to go, create the next attempts."""
    rep = run.replicas[decision.cause]
    group = [run.replicas[r] for r in decision.group]
    # the logs of the members not followed live, read before their pods go (and before the note, whose
    # "recreating" line separates the attempts in the kept logs)
    read_logs(run, [run.replicas[r] for r in decision.group if r != decision.cause],
              run.settings.log_wait_s + LOG_READ_S)
    run.log(decision.message)
    drain_log(run, rep)  # its last lines are in the output before its pod is deleted
    print_events(run, rep)
    for r in decision.failed:  # the peers that went down with it: their last lines, briefly
        if r != decision.cause:
            x = run.replicas[r]
            lines = drain_log(run, x).lines()[-PEER_LINES_SHOWN:]
            if lines:
                run.log(f"last lines of {x.replica.label} (failed after {rep.replica.label}):")
                for line in lines:
                    run.log(f"  {line}")
    old_pods: set[str] = set()
    lost = lost_nodes(run, decision.group)
    for x in group:
        run.api.delete_job(x.name)
        for pod, obj in x.pods.items():
            # on a lost node no kubelet will ever confirm a deletion: forced at once (grace period 0)
            run.api.delete_pod(pod, 0 if (obj.get("spec") or {}).get("nodeName") in lost else run.stop_grace_s)
        old_pods |= set(x.pods)
    if lost:
        gone = sorted(p for x in group for p, obj in x.pods.items() if (obj.get("spec") or {}).get("nodeName") in lost)
        run.log(f"node {', '.join(lost)} lost: force-deleted {', '.join(gone)} (grace period 0: no kubelet will "
                f"confirm their deletion); the recreated group goes to the other nodes")
    # The Services select a replica by type and index: let the old pods go before their successors start,
    # so that no peer resolves a replica's name to a terminating pod. One whose node is gone never goes by
    # itself: force-deleted after the grace period.
    s = run.settings
    if not wait_until(lambda: not old_pods & _pod_names(run), run.stop_grace_s + s.force_delete_after_s,
                      run.clock):
        force_delete(run, sorted(old_pods & _pod_names(run)))
        if not wait_until(lambda: not old_pods & _pod_names(run), 30, run.clock):
            run.log(f"old pods still terminating: {sorted(old_pods & _pod_names(run))}; recreating anyway")
    wait_for_old_workloads(run, [x.name for x in group])  # Kueue would take an old Workload for the new Job
    for x in group:
        run.exit_codes.pop(x.replica.label, None)
        x.reset(x.attempt + 1, run.clock())
        run.changed.add(x.replica)
        create_job(run, x)


def _pod_names(run: KubeRun) -> set[str]:
    return {p["metadata"]["name"] for p in run.api.list_pods(run.selector, metadata_only=True).get("items") or []}

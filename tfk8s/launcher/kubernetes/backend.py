"""The Kubernetes backend's wait loop: from what the watches say, decide success, restart or failure.

Semantics follow the Kubeflow Training Operator's TFJob controller; the rules are :mod:`tfk8s.core.policy`'s.
This module orchestrates; the work it calls lives beside it: creating or re-attaching to the objects
(:mod:`~tfk8s.launcher.kubernetes.creation`), what a pod's status means (:mod:`~tfk8s.launcher.kubernetes.classify`),
a failed replica's error (:mod:`~tfk8s.launcher.kubernetes.failures`) and the cleanup
(:mod:`~tfk8s.launcher.kubernetes.cleanup`).

- **Wait.** Two watches (pods and Jobs of the job, by label selector; :mod:`~tfk8s.launcher.kubernetes.watch`)
  feed one queue; the main thread applies each event, then decides. Nothing polls per replica.
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
  Job's quota refusal fails at once; ``job.timeout_s`` fails the job.
- **Logs.** Every replica's log is streamed with a ``[worker-1]`` prefix (:mod:`~tfk8s.launcher.kubernetes.logs`);
  a failed replica's last lines and the events of its pod and Job are printed before any pod is deleted.
- **Hangs** (:mod:`tfk8s.launcher.watchdog`): a started replica that reported progress in its current attempt
  and then nothing new for ``job.progress_timeout_s``, or a chief/worker with no first step
  ``job.startup_timeout_s`` after it said it was starting, is a retryable failure (``NoProgress``), as locally.
- **Cleanup** at every end (success, failure, timeout, SIGTERM or SIGINT): every object deleted and checked gone.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tfk8s.core import policy
from tfk8s.core.cluster import ReplicaType, replica_name
from tfk8s.core.job import LaunchResult, TrainingJob, is_success, job_selector
from tfk8s.launcher.kubernetes import objects
from tfk8s.launcher.kubernetes.api import KubeApi
from tfk8s.launcher.kubernetes.classify import (
    Failure,
    FailureKind,
    Phase,
    PodState,
    classify_job,
    classify_pod,
    preempted_failure,
)
from tfk8s.launcher.kubernetes.cleanup import Cleanup, wait_until
from tfk8s.launcher.kubernetes.creation import Creation
from tfk8s.launcher.kubernetes.errors import KubernetesApiError, QuotaExceededError
from tfk8s.launcher.kubernetes.failures import FailureReports
from tfk8s.launcher.kubernetes.logs import LogSink, LogStream
from tfk8s.launcher.kubernetes.settings import KubernetesSettings
from tfk8s.launcher.kubernetes.state import ReplicaState, parse_time
from tfk8s.launcher.kubernetes.watch import Changed, Synced, Watcher, WatchFailed, WatchItem
from tfk8s.launcher.stopping import stop_signals
from tfk8s.launcher.watchdog import ProgressWatch

MAX_WAIT_S = 5.0  # the main loop re-evaluates at least this often, events or not
PEER_LINES_SHOWN = 5  # last log lines shown of each peer that failed with a group's root cause
QUOTA_CHECK_S = 2.0  # a Job without a pod this long has its events checked for a quota refusal, this often
_TRAINERS = (ReplicaType.CHIEF, ReplicaType.WORKER)


class KubernetesBackend(Creation, FailureReports, Cleanup):
    """Run one training job on Kubernetes; see the module docstring. Use :meth:`run` once.

    Args:
        job: the training job (command, env, counts, port, success policy, timeout, grace period).
        settings: where and how its replicas run.
        api: the Kubernetes API adapter (namespace = ``settings.namespace``).
        log_sink: receives every output line (replica logs ``[worker-1] ...``, launcher ``[launcher] ...``);
            called from several threads, serialised here.
        clock: monotonic seconds (tests may pass their own).
    """

    def __init__(self, job: TrainingJob, settings: KubernetesSettings, api: KubeApi, log_sink: LogSink,
                 clock: Callable[[], float] = time.monotonic):
        self.job, self.settings, self.api, self._clock = job, settings, api, clock
        self._sink, self._sink_lock = log_sink, threading.RLock()  # re-entrant: the SIGTERM handler logs
        self.selector = job_selector(job.name)
        self.replicas = {r: ReplicaState(r, replica_name(job.name, r), progress=ProgressWatch.for_replica(
            job.train_dir, r.label, job.progress_timeout_s, clock,
            job.startup_timeout_s if r.replica_type in _TRAINERS else 0)) for r in job.counts.replicas()}
        self.stop_grace_s = objects.grace_seconds(job)  # SIGTERM -> SIGKILL of every pod deleted
        self._queue: queue.Queue[WatchItem] = queue.Queue()
        self._watchers: list[Watcher] = []
        self._logs: dict[str, LogStream] = {}
        self.restarts = 0  # counted against job.max_restarts
        self.preemptions = 0  # not counted
        self.exit_codes: dict[str, int] = {}
        self._start = clock()
        self._deadline: float | None = None
        self._success_at: float | None = None

    # -- output ---------------------------------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        """Send one line to the log sink (thread-safe)."""
        with self._sink_lock:
            self._sink(line)

    def log(self, message: str) -> None:
        """Send one of the launcher's own messages to the log sink."""
        self.emit(f"[launcher] {message}")

    # -- entry point --------------------------------------------------------------------------------------------------
    def run(self) -> LaunchResult:
        """Create or re-attach, wait for the outcome, and always clean up.

        Returns:
            the :class:`LaunchResult` (``restarts``: recreations used, a whole worker set counting once).

        Raises:
            PermanentFailureError, ImagePullError, ContainerConfigError, RestartBudgetExhaustedError,
            ScheduleTimeoutError: a replica failed (see :mod:`tfk8s.launcher.kubernetes.errors`).
            JobTimeoutError: ``job.timeout_s`` passed.
            LauncherTerminatedError: the launcher got SIGTERM or SIGINT (:mod:`tfk8s.launcher.stopping`).
            KubernetesApiError: an API call failed (e.g. forbidden: apply ``manifests/rbac.yaml``).
            CleanupError: the job succeeded but some of its objects could not be deleted.
        """
        error: BaseException | None = None
        with stop_signals(self.job.name, self.log, "is being deleted; rerun the step to train again") as stop:
            if not stop.caught:
                self.log("not running in the main thread: SIGTERM and SIGINT cannot be caught here, so the replicas "
                         "are cleaned up on errors but not on those signals (their ownerReferences still apply)")
            try:
                self._launch()
                return self._wait()
            except BaseException as e:
                error = e
                raise
            finally:
                stop.cleaning = True  # a second signal is noted, not obeyed: every object is deleted first
                self._cleanup(error)

    # -- wait -----------------------------------------------------------------------------------------------------
    def _wait(self) -> LaunchResult:
        while True:
            self._pump(self._next_wait_s())
            result = self._decide()
            if result is not None:
                return result

    def _next_wait_s(self) -> float:
        now, s = self._clock(), self.settings
        times = [now + MAX_WAIT_S]
        if self._success_at is not None:
            times += [self._success_at + self.job.grace_period_s, self._success_at + self.job.evaluator_grace_s]
        if self._deadline is not None:
            times.append(self._deadline)
        for rep in self.replicas.values():
            if not (rep.view and rep.view.scheduled):
                times.append(rep.created_at + s.schedule_timeout_s)
            elif rep.scheduled_at is not None and not (rep.view.started or rep.view.terminal):
                times.append(rep.scheduled_at + s.schedule_timeout_s)
            if rep.job_failed_at is not None:
                times.append(rep.job_failed_at + s.log_wait_s)
            if rep.failure_seen_at is not None and rep.failure_seen_at + s.group_settle_s > now:
                times.append(rep.failure_seen_at + s.group_settle_s)
            hung_at = rep.progress.deadline() if rep.progress is not None else None
            if hung_at is not None:
                times.append(hung_at)
        return max(0.0, min(times) - now)

    def _pump(self, timeout_s: float) -> None:
        """Apply the next watch item (waiting up to ``timeout_s`` seconds), then every item already queued."""
        try:
            item = self._queue.get(timeout=timeout_s) if timeout_s > 0 else self._queue.get_nowait()
        except queue.Empty:
            return
        while True:
            self._apply(item)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return

    def _apply(self, item: WatchItem) -> None:
        if isinstance(item, WatchFailed):
            raise item.error
        if isinstance(item, Synced):
            names = {(o.get("metadata") or {}).get("name") for o in item.items}
            for rep in self.replicas.values():
                if item.kind == "pods":
                    for name in [n for n in rep.pods if n not in names]:
                        self._pod_deleted(rep, rep.pods[name])
                elif rep.job_seen and rep.name not in names and not rep.terminal and not self._job_complete(rep):
                    rep.job_deleted = True
            for obj in item.items:
                self._upsert(item.kind, obj)
        elif isinstance(item, Changed):
            if item.type == "DELETED":
                rep = self._owner(item.obj)
                if rep is None:
                    return
                if item.kind == "pods":
                    self._pod_deleted(rep, item.obj)
                else:
                    rep.job, rep.job_seen = item.obj, True  # its last state: Complete when deleted by its TTL
                    if not rep.terminal and not self._job_complete(rep):
                        rep.job_deleted = True
            else:
                self._upsert(item.kind, item.obj)

    @staticmethod
    def _job_complete(rep: ReplicaState) -> bool:
        """The replica's Job says ``Complete`` (its pod succeeded; a watch on the pod may lag behind)."""
        js = rep.job_state()
        return bool(js and js.complete)

    def _owner(self, obj: dict[str, Any]) -> ReplicaState | None:
        """The replica whose *current* attempt ``obj`` belongs to (None: another job's, or an old attempt's)."""
        parsed = objects.replica_from_labels((obj.get("metadata") or {}).get("labels"))
        if parsed is None or parsed[0] not in self.replicas:
            return None
        rep = self.replicas[parsed[0]]
        return rep if parsed[1] == rep.attempt else None

    def _upsert(self, kind: str, obj: dict[str, Any]) -> None:
        rep = self._owner(obj)
        if rep is None:
            return
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

    def _pod_deleted(self, rep: ReplicaState, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        last = pod if pod.get("status") else rep.pods.get(name, pod)  # its final state (a DisruptionTarget)
        rep.pods[name] = last
        if classify_pod(last, self.job.restart_exit_code).terminal:
            return
        if preempted_failure(last) is not None or not self._job_suspended_now(rep):
            rep.gone_pods.add(name)

    def _job_suspended_now(self, rep: ReplicaState) -> bool:
        """Whether ``rep``'s Job is suspended while its pod ran, read from the API now if its watch does not say so
        yet: the Job controller deletes the pod of a Job that Kueue suspended (with no DisruptionTarget), after the
        Job's update, but the two watches have no order between them and the pod's deletion may come first."""
        if rep.suspended_after_pod:
            return True
        selector = (f"{self.selector},{objects.LABEL_REPLICA_TYPE}={rep.replica.replica_type.value},"
                    f"{objects.LABEL_REPLICA_INDEX}={rep.replica.index}")
        for obj in self.api.list_jobs(selector).get("items") or []:
            self._upsert("jobs", obj)
        return rep.suspended_after_pod

    def _decide(self) -> LaunchResult | None:
        """Look at every replica and act: success, restart, or raise the failure."""
        now = self._clock()
        for rep in self.replicas.values():
            rep.view = rep.pod_state(self.job.restart_exit_code)
            if rep.suspended_after_pod and not rep.terminal:
                # Kueue took back the admission of a Job whose pod ran (a higher-priority workload): preempted
                rep.view = PodState(Phase.FAILED, True, True, None, Failure(
                    FailureKind.PREEMPTED, "Suspended", f"Job {rep.name} was suspended while its pod ran (its "
                    f"queue {self.settings.kueue_queue or '?'} preempted the workload); the recreated Jobs wait "
                    f"for re-admission up to schedule_timeout_s={self.settings.schedule_timeout_s:g}s"))
            if rep.view and rep.view.scheduled and rep.scheduled_at is None:
                rep.scheduled_at = now
            if self._job_complete(rep) and not rep.terminal:
                # The Job controller saw the pod succeed; the pod's own update may come late, or never (the
                # TTL controller deletes a finished Job and its pod right away).
                rep.view = PodState(Phase.SUCCEEDED, True, True, 0)
            if rep.view and rep.view.started and rep.pod_name not in self._logs:
                self._follow_log(rep)
            if rep.view and rep.view.terminal and not rep.reported:
                rep.reported = True
                code = rep.view.exit_code
                if code is not None:
                    self.exit_codes[rep.replica.label] = code
                if rep.view.phase is Phase.SUCCEEDED:
                    self.log(f"{rep.replica.label} succeeded")
                elif self._success_at is not None:
                    self.log(f"{rep.replica.label} failed after the job succeeded ({rep.view.failure}); ignored")
        if self._success_at is None:
            succeeded = {r for r, rep in self.replicas.items() if rep.view and rep.view.phase is Phase.SUCCEEDED}
            if is_success(self.job.success_policy, self.job.counts, succeeded):
                self._success_at = now
                self.log(f"{self.job.name} succeeded in {now - self._start:.1f}s")
        if self._success_at is not None:
            since = now - self._success_at
            lagging = [rep for r, rep in self.replicas.items() if r.replica_type in _TRAINERS and not rep.terminal]
            evaluating = [rep for r, rep in self.replicas.items() if r.replica_type is ReplicaType.EVALUATOR
                          and not rep.terminal]
            if not ((lagging and since < self.job.grace_period_s)
                    or (evaluating and since < self.job.evaluator_grace_s)):
                return self._result()
            return None
        if self._deadline is not None and now >= self._deadline:
            raise self._timeout_error("")
        failures = {rep: f for rep in self.replicas.values() if (f := self._failure(rep, now)) is not None}
        for rep, failure in failures.items():
            if failure.kind is FailureKind.TIMEOUT:
                raise self._timeout_error(f"the Job {rep.name} hit its activeDeadlineSeconds")
        for rep in failures:
            if rep.failure_seen_at is None:
                rep.failure_seen_at = now
        for rep, own in failures.items():
            # A failure brings down the replicas that depend on it (MWMS peers, the PSS coordinator), which then
            # fail too (exit 1): judge the failures of the group together, and a retryable one wins.
            group = self._decision_group(rep)
            failed = [x for x in group if x in failures]
            retryable = [x for x in failed if failures[x].retryable]
            cause = min(retryable or failed, key=self._failed_order)
            failure = failures[cause]
            if failure.retryable and (failure.preempted or self.restarts < self.job.max_restarts):
                self._restart(cause, failure, failed)
                return None
            # The kubelet often reports the peers' follow-on exit 1s before the root cause's own status (an
            # OOMKilled member): a permanent failure in a group waits group_settle_s for the members still
            # running, whose failure may yet be the retryable cause.
            pending = [x for x in group if x not in failures and not x.terminal]
            first_seen = min((x.failure_seen_at for x in failed if x.failure_seen_at is not None), default=now)
            if (failure.kind is FailureKind.PERMANENT and pending
                    and now - first_seen < self.settings.group_settle_s):
                if rep.failure_seen_at == now:
                    self._note_settling(rep, own, pending)
                continue
            raise self._replica_error(cause, failure)
        self._check_quota(now)
        timeout = self.settings.schedule_timeout_s
        for rep in self.replicas.values():
            view = rep.view
            if not (view and view.scheduled):
                if now - rep.created_at >= timeout:
                    raise self._schedule_error(rep)
            elif (not (view.started or view.terminal) and rep.scheduled_at is not None
                  and now - rep.scheduled_at >= timeout):
                raise self._start_error(rep)
        return None

    def _check_quota(self, now: float) -> None:
        """Fail at once when the ResourceQuota admission refused a replica's pod: the Job controller's
        ``FailedCreate`` Warning event carries the quota's words (``exceeded quota: ...``). Looked at only for a
        Job without a pod :data:`QUOTA_CHECK_S` after its creation, every :data:`QUOTA_CHECK_S` seconds, with one
        request for all such Jobs (the namespace's ``FailedCreate`` events of Jobs), not one per replica."""
        due = [rep for rep in self.replicas.values() if not rep.pods and now - rep.created_at >= QUOTA_CHECK_S
               and (rep.quota_checked_at is None or now - rep.quota_checked_at >= QUOTA_CHECK_S)]
        if not due:
            return
        for rep in due:
            rep.quota_checked_at = now
        try:
            events = self.api.list_events_by_reason("FailedCreate", "Job")
        except KubernetesApiError as e:
            self.log(f"cannot list the FailedCreate events of the Jobs: {e}")
            return
        for rep in due:
            refused = [e for e in events if (e.get("involvedObject") or {}).get("name") == rep.name
                       and e.get("reason") == "FailedCreate" and "exceeded quota" in (e.get("message") or "")]
            if refused:
                self._print_events(rep)
                message = refused[-1].get("message") or ""
                raise QuotaExceededError(rep.replica, "QuotaExceeded", None, (),
                                         f"{message}; the Job controller cannot create the pod of {rep.name}: the "
                                         f"namespace's ResourceQuota is smaller than the job: raise it (kubectl "
                                         f"describe resourcequota -n {self.settings.namespace}), lower the "
                                         f"replicas' requests (cpu, memory, gpus) or run fewer replicas")

    def _note_settling(self, rep: ReplicaState, failure: Failure, peers: list[ReplicaState]) -> None:
        """Say that ``rep``'s failure waits for its group's other members (``peers``) before it is decided."""
        code = f" with exit code {failure.exit_code}" if failure.exit_code is not None else ""
        self.log(f"{rep.replica.label} failed{code}: {failure.reason}; waiting up to "
                 f"{self.settings.group_settle_s:g}s for {', '.join(x.replica.label for x in peers)} (a retryable "
                 f"failure among them would be the cause, and the group recreated)")

    def _failure(self, rep: ReplicaState, now: float) -> Failure | None:
        view = rep.view
        js = rep.job_state()
        if js and js.failed_reason == "DeadlineExceeded":  # the Job controller killed the pod: a timeout
            return Failure(FailureKind.TIMEOUT, js.failed_reason, js.failed_message)
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
            if not rep.pods or now - rep.job_failed_at >= self.settings.log_wait_s:
                return Failure(FailureKind.RETRYABLE, js.failed_reason, js.failed_message)
        if view and view.started and rep.progress is not None:
            stalled = rep.progress.poll()  # reported, then nothing new for progress_timeout_s: hung
            if stalled is not None:
                return Failure(FailureKind.RETRYABLE, policy.NO_PROGRESS, rep.progress.describe(stalled))
        return None

    def _result(self) -> LaunchResult:
        stopped = [rep.replica.label for rep in self.replicas.values() if not rep.terminal]
        if stopped:
            self.log(f"stopping the remaining replicas: {', '.join(stopped)}")
        assert self._success_at is not None
        return LaunchResult(self.job.name, dict(self.exit_codes), stopped, self._success_at - self._start,
                            self.restarts, objects.training_cluster_spec(self.job, self.settings), self.preemptions)

    # -- restart ---------------------------------------------------------------------------------------------------
    def _decision_group(self, rep: ReplicaState) -> list[ReplicaState]:
        """The replicas whose failures are judged together with ``rep``'s (:func:`policy.decision_group`)."""
        return [self.replicas[r] for r in policy.decision_group(self.job.counts, rep.replica)]

    def _restart_group(self, rep: ReplicaState) -> list[ReplicaState]:
        """The replicas to recreate with ``rep`` (:func:`policy.restart_group`)."""
        return [self.replicas[r] for r in policy.restart_group(self.job.counts, rep.replica)]

    def _failed_order(self, rep: ReplicaState) -> tuple[datetime, int]:
        """Sort key: the earliest failure first (the container's ``finishedAt``; unknown: last), then by
        replica order."""
        finished = parse_time(rep.view.finished_at if rep.view else None)
        return (finished or datetime.max.replace(tzinfo=UTC), list(self.replicas.values()).index(rep))

    def _restart(self, rep: ReplicaState, failure: Failure, failed: list[ReplicaState] | None = None) -> None:
        """Recreate ``rep``'s restart group (and the other ``failed`` replicas of its decision group): one
        restart of the budget, or for a preemption none."""
        failed = failed or []
        restart = self._restart_group(rep)
        group = [x for x in self.replicas.values() if x in restart or x in failed]
        if failure.preempted:
            self.preemptions += 1
            note, what = policy.preemption_note(self.preemptions, self.job.max_restarts), "preempted"
        else:
            self.restarts += 1
            note, what = policy.restart_note(self.restarts, self.job.max_restarts), "retryable"
        code = f" with exit code {failure.exit_code}" if failure.exit_code is not None else ""
        also = ", ".join(x.replica.label for x in failed if x is not rep)
        self.log(f"{rep.replica.label} failed{code}: {failure.reason}"
                 f"{f' ({failure.message})' if failure.message else ''}"
                 f"{f' (then {also} failed too)' if also else ''}; {what}: recreating "
                 f"{', '.join(x.replica.label for x in group)} {note}")
        self._drain_log(rep)  # its last lines are in the output before its pod is deleted
        self._print_events(rep)
        for x in failed:  # the peers that went down with it: their last lines, briefly
            if x is not rep:
                lines = self._drain_log(x).lines()[-PEER_LINES_SHOWN:]
                if lines:
                    self.log(f"last lines of {x.replica.label} (failed after {rep.replica.label}):")
                    for line in lines:
                        self.log(f"  {line}")
        old_pods: set[str] = set()
        for x in group:
            self.api.delete_job(x.name)
            for pod in x.pods:
                self.api.delete_pod(pod, self.stop_grace_s)
            old_pods |= set(x.pods)
        # The Services select a replica by type and index: let the old pods go before their successors start,
        # so that no peer resolves a replica's name to a terminating pod. One whose node is gone never goes by
        # itself: force-deleted after the grace period.
        s = self.settings
        if not wait_until(lambda: not old_pods & self._pod_names(), self.stop_grace_s + s.force_delete_after_s,
                           self._clock):
            self._force_delete(sorted(old_pods & self._pod_names()))
            if not wait_until(lambda: not old_pods & self._pod_names(), 30, self._clock):
                self.log(f"old pods still terminating: {sorted(old_pods & self._pod_names())}; recreating anyway")
        for x in group:
            self.exit_codes.pop(x.replica.label, None)
            x.reset(x.attempt + 1, self._clock())
            self._create_job(x)

    def _pod_names(self) -> set[str]:
        return {p["metadata"]["name"] for p in self.api.list_pods(self.selector).get("items") or []}

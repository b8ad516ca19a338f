"""The Kubernetes backend: create (or re-attach to) a training job's replicas, watch them, decide, clean up.

Semantics follow the Kubeflow Training Operator's TFJob controller:

- **Create / re-attach.** Every replica gets a headless Service and a Job named ``<job>-<type>-<index>``
  (:mod:`tfk8s.kube.objects`), created a few at a time concurrently (:mod:`tfk8s.kube.parallel`). The job name is derived from the pipeline run, so a restarted launcher finds
  the Jobs of its predecessor by label, adopts them (their attempt numbers and the restart budget already
  used, from the ``tfk8s.dev/restarts`` annotation) and creates only what is missing.
- **Wait.** Two watches (pods and Jobs of the job, by label selector; :mod:`tfk8s.kube.watch`) feed one
  queue; the main thread applies each event, then decides. Nothing polls per replica.
- **Success** (``SuccessPolicy``): the chief succeeded (worker 0 without a chief), or with ``AllWorkers``
  every chief/worker did; ps and evaluator never count. Then lagging workers and the evaluator get
  ``job.grace_period_s`` seconds to finish by themselves; whatever still runs (ps, laggards) is stopped.
- **Failure** (:mod:`tfk8s.kube.classify`): exit codes 1-127 are permanent; >= 128, OOMKilled, evictions,
  preemptions, node loss and a pod deleted under the job are retryable: the replica is recreated (under
  MultiWorkerMirroredStrategy the whole chief/worker set, since a collective cannot lose a member; under
  ParameterServerStrategy a ps with the chief and every ps, since the coordinator loses its variables) while
  ``max_restarts`` lasts; every recreation uses one restart. The failures of such a group are judged
  together: a retryable one wins over its peers' follow-on exit 1s (a permanent one waits up to
  ``group_settle_s`` for the members still running, whose status may come later); else the earliest failure
  is reported. Image pull and container config errors fail at
  once with the kubelet's message; a replica unscheduled after ``schedule_timeout_s`` fails with the
  scheduler's message, one scheduled but not started ``schedule_timeout_s`` later with the kubelet's Warning
  event (FailedMount...); ``job.timeout_s`` fails the job.
- **Logs.** Every replica's log is streamed with a ``[worker-1]`` prefix (:mod:`tfk8s.kube.logs`); a failed
  replica's last lines and the events of its pod and Job are printed, always before any pod is deleted.
- **Hangs** (:mod:`tfk8s.launcher.watchdog`): a started replica that reported progress in its current attempt
  and then nothing new for ``job.progress_timeout_s`` is a retryable failure (``NoProgress``), as locally.
- **Cleanup.** At every end (success, failure, timeout, SIGTERM) all Jobs, Services and pods of the job are
  deleted (pods with ``stop_grace_period_s``, a short SIGTERM -> SIGKILL bound) and the launcher checks that
  none remain (:class:`~tfk8s.kube.errors.CleanupError` otherwise). A pod still there
  ``force_delete_after_s`` past its grace period (its node is gone: its deletionTimestamp stays forever) is
  force-deleted (grace period 0), at cleanup and before a restart recreates its replica; a pod still listed
  although its deletion was accepted is a warning with the ``kubectl delete pod --grace-period=0 --force``
  command, not a failure of a job that succeeded.
"""

from __future__ import annotations

import math
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tfk8s.cluster import Replica, ReplicaType, replica_name
from tfk8s.kube import objects
from tfk8s.kube.api import KubeApi
from tfk8s.kube.classify import Failure, FailureKind, Phase, PodState, classify_job, classify_pod
from tfk8s.kube.errors import (
    AlreadyExistsError,
    CleanupError,
    ContainerConfigError,
    ImagePullError,
    KubernetesApiError,
    LauncherTerminatedError,
    PermanentFailureError,
    QuotaExceededError,
    RestartBudgetExhaustedError,
    ScheduleTimeoutError,
)
from tfk8s.kube.logs import LogSink, LogStream
from tfk8s.kube.parallel import run_all
from tfk8s.kube.settings import KubernetesSettings
from tfk8s.kube.watch import Changed, Synced, Watcher, WatchFailed, WatchItem
from tfk8s.launcher import JobTimeoutError, LaunchResult, ReplicaFailedError, TrainingJob, is_success, policy
from tfk8s.launcher.watchdog import ProgressWatch

MAX_WAIT_S = 5.0  # the main loop re-evaluates at least this often, events or not
CLEANUP_POLL_S = 0.5
EVENTS_SHOWN = 10
PEER_LINES_SHOWN = 5  # last log lines shown of each peer that failed with a group's root cause
QUOTA_CHECK_S = 2.0  # a Job without a pod this long has its events checked for a quota refusal, this often
_ERROR_CLASSES: dict[FailureKind, type[ReplicaFailedError]] = {
    FailureKind.PERMANENT: PermanentFailureError,
    FailureKind.IMAGE_PULL: ImagePullError,
    FailureKind.CONTAINER_CONFIG: ContainerConfigError,
    FailureKind.RETRYABLE: RestartBudgetExhaustedError,
}


@dataclass(eq=False)  # identity: used as a dict key
class _Replica:
    """What the launcher knows about one replica's current attempt."""

    replica: Replica
    name: str
    attempt: int = 0
    created_at: float = 0.0  # monotonic seconds when this attempt's Job was created or adopted
    scheduled_at: float | None = None  # monotonic seconds when its pod was first seen bound to a node
    job: dict[str, Any] | None = None
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> latest state, this attempt only
    gone_pods: set[str] = field(default_factory=set)  # deleted by someone else before they finished
    job_seen: bool = False
    job_deleted: bool = False
    job_failed_at: float | None = None
    failure_seen_at: float | None = None  # monotonic seconds when the launcher first saw this attempt fail
    quota_checked_at: float | None = None  # monotonic seconds of the last look for a quota refusal
    reported: bool = False
    view: PodState | None = None
    progress: ProgressWatch | None = None  # its progress file (tfk8s.launcher.watchdog)

    def pod(self) -> dict[str, Any] | None:
        """The attempt's newest pod (a Job with backoffLimit 0 has one, unless it was replaced)."""
        if not self.pods:
            return None
        return max(self.pods.values(), key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")

    @property
    def pod_name(self) -> str:
        pod = self.pod()
        return (pod or {}).get("metadata", {}).get("name", "")

    @property
    def terminal(self) -> bool:
        return bool(self.view and self.view.terminal)

    def reset(self, attempt: int, now: float) -> None:
        """Start tracking a new attempt (created at monotonic time ``now``)."""
        self.attempt, self.created_at = attempt, now
        self.job, self.pods, self.gone_pods = None, {}, set()
        self.job_seen = self.job_deleted = self.reported = False
        self.job_failed_at, self.view, self.scheduled_at = None, None, None
        self.failure_seen_at = self.quota_checked_at = None
        if self.progress is not None:
            self.progress.new_attempt()


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


class KubernetesBackend:
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
        self.selector = objects.job_selector(job.name)
        self.replicas = {r: _Replica(r, replica_name(job.name, r), progress=ProgressWatch.for_replica(
            job.train_dir, r.label, job.progress_timeout_s, clock)) for r in job.counts.replicas()}
        self._queue: queue.Queue[WatchItem] = queue.Queue()
        self._watchers: list[Watcher] = []
        self._logs: dict[str, LogStream] = {}
        self.restarts = 0
        self.exit_codes: dict[str, int] = {}
        self._start = clock()
        self._deadline: float | None = None
        self._success_at: float | None = None
        self._terminating = False
        self._in_cleanup = False

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
            ScheduleTimeoutError: a replica failed (see :mod:`tfk8s.kube.errors`).
            JobTimeoutError: ``job.timeout_s`` passed.
            LauncherTerminatedError: the launcher got SIGTERM.
            KubernetesApiError: an API call failed (e.g. forbidden: apply ``manifests/rbac.yaml``).
            CleanupError: the job succeeded but some of its objects could not be deleted.
        """
        error: BaseException | None = None
        with self._sigterm_raises():
            try:
                self._launch()
                return self._wait()
            except BaseException as e:
                error = e
                raise
            finally:
                self._cleanup(error)

    @contextmanager
    def _sigterm_raises(self) -> Iterator[None]:
        """Turn SIGTERM into :class:`LauncherTerminatedError` while the launcher runs (main thread only), so
        that the cleanup runs; a second SIGTERM during the cleanup is ignored. The previous handler is
        restored afterwards."""
        if threading.current_thread() is not threading.main_thread():
            self.log("not running in the main thread: SIGTERM cannot be caught here, so the replicas are "
                     "cleaned up on errors but not on SIGTERM (their ownerReferences still apply)")
            yield
            return

        def handler(signum: int, frame: Any) -> None:
            if self._terminating or self._in_cleanup:
                self.log("SIGTERM again: the cleanup is already running")
                return
            self._terminating = True
            raise LauncherTerminatedError(
                f"the launcher got SIGTERM (the pipeline run was cancelled or its pod evicted): every replica "
                f"of {self.job.name} is being deleted; rerun the step to train again")

        previous = signal.signal(signal.SIGTERM, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)

    # -- create / re-attach ---------------------------------------------------------------------------------------
    def _launch(self) -> None:
        s, job = self.settings, self.job
        if s.launcher_pod is None:
            self.log("TFK8S_LAUNCHER_POD_NAME/TFK8S_LAUNCHER_POD_UID are not set: the replica objects get no "
                     "ownerReferences, so deleting the pipeline run will not garbage-collect them (the launcher "
                     "still deletes them itself)")
        elif s.owner is None:
            self.log(f"the launcher pod is in namespace {s.launcher_pod.namespace}, the replicas in "
                     f"{s.namespace}: no ownerReferences (an owner must be in the same namespace)")
        existing = self.api.list_jobs(self.selector).get("items") or []
        adopted: dict[Replica, int] = {}
        for obj in existing:
            parsed = objects.replica_from_labels((obj.get("metadata") or {}).get("labels"))
            if parsed and parsed[0] in self.replicas:
                adopted[parsed[0]] = parsed[1]
                annotations = (obj.get("metadata") or {}).get("annotations") or {}
                try:
                    self.restarts = max(self.restarts, int(annotations.get(objects.ANNOTATION_RESTARTS, "0")))
                except ValueError:
                    pass
        if job.timeout_s:
            started = [t for t in (_parse_time((o.get("metadata") or {}).get("creationTimestamp"))
                                   for o in existing) if t]
            elapsed = max(0.0, (datetime.now(UTC) - min(started)).total_seconds()) if started else 0.0
            self._deadline = self._start + job.timeout_s - elapsed
        spec = objects.training_cluster_spec(job, s)
        if adopted:
            self.log(f"re-attaching to {len(adopted)} existing Jobs of {job.name} in namespace {s.namespace} "
                     f"(restarts used so far: {self.restarts} of {s.max_restarts})")
        else:
            self.log(f"launching {job.name} in namespace {s.namespace}: {job.counts.total} replicas, "
                     f"cluster spec {spec}")
        self.log(f"find its objects with: kubectl get {self._kinds()} -n {s.namespace} -l {self.selector}")
        self._create_job_level()

        def create_service(r: Replica) -> bool:
            try:
                self.api.create_service(objects.service_manifest(job, r, s))
                return False
            except AlreadyExistsError:
                return True  # created by a previous launcher of this run

        # Concurrently (tfk8s.kube.parallel): 2 requests per replica, a few in flight at a time.
        existing_services = any(run_all(create_service, list(self.replicas)))
        ours = [o for o in existing
                if (objects.replica_from_labels((o.get("metadata") or {}).get("labels")) or (None,))[0]
                in self.replicas]
        self._adopt("Job", ours, self.api.set_job_owners)
        if existing_services:
            self._adopt("Service", self.api.list_services(self.selector).get("items") or [],
                        self.api.set_service_owners)
        next_attempt = max(adopted.values(), default=-1) + 1
        now = self._clock()
        missing = []
        for r, rep in self.replicas.items():
            if r in adopted:
                rep.reset(adopted[r], now)
            else:
                rep.reset(next_attempt if adopted else 0, now)
                missing.append(rep)
        run_all(self._create_job, missing)
        for kind, lister, watcher in (("pods", self.api.list_pods, self.api.watch_pods),
                                      ("jobs", self.api.list_jobs, self.api.watch_jobs)):
            w = Watcher(kind, lambda lister=lister: lister(self.selector),
                        lambda rv, t, watcher=watcher: watcher(self.selector, rv, t), self._queue,
                        timeout_s=s.watch_timeout_s)
            self._watchers.append(w)
            w.start()

    def _job_level(self) -> list[tuple[str, Callable[..., Any], Callable[..., Any], Callable[..., Any],
                                       Callable[..., Any]]]:
        """``(kind, create, list, delete, set owners)`` of each job-level object kind the settings ask for."""
        api, s, kinds = self.api, self.settings, []
        if s.network_policy:
            kinds.append(("NetworkPolicy", api.create_network_policy, api.list_network_policies,
                          api.delete_network_policy, api.set_network_policy_owners))
        if s.gang == "native":
            kinds.append(("PodGroup", api.create_pod_group, api.list_pod_groups, api.delete_pod_group,
                          api.set_pod_group_owners))
        return kinds

    def _create_job_level(self) -> None:
        """Create the NetworkPolicy and PodGroup (before any pod exists: a pod is isolated from its first
        packet, and the gang is known before its first member is scheduled); adopt those of a previous
        launcher."""
        manifests = {m["kind"]: m for m in objects.job_level_manifests(self.job, self.settings)}
        for kind, create, lister, _, set_owners in self._job_level():
            try:
                create(manifests[kind])
                if kind == "NetworkPolicy":
                    self.log(f"NetworkPolicy {self.job.name}: ingress to port {self.job.port} of the replicas only "
                             f"from pods of {self.job.name}"
                             f"{' and network_policy_from' if self.settings.network_policy_from else ''}")
                else:
                    self.log(f"PodGroup {self.job.name}: gang scheduling, none of the {self.job.counts.total} "
                             f"replicas is bound to a node unless all can be")
            except AlreadyExistsError:
                self._adopt(kind, lister(self.selector).get("items") or [], set_owners)

    def _adopt(self, kind: str, found: list[dict[str, Any]],
               set_owners: Callable[[str, list[dict[str, Any]]], bool]) -> None:
        """Make this launcher's pod the owner of the ``found`` objects a previous launcher created: the garbage
        collector would delete them with the previous launcher's pod."""
        refs = objects.owner_references(self.settings)
        moved = []
        for obj in found:
            meta = obj.get("metadata") or {}
            owners = [r.get("uid") for r in meta.get("ownerReferences") or []]
            if owners != [r["uid"] for r in refs] and set_owners(meta["name"], refs):
                moved.append(meta["name"])
        if moved:
            owner = f"launcher pod {refs[0]['name']}" if refs else "no owner (see above)"
            self.log(f"re-attached {kind}s now owned by {owner}: {', '.join(sorted(moved))}")

    def _create_job(self, rep: _Replica) -> None:
        """Create the Job of ``rep``'s current attempt, retrying while its deleted predecessor still exists."""
        if self._deadline is not None:
            active = max(1, math.ceil(self._deadline - self._clock()))
        else:
            active = objects.default_active_deadline_s(self.job, self.settings)
        body = objects.job_manifest(self.job, rep.replica, self.settings, attempt=rep.attempt,
                                    restarts=self.restarts, active_deadline_s=active)
        give_up = self._clock() + self.settings.create_retry_s
        while True:
            try:
                self.api.create_job(body)
                break
            except AlreadyExistsError:
                if self._clock() >= give_up:
                    raise KubernetesApiError(
                        f"Job {rep.name} still exists {self.settings.create_retry_s:.0f}s after it was deleted; "
                        f"delete it (kubectl delete job -n {self.settings.namespace} {rep.name}) and rerun",
                        409) from None
                time.sleep(CLEANUP_POLL_S)  # the old Job is terminating; nothing to watch for its name
        rep.created_at = self._clock()

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
            times.append(self._success_at + self.job.grace_period_s)
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
    def _job_complete(rep: _Replica) -> bool:
        """The replica's Job says ``Complete`` (its pod succeeded; a watch on the pod may lag behind)."""
        return bool(rep.job and classify_job(rep.job).complete)

    def _owner(self, obj: dict[str, Any]) -> _Replica | None:
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
            rep.job, rep.job_seen = obj, True

    def _pod_deleted(self, rep: _Replica, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        last = rep.pods.get(name, pod)
        rep.pods[name] = last
        if not classify_pod(last).terminal:
            rep.gone_pods.add(name)

    def _decide(self) -> LaunchResult | None:
        """Look at every replica and act: success, restart, or raise the failure."""
        now = self._clock()
        for rep in self.replicas.values():
            pod = rep.pod()
            rep.view = classify_pod(pod) if pod else None
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
            lagging = [rep for r, rep in self.replicas.items() if r.replica_type is not ReplicaType.PS
                       and not rep.terminal]
            if not lagging or now - self._success_at >= self.job.grace_period_s:
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
            if failure.retryable and self.restarts < self.settings.max_restarts:
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

    def _note_settling(self, rep: _Replica, failure: Failure, peers: list[_Replica]) -> None:
        """Say that ``rep``'s failure waits for its group's other members (``peers``) before it is decided."""
        code = f" with exit code {failure.exit_code}" if failure.exit_code is not None else ""
        self.log(f"{rep.replica.label} failed{code}: {failure.reason}; waiting up to "
                 f"{self.settings.group_settle_s:g}s for {', '.join(x.replica.label for x in peers)} (a retryable "
                 f"failure among them would be the cause, and the group recreated)")

    def _failure(self, rep: _Replica, now: float) -> Failure | None:
        view = rep.view
        js = classify_job(rep.job) if rep.job else None
        if js and js.failed_reason == "DeadlineExceeded":  # the Job controller killed the pod: a timeout
            return Failure(FailureKind.TIMEOUT, js.failed_reason, js.failed_message)
        if view and view.failure:
            return view.failure
        if view and view.terminal:
            return None
        if rep.gone_pods:
            return Failure(FailureKind.RETRYABLE, "PodDeleted",
                           f"pod {min(rep.gone_pods)} was deleted before it finished (preemption, node loss "
                           f"or a manual delete)")
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
                            self.restarts, objects.training_cluster_spec(self.job, self.settings))

    # -- restart ---------------------------------------------------------------------------------------------------
    def _decision_group(self, rep: _Replica) -> list[_Replica]:
        """The replicas whose failures are judged together with ``rep``'s (:func:`policy.decision_group`)."""
        return [self.replicas[r] for r in policy.decision_group(self.job.counts, rep.replica)]

    def _restart_group(self, rep: _Replica) -> list[_Replica]:
        """The replicas to recreate with ``rep`` (:func:`policy.restart_group`)."""
        return [self.replicas[r] for r in policy.restart_group(self.job.counts, rep.replica)]

    def _failed_order(self, rep: _Replica) -> tuple[datetime, int]:
        """Sort key: the earliest failure first (the container's ``finishedAt``; unknown: last), then by
        replica order."""
        finished = _parse_time(rep.view.finished_at if rep.view else None)
        return (finished or datetime.max.replace(tzinfo=UTC), list(self.replicas.values()).index(rep))

    def _restart(self, rep: _Replica, failure: Failure, failed: list[_Replica] | None = None) -> None:
        """Recreate ``rep``'s restart group (and the other ``failed`` replicas of its decision group): one
        restart of the budget."""
        failed = failed or []
        restart = self._restart_group(rep)
        group = [x for x in self.replicas.values() if x in restart or x in failed]
        self.restarts += 1
        code = f" with exit code {failure.exit_code}" if failure.exit_code is not None else ""
        also = ", ".join(x.replica.label for x in failed if x is not rep)
        self.log(f"{rep.replica.label} failed{code}: {failure.reason}"
                 f"{f' ({failure.message})' if failure.message else ''}"
                 f"{f' (then {also} failed too)' if also else ''}; retryable: recreating "
                 f"{', '.join(x.replica.label for x in group)} (restart {self.restarts} of "
                 f"{self.settings.max_restarts})")
        self._drain_log(rep)  # its last lines are in the output before its pod is deleted
        self._print_events(rep)
        for x in failed:  # the peers that went down with it: their last lines, briefly
            if x is not rep:
                lines = self._drain_log(x)[-PEER_LINES_SHOWN:]
                if lines:
                    self.log(f"last lines of {x.replica.label} (failed after {rep.replica.label}):")
                    for line in lines:
                        self.log(f"  {line}")
        old_pods: set[str] = set()
        for x in group:
            self.api.delete_job(x.name)
            for pod in x.pods:
                self.api.delete_pod(pod, self.settings.stop_grace_period_s)
            old_pods |= set(x.pods)
        # The Services select a replica by type and index: let the old pods go before their successors start,
        # so that no peer resolves a replica's name to a terminating pod. One whose node is gone never goes by
        # itself: force-deleted after the grace period.
        s = self.settings
        if not _wait_until(lambda: not old_pods & self._pod_names(), s.stop_grace_period_s + s.force_delete_after_s,
                           self._clock):
            self._force_delete(sorted(old_pods & self._pod_names()))
            if not _wait_until(lambda: not old_pods & self._pod_names(), 30, self._clock):
                self.log(f"old pods still terminating: {sorted(old_pods & self._pod_names())}; recreating anyway")
        for x in group:
            self.exit_codes.pop(x.replica.label, None)
            x.reset(x.attempt + 1, self._clock())
            self._create_job(x)

    def _pod_names(self) -> set[str]:
        return {p["metadata"]["name"] for p in self.api.list_pods(self.selector).get("items") or []}

    # -- failure reports -------------------------------------------------------------------------------------------
    def _follow_log(self, rep: _Replica) -> None:
        pod = rep.pod_name
        stream = LogStream(rep.replica.label, pod, lambda: self.api.open_log(pod, objects.CONTAINER_NAME),
                           self.emit, self.settings.log_tail_lines)
        self._logs[pod] = stream
        stream.start()

    def _drain_log(self, rep: _Replica) -> list[str]:
        """The failed replica's last log lines, captured before its pod is deleted."""
        pod = rep.pod_name
        if not pod:
            return []
        lines: list[str] = []
        stream = self._logs.get(pod)
        if stream is None and rep.view and rep.view.started:
            self._follow_log(rep)
            stream = self._logs[pod]
        if stream is not None:
            stream.drain(self.settings.log_wait_s)
            lines = list(stream.tail)
        if not lines and rep.view and rep.view.started:
            try:
                lines = self.api.read_log_tail(pod, objects.CONTAINER_NAME, self.settings.log_tail_lines)
            except KubernetesApiError as e:
                self.log(f"cannot read the log of {rep.replica.label}: {e}")
        if not lines:  # terminationMessagePolicy FallbackToLogsOnError keeps the log's tail here
            for cs in ((rep.pod() or {}).get("status") or {}).get("containerStatuses") or []:
                message = ((cs.get("state") or {}).get("terminated") or {}).get("message") or ""
                lines = message.splitlines()
        return lines[-self.settings.log_tail_lines:]

    def _print_events(self, rep: _Replica) -> list[dict[str, Any]]:
        """Print (and return) the latest events of the replica's pod and Job."""
        found: list[dict[str, Any]] = []
        for name in [n for n in (rep.pod_name, rep.name) if n]:
            try:
                found += self.api.list_events(name)
            except KubernetesApiError as e:
                self.log(f"cannot list the events of {name}: {e}")
        found.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        for e in found[-EVENTS_SHOWN:]:
            obj = e.get("involvedObject") or {}
            self.log(f"event {e.get('type', '')} {e.get('reason', '')} {obj.get('kind', '')}/{obj.get('name', '')}:"
                     f" {e.get('message', '')}")
        return found

    def _replica_error(self, rep: _Replica, failure: Failure) -> ReplicaFailedError:
        lines = self._drain_log(rep)
        self._print_events(rep)
        cls = _ERROR_CLASSES[failure.kind]
        label = rep.replica.label
        rtype = rep.replica.replica_type.value
        if failure.kind is FailureKind.IMAGE_PULL:
            advice = ("check the image name and tag, that the nodes can reach the registry, and the "
                      "imagePullSecrets of the service account")
        elif failure.kind is FailureKind.CONTAINER_CONFIG:
            advice = "fix the pod's configuration (a missing Secret or ConfigMap, an invalid command or env)"
        elif failure.reason == "JobDeleted":
            advice = "rerun the step"
        elif failure.kind is FailureKind.PERMANENT and failure.reason in ("StartError", "ContainerCannotRun"):
            advice = "check the command and that the image contains it"
        elif failure.kind is FailureKind.PERMANENT:
            advice = (f"the training program of {label} exited with an error (exit codes 1-127 are not retried): "
                      f"see its last log lines")
        elif failure.reason == "OOMKilled":
            limit = self.settings.replica(rtype).memory_limit or self.settings.replica(rtype).memory
            advice = (f"{label} ran out of its memory limit {limit} after {self.restarts} restarts: raise memory "
                      f"(replica_overrides {{\"{rtype}\": {{\"memory\": \"...\"}}}}) or lower the batch size")
        else:
            advice = (f"retryable, but the restart budget is used up ({self.restarts} of max_restarts="
                      f"{self.settings.max_restarts}): check the nodes' health, or raise max_restarts")
        detail = f"{failure.message}; {advice}" if failure.message else advice
        return cls(rep.replica, failure.reason, failure.exit_code, lines, detail)

    def _schedule_error(self, rep: _Replica) -> ScheduleTimeoutError:
        events = self._print_events(rep)
        warnings = [e for e in events if e.get("type") == "Warning"]
        view = rep.view
        if rep.job and classify_job(rep.job).suspended:
            queue_name = self.settings.kueue_queue or "?"
            reason, message = "Suspended", f"the Job is suspended: queue {queue_name} has not admitted it"
        elif view and view.waiting_message:
            reason, message = view.waiting_reason, view.waiting_message
        elif warnings:
            reason, message = warnings[-1].get("reason") or "Unschedulable", warnings[-1].get("message") or ""
        elif rep.pod() is None:
            reason, message = "NoPod", "the Job controller created no pod"
        else:
            reason, message = "Unschedulable", "the pod was not bound to a node"
        t = self.settings.schedule_timeout_s
        return ScheduleTimeoutError(
            rep.replica, reason, None, (),
            f"{message}; not scheduled within schedule_timeout_s={t:g}s: free capacity or quota, lower the "
            f"requests (cpu, memory, gpus), check node_selector and tolerations, or raise schedule_timeout_s")

    def _start_error(self, rep: _Replica) -> ScheduleTimeoutError:
        """A pod bound to a node whose container has not started within ``schedule_timeout_s`` (a volume that
        cannot be attached or mounted, a sandbox that cannot be created...): the kubelet's Warning events say
        why."""
        events = self._print_events(rep)
        warnings = [e for e in events if e.get("type") == "Warning"]
        pod = rep.pod() or {}
        node = (pod.get("spec") or {}).get("nodeName") or "its node"
        waiting: dict[str, Any] = {}
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            if cs.get("name") == objects.CONTAINER_NAME:
                waiting = (cs.get("state") or {}).get("waiting") or {}
        if warnings:
            reason, message = warnings[-1].get("reason") or "NotStarted", warnings[-1].get("message") or ""
        else:
            reason = waiting.get("reason") or "NotStarted"
            message = waiting.get("message") or f"the container is still waiting ({reason})"
        t = self.settings.schedule_timeout_s
        return ScheduleTimeoutError(
            rep.replica, reason, None, (),
            f"{message}; pod {rep.pod_name} was scheduled on {node} but its container did not start within "
            f"schedule_timeout_s={t:g}s: check the events above (a volume that cannot be attached or mounted, "
            f"e.g. a ReadWriteOnce PVC in use on another node or an NFS server down; a missing ConfigMap or "
            f"Secret volume), or raise schedule_timeout_s for very large images")

    def _timeout_error(self, why: str) -> JobTimeoutError:
        running = [rep.replica.label for rep in self.replicas.values() if not rep.terminal]
        limit = self.job.timeout_s or self.settings.backstop_deadline_s
        return JobTimeoutError(
            f"{self.job.name} did not finish within its timeout of {limit:g}s"
            f"{f' ({why})' if why else ''}; still running: {running}. Raise timeout_s or train for less "
            f"(fewer epochs)")

    # -- cleanup ------------------------------------------------------------------------------------------------------
    def _remaining(self) -> list[str]:
        left: list[str] = []
        listers = [("job", self.api.list_jobs), ("service", self.api.list_services), ("pod", self.api.list_pods)]
        listers += [(kind.lower(), lister) for kind, _, lister, _, _ in self._job_level()]
        for kind, lister in listers:
            left += [f"{kind}/{o['metadata']['name']}" for o in lister(self.selector).get("items") or []]
        return left

    def _cleanup(self, error: BaseException | None) -> None:
        """Delete every Job, Service and pod of the job and check that none remain.

        On success a leftover raises :class:`CleanupError`; after a failure it is logged and added as a note
        to the failure (which stays the error the step reports).
        """
        self._in_cleanup = True
        problem = ""
        try:
            for stream in self._logs.values():  # finished containers: every line is in before deleting
                if stream.pod in self._terminal_pods():
                    stream.drain(self.settings.log_wait_s)
            # Jobs first (no controller recreates a pod), then Services, then the pods; each kind concurrently
            # (tfk8s.kube.parallel), as they were created (bench/launcher_scale.py's cleanup figure)
            names = [rep.name for rep in self.replicas.values()]
            run_all(self.api.delete_job, names)
            run_all(self.api.delete_service, names)
            pods = [pod["metadata"]["name"] for pod in self.api.list_pods(self.selector).get("items") or []]
            run_all(lambda pod: self.api.delete_pod(pod, self.settings.stop_grace_period_s), pods)
            for _, _, _, delete, _ in self._job_level():
                delete(self.job.name)
            left: list[str] = []

            def gone() -> bool:
                left[:] = self._remaining()
                return not left

            s = self.settings
            first = min(s.cleanup_timeout_s, s.stop_grace_period_s + s.force_delete_after_s)
            done = _wait_until(gone, first, self._clock)
            if not done and (stuck := [n.split("/", 1)[1] for n in left if n.startswith("pod/")]):
                self._force_delete(stuck)  # their node is gone: no kubelet will ever confirm the deletion
            if done or _wait_until(gone, max(0.0, s.cleanup_timeout_s - first), self._clock):
                self.log(f"deleted the Jobs, Services and pods of {self.job.name}; none remain")
            else:
                accepted = self._deletion_accepted(left)
                if accepted and len(accepted) == len(left):
                    self.log(f"WARNING: {len(accepted)} pods of {self.job.name} are still listed although their "
                             f"deletion (forced, grace period 0) was accepted: {sorted(accepted)} (a finalizer or "
                             f"an unreachable node keeps them; they run nothing the job needs). Remove them with "
                             + "; ".join(self._force_command(p) for p in sorted(accepted)))
                else:
                    force = "; ".join(self._force_command(p) for p in sorted(accepted))
                    problem = (f"{len(left)} objects of {self.job.name} remain {s.cleanup_timeout_s:g}s after "
                               f"deleting them: {left}; delete them with kubectl delete {self._kinds()} -n "
                               f"{s.namespace} -l {self.selector}" + (f"; {force}" if force else ""))
        except KubernetesApiError as e:
            problem = (f"cleanup of {self.job.name} failed: {e}; delete what is left with kubectl delete "
                       f"{self._kinds()} -n {self.settings.namespace} -l {self.selector}")
        finally:
            for w in self._watchers:
                w.stop()
            for stream in self._logs.values():
                stream.drain(0.5)
                stream.stop()
            self._in_cleanup = False
        if problem:
            self.log(problem)
            if error is None:
                raise CleanupError(problem)
            error.add_note(problem)

    def _kinds(self) -> str:
        """The kinds to name in a ``kubectl delete`` of what is left of the job."""
        return ",".join(["jobs", "services", "pods"] + [_plural(k) for k, *_ in self._job_level()])

    def _force_delete(self, pods: list[str]) -> None:
        """Delete ``pods`` with grace period 0: they kept their deletionTimestamp past the grace period (their
        node is gone, so no kubelet will confirm the deletion; ``kubectl delete pod --grace-period=0 --force``)."""
        if not pods:
            return
        self.log(f"pods still terminating {self.settings.stop_grace_period_s + self.settings.force_delete_after_s:g}s "
                 f"after their deletion (their node is gone or unreachable): force-deleting {', '.join(pods)} "
                 f"(grace period 0)")
        run_all(lambda pod: self.api.delete_pod(pod, 0), pods)

    def _deletion_accepted(self, left: list[str]) -> list[str]:
        """The pods among ``left`` (``kind/name``) whose deletion the API server accepted (a deletionTimestamp)."""
        names = {n.split("/", 1)[1] for n in left if n.startswith("pod/")}
        return [p["metadata"]["name"] for p in self.api.list_pods(self.selector).get("items") or []
                if p["metadata"]["name"] in names and p["metadata"].get("deletionTimestamp")]

    def _force_command(self, pod: str) -> str:
        """The kubectl command that removes a pod whose node is gone."""
        return f"kubectl delete pod -n {self.settings.namespace} {pod} --grace-period=0 --force"

    def _terminal_pods(self) -> set[str]:
        return {name for rep in self.replicas.values() for name, pod in rep.pods.items()
                if classify_pod(pod).terminal}


def _plural(kind: str) -> str:
    """kubectl's plural of a kind: ``networkpolicies``, ``podgroups``."""
    k = kind.lower()
    return k[:-1] + "ies" if k.endswith("y") else k + "s"


def _wait_until(predicate: Callable[[], bool], timeout_s: float, clock: Callable[[], float]) -> bool:
    """Re-check ``predicate`` every :data:`CLEANUP_POLL_S` seconds until it holds or ``timeout_s`` passes.

    Used only to confirm that deleted objects are gone (the watches are being torn down by then).
    """
    deadline = clock() + timeout_s
    while not predicate():
        remaining = deadline - clock()
        if remaining <= 0:
            return False
        time.sleep(min(CLEANUP_POLL_S, remaining))
    return True

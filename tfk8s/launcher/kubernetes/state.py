"""What the Kubernetes launcher knows while a job runs: the run (:class:`KubeRun`: the job, its settings, the API,
the replicas, the watches and log streams, the engine's state) and each replica (:class:`ReplicaState`), kept up to
date from the watches by :mod:`tfk8s.launcher.kubernetes.backend`. The modules of the backend are functions over
a :class:`KubeRun`: :mod:`~tfk8s.launcher.kubernetes.creation`, :mod:`~tfk8s.launcher.kubernetes.failures`,
:mod:`~tfk8s.launcher.kubernetes.cleanup` and :mod:`~tfk8s.launcher.kubernetes.backend`."""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tfk8s.core.cluster import Replica, ReplicaType, coordinator, replica_name
from tfk8s.core.job import TrainingJob, job_selector
from tfk8s.launcher.engine import EngineState, Views
from tfk8s.launcher.kubernetes import objects
from tfk8s.launcher.kubernetes.api import KubeApi
from tfk8s.launcher.kubernetes.classify import JobState, PodState, classify_job, classify_pod
from tfk8s.launcher.kubernetes.logs import LogReaders, LogSink, LogStream
from tfk8s.launcher.kubernetes.settings import KubernetesSettings
from tfk8s.launcher.kubernetes.watch import Watcher, WatchItem
from tfk8s.launcher.watchdog import ProgressWatch

_TRAINERS = (ReplicaType.CHIEF, ReplicaType.WORKER)


@dataclass(eq=False)  # identity: used as a dict key
class ReplicaState:
    """What the launcher knows about one replica's current attempt: its Job, its pods, when it was created and
    scheduled, when its failure was first seen, its progress watch."""

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
    # Its Job went from running to suspended after one of its pods was seen (Kueue took the admission back): a
    # Job held since its creation is not, even when its pod arrives before the Job's own update (two watches).
    suspended_after_pod: bool = False
    job_failed_at: float | None = None
    failure_seen_at: float | None = None  # monotonic seconds when the launcher first saw this attempt fail
    quota_checked_at: float | None = None  # monotonic seconds of the last look for a quota refusal
    refused: tuple[str, str] | None = None  # (reason, message) of an admission's refusal of its pod, once seen
    reported: bool = False
    view: PodState | None = None
    progress: ProgressWatch | None = None  # its progress file (tfk8s.launcher.watchdog)
    # The last classification of its newest pod and of its Job, kept with the object classified: the watches
    # replace an object on every change, so an unchanged one is the same object and needs no new classification
    # (the launcher looks at every replica after each batch of events: O(1) for each unchanged one).
    _pod_memo: tuple[Any, int, PodState] | None = field(default=None, repr=False)
    _job_memo: tuple[Any, JobState] | None = field(default=None, repr=False)

    def pod(self) -> dict[str, Any] | None:
        """The attempt's newest pod (a Job with backoffLimit 0 has one, unless it was replaced)."""
        if not self.pods:
            return None
        return max(self.pods.values(), key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")

    def pod_state(self, restart_exit_code: int) -> PodState | None:
        """:func:`~tfk8s.launcher.kubernetes.classify.classify_pod` of :meth:`pod` (None without a pod),
        classified again only when the watch replaced that pod's object."""
        pod = self.pod()
        if pod is None:
            return None
        memo = self._pod_memo
        if memo is None or memo[0] is not pod or memo[1] != restart_exit_code:
            memo = self._pod_memo = (pod, restart_exit_code, classify_pod(pod, restart_exit_code))
        return memo[2]

    def job_state(self) -> JobState | None:
        """:func:`~tfk8s.launcher.kubernetes.classify.classify_job` of its Job (None before it is seen),
        classified again only when the watch replaced the Job's object."""
        job = self.job
        if job is None:
            return None
        memo = self._job_memo
        if memo is None or memo[0] is not job:
            memo = self._job_memo = (job, classify_job(job))
        return memo[1]

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
        self.job_seen = self.job_deleted = self.reported = self.suspended_after_pod = False
        self.job_failed_at, self.view, self.scheduled_at = None, None, None
        self.failure_seen_at = self.quota_checked_at = self.refused = None
        if self.progress is not None:
            self.progress.new_attempt()


@dataclass(eq=False)
class KubeRun:
    """One run of a training job on Kubernetes: what every function of the backend works on (use :meth:`new`).

    Attributes:
        job: the training job (command, env, counts, port, success policy, timeout, grace periods).
        settings: where and how its replicas run.
        api: the Kubernetes API adapter (namespace = ``settings.namespace``).
        sink: receives every output line (replica logs ``[worker-1] ...``, launcher ``[launcher] ...``); called
            from several threads, serialised by :meth:`emit`.
        clock: monotonic seconds (tests may pass their own).
        selector: the label selector of the job's objects.
        replicas: each replica's state, in replica order.
        stop_grace_s: SIGTERM -> SIGKILL of every pod deleted.
        engine: the engine's memory (:mod:`tfk8s.launcher.engine`: restarts, preemptions, success time, deadline).
        exit_codes: the exit codes of the replicas that exited by themselves (current attempts).
        events: the watches' items, applied by the main thread.
        watchers: the pods and Jobs watches.
        logs: the log stream of each pod followed or read, by pod name (one per pod: nothing is read twice).
        live_logs: the streams followed live besides the coordinator's (at most ``logs.LIVE_LOGS`` running).
        readers: the bounded pool reading the logs of the replicas not followed live.
        coordinator: the replica whose log is always followed live (chief, else worker 0).
        views: every replica's engine view, recomputed only for the replicas in ``changed`` and those whose
            timer (:meth:`wake`) is due (:func:`tfk8s.launcher.kubernetes.backend.observe`).
        changed: the replicas a watch event (or a recreation) was about since they were last observed.
    """

    job: TrainingJob
    settings: KubernetesSettings
    api: KubeApi
    sink: LogSink
    clock: Callable[[], float]
    selector: str
    replicas: dict[Replica, ReplicaState]
    stop_grace_s: int
    engine: EngineState
    exit_codes: dict[str, int] = field(default_factory=dict)
    events: queue.Queue[WatchItem] = field(default_factory=queue.Queue)
    watchers: list[Watcher] = field(default_factory=list)
    logs: dict[str, LogStream] = field(default_factory=dict)
    live_logs: list[LogStream] = field(default_factory=list)
    readers: LogReaders = field(default_factory=LogReaders)
    coordinator: Replica | None = None
    views: Views | None = None
    changed: set[Replica] = field(default_factory=set)
    observed_success: bool = False  # run.engine.success_at was set when the views were last computed
    quota_scan_at: float = float("-inf")  # monotonic seconds of the last look for Jobs without a pod
    _timers: list[tuple[float, int, Replica]] = field(default_factory=list)  # heap of (when, seq, replica)
    _seq: itertools.count = field(default_factory=itertools.count)
    _timer_at: dict[Replica, float] = field(default_factory=dict)  # each replica's current timer
    sink_lock: threading.RLock = field(default_factory=threading.RLock)  # re-entrant: the SIGTERM handler logs
    kueue_said: dict[str, str] = field(default_factory=dict)  # tfk8s.launcher.kubernetes.kueue.note_pending's memory

    @classmethod
    def new(cls, job: TrainingJob, settings: KubernetesSettings, api: KubeApi, log_sink: LogSink,
            clock: Callable[[], float] = time.monotonic) -> KubeRun:
        """The run of ``job`` starting now (nothing created yet)."""
        replicas = {r: ReplicaState(r, replica_name(job.name, r), progress=ProgressWatch.for_replica(
            job.train_dir, r.label, job.progress_timeout_s, clock,
            job.startup_timeout_s if r.replica_type in _TRAINERS else 0)) for r in job.counts.replicas()}
        return cls(job, settings, api, log_sink, clock, job_selector(job.name), replicas,
                   objects.grace_seconds(job), EngineState(clock()), coordinator=coordinator(job.counts),
                   views=Views(job), changed=set(replicas))

    def wake(self, replica: Replica, at: float | None) -> None:
        """Observe ``replica`` again at monotonic time ``at`` even with no event about it (a deadline of its:
        scheduling, its failed Job's pod status, its progress file); None: no timer. Replaces its timer."""
        if at is None:
            self._timer_at.pop(replica, None)
            return
        if self._timer_at.get(replica) == at:
            return
        self._timer_at[replica] = at
        heapq.heappush(self._timers, (at, next(self._seq), replica))

    def next_timer(self) -> float | None:
        """The earliest replica timer (:meth:`wake`), or None."""
        while self._timers and self._timer_at.get(self._timers[0][2]) != self._timers[0][0]:
            heapq.heappop(self._timers)  # replaced or cancelled
        return self._timers[0][0] if self._timers else None

    def due(self, now: float) -> set[Replica]:
        """The replicas whose timer is at or before ``now`` (their timers cancelled)."""
        out: set[Replica] = set()
        while (t := self.next_timer()) is not None and t <= now:
            _, _, r = heapq.heappop(self._timers)
            del self._timer_at[r]
            out.add(r)
        return out

    def emit(self, line: str) -> None:
        """Send one line to the log sink (thread-safe)."""
        with self.sink_lock:
            self.sink(line)

    def log(self, message: str) -> None:
        """Send one of the launcher's own messages to the log sink."""
        self.emit(f"[launcher] {message}")

    def job_level(self) -> list[tuple[str, Callable[..., Any], Callable[..., Any], Callable[..., Any],
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

    def kinds(self) -> str:
        """The kinds to name in a ``kubectl delete`` of what is left of the job."""
        return ",".join(["jobs", "services", "pods"] + [_plural(k) for k, *_ in self.job_level()])


def _plural(kind: str) -> str:
    """kubectl's plural of a kind: ``networkpolicies``, ``podgroups``."""
    k = kind.lower()
    return k[:-1] + "ies" if k.endswith("y") else k + "s"


def parse_time(value: str | None) -> datetime | None:
    """A Kubernetes timestamp (RFC 3339, ``2026-12-01T09:15:08Z``) as a datetime; None when missing or malformed."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None

"""What the Kubernetes launcher knows about each replica while a job runs (:class:`ReplicaState`), kept up to date
from the watches by :mod:`tfk8s.launcher.kubernetes.backend`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tfk8s.core.cluster import Replica
from tfk8s.launcher.kubernetes.classify import JobState, PodState, classify_job, classify_pod
from tfk8s.launcher.watchdog import ProgressWatch


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
        self.failure_seen_at = self.quota_checked_at = None
        if self.progress is not None:
            self.progress.new_attempt()


def parse_time(value: str | None) -> datetime | None:
    """A Kubernetes timestamp (RFC 3339, ``2026-12-01T09:15:08Z``) as a datetime; None when missing or malformed."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None

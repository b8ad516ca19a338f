"""The launch semantics, written once: from what the replicas are doing, decide wait, success, restart or failure.
The module is over 500 lines on purpose: every rule of a launch is here, beside the others it is weighed against.

Both backends run the same loop, *observe -> decide -> act*: the local backend polls its processes
(:mod:`tfk8s.launcher.local`), the Kubernetes backend pumps its watch events
(:mod:`tfk8s.launcher.kubernetes.backend`); each turns what it saw into one :class:`ReplicaView` per replica,
calls :func:`decide`, and carries out the :data:`Decision` (start/stop processes; create/delete Jobs and pods).
This module owns every rule between the two (in the spirit of JobSet's failure policy, a function of the spec
and the observed jobs, and of the Kubeflow Training Operator's ``pkg/controller.v1/common``); what a single
failure *is* (its :class:`~tfk8s.core.policy.FailureKind`) is :mod:`tfk8s.core.policy`'s and each backend's
observation:

- **success** (:func:`tfk8s.core.job.is_success`, the job's ``success_policy``): then lagging chief/workers get
  ``job.grace_period_s`` and a running evaluator ``job.evaluator_grace_s`` seconds (its final checkpoint) to
  finish by themselves; what still runs after that (ps, laggards) is stopped (:class:`Succeeded`). Failures
  after success are ignored;
- **timeout**: ``state.deadline`` passed (``job.timeout_s`` from the start; on Kubernetes less the age of the
  Jobs a re-attached launcher found), or a replica reports the deadline itself (a Job's
  ``activeDeadlineSeconds``): :class:`TimedOut`, with the one sentence both backends raise
  (:func:`timed_out_message`);
- **groups** (:func:`tfk8s.core.policy.decision_group`): the failures of a decision group are judged together,
  the earliest finished first; a retryable one wins over its peers' follow-on exit 1s; a permanent one waits
  ``group_settle_s`` (from when it was first seen) for the group's members still running, whose own failure
  (an OOMKilled reported late) may yet be the cause;
- **restart budget**: a retryable failure recreates its restart group (:func:`tfk8s.core.policy.restart_group`
  plus the group's other failed members) while ``state.restarts < job.max_restarts`` (one restart per
  recreation, however many replicas it recreates); a preemption while ``state.preemptions <
  job.max_preemptions``, counted there instead (:class:`Restart`); otherwise the failure fails the job
  (:class:`Fail`, with :func:`budget_used_up`'s or :func:`preemptions_used_up`'s sentence);
- **lost nodes** (``node_loss_permanent``, Kubernetes ``spread=required``: no two chief/workers share a node, so a
  lost one cannot be replaced by a surviving one): a restart whose group has a replica on a lost node
  (:attr:`ReplicaView.lost_nodes`) fails instead, permanently (reason :data:`~tfk8s.core.policy.NODE_LOST`), naming
  the node;
- **admission refusals** (Kubernetes: a ResourceQuota, a LimitRange, Pod Security, a webhook's denial refused a
  replica's pod for good, :attr:`ReplicaView.refused`): when nothing above decided, the first refused replica
  fails the job at once with the refusal's reason and message (kind ``REFUSED``);
- **schedule deadlines** (``schedule_timeout_s``; Kubernetes): a replica not scheduled ``schedule_timeout_s``
  after its attempt was created, or scheduled but not started ``schedule_timeout_s`` after it was bound
  (:attr:`ReplicaView.created_at`, :attr:`ReplicaView.scheduled_at`), fails the job (kind ``SCHEDULE_TIMEOUT``,
  reason :data:`NOT_SCHEDULED` or :data:`NOT_STARTED`; the backend adds what the scheduler or the kubelet said).

:func:`decide` has no I/O, no clock and no threads: ``now`` comes in (monotonic seconds, the backend's clock),
the run's memory is the explicit :class:`EngineState`, which it updates in place (success time, restart and
preemption counts, when each failure was first seen), and what users read comes out as the decisions' ``notes``
and ``message``; the backend prints them (Kubernetes with its ``[launcher]`` prefix).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tfk8s.core import policy
from tfk8s.core.cluster import Replica, ReplicaType
from tfk8s.core.job import TrainingJob, is_success
from tfk8s.core.policy import Failure, FailureKind

_TRAINERS = (ReplicaType.CHIEF, ReplicaType.WORKER)
NOT_SCHEDULED = "Unschedulable"
"""The reason of a schedule-deadline failure of a replica not scheduled in time (the backend replaces it with what
the scheduler or the Job controller said, when they said something)."""
NOT_STARTED = "NotStarted"
"""The reason of a schedule-deadline failure of a replica scheduled but not started in time (the backend replaces
it with the kubelet's reason, when it gave one)."""


@dataclass(frozen=True)
class ReplicaView:
    """What a backend observed of one replica's current attempt, as :func:`decide` reads it.

    Attributes:
        replica: which replica.
        terminal: its process (pod) has finished, by itself or not.
        succeeded: it finished with exit code 0.
        failure: why its attempt failed (None: it has not). Set while not terminal too: hung (``NoProgress``),
            a pod deleted, an image that cannot be pulled.
        finished_at: when it finished, in seconds of any one clock shared by the views of a call (a container's
            ``finishedAt``, a process's exit as first seen); orders the failures of a group, earliest first
            (None: unknown, last).
        said: how the backend describes the failure in a restart note (``replica worker-1 exited -9 (killed by
            signal SIGKILL)``); default: :func:`describe` and the failure's message (``worker-1 failed with exit
            code 137: OOMKilled (...)``).
        started: its program has started (a pod's container ran).
        created_at: when its current attempt was created, in ``now``'s clock: its schedule deadline counts from
            it while it is not scheduled (None: no schedule deadline applies, a local process).
        scheduled_at: when it was seen bound to a node (None: it is not); its start deadline counts from it while
            it has not started.
        refused: ``(reason, message)`` of an admission's refusal of its pod for good (a Job controller's
            ``FailedCreate`` event: ``QuotaExceeded``, ``LimitRangeRefused``...), None: none seen.
        lost_nodes: the lost nodes its current pods are on (sorted).
    """

    replica: Replica
    terminal: bool = False
    succeeded: bool = False
    failure: Failure | None = None
    finished_at: float | None = None
    said: str = ""
    started: bool = False
    created_at: float | None = None
    scheduled_at: float | None = None
    refused: tuple[str, str] | None = None
    lost_nodes: tuple[str, ...] = ()

    @property
    def running(self) -> bool:
        """Neither finished nor failed: a member its group's permanent failure may wait for."""
        return not self.terminal and self.failure is None

    @property
    def pending(self) -> tuple[float, bool] | None:
        """``(since, scheduled)`` while a schedule deadline runs: from its creation while not scheduled
        (``scheduled`` False), from its binding while scheduled but not started; None once started or finished,
        or without ``created_at``."""
        if self.created_at is None or self.started or self.terminal:
            return None
        return (self.created_at, False) if self.scheduled_at is None else (self.scheduled_at, True)


class Views(Mapping[Replica, ReplicaView]):
    """Every replica's view, kept up to date one replica at a time, with the indexes :func:`decide` reads:
    which replicas succeeded, which have not finished, which failed, which were refused, and the schedule
    deadlines in the order they come. A backend that observes only the replicas
    that changed (Kubernetes: those a watch event was about) updates this with :meth:`set` and passes it to
    :func:`decide`, whose work is then that of the failures and of the unfinished replicas it must name, not of
    every replica (a plain mapping is indexed anew on each call).

    Args:
        job: the job whose replicas these are (a replica without a view counts as running).
    """

    def __init__(self, job: TrainingJob):
        self.order: dict[Replica, int] = {r: i for i, r in enumerate(job.counts.replicas())}
        self._views: dict[Replica, ReplicaView] = {r: ReplicaView(r) for r in self.order}
        self.succeeded: set[Replica] = set()
        self.unfinished: set[Replica] = set(self.order)
        self.failures: dict[Replica, Failure] = {}
        self.refused: set[Replica] = set()
        self._success: tuple[str, bool] | None = None  # (policy, is_success) of the current succeeded set
        self._pending: dict[Replica, tuple[float, bool]] = {}  # each replica's running schedule deadline
        self._deadlines: list[tuple[float, int, bool, Replica]] = []  # heap of (since, order, scheduled, replica)

    @classmethod
    def of(cls, job: TrainingJob, views: Mapping[Replica, ReplicaView]) -> Views:
        """``views`` (one per replica of ``job``; missing ones: running) indexed."""
        out = cls(job)
        for r in out.order:
            v = views.get(r)
            if v is not None:
                out.set(v)
        return out

    def set(self, view: ReplicaView) -> None:
        """Replace the view of ``view.replica`` (a replica of the job: else ``KeyError``)."""
        r = view.replica
        if r not in self.order:
            raise KeyError(f"Views.set: {r.label} is not a replica of this job; pass views of job.counts' replicas")
        self._views[r] = view
        if view.succeeded != (r in self.succeeded):
            self._success = None
            (self.succeeded.add if view.succeeded else self.succeeded.discard)(r)
        (self.unfinished.discard if view.terminal else self.unfinished.add)(r)
        if view.failure is not None:
            self.failures[r] = view.failure
        else:
            self.failures.pop(r, None)
        (self.refused.add if view.refused is not None else self.refused.discard)(r)
        pending = view.pending
        if pending != self._pending.get(r):
            if pending is None:
                del self._pending[r]
            else:
                self._pending[r] = pending
                heapq.heappush(self._deadlines, (pending[0], self.order[r], pending[1], r))

    def earliest_pending(self) -> tuple[Replica, float, bool] | None:
        """``(replica, since, scheduled)`` of the schedule deadline that comes first (:attr:`ReplicaView.pending`;
        the earliest in replica order among equals), or None."""
        while self._deadlines:
            since, _, scheduled, r = self._deadlines[0]
            if self._pending.get(r) == (since, scheduled):
                return r, since, scheduled
            heapq.heappop(self._deadlines)  # replaced or over
        return None

    def success(self, job: TrainingJob) -> bool:
        """:func:`tfk8s.core.job.is_success` of the replicas that succeeded (computed again only when they
        changed)."""
        if self._success is None or self._success[0] != job.success_policy:
            self._success = (job.success_policy, is_success(job.success_policy, job.counts, self.succeeded))
        return self._success[1]

    def in_order(self, replicas: set[Replica] | list[Replica]) -> tuple[Replica, ...]:
        """``replicas`` in replica order."""
        return tuple(sorted(replicas, key=self.order.__getitem__))

    def __getitem__(self, r: Replica) -> ReplicaView:
        return self._views[r]

    def __iter__(self):
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)


@dataclass
class EngineState:
    """What the engine remembers between two calls of :func:`decide` (one per run, owned by the backend).

    Attributes:
        start: monotonic seconds when the run started (``succeeded in`` counts from it).
        deadline: monotonic seconds at which the job times out (None: no ``timeout_s``).
        restarts: recreations counted against ``job.max_restarts`` (a re-attached launcher starts from the
            previous one's count).
        preemptions: recreations after preemptions, not counted.
        success_at: monotonic seconds when the success policy was first met (None: not yet).
        failing_since: for each replica whose current attempt has failed, when that failure was first seen.
    """

    start: float
    deadline: float | None = None
    restarts: int = 0
    preemptions: int = 0
    success_at: float | None = None
    failing_since: dict[Replica, float] = field(default_factory=dict)

    @classmethod
    def for_job(cls, job: TrainingJob, start: float) -> EngineState:
        """The state of a run of ``job`` starting at ``start``: its deadline ``job.timeout_s`` later."""
        return cls(start, start + job.timeout_s if job.timeout_s is not None else None)


@dataclass(frozen=True)
class Wait:
    """Nothing to do yet; look again after the next observation (or :func:`wake_times`).

    Attributes:
        notes: lines to print (a permanent failure waiting for its group, ``<job> succeeded in 12.3s``).
    """

    notes: tuple[str, ...] = field(default=(), kw_only=True)


@dataclass(frozen=True)
class Succeeded:
    """The job succeeded and the grace periods are over: stop ``stop`` (still running), report success.

    Attributes:
        stop: the replicas still running (ps, an evaluator past its grace, lagging workers), in replica order.
        seconds: from the start to success.
    """

    stop: tuple[Replica, ...]
    seconds: float
    notes: tuple[str, ...] = field(default=(), kw_only=True)


@dataclass(frozen=True)
class Restart:
    """Recreate ``group``: stop what runs of it, start every member's next attempt (``state`` already counts it).

    Attributes:
        cause: the replica whose failure decided (the earliest retryable one of its decision group).
        failure: its failure.
        failed: every failed member of the cause's decision group, the cause among them, in replica order.
        group: the replicas to recreate, in replica order.
        charged: counted against ``max_restarts`` (False: a preemption).
        message: the note to print (``<cause>; retryable: recreating worker-0, worker-1 (restart 1 of
            max_restarts=3)``; the job record and the kept logs' separators read it back).
    """

    cause: Replica
    failure: Failure
    failed: tuple[Replica, ...]
    group: tuple[Replica, ...]
    charged: bool
    message: str
    notes: tuple[str, ...] = field(default=(), kw_only=True)


@dataclass(frozen=True)
class Fail:
    """Fail the job with ``replica``'s failure (every replica is stopped by the backend's cleanup).

    Attributes:
        replica: the failed replica (the earliest of its group; for a retryable failure, the retryable one).
        failure: its failure: the one observed, or the engine's own verdict: a restart on a lost node under
            ``node_loss_permanent`` (``PERMANENT``, :data:`~tfk8s.core.policy.NODE_LOST`, naming the node), an
            admission's refusal (``REFUSED``, the refusal's reason and message), a schedule deadline
            (``SCHEDULE_TIMEOUT``, :func:`not_scheduled` or :func:`not_started`).
        budget: for a retryable failure, :func:`budget_used_up`'s sentence; else ``""``.
    """

    replica: Replica
    failure: Failure
    budget: str = ""
    notes: tuple[str, ...] = field(default=(), kw_only=True)


@dataclass(frozen=True)
class TimedOut:
    """The job's deadline passed: fail it, naming ``running``.

    Attributes:
        running: the replicas not finished, in replica order.
        replica: the replica that reported the deadline itself (its Job's ``activeDeadlineSeconds``), or None
            when ``state.deadline`` passed.
        failure: that replica's failure (kind ``TIMEOUT``; its message says what hit the deadline), or None.
        message: the error's sentence, the same on both backends (:func:`timed_out_message`).
    """

    running: tuple[Replica, ...]
    replica: Replica | None = None
    failure: Failure | None = None
    message: str = ""
    notes: tuple[str, ...] = field(default=(), kw_only=True)


Decision = Wait | Succeeded | Restart | Fail | TimedOut


def describe(replica: Replica, failure: Failure) -> str:
    """``worker-1 failed with exit code 1: Error``: a failure as the notes name it (the Kubernetes backend's
    words; the local backend passes its own ``replica worker-1 exited 1 (Error)`` as :attr:`ReplicaView.said`)."""
    code = f" with exit code {failure.exit_code}" if failure.exit_code is not None else ""
    return f"{replica.label} failed{code}: {failure.reason}"


def budget_used_up(restarts: int, max_restarts: int) -> str:
    """The sentence of a retryable failure that fails the job: ``retryable, but the restart budget is used up
    (2 of max_restarts=2): raise max_restarts, or see the last log lines``."""
    return (f"retryable, but the restart budget is used up ({restarts} of max_restarts={max_restarts}): raise "
            f"max_restarts, or see the last log lines")


def preemptions_used_up(preemptions: int, max_preemptions: int) -> str:
    """The sentence of a preemption that fails the job: ``preempted, but the preemption bound is reached (20 of
    max_preemptions=20): ...``."""
    return (f"preempted, but the preemption bound is reached ({preemptions} of max_preemptions={max_preemptions}): "
            f"the cluster keeps taking the replicas back (a node drained again and again, a queue of higher "
            f"priority): raise max_preemptions, or run at a higher priority or in a quieter queue")


def timed_out_message(job: TrainingJob, running: Sequence[Replica], failure: Failure | None = None) -> str:
    """``mnist-1 did not finish within its timeout of 60s; still running: ['worker-1']. Raise timeout_s or train
    for less (fewer epochs)``, with what hit the deadline when a replica reported it (``(the Job ... hit its
    activeDeadlineSeconds)``): a timed-out job's error on both backends."""
    limit = f"its timeout of {job.timeout_s:g}s" if job.timeout_s is not None else "its deadline"
    why = f" ({failure.message})" if failure is not None and failure.message else ""
    return (f"{job.name} did not finish within {limit}{why}; still running: {[r.label for r in running]}. Raise "
            f"timeout_s or train for less (fewer epochs)")


def not_scheduled(schedule_timeout_s: float) -> Failure:
    """The failure of a replica not scheduled within ``schedule_timeout_s`` (the backend puts what the scheduler
    said first)."""
    return Failure(FailureKind.SCHEDULE_TIMEOUT, NOT_SCHEDULED,
                   f"not scheduled within schedule_timeout_s={schedule_timeout_s:g}s: free capacity or quota, lower "
                   f"the requests (cpu, memory, gpus), check node_selector and tolerations, or raise "
                   f"schedule_timeout_s")


def not_started(schedule_timeout_s: float) -> Failure:
    """The failure of a replica scheduled but not started within ``schedule_timeout_s`` (the backend puts the
    kubelet's words and where it was scheduled first)."""
    return Failure(FailureKind.SCHEDULE_TIMEOUT, NOT_STARTED,
                   f"its container did not start within schedule_timeout_s={schedule_timeout_s:g}s: check the "
                   f"events above (a volume that cannot be attached or mounted, e.g. a ReadWriteOnce PVC in use on "
                   f"another node or an NFS server down; a missing ConfigMap or Secret volume), or raise "
                   f"schedule_timeout_s for very large images")


def succeeded_note(job_name: str, seconds: float) -> str:
    """``mnist-1 succeeded in 12.3s`` (the job record's event)."""
    return f"{job_name} succeeded in {seconds:.1f}s"


def stopping_note(stop: Sequence[Replica]) -> str:
    """``stopping the remaining replicas: worker-1, ps-0``: what a success stops."""
    return f"stopping the remaining replicas: {', '.join(r.label for r in stop)}"


def decide(job: TrainingJob, views: Mapping[Replica, ReplicaView], now: float, state: EngineState, *,
           group_settle_s: float, schedule_timeout_s: float | None = None,
           node_loss_permanent: bool = False) -> Decision:
    """What to do now, given every replica's current attempt (see the module docstring for the rules).

    Args:
        job: the job (its counts, success policy, grace periods, ``max_restarts``).
        views: one view per replica of ``job.counts`` (a missing one counts as running).
        now: monotonic seconds, the clock of ``state``.
        state: the run's memory; updated in place (``success_at``, ``restarts``, ``preemptions``,
            ``failing_since``).
        group_settle_s: seconds a permanent failure waits for the still running members of its decision group.
        schedule_timeout_s: seconds a replica may stay unscheduled, or scheduled and not started (None: no
            schedule deadline).
        node_loss_permanent: a lost node cannot be replaced by a surviving one (Kubernetes ``spread=required``):
            a restart whose group has a replica on a lost node fails the job instead.

    Returns:
        :class:`Wait`, :class:`Succeeded`, :class:`Restart`, :class:`Fail` or :class:`TimedOut`. A
        :class:`Restart` has been counted in ``state``; the backend carries it out before calling again.
    """
    view = views if isinstance(views, Views) else Views.of(job, views)
    notes: list[str] = []
    if state.success_at is None and view.success(job):
        state.success_at = now
        notes.append(succeeded_note(job.name, now - state.start))
    if state.success_at is not None:
        since = now - state.success_at
        lagging = any(r.replica_type in _TRAINERS for r in view.unfinished)
        evaluating = any(r.replica_type is ReplicaType.EVALUATOR for r in view.unfinished)
        if (lagging and since < job.grace_period_s) or (evaluating and since < job.evaluator_grace_s):
            return Wait(notes=tuple(notes))
        stop = view.in_order(view.unfinished)
        if stop:
            notes.append(stopping_note(stop))
        return Succeeded(stop, state.success_at - state.start, notes=tuple(notes))
    if state.deadline is not None and now >= state.deadline:
        running = view.in_order(view.unfinished)
        return TimedOut(running, message=timed_out_message(job, running), notes=tuple(notes))
    failures = {r: view.failures[r] for r in view.in_order(list(view.failures))}
    for r in list(state.failing_since):
        if r not in failures:
            del state.failing_since[r]
    for r, f in failures.items():
        if f.kind is FailureKind.TIMEOUT:
            running = view.in_order(view.unfinished)
            return TimedOut(running, r, f, timed_out_message(job, running, f), notes=tuple(notes))
        state.failing_since.setdefault(r, now)
    order = view.order

    def earliest(r: Replica) -> tuple[bool, float, int]:
        finished = view[r].finished_at
        return (finished is None, finished or 0.0, order[r])

    for r, own in failures.items():
        # A failure brings down the replicas that depend on it (MWMS peers, the PSS coordinator), which then fail
        # too (exit 1): the failures of a group are judged together, and a retryable one wins.
        group = policy.decision_group(job.counts, r)
        failed = [x for x in group if x in failures]
        retryable = [x for x in failed if failures[x].retryable]
        cause = min(retryable or failed, key=earliest)
        failure = failures[cause]
        if failure.retryable and (state.preemptions < job.max_preemptions if failure.preempted
                                  else state.restarts < job.max_restarts):
            restart = _group(job, cause, failed)
            lost = sorted({n for x in restart for n in view[x].lost_nodes}) if node_loss_permanent else []
            if lost:  # no surviving node may take the lost one's place
                return Fail(cause, Failure(FailureKind.PERMANENT, policy.NODE_LOST,
                                           f"{_said(view, cause, failure, failed)}; the node lost: {', '.join(lost)}"),
                            notes=tuple(notes))
            return _restart(job, view, state, cause, failure, failed, restart, notes)
        # A backend may report the peers' follow-on exit 1s before the root cause's own status (a kubelet's
        # OOMKilled): a permanent failure waits group_settle_s for the members still running.
        pending = [x for x in group if x not in failures and not view[x].terminal]
        first_seen = min(state.failing_since[x] for x in failed)
        if failure.kind is FailureKind.PERMANENT and pending and now - first_seen < group_settle_s:
            if state.failing_since[r] == now:
                notes.append(f"{describe(r, own)}; waiting up to {group_settle_s:g}s for "
                             f"{', '.join(x.label for x in pending)} (a retryable failure among them would be the "
                             f"cause, and the group recreated)")
            continue
        budget = (budget_used_up(state.restarts, job.max_restarts) if failure.kind is FailureKind.RETRYABLE
                  else preemptions_used_up(state.preemptions, job.max_preemptions) if failure.preempted else "")
        return Fail(cause, failure, budget, notes=tuple(notes))
    if view.refused:  # an admission refused a pod for good: the Job controller's retries would be refused too
        r = view.in_order(view.refused)[0]
        reason, message = view[r].refused or ("", "")
        return Fail(r, Failure(FailureKind.REFUSED, reason, message), notes=tuple(notes))
    if schedule_timeout_s is not None and (due := view.earliest_pending()) is not None:
        r, since, scheduled = due
        if now - since >= schedule_timeout_s:
            failure = not_started(schedule_timeout_s) if scheduled else not_scheduled(schedule_timeout_s)
            return Fail(r, failure, notes=tuple(notes))
    return Wait(notes=tuple(notes))


def _group(job: TrainingJob, cause: Replica, failed: list[Replica]) -> tuple[Replica, ...]:
    """What a restart caused by ``cause`` recreates: its restart group and its group's failed members, in replica
    order."""
    restart = set(policy.restart_group(job.counts, cause)) | set(failed)
    return tuple(r for r in job.counts.replicas() if r in restart)


def _said(view: Mapping[Replica, ReplicaView], cause: Replica, failure: Failure, failed: list[Replica]) -> str:
    """The cause as a restart (or a lost node's failure) names it, with the members that failed after it."""
    also = ", ".join(x.label for x in failed if x != cause)
    said = view[cause].said or describe(cause, failure) + (f" ({failure.message})" if failure.message else "")
    return f"{said}{f' (then {also} failed too)' if also else ''}"


def _restart(job: TrainingJob, view: Mapping[Replica, ReplicaView], state: EngineState, cause: Replica,
             failure: Failure, failed: list[Replica], group: tuple[Replica, ...], notes: list[str]) -> Restart:
    if failure.preempted:
        state.preemptions += 1
        note, what = policy.preemption_note(state.preemptions, job.max_restarts), "preempted"
    else:
        state.restarts += 1
        note, what = policy.restart_note(state.restarts, job.max_restarts), "retryable"
    for r in group:
        state.failing_since.pop(r, None)
    message = f"{_said(view, cause, failure, failed)}; {what}: recreating {', '.join(r.label for r in group)} {note}"
    return Restart(cause, failure, tuple(failed), group, not failure.preempted, message, notes=tuple(notes))


def wake_times(job: TrainingJob, state: EngineState, *, group_settle_s: float, now: float,
               views: Views | None = None, schedule_timeout_s: float | None = None) -> list[float]:
    """The monotonic times at which :func:`decide` may decide differently with no new observation: the ends of
    the grace periods after success, the deadline, the ends of the failures' settle windows, and with ``views``
    and ``schedule_timeout_s`` the first schedule deadline (a backend that waits for events wakes up by then)."""
    times = []
    if state.success_at is not None:
        times += [state.success_at + job.grace_period_s, state.success_at + job.evaluator_grace_s]
    elif views is not None and schedule_timeout_s is not None and (pending := views.earliest_pending()):
        times.append(pending[1] + schedule_timeout_s)
    if state.deadline is not None:
        times.append(state.deadline)
    times += [t + group_settle_s for t in state.failing_since.values() if t + group_settle_s > now]
    return times

"""The launch semantics, each rule pinned once against :func:`tfk8s.launcher.engine.decide` (no process, no cluster):
success policies and the grace periods after success, the timeout and its one sentence, groups and their settle
window, the restart budget and preemptions, exit 42, NoProgress, and Kubernetes' verdicts (an admission's
refusal, the schedule deadlines, a node lost under spread=required). The backends' tests (tests/launcher/test_local*.py, tests/launcher/kubernetes/)
check that they observe and act: processes and objects started, stopped, created, deleted, messages printed."""

import ast
from pathlib import Path

import pytest

from tfk8s.core import policy
from tfk8s.core.cluster import Replica, ReplicaCounts, ReplicaType
from tfk8s.core.job import TrainingJob
from tfk8s.core.policy import Failure, FailureKind
from tfk8s.launcher import engine
from tfk8s.launcher.engine import EngineState, Fail, ReplicaView, Restart, Succeeded, TimedOut, Wait

ROOT = Path(__file__).resolve().parents[2]
SETTLE_S = 3.0
MWMS = {"worker": 3}
PSS = {"chief": 1, "worker": 2, "ps": 1}


def _r(label: str) -> Replica:
    rtype, index = label.rsplit("-", 1)
    return Replica(ReplicaType(rtype), int(index))


def _failure(what: str, job: TrainingJob) -> Failure:
    """``exit:N`` (its kind by the policy's exit codes), ``oom``, ``preempted``, ``hung``, ``image``, ``deadline``,
    ``deleted``."""
    if what.startswith("exit:"):
        code = int(what[5:])
        kind = policy.exit_code_kind(code, job.restart_exit_code)
        return Failure(kind, "Error" if kind is FailureKind.PERMANENT else "Signal", exit_code=code)
    return {
        "oom": Failure(FailureKind.RETRYABLE, "OOMKilled", exit_code=137),
        "preempted": Failure(FailureKind.PREEMPTED, "Evicted", "the node was low on memory"),
        "own-eviction": Failure(FailureKind.RETRYABLE, "Evicted", "its own ephemeral-storage use over its limit 1Gi"),
        "hung": Failure(FailureKind.RETRYABLE, policy.NO_PROGRESS, "no progress for 600 s"),
        "image": Failure(FailureKind.IMAGE_PULL, "ImagePullBackOff", "pull access denied"),
        "deadline": Failure(FailureKind.TIMEOUT, "DeadlineExceeded", "Job was active longer than specified"),
        "deleted": Failure(FailureKind.RETRYABLE, "PodDeleted", "pod x was deleted"),
        "node-lost": Failure(FailureKind.PREEMPTED, policy.NODE_LOST, "its node node-1 was lost"),
    }[what]


def _views(job: TrainingJob, spec: dict[str, str | dict]) -> dict[Replica, ReplicaView]:
    """One view per replica: ``run`` (the default), ``ok``, or a failure of :func:`_failure`, ``@t`` its finish
    time; a failure is terminal but ``hung``. Or a dict: :class:`ReplicaView`'s keywords (``failure`` by
    :func:`_failure`'s name)."""
    views = {}
    for r in job.counts.replicas():
        given = spec.get(r.label, "run")
        if isinstance(given, dict):
            kw = dict(given)
            if "failure" in kw:
                kw["failure"] = _failure(kw["failure"], job)
            views[r] = ReplicaView(r, **kw)
            continue
        what, _, at = given.partition("@")
        finished = float(at) if at else None
        if what == "run":
            views[r] = ReplicaView(r)
        elif what == "ok":
            views[r] = ReplicaView(r, terminal=True, succeeded=True, finished_at=finished)
        else:
            views[r] = ReplicaView(r, terminal=what != "hung", failure=_failure(what, job), finished_at=finished)
    return views


def _job(counts: dict[str, int], **kw) -> TrainingJob:
    kw.setdefault("max_restarts", 3)
    return TrainingJob(name="mnist-1", counts=ReplicaCounts(**counts), command=("python", "train.py"), **kw)


def _decide(job, spec, now=0.0, state=None, **kw):
    state = state or EngineState(start=0.0)
    return engine.decide(job, _views(job, spec), now, state, group_settle_s=SETTLE_S, **kw), state


def _labels(replicas) -> list[str]:
    return [r.label for r in replicas]


# -- success ---------------------------------------------------------------------------------------------------------
# (counts, job keywords, views, now, success_at already, expected: "grace" (succeeded, waiting for laggards or
#  the evaluator) | "not yet" | the labels stopped)
SUCCESS = {
    "chief succeeds: ps stopped at once": (PSS, {}, {"chief-0": "ok", "worker-0": "ok", "worker-1": "ok"}, 5, None,
                                           ["ps-0"]),
    "no chief: worker 0 decides, lagging worker waits for the grace": (MWMS, {"grace_period_s": 10},
                                                                      {"worker-0": "ok"}, 5, None, "grace"),
    "lagging worker stopped once the grace is over": (MWMS, {"grace_period_s": 10}, {"worker-0": "ok"}, 10, 0,
                                                      ["worker-1", "worker-2"]),
    "laggards that finish within the grace stop nothing": (MWMS, {"grace_period_s": 10},
                                                           {"worker-0": "ok", "worker-1": "ok", "worker-2": "ok"},
                                                           4, 0, []),
    "AllWorkers: worker 0 alone is not enough": (MWMS, {"success_policy": "AllWorkers"},
                                                 {"worker-0": "ok", "worker-1": "ok"}, 5, None, "not yet"),
    "AllWorkers: every worker": (MWMS, {"success_policy": "AllWorkers"},
                                 {"worker-0": "ok", "worker-1": "ok", "worker-2": "ok"}, 5, None, []),
    "the evaluator gets its own grace": ({"chief": 1, "worker": 0, "evaluator": 1}, {"evaluator_grace_s": 60, "grace_period_s": 5},
                                         {"chief-0": "ok"}, 59, 0, "grace"),
    "an evaluator past its grace is stopped": ({"chief": 1, "worker": 0, "evaluator": 1}, {"evaluator_grace_s": 60},
                                               {"chief-0": "ok"}, 60, 0, ["evaluator-0"]),
    "the ps get no grace": ({"chief": 1, "worker": 1, "ps": 2}, {"grace_period_s": 30},
                            {"chief-0": "ok", "worker-0": "ok"}, 1, None,
                            ["ps-0", "ps-1"]),
    "a failure after success is ignored": (MWMS, {"grace_period_s": 10}, {"worker-0": "ok", "worker-1": "exit:1",
                                                                          "worker-2": "ok"}, 1, 0, []),
    "a failure of the chief before success is not success": (PSS, {}, {"chief-0": "exit:1", "worker-0": "ok"}, 1,
                                                             None, "not yet"),
}


@pytest.mark.parametrize(("counts", "kw", "spec", "now", "success_at", "expected"), SUCCESS.values(), ids=SUCCESS)
def test_success_and_the_grace_periods(counts, kw, spec, now, success_at, expected):
    job = _job(counts, **kw)
    state = EngineState(start=-2.0, success_at=success_at)
    decision, state = _decide(job, spec, now, state)
    if expected in ("grace", "not yet"):
        assert isinstance(decision, Wait), decision
        assert (state.success_at is not None) == (expected == "grace")
        return
    assert isinstance(decision, Succeeded) and _labels(decision.stop) == expected
    assert state.success_at == (success_at if success_at is not None else now)
    assert decision.seconds == pytest.approx(state.success_at + 2.0)
    first = [f"mnist-1 succeeded in {now + 2.0:.1f}s"] if success_at is None else []
    stopping = [f"stopping the remaining replicas: {', '.join(expected)}"] if expected else []
    assert list(decision.notes) == first + stopping


def test_success_is_said_once_when_reached_and_the_grace_waits():
    job = _job(MWMS, grace_period_s=10)
    state = EngineState(start=0.0)
    decision, _ = _decide(job, {"worker-0": "ok"}, 3.25, state)
    assert decision == Wait(notes=("mnist-1 succeeded in 3.2s",)) and state.success_at == 3.25
    decision, _ = _decide(job, {"worker-0": "ok"}, 5, state)
    assert decision == Wait()


# -- failures --------------------------------------------------------------------------------------------------------
# (counts, job keywords, views, state (restarts, preemptions, failing_since), now,
#  expected: ("restart", cause, group, charged, message) | ("fail", replica, reason, budget?) | ("wait", note?))
BUDGET_3 = ("retryable, but the restart budget is used up (3 of max_restarts=3): raise max_restarts, or see the "
            "last log lines")
FAILURES = {
    "exit 1-127 fails at once (a replica alone in its group)": (
        PSS, {}, {"worker-1": "exit:1"}, (0, 0, {}), 0, ("fail", "worker-1", "Error", "")),
    "exit >= 128 recreates the MWMS set, counted": (
        MWMS, {}, {"worker-1": "exit:137"}, (0, 0, {}), 0,
        ("restart", "worker-1", ["worker-0", "worker-1", "worker-2"], True,
         ("worker-1 failed with exit code 137: Signal; retryable: recreating worker-0, worker-1, worker-2 "
         "(restart 1 of max_restarts=3)"))),
    "a local process killed by a signal (-9) is retryable": (
        MWMS, {}, {"worker-2": "exit:-9"}, (1, 0, {}), 0,
        ("restart", "worker-2", ["worker-0", "worker-1", "worker-2"], True, "(restart 2 of max_restarts=3)")),
    "exit 42 (restart_exit_code) is retryable": (
        MWMS, {}, {"worker-1": "exit:42"}, (0, 0, {}), 0,
        ("restart", "worker-1", ["worker-0", "worker-1", "worker-2"], True, "(restart 1 of max_restarts=3)")),
    "exit 42 with restart_exit_code=0 is a program error": (
        PSS, {"restart_exit_code": 0}, {"worker-0": "exit:42"}, (0, 0, {}), 0, ("fail", "worker-0", "Error", "")),
    "the budget used up: the failure fails with the budget sentence": (
        MWMS, {}, {"worker-1": "oom"}, (3, 0, {}), 0, ("fail", "worker-1", "OOMKilled", BUDGET_3)),
    "max_restarts=0: the first retryable failure fails": (
        MWMS, {"max_restarts": 0}, {"worker-0": "deleted"}, (0, 0, {}), 0, ("fail", "worker-0", "PodDeleted",
        ("retryable, but the restart budget is used up (0 of max_restarts=0): raise max_restarts, or see the last "
        "log lines"))),
    "a preemption is recreated, not counted, even with the budget used up": (
        MWMS, {}, {"worker-0": "preempted"}, (3, 1, {}), 0,
        ("restart", "worker-0", ["worker-0", "worker-1", "worker-2"], False,
         ("worker-0 failed: Evicted (the node was low on memory); preempted: recreating worker-0, worker-1, "
         "worker-2 (preemption 2, not counted against max_restarts=3)"))),
    "max_preemptions reached: the next preemption fails with the bound's sentence": (
        MWMS, {"max_preemptions": 2}, {"worker-0": "preempted"}, (0, 2, {}), 0,
        ("fail", "worker-0", "Evicted", engine.preemptions_used_up(2, 2))),
    "below max_preemptions a preemption is still free": (
        MWMS, {"max_preemptions": 2}, {"worker-0": "preempted"}, (3, 1, {}), 0,
        ("restart", "worker-0", ["worker-0", "worker-1", "worker-2"], False, "(preemption 2, not counted")),
    "an eviction the pod caused (its own usage over its limit) is charged to max_restarts": (
        MWMS, {}, {"worker-0": "own-eviction"}, (0, 5, {}), 0,
        ("restart", "worker-0", ["worker-0", "worker-1", "worker-2"], True,
         ("its own ephemeral-storage use over its limit 1Gi); retryable: recreating worker-0, worker-1, worker-2 "
          "(restart 1 of max_restarts=3)"))),
    "... and fails with the restart budget once it is used up": (
        MWMS, {}, {"worker-0": "own-eviction"}, (3, 0, {}), 0, ("fail", "worker-0", "Evicted", BUDGET_3)),
    "hung (NoProgress) while running is retryable": (
        MWMS, {}, {"worker-1": "hung"}, (0, 0, {}), 0,
        ("restart", "worker-1", ["worker-0", "worker-1", "worker-2"], True,
         "worker-1 failed: NoProgress (no progress for 600 s); retryable: recreating")),
    "hung with the budget used up fails as NoProgress": (
        MWMS, {}, {"worker-1": "hung"}, (3, 0, {}), 0, ("fail", "worker-1", "NoProgress", BUDGET_3)),
    "an image pull error fails at once, no settle window": (
        MWMS, {}, {"worker-1": "image"}, (0, 0, {}), 0, ("fail", "worker-1", "ImagePullBackOff", "")),
    "PSS: a ps failure recreates the chief and every ps, not the workers": (
        {"chief": 1, "worker": 2, "ps": 2}, {}, {"ps-1": "exit:137"}, (0, 0, {}), 0,
        ("restart", "ps-1", ["chief-0", "ps-0", "ps-1"], True, "recreating chief-0, ps-0, ps-1 (restart 1")),
    "PSS: the chief alone is recreated by itself": (
        PSS, {}, {"chief-0": "exit:137"}, (0, 0, {}), 0, ("restart", "chief-0", ["chief-0"], True, "")),
    "PSS: a worker alone is recreated by itself": (
        PSS, {}, {"worker-1": "exit:137"}, (0, 0, {}), 0, ("restart", "worker-1", ["worker-1"], True, "")),
    "PSS: the chief's follow-on exit 1 does not hide the ps's retryable cause": (
        PSS, {}, {"chief-0": "exit:1@1", "ps-0": "oom@2"}, (0, 0, {}), 0,
        ("restart", "ps-0", ["chief-0", "ps-0"], True,
         "ps-0 failed with exit code 137: OOMKilled (then chief-0 failed too); retryable: recreating chief-0, ps-0")),
    "an evaluator is always alone": (
        {"chief": 1, "worker": 1, "evaluator": 1}, {}, {"evaluator-0": "exit:137"}, (0, 0, {}), 0,
        ("restart", "evaluator-0", ["evaluator-0"], True, "")),
    "MWMS: a retryable failure wins over its peers' exit 1s reported first": (
        MWMS, {}, {"worker-0": "exit:1@1", "worker-1": "exit:1@1.5", "worker-2": "oom@2"}, (0, 0, {}), 0,
        ("restart", "worker-2", ["worker-0", "worker-1", "worker-2"], True,
         ("worker-2 failed with exit code 137: OOMKilled (then worker-0, worker-1 failed too); retryable: "
         "recreating worker-0, worker-1, worker-2 (restart 1 of max_restarts=3)"))),
    "MWMS: a permanent failure waits group_settle_s for the members still running": (
        MWMS, {}, {"worker-0": "exit:1@1"}, (0, 0, {}), 0,
        ("wait", ("worker-0 failed with exit code 1: Error; waiting up to 3s for worker-1, worker-2 (a retryable "
         "failure among them would be the cause, and the group recreated)"))),
    "MWMS: ... said once, when first seen": (
        MWMS, {}, {"worker-0": "exit:1@1"}, (0, 0, {"worker-0": 0.0}), 2.9, ("wait", None)),
    "MWMS: ... then fails, blaming the earliest": (
        MWMS, {}, {"worker-0": "exit:1@3", "worker-1": "exit:1@1"}, (0, 0, {"worker-0": 0.0}), 3.0,
        ("fail", "worker-1", "Error", "")),
    "MWMS: every member failed permanently: no wait, the earliest blamed": (
        MWMS, {}, {"worker-0": "exit:1@3", "worker-1": "exit:1@2", "worker-2": "exit:1"}, (0, 0, {}), 0,
        ("fail", "worker-1", "Error", "")),
    "PSS: the chief's exit 1 waits for the ps": (
        PSS, {}, {"chief-0": "exit:1"}, (0, 0, {}), 0, ("wait", ("chief-0 failed with exit code 1: Error; waiting "
                                                         "up to 3s for ps-0"))),
}


@pytest.mark.parametrize(("counts", "kw", "spec", "before", "now", "expected"), FAILURES.values(), ids=FAILURES)
def test_failures_groups_settle_window_and_budget(counts, kw, spec, before, now, expected):
    job = _job(counts, **kw)
    restarts, preemptions, since = before
    state = EngineState(start=0.0, restarts=restarts, preemptions=preemptions,
                        failing_since={_r(k): v for k, v in since.items()})
    decision, state = _decide(job, spec, now, state)
    if expected[0] == "restart":
        _, cause, group, charged, message = expected
        assert isinstance(decision, Restart), decision
        assert (decision.cause.label, _labels(decision.group), decision.charged) == (cause, group, charged)
        assert message in decision.message
        assert (state.restarts, state.preemptions) == ((restarts + 1, preemptions) if charged
                                                       else (restarts, preemptions + 1))
        assert not set(state.failing_since) & set(decision.group)  # the next attempts start afresh
    elif expected[0] == "fail":
        _, replica, reason, budget = expected
        assert isinstance(decision, Fail), decision
        assert (decision.replica.label, decision.failure.reason, decision.budget) == (replica, reason, budget)
        assert (state.restarts, state.preemptions) == (restarts, preemptions)
    else:
        assert isinstance(decision, Wait), decision
        assert [n for n in decision.notes if expected[1] and n.startswith(expected[1])] or (
            expected[1] is None and decision.notes == ())


def test_a_backend_may_say_the_cause_its_own_way():
    job = _job(MWMS)
    views = _views(job, {"worker-1": "exit:-9"})
    views[_r("worker-1")] = ReplicaView(_r("worker-1"), terminal=True, failure=views[_r("worker-1")].failure,
                                        said="replica worker-1 exited -9 (killed by signal SIGKILL)")
    decision = engine.decide(job, views, 0, EngineState(0.0), group_settle_s=SETTLE_S)
    assert decision.message == ("replica worker-1 exited -9 (killed by signal SIGKILL); retryable: recreating "
                                "worker-0, worker-1, worker-2 (restart 1 of max_restarts=3)")


# -- timeout ---------------------------------------------------------------------------------------------------------
def test_the_deadline_fails_the_job_naming_what_still_runs_before_any_failure_is_judged():
    job = _job(PSS, timeout_s=100)
    state = EngineState.for_job(job, start=10.0)
    assert state.deadline == 110.0
    done = {"chief-0": "ok", "worker-0": "ok", "worker-1": "ok"}
    assert isinstance(_decide(job, done, 109.9, EngineState.for_job(job, 10.0))[0], Succeeded)
    decision, _ = _decide(job, {"worker-0": "exit:137", "ps-0": "ok"}, 110.0, state)
    assert decision == TimedOut((_r("chief-0"), _r("worker-1")), message=(
        "mnist-1 did not finish within its timeout of 100s; still running: ['chief-0', 'worker-1']. Raise timeout_s "
        "or train for less (fewer epochs)"))


def test_a_replica_reporting_the_deadline_itself_is_a_timeout_and_the_sentence_says_what_hit_it():
    job = _job(MWMS, timeout_s=0.5)
    decision, _ = _decide(job, {"worker-2": "deadline", "worker-1": "ok"}, 1.0)
    assert isinstance(decision, TimedOut) and decision.replica == _r("worker-2")
    assert decision.failure.reason == "DeadlineExceeded"
    assert decision.message == ("mnist-1 did not finish within its timeout of 0.5s (Job was active longer than "
                                "specified); still running: ['worker-0']. Raise timeout_s or train for less (fewer "
                                "epochs)")
    no_timeout = _job(MWMS)  # a Kubernetes Job's backstop deadline
    assert engine.timed_out_message(no_timeout, [_r("worker-1")], Failure(
        FailureKind.TIMEOUT, "DeadlineExceeded", "the Job j hit its activeDeadlineSeconds=604800")) == (
        "mnist-1 did not finish within its deadline (the Job j hit its activeDeadlineSeconds=604800); still "
        "running: ['worker-1']. Raise timeout_s or train for less (fewer epochs)")


def test_wake_times_are_the_grace_ends_the_deadline_and_the_settle_ends():
    job = _job(MWMS, grace_period_s=10, evaluator_grace_s=60, timeout_s=500)
    state = EngineState(start=0.0, deadline=500.0, success_at=20.0, failing_since={_r("worker-0"): 7.0,
                                                                                   _r("worker-1"): 1.0})
    assert sorted(engine.wake_times(job, state, group_settle_s=SETTLE_S, now=5.0)) == [10.0, 30.0, 80.0, 500.0]
    state.success_at = None  # before success: the first schedule deadline too
    views = engine.Views.of(job, _views(job, {"worker-1": {"created_at": 2.0}, "worker-2": {"created_at": 1.0,
                                                                                              "scheduled_at": 3.0}}))
    assert sorted(engine.wake_times(job, state, group_settle_s=SETTLE_S, now=5.0, views=views,
                                    schedule_timeout_s=60)) == [10.0, 62.0, 500.0]


# -- Kubernetes' verdicts --------------------------------------------------------------------------------------------
# (counts, views, decide keywords, now, expected: ("fail", replica, kind, reason, message) | ("restart", cause) |
#  ("wait",)); the views' facts: ``refused`` (an admission's refusal read from a Job's FailedCreate event),
#  ``created_at``/``scheduled_at``/``started`` (the schedule deadlines), ``lost_nodes`` (spread=required)
QUOTA = ("QuotaExceeded", "exceeded quota: team-quota, requested: cpu=1; raise it")
LIMIT = ("LimitRangeRefused", "maximum cpu usage per Container is 500m, but limit is 1; set cpu")
NOT_SCHEDULED_5 = ("not scheduled within schedule_timeout_s=5s: free capacity or quota, lower the requests (cpu, "
                   "memory, gpus), check node_selector and tolerations, or raise schedule_timeout_s")
NOT_STARTED_5 = "its container did not start within schedule_timeout_s=5s: check the events above (a volume"
TIMEOUT_5 = {"schedule_timeout_s": 5}
REQUIRED = {"node_loss_permanent": True}
NODE_LOST_MESSAGE = ("worker-1 failed: NodeLost (its node node-1 was lost) (then worker-0 failed too); the node lost: "
                     "node-1")
VERDICTS = {
    "an admission's refusal fails at once, with its reason and message": (
        PSS, {"ps-0": {"refused": QUOTA}}, {}, 0, ("fail", "ps-0", FailureKind.REFUSED, *QUOTA)),
    "... the first refused replica in replica order": (
        PSS, {"ps-0": {"refused": QUOTA}, "worker-1": {"refused": LIMIT}}, {}, 0,
        ("fail", "worker-1", FailureKind.REFUSED, *LIMIT)),
    "... after the failures: a retryable one is recreated first": (
        PSS, {"ps-0": {"refused": QUOTA}, "worker-0": "exit:137"}, {}, 0, ("restart", "worker-0")),
    "not scheduled schedule_timeout_s after its creation: fails": (
        MWMS, {"worker-1": {"created_at": 1.0}}, TIMEOUT_5, 6.0,
        ("fail", "worker-1", FailureKind.SCHEDULE_TIMEOUT, engine.NOT_SCHEDULED, NOT_SCHEDULED_5)),
    "... not before": (MWMS, {"worker-1": {"created_at": 1.0}}, TIMEOUT_5, 5.9, ("wait",)),
    "... the earliest created first": (
        MWMS, {"worker-0": {"created_at": 1.0}, "worker-2": {"created_at": 0.5}}, TIMEOUT_5, 9.0,
        ("fail", "worker-2", FailureKind.SCHEDULE_TIMEOUT, engine.NOT_SCHEDULED, NOT_SCHEDULED_5)),
    "... no schedule_timeout_s (the local backend): no deadline": (
        MWMS, {"worker-1": {"created_at": 1.0}}, {}, 1e6, ("wait",)),
    "scheduled but not started: counted from the binding": (
        MWMS, {"worker-1": {"created_at": 0.0, "scheduled_at": 3.0}}, TIMEOUT_5, 7.9, ("wait",)),
    "... then fails as not started": (
        MWMS, {"worker-1": {"created_at": 0.0, "scheduled_at": 3.0}}, TIMEOUT_5, 8.0,
        ("fail", "worker-1", FailureKind.SCHEDULE_TIMEOUT, engine.NOT_STARTED, NOT_STARTED_5)),
    "a started replica has no schedule deadline": (
        MWMS, {"worker-1": {"created_at": 0.0, "scheduled_at": 1.0, "started": True}}, TIMEOUT_5, 100.0, ("wait",)),
    "the failures are judged before the schedule deadlines": (
        MWMS, {"worker-0": {"created_at": 0.0}, "worker-1": "exit:137"}, TIMEOUT_5, 100.0, ("restart", "worker-1")),
    "a refusal is judged before the schedule deadlines": (
        PSS, {"chief-0": {"created_at": 0.0}, "ps-0": {"refused": QUOTA, "created_at": 0.0}}, TIMEOUT_5, 100.0,
        ("fail", "ps-0", FailureKind.REFUSED, *QUOTA)),
    "spread=required: a restart whose group is on a lost node fails instead, naming the node": (
        {"worker": 2}, {"worker-1": {"failure": "node-lost", "terminal": True, "lost_nodes": ("node-1",)},
                        "worker-0": "exit:1"}, REQUIRED, 0,
        ("fail", "worker-1", FailureKind.PERMANENT, policy.NODE_LOST, NODE_LOST_MESSAGE)),
    "... a survivor's pod on the lost node counts too": (
        {"worker": 2}, {"worker-1": "exit:137", "worker-0": {"lost_nodes": ("node-2",)}}, REQUIRED, 0,
        ("fail", "worker-1", FailureKind.PERMANENT, policy.NODE_LOST,
         "worker-1 failed with exit code 137: Signal; the node lost: node-2")),
    "... a lost node outside the restart group does not": (
        PSS, {"worker-1": "exit:137", "worker-0": {"lost_nodes": ("node-2",)}}, REQUIRED, 0, ("restart", "worker-1")),
    "spread=preferred: the group is recreated on the surviving nodes": (
        {"worker": 2}, {"worker-1": {"failure": "node-lost", "terminal": True, "lost_nodes": ("node-1",)},
                        "worker-0": "exit:1"}, {}, 0, ("restart", "worker-1")),
}


@pytest.mark.parametrize(("counts", "spec", "kw", "now", "expected"), VERDICTS.values(), ids=VERDICTS)
def test_kubernetes_verdicts_refusals_schedule_deadlines_and_lost_nodes(counts, spec, kw, now, expected):
    job = _job(counts)
    decision, state = _decide(job, spec, now, **kw)
    if expected[0] == "fail":
        _, replica, kind, reason, message = expected
        assert isinstance(decision, Fail), decision
        assert (decision.replica.label, decision.failure.kind, decision.failure.reason) == (replica, kind, reason)
        assert decision.failure.message.startswith(message) and decision.budget == ""
        assert (state.restarts, state.preemptions) == (0, 0)  # a lost node's failure is no recreation
    elif expected[0] == "restart":
        assert isinstance(decision, Restart) and decision.cause.label == expected[1], decision
    else:
        assert isinstance(decision, Wait), decision


def test_the_views_keep_the_schedule_deadlines_in_order_as_replicas_are_scheduled_and_start():
    job = _job(MWMS)
    views = engine.Views(job)
    w0, w1 = _r("worker-0"), _r("worker-1")
    assert views.earliest_pending() is None
    views.set(ReplicaView(w0, created_at=2.0))
    views.set(ReplicaView(w1, created_at=1.0))
    assert views.earliest_pending() == (w1, 1.0, False)
    views.set(ReplicaView(w1, created_at=1.0, scheduled_at=4.0))
    assert views.earliest_pending() == (w0, 2.0, False)
    views.set(ReplicaView(w0, created_at=2.0, scheduled_at=3.0, started=True))
    assert views.earliest_pending() == (w1, 4.0, True)
    views.set(ReplicaView(w1, terminal=True, created_at=1.0, scheduled_at=4.0))
    assert views.earliest_pending() is None
    views.set(ReplicaView(w1, refused=QUOTA, created_at=9.0))  # a new attempt
    assert views.refused == {w1} and views.earliest_pending() == (w1, 9.0, False)
    views.set(ReplicaView(w1, created_at=9.0))
    assert views.refused == set()


# -- the backends decide nothing of their own ------------------------------------------------------------------------
BACKEND_FILES = [ROOT / "tfk8s/launcher/local.py", *sorted((ROOT / "tfk8s/launcher/kubernetes").glob("*.py"))]
# The engine's names and attributes no backend reads: a backend that does decides something itself.
ENGINE_ONLY = {"is_success", "decision_group", "restart_group", "restart_note", "preemption_note", "grace_period_s",
               "evaluator_grace_s", "success_policy", "failing_since", "max_restarts", "max_preemptions"}
ALLOWED = {  # (file, name): why
    ("creation.py", "max_restarts"): "the re-attach message says the budget used so far",
    ("objects.py", "max_restarts"): "the Job's annotation carries the budget used so far (a re-attach reads it)",
    ("api.py", "grace_period_s"): "a pod deletion's grace period (SIGTERM -> SIGKILL), not the grace after success",
}


STRING_PARSING = {"split", "rsplit", "partition", "rpartition", "splitlines", "startswith", "endswith", "find", "rfind",
                  "index", "rindex", "removeprefix", "removesuffix", "strip", "lstrip", "rstrip", "replace"}


def _parses_a_message(node: ast.AST) -> bool:
    """``x.message.split(...)``, ``x.message[...]``, ``"..." in x.message``, ``re.search(..., x.message)``: text an
    engine decision carries (its ``message``, its failure's, its ``notes``) read back for a meaning."""
    def said(n: ast.AST) -> bool:
        return isinstance(n, ast.Attribute) and n.attr in ("message", "notes", "budget")

    if isinstance(node, ast.Attribute) and node.attr in STRING_PARSING and said(node.value):
        return True
    if isinstance(node, ast.Subscript) and said(node.value):
        return True
    if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn, ast.Eq, ast.NotEq)) for op in node.ops):
        return any(said(n) for n in (node.left, *node.comparators))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
        return node.func.value.id == "re" and any(said(a) for a in node.args)
    return False


@pytest.mark.parametrize("path", BACKEND_FILES, ids=lambda p: p.name)
def test_the_backends_leave_every_decision_to_the_engine(path):
    tree = ast.parse(path.read_text())
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    used |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    used |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    found = {name for name in used & ENGINE_ONLY if (path.name, name) not in ALLOWED}
    assert not found, f"{path.name} reads {sorted(found)}: a decision of tfk8s.launcher.engine's"
    counted = [n for n in ast.walk(tree) if isinstance(n, ast.AugAssign)
               and isinstance(n.target, ast.Attribute) and n.target.attr in ("restarts", "preemptions")]
    assert not counted, f"{path.name} counts restarts itself (line {counted[0].lineno})"
    parsed = [n for n in ast.walk(tree) if _parses_a_message(n)]
    assert not parsed, f"{path.name} parses a message (line {parsed[0].lineno}): give the engine the fact instead"
    # a deadline is a time plus (or compared, less a time, with) schedule_timeout_s: judged by the engine
    deadlines = [n for n in ast.walk(tree) if (isinstance(n, ast.BinOp) or isinstance(n, ast.Compare) and any(
        isinstance(x, ast.BinOp) for x in ast.walk(n))) and any(
        isinstance(x, ast.Attribute) and x.attr == "schedule_timeout_s" for x in ast.walk(n))]
    assert not deadlines, f"{path.name} judges a schedule deadline itself (line {deadlines[0].lineno})"

"""The Kubernetes backend's stops against the fake API server (tests/fakes/kube_fixtures.py): preemptions restarted
without using the restart budget, a Kueue suspension waiting for re-admission, TensorFlow's restart exit code,
the stop grace, SIGINT, the evaluator's time for the final checkpoint and the start-up deadline."""

from __future__ import annotations

import os
import signal
import time

import pytest

pytest.register_assert_rewrite("tests.fakes.kube_fixtures")

from tests.fakes.kube_fixtures import PODS, FakeCluster
from tests.launcher.kubernetes.test_backend import (  # noqa: F401 - the autouse fixtures apply here too
    JOB,
    _nothing_left_and_every_call_granted,
    _outside_a_pod,
    make_job,
    make_settings,
)
from tfk8s.core.errors import LauncherTerminatedError, ReplicaFailedError
from tfk8s.launcher.kubernetes.errors import KueueQueueError, PermanentFailureError, ScheduleTimeoutError

pytest_plugins = ["tests.fakes.kube_fixtures"]
pytestmark = pytest.mark.timeout(60)


def _recreations(cluster: FakeCluster) -> list[str]:
    return [line for line in cluster.output if ": recreating " in line]


def test_preemptions_are_restarted_without_using_up_the_restart_budget(cluster):
    """max_restarts=0: an eviction and a preemption by the scheduler are recreated all the same, counted as
    preemptions; then a program failure (exit 137) finds the budget empty."""
    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1")
        c.run()
        c.evict("worker-1")
        c.wait_pods("worker-0", "worker-1", attempt=1)
        c.run()
        c.preempt("worker-0")
        c.wait_pods("worker-0", "worker-1", attempt=2)
        c.run()
        c.fail("worker-1", 137)

    with pytest.raises(ReplicaFailedError) as e:
        cluster.launch(make_job(chief=0, worker=2, ps=0, max_restarts=0), make_settings(), script)
    assert (e.value.replica.label, e.value.exit_code, e.value.reason) == ("worker-1", 137, "Signal")
    assert "restart budget is used up (0 of max_restarts=0)" in str(e.value)
    first, second = _recreations(cluster)
    assert "worker-1 failed with exit code 137: Evicted" in first
    assert first.endswith("preempted: recreating worker-0, worker-1 (preemption 1, not counted against "
                          "max_restarts=0)")
    assert "worker-0 failed with exit code 143: PreemptionByScheduler" in second
    assert second.endswith("(preemption 2, not counted against max_restarts=0)")


OWN_EVICTIONS = {
    "pod ephemeral storage": ("Pod ephemeral local storage usage exceeds the total limit of containers 1Gi. ",
                              "ephemeral-storage use over its limit 1Gi"),
    "container ephemeral storage": ('Container tensorflow exceeded its local ephemeral storage limit "512Mi". ',
                                    "ephemeral-storage use over its limit 512Mi"),
    "top consumer under memory pressure": (
        ("The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. Container tensorflow "
         "was using 3Gi, request is 2Gi, has larger consumption of memory. "),
        "tensorflow used 3Gi of memory, request 2Gi"),
}


@pytest.mark.parametrize("case", sorted(OWN_EVICTIONS))
def test_an_eviction_the_pod_caused_is_charged_to_max_restarts(cluster, case):
    """The kubelet evicts a worker for its own use (its ephemeral storage over its limit, or its memory over its
    request under node pressure): not a preemption; the restart budget (max_restarts=1) pays, and the second
    eviction fails the job naming the resource and the limit."""
    message, named = OWN_EVICTIONS[case]

    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1")
        c.run()
        c.evict("worker-1", message)
        c.wait_pods("worker-0", "worker-1", attempt=1)
        c.run()
        c.evict("worker-1", message)

    with pytest.raises(ReplicaFailedError) as e:
        cluster.launch(make_job(chief=0, worker=2, ps=0, max_restarts=1), make_settings(), script)
    assert (e.value.replica.label, e.value.reason) == ("worker-1", "Evicted")
    assert named in str(e.value) and "restart budget is used up (1 of max_restarts=1)" in str(e.value)
    (first,) = _recreations(cluster)
    assert first.endswith("retryable: recreating worker-0, worker-1 (restart 1 of max_restarts=1)"), first


def test_preemptions_are_bounded_by_max_preemptions(cluster):
    """Real preemptions stay free of max_restarts, but max_preemptions=1 bounds them: the second one fails."""
    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1")
        c.run()
        c.preempt("worker-0")
        c.wait_pods("worker-0", "worker-1", attempt=1)
        c.run()
        c.preempt("worker-0")

    with pytest.raises(ReplicaFailedError) as e:
        cluster.launch(make_job(chief=0, worker=2, ps=0, max_restarts=0, max_preemptions=1), make_settings(), script)
    assert (e.value.replica.label, e.value.reason) == ("worker-0", "PreemptionByScheduler")
    assert "the preemption bound is reached (1 of max_preemptions=1)" in str(e.value)
    assert len(_recreations(cluster)) == 1


def test_a_preempted_job_succeeds_with_its_preemptions_counted_apart(cluster):
    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1")
        c.run()
        c.preempt("worker-1")
        c.wait_pods("worker-0", "worker-1", attempt=1)
        c.run()
        c.succeed("worker-0")

    result = cluster.launch(make_job(chief=0, worker=2, ps=0, max_restarts=0), make_settings(), script)
    assert (result.restarts, result.preemptions, result.exit_codes) == (0, 1, {"worker-0": 0})


@pytest.mark.parametrize(("deletion_first", "pod_first"), [(False, False), (True, False), (False, True)],
                         ids=["job-update-first", "deletion-first", "pod-first"])
def test_a_kueue_suspension_is_a_preemption_and_waits_for_readmission(cluster, deletion_first, pod_first):
    """Kueue suspends a running replica's Job (its workload preempted): the set is recreated, not counted, and
    the new Jobs wait, suspended, until the queue admits them again. The pod's deletion seen before the Job's
    suspension (``deletion_first``; max_restarts=0) is not taken for a deletion by someone else, and a re-admitted
    Job whose pod is seen before the Job's own update (``pod_first``) is not taken for a second suspension."""
    admitted: list[str] = []

    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1")
        c.run()
        c.server.kueue_hold = True  # from now on the queue holds new Jobs
        c.suspend("worker-1", deletion_first=deletion_first)
        held = c.wait_for(lambda: len(c.held_jobs()) == 2 and c.held_jobs(), "both new Jobs held by the queue")
        time.sleep(1)  # held, the launcher waits (schedule_timeout_s is 20 s)
        for job in held:
            c.admit(job, pod_first=pod_first)
            admitted.append(job)
        c.wait_pods("worker-0", "worker-1", attempt=1)
        c.run()
        c.succeed("worker-0")

    settings = make_settings(schedule_timeout_s=20, kueue_queue="team-a")
    cluster.local_queue("team-a")
    result = cluster.launch(make_job(chief=0, worker=2, ps=0, max_restarts=0), settings, script)
    assert (result.restarts, result.preemptions) == (0, 1) and len(admitted) == 2
    (line,) = _recreations(cluster)
    assert "worker-1 failed: Suspended (Job tfk8s-run-7-worker-1 was suspended while its pod ran (its queue team-a " \
           "preempted the workload)" in line


def test_a_restart_under_kueue_creates_the_new_job_only_once_the_old_jobs_workload_is_gone(cluster):
    """Kueue finds a Job's Workloads by the owner's name: a new Job created while its deleted predecessor's
    Workload is still there can be matched to it and never be unsuspended (seen with the real Kueue v0.17.0,
    tests/realcluster/test_kueue.py). The restart waits until that Workload is gone before creating the Job."""
    seen: dict = {}

    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1")
        c.run()
        c.workload(f"{JOB}-worker-1", "Evicted", "The ClusterQueue is stopped")  # the old Job's, admitted before
        c.server.kueue_hold = True
        c.suspend("worker-1")
        c.wait_for(lambda: any("preempted: recreating" in line for line in c.output), "the restart")
        time.sleep(1.5)
        seen["jobs while the old Workload exists"] = sorted(j["metadata"]["name"] for j in c.objects("jobs"))
        c.delete_workloads(f"{JOB}-worker-1")
        held = c.wait_for(lambda: len(c.held_jobs()) == 2 and c.held_jobs(), "both new Jobs held by the queue")
        for job in held:
            c.admit(job)
        c.wait_pods("worker-0", "worker-1", attempt=1)
        c.run()
        c.succeed("worker-0")

    cluster.local_queue("team-a")
    result = cluster.launch(make_job(chief=0, worker=2, ps=0, max_restarts=0),
                            make_settings(schedule_timeout_s=20, kueue_queue="team-a"), script)
    assert (result.restarts, result.preemptions) == (0, 1)
    assert seen["jobs while the old Workload exists"] == [], seen
    assert not [line for line in cluster.output if "still exist" in line]


def test_a_held_jobs_reason_is_its_own_workloads_not_a_deleted_namesakes(cluster):
    """A Workload owned by another Job of the same name (a deleted predecessor, another uid) is not the held Job's:
    its stale reason is not printed; the Job's own Workload's is."""
    why = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default"
    cluster.local_queue("team-a")
    cluster.server.kueue_hold = True

    def script(c: FakeCluster) -> None:
        (held,) = c.wait_for(lambda: c.held_jobs(), "the Job held by the queue")
        c.workload(held, "Preempted", "an old Job's stale reason", job_uid="0ld-uid-of-a-deleted-job")
        c.workload(held, "Inadmissible", why)

    with pytest.raises(ScheduleTimeoutError) as e:
        cluster.launch(make_job(chief=0, worker=1, ps=0), make_settings(schedule_timeout_s=4, kueue_queue="team-a"),
                       script)
    assert f"(Kueue: Inadmissible: {why})" in str(e.value)
    assert not [line for line in cluster.output if "stale reason" in line]


def test_a_suspended_job_never_readmitted_fails_at_the_schedule_deadline(cluster):
    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0")
        c.run()
        c.server.kueue_hold = True
        c.suspend("worker-0")

    settings = make_settings(schedule_timeout_s=1, kueue_queue="team-a")
    cluster.local_queue("team-a")
    with pytest.raises(ScheduleTimeoutError) as e:
        cluster.launch(make_job(chief=0, worker=1, ps=0), settings, script)
    assert e.value.reason == "Suspended" and "queue team-a has not admitted it" in str(e.value)


@pytest.mark.parametrize("active", [None, False], ids=["missing", "inactive"])
def test_a_missing_or_inactive_kueue_queue_fails_at_once_naming_it_and_the_namespace(cluster, active):
    """No LocalQueue team-a (or an inactive one): Kueue would hold every Job for the whole schedule_timeout_s;
    the step fails before anything is created, naming the queue and the namespace."""
    if active is not None:
        cluster.local_queue("team-a", active=False, reason="ClusterQueueDoesNotExist",
                            message="Can't submit new workloads to clusterQueue")
    t0 = time.monotonic()
    with pytest.raises(KueueQueueError) as e:
        cluster.launch(make_job(chief=0, worker=1, ps=0), make_settings(schedule_timeout_s=600,
                                                                        kueue_queue="team-a"))
    assert time.monotonic() - t0 < 10
    assert "kueue_queue='team-a'" in str(e.value) and "namespace tfk8s-test" in str(e.value)
    if active is None:
        assert "there is no LocalQueue team-a in namespace tfk8s-test" in str(e.value)
    else:
        assert "is inactive (ClusterQueueDoesNotExist: Can't submit new workloads" in str(e.value)
    assert cluster.count("POST", "jobs") == 0


def test_an_inadmissible_workloads_reason_shows_while_held_and_in_the_schedule_error(cluster):
    """Kueue holds the Job (its Workload's QuotaReserved False, Inadmissible): the reason is printed while it
    waits and quoted in the schedule deadline's error."""
    why = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default"
    cluster.local_queue("team-a")
    cluster.server.kueue_hold = True

    def script(c: FakeCluster) -> None:
        (held,) = c.wait_for(lambda: c.held_jobs(), "the Job held by the queue")
        c.workload(held, "Inadmissible", why)

    with pytest.raises(ScheduleTimeoutError) as e:
        cluster.launch(make_job(chief=0, worker=1, ps=0), make_settings(schedule_timeout_s=5, kueue_queue="team-a"),
                       script)
    assert e.value.reason == "Suspended"
    assert [line for line in cluster.output if line.endswith(
        f"worker-0: Job {JOB}-worker-0 is held by Kueue queue team-a: Inadmissible: {why}")]
    assert f"queue team-a has not admitted it (Kueue: Inadmissible: {why})" in str(e.value)


@pytest.mark.parametrize(("served", "read"), [(("v1beta2", "v1beta1"), "v1beta2"), (("v1beta2",), "v1beta2"),
                                              (("v1beta1",), "v1beta1")], ids=["kueue-0.15-0.19", "kueue-0.20+",
                                                                               "kueue-before-0.15"])
def test_kueue_is_read_in_v1beta2_where_served_else_v1beta1(cluster, served, read):
    """Kueue serves v1beta2 since 0.15 and stops serving v1beta1 in 0.20 (kubernetes-sigs/kueue#13957): the
    LocalQueue and the Workloads are read in v1beta2 where the API server serves it, in v1beta1 where only it is
    (with a warning), never in a version not served; the held Job's reason comes through either way."""
    why = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default"
    cluster.serve_kueue(*served)
    cluster.local_queue("team-a")
    cluster.server.kueue_hold = True

    def script(c: FakeCluster) -> None:
        (held,) = c.wait_for(lambda: c.held_jobs(), "the Job held by the queue")
        c.workload(held, "Inadmissible", why)

    with pytest.raises(ScheduleTimeoutError) as e:
        cluster.launch(make_job(chief=0, worker=1, ps=0), make_settings(schedule_timeout_s=3, kueue_queue="team-a"),
                       script)
    assert f"queue team-a has not admitted it (Kueue: Inadmissible: {why})" in str(e.value)
    kueue = [(r.resource.plural, r.resource.version) for r in cluster.requests()
             if r.resource is not None and r.resource.group == "kueue.x-k8s.io" and r.resource.plural]
    assert ("localqueues", read) in kueue and ("workloads", read) in kueue
    assert {v for _, v in kueue} == {read}
    warned = [line for line in cluster.output if "Kueue serves kueue.x-k8s.io/v1beta1, not v1beta2" in line]
    assert bool(warned) == (read == "v1beta1")


@pytest.mark.parametrize("served", [(), ("v1alpha1",)], ids=["not-installed", "no-version-tfk8s-reads"])
def test_kueue_not_installed_is_told_apart_from_kueue_in_versions_tfk8s_does_not_read(cluster, served):
    """No kueue.x-k8s.io group at all: Kueue is not installed. The group served, but in neither v1beta2 nor
    v1beta1: not "not installed" but the versions served and those tfk8s reads. Either way before any Job."""
    cluster.serve_kueue(*served)
    with pytest.raises(KueueQueueError) as e:
        cluster.launch(make_job(chief=0, worker=1, ps=0), make_settings(kueue_queue="team-a"))
    msg = str(e.value)
    if served:
        assert "Kueue is not installed" not in msg
        assert ("the API server serves Kueue's API (kueue.x-k8s.io) in version(s) v1alpha1 only, and tfk8s reads "
                "v1beta2 or v1beta1") in msg
    else:
        assert "the API server does not serve Kueue's API (kueue.x-k8s.io): Kueue is not installed" in msg
    assert cluster.count("POST", "jobs") == 0


def test_the_restart_exit_code_after_a_preemption_notice_is_retryable_and_counted(cluster):
    """TensorFlow's PreemptionCheckpointHandler saved on SIGTERM and exited 42: recreated, from the budget (no
    preemption shows on the pod); with restart_exit_code=0, exit 42 is a program error like any 1-127."""
    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1")
        c.run()
        c.fail("worker-1", 42)
        c.wait_pods("worker-0", "worker-1", attempt=1)
        c.run()
        c.succeed("worker-0")

    result = cluster.launch(make_job(chief=0, worker=2, ps=0), make_settings(), script)
    assert (result.restarts, result.preemptions) == (1, 0)
    (line,) = _recreations(cluster)
    assert ("worker-1 failed with exit code 42: RestartRequested (exit code 42: the program saved on SIGTERM and "
            "asks to be restarted)") in line


def test_exit_42_is_a_program_error_when_no_restart_exit_code_is_set(cluster):
    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0")
        c.run()
        c.fail("worker-0", 42)

    with pytest.raises(PermanentFailureError) as e:
        cluster.launch(make_job(chief=0, worker=1, ps=0, restart_exit_code=0), make_settings(), script)
    assert (e.value.exit_code, e.value.reason) == (42, "Error")


def test_stop_grace_s_is_the_pods_grace_period_and_the_grace_of_the_launchers_deletes(cluster):
    seen: dict = {}

    def script(c: FakeCluster) -> None:
        pods = c.wait_pods("chief-0", "worker-0", "ps-0")
        seen["grace"] = {p["spec"]["terminationGracePeriodSeconds"] for p in pods.values()}
        c.run()
        c.succeed("chief-0")

    cluster.launch(make_job(worker=1, stop_grace_s=7.5), make_settings(), script)
    assert seen["grace"] == {8}  # whole seconds, rounded up
    deletes = {str(r.params.get("gracePeriodSeconds")) for r in cluster.requests()
               if r.resource == PODS and r.method.value == "DELETE"}
    assert deletes == {"8"}


def test_sigint_of_the_launcher_deletes_every_replica_like_sigterm(cluster):
    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "ps-0")
        c.run()
        os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(LauncherTerminatedError) as e:
        cluster.launch(make_job(worker=1), make_settings(), script)
    assert e.value.signum == signal.SIGINT
    assert str(e.value) == (f"the launcher was interrupted by the user (SIGINT: Ctrl-C or kill -INT); every replica "
                            f"of {JOB} is being deleted; rerun the step to train again")
    assert cluster.count("DELETE", "pods") == 3


def test_the_evaluator_gets_its_grace_after_the_chiefs_success_to_evaluate_the_final_checkpoint(cluster):
    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "evaluator-0")
        c.run()
        c.succeed("chief-0")
        c.succeed("worker-0")
        time.sleep(1.5)  # past grace_period_s (0.2 s): still running, it evaluates the last checkpoint
        c.log("evaluator-0", "evaluator: checkpoint 3: loss=0.1 accuracy=0.97")
        c.succeed("evaluator-0")

    from tfk8s.core.cluster import ReplicaCounts
    from tfk8s.core.job import TrainingJob

    job = TrainingJob(JOB, ReplicaCounts(chief=1, worker=1, evaluator=1), ("python", "-m", "trainer.task"),
                      grace_period_s=0.2, stop_grace_s=0, evaluator_grace_s=20)
    result = cluster.launch(job, make_settings(), script)
    assert result.exit_codes == {"chief-0": 0, "worker-0": 0, "evaluator-0": 0} and result.stopped == []
    assert "[evaluator-0] evaluator: checkpoint 3: loss=0.1 accuracy=0.97" in cluster.output


def test_an_evaluator_past_its_grace_is_stopped(cluster):
    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "evaluator-0")
        c.run()
        c.succeed("chief-0")

    from tfk8s.core.cluster import ReplicaCounts
    from tfk8s.core.job import TrainingJob

    job = TrainingJob(JOB, ReplicaCounts(chief=1, worker=0, evaluator=1), ("python", "-m", "trainer.task"),
                      stop_grace_s=0, evaluator_grace_s=0.5)
    t0 = time.monotonic()
    result = cluster.launch(job, make_settings(), script)
    assert result.stopped == ["evaluator-0"] and time.monotonic() - t0 < 20


def test_a_replica_starting_forever_is_hung_at_the_startup_deadline(cluster, tmp_path):
    """It said it was starting (the trainer's heartbeat before it builds its strategy) and never reported a
    step: after startup_timeout_s it is hung (a proxy in the way of the replicas' gRPC, tensorflow#24887)."""
    from tfk8s.core.progress import Progress, progress_file, write_progress

    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1")
        c.run()
        for label in ("worker-0", "worker-1"):
            write_progress(progress_file(tmp_path, label), Progress(label, time.time(), state="starting"))

    job = make_job(chief=0, worker=2, ps=0, train_dir=str(tmp_path), progress_timeout_s=600, startup_timeout_s=1,
                   max_restarts=0)
    t0 = time.monotonic()
    with pytest.raises(ReplicaFailedError) as e:
        cluster.launch(job, make_settings(), script)
    assert time.monotonic() - t0 < 20 and e.value.reason == "NoProgress"
    assert "no first step 1 s after it said it was starting (last report: state starting at" in str(e.value)
    assert "startup_timeout_s=1" in str(e.value) and "NO_PROXY" in str(e.value)

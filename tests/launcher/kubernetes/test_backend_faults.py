"""Faults of the Kubernetes backend found in review: API outages, a peer's follow-on failure, a Job deleted
by its TTL, a pod that never starts, sidecars, a re-attaching launcher.

Same fixtures as tests/launcher/kubernetes/test_backend.py, plus a way to stall the launcher's *pods* watch (a lagging watch
stream, as a reconnect, a slow API server or a 410 re-list produces on a real cluster) while lists and the
Jobs watch go on.
"""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import threading
import time

import pytest

pytest.register_assert_rewrite("tests.fakes.kube_fixtures")

from tests.fakes.kube_fixtures import JOBS, NAMESPACE, PODS, FakeApiServer, FakeCluster, running_cluster
from tests.launcher.kubernetes.test_backend import (  # noqa: F401 - the autouse fixtures apply here too
    _nothing_left_and_every_call_granted,
    _outside_a_pod,
    make_job,
    make_settings,
    name,
)
from tfk8s.core.errors import ReplicaFailedError
from tfk8s.launcher.kubernetes.errors import KubernetesApiError, ScheduleTimeoutError
from tfk8s.launcher.kubernetes.objects import job_manifest, service_manifest
from tfk8s.launcher.kubernetes.watch import Synced, Watcher, WatchFailed

pytest_plugins = ["tests.fakes.kube_fixtures"]
pytestmark = pytest.mark.timeout(60)

STALL = threading.Event()  # set: new pods watch requests wait (the launcher's pods watch lags)
_ORIG_SERVE_WATCH = FakeApiServer._serve_watch


async def _stallable_serve_watch(self, request):
    if request.resource == PODS:
        while STALL.is_set() and not self.closing:
            await asyncio.sleep(0.02)
    agen = _ORIG_SERVE_WATCH(self, request)
    try:
        async for item in agen:
            yield item
    finally:
        await agen.aclose()


@pytest.fixture
def cluster(monkeypatch):
    """As tests.fakes.kube_fixtures.cluster, with a stallable pods watch."""
    STALL.clear()
    monkeypatch.setattr(FakeApiServer, "_serve_watch", _stallable_serve_watch)
    with running_cluster() as c:
        yield c
    STALL.clear()


def stall_pod_watch(c: FakeCluster) -> None:
    STALL.set()
    c.close_watches("pods")  # the open watch ends; its resumption waits


def launcher_done(c: FakeCluster) -> bool:
    return any("none remain" in line or "remain " in line for line in c.output)


def wait_quietly(c: FakeCluster, predicate, timeout: float):
    """predicate()'s value, or None on timeout or once the launcher has finished; never raises."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value or launcher_done(c):
            return value
        time.sleep(0.05)
    return None


# -- 1. ParameterServerStrategy: a ps restart alone cannot recover ------------------------------------------------------

def test_pss_retryable_ps_failure_recreates_the_coordinator_too(cluster):
    """TF2 ParameterServerStrategy: when a ps dies the coordinator (chief) gets UnavailableError/AbortedError and
    its variables are gone; recreating only the ps leaves a chief that then exits 1 -> PermanentFailureError."""
    seen: dict = {}

    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1", "ps-0")
        c.run()
        c.oom("ps-0")
        c.wait_pods("ps-0", attempt=1)
        chief1 = wait_quietly(c, lambda: c.replica_pod("chief-0", 1), 1.5)
        seen["chief_recreated"] = chief1 is not None
        if chief1 is None:  # what TF does to the old coordinator: UnavailableError from the lost ps -> exit 1
            c.run("ps-0")
            c.fail("chief-0", 1)
            return
        c.run()
        c.succeed("chief-0")

    result = cluster.launch(make_job(), make_settings(), script)
    assert seen["chief_recreated"]
    assert result.restarts == 1


# -- 2. MultiWorkerMirroredStrategy: a peer's consequent exit 1 wins over the root cause ---------------------------------

def test_mwms_peers_exit_1_after_a_retryable_failure_still_recreates_the_set(cluster):
    """worker-2 is OOMKilled; its peers' collectives then abort (exit 1). When the launcher sees both in one
    decision it picks the first replica in order (worker-0, exit 1: permanent) and fails the job, although the
    root cause (the earliest failure) is retryable and the set would be recreated anyway."""
    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1", "worker-2")
        c.run()
        stall_pod_watch(c)
        c.oom("worker-2")
        time.sleep(1.1)  # finishedAt has second resolution: the peers fail visibly later
        c.fail("worker-0", 1, message="tensorflow.python.framework.errors_impl.UnavailableError: Collective ops "
                                      "is aborted by: failed to connect to worker-2")
        c.fail("worker-1", 1)
        c.expire_watches("pods")  # the lagging watch resumes too late: 410, re-list, one Synced with all three
        STALL.clear()
        if wait_quietly(c, lambda: c.replica_pod("worker-0", 1) and c.replica_pod("worker-1", 1)
                        and c.replica_pod("worker-2", 1), 5):
            c.run()
            c.succeed("worker-0")

    result = cluster.launch(make_job(chief=0, worker=3, ps=0), make_settings(), script)
    assert result.restarts == 1


def test_mwms_peers_all_failing_permanently_blames_the_earliest(cluster):
    """worker-1 exits 1 first, worker-0 follows: the error names worker-1, not the first replica in order."""
    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1", "worker-2")
        c.run()
        stall_pod_watch(c)
        c.fail("worker-1", 2)
        time.sleep(1.1)
        c.fail("worker-0", 1)
        c.expire_watches("pods")
        STALL.clear()

    with pytest.raises(ReplicaFailedError) as info:
        cluster.launch(make_job(chief=0, worker=3, ps=0), make_settings(), script)
    assert info.value.replica.label == "worker-1" and info.value.exit_code == 2


# -- 3. A finished Job deleted (ttlSecondsAfterFinished) before the pod's update arrives -----------------------------------
def test_a_complete_job_deleted_by_its_ttl_is_not_a_job_deleted_failure(cluster):
    """ttl_seconds_after_finished=0 (accepted by the settings): the TTL controller deletes the chief's Job right
    after it completes. The Jobs watch delivers the DELETED (whose object says Complete) before the lagging pods
    watch delivers the pod's Succeeded: the launcher reports a PermanentFailureError 'JobDeleted'."""
    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1")
        c.run()
        stall_pod_watch(c)
        c.succeed("chief-0")  # pod Succeeded, Job Complete
        pod = c.replica_pod("chief-0")["metadata"]["name"]
        c._run(c.server.remove(PODS, c.namespace, pod))  # TTL controller: foreground deletion, pods first
        c._run(c.server.remove(JOBS, c.namespace, name("chief-0")))
        time.sleep(1.0)
        STALL.clear()

    result = cluster.launch(make_job(ps=0), make_settings(ttl_seconds_after_finished=0), script)
    assert result.exit_codes.get("chief-0") == 0


# -- 4. Scheduled but the container never starts (volume cannot be mounted) ------------------------------------------------
def test_a_pod_stuck_in_container_creating_does_not_hang_until_the_backstop(cluster):
    """A PVC that cannot be attached (RWO Multi-Attach, NFS down...): the pod is bound to a node, its container
    waits in ContainerCreating forever with FailedMount events. Neither the schedule deadline (the pod is
    scheduled) nor the fail-fast reasons apply: with no timeout_s the job hangs for the 7-day backstop."""
    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1")
        c.run("chief-0", "worker-0")
        c.waiting("worker-1", "ContainerCreating", "")
        c.add_event("Pod", c.replica_pod("worker-1")["metadata"]["name"], "FailedAttachVolume",
                    'Multi-Attach error for volume "pvc-1" Volume is already used by pod(s) x')
        if not wait_quietly(c, lambda: False, 5) and not launcher_done(c):
            os.kill(os.getpid(), signal.SIGTERM)  # end the hang

    with pytest.raises(ScheduleTimeoutError) as info:
        cluster.launch(make_job(ps=0), make_settings(schedule_timeout_s=0.5, pvc_name="data"), script)
    assert info.value.replica.label == "worker-1" and info.value.reason == "FailedAttachVolume"
    assert "Multi-Attach error" in str(info.value) and "did not start within schedule_timeout_s=0.5s" in str(info.value)


# -- 5. The watch gives up after ~5 s of API trouble, failing the whole training job ---------------------------------------
class _Resp:
    def __init__(self, lines: list[bytes], error: BaseException | None = None, pause: float = 0.0):
        self.lines, self.error, self.pause = lines, error, pause

    def stream(self, amt=None, decode_content=False):
        yield from self.lines
        time.sleep(self.pause)
        if self.error is not None:
            raise self.error

    def close(self):
        pass


def _drain(q: queue.Queue) -> list:
    items = []
    while True:
        try:
            items.append(q.get_nowait())
        except queue.Empty:
            return items


def test_watcher_survives_a_short_api_outage():
    """client-go's reflector retries with back-off forever; here 5 failed requests 1 s apart (an API server
    restart during a control-plane upgrade) put WatchFailed, which the backend raises: training is killed."""
    calls = {"n": 0}

    def list_fn():
        calls["n"] += 1
        if calls["n"] <= 5:
            raise KubernetesApiError("listing pods failed: 503 Service Unavailable", 503)
        return {"metadata": {"resourceVersion": "10"}, "items": []}

    q: queue.Queue = queue.Queue()
    w = Watcher("pods", list_fn, lambda rv, t: _Resp([], pause=0.05), q, retry_s=0.01)
    w.start()
    time.sleep(0.5)
    w.stop()
    items = _drain(q)
    assert not any(isinstance(i, WatchFailed) for i in items), items
    assert any(isinstance(i, Synced) for i in items)


def test_watcher_does_not_count_broken_streams_that_made_progress():
    """Each watch delivers events, then the connection breaks (a proxy / LB idle cut: urllib3 ProtocolError).
    errors is reset only when a watch ends cleanly, so 5 such breaks, hours apart, fail the training job."""
    from urllib3.exceptions import ProtocolError

    rv = {"n": 10}

    def watch_fn(_rv, _t):
        rv["n"] += 1
        line = b'{"type": "MODIFIED", "object": {"metadata": {"name": "p", "resourceVersion": "%d"}}}\n' % rv["n"]
        return _Resp([line], ProtocolError("Connection broken: IncompleteRead(0 bytes read)"), pause=0.01)

    q: queue.Queue = queue.Queue()
    w = Watcher("pods", lambda: {"metadata": {"resourceVersion": "10"}, "items": []}, watch_fn, q, retry_s=0.01)
    w.start()
    time.sleep(0.5)
    w.stop()
    assert not any(isinstance(i, WatchFailed) for i in _drain(q))


# -- 6. Re-attach keeps the dead launcher pod as owner ----------------------------------------------------------------------
def test_reattached_objects_are_owned_by_the_new_launcher_pod(cluster, monkeypatch, tmp_path):
    """The adopted Jobs and Services keep ownerReferences to the *previous* launcher pod: when that pod object
    is deleted (Argo podGC, node removal), the garbage collector deletes the replicas under the new launcher
    (JobDeleted, or a Service gone, which nothing watches: TF_CONFIG names stop resolving)."""
    ns_file = tmp_path / "namespace"
    from tests.fakes.kube_fixtures import NAMESPACE
    ns_file.write_text(NAMESPACE)
    monkeypatch.setattr("tfk8s.launcher.kubernetes.settings.SERVICEACCOUNT_NAMESPACE_FILE", ns_file)
    monkeypatch.setenv("TFK8S_LAUNCHER_POD_NAME", "launcher-old")
    monkeypatch.setenv("TFK8S_LAUNCHER_POD_UID", "uid-old")
    job, old = make_job(ps=0), make_settings()
    for r in job.counts.replicas():
        cluster.create(service_manifest(job, r, old))
        cluster.create(job_manifest(job, r, old))
    cluster.run()
    monkeypatch.setenv("TFK8S_LAUNCHER_POD_NAME", "launcher-new")
    monkeypatch.setenv("TFK8S_LAUNCHER_POD_UID", "uid-new")
    owners: dict = {}

    def script(c: FakeCluster) -> None:
        c.wait_for(lambda: c.count("GET", "pods", watch=True), "the pods watch")
        for kind in ("jobs", "services"):
            owners[kind] = {o["metadata"]["name"]: [r["uid"] for r in o["metadata"].get("ownerReferences", [])]
                            for o in c.objects(kind)}
        c.succeed("chief-0")

    cluster.launch(job, make_settings(), script)
    for kind in ("jobs", "services"):
        assert all(uids == ["uid-new"] for uids in owners[kind].values()), owners


# -- 7. An injected (non-native) sidecar keeps the pod Running after the tensorflow container exited --------------------------
def test_tensorflow_container_exit_decides_even_if_a_sidecar_keeps_the_pod_running(cluster):
    """restartPolicy Never + a webhook-injected sidecar (linkerd, vault-agent, a log shipper; istio is off but
    others are not): the chief's tensorflow container terminates with 0 but the pod phase stays Running, so
    classify_pod (phase only) never sees success; the job hangs until its deadline."""
    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1")
        c.run()
        c._patch_pod("chief-0", {"phase": "Running", "containerStatuses": [
            {"name": "tensorflow", "ready": False, "restartCount": 0, "image": "img", "imageID": "",
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "log-shipper", "ready": True, "restartCount": 0, "image": "fluent", "imageID": "",
             "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}}]})
        if not wait_quietly(c, lambda: False, 4) and not launcher_done(c):
            os.kill(os.getpid(), signal.SIGTERM)

    result = cluster.launch(make_job(ps=0), make_settings(), script)
    assert result.exit_codes.get("chief-0") == 0


# -- 8. The root cause's status arrives after its peers' follow-on exit 1s ----------------------------------------------------
SETTLE_S = 3.0  # group_settle_s of these tests


def test_mwms_oomkilled_reported_after_its_peers_exit_1_still_recreates_the_set(cluster):
    """worker-2 is OOMKilled; its peers' collectives abort and they exit 1, and the kubelet reports theirs first
    (a separate event, 0.5 s before worker-2's): the permanent exit 1s wait group_settle_s for the rest of the
    set, worker-2's OOMKilled arrives within it, and the set is recreated instead of failing on worker-0."""
    seen: dict = {}

    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1", "worker-2")
        c.run()
        c.log("worker-0", "step 10", "UnavailableError: Collective ops is aborted by: failed to connect to worker-2")
        c.log("worker-1", "step 10", "AbortedError: collective aborted")
        c.fail("worker-0", 1)
        c.fail("worker-1", 1)
        c.wait_for(lambda: any("waiting up to 3s" in line for line in c.output), "the launcher settling")
        time.sleep(0.5)
        c.oom("worker-2")
        seen["recreated"] = c.wait_pods("worker-0", "worker-1", "worker-2", attempt=1)
        c.run()
        c.succeed("worker-0")

    result = cluster.launch(make_job(chief=0, worker=3, ps=0), make_settings(group_settle_s=SETTLE_S), script)
    assert seen["recreated"]
    assert result.restarts == 1
    assert result.exit_codes == {"worker-0": 0}
    out = cluster.output
    assert any("worker-2 failed with exit code 137: OOMKilled" in line and "(then worker-0, worker-1 failed too)"
               in line and "recreating worker-0, worker-1, worker-2 (restart 1 of max_restarts=3)" in line for line in out), out
    shown = out.index("[launcher] last lines of worker-0 (failed after worker-2):")
    assert out[shown + 2] == "[launcher]   UnavailableError: Collective ops is aborted by: failed to connect to worker-2"
    assert "[launcher] last lines of worker-1 (failed after worker-2):" in out


def test_mwms_peers_exit_1_with_nothing_retryable_fail_after_the_settle_window(cluster):
    """The same without the OOMKilled: worker-2 keeps running, and once group_settle_s has passed the job fails
    naming the earliest finishedAt (worker-1, exit 2), not the first replica in order."""
    times: dict = {}

    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1", "worker-2")
        c.run()
        c.fail("worker-1", 2)
        times["failed"] = time.monotonic()
        time.sleep(1.1)  # finishedAt has second resolution
        c.fail("worker-0", 1)

    with pytest.raises(ReplicaFailedError) as info:
        cluster.launch(make_job(chief=0, worker=3, ps=0), make_settings(group_settle_s=SETTLE_S), script)
    elapsed = time.monotonic() - times["failed"]
    assert info.value.replica.label == "worker-1" and info.value.exit_code == 2
    assert type(info.value).__name__ == "PermanentFailureError"
    assert SETTLE_S - 0.5 < elapsed < SETTLE_S + 3.0, elapsed  # the window, then the report and the cleanup
    assert cluster.count("POST", "jobs") == 3  # not recreated


def test_pss_ps_oomkilled_reported_after_the_chief_exit_1_recreates_the_chief_and_ps(cluster):
    """ParameterServerStrategy: the chief's UnavailableError exit 1 is reported, 0.5 s later ps-0's OOMKilled:
    the chief and ps are recreated (the workers are not)."""
    seen: dict = {}

    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1", "ps-0")
        c.run()
        c.fail("chief-0", 1, message="UnavailableError: failed to connect to all addresses (ps-0)")
        c.wait_for(lambda: any("chief-0 failed with exit code 1: Error; waiting up to 3s for ps-0" in line
                               for line in c.output), "the launcher settling")
        time.sleep(0.5)
        c.oom("ps-0")
        c.wait_pods("chief-0", "ps-0", attempt=1)
        seen["workers"] = {w: c.replica_pod(w, 0) is not None for w in ("worker-0", "worker-1")}
        c.run()
        c.succeed("chief-0")

    result = cluster.launch(make_job(), make_settings(group_settle_s=SETTLE_S), script)
    assert result.restarts == 1
    assert seen["workers"] == {"worker-0": True, "worker-1": True}
    assert any("ps-0 failed with exit code 137: OOMKilled" in line and "(then chief-0 failed too)" in line
               and "recreating chief-0, ps-0 (restart 1 of max_restarts=3)" in line for line in cluster.output)


# -- the progress watchdog (tfk8s.launcher.watchdog; the same as the local backend's) -------------------------------
def _report(train_dir, label: str) -> None:
    from tfk8s.core.progress import Progress, progress_file, write_progress

    write_progress(progress_file(train_dir, label), Progress(label, time.time(), epoch=1, epochs=2, step=3))


def test_a_replica_that_reported_then_stalled_is_recreated_with_its_set_as_hung(cluster, tmp_path):
    job = make_job(chief=0, worker=2, ps=0, train_dir=str(tmp_path), progress_timeout_s=1)

    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1")
        c.run()
        _report(tmp_path, "worker-1")  # then nothing: a hung collective
        c.wait_pods("worker-0", "worker-1", attempt=1)
        c.run()
        c.succeed("worker-0")

    result = cluster.launch(job, make_settings(), script)
    assert result.restarts == 1
    restart = next(line for line in cluster.output if "retryable: recreating" in line)
    assert "worker-1 failed: NoProgress (no progress for 1 s (last report: epoch 1/2, step 3 at" in restart
    assert "recreating worker-0, worker-1 (restart 1 of max_restarts=3)" in restart


def test_a_hung_replica_fails_with_no_progress_and_its_last_lines_once_the_budget_is_used(cluster, tmp_path):
    job = make_job(chief=0, worker=2, ps=0, train_dir=str(tmp_path), progress_timeout_s=1, max_restarts=0)

    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1")
        c.run()
        c.log("worker-0", "reading shard 3 of 8")
        _report(tmp_path, "worker-0")

    with pytest.raises(ReplicaFailedError) as err:
        cluster.launch(job, make_settings(), script)
    e = err.value
    assert (e.replica.label, e.reason) == ("worker-0", "NoProgress")
    assert "replica worker-0 failed: NoProgress (no progress for 1 s" in str(e)
    assert "restart budget is used up (0 of max_restarts=0)" in str(e)
    assert e.last_lines == ["reading shard 3 of 8"]


def test_a_replica_that_never_reports_is_not_treated_as_hung(cluster, tmp_path):
    job = make_job(chief=0, worker=1, ps=0, train_dir=str(tmp_path), progress_timeout_s=0.5)

    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0")
        c.run()
        time.sleep(2)
        c.succeed("worker-0")

    assert cluster.launch(job, make_settings(), script).restarts == 0


# -- pods whose deletion never completes (their node is gone) -----------------------------------------------------
def _forced_deletes(c: FakeCluster, pod: str) -> int:
    return sum(1 for r in c.requests() if r.resource == PODS and r.method.value == "DELETE" and r.name == pod
               and str(r.params.get("gracePeriodSeconds")) == "0")


def test_a_pod_whose_node_is_gone_is_force_deleted_at_cleanup_and_the_step_succeeds(cluster):
    stuck: list[str] = []

    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "ps-0")
        c.run()
        stuck.append(c.node_lost("ps-0"))
        c.succeed("chief-0")

    result = cluster.launch(make_job(worker=1, stop_grace_s=1), make_settings(force_delete_after_s=0.5), script)
    assert result.exit_codes == {"chief-0": 0}
    assert _forced_deletes(cluster, stuck[0]) == 1
    assert any(f"force-deleting {stuck[0]} (grace period 0)" in line for line in cluster.output)
    assert any("none remain" in line for line in cluster.output)


def test_a_leftover_pod_whose_deletion_was_accepted_is_a_warning_with_a_kubectl_command_that_removes_it(cluster):
    stuck: list[str] = []

    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "ps-0")
        c.run()
        stuck.append(c.node_lost("ps-0", finalizer=True))
        c.succeed("chief-0")

    result = cluster.launch(make_job(worker=1, stop_grace_s=1), make_settings(force_delete_after_s=0.2, cleanup_timeout_s=2.5),
                            script)
    assert result.exit_codes == {"chief-0": 0}  # no CleanupError: the chief succeeded and saved the model
    warning = next(line for line in cluster.output if "WARNING" in line)
    assert f"deletion (forced, grace period 0) was accepted: ['{stuck[0]}']" in warning
    assert f"kubectl delete pod -n {NAMESPACE} {stuck[0]} --grace-period=0 --force" in warning
    cluster.server.finalized_pods.clear()  # what that command does once the finalizer is gone
    cluster._run(cluster.server.remove(PODS, NAMESPACE, stuck[0]))


def test_a_restart_does_not_wait_forever_on_a_pod_whose_node_is_gone(cluster):
    stuck: list[str] = []

    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1")
        c.run()
        stuck.append(c.node_lost("worker-1"))
        c._patch_pod("worker-1", {"phase": "Failed", "reason": "NodeLost", "message": "node node-1 is gone"})
        c.wait_pods("worker-0", "worker-1", attempt=1)
        c.run()
        c.succeed("worker-0")

    t0 = time.monotonic()
    result = cluster.launch(make_job(chief=0, worker=2, ps=0, stop_grace_s=1), make_settings(force_delete_after_s=0.5), script)
    assert (result.restarts, result.preemptions) == (0, 1) and time.monotonic() - t0 < 30  # node loss: preempted
    assert _forced_deletes(cluster, stuck[0]) == 1

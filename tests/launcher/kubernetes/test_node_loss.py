"""The node-loss rule (issue 27): a lost node's replica is a preemption read from its pod alone, the survivor's
"peer lost" exit is named so that its group waits for that verdict, and the replicas tolerate the lost-node
taints for ``node_lost_toleration_s`` (30 s), not Kubernetes' 300 s. The pods below are what the real second
node of ``make test-e2e`` showed (tests/realnode/test_two_nodes.py)."""

from __future__ import annotations

import copy
import re
import time

import pytest

from tfk8s.core.policy import FailureKind
from tfk8s.launcher.kubernetes.classify import (
    NODE_LOST,
    PEER_LOST,
    Phase,
    classify_pod,
    lost_node,
    node_lost_failure,
)
from tfk8s.launcher.kubernetes.objects import NODE_LOST_TAINTS, tolerations
from tfk8s.launcher.kubernetes.settings import KubernetesSettings

pytest_plugins = ["tests.fakes.kube_fixtures"]

RUNNING = {
    "metadata": {"name": "tfk8s-x-worker-1-abcde"},
    "spec": {"nodeName": "node-b"},
    "status": {"phase": "Running", "conditions": [
        {"type": "PodReadyToStartContainers", "status": "True"}, {"type": "Initialized", "status": "True"},
        {"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"},
        {"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [{"name": "tensorflow", "state": {"running": {"startedAt": "2026-12-04T15:18:53Z"}},
                               "ready": True, "started": True}]},
}


def _with_ready(pod: dict, status: str, reason: str = "", containers: str = "True") -> dict:
    pod = copy.deepcopy(pod)
    for c in pod["status"]["conditions"]:
        if c["type"] == "Ready":
            c["status"] = status
            if reason:
                c["reason"] = reason
        if c["type"] == "ContainersReady":
            c["status"] = containers
    return pod


def test_a_pod_marked_not_ready_by_the_node_lifecycle_controller_is_a_lost_node_and_a_preemption():
    # what the real lost node showed 51 s after its kubelet stopped: Ready False, no reason, ContainersReady
    # True, the container still "running" (nobody left to say otherwise), phase Running
    lost = _with_ready(RUNNING, "False")
    failure = node_lost_failure(lost)
    assert failure is not None
    assert (failure.kind, failure.reason, failure.preempted) == (FailureKind.PREEMPTED, NODE_LOST, True)
    assert "its node node-b was lost" in failure.message
    assert lost_node(lost) == "node-b"
    state = classify_pod(lost)
    assert (state.phase, state.failure) == (Phase.FAILED, failure)
    # a healthy pod, and the kubelet's own not-Ready (a container not ready: it gives a reason) are not
    assert node_lost_failure(RUNNING) is None and lost_node(RUNNING) == ""
    assert classify_pod(RUNNING).phase is Phase.RUNNING
    kubelet = _with_ready(RUNNING, "False", reason="ContainersNotReady", containers="False")
    assert node_lost_failure(kubelet) is None
    assert node_lost_failure(_with_ready(RUNNING, "False", reason="ReadinessGatesNotReady")) is None
    # a finished pod's node may go: its end was reported
    done = _with_ready(RUNNING, "False")
    done["status"]["phase"] = "Succeeded"
    assert node_lost_failure(done) is None


def test_a_survivor_whose_tensorflow_lost_a_peer_is_named_peer_lost_permanent_as_its_exit_code_says():
    message = ("tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:\n"
               "Collective ops is aborted by: Error reported from /job:worker/task:1: The following tasks are "
               "unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:1\n")
    pod = copy.deepcopy(RUNNING)
    pod["status"]["phase"] = "Failed"
    pod["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 1, "reason": "Error",
                                                                      "message": message}}
    state = classify_pod(pod)
    assert (state.phase, state.exit_code, state.failure.kind, state.failure.reason) == (
        Phase.FAILED, 1, FailureKind.PERMANENT, PEER_LOST)
    assert state.failure.message.startswith("TensorFlow lost a peer: Collective ops is aborted by: ")
    # a task whose heartbeat to a lost coordination leader (task 0) timed out, as worker-1 said on the real nodes
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = (
        "tensorflow.python.framework.errors_impl.DeadlineExceededError: Graph execution error:\n"
        "Collective ops is aborted by: Deadline Exceeded\nRPC: /tensorflow.CoordinationService/Heartbeat\n"
        "The error could be from a previous operation. Restart your program to reset.")
    assert classify_pod(pod).failure.reason == PEER_LOST
    # MWMS's own health check words it differently
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = (
        "UnavailableError: cluster check alive failed, /job:worker/replica:0/task:1 is down")
    assert classify_pod(pod).failure.reason == PEER_LOST
    # any other exit 1 stays an Error
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = "ValueError: bad input"
    assert (classify_pod(pod).failure.kind, classify_pod(pod).failure.reason) == (FailureKind.PERMANENT, "Error")


def test_the_replicas_tolerate_the_lost_node_taints_for_the_setting_not_300_s():
    assert tolerations([], 30) == [
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]
    own = [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
            "tolerationSeconds": 600}, {"key": "pool", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    # a replica's own toleration of one of the keys wins; the other is added
    assert tolerations(own, 30) == [*own, {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                           "effect": "NoExecute", "tolerationSeconds": 30}]
    assert NODE_LOST_TAINTS == ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")


def test_node_lost_toleration_s_is_a_kubernetes_parameter_checked_at_once():
    assert KubernetesSettings.from_params(image="i").node_lost_toleration_s == 30
    assert KubernetesSettings.from_params(image="i", node_lost_toleration_s="5").node_lost_toleration_s == 5
    with pytest.raises(ValueError, match="node_lost_toleration_s"):
        KubernetesSettings.from_params(image="i", node_lost_toleration_s=-1)
    assert KubernetesSettings.from_params(image="i").peer_lost_wait_s == 60.0


# -- the launcher against the fake API server (tests.fakes.kube_fixtures) ---------------------------------------------------
PEER_DOWN = ("Collective ops is aborted by: Error reported from /job:worker/task:1: The following tasks are "
             "unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:1")


def _lose_worker_1(c) -> None:
    """worker-1's node vanishes; the survivor's TensorFlow gives up on it first (exit 1, PeerLost), the node
    lifecycle controller marks worker-1's pod not Ready later than the group's usual settle window."""
    c.wait_pods("worker-0", "worker-1")
    c.run()
    c.node_lost("worker-1")
    c.fail("worker-0", 1, "Error", message=PEER_DOWN)
    time.sleep(1.5)  # past group_settle_s (1 s here): PeerLost waits peer_lost_wait_s instead
    c.node_not_ready("worker-1")


def test_a_lost_node_is_a_preemption_its_pods_force_deleted_at_once_and_the_group_recreated(cluster):
    from tests.launcher.kubernetes.test_backend import make_job, make_settings

    def script(c) -> None:
        _lose_worker_1(c)
        c.wait_pods("worker-0", "worker-1", attempt=1)
        c.run()
        c.succeed("worker-0")

    result = cluster.launch(make_job(chief=0, worker=2, ps=0, max_restarts=0),
                            make_settings(peer_lost_wait_s=20), script)
    assert (result.restarts, result.preemptions, result.exit_codes) == (0, 1, {"worker-0": 0})
    out = "\n".join(cluster.output)
    assert "worker-0 failed with exit code 1: PeerLost; waiting up to 20s for worker-1" in out, out[-3000:]
    assert re.search(r"worker-1 failed: NodeLost \(its node node-1 was lost: .*\) \(then worker-0 failed too\); "
                     r"preempted: recreating worker-0, worker-1 \(preemption 1, not counted against max_restarts=0\)",
                     out), out[-3000:]
    assert re.search(r"node node-1 lost: force-deleted tfk8s-run-7-worker-0-\S+, tfk8s-run-7-worker-1-\S+ \(grace "
                     r"period 0", out), out[-3000:]
    assert "still terminating" not in out  # not the 25 s wait for a deletion no kubelet will confirm


def test_with_spread_required_a_lost_node_fails_the_step_at_once_naming_the_node_and_the_rule(cluster):
    from tests.launcher.kubernetes.test_backend import make_job, make_settings
    from tfk8s.launcher.kubernetes.errors import PermanentFailureError

    with pytest.raises(PermanentFailureError) as e:
        # stop_grace_s 10 as by default: a graceful delete of the lost node's pod would stay pending
        cluster.launch(make_job(chief=0, worker=2, ps=0, stop_grace_s=10),
                       make_settings(spread="required", peer_lost_wait_s=20), _lose_worker_1)
    message = str(e.value)
    assert "worker-1" in message and "NodeLost" in message and "the node lost: node-1" in message, message
    assert "spread=required never lets two chief/workers share a node" in message
    assert "use spread=preferred" in message
    # its pod is force-deleted by the cleanup at once, not after stop_grace_s + force_delete_after_s (25 s)
    out = "\n".join(cluster.output)
    assert re.search(r"node node-1 lost: force-deleting tfk8s-run-7-worker-1-\S+ \(grace period 0", out), out[-3000:]
    assert "still terminating" not in out and "still listed" not in out, out[-3000:]
    assert "none remain" in out
    assert not [p for p in cluster.objects("pods")]

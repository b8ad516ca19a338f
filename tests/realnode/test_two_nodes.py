"""Two real nodes (``make test-e2e``; fixtures :mod:`tests.realnode.two_nodes`): the second in a network namespace of its
own, reached over a veth from the first node's bridge, its pods on a subnet of their own (host-gw routes). A
MultiWorkerMirroredStrategy job with ``spread=required`` puts one worker on each node and all-reduces across the
link; ParameterServerStrategy with the ps alone on the second node; the second node lost mid-training (its link cut,
its kubelet, containerd and containers SIGKILLed: a VM that vanishes) and brought back, once with ``spread=preferred``
(both workers recreated on the first node) and once with ``spread=required`` (the step fails at once, naming the node
and the rule).

The node-monitor settings are the upstream defaults (kube-controller-manager ``--node-monitor-grace-period`` 50 s,
``--node-monitor-period`` 5 s; the kubelet's Lease renewed every 10 s), so the node lifecycle controller calls a
node lost ~50 s after its last heartbeat.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import re
import threading
import time
from collections.abc import Iterator

import pytest

pytest.register_assert_rewrite("tests.realnode.e2e_fixtures", "tests.realnode.e2e_pods", "tests.realnode.two_nodes")

from tests.realnode.e2e_fixtures import E2E
from tests.realnode.e2e_pods import ProjectPods, last_json, small_job, unique, wait_for
from tests.realnode.realnode import (
    LINK2,
    NODE2_IP,
    NODE2_NAME,
    NODE_IP,
    NODE_NAME,
    SECOND_NODE_TAINT,
    SECOND_NODE_TOLERATION,
    SUBNET,
    SUBNET2,
    links,
    read_sysctls,
)
from tests.realnode.two_nodes import TOLERATE_SECOND_NODE

pytest_plugins = ["tests.realnode.e2e_fixtures", "tests.realnode.e2e_pods", "tests.realnode.two_nodes"]
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

HOSTNAME = "kubernetes.io/hostname"
LOSS_EPOCHS = 40  # ~1-2 s an epoch after the first: the loss falls mid-training


def _on(node: str, cpu_limit: str = "2") -> dict:
    return {"node_selector": {HOSTNAME: node}, "cpu_limit": cpu_limit}


def _watch_placement(p: ProjectPods, job: str, into: dict, stop: threading.Event) -> threading.Thread:
    """Record every replica pod's (node, pod IP, host IP) as soon as it has them, keyed by (label, attempt)."""
    def run() -> None:
        while not stop.is_set():
            try:
                for pod in p.pods_of(job):
                    labels = pod["metadata"]["labels"]
                    key = (f"{labels['tfk8s.dev/replica-type']}-{labels['tfk8s.dev/replica-index']}",
                           int(labels.get("tfk8s.dev/attempt", "0")))
                    if pod["status"].get("podIP") and key not in into:
                        into[key] = (pod["spec"]["nodeName"], pod["status"]["podIP"], pod["status"]["hostIP"])
            except Exception:  # noqa: BLE001, S110 - the API server busy: try again
                pass
            stop.wait(0.5)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _on_node2(**spec) -> dict:
    return {"nodeSelector": {HOSTNAME: NODE2_NAME}, "tolerations": [SECOND_NODE_TOLERATION], **spec}


def test_the_second_node_runs_pods_on_its_subnet_that_reach_the_first_by_service_and_dns(e2e: E2E, e2e_node2):
    """The probe image (no project image needed): the second node Ready with its own address, tainted; a pod
    there gets an address of its own subnet and its log comes back through the API server (which reaches that
    kubelet across the link); it reaches the API server through the kubernetes Service (its node's kube-proxy,
    then the link) and resolves, through CoreDNS on the first node, a headless Service whose pod runs on the
    first node; an untolerating pod stays on the first node. The machine's forwarding stays off."""
    node = e2e.core.read_node(NODE2_NAME)
    assert {a.type: a.address for a in node.status.addresses} == {"InternalIP": NODE2_IP, "Hostname": NODE2_NAME}
    assert [(t.key, t.value, t.effect) for t in node.spec.taints or []] == [tuple(SECOND_NODE_TAINT.values())]
    e2e.run("target", ["wait-term", "/dev/null"], labels={"app": "target"})
    e2e.core.create_namespaced_service(e2e.namespace, {"metadata": {"name": "target"}, "spec": {
        "clusterIP": "None", "selector": {"app": "target"}, "ports": [{"name": "x", "port": 2222}]}})
    target = e2e.wait_phase("target", "Running")
    assert target["spec"]["nodeName"] == NODE_NAME  # the taint keeps it off the second node
    name = f"target.{e2e.namespace}.svc.cluster.local"
    e2e.run("there", ["resolve", name], **_on_node2())
    e2e.run("api", ["apiserver"], **_on_node2())
    for pod_name in ("there", "api"):
        pod = e2e.wait_phase(pod_name, "Succeeded", "Failed")
        assert pod["status"]["phase"] == "Succeeded", (pod["status"], e2e.log(pod_name))
        assert (pod["spec"]["nodeName"], pod["status"]["hostIP"]) == (NODE2_NAME, NODE2_IP)
        assert ipaddress.ip_address(pod["status"]["podIP"]) in SUBNET2
    assert e2e.log("there") == f"resolved {name} {target['status']['podIP']}\n"
    assert e2e.log("api").splitlines()[2] == f"user system:serviceaccount:{e2e.namespace}:default"
    # forwarding is on in the second node's namespace only: the machine's as the run found it (0 here)
    before = e2e_node2.journal.data["sysctls"]["net/ipv4/ip_forward"]
    assert read_sysctls(("net/ipv4/ip_forward",)) == {"net/ipv4/ip_forward": before}
    assert LINK2 in {link["ifname"] for link in links()}


def test_mwms_two_workers_spread_required_one_per_node_all_reduce_across_the_link(two_nodes: ProjectPods):
    p = two_nodes
    run = unique("mwms2")
    job = p.job_of(run)
    seen: dict = {}
    stop = threading.Event()
    watcher = _watch_placement(p, job, seen, stop)
    launcher = p.launch(run, "--workers", "2", "--spread", "required", *TOLERATE_SECOND_NODE, *small_job(epochs=2))
    pod = p.wait_done(launcher, 400)
    stop.set()
    watcher.join(5)
    log = p.e2e.log(launcher)
    assert pod["status"]["phase"] == "Succeeded", log[-5000:]
    result = last_json(log)
    # one worker per node, read from the pods: their pod addresses on the two nodes' subnets, their host
    # addresses the two node addresses; the TF_CONFIG names the workers' peers by those pods' Services
    nodes = {label: seen[(label, 0)] for label in ("worker-0", "worker-1")}
    assert {n for n, _, _ in nodes.values()} == {NODE_NAME, NODE2_NAME}, nodes
    for node, ip, host in nodes.values():
        subnet = SUBNET if node == NODE_NAME else SUBNET2
        assert ipaddress.ip_address(ip) in subnet, nodes
        assert host == (NODE_IP if node == NODE_NAME else str(SUBNET.network_address + 2)), nodes
    ns = p.namespace
    assert result["summary"]["job"]["cluster_spec"] == {
        "worker": [f"{job}-worker-0.{ns}.svc:2222", f"{job}-worker-1.{ns}.svc:2222"]}
    metrics = result["summary"]["metrics"]
    assert (metrics["strategy"], metrics["num_replicas_in_sync"], metrics["train_examples"]) == (
        "multi_worker_mirrored", 2, 2048)
    assert result["summary"]["job"]["exit_codes"] == {"worker-0": 0, "worker-1": 0}
    for label in ("worker-0", "worker-1"):
        assert f"[{label}] {label}: every chief/worker is up" in log
        assert re.search(rf"^\[{label}\] epoch 2/2: loss=", log, re.MULTILINE), log[-3000:]
    # the model exported (worker-0 is the chief without a chief replica)
    assert (p.volume.host(result["saved_model"]) / "saved_model.pb").is_file()
    assert p.job_objects(job) == {}
    print(f"\nMWMS across nodes: {json.dumps(nodes)}; examples/s {metrics.get('examples_per_sec')}")


def test_pss_ps_on_the_second_node_worker_and_chief_on_the_first(two_nodes: ProjectPods):
    p = two_nodes
    run = unique("pss2")
    job = p.job_of(run)
    seen: dict = {}
    stop = threading.Event()
    watcher = _watch_placement(p, job, seen, stop)
    overrides = {"chief": _on(NODE_NAME), "worker": _on(NODE_NAME), "ps": _on(NODE2_NAME)}
    flags = small_job(epochs=2)
    flags[flags.index("--replica-overrides") + 1] = json.dumps(overrides)
    launcher = p.launch(run, "--chief", "1", "--workers", "1", "--ps", "1", *TOLERATE_SECOND_NODE, *flags)
    pod = p.wait_done(launcher, 400)
    stop.set()
    watcher.join(5)
    log = p.e2e.log(launcher)
    assert pod["status"]["phase"] == "Succeeded", log[-5000:]
    where = {label: node for (label, attempt), (node, _, _) in seen.items() if attempt == 0}
    assert where == {"chief-0": NODE_NAME, "worker-0": NODE_NAME, "ps-0": NODE2_NAME}, seen
    assert ipaddress.ip_address(seen[("ps-0", 0)][1]) in SUBNET2
    result = last_json(log)
    assert result["summary"]["metrics"]["strategy"] == "parameter_server"
    ns = p.namespace
    # the chief and the worker reached the ps across the link by its name
    assert "[chief-0] chief-0: every ps/worker accepts connections" in log
    assert f"[ps-0] ps-0: serving grpc://{job}-ps-0.{ns}.svc:2222" in log
    assert (p.volume.host(result["saved_model"]) / "saved_model.pb").is_file()
    assert p.job_objects(job) == {}


def _follow_timed(p: ProjectPods, pod: str, into: list[tuple[float, str]], stop: threading.Event) -> threading.Thread:
    """Read pod ``pod``'s log every 0.5 s into ``into`` as (time.time() when a line was first seen, line), until
    ``stop`` (and once more then)."""
    def run() -> None:
        while True:
            last = stop.is_set()
            try:
                lines = p.e2e.log(pod).splitlines()
            except Exception:  # noqa: BLE001 - not started yet, or the API server busy
                lines = []
            now = time.time()
            into.extend((now, ln) for ln in lines[len(into):])
            if last:
                return
            stop.wait(0.5)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _first(lines: list[tuple[float, str]], pattern: str, after: float) -> float | None:
    return next((t for t, ln in lines if t >= after and re.search(pattern, ln)), None)


@dataclasses.dataclass
class LostNodeRun:
    """A 2-worker MWMS launch whose second node was lost mid-training (:func:`_second_node_lost_mid_training`):
    the launcher pod, the job, the replicas' placements ``seen`` ((label, attempt) -> (node, pod IP, host IP)),
    the launcher's log ``lines`` as (time.time() first seen, line), the replica on the lost node and the
    time.time() of the loss."""

    p: ProjectPods
    launcher: str
    job: str
    seen: dict
    lines: list[tuple[float, str]]
    lost_label: str
    t_loss: float
    stop: threading.Event
    threads: tuple[threading.Thread, ...]

    def wait_done(self, timeout: float = 400) -> tuple[dict, str, float]:
        """Wait for the launch step's end; (its pod, its log, time.time() when its end was seen)."""
        pod = self.p.wait_done(self.launcher, timeout)
        ended = time.time()
        self.stop.set()
        for t in self.threads:
            t.join(30)
        return pod, self.p.e2e.log(self.launcher), ended

    def first(self, pattern: str, after: float | None = None) -> float | None:
        """time.time() when the launcher's first line matching ``pattern`` (after ``after``, default the loss)
        was seen."""
        return _first(self.lines, pattern, self.t_loss if after is None else after)


@contextlib.contextmanager
def _second_node_lost_mid_training(p: ProjectPods, node2, run: str, *flags: str) -> Iterator[LostNodeRun]:
    """Launch 2 MWMS workers (``flags`` added) on both nodes, and once both trained their first epoch stop the
    second node hard (link cut, kubelet, containerd and containers SIGKILLed: a VM that vanishes); yield the
    :class:`LostNodeRun`. Then bring the node back (also when the body failed: the session's other tests and its
    end need it) and wait until its kubelet has removed the job's dead containers, nothing of the job left."""
    job = p.job_of(run)
    seen: dict = {}
    stop = threading.Event()
    watcher = _watch_placement(p, job, seen, stop)
    launcher = p.launch(run, "--workers", "2", *TOLERATE_SECOND_NODE, *flags)
    lines: list[tuple[float, str]] = []
    follower = _follow_timed(p, launcher, lines, stop)
    try:
        wait_for(lambda: all(re.search(rf"^epoch 1/{LOSS_EPOCHS}: loss=", p.replica_log(run, w), re.MULTILINE)
                             for w in ("worker-0", "worker-1")), "both workers' first epoch", 300,
                 explain=lambda: p.tail(launcher))
    except BaseException:
        stop.set()
        raise
    first = {label: node for (label, attempt), (node, _, _) in seen.items() if attempt == 0}
    assert set(first.values()) == {NODE_NAME, NODE2_NAME}, seen  # one per node (preferred or required spread)
    lost_label = next(label for label, node in first.items() if node == NODE2_NAME)
    t_loss = node2.kill_hard()
    try:
        yield LostNodeRun(p, launcher, job, seen, lines, lost_label, t_loss, stop, (watcher, follower))
    except BaseException:
        stop.set()
        node2.restart()
        raise
    # the node comes back: its kubelet finds the job's pods gone from the API and removes their dead containers
    back = node2.restart()
    print(f"the node Ready again in {back:.1f}s")
    ns = p.namespace

    def node2_containers() -> list[str]:
        return node2.ctr("containers", "ls", "-q", f'labels."io.kubernetes.pod.namespace"=={ns}').split()

    wait_for(lambda: not node2_containers(), "the lost node's containers of the job removed by its kubelet", 150,
             poll_s=2, explain=lambda: f"left: {node2_containers()}\n{node2.logs('kubelet', 30)}")
    assert p.job_objects(job) == {}


def test_a_node_lost_mid_training_then_back(two_nodes: ProjectPods, e2e_node2):
    """The second node vanishes (link cut, kubelet, containerd and containers SIGKILLed) while 2 MWMS workers
    train, one on each node (``spread=preferred``). The launcher calls it a lost node, not the program's fault:
    a preemption (not charged to ``max_restarts``), force-deletes the pods the dead kubelet cannot confirm, and
    recreates both workers on the surviving node, which resume from the backup. Then the node comes back: its
    kubelet removes the dead containers, nothing of the job stays."""
    p = two_nodes
    run = unique("lost")
    with _second_node_lost_mid_training(p, e2e_node2, run, *small_job(epochs=LOSS_EPOCHS, max_restarts=0)) as lost:
        pod, log, _ = lost.wait_done()
        lost_label, job, t_loss = lost.lost_label, lost.job, lost.t_loss
        assert pod["status"]["phase"] == "Succeeded", log[-6000:]
        verdict = lost.first(rf"\[launcher\] {lost_label} failed: NodeLost \(its node {NODE2_NAME} was lost")
        assert verdict is not None, "\n".join(ln for _, ln in lost.lines[-60:])
        restarted = {label: node for (label, attempt), (node, _, _) in lost.seen.items() if attempt == 1}
        assert restarted == {"worker-0": NODE_NAME, "worker-1": NODE_NAME}, lost.seen
        resumed = lost.first(rf"^\[worker-\d\] resumed from epoch \d+ of {LOSS_EPOCHS}", verdict)
        stepped = lost.first(rf"^\[worker-\d\] epoch \d+/{LOSS_EPOCHS}: loss=", verdict)
        assert resumed is not None and stepped is not None
        # the node lost is a preemption: max_restarts=0 and yet recreated; the survivor's "peer lost" waited for it
        assert re.search(rf"{lost_label} failed: NodeLost .*; preempted: recreating worker-0, worker-1 \(preemption 1, "
                         rf"not counted against max_restarts=0\)", log), log[-5000:]
        assert re.search(rf"node {NODE2_NAME} lost: force-deleted .*{job}-{lost_label}-", log), log[-5000:]
        peer_lost = lost.first(r"\[launcher\] worker-\d failed with exit code 1: PeerLost; waiting up to 60s")
        assert re.search(rf"^\[worker-1\] resumed from epoch \d+ of {LOSS_EPOCHS} \(backup in ", log, re.MULTILINE), \
            log[-4000:]
        assert p.job_objects(job) == {}
        to_verdict, to_resumed, to_step = verdict - t_loss, resumed - t_loss, stepped - t_loss
        print(f"\nnode lost: {lost_label} on {NODE2_NAME}; loss -> the survivor's PeerLost "
              f"{(peer_lost - t_loss) if peer_lost else float('nan'):.1f}s, -> verdict {to_verdict:.1f}s, -> resumed "
              f"{to_resumed:.1f}s, -> first epoch after the restart {to_step:.1f}s")
    # the node-monitor settings at their upstream defaults: the controller's mark at ~51 s (grace period 50 s)
    assert to_verdict <= 65, f"{to_verdict:.1f}s from the loss to the launcher's verdict"


def test_with_spread_required_a_node_lost_fails_the_step_at_once_naming_the_node_and_the_rule(
        two_nodes: ProjectPods, e2e_node2):
    """``spread=required`` with the second node lost mid-training: the group cannot be recreated on the one node
    left (two workers may never share a node), so the step fails as soon as the node is called lost, naming the
    lost node and the rule and what to use instead, instead of waiting ``schedule_timeout_s`` for a node that
    never comes; the lost node's pod is force-deleted at once (no kubelet will confirm its deletion), nothing of
    the job stays; then the node comes back clean."""
    p = two_nodes
    run = unique("lostreq")
    flags = ("--spread", "required", *small_job(epochs=LOSS_EPOCHS, max_restarts=2))
    with _second_node_lost_mid_training(p, e2e_node2, run, *flags) as lost:
        pod, log, ended = lost.wait_done()
        lost_label, job, t_loss = lost.lost_label, lost.job, lost.t_loss
        assert pod["status"]["phase"] == "Failed", log[-6000:]
        # the verdict: the cleanup's first line, right after the lost replica's last lines and events
        verdict = lost.first(rf"\[launcher\] node {NODE2_NAME} lost: force-deleting")
        error = lost.first(rf"launch_training: error: replica {lost_label} failed: NodeLost")
        assert verdict is not None and error is not None, "\n".join(ln for _, ln in lost.lines[-60:])
        said = next(ln for _, ln in lost.lines if "launch_training: error:" in ln)
        assert f"its node {NODE2_NAME} was lost" in said and f"the node lost: {NODE2_NAME}" in said, said
        assert "spread=required never lets two chief/workers share a node" in said, said
        assert "use spread=preferred to recreate it on the surviving nodes" in said, said
        # not a restart (max_restarts=2 left unused), and the lost node's pod force-deleted by the cleanup at once
        assert "recreating" not in log and "preempted" not in log, log[-5000:]
        assert re.search(rf"node {NODE2_NAME} lost: force-deleting {job}-{lost_label}-\S+ \(grace period 0", log), \
            log[-5000:]
        assert "still terminating" not in log and "still listed" not in log, log[-5000:]
        assert f"deleted the Jobs, Services and pods of {job}; none remain" in log, log[-5000:]
        assert p.job_objects(job) == {}
        peer_lost = lost.first(r"\[launcher\] worker-\d failed with exit code 1: PeerLost; waiting up to 60s")
        to_verdict, to_error, to_end = verdict - t_loss, error - t_loss, ended - t_loss
        print(f"\nnode lost with spread=required: {lost_label} on {NODE2_NAME}; loss -> the survivor's PeerLost "
              f"{(peer_lost - t_loss) if peer_lost else float('nan'):.1f}s, -> verdict {to_verdict:.1f}s, -> the "
              f"step's error {to_error:.1f}s, -> the launch pod ended {to_end:.1f}s")
    # the controller's mark at ~51 s (grace period 50 s); the cleanup does not wait for the lost pod's deletion
    assert to_verdict <= 65, f"{to_verdict:.1f}s from the loss to the launcher's verdict"
    assert to_error - to_verdict <= 15, f"{to_error - to_verdict:.1f}s from the verdict to the step's error"

"""Two real nodes (``make test-e2e``; fixtures :mod:`tests.realnode.two_nodes`): the second in a network namespace of its
own, reached over a veth from the first node's bridge, its pods on a subnet of their own (host-gw routes). A
MultiWorkerMirroredStrategy job with ``spread=required`` puts one worker on each node and all-reduces across the
link; ParameterServerStrategy with the ps alone on the second node; the second node lost mid-training (its link cut,
its kubelet, containerd and containers SIGKILLed: a VM that vanishes) and brought back.

The node-monitor settings are the upstream defaults (kube-controller-manager ``--node-monitor-grace-period`` 50 s,
``--node-monitor-period`` 5 s; the kubelet's Lease renewed every 10 s), so the node lifecycle controller calls a
node lost ~50 s after its last heartbeat.
"""

from __future__ import annotations

import ipaddress
import json
import re
import threading
import time

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


def test_a_node_lost_mid_training_then_back(two_nodes: ProjectPods, e2e_node2):
    """The second node vanishes (link cut, kubelet, containerd and containers SIGKILLed) while 2 MWMS workers
    train, one on each node (``spread=preferred``). The launcher calls it a lost node, not the program's fault:
    a preemption (not charged to ``max_restarts``), force-deletes the pods the dead kubelet cannot confirm, and
    recreates both workers on the surviving node, which resume from the backup. Then the node comes back: its
    kubelet removes the dead containers, nothing of the job stays."""
    p = two_nodes
    run = unique("lost")
    job = p.job_of(run)
    seen: dict = {}
    stop = threading.Event()
    watcher = _watch_placement(p, job, seen, stop)
    launcher = p.launch(run, "--workers", "2", *TOLERATE_SECOND_NODE,
                        *small_job(epochs=LOSS_EPOCHS, max_restarts=0))
    lines: list[tuple[float, str]] = []
    follower = _follow_timed(p, launcher, lines, stop)
    wait_for(lambda: all(re.search(rf"^epoch 1/{LOSS_EPOCHS}: loss=", p.replica_log(run, w), re.MULTILINE)
                         for w in ("worker-0", "worker-1")), "both workers' first epoch", 300,
             explain=lambda: p.tail(launcher))
    first = {label: node for (label, attempt), (node, _, _) in seen.items() if attempt == 0}
    assert set(first.values()) == {NODE_NAME, NODE2_NAME}, seen  # preferred spread: one per node
    lost_label = next(label for label, node in first.items() if node == NODE2_NAME)
    t_loss = e2e_node2.kill_hard()
    try:
        pod = p.wait_done(launcher, 400)
        stop.set()
        watcher.join(5)
        follower.join(30)
        log = p.e2e.log(launcher)
        assert pod["status"]["phase"] == "Succeeded", log[-6000:]
        verdict = _first(lines, rf"\[launcher\] {lost_label} failed: NodeLost \(its node {NODE2_NAME} was lost", t_loss)
        assert verdict is not None, "\n".join(ln for _, ln in lines[-60:])
        restarted = {label: node for (label, attempt), (node, _, _) in seen.items() if attempt == 1}
        assert restarted == {"worker-0": NODE_NAME, "worker-1": NODE_NAME}, seen
        resumed = _first(lines, rf"^\[worker-\d\] resumed from epoch \d+ of {LOSS_EPOCHS}", verdict)
        stepped = _first(lines, rf"^\[worker-\d\] epoch \d+/{LOSS_EPOCHS}: loss=", verdict)
        assert resumed is not None and stepped is not None
        # the node lost is a preemption: max_restarts=0 and yet recreated; the survivor's "peer lost" waited for it
        assert re.search(rf"{lost_label} failed: NodeLost .*; preempted: recreating worker-0, worker-1 \(preemption 1, "
                         rf"not counted against max_restarts=0\)", log), log[-5000:]
        assert re.search(rf"node {NODE2_NAME} lost: force-deleted .*{job}-{lost_label}-", log), log[-5000:]
        peer_lost = _first(lines, r"\[launcher\] worker-\d failed with exit code 1: PeerLost; waiting up to 60s", t_loss)
        assert re.search(rf"^\[worker-1\] resumed from epoch \d+ of {LOSS_EPOCHS} \(backup in ", log, re.MULTILINE), \
            log[-4000:]
        assert p.job_objects(job) == {}
        to_verdict, to_resumed, to_step = verdict - t_loss, resumed - t_loss, stepped - t_loss
        print(f"\nnode lost: {lost_label} on {NODE2_NAME}; loss -> the survivor's PeerLost "
              f"{(peer_lost - t_loss) if peer_lost else float('nan'):.1f}s, -> verdict {to_verdict:.1f}s, -> resumed "
              f"{to_resumed:.1f}s, -> first epoch after the restart {to_step:.1f}s")
    except BaseException:
        e2e_node2.restart()  # the session's other tests and its end need the node back
        raise
    # the node comes back: its kubelet finds the job's pods gone from the API and removes their dead containers
    back = e2e_node2.restart()
    print(f"the node Ready again in {back:.1f}s")
    ledger_ns = p.namespace

    def node2_containers() -> list[str]:
        return e2e_node2.ctr("containers", "ls", "-q", f'labels."io.kubernetes.pod.namespace"=={ledger_ns}').split()

    wait_for(lambda: not node2_containers(), "the lost node's containers of the job removed by its kubelet", 150,
             poll_s=2, explain=lambda: f"left: {node2_containers()}\n{e2e_node2.logs('kubelet', 30)}")
    # the node-monitor settings at their upstream defaults: the controller's mark at ~51 s (grace period 50 s)
    assert to_verdict <= 65, f"{to_verdict:.1f}s from the loss to the launcher's verdict"

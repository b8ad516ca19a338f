"""Smoke tests of the real one-node cluster (tests/realnode/realnode.py; `make test-e2e`): a real kubelet, containerd,
runc, CNI, kube-proxy and CoreDNS run real containers of a tiny locally built image (hack/node/images/probe).

Each test asserts what only a real node produces: the node's own address and capacity, a container's real exit
code and log, an address a real DNS server answers, a real SIGTERM, a real OOM kill. The last one checks that the
kubelet leaves no container, mount, network namespace or veth behind; the session's teardown then checks that
nothing at all of the node is left on the machine.
"""

from __future__ import annotations

import ipaddress
import os
import time

import pytest

pytest.register_assert_rewrite("tests.realnode.e2e_fixtures")

from tests.realnode import realnode
from tests.realnode.e2e_fixtures import E2E
from tests.realnode.realnode import BRIDGE, NODE_IP, NODE_NAME, PROBE_IMAGE, ROOT, SUBNET

pytest_plugins = ["tests.realnode.e2e_fixtures"]
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def test_node_is_ready_with_its_bridge_address_and_the_machines_capacity(e2e: E2E):
    node = e2e.core.read_node(NODE_NAME)
    conditions = {c.type: c.status for c in node.status.conditions}
    assert conditions["Ready"] == "True"
    assert conditions["MemoryPressure"] == "False"
    addresses = {a.type: a.address for a in node.status.addresses}
    assert addresses == {"InternalIP": NODE_IP, "Hostname": NODE_NAME}
    info = node.status.node_info
    assert info.kubelet_version == "v1.37.2"
    assert info.container_runtime_version.startswith("containerd://") and "2.4.2" in info.container_runtime_version
    # the machine's own CPUs, not a fake node's declared capacity; no taint left (the node lifecycle controller)
    assert node.status.capacity["cpu"] == str(os.cpu_count())
    assert not [t.key for t in node.spec.taints or []]
    # KWOK manages only its annotated fake nodes: this one is the kubelet's
    assert "kwok.x-k8s.io/node" not in (node.metadata.annotations or {})


def test_a_container_runs_and_its_log_comes_back_through_the_api_server(e2e: E2E):
    e2e.run("hello", ["echo", "hello from a real container", "second line"])
    pod = e2e.wait_phase("hello", "Succeeded", "Failed")
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    term = e2e.terminated(pod)
    assert (term["exitCode"], term["reason"]) == (0, "Completed")
    assert term["containerID"].startswith("containerd://")
    assert pod["status"]["hostIP"] == NODE_IP
    assert ipaddress.ip_address(pod["status"]["podIP"]) in SUBNET
    assert pod["status"]["podIP"] != NODE_IP
    assert e2e.log("hello") == "hello from a real container\nsecond line\n"


def test_a_headless_service_resolves_through_coredns_to_the_pods_address(e2e: E2E):
    e2e.run("target", ["wait-term", "/dev/null"], labels={"app": "target"})
    e2e.core.create_namespaced_service(e2e.namespace, {"metadata": {"name": "target"}, "spec": {
        "clusterIP": "None", "selector": {"app": "target"}, "ports": [{"name": "x", "port": 2222}]}})
    target = e2e.wait_phase("target", "Running")
    name = f"target.{e2e.namespace}.svc.cluster.local"
    e2e.run("client", ["resolve", name])
    pod = e2e.wait_phase("client", "Succeeded", "Failed")
    log = e2e.log("client")
    assert pod["status"]["phase"] == "Succeeded", log
    assert log == f"resolved {name} {target['status']['podIP']}\n"
    # the pod's resolver is CoreDNS behind the kube-dns Service, and nothing outside the cluster domain resolves
    # (no forward plugin: the query never leaves the machine)
    e2e.run("outside", ["resolve", "example.com", "1"])
    pod = e2e.wait_phase("outside", "Succeeded", "Failed")
    assert pod["status"]["phase"] == "Failed"
    assert e2e.log("outside").startswith("probe: resolve example.com: ")


def test_a_pod_reaches_the_api_server_through_the_kubernetes_service_with_its_token(e2e: E2E):
    e2e.run("api", ["apiserver"])
    pod = e2e.wait_phase("api", "Succeeded", "Failed")
    log = e2e.log("api")
    assert pod["status"]["phase"] == "Succeeded", log
    from kubernetes import client

    version = client.VersionApi(e2e.api).get_code().git_version
    assert log.splitlines() == ["apiserver https://10.96.0.1:443", f"version {version}",
                                f"user system:serviceaccount:{e2e.namespace}:default"]


def test_a_container_over_its_memory_limit_is_oom_killed(e2e: E2E):
    e2e.run("hog", ["alloc", "256"], memory="32Mi")
    pod = e2e.wait_phase("hog", "Succeeded", "Failed")
    term = e2e.terminated(pod)
    assert (pod["status"]["phase"], term["exitCode"], term["reason"]) == ("Failed", 137, "OOMKilled"), e2e.log("hog")
    assert "allocated all" not in e2e.log("hog")


def test_deleting_a_pod_sends_its_process_a_real_sigterm(e2e: E2E):
    out = ROOT / "hostpath" / e2e.namespace
    e2e.run("term", ["wait-term", "/out/term"], volumes=[
        {"name": "out", "hostPath": {"path": str(out), "type": "DirectoryOrCreate"}}],
        container={"volumeMounts": [{"name": "out", "mountPath": "/out"}]})
    e2e.wait_phase("term", "Running")
    e2e.wait_log("term", "waiting")
    t0 = time.monotonic()
    e2e.core.delete_namespaced_pod("term", e2e.namespace)  # grace period 30 s
    from kubernetes import client

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            e2e.core.read_namespaced_pod("term", e2e.namespace)
        except client.ApiException as e:
            if e.status == 404:
                break
        time.sleep(0.2)
    elapsed = time.monotonic() - t0
    # the program is PID 1 of its container's PID namespace; it exited on SIGTERM, long before the grace period
    assert (out / "term").read_text() == "SIGTERM pid=1\n"
    assert elapsed < 20, f"the pod took {elapsed:.1f}s to go"


def test_a_pid_1_that_ignores_sigterm_runs_out_its_grace_period_and_is_sigkilled(e2e: E2E):
    """What a ``python`` PID 1 without a SIGTERM handler does: the kernel does not deliver SIGTERM to a PID 1
    that has no handler, so deleting the pod waits the whole grace period, then the runtime's SIGKILL gives
    exit code 137 (the fake kubelet plays exit 143 at once)."""
    from kubernetes import watch

    e2e.run("stubborn", ["ignore-term"], terminationGracePeriodSeconds=3)
    e2e.wait_log("stubborn", "ignoring SIGTERM")
    last: dict = {}
    t0 = time.monotonic()
    e2e.core.delete_namespaced_pod("stubborn", e2e.namespace)
    for event in watch.Watch().stream(e2e.core.list_namespaced_pod, e2e.namespace, timeout_seconds=60,
                                      field_selector="metadata.name=stubborn"):
        last = event["raw_object"]
        if event["type"] == "DELETED":
            break
    elapsed = time.monotonic() - t0
    term = E2E.terminated(last)
    assert (last["status"]["phase"], term.get("exitCode"), term.get("reason")) == ("Failed", 137, "Error")
    assert 3 <= elapsed < 20, f"deleted after {elapsed:.1f}s"


def test_after_the_pods_are_gone_no_container_mount_netns_or_veth_is_left(e2e: E2E):
    """The kubelet's own cleanup (sandboxes go with its container GC, once a minute): the session's other pods
    are deleted with their namespaces; wait until containerd has no container left."""
    node = e2e.cluster.node
    for pod in e2e.core.list_pod_for_all_namespaces().items:
        e2e.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
    deadline = time.monotonic() + 150
    left: dict[str, list[str]] = {}
    while time.monotonic() < deadline:
        left = {"pods": [p.metadata.name for p in e2e.core.list_pod_for_all_namespaces().items],
                "containers": node.ctr("containers", "ls", "-q").split(),
                "tasks": node.ctr("tasks", "ls", "-q").split(),
                "mounts": [m for m in realnode.mounts_under(ROOT) if m != str(ROOT / "kubelet")],
                "netns": sorted(os.listdir(ROOT / "containerd" / "state" / "netns"))
                if (ROOT / "containerd" / "state" / "netns").exists() else [],
                "veths": [link["ifname"] for link in realnode.links() if link.get("master") == BRIDGE]}
        if not any(left.values()):
            break
        time.sleep(1)
    assert not any(left.values()), f"left after 150 s: {left}"


def _refusal(e2e: E2E, manifest: dict) -> str:
    """The API server's message refusing ``manifest`` (created with dryRun=All: admission runs, nothing is stored);
    AssertionError if it was admitted."""
    import json

    from kubernetes import client

    try:
        e2e.core.create_namespaced_pod(e2e.namespace, manifest, dry_run="All")
    except client.ApiException as e:
        assert e.status == 403, (e.status, e.body)
        return json.loads(e.body)["message"]
    raise AssertionError(f"admitted in {e2e.namespace}: {manifest}")


def test_a_production_namespace_refuses_a_pod_without_limits_or_restricted_and_counts_one_with_both(
        e2e_production: E2E):
    """The shape of every namespace the project's pods run in on the real node (e2e_fixtures.production_namespace)
    is real: the LimitRange (a per-pod max, no defaults) refuses a pod without limits, the quota a pod with a
    container that declares no requests and limits (kubeflow/pipelines#7699's message), Pod Security a pod
    without restricted's securityContext; a pod with all three runs and is counted by the quota."""
    from tests.realnode.e2e_fixtures import QUOTA
    from tests.realnode.e2e_pods import RESTRICTED_CONTAINER, RESTRICTED_POD

    e2e = e2e_production
    labels = e2e.core.read_namespace(e2e.namespace).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted", labels
    secure = {"securityContext": {**RESTRICTED_POD, "runAsUser": 65534, "runAsGroup": 65534}}
    bare = e2e.pod_manifest("bare", ["echo", "hi"], container={"securityContext": dict(RESTRICTED_CONTAINER)},
                            **secure)
    message = _refusal(e2e, bare)
    # The LimitRange plugin walks a Go map of resources, so the two refusals come in either order.
    prefix, _, refusals = message.partition(" [")
    assert prefix == 'pods "bare" is forbidden:', message
    assert sorted(refusals.removesuffix("]").split(", ")) == [
        "maximum cpu usage per Pod is 8.  No limit is specified",
        "maximum memory usage per Pod is 16Gi.  No limit is specified"], message
    half = e2e.pod_manifest("half", ["echo", "hi"], memory="32Mi",
                            container={"securityContext": dict(RESTRICTED_CONTAINER)}, **secure)
    half["spec"]["containers"].append({"name": "bare", "image": PROBE_IMAGE, "imagePullPolicy": "Never",
                                       "args": ["echo"], "securityContext": dict(RESTRICTED_CONTAINER)})
    message = _refusal(e2e, half)
    # The quota's evaluator sorts the resources it names (pkg/quota/v1/evaluator/core/pods.go), so this one is exact.
    assert message == ('pods "half" is forbidden: failed quota: compute: must specify limits.cpu for: bare; '
                       'limits.memory for: bare; requests.cpu for: bare; requests.memory for: bare'), message
    lax = e2e.pod_manifest("lax", ["echo", "hi"], memory="32Mi")
    message = _refusal(e2e, lax)
    assert 'violates PodSecurity "restricted:latest"' in message, message
    for field in ("allowPrivilegeEscalation != false", "unrestricted capabilities", "runAsNonRoot != true",
                  "seccompProfile"):
        assert field in message, (field, message)
    e2e.run("both", ["wait-term", "/dev/null"], memory="32Mi",
            container={"securityContext": dict(RESTRICTED_CONTAINER)}, **secure)
    pod = e2e.wait_phase("both", "Running")
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "100m", "memory": "32Mi"},
                                                         "requests": {"cpu": "100m", "memory": "32Mi"}}
    used = e2e.core.read_namespaced_resource_quota(QUOTA, e2e.namespace).status.used
    assert {k: used[k] for k in ("requests.cpu", "requests.memory", "limits.cpu", "limits.memory")} == {
        "requests.cpu": "100m", "requests.memory": "32Mi", "limits.cpu": "100m", "limits.memory": "32Mi"}, used
    e2e.core.delete_namespaced_pod("both", e2e.namespace, grace_period_seconds=1)

"""Fixtures of the ``e2e`` tests: one real one-node cluster per session (:mod:`tests.realnode.realnode`), a namespace per
test, and helpers to run the probe image's pods.

``e2e_cluster`` (session): the bridge, the control plane on it and the real node, up once for every e2e test;
torn down at the end of the session (also after Ctrl-C or SIGTERM: SIGTERM is turned into KeyboardInterrupt so
that pytest tears down; a SIGKILLed pytest is cleaned up by the watchdog, or by ``hack/node/cleanup.sh``). The
teardown fails the session if anything of the node is left on the machine.

``e2e`` (per test): an :class:`E2E` handle on a fresh namespace, deleted afterwards: a lab namespace for the
node's own probes (they mount hostPath folders, which Pod Security ``restricted`` refuses).

:func:`production_namespace`: a namespace shaped like a Kubeflow profile's, the one helper behind every namespace
the project's pods run in on the real node (:func:`new_namespace`, the ``e2e_pods`` of
:mod:`tests.realnode.e2e_pods`, the Argo and KFP namespaces): Pod Security ``enforce`` (``warn``, ``audit``) at
``restricted`` (or ``baseline`` where the namespace holds others' pods that cannot pass it), a ResourceQuota on
``requests.cpu``, ``requests.memory``, ``limits.cpu``, ``limits.memory`` and a LimitRange with only a per-pod
``max``, which sets no defaults: a pod whose container declares no requests or limits is refused, as in a profile
(kubeflow/pipelines#7699).

``e2e_kueue`` (session, started by the first test that asks for it): the real Kueue v0.17.0 of
:mod:`tests.realcluster.kueue_server` (``hack/kueue/build.sh``; without the binary the test skips in one line) on
the real node's control plane, its process written into the node's journal (so a killed run's sweep stops it by
pid too); its batch Jobs' webhooks scoped to the namespaces labelled :data:`KUEUE_NAMESPACE_LABEL`, which
:meth:`E2EKueue.queue` sets when it gives a namespace the LocalQueue :data:`KUEUE_QUEUE` (and a ClusterQueue
``cq-<namespace>`` of :data:`KUEUE_QUOTA`): the other tests' Jobs never wait on it. Afterwards Kueue's webhook
configurations, objects and CRDs are deleted and its process stopped by pid (``running_kueue``), and the fixture
checks none of them is left. :func:`kueue_admissions` reads back, from the events Kueue recorded (they outlive the
Jobs and Workloads the launcher's cleanup deletes), that a job's replica Jobs were held and admitted by it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realcluster import kueue_server
from tests.realnode import realnode
from tests.realnode.realnode import NODE_NAME, PROBE_IMAGE, E2ECluster, running_real_cluster


@pytest.fixture(scope="session")
def e2e_cluster(tmp_path_factory) -> Iterator[E2ECluster]:
    """The session's real cluster (see the module docstring)."""
    if os.geteuid() != 0:
        pytest.skip("e2e tests need root (mounts, cgroups, a bridge, iptables)")
    if realnode.node_binaries_dir() is None or realnode.images_dir() is None or \
            realnode.binaries_dir() is None:
        pytest.skip(realnode.SKIP_REASON)
    work = Path(os.environ.get("TFK8S_E2E_WORK") or tmp_path_factory.mktemp("e2e"))
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

    def on_sigterm(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, on_sigterm)
    t0 = time.monotonic()
    try:
        with running_real_cluster(work) as cluster:
            print(f"\ne2e cluster up in {time.monotonic() - t0:.1f}s (control plane {cluster.cp.timings}, node "
                  f"{cluster.node.timings}); logs in {work}")
            try:
                yield cluster
            finally:  # the teardown runs to its end: a second Ctrl-C or SIGTERM is ignored
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


class E2E:
    """A test's namespace on the real cluster, and the probe image's pods in it."""

    def __init__(self, cluster: E2ECluster, namespace: str):
        from kubernetes import client

        self.cluster, self.namespace = cluster, namespace
        self.api = cluster.cp.admin_client()
        self.core = client.CoreV1Api(self.api)

    def pod_manifest(self, name: str, args: list[str], labels: dict[str, str] | None = None,
                     memory: str = "", **spec: Any) -> dict[str, Any]:
        """A pod of the probe image running ``/probe ARGS`` once (``restartPolicy: Never``, never pulled), with
        a ``memory`` limit (and request) when given; ``spec``: more pod spec fields."""
        container: dict[str, Any] = {"name": "probe", "image": PROBE_IMAGE, "imagePullPolicy": "Never",
                                     "args": args}
        if memory:
            container["resources"] = {"limits": {"memory": memory, "cpu": "100m"},
                                      "requests": {"memory": memory, "cpu": "100m"}}
        container.update(spec.pop("container", {}))
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
                         "containers": [container], **spec}}

    def run(self, name: str, args: list[str], **kw: Any) -> dict[str, Any]:
        """Create the probe pod ``name`` (see :meth:`pod_manifest`); its API JSON."""
        self.core.create_namespaced_pod(self.namespace, self.pod_manifest(name, args, **kw))
        return self.pod(name)

    def pod(self, name: str) -> dict[str, Any]:
        """The pod as the API server's JSON."""
        return json.loads(self.core.read_namespaced_pod(name, self.namespace, _preload_content=False).data)

    def wait(self, name: str, predicate: Callable[[dict[str, Any]], Any], what: str,
             timeout: float = 90) -> dict[str, Any]:
        """Poll pod ``name`` until ``predicate(pod)``; on timeout an AssertionError with its status, events and
        the end of the kubelet's and containerd's logs."""
        deadline = time.monotonic() + timeout
        pod: dict[str, Any] = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                pod = self.pod(name)
                if predicate(pod):
                    return pod
            time.sleep(0.3)
        events = [f"{e.reason}: {e.message}" for e in self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={name}").items]
        node = self.cluster.node
        raise AssertionError(
            f"pod {self.namespace}/{name}: timed out after {timeout:.0f}s waiting for {what}; status "
            f"{json.dumps(pod.get('status'), indent=1)}\nevents: {events}\n--- kubelet.log:\n"
            f"{node.logs('kubelet', 25)}\n--- containerd.log:\n{node.logs('containerd', 15)}")

    def wait_phase(self, name: str, *phases: str, timeout: float = 90) -> dict[str, Any]:
        """Wait until pod ``name`` is in one of ``phases``."""
        return self.wait(name, lambda p: p.get("status", {}).get("phase") in phases, f"phase {phases}", timeout)

    def wait_log(self, name: str, text: str, timeout: float = 60) -> str:
        """Wait until the log of pod ``name`` (``pods/log``) contains ``text``; the log."""
        deadline = time.monotonic() + timeout
        log = ""
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                log = self.log(name)
                if text in log:
                    return log
            time.sleep(0.3)
        raise AssertionError(f"pod {name}'s log has no {text!r} after {timeout:.0f}s: {log!r}")

    def log(self, name: str) -> str:
        """The pod's log, read through the API server (``pods/log``: the API server asks the kubelet)."""
        return self.core.read_namespaced_pod_log(name, self.namespace)

    @staticmethod
    def terminated(pod: dict[str, Any]) -> dict[str, Any]:
        """The probe container's ``state.terminated`` (``{}`` while it is not)."""
        statuses = pod.get("status", {}).get("containerStatuses") or [{}]
        return statuses[0].get("state", {}).get("terminated") or {}

    def close(self) -> None:
        """Delete the namespace (its pods go with it, gracefully) and close the client."""
        with contextlib.suppress(Exception):
            self.core.delete_namespace(self.namespace)
        self.api.close()


POD_SECURITY = "pod-security.kubernetes.io"
QUOTA = "compute"  # the ResourceQuota's name
QUOTA_HARD = {"requests.cpu": "8", "requests.memory": "32Gi", "limits.cpu": "64", "limits.memory": "128Gi"}
"""The namespace's quota: the four a profile's quota names; far above what a 2-core node runs, so it refuses only
a pod that declares nothing (the quota's own refusal when full is tests/realcluster's)."""
LIMIT_RANGE = "pod-max"
POD_MAX = {"cpu": "8", "memory": "16Gi"}
"""The LimitRange's only setting: a ``max`` per **Pod** (the sum of its containers' limits). Not per Container:
the API server defaults a Container item's ``default`` limit to its ``max`` (and ``defaultRequest`` to that),
so a Container ``max`` would fill in requests and limits for a container that declares none, and admit it (seen
on the real API server: a bare container got 4 CPUs requested). A Pod item gets no defaults."""


def pod_security_labels(level: str) -> dict[str, str]:
    """The namespace labels of Pod Security admission at ``level`` (``restricted``, ``baseline``): enforce, warn
    and audit, each at ``latest``."""
    return {f"{POD_SECURITY}/{mode}{suffix}": value for mode in ("enforce", "warn", "audit")
            for suffix, value in (("", level), ("-version", "latest"))}


def production_namespace(api: Any, name: str, level: str = "restricted") -> None:
    """Create namespace ``name`` shaped like a Kubeflow profile's (see the module docstring): Pod Security
    ``level``, the ResourceQuota :data:`QUOTA` (:data:`QUOTA_HARD`) and the LimitRange :data:`LIMIT_RANGE`
    (:data:`POD_MAX`, no defaults); returns once the quota controller has its status (until then the
    quota admission refuses every pod: "status unknown for quota") and the default ServiceAccount exists."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name, "labels": pod_security_labels(level)}})
    core.create_namespaced_resource_quota(name, {"metadata": {"name": QUOTA}, "spec": {"hard": dict(QUOTA_HARD)}})
    core.create_namespaced_limit_range(name, {"metadata": {"name": LIMIT_RANGE}, "spec": {
        "limits": [{"type": "Pod", "max": dict(POD_MAX)}]}})
    deadline = time.monotonic() + 60
    while True:
        try:
            quota = core.read_namespaced_resource_quota(QUOTA, name)
            core.read_namespaced_service_account("default", name)
            if quota.status and quota.status.hard:
                return
        except client.ApiException:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"namespace {name}: no quota status or default ServiceAccount after 60 s")
        time.sleep(0.2)


def new_namespace(cluster: E2ECluster, prefix: str = "e2e", production: bool = True) -> E2E:
    """A fresh namespace ``<prefix>-<8 hex>`` on the real cluster, once its default ServiceAccount exists; the
    :class:`E2E` handle on it (:meth:`E2E.close` deletes it). ``production``: shaped by
    :func:`production_namespace` (``restricted``), else a lab namespace with no admission rules of its own."""
    from kubernetes import client

    ns = f"{prefix}-{uuid.uuid4().hex[:8]}"
    handle = E2E(cluster, ns)
    if production:
        try:
            production_namespace(handle.api, ns)
        except Exception:
            handle.close()
            raise
        return handle
    handle.core.create_namespace({"metadata": {"name": ns}})
    deadline = time.monotonic() + 30
    while True:
        try:
            handle.core.read_namespaced_service_account("default", ns)
            return handle
        except client.ApiException:
            if time.monotonic() > deadline:
                handle.close()
                raise
            time.sleep(0.2)


@pytest.fixture
def e2e(e2e_cluster) -> Iterator[E2E]:
    """A fresh lab namespace on the real cluster (its default ServiceAccount there; no Pod Security level, no
    quota: the node's probes mount hostPath folders), deleted after the test."""
    handle = new_namespace(e2e_cluster, production=False)
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
def e2e_production(e2e_cluster) -> Iterator[E2E]:
    """A fresh production-shaped namespace (:func:`production_namespace`, ``restricted``), deleted after the
    test: where the project's pods run (``e2e_pods``)."""
    handle = new_namespace(e2e_cluster)
    try:
        yield handle
    finally:
        handle.close()


# -- the real Kueue ------------------------------------------------------------------------------------------------
KUEUE_QUEUE = "tfk8s-e2e"
"""The LocalQueue :meth:`E2EKueue.queue` makes (the tests' ``kubernetes.kueue_queue``). Not ``default``: Kueue
(LocalQueueDefaulting) would put every Job of the namespace without a queue into a LocalQueue named so."""
KUEUE_QUOTA = {"cpu": "4", "memory": "16Gi"}
"""The ClusterQueue's nominal quota: above what any e2e job requests at once (3 replicas of 250m/1Gi; the pipeline's
1 worker of 500m/2Gi), so Kueue admits at once; Kueue counts requests, not the 2-core node's capacity."""
KUEUE_NAMESPACE_LABEL = "tfk8s.dev/e2e-kueue"
"""The label of the namespaces whose Jobs go through Kueue's batch webhooks (set by :meth:`E2EKueue.queue`)."""


class E2EKueue:
    """The session's real Kueue (:class:`tests.realcluster.kueue_server.KueueServer` as ``server``) on the real
    node's control plane."""

    def __init__(self, server: kueue_server.KueueServer):
        self.server = server
        self.cluster_queues: dict[str, str] = {}  # namespace -> its ClusterQueue

    def queue(self, namespace: str) -> str:
        """Give ``namespace`` the LocalQueue :data:`KUEUE_QUEUE` (Active) on a ClusterQueue of its own,
        ``cq-<namespace>`` (:data:`KUEUE_QUOTA`), and the label :data:`KUEUE_NAMESPACE_LABEL` that puts its Jobs
        behind Kueue's webhooks; the ClusterQueue's name. Once per namespace (a second call returns the first's)."""
        from kubernetes import client

        if namespace in self.cluster_queues:
            return self.cluster_queues[namespace]
        client.CoreV1Api(self.server.admin).patch_namespace(
            namespace, {"metadata": {"labels": {KUEUE_NAMESPACE_LABEL: "true"}}})
        cq = self.server.queue(namespace, KUEUE_QUEUE, **KUEUE_QUOTA)
        self.cluster_queues[namespace] = cq
        return cq

    def workloads(self, namespace: str) -> list[dict[str, Any]]:
        """The Workloads of ``namespace`` (``v1beta2``)."""
        return self.server.workloads(namespace)

    @staticmethod
    def admitted(workload: dict[str, Any]) -> bool:
        """Whether Kueue admitted ``workload`` (its ``QuotaReserved`` and ``Admitted`` conditions True)."""
        conditions = {c["type"]: c["status"] for c in (workload.get("status") or {}).get("conditions") or []}
        return conditions.get("QuotaReserved") == "True" and conditions.get("Admitted") == "True"


def kueue_admissions(api: Any, namespace: str, job: str) -> dict[str, dict[str, Any]]:
    """What Kueue's events say of the replica Jobs of the training job ``job`` (``tfk8s-<run id>``) in
    ``namespace``, by replica Job name: ``{"workload": its Workload's name, "job": [(reason, message)...] of the
    Job, "workload_events": [(reason, message)...] of the Workload}``, from Kueue's own events: on the Job
    ``CreatedWorkload`` ("Created Workload: NS/NAME") and ``Started`` ("Admitted by clusterQueue CQ", recorded when
    Kueue unsuspends the Job it held), on the Workload ``QuotaReserved`` and ``Admitted``. Events outlive the Jobs
    and Workloads (the launcher's cleanup deletes the Jobs; the garbage collector their Workloads), so this is
    read after the run."""
    from kubernetes import client

    events = client.CoreV1Api(api).list_namespaced_event(namespace).items
    replicas = sorted({e.involved_object.name for e in events if e.involved_object.kind == "Job"
                       and (e.involved_object.name or "").startswith(f"{job}-")})
    out: dict[str, dict[str, Any]] = {}
    for name in replicas:
        mine = sorted((e for e in events if e.involved_object.kind == "Job" and e.involved_object.name == name),
                      key=_event_time)
        said = [(e.reason, e.message or "") for e in mine]
        created = [m.split("/", 1)[1] for r, m in said if r == "CreatedWorkload" and "/" in m]
        workload = created[-1] if created else ""
        theirs = sorted((e for e in events if e.involved_object.kind == "Workload"
                         and e.involved_object.name == workload), key=_event_time)
        out[name] = {"workload": workload, "job": said,
                     "workload_events": [(e.reason, e.message or "") for e in theirs]}
    return out


def _event_time(e: Any) -> str:
    t = e.last_timestamp or e.event_time or e.first_timestamp
    return t.isoformat() if t else ""


def assert_admitted_by_kueue(admissions: dict[str, dict[str, Any]], replica_jobs: list[str], cq: str) -> None:
    """Each of ``replica_jobs`` (and no other) was held by Kueue (a Workload created for it) and started when the
    ClusterQueue ``cq`` admitted that Workload (:func:`kueue_admissions`)."""
    assert sorted(admissions) == sorted(replica_jobs), admissions
    for name, a in admissions.items():
        reasons = dict(a["job"])
        assert a["workload"] and reasons.get("CreatedWorkload", "").endswith(f"/{a['workload']}"), (name, a)
        assert reasons.get("Started") == f"Admitted by clusterQueue {cq}", (name, a)
        theirs = dict(a["workload_events"])
        assert theirs.get("QuotaReserved", "").startswith(f"Quota reserved in ClusterQueue {cq},"), (name, a)
        assert theirs.get("Admitted", "").startswith(f"Admitted by ClusterQueue {cq},"), (name, a)


@pytest.fixture(scope="session")
def e2e_kueue(e2e_cluster: E2ECluster, tmp_path_factory) -> Iterator[E2EKueue]:
    """The real Kueue on the real node's control plane (see the module docstring); skips in one line without its
    binary (``hack/kueue/build.sh``)."""
    from kubernetes import client

    reason = kueue_server.skip_reason()
    if reason:
        pytest.skip(reason)
    cp = e2e_cluster.cp
    selector = {"matchLabels": {KUEUE_NAMESPACE_LABEL: "true"}}
    with kueue_server.running_kueue(cp.kubeconfig(), tmp_path_factory.mktemp("kueue"),
                                    job_namespace_selector=selector) as server:
        if e2e_cluster.journal is not None:  # a SIGKILLed run's sweep (the watchdog, cleanup.sh) stops it by pid
            e2e_cluster.journal.add("processes", {"name": "kueue", "pid": server.pid,
                                                  "start": realnode.proc_start_time(server.pid)})
        print(f"\nkueue up in {server.timings['up']:.1f}s (manager ready in {server.timings['ready']:.1f}s), "
              f"pid {server.pid}; log {server.work / 'kueue.log'}")
        yield E2EKueue(server)
    # the cluster as found: no process, no webhook configuration, no CRD of Kueue's group
    with cp.admin_client() as api:
        adm, ext = client.AdmissionregistrationV1Api(api), client.ApiextensionsV1Api(api)
        hooks = [w.metadata.name for w in adm.list_mutating_webhook_configuration().items
                 + adm.list_validating_webhook_configuration().items]
        crds = [c.metadata.name for c in ext.list_custom_resource_definition().items]
    assert server.popen is not None and server.popen.poll() is not None
    assert not [h for h in hooks if h.startswith(kueue_server.WEBHOOK_PREFIX)], hooks
    assert not [c for c in crds if c.endswith(f".{kueue_server.GROUP}")], crds


__all__ = ["E2E", "KUEUE_NAMESPACE_LABEL", "KUEUE_QUEUE", "KUEUE_QUOTA", "NODE_NAME", "POD_MAX", "QUOTA",
           "QUOTA_HARD", "E2EKueue", "assert_admitted_by_kueue", "e2e", "e2e_cluster", "e2e_kueue",
           "e2e_production", "kueue_admissions", "new_namespace", "pod_security_labels", "production_namespace"]

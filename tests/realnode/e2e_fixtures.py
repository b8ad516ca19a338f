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


__all__ = ["E2E", "NODE_NAME", "POD_MAX", "QUOTA", "QUOTA_HARD", "e2e", "e2e_cluster", "e2e_production",
           "new_namespace", "pod_security_labels", "production_namespace"]

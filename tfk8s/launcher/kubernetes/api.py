"""The only Kubernetes API calls the launcher makes, as a small typed adapter returning plain dicts.

Each method is registered in :data:`API_CALLS` with the (API group, resource, verb) it needs, which is
exactly what ``manifests/rbac.yaml``'s Role grants (a test keeps the two equal). Errors become
:class:`~tfk8s.launcher.kubernetes.errors.KubernetesApiError` with a message saying what to do.

The ``kubernetes`` client is imported when a :class:`KubeApi` is built, not when this module is imported. This
module is over 500 lines on purpose: every call the project makes to the API server is here, in one place to
check against the Role.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from tfk8s.launcher.kubernetes.errors import AlreadyExistsError, KubernetesApiError
from tfk8s.launcher.kubernetes.objects import POD_GROUP_API

REQUEST_TIMEOUT_S = 60
RBAC_HINT = ("the launcher's service account lacks a permission: apply manifests/rbac.yaml "
             "(kubectl apply -n {ns} -f manifests/rbac.yaml) and run the launcher as serviceAccountName "
             "tfk8s-launcher")
QUOTA_HINT = ("the namespace's ResourceQuota is smaller than the job: raise it (kubectl describe resourcequota -n "
              "{ns}), lower the replicas' requests (cpu, memory, gpus) or run fewer replicas")
GANG_HINT = ("the API server does not serve scheduling.k8s.io/v1beta1 PodGroups (Kubernetes >= 1.37 with the "
             "GenericWorkload feature gate and --runtime-config=scheduling.k8s.io/v1beta1=true): enable them, "
             "or leave gang empty")
STRICT = "Strict"  # fieldValidation of every create: an unknown or duplicate field is an error, not dropped
KUEUE_GROUP = "kueue.x-k8s.io"
KSERVE_GROUP = "serving.kserve.io"
KSERVE_VERSION = "v1beta1"  # the InferenceService version the push step writes (KServe 0.7 to today)
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
"""The versions of Kueue's API the launcher reads, best first: ``v1beta2`` (served since Kueue 0.15, stored since
0.16), else ``v1beta1`` (the only one before 0.15; no longer served from 0.20, removed in 0.21:
kubernetes-sigs/kueue#13957). What the launcher reads is spelled the same in both (Kueue v0.17.8's
``apis/kueue/v1beta2``): a LocalQueue's ``spec.clusterQueue`` and ``Active`` condition, a Workload's
``metadata.ownerReferences`` and its ``QuotaReserved`` / ``Admitted`` conditions."""


@dataclass(frozen=True, order=True)
class ApiCall:
    """One permission the launcher needs: ``verb`` on ``resource`` of API group ``group`` ("" = core)."""

    group: str
    resource: str
    verb: str


API_CALLS: dict[str, ApiCall] = {}
_F = TypeVar("_F", bound=Callable[..., Any])


def _uses(group: str, resource: str, verb: str) -> Callable[[_F], _F]:
    def register(fn: _F) -> _F:
        API_CALLS[fn.__name__] = ApiCall(group, resource, verb)
        return fn

    return register


NON_RESOURCE_CALLS: dict[str, str] = {}
"""Methods that read a discovery document (method name -> URL path): every authenticated user may, by the
``system:discovery`` ClusterRole, so they need no rule in the Role."""


def _discovers(path: str) -> Callable[[_F], _F]:
    def register(fn: _F) -> _F:
        NON_RESOURCE_CALLS[fn.__name__] = path
        return fn

    return register


def kueue_version_of(served: list[str] | None) -> str | None:
    """The version of ``kueue.x-k8s.io`` the launcher reads among those ``served``: the first of
    :data:`KUEUE_VERSIONS` there; None when neither is."""
    return next((v for v in KUEUE_VERSIONS if v in (served or [])), None)


def required_rules() -> dict[tuple[str, str], set[str]]:
    """``{(group, resource): verbs}`` the launcher needs: the Role in ``manifests/rbac.yaml``."""
    rules: dict[tuple[str, str], set[str]] = {}
    for call in API_CALLS.values():
        rules.setdefault((call.group, call.resource), set()).add(call.verb)
    return rules


def iter_lines(resp: Any) -> Iterator[str]:
    """Lines of a streamed HTTP response (watch events, a followed log) as they arrive, blank ones kept (each
    byte copied once: a chunk of many events is not re-sliced per line)."""
    buf = bytearray()
    for chunk in resp.stream(amt=None, decode_content=False):
        search = len(buf)
        buf += chunk if isinstance(chunk, bytes) else chunk.encode()
        start = 0
        while (i := buf.find(b"\n", search)) >= 0:
            yield buf[start:i].decode("utf-8", errors="replace")
            start = search = i + 1
        if start:
            del buf[:start]
    if buf:
        yield buf.decode("utf-8", errors="replace")


# What the launcher never reads of a pod or Job it keeps (the watches' objects, the lists): the pod template
# and containers carry each replica's TF_CONFIG, whose cluster spec names every replica, so keeping them costs
# n x n (about 56 KB a replica at 1,024, twice), and managedFields a few KB more each.
_UNREAD_SPEC = ("template", "containers", "initContainers", "ephemeralContainers", "volumes")
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json"
LIST_PAGE = 250  # objects per page of a list (limit/continue): a list's bytes in flight stay bounded


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` (a pod, Job or Service dict) without what the launcher never reads: ``metadata.managedFields``
    and the spec's pod template, containers and volumes (:data:`_UNREAD_SPEC`; it reads ``spec.nodeName`` and
    ``spec.suspend``). In place; returns ``obj``."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    spec = obj.get("spec")
    if isinstance(spec, dict):
        for key in _UNREAD_SPEC:
            spec.pop(key, None)
    return obj


def close_stream(resp: Any) -> None:
    """Unblock a thread reading ``resp`` and release its connection (safe from any thread, idempotent)."""
    with contextlib.suppress(Exception):  # closing a broken stream must not fail the cleanup
        if hasattr(resp, "shutdown"):
            resp.shutdown()
        resp.close()


class KubeApi:
    """Namespaced calls on jobs, pods, pods/log, services and events; dicts in, dicts out.

    Args:
        api_client: a ``kubernetes.client.ApiClient``.
        namespace: the namespace of every call.
    """

    def __init__(self, api_client: Any, namespace: str):
        from kubernetes import client

        self.namespace = namespace
        self._client = api_client
        self._core = client.CoreV1Api(api_client)
        self._batch = client.BatchV1Api(api_client)
        self._networking = client.NetworkingV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._kueue_served: list[str] | None = None
        self._kueue_discovered = False

    # -- helpers ---------------------------------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn(*args, **kwargs)
        except ApiException as e:
            raise self._error(what, e) from None
        except (OSError, HTTPError) as e:
            raise KubernetesApiError(f"{what} in namespace {self.namespace} failed: cannot reach the "
                                     f"Kubernetes API ({type(e).__name__}: {e})") from None

    def _error(self, what: str, e: Any) -> KubernetesApiError:
        status = int(getattr(e, "status", 0) or 0)
        try:
            detail = json.loads(e.body).get("message") or e.reason
        except (TypeError, ValueError, AttributeError):
            detail = getattr(e, "reason", "") or str(e)
        msg = f"{what} in namespace {self.namespace} failed: {status} {detail}"
        if status == 409:
            return AlreadyExistsError(msg, status)
        if status == 403 and "exceeded quota" in str(detail):
            msg += "; " + QUOTA_HINT.format(ns=self.namespace)
        elif status in (401, 403):
            msg += "; " + RBAC_HINT.format(ns=self.namespace)
        elif status == 404 and "namespace" in str(detail).lower():
            msg += f"; create the namespace or pass --namespace (kubectl create namespace {self.namespace})"
        return KubernetesApiError(msg, status)

    def _json(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        resp = self._call(what, fn, *args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S, **kwargs)
        return json.loads(resp.data or b"{}")

    def _pages(self, what: str, fn: Callable[..., Any], label_selector: str,
               metadata_path: str | None = None) -> dict[str, Any]:
        """A list by ``label_selector`` read :data:`LIST_PAGE` objects at a time (``limit``/``continue``: one
        consistent snapshot), each object :func:`slim`; ``metadata.resourceVersion`` is the snapshot's. With
        ``metadata_path`` (the list's URL path), only each object's metadata is asked for (``Accept:
        ...;as=PartialObjectMetadataList``, as ``kubectl get -o name`` does; a server that ignores it sends the
        whole objects): for the callers that need names and deletion timestamps (the cleanup's checks)."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            if metadata_path is None:
                page = self._json(what, fn, self.namespace, label_selector=label_selector, limit=LIST_PAGE,
                                  **({"_continue": token} if token else {}))
            else:
                query = [("labelSelector", label_selector), ("limit", LIST_PAGE)] + \
                    ([("continue", token)] if token else [])
                resp = self._call(what, self._client.call_api, metadata_path, "GET",
                                  path_params={"namespace": self.namespace}, query_params=query,
                                  header_params={"Accept": METADATA_ONLY}, auth_settings=["BearerToken"],
                                  _return_http_data_only=True, _preload_content=False,
                                  _request_timeout=REQUEST_TIMEOUT_S)
                page = json.loads(resp.data or b"{}")
            items += [slim(o) for o in page.get("items") or []]
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                return {**page, "items": items, "metadata": {k: v for k, v in meta.items() if k != "continue"}}

    def _delete(self, what: str, fn: Callable[..., Any], name: str, **kwargs: Any) -> bool:
        try:
            self._json(what, fn, name, self.namespace, **kwargs)
        except KubernetesApiError as e:
            if e.status == 404:
                return False
            raise
        return True

    def _set_owners(self, what: str, fn: Callable[..., Any], name: str, refs: list[dict[str, Any]]) -> bool:
        # A JSON Patch (a list body) replaces the whole list; a strategic merge patch would merge it by uid
        # and keep the old owner.
        body = [{"op": "add", "path": "/metadata/ownerReferences", "value": refs}]
        try:
            self._json(what, fn, name, self.namespace, body)
        except KubernetesApiError as e:
            if e.status == 404:
                return False
            raise
        return True

    # -- services ---------------------------------------------------------------------------------------------
    @_uses("", "services", "create")
    def create_service(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create a Service; raises :class:`AlreadyExistsError` if it exists."""
        return self._json("creating Service", self._core.create_namespaced_service, self.namespace, body,
                          field_validation=STRICT)

    @_uses("", "services", "list")
    def list_services(self, label_selector: str, metadata_only: bool = False) -> dict[str, Any]:
        """Services matching ``label_selector`` (a ServiceList dict)."""
        return self._pages("listing Services", self._core.list_namespaced_service, label_selector,
                           "/api/v1/namespaces/{namespace}/services" if metadata_only else None)

    @_uses("", "services", "delete")
    def delete_service(self, name: str) -> bool:
        """Delete a Service; False if it did not exist."""
        return self._delete(f"deleting Service {name}", self._core.delete_namespaced_service, name)

    @_uses("", "services", "patch")
    def set_service_owners(self, name: str, owner_references: list[dict[str, Any]]) -> bool:
        """Replace a Service's ownerReferences; False if it does not exist."""
        return self._set_owners(f"setting the owner of Service {name}", self._core.patch_namespaced_service, name,
                                owner_references)

    # -- the job's NetworkPolicy ---------------------------------------------------------------------------------
    @_uses("networking.k8s.io", "networkpolicies", "create")
    def create_network_policy(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create a NetworkPolicy; raises :class:`AlreadyExistsError` if it exists."""
        return self._json("creating NetworkPolicy", self._networking.create_namespaced_network_policy,
                          self.namespace, body, field_validation=STRICT)

    @_uses("networking.k8s.io", "networkpolicies", "list")
    def list_network_policies(self, label_selector: str) -> dict[str, Any]:
        """NetworkPolicies matching ``label_selector`` (a NetworkPolicyList dict)."""
        return self._json("listing NetworkPolicies", self._networking.list_namespaced_network_policy,
                          self.namespace, label_selector=label_selector)

    @_uses("networking.k8s.io", "networkpolicies", "delete")
    def delete_network_policy(self, name: str) -> bool:
        """Delete a NetworkPolicy; False if it did not exist."""
        return self._delete(f"deleting NetworkPolicy {name}", self._networking.delete_namespaced_network_policy,
                            name)

    @_uses("networking.k8s.io", "networkpolicies", "patch")
    def set_network_policy_owners(self, name: str, owner_references: list[dict[str, Any]]) -> bool:
        """Replace a NetworkPolicy's ownerReferences; False if it does not exist."""
        return self._set_owners(f"setting the owner of NetworkPolicy {name}",
                                self._networking.patch_namespaced_network_policy, name, owner_references)

    # -- the job's PodGroup (gang=native) ------------------------------------------------------------------------
    def _pod_group_call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        group, version, plural = POD_GROUP_API
        try:
            return self._json(what, fn, group, version, self.namespace, plural, *args, **kwargs)
        except KubernetesApiError as e:
            if e.status == 404 and "could not find the requested resource" in str(e):
                raise KubernetesApiError(f"{e}; {GANG_HINT}", 404) from None
            raise

    @_uses("scheduling.k8s.io", "podgroups", "create")
    def create_pod_group(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create a ``scheduling.k8s.io/v1beta1`` PodGroup; raises :class:`AlreadyExistsError` if it exists."""
        return self._pod_group_call("creating PodGroup", self._custom.create_namespaced_custom_object, body,
                                    field_validation=STRICT)

    @_uses("scheduling.k8s.io", "podgroups", "list")
    def list_pod_groups(self, label_selector: str) -> dict[str, Any]:
        """PodGroups matching ``label_selector``."""
        return self._pod_group_call("listing PodGroups", self._custom.list_namespaced_custom_object,
                                    label_selector=label_selector)

    @_uses("scheduling.k8s.io", "podgroups", "delete")
    def delete_pod_group(self, name: str) -> bool:
        """Delete a PodGroup; False if it did not exist."""
        try:
            self._pod_group_call(f"deleting PodGroup {name}", self._custom.delete_namespaced_custom_object, name)
        except KubernetesApiError as e:
            if e.status == 404:
                return False
            raise
        return True

    @_uses("scheduling.k8s.io", "podgroups", "patch")
    def set_pod_group_owners(self, name: str, owner_references: list[dict[str, Any]]) -> bool:
        """Replace a PodGroup's ownerReferences; False if it does not exist."""
        body = [{"op": "add", "path": "/metadata/ownerReferences", "value": owner_references}]
        try:
            self._pod_group_call(f"setting the owner of PodGroup {name}", self._custom.patch_namespaced_custom_object,
                                 name, body)
        except KubernetesApiError as e:
            if e.status == 404:
                return False
            raise
        return True

    # -- jobs ---------------------------------------------------------------------------------------------------
    @_uses("batch", "jobs", "patch")
    def set_job_owners(self, name: str, owner_references: list[dict[str, Any]]) -> bool:
        """Replace a Job's ownerReferences; False if it does not exist."""
        return self._set_owners(f"setting the owner of Job {name}", self._batch.patch_namespaced_job, name,
                                owner_references)

    @_uses("batch", "jobs", "create")
    def create_job(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create a Job; raises :class:`AlreadyExistsError` if one with its name exists (maybe terminating)."""
        return self._json("creating Job", self._batch.create_namespaced_job, self.namespace, body,
                          field_validation=STRICT)

    @_uses("batch", "jobs", "list")
    def list_jobs(self, label_selector: str, metadata_only: bool = False) -> dict[str, Any]:
        """Jobs matching ``label_selector`` (a JobList dict with its resourceVersion)."""
        return self._pages("listing Jobs", self._batch.list_namespaced_job, label_selector,
                           "/apis/batch/v1/namespaces/{namespace}/jobs" if metadata_only else None)

    @_uses("batch", "jobs", "watch")
    def watch_jobs(self, label_selector: str, resource_version: str, timeout_s: int) -> Any:
        """Open a watch of Jobs from ``resource_version``: a streamed response, one JSON event a line."""
        return self._watch("watching Jobs", self._batch.list_namespaced_job, label_selector, resource_version,
                           timeout_s)

    @_uses("batch", "jobs", "delete")
    def delete_job(self, name: str) -> bool:
        """Delete a Job, its pods in the background; False if it did not exist."""
        return self._delete(f"deleting Job {name}", self._batch.delete_namespaced_job, name,
                            propagation_policy="Background")

    # -- pods -----------------------------------------------------------------------------------------------------
    @_uses("", "pods", "list")
    def list_pods(self, label_selector: str, metadata_only: bool = False) -> dict[str, Any]:
        """Pods matching ``label_selector`` (a PodList dict with its resourceVersion)."""
        return self._pages("listing pods", self._core.list_namespaced_pod, label_selector,
                           "/api/v1/namespaces/{namespace}/pods" if metadata_only else None)

    @_uses("", "pods", "watch")
    def watch_pods(self, label_selector: str, resource_version: str, timeout_s: int) -> Any:
        """Open a watch of pods from ``resource_version``: a streamed response, one JSON event a line."""
        return self._watch("watching pods", self._core.list_namespaced_pod, label_selector, resource_version,
                           timeout_s)

    @_uses("", "pods", "delete")
    def delete_pod(self, name: str, grace_period_s: int | None = None) -> bool:
        """Delete a pod (its container gets SIGTERM, then SIGKILL after ``grace_period_s`` seconds)."""
        kwargs = {} if grace_period_s is None else {"grace_period_seconds": grace_period_s}
        return self._delete(f"deleting pod {name}", self._core.delete_namespaced_pod, name, **kwargs)

    @_uses("", "pods/log", "get")
    def open_log(self, pod: str, container: str) -> Any:
        """Follow a pod's container log: a streamed response that ends when the container does."""
        return self._call(f"reading the log of pod {pod}", self._core.read_namespaced_pod_log, pod,
                          self.namespace, container=container, follow=True, _preload_content=False)

    @_uses("", "pods/log", "get")
    def read_log(self, pod: str, container: str) -> Any:
        """A pod's container log as it is now, whole: a streamed response that ends at its last line (not
        followed; the launcher's end-of-replica read, :mod:`tfk8s.launcher.kubernetes.logs`)."""
        return self._call(f"reading the log of pod {pod}", self._core.read_namespaced_pod_log, pod,
                          self.namespace, container=container, _preload_content=False,
                          _request_timeout=REQUEST_TIMEOUT_S)

    @_uses("", "pods/log", "get")
    def read_log_tail(self, pod: str, container: str, lines: int) -> list[str]:
        """The last ``lines`` lines of a pod's container log."""
        resp = self._call(f"reading the log of pod {pod}", self._core.read_namespaced_pod_log, pod,
                          self.namespace, container=container, tail_lines=lines, _preload_content=False,
                          _request_timeout=REQUEST_TIMEOUT_S)
        return (resp.data or b"").decode("utf-8", errors="replace").splitlines()

    # -- events ---------------------------------------------------------------------------------------------------
    @_uses("", "events", "list")
    def list_events(self, involved_object: str) -> list[dict[str, Any]]:
        """Events about the object named ``involved_object`` (a pod or a Job), oldest first."""
        items = self._json(f"listing events of {involved_object}", self._core.list_namespaced_event,
                           self.namespace, field_selector=f"involvedObject.name={involved_object}").get("items")
        return sorted(items or [], key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")

    @_uses("", "events", "list")
    def list_events_by_reason(self, reason: str, kind: str) -> list[dict[str, Any]]:
        """Events of ``reason`` (e.g. ``FailedCreate``) about objects of ``kind`` (e.g. ``Job``) in the
        namespace, oldest first: one request however many objects are concerned."""
        items = self._json(f"listing {reason} events of {kind}s", self._core.list_namespaced_event, self.namespace,
                           field_selector=f"reason={reason},involvedObject.kind={kind}").get("items")
        return sorted(items or [], key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")

    # -- Kueue (kueue_queue set): the LocalQueue checked, the held Workloads' reasons read ----------------------
    @_discovers(f"/apis/{KUEUE_GROUP}")
    def kueue_versions(self) -> list[str] | None:
        """The versions of ``kueue.x-k8s.io`` the API server serves, from its discovery document (``GET
        /apis/kueue.x-k8s.io``, which every authenticated user may read: ``system:discovery``, no Role rule);
        None when it serves no such group (Kueue is not installed). Asked once per :class:`KubeApi`."""
        if not self._kueue_discovered:
            try:
                resp = self._call(f"discovering Kueue's API (GET /apis/{KUEUE_GROUP})", self._client.call_api,
                                  f"/apis/{KUEUE_GROUP}", "GET", auth_settings=["BearerToken"],
                                  header_params={"Accept": "application/json"}, _return_http_data_only=True,
                                  _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S)
                doc = json.loads(resp.data or b"{}")
                self._kueue_served = [v["version"] for v in doc.get("versions") or [] if v.get("version")]
            except KubernetesApiError as e:
                if e.status != 404:
                    raise
                self._kueue_served = None
            self._kueue_discovered = True
        return self._kueue_served

    def _kueue_call(self, what: str, fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
        served = self.kueue_versions()
        version = kueue_version_of(served)
        if version is None:
            raise KubernetesApiError(f"{what} in namespace {self.namespace} failed: the API server serves "
                                     f"{KUEUE_GROUP} in no version the launcher reads ({' or '.join(KUEUE_VERSIONS)}; "
                                     f"served: {', '.join(served or []) or 'none'})", 404)
        return self._json(what, fn, KUEUE_GROUP, version, self.namespace, *args)

    @_uses("kueue.x-k8s.io", "localqueues", "get")
    def read_local_queue(self, name: str) -> dict[str, Any] | None:
        """The LocalQueue ``name`` (in :func:`kueue_version_of` the served versions), or None if there is none
        (a 404 of an API server that does not serve the kind at all is raised)."""
        try:
            return self._kueue_call(f"reading Kueue LocalQueue {name}", self._custom.get_namespaced_custom_object,
                                    "localqueues", name)
        except KubernetesApiError as e:
            if e.status == 404 and "could not find the requested resource" not in str(e) \
                    and "in no version the launcher reads" not in str(e):
                return None
            raise

    @_uses("kueue.x-k8s.io", "workloads", "list")
    def list_workloads(self) -> list[dict[str, Any]]:
        """The namespace's Kueue Workloads (in :func:`kueue_version_of` the served versions)."""
        return self._kueue_call("listing Kueue Workloads", self._custom.list_namespaced_custom_object,
                                "workloads").get("items") or []

    # -- KServe (the push step's kserve=apply) ---------------------------------------------------------------------
    @_discovers(f"/apis/{KSERVE_GROUP}")
    def kserve_versions(self) -> list[str] | None:
        """The versions of ``serving.kserve.io`` the API server serves (its discovery document, readable by every
        authenticated user); None when it serves no such group (KServe's CRDs are not installed)."""
        try:
            resp = self._call(f"discovering KServe's API (GET /apis/{KSERVE_GROUP})", self._client.call_api,
                              f"/apis/{KSERVE_GROUP}", "GET", auth_settings=["BearerToken"],
                              header_params={"Accept": "application/json"}, _return_http_data_only=True,
                              _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S)
        except KubernetesApiError as e:
            if e.status != 404:
                raise
            return None
        doc = json.loads(resp.data or b"{}")
        return [v["version"] for v in doc.get("versions") or [] if v.get("version")]

    @_uses(KSERVE_GROUP, "inferenceservices", "create")
    def create_inference_service(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create a KServe InferenceService; raises :class:`AlreadyExistsError` if one of its name exists."""
        return self._json("creating InferenceService", self._custom.create_namespaced_custom_object, KSERVE_GROUP,
                          KSERVE_VERSION, self.namespace, "inferenceservices", body, field_validation=STRICT)

    @_uses(KSERVE_GROUP, "inferenceservices", "patch")
    def patch_inference_service(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Merge ``body`` (labels, annotations, spec) into the InferenceService ``name``."""
        return self._json(f"updating InferenceService {name}", self._custom.patch_namespaced_custom_object,
                          KSERVE_GROUP, KSERVE_VERSION, self.namespace, "inferenceservices", name, body)

    # -- persistent volume claims (the ensure-volume step) -------------------------------------------------------
    @_uses("", "persistentvolumeclaims", "get")
    def read_pvc(self, name: str) -> dict[str, Any] | None:
        """The PersistentVolumeClaim ``name``, or None if there is none."""
        try:
            return self._json(f"reading PersistentVolumeClaim {name}",
                              self._core.read_namespaced_persistent_volume_claim, name, self.namespace)
        except KubernetesApiError as e:
            if e.status == 404:
                return None
            raise

    @_uses("", "persistentvolumeclaims", "create")
    def create_pvc(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create a PersistentVolumeClaim; raises :class:`AlreadyExistsError` if it exists."""
        return self._json("creating PersistentVolumeClaim", self._core.create_namespaced_persistent_volume_claim,
                          self.namespace, body, field_validation=STRICT)

    def _watch(self, what: str, fn: Callable[..., Any], label_selector: str, resource_version: str,
               timeout_s: int) -> Any:
        return self._call(what, fn, self.namespace, label_selector=label_selector, watch=True,
                          resource_version=resource_version or None, timeout_seconds=timeout_s,
                          allow_watch_bookmarks=True, _preload_content=False,
                          _request_timeout=(REQUEST_TIMEOUT_S, timeout_s + REQUEST_TIMEOUT_S))

"""A fake Kubernetes API for the Kubernetes backend's tests: kmock's emulator, its quirks handled, plus a fake
Job controller and kubelet driven by the test.

kmock (a real aiohttp server emulating the API; the real ``kubernetes`` client talks to it) runs in its own
thread with its own event loop, so the synchronous launcher can run in the test's main thread (where its
SIGTERM handler works) while a *script* thread plays the cluster.

kmock 0.8 quirks and how :class:`FakeApiServer` handles them (here, never in product code):

- the 30.x client sends ``watch=True``, kmock recognises only ``watch=true``: such GETs become watches;
- label selectors (and field selectors) are ignored: lists and watches filter by them here;
- watches ignore ``timeoutSeconds`` and ``resourceVersion``, and replay every object: here a watch ends
  after its timeout, replays only the changes (including deletions, kept as tombstones) newer than its
  ``resourceVersion``, answers a compacted (:meth:`FakeCluster.expire_watches`) version with an ``ERROR`` 410
  event, and subscribes before taking its snapshot (kmock's own watch can lose an event between the two);
- uid, resourceVersion, creationTimestamp and namespace are left unset: they are stamped on every write,
  and lists carry the current resourceVersion;
- there is no delete_collection: answered with 405, so a launcher relying on it fails loudly;
- a JSON Patch (``application/json-patch+json``, a list of operations) would be merged as a dict: its
  ``add``/``replace``/``remove`` operations are turned into the equivalent merge patch (lists replaced);
- ``pods/<name>/log`` would return the pod object: it serves the lines the test wrote, following them.

The test side never uses HTTP: every request kmock records is the launcher's.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import signal
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import aiohttp.web
import attrs
import kmock
import pytest
from kmock._internal import enums

NAMESPACE = "tfk8s-test"
PODS = kmock.resource("", "v1", "pods")
JOBS = kmock.resource("batch", "v1", "jobs")
SERVICES = kmock.resource("", "v1", "services")
EVENTS = kmock.resource("", "v1", "events")
PVCS = kmock.resource("", "v1", "persistentvolumeclaims")
NETWORK_POLICIES = kmock.resource("networking.k8s.io", "v1", "networkpolicies")
POD_GROUPS = kmock.resource("scheduling.k8s.io", "v1beta1", "podgroups")
LOCAL_QUEUES = kmock.resource("kueue.x-k8s.io", "v1beta1", "localqueues")
WORKLOADS = kmock.resource("kueue.x-k8s.io", "v1beta1", "workloads")
KUEUE_KINDS = {"localqueues": "LocalQueue", "workloads": "Workload"}
KUEUE_OF_TODAY = ("v1beta2", "v1beta1")  # what Kueue 0.15 to 0.19 serve (kubernetes-sigs/kueue#13957)
RESOURCES = {"pods": PODS, "jobs": JOBS, "services": SERVICES, "events": EVENTS, "persistentvolumeclaims": PVCS,
             "networkpolicies": NETWORK_POLICIES, "podgroups": POD_GROUPS, "localqueues": LOCAL_QUEUES,
             "workloads": WORKLOADS}
KINDS = {PODS: "Pod", JOBS: "Job", SERVICES: "Service", EVENTS: "Event", PVCS: "PersistentVolumeClaim",
         NETWORK_POLICIES: "NetworkPolicy", POD_GROUPS: "PodGroup", LOCAL_QUEUES: "LocalQueue",
         WORKLOADS: "Workload"}
_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of generateName suffixes
_CLOSE = "CLOSE"  # a bus message that ends the open watches of a resource


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rv(obj: dict[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _dig(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _json_patch_as_merge_patch(ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The merge patch (kmock's only kind) equivalent to JSON Patch ``add``/``replace``/``remove`` operations
    on object members."""
    merged: dict[str, Any] = {}
    for op in ops:
        assert op.get("op") in ("add", "replace", "remove"), f"JSON Patch op {op.get('op')} is not emulated"
        keys = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].lstrip("/").split("/")]
        target = merged
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = None if op["op"] == "remove" else op["value"]
    return merged


def selector_matches(labels: dict[str, str], selector: str) -> bool:
    """Equality-based label selector (``a=b,c!=d,e,!f``), the subset the launcher uses and a bit more."""
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def field_selector_matches(obj: dict[str, Any], selector: str) -> bool:
    """Field selector of ``path=value`` terms (e.g. ``involvedObject.name=x``)."""
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        k, _, v = term.partition("=")
        if str(_dig(obj, k.strip().lstrip("=")) or "") != v.strip().lstrip("="):
            return False
    return True


@attrs.define(kw_only=True)
class FakeApiServer(kmock.KubernetesEmulator):
    """kmock's emulator with the quirks above handled, a fake Job controller and pod logs."""

    rv: int = 0
    compacted_rv: int = 0
    pods_created: int = 0
    logs: dict[str, list[str]] = attrs.field(factory=dict)
    deny_pods: dict[str, str] = attrs.field(factory=dict)  # Job name -> FailedCreate message (quota)
    forbidden: set[tuple[str, str]] = attrs.field(factory=set)  # (HTTP method, plural) answered 403
    tombstones: list[tuple[Any, dict[str, Any]]] = attrs.field(factory=list)  # (resource, last state) deleted
    # pods on a lost node: a graceful DELETE only sets their deletionTimestamp (no kubelet confirms it); a forced
    # one (gracePeriodSeconds=0) removes them, unless they are also in finalized_pods (a finalizer keeps them)
    stuck_pods: set[str] = attrs.field(factory=set)
    finalized_pods: set[str] = attrs.field(factory=set)
    # Kueue: a Job created with a queue label is suspended (no pod) until the test admits it (FakeCluster.admit)
    kueue_hold: bool = False
    closing: bool = False
    on_change: Callable[[], None] = lambda: None
    changed: asyncio.Condition = attrs.field(factory=asyncio.Condition)

    # -- requests -------------------------------------------------------------------------------------------
    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        self.on_change()  # a request arrived (tests wait for some)
        if request.method == enums.method.GET and str(request.params.get("watch", "")).lower() in ("true", "1"):
            object.__setattr__(request, "action", enums.action.WATCH)
        if request.resource is not None and (request.method.value, request.resource.plural) in self.forbidden:
            return self._status(403, "Forbidden", f'{request.resource.plural} is forbidden: User '
                                                  f'"system:serviceaccount:{request.namespace}:default" cannot '
                                                  f'{request.method.value.lower()} resource')
        if request.resource == PODS and request.subresource == "log":
            return await self._serve_log(request)
        if request.method == enums.method.DELETE and request.resource is not None and request.name is None:
            return self._status(405, "MethodNotAllowed", "delete_collection is not emulated by kmock")
        if request.action == enums.action.UPDATE and isinstance(request.data, list):
            object.__setattr__(request, "data", _json_patch_as_merge_patch(request.data))
        if request.action in (enums.action.CREATE, enums.action.UPDATE) and isinstance(request.data, dict):
            meta = request.data.setdefault("metadata", {})
            self.rv += 1
            meta["resourceVersion"] = str(self.rv)
            if request.action == enums.action.CREATE:
                meta.setdefault("namespace", request.namespace)
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", _now())
        if (request.action == enums.action.DELETE and request.resource == PODS
                and request.name in self.stuck_pods | self.finalized_pods):
            grace = str(request.params.get("gracePeriodSeconds", "30"))
            if grace != "0" or request.name in self.finalized_pods:
                pod = await self.get(PODS, request.namespace, request.name)
                if pod is None:
                    return self._status(404, "NotFound", f'pods "{request.name}" not found')
                if not pod["metadata"].get("deletionTimestamp"):
                    pod = await self.patch(PODS, request.namespace, request.name, {"metadata": {
                        "deletionTimestamp": _now(), "deletionGracePeriodSeconds": int(grace)}})
                return aiohttp.web.json_response(pod, status=200)
        if request.action == enums.action.DELETE:
            await self._stamp_deletion(request.resource, request.namespace, request.name)
        response = await super()._handle(request)
        if (request.action == enums.action.CREATE and request.resource == JOBS and response.status < 300
                and isinstance(request.data, dict)):
            await self._job_controller(request.data)
        if request.action in (enums.action.CREATE, enums.action.UPDATE, enums.action.DELETE):
            await self.notify()
        return response

    async def _stamp_deletion(self, resource: Any, namespace: str | None, name: str | None) -> None:
        """A deletion gets its own resourceVersion and a tombstone, so a watch from an older version sees it."""
        async with self._lock:
            key = (resource, namespace, name)
            if key in self._objects and not self._objects[key].deleted:
                self.rv += 1
                self._objects[key].patch({"metadata": {"resourceVersion": str(self.rv)}})
                self.tombstones.append((resource, copy.deepcopy(self._objects[key].raw)))

    @staticmethod
    def _status(code: int, reason: str, message: str) -> aiohttp.web.Response:
        return aiohttp.web.json_response({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                                          "code": code, "reason": reason, "message": message}, status=code)

    async def _serve_list(self, request: kmock.Request) -> dict[str, Any]:
        result = await super()._serve_list(request)
        result["items"] = [o for o in result["items"] if self._selected(request, o)]
        result["metadata"] = {"resourceVersion": str(self.rv)}
        return result

    def _selected(self, request: kmock.Request, obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return (selector_matches(labels, request.params.get("labelSelector", ""))
                and field_selector_matches(obj, request.params.get("fieldSelector", "")))

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[Any]:
        yield b""
        bus = self._buses[request.resource]
        marker = await bus.mark()  # subscribe first, so nothing falls between the snapshot and the stream
        stream = bus.stream(since=marker).__aiter__()
        try:
            since = int(request.params.get("resourceVersion") or 0)
            if since and since < self.compacted_rv:
                yield {"type": "ERROR", "object": {
                    "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "code": 410,
                    "reason": "Expired", "message": f"too old resource version: {since} ({self.compacted_rv})"}}
                return
            async with self._lock:
                replay = [("ADDED", obj.raw) for (res, ns, _), obj in self._objects.items()
                          if res == request.resource and not obj.deleted
                          and (request.namespace is None or ns == request.namespace)]
                replay += [("DELETED", obj) for res, obj in self.tombstones if res == request.resource
                           and (request.namespace is None or obj["metadata"].get("namespace") == request.namespace)]
            for etype, obj in sorted(replay, key=lambda e: _rv(e[1])):
                if _rv(obj) > since and self._selected(request, obj):
                    yield {"type": etype, "object": obj}
            timeout = float(request.params.get("timeoutSeconds") or 0) or None
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout if timeout else None
            while not self.closing:
                try:
                    remaining = None if deadline is None else max(0.0, deadline - loop.time())
                    event = await asyncio.wait_for(anext(stream), remaining)
                except (TimeoutError, StopAsyncIteration):
                    return
                if event.get("type") == _CLOSE:
                    return
                obj = event.get("object") or {}
                ns = (obj.get("metadata") or {}).get("namespace")
                if request.namespace is not None and ns != request.namespace:
                    continue
                if _rv(obj) <= since:
                    continue
                if self._selected(request, obj):
                    yield event
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()
            with contextlib.suppress(Exception):
                await bus.unmark(marker)

    async def _serve_log(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        name = request.name or ""
        pod = await self.get(PODS, request.namespace, name)
        if pod is None:
            return self._status(404, "NotFound", f'pods "{name}" not found')
        state = ((pod.get("status") or {}).get("containerStatuses") or [{}])[0].get("state") or {}
        if not (state.get("running") or state.get("terminated")):
            return self._status(400, "BadRequest",
                                f'container "tensorflow" in pod "{name}" is waiting to start: ContainerCreating')
        follow = str(request.params.get("follow", "")).lower() == "true"
        lines = self.logs.get(name, [])
        tail = request.params.get("tailLines")
        sent = max(0, len(lines) - int(tail)) if tail else 0
        resp = aiohttp.web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request._raw_request)
        try:
            while True:
                lines = self.logs.get(name, [])
                if sent < len(lines):
                    await resp.write(("\n".join(lines[sent:]) + "\n").encode())
                    sent = len(lines)
                if not follow or self.closing or await self._pod_done(request.namespace, name):
                    break
                async with self.changed:
                    await self.changed.wait_for(lambda n=sent: len(self.logs.get(name, [])) > n or self.closing
                                                or self._done_flag(request.namespace, name))
            await resp.write_eof()
        except ConnectionError:
            pass  # the launcher closed the stream
        return resp

    def _done_flag(self, namespace: str | None, name: str) -> bool:
        key = (PODS, namespace, name)
        if key not in self._objects or self._objects[key].deleted:
            return True
        return (self._objects[key].raw.get("status") or {}).get("phase") in ("Succeeded", "Failed")

    async def _pod_done(self, namespace: str | None, name: str) -> bool:
        async with self._lock:
            return self._done_flag(namespace, name)

    # -- the cluster's side ---------------------------------------------------------------------------------------
    async def notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()
        self.on_change()

    async def get(self, resource: kmock.resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        async with self._lock:
            key = (resource, namespace, name)
            if key not in self._objects or self._objects[key].deleted:
                return None
            return copy.deepcopy(self._objects[key].raw)

    async def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """Every live object, by kind (``pods``, ``jobs``, ``services``, ``events``)."""
        async with self._lock:
            out: dict[str, list[dict[str, Any]]] = {k: [] for k in RESOURCES}
            for (res, _, _), obj in self._objects.items():
                for kind, r in RESOURCES.items():
                    if res == r and not obj.deleted:
                        out[kind].append(copy.deepcopy(obj.raw))
            return out

    async def put(self, resource: kmock.resource, obj: dict[str, Any]) -> dict[str, Any]:
        """Create an object as a controller would (stamped metadata, an ADDED event)."""
        meta = obj.setdefault("metadata", {})
        async with self._lock:
            self.rv += 1
            meta.update(resourceVersion=str(self.rv))
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            key = (resource, meta.get("namespace"), meta["name"])
            if key in self._objects:
                self._objects[key].create(obj)
            else:
                self._objects[key] = obj
            raw = self._objects[key].raw
            await self._buses[resource].put({"type": "ADDED", "object": raw})
        await self.notify()
        return raw

    async def patch(self, resource: kmock.resource, namespace: str | None, name: str,
                    changes: dict[str, Any], missing_ok: bool = False, quiet: bool = False) -> dict[str, Any] | None:
        """Merge-patch an object (e.g. its status, as the kubelet does), with a MODIFIED event. With
        ``missing_ok``, an object already deleted is left alone (None). With ``quiet`` the change is stored (a
        list or get sees it) but its event is not sent: :meth:`announce` sends it later, as a lagging watch would."""
        async with self._lock:
            key = (resource, namespace, name)
            if missing_ok and (key not in self._objects or self._objects[key].deleted):
                return None
            obj = self._objects[key]
            assert not obj.deleted, f"{name} is deleted"
            self.rv += 1
            obj.patch({**changes, "metadata": {**changes.get("metadata", {}), "resourceVersion": str(self.rv)}})
            raw = obj.raw
            if not quiet:
                await self._buses[resource].put({"type": "MODIFIED", "object": raw})
        await self.notify()
        return raw

    async def announce(self, resource: kmock.resource, namespace: str | None, name: str) -> None:
        """Send the MODIFIED event of an object's current state (a change made ``quiet``)."""
        async with self._lock:
            raw = self._objects[resource, namespace, name].raw
            await self._buses[resource].put({"type": "MODIFIED", "object": raw})
        await self.notify()

    async def remove(self, resource: kmock.resource, namespace: str | None, name: str) -> None:
        """Delete an object (node lost, a manual delete), with a DELETED event."""
        await self._stamp_deletion(resource, namespace, name)
        async with self._lock:
            obj = self._objects[resource, namespace, name]
            raw = obj.raw
            obj.delete()
            await self._buses[resource].put({"type": "DELETED", "object": raw})
        await self.notify()

    async def _job_controller(self, job: dict[str, Any], admitted: bool = False) -> None:
        """What the Job controller does on creation: one pod from the template (or a FailedCreate event)."""
        meta = job["metadata"]
        name, ns = meta["name"], meta.get("namespace")
        if self.kueue_hold and not admitted and "kueue.x-k8s.io/queue-name" in (meta.get("labels") or {}):
            await self.patch(JOBS, ns, name, {"spec": {"suspend": True}})  # Kueue's webhook: wait for admission
            return
        if name in self.deny_pods:
            await self.event("Job", name, ns, "FailedCreate", self.deny_pods[name])
            return
        n, suffix = self.pods_created, ""
        self.pods_created += 1
        for _ in range(5):
            suffix, n = _SUFFIX_CHARS[n % len(_SUFFIX_CHARS)] + suffix, n // len(_SUFFIX_CHARS)
        template = job["spec"]["template"]
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": f"{name}-{suffix}", "namespace": ns,
                "labels": {**template["metadata"].get("labels", {}), "batch.kubernetes.io/job-name": name,
                           "job-name": name, "batch.kubernetes.io/controller-uid": meta["uid"]},
                "annotations": dict(template["metadata"].get("annotations", {})),
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": meta["uid"],
                                     "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": copy.deepcopy(template["spec"]),
            "status": {"phase": "Pending"},
        }
        await self.put(PODS, pod)
        await self.patch(JOBS, ns, name, {"status": {"active": 1, "startTime": _now()}})

    async def event(self, kind: str, name: str, namespace: str | None, reason: str, message: str,
                    etype: str = "Warning") -> None:
        self.rv += 1
        await self.put(EVENTS, {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{name}.{self.rv:x}", "namespace": namespace},
            "involvedObject": {"kind": kind, "name": name, "namespace": namespace},
            "reason": reason, "message": message, "type": etype, "lastTimestamp": _now(), "count": 1,
        })

    async def close_streams(self) -> None:
        """End every open watch and log stream (teardown)."""
        self.closing = True
        for bus in list(self._buses.values()):
            await bus.put({"type": _CLOSE})
        await self.notify()


class ScriptError(AssertionError):
    """The cluster script of a test failed."""


class FakeCluster:
    """The test's handle on the fake API server: inspect objects, play kubelet / Job controller, launch.

    Replicas are addressed by label (``"worker-1"``); a pod helper acts on the replica's newest pod (or the
    pod of ``attempt``). Every method is safe to call from any thread but the server's.
    """

    def __init__(self, server: FakeApiServer, loop: asyncio.AbstractEventLoop, url: str,
                 namespace: str = NAMESPACE):
        self.server, self.loop, self.url, self.namespace = server, loop, url, namespace
        self.output: list[str] = []
        self._cond = threading.Condition()
        self._version = 0
        server.on_change = self._changed
        self._clients: list[Any] = []
        self.launching = False  # a launcher runs (launch()): wait_pods also waits for its pods watch
        self.kueue_versions: tuple[str, ...] = ()
        self.serve_kueue(*KUEUE_OF_TODAY)

    def serve_kueue(self, *versions: str) -> None:
        """Serve Kueue's LocalQueues and Workloads in ``versions`` only (its discovery document lists them; none:
        Kueue is not installed); :meth:`local_queue` and :meth:`workload` create theirs in each, as a
        conversion would show one object in every served version."""
        for version in self.kueue_versions:
            for plural in KUEUE_KINDS:
                del self.server.resources[kmock.resource("kueue.x-k8s.io", version, plural)]
        for version in versions:
            for plural, kind in KUEUE_KINDS.items():
                self.server.resources[kmock.resource("kueue.x-k8s.io", version, plural)] = kmock.ResourceInfo(
                    kind=kind, namespaced=True)
        self.kueue_versions = versions

    def _kueue_create(self, plural: str, manifest: dict[str, Any]) -> None:
        for version in self.kueue_versions:
            self._run(self.server.put(kmock.resource("kueue.x-k8s.io", version, plural),
                                      {**copy.deepcopy(manifest), "apiVersion": f"kueue.x-k8s.io/{version}"}))

    def _changed(self) -> None:
        with self._cond:
            self._version += 1
            self._cond.notify_all()

    def _print(self, line: str) -> None:
        """The launcher's log sink: collect the line and wake up waiting scripts."""
        self.output.append(line)
        self._changed()

    def _run(self, coro: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    # -- the launcher's side --------------------------------------------------------------------------------------
    def api_client(self) -> Any:
        """A real ``kubernetes`` ApiClient pointed at the fake server."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url.rstrip("/")
        api = client.ApiClient(cfg)
        self._clients.append(api)
        return api

    def launch(self, job: Any, settings: Any, script: Callable[[FakeCluster], None] | None = None) -> Any:
        """Run the launcher (in this thread) while ``script(self)`` plays the cluster in another thread.

        A failing script sends SIGTERM to stop the launcher and its error is raised; otherwise the launcher's
        result is returned or its exception raised.
        """
        from tfk8s.launcher.kubernetes import run_kubernetes

        errors: list[BaseException] = []
        self.launching = True

        def play() -> None:
            try:
                if script is not None:
                    script(self)
            except BaseException as e:  # noqa: BLE001 - reported to the test below
                errors.append(e)
                os.kill(os.getpid(), signal.SIGTERM)

        thread = threading.Thread(target=play, name="cluster-script", daemon=True)
        thread.start()
        try:
            return run_kubernetes(job, settings, api_client=self.api_client(), log_sink=self._print)
        finally:
            thread.join(10)
            if errors:
                raise ScriptError(f"the cluster script failed: {errors[0]!r}") from errors[0]

    def requests(self) -> list[kmock.Request]:
        """Every request the server received (all of them the launcher's)."""
        return list(self.server._requests)

    def count(self, method: str, kind: str, *, watch: bool | None = None) -> int:
        """How many ``method`` requests on ``kind`` (``pods``, ``jobs``...) the launcher made."""
        n = 0
        for r in self.requests():
            if r.resource == RESOURCES[kind] and r.method.value == method.upper() and r.subresource is None:
                is_watch = r.action == enums.action.WATCH
                if watch is None or watch == is_watch:
                    n += 1
        return n

    # -- inspection ---------------------------------------------------------------------------------------------------
    def objects(self, kind: str) -> list[dict[str, Any]]:
        return self._run(self.server.snapshot())[kind]

    def remaining(self) -> dict[str, list[str]]:
        """Names of the Jobs, pods, Services, NetworkPolicies and PodGroups still present (``{}`` when none)."""
        snap = self._run(self.server.snapshot())
        return {k: sorted(o["metadata"]["name"] for o in snap[k])
                for k in ("jobs", "pods", "services", "networkpolicies", "podgroups") if snap[k]}

    def replica_pod(self, label: str, attempt: int | None = None) -> dict[str, Any] | None:
        rtype, index = label.rsplit("-", 1)
        found = [p for p in self.objects("pods")
                 if p["metadata"]["labels"].get("tfk8s.dev/replica-type") == rtype
                 and p["metadata"]["labels"].get("tfk8s.dev/replica-index") == index
                 and (attempt is None or p["metadata"]["labels"].get("tfk8s.dev/attempt") == str(attempt))]
        return max(found, key=lambda p: int(p["metadata"]["labels"]["tfk8s.dev/attempt"])) if found else None

    def wait_for(self, predicate: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
        """Wait until ``predicate()`` is truthy (re-checked on every change in the server); return it."""
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                version = self._version
            value = predicate()
            if value:
                return value
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; objects: {self.remaining()}")
            with self._cond:
                self._cond.wait_for(lambda v=version: self._version != v, min(remaining, 1.0))

    def wait_pods(self, *labels: str, attempt: int = 0) -> dict[str, dict[str, Any]]:
        """Wait until every replica in ``labels`` has a pod of ``attempt`` and a launcher (:meth:`launch`) watches
        the pods (its watch opens after its first list: a pod the script deletes before that list would never be
        seen, where a real Job controller would replace it); return them by label."""
        def all_there() -> dict[str, dict[str, Any]] | None:
            pods = {label: self.replica_pod(label, attempt) for label in labels}
            watching = not self.launching or self.count("GET", "pods", watch=True)
            return pods if all(pods.values()) and watching else None

        return self.wait_for(all_there, f"pods of {labels} (attempt {attempt})")

    def wait_deleted(self, label: str, attempt: int) -> None:
        self.wait_for(lambda: self.replica_pod(label, attempt) is None, f"{label} attempt {attempt} deleted")

    # -- kubelet and Job controller -------------------------------------------------------------------------------------
    def _pod_name(self, label: str) -> str:
        pod = self.replica_pod(label)
        assert pod is not None, f"no pod for {label}"
        return pod["metadata"]["name"]

    def _patch_pod(self, label: str, status: dict[str, Any], spec: dict[str, Any] | None = None) -> str:
        name = self._pod_name(label)
        changes: dict[str, Any] = {"status": status}
        if spec:
            changes["spec"] = spec
        self._run(self.server.patch(PODS, self.namespace, name, changes))
        return name

    def _patch_job(self, label_or_pod: str | dict[str, Any], status: dict[str, Any]) -> None:
        pod = self.replica_pod(label_or_pod) if isinstance(label_or_pod, str) else label_or_pod
        assert pod is not None
        # The Job controller updates the Job after the pod: a launcher that saw the pod's status first may have
        # finished and deleted the Job by then, as on a real cluster.
        self._run(self.server.patch(JOBS, self.namespace, pod["metadata"]["labels"]["job-name"], {"status": status},
                                    missing_ok=True))

    @staticmethod
    def _container(state: dict[str, Any], ready: bool = False) -> list[dict[str, Any]]:
        return [{"name": "tensorflow", "ready": ready, "restartCount": 0, "image": "img", "imageID": "",
                 "state": state}]

    def run(self, *labels: str) -> None:
        """Schedule and start the replicas' pods (all current pods if no label is given)."""
        if not labels:
            labels = tuple(sorted({f"{p['metadata']['labels']['tfk8s.dev/replica-type']}-"
                                   f"{p['metadata']['labels']['tfk8s.dev/replica-index']}"
                                   for p in self.objects("pods")}))
        for label in labels:
            self._patch_pod(label, {
                "phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"},
                                                   {"type": "Ready", "status": "True"}],
                "containerStatuses": self._container({"running": {"startedAt": _now()}}, ready=True),
            }, spec={"nodeName": "node-1"})

    def log(self, label: str, *lines: str) -> None:
        """The replica's program prints ``lines``."""
        name = self._pod_name(label)

        async def append() -> None:
            self.server.logs.setdefault(name, []).extend(lines)
            await self.server.notify()

        self._run(append())

    def _terminate(self, label: str, exit_code: int, reason: str, message: str = "",
                   pod_status: dict[str, Any] | None = None) -> None:
        term = {"exitCode": exit_code, "reason": reason, "startedAt": _now(), "finishedAt": _now()}
        if message:
            term["message"] = message
        phase = "Succeeded" if exit_code == 0 and not pod_status else "Failed"
        pod = self.replica_pod(label)  # before its status changes: the launcher may delete it right after
        assert pod is not None, f"no pod for {label}"
        self._patch_pod(label, {"phase": phase, "containerStatuses": self._container({"terminated": term}),
                                **(pod_status or {})})
        if phase == "Succeeded":
            self._patch_job(pod, {"active": 0, "succeeded": 1, "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]})
        else:
            self._patch_job(pod, {"active": 0, "failed": 1, "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit"}]})

    def succeed(self, label: str) -> None:
        self._terminate(label, 0, "Completed")

    def fail(self, label: str, exit_code: int = 1, reason: str = "Error", message: str = "") -> None:
        self._terminate(label, exit_code, reason, message)

    def oom(self, label: str) -> None:
        self._terminate(label, 137, "OOMKilled")

    def evict(self, label: str, message: str = "The node was low on resource: memory.") -> None:
        """The kubelet evicts the pod (``message``: its eviction message; the default blames the node)."""
        self._terminate(label, 137, "Error", pod_status={"reason": "Evicted", "message": message})

    def preempt(self, label: str) -> None:
        self._terminate(label, 143, "Error", pod_status={"conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
             "message": "Preempted in order to admit critical pod"}]})

    def suspend(self, label: str, deletion_first: bool = False) -> None:
        """Kueue takes the admission of the replica's Job back (a higher-priority workload): the Job is suspended
        and the Job controller deletes its running pod. With ``deletion_first`` the launcher's pod watch sees the
        pod deleted before its Job watch sees the Job suspended (stored first all the same, as on a real API
        server: two streams, no order between them)."""
        pod = self.replica_pod(label)
        assert pod is not None, f"no pod for {label}"
        job = pod["metadata"]["labels"]["job-name"]
        self._run(self.server.patch(JOBS, self.namespace, job, {"spec": {"suspend": True}, "status": {
            "active": 0, "conditions": [{"type": "Suspended", "status": "True", "reason": "JobSuspended"}]}},
            quiet=deletion_first))
        self._run(self.server.remove(PODS, self.namespace, pod["metadata"]["name"]))
        if deletion_first:
            time.sleep(0.5)  # the launcher has the deletion and not the Job's update
            self._run(self.server.announce(JOBS, self.namespace, job))

    def held_jobs(self) -> list[str]:
        """The names of the Jobs Kueue holds (suspended, no pod)."""
        return sorted(j["metadata"]["name"] for j in self.objects("jobs") if (j.get("spec") or {}).get("suspend"))

    def admit(self, job_name: str, pod_first: bool = False) -> None:
        """Kueue admits a held Job: it is unsuspended and the Job controller creates its pod. With ``pod_first``
        the launcher's pod watch sees the pod before its Job watch sees the Job unsuspended (two streams, no
        order between them)."""
        if pod_first:
            job = next(j for j in self.objects("jobs") if j["metadata"]["name"] == job_name)
            self._run(self.server._job_controller({**job, "spec": {**job["spec"], "suspend": False}}, admitted=True))
            self._run(self.server.patch(JOBS, self.namespace, job_name, {"spec": {"suspend": False}}))
            return
        raw = self._run(self.server.patch(JOBS, self.namespace, job_name, {"spec": {"suspend": False}}))
        self._run(self.server._job_controller(raw, admitted=True))

    def waiting(self, label: str, reason: str, message: str) -> None:
        """The kubelet cannot start the container (image pull, container config)."""
        self._patch_pod(label, {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}],
                                "containerStatuses": self._container({"waiting": {"reason": reason,
                                                                                  "message": message}})},
                        spec={"nodeName": "node-1"})

    def unschedulable(self, label: str, message: str) -> None:
        name = self._patch_pod(label, {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]})
        self.add_event("Pod", name, "FailedScheduling", message)

    def delete_pod(self, label: str) -> None:
        """The pod vanishes (node lost, someone deleted it)."""
        self._run(self.server.remove(PODS, self.namespace, self._pod_name(label)))

    def node_lost(self, label: str, finalizer: bool = False) -> str:
        """The replica's node is gone: its pod stays Running but no kubelet will confirm its deletion (only a
        force delete removes it; with ``finalizer``, not even that). Returns the pod's name."""
        name = self._pod_name(label)
        (self.server.finalized_pods if finalizer else self.server.stuck_pods).add(name)
        return name

    def node_not_ready(self, label: str) -> str:
        """The node lifecycle controller's mark on the pods of a node lost (as a real lost node showed it):
        ``Ready`` False with no reason, ``ContainersReady`` still True, the pod Running; and no kubelet will
        confirm its deletion (:meth:`node_lost`). Returns the pod's name."""
        name = self.node_lost(label)
        self._patch_pod(label, {"phase": "Running", "conditions": [
            {"type": "PodScheduled", "status": "True"}, {"type": "ContainersReady", "status": "True"},
            {"type": "Ready", "status": "False"}]})
        return name

    def add_event(self, kind: str, name: str, reason: str, message: str, etype: str = "Warning") -> None:
        self._run(self.server.event(kind, name, self.namespace, reason, message, etype))

    def local_queue(self, name: str, active: bool = True, reason: str = "", message: str = "") -> None:
        """A Kueue LocalQueue in the namespace (``active`` False: its ``Active`` condition False)."""
        self._kueue_create("localqueues", {
            "kind": "LocalQueue", "metadata": {"name": name, "namespace": NAMESPACE}, "spec": {"clusterQueue": "cq"},
            "status": {"conditions": [{"type": "Active", "status": str(active), "reason": reason or (
                "Ready" if active else "ClusterQueueIsInactive"), "message": message}]}})

    def workload(self, job_name: str, reason: str, message: str, job_uid: str | None = None) -> None:
        """Kueue's Workload of Job ``job_name``, not admitted (``QuotaReserved`` False with reason, message), owned
        by that Job's uid (``job_uid``: another's, e.g. a deleted Job of the same name)."""
        if job_uid is None:
            job_uid = next(j["metadata"]["uid"] for j in self.objects("jobs") if j["metadata"]["name"] == job_name)
        self._kueue_create("workloads", {
            "kind": "Workload", "metadata": {"name": f"job-{job_name}-{job_uid[:5]}", "namespace": NAMESPACE,
                                             "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                                                  "name": job_name, "uid": job_uid,
                                                                  "controller": True}]},
            "spec": {"queueName": "team-a"},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": reason,
                                       "message": message}]}})

    def delete_workloads(self, job_name: str) -> None:
        """Delete the Workloads owned by a Job named ``job_name`` (the garbage collector after the Job's deletion)."""
        async def owned() -> list[tuple[Any, str]]:
            async with self.server._lock:
                return [(res, name) for (res, _, name), obj in self.server._objects.items()
                        if res.group == "kueue.x-k8s.io" and res.plural == "workloads" and not obj.deleted
                        and any(o.get("name") == job_name for o in obj.raw["metadata"].get("ownerReferences") or [])]

        for resource, name in self._run(owned()):
            self._run(self.server.remove(resource, self.namespace, name))

    def deny_pods(self, job_name: str, message: str) -> None:
        """The Job controller cannot create the Job's pod (e.g. quota exceeded): a FailedCreate event."""
        self.server.deny_pods[job_name] = message

    def close_watches(self, kind: str) -> None:
        """End the open watches of ``kind`` as a server-side timeout would."""
        self._run(self.server._buses[RESOURCES[kind]].put({"type": _CLOSE}))

    def expire_watches(self, kind: str) -> int:
        """Compact history (every resourceVersion so far becomes too old) and end the open watches of
        ``kind``: a watch resumed from an old version gets ``410 Gone``. Returns the oldest valid version."""
        async def expire() -> int:
            self.server.rv += 1
            self.server.compacted_rv = self.server.rv
            await self.server._buses[RESOURCES[kind]].put({"type": _CLOSE})
            return self.server.compacted_rv

        return self._run(expire())

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create an object directly (as a previous launcher would have); Jobs get their pod."""
        resource = {r: k for k, r in KINDS.items()}[manifest["kind"]]
        raw = self._run(self.server.put(resource, copy.deepcopy(manifest)))
        if resource == JOBS:
            self._run(self.server._job_controller(raw))
        return raw

    def close(self) -> None:
        for api in self._clients:
            api.close()


@contextlib.contextmanager
def running_cluster(namespace: str = NAMESPACE) -> Iterator[FakeCluster]:
    """Start the fake API server in its own thread and event loop; stop it afterwards.

    On exit, asserts that the server raised no unexpected (non-Kubernetes) errors.
    """
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def serve() -> None:
        stop = asyncio.Event()
        async with FakeApiServer() as server, kmock.Server(server) as srv:
            for resource, kind in KINDS.items():
                server.resources[resource] = kmock.ResourceInfo(kind=kind, namespaced=True)
            state.update(server=server, url=str(srv.url), stop=stop)
            ready.set()
            await stop.wait()
            state["errors"] = [e for e in server.errors if not isinstance(e, kmock.KubernetesError)]
            await server.close_streams()

    thread = threading.Thread(target=lambda: loop.run_until_complete(serve()), name="kmock", daemon=True)
    thread.start()
    assert ready.wait(10), "the fake API server did not start"
    cluster = FakeCluster(state["server"], loop, state["url"], namespace)
    try:
        yield cluster
    finally:
        cluster.close()
        loop.call_soon_threadsafe(state["stop"].set)
        thread.join(15)
        loop.close()
    assert not state.get("errors"), f"the fake API server failed: {state.get('errors')}"


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    """A fresh fake cluster (API server + test-driven Job controller and kubelet) per test."""
    with running_cluster() as c:
        yield c

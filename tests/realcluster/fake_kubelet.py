"""A fake kubelet for the real control plane's fake nodes (:mod:`tests.realcluster.controlplane`): the pods' lifecycle.

KWOK keeps the nodes Ready; this plays what a kubelet does to the pods bound to them, writing pod status and
events through the real API server as a kubelet would:

- a pod bound to a node starts: ``Running``, its ``tensorflow`` container running, ``Ready`` (unless the
  test's :attr:`FakeKubelet.hold` says to keep it ``ContainerCreating``), and the kubelet 1.37's events
  ``Pulled`` ("already present on machine"), ``Created``, ``Started`` ("Container started");
- an image under ``unpullable.invalid/`` cannot be pulled: ``ErrImagePull`` with containerd 2's words, and the
  kubelet's events ``Pulling``, ``Failed`` ("Failed to pull image ..."), ``Failed`` ("Error: ErrImagePull");
- the test ends a container: :meth:`FakeKubelet.terminate` (exit code, reason such as ``OOMKilled``,
  termination message), phase ``Succeeded`` or ``Failed`` (``restartPolicy: Never``);
- a pod being deleted (graceful deletion): a ``Killing`` event ("Stopping container tensorflow") and SIGTERM.
  With ``shareProcessNamespace`` (what the launcher's pods have) the program is not its PID namespace's init
  and SIGTERM ends it at once: exit 143. Without, the program is PID 1, and the kernel drops a signal of
  default disposition sent to a PID namespace's init (a ``python`` without a SIGTERM handler): it runs on until
  the grace period ends, then the SIGKILL gives 137. Then the pod turns ``Failed`` and the kubelet removes it (a
  delete with grace period 0), as the real kubelet's status manager (a real node showed both, ``make test-e2e``);
- ``GET /containerLogs/<ns>/<pod>/<container>`` (``follow``, ``tailLines``) on an HTTPS port of 127.0.0.1
  serves the lines the test wrote with :meth:`FakeKubelet.log`: the API server's ``pods/log`` reaches it
  because the nodes' InternalIP is 127.0.0.1 and their kubelet port is this one. For a container that has not
  started (held ``ContainerCreating``, an image that cannot be pulled) it answers 400 ``container "tensorflow"
  in pod "<pod>" is waiting to start: <reason>``, as the real kubelet does (the API server passes it on).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import ssl
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

UNPULLABLE_PREFIX = "unpullable.invalid/"
CONTAINER = "tensorflow"


def now() -> str:
    """The current time as Kubernetes writes it (RFC 3339, seconds, UTC)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeKubelet:
    """The kubelet of every fake node. See the module docstring.

    Args:
        api_client_factory: returns a new admin ``kubernetes.client.ApiClient``.
        cert_file, key_file: the HTTPS serving certificate (signed by the cluster CA: the API server checks it).
        port: the 127.0.0.1 port of the log endpoint.
    """

    def __init__(self, api_client_factory: Callable[[], Any], cert_file: str, key_file: str, port: int):
        from kubernetes import client

        self._factory = api_client_factory
        self._api = api_client_factory()
        self.core = client.CoreV1Api(self._api)
        self.port = port
        self._lock = threading.Condition()
        self._logs: dict[tuple[str, str], list[str]] = {}
        self._done: set[tuple[str, str]] = set()  # containers terminated: a followed log ends
        self._started: set[str] = set()  # pod uids this kubelet started (or failed to)
        self._killed: set[str] = set()  # pod uids it stopped on deletion
        self._waiting: dict[tuple[str, str], str] = {}  # (namespace, pod) not started -> why, for the log 400
        self._timers: list[threading.Timer] = []  # SIGKILLs at the end of grace periods
        self.hold: Callable[[dict[str, Any]], bool] = lambda pod: False  # keep a pod ContainerCreating
        self._stop = threading.Event()
        self._watch: Any = None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert_file, key_file)
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self._threads = [threading.Thread(target=self._server.serve_forever, name="kubelet-http", daemon=True),
                         threading.Thread(target=self._run, name="kubelet-pods", daemon=True)]

    def start(self) -> None:
        """Serve logs and start playing the pods."""
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """Stop serving and watching."""
        self._stop.set()
        for timer in self._timers:
            timer.cancel()
        with self._lock:
            self._lock.notify_all()
        if self._watch is not None:
            self._watch.stop()
        self._server.shutdown()
        self._server.server_close()
        for t in self._threads:
            t.join(10)
        self._api.close()

    # -- what a test does ------------------------------------------------------------------------------------------
    def log(self, namespace: str, pod: str, *lines: str) -> None:
        """The pod's program prints ``lines``."""
        with self._lock:
            self._logs.setdefault((namespace, pod), []).extend(lines)
            self._lock.notify_all()

    def terminate(self, pod: dict[str, Any], exit_code: int, reason: str = "", message: str = "") -> None:
        """The pod's container exits with ``exit_code`` (reason: ``Completed``/``Error`` unless given, e.g.
        ``OOMKilled``; ``message``: its termination message)."""
        meta = pod["metadata"]
        reason = reason or ("Completed" if exit_code == 0 else "Error")
        term = {"exitCode": exit_code, "reason": reason, "startedAt": self._started_at(pod), "finishedAt": now(),
                "containerID": f"containerd://{meta['uid'][:12]}"}
        if message:
            term["message"] = message
        phase = "Succeeded" if exit_code == 0 else "Failed"
        self._patch_status(pod, {
            "phase": phase,
            "conditions": [{"type": t, "status": "False", "reason": "PodCompleted" if phase == "Succeeded"
                            else "PodFailed", "lastTransitionTime": now()} for t in ("Ready", "ContainersReady")],
            "containerStatuses": [self._container(pod, {"terminated": term})],
        })
        with self._lock:
            self._done.add((meta["namespace"], meta["name"]))
            self._lock.notify_all()

    # -- the pods ------------------------------------------------------------------------------------------------------
    def _run(self) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    pods = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=")
                    rv = pods.metadata.resource_version
                    for p in pods.items:
                        self._sync(self._api.sanitize_for_serialization(p))
                self._watch = watch.Watch()
                for event in self._watch.stream(self.core.list_pod_for_all_namespaces, field_selector="spec.nodeName!=",
                                                resource_version=rv, timeout_seconds=5,
                                                allow_watch_bookmarks=True):
                    if self._stop.is_set():
                        return
                    obj = event["raw_object"]
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._sync(obj)
            except ApiException as e:
                if e.status == 410:
                    rv = ""
                elif not self._stop.is_set():
                    time.sleep(0.5)
            except Exception:  # noqa: BLE001 - a broken stream: resume
                if not self._stop.is_set():
                    time.sleep(0.5)

    def _sync(self, pod: dict[str, Any]) -> None:
        meta, status = pod["metadata"], pod.get("status") or {}
        uid, phase = meta["uid"], status.get("phase")
        if meta.get("deletionTimestamp"):
            if uid in self._killed:
                return
            self._killed.add(uid)
            if phase in ("Succeeded", "Failed"):
                self._remove(pod)
                return
            self._event(pod, "Normal", "Killing", f"Stopping container {CONTAINER}")
            if (pod.get("spec") or {}).get("shareProcessNamespace"):  # SIGTERM reaches the program: 143
                with contextlib.suppress(Exception):
                    self.terminate(pod, 143, "Error")
                self._remove(pod)
                return
            # the program is PID 1 and ignores SIGTERM: the SIGKILL at the end of the grace period, 137
            grace = meta.get("deletionGracePeriodSeconds")
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30) if grace is None else grace

            def sigkill() -> None:
                with contextlib.suppress(Exception):
                    self.terminate(pod, 137, "Error")
                self._remove(pod)

            timer = threading.Timer(float(grace), sigkill)
            timer.daemon = True
            self._timers.append(timer)
            timer.start()
            return
        if uid in self._started or phase in ("Succeeded", "Failed"):
            return
        image = pod["spec"]["containers"][0]["image"]
        key = (meta["namespace"], meta["name"])
        if image.startswith(UNPULLABLE_PREFIX):
            self._started.add(uid)
            self._waiting[key] = "trying and failing to pull image"
            registry, _, rest = image.partition("/")
            repo, _, tag = rest.rpartition(":")
            why = (f'failed to pull and unpack image "{image}": failed to resolve image: failed to do request: '
                   f'Head "https://{registry}/v2/{repo}/manifests/{tag}": dial tcp: lookup {registry}: no such host')
            self._event(pod, "Normal", "Pulling", f'Pulling image "{image}"')
            self._patch_status(pod, {"phase": "Pending", "hostIP": "127.0.0.1", "startTime": now(),
                                     "containerStatuses": [self._container(pod, {"waiting": {
                                         "reason": "ErrImagePull", "message": why}})]})
            self._event(pod, "Warning", "Failed", f'Failed to pull image "{image}": {why}')
            self._event(pod, "Warning", "Failed", "Error: ErrImagePull")
            return
        if self.hold(pod):
            self._waiting[key] = "ContainerCreating"
            if not status.get("containerStatuses"):
                self._patch_status(pod, {"phase": "Pending", "hostIP": "127.0.0.1", "startTime": now(),
                                         "containerStatuses": [self._container(pod, {"waiting": {
                                             "reason": "ContainerCreating"}})]})
            return
        self._started.add(uid)
        self._waiting.pop(key, None)
        started = now()
        ip = f"10.244.{(hash(uid) >> 8) % 250 + 1}.{hash(uid) % 250 + 1}"  # never contacted: data only
        self._patch_status(pod, {
            "phase": "Running", "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}], "podIP": ip,
            "podIPs": [{"ip": ip}], "startTime": started,
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": started}
                           for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")],
            "containerStatuses": [self._container(pod, {"running": {"startedAt": started}}, ready=True)],
        })
        self._event(pod, "Normal", "Pulled", f'Container image "{image}" already present on machine and can be '
                                              "accessed by the pod")
        self._event(pod, "Normal", "Created", "Container created")
        self._event(pod, "Normal", "Started", "Container started")

    def _remove(self, pod: dict[str, Any]) -> None:
        """What the kubelet's status manager does once a deleted pod's containers are gone: the final delete."""
        from kubernetes import client

        meta = pod["metadata"]
        with contextlib.suppress(Exception):
            self.core.delete_namespaced_pod(meta["name"], meta["namespace"], grace_period_seconds=0,
                                            body=client.V1DeleteOptions(
                                                grace_period_seconds=0,
                                                preconditions=client.V1Preconditions(uid=meta["uid"])))

    @staticmethod
    def _started_at(pod: dict[str, Any]) -> str:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            running = (cs.get("state") or {}).get("running")
            if running:
                return running["startedAt"]
        return now()

    @staticmethod
    def _container(pod: dict[str, Any], state: dict[str, Any], ready: bool = False) -> dict[str, Any]:
        c = pod["spec"]["containers"][0]
        return {"name": c["name"], "image": c["image"], "imageID": "", "ready": ready, "restartCount": 0,
                "started": "running" in state, "state": state}

    def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        meta = pod["metadata"]
        self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": status})

    def _event(self, pod: dict[str, Any], etype: str, reason: str, message: str) -> None:
        meta = pod["metadata"]
        t = now()
        body = {"metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"]},
                "involvedObject": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"],
                                   "namespace": meta["namespace"], "uid": meta["uid"],
                                   "fieldPath": f"spec.containers{{{CONTAINER}}}"},
                "reason": reason, "message": message, "type": etype, "count": 1,
                "source": {"component": "kubelet", "host": pod["spec"].get("nodeName", "")},
                "firstTimestamp": t, "lastTimestamp": t, "reportingComponent": "kubelet",
                "reportingInstance": pod["spec"].get("nodeName", "")}
        with contextlib.suppress(Exception):
            self.core.create_namespaced_event(meta["namespace"], body)

    # -- the log endpoint ------------------------------------------------------------------------------------------
    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        kubelet = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) != 4 or parts[0] != "containerLogs":
                    self.send_error(404, "only /containerLogs/<namespace>/<pod>/<container> is served")
                    return
                query = urllib.parse.parse_qs(url.query)
                follow = query.get("follow", ["false"])[0] == "true"
                tail = query.get("tailLines", [""])[0]
                key = (parts[1], parts[2])
                with kubelet._lock:
                    waiting = kubelet._waiting.get(key)
                if waiting:  # the real kubelet's answer for a container that has not started
                    body = f'container "{parts[3]}" in pod "{parts[2]}" is waiting to start: {waiting}'.encode()
                    self.send_response(400)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                with kubelet._lock:
                    lines = kubelet._logs.get(key, [])
                    sent = max(0, len(lines) - int(tail)) if tail else 0
                try:
                    while True:
                        with kubelet._lock:
                            lines = list(kubelet._logs.get(key, []))
                            done = key in kubelet._done
                        if sent < len(lines):
                            self.wfile.write("".join(f"{line}\n" for line in lines[sent:]).encode())
                            self.wfile.flush()
                            sent = len(lines)
                        if not follow or done or kubelet._stop.is_set():
                            return
                        with kubelet._lock:
                            kubelet._lock.wait(0.5)
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
                    return

        return Handler


def dump(obj: Any) -> str:
    """``obj`` as compact JSON (for assertion messages)."""
    return json.dumps(obj, default=str, sort_keys=True)[:2000]

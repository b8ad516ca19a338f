"""A real Kueue (``sigs.k8s.io/kueue``, the version ``hack/kueue/build.sh`` pins) on a running control plane.

:func:`running_kueue` takes the admin kubeconfig of any control plane (``make test-cluster``'s
:class:`~tests.realcluster.controlplane.ControlPlane`, or the real node of ``make test-e2e``) and:

1. installs Kueue's own CRDs (``config/components/crd/bases`` of the module), those that Kueue's kustomization gives a
   conversion webhook (``v1beta1`` <-> ``v1beta2``) pointed at the manager, ``clientConfig.url``
   ``https://127.0.0.1:PORT/convert``; it refuses a cluster that already has any of them (someone else's Kueue);
2. starts the manager binary as a host process with its own configuration: internal certificate management off,
   leader election off, only the ``batch/job`` integration, the webhook server on a free 127.0.0.1 port with a
   certificate made here (for ``127.0.0.1``), metrics and health probes on free ports, the visibility server off;
3. waits until the garbage collector watches Workloads (a probe, :meth:`KueueServer.wait_gc_probe`);
   once Kueue is ready, creates the module's Mutating/ValidatingWebhookConfigurations (renamed ``tfk8s-test-kueue-*``)
   with each ``clientConfig`` rewritten to ``url: https://127.0.0.1:PORT/<path>`` and the CA bundle, keeping only the
   webhooks of Kueue's own objects and of ``batch`` Jobs (those of Deployments, pods, StatefulSets, JobSets...
   would put every pod of the cluster behind this test process with ``failurePolicy: Fail``);
4. afterwards (also on a failure or an interrupt) deletes the webhook configurations, every Kueue object (Kueue
   still running, so its finalizers are honoured; any left after that lose their finalizers), the CRDs, and stops
   the process by its pid.

Kueue 0.17 with internal certificate management off reads the metrics server's certificate from the fixed folder
``/etc/kueue/metrics/certs`` (``cmd/kueue/main.go``; a Kubernetes deployment mounts a Secret there) and exits
without it. Nothing is written to the machine's ``/etc``: the manager runs in a mount namespace of its own
(``unshare``; a user namespace too unless run as root) whose ``/etc`` is an overlay of the machine's with that
folder added from the work directory; the namespace ends with the process.

:meth:`KueueServer.queue` creates a ResourceFlavor (once), a ClusterQueue with a cpu/memory quota and a LocalQueue
in a namespace, the three objects a job needs to be admitted.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.realcluster.controlplane import REPO, _die_with_parent, free_port

BUILD_SCRIPT = REPO / "hack" / "kueue" / "build.sh"
SKIP_REASON = "the Kueue tests need Kueue's manager binary: run hack/kueue/build.sh"
GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
WEBHOOK_PREFIX = "tfk8s-test-kueue"
KEPT_WEBHOOK_GROUPS = {GROUP, "batch"}
FLAVOR = "tfk8s-default"
# Kueue's objects the teardown deletes, the namespaced ones first (a ClusterQueue in use keeps its finalizer).
KINDS = ("workloads", "localqueues", "clusterqueues", "resourceflavors")


def kueue_dir() -> Path | None:
    """The folder of a complete Kueue build (``hack/kueue/build.sh --dir``, or ``$TFK8S_KUEUE_DIR``), or None."""
    env_dir = os.environ.get("TFK8S_KUEUE_DIR")
    if env_dir:
        d = Path(env_dir)
    else:
        try:
            out = subprocess.run(["bash", str(BUILD_SCRIPT), "--dir"], check=True, capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError):
            return None
        d = Path(out.stdout.strip())
    ok = os.access(d / "kueue", os.X_OK) and (d / ".complete").is_file() and any((d / "crd").glob("*.yaml"))
    return d if ok else None


def skip_reason() -> str | None:
    """Why the Kueue tests cannot run here (one line), or None: the binary not built, or no ``unshare``."""
    if kueue_dir() is None:
        return SKIP_REASON
    if shutil.which("unshare") is None:
        return "the Kueue tests need unshare (util-linux) to give Kueue its metrics certificate folder"
    return None


def _self_signed(root: Path) -> bytes:
    """Write ``root/tls.crt`` and ``root/tls.key``: a self-signed serving certificate for 127.0.0.1 (also its own
    CA); return the certificate's PEM (the CA bundle)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    root.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tfk8s-test-kueue-webhook")])
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(key, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (root / "tls.crt").write_bytes(pem)
    (root / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()))
    return pem


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@dataclass
class KueueServer:
    """A running Kueue manager: its pid, ports, work folder, and the objects this fixture created.

    ``admin`` is a ``kubernetes.client.ApiClient`` of the kubeconfig it was started with.
    """

    dir: Path
    work: Path
    admin: Any
    webhook_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    ca_bundle: bytes = b""
    popen: subprocess.Popen | None = None
    crds: list[str] = field(default_factory=list)
    webhooks: list[tuple[str, str]] = field(default_factory=list)  # (kind, name)
    timings: dict[str, float] = field(default_factory=dict)
    job_namespace_selector: dict[str, Any] | None = None
    """The ``namespaceSelector`` of the batch Jobs' webhooks (None: every namespace, as the module's manifests).
    ``make test-e2e`` scopes them to its queue-holding namespaces: the other tests' Jobs then never wait on this
    process (the webhooks' ``failurePolicy`` is ``Fail``)."""

    # -- clients --------------------------------------------------------------------------------------------------
    @property
    def custom(self) -> Any:
        """``CustomObjectsApi`` as the admin."""
        from kubernetes import client

        return client.CustomObjectsApi(self.admin)

    @property
    def pid(self) -> int:
        """The manager's process id (``unshare`` execs into it: the same process)."""
        assert self.popen is not None
        return self.popen.pid

    def log(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the manager's log (for failure messages)."""
        p = self.work / "kueue.log"
        return "\n".join(p.read_text(errors="replace").splitlines()[-lines:]) if p.exists() else ""

    # -- set-up -------------------------------------------------------------------------------------------------------
    def _conversion_crds(self) -> set[str]:
        return {d["metadata"]["name"] for p in sorted((self.dir / "crd-conversion").glob("*.yaml"))
                for d in _documents(p)}

    def install_crds(self) -> None:
        """Create Kueue's CRDs (refusing a cluster that has any of them), the conversion webhook of those Kueue
        converts pointed at 127.0.0.1; wait until each is Established."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        ext = client.ApiextensionsV1Api(self.admin)
        docs = [d for p in sorted((self.dir / "crd").glob("*.yaml")) for d in _documents(p)]
        present = {c.metadata.name for c in ext.list_custom_resource_definition().items} & {
            d["metadata"]["name"] for d in docs}
        if present:
            raise RuntimeError(f"Kueue's CRDs are installed on this cluster already ({', '.join(sorted(present))}): "
                               f"another Kueue runs there; not touching it")
        converted = self._conversion_crds()
        for doc in docs:
            name = doc["metadata"]["name"]
            if name in converted:
                doc["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                    "clientConfig": self._client_config("/convert"), "conversionReviewVersions": ["v1"]}}
            try:
                ext.create_custom_resource_definition(doc, _preload_content=False)
            except ApiException as e:
                raise RuntimeError(f"creating CRD {name}: {e.status} {e.body}") from None
            self.crds.append(name)

        def established() -> bool:
            for name in self.crds:
                crd = json.loads(ext.read_custom_resource_definition(name, _preload_content=False).data)
                if not any(c["type"] == "Established" and c["status"] == "True"
                           for c in (crd.get("status") or {}).get("conditions") or []):
                    return False
            return True

        _wait(established, "Kueue's CRDs Established", 60)

    def start_gc_probe(self) -> None:
        """A Workload owned by a ConfigMap of ``default``, the ConfigMap deleted at once: see
        :meth:`wait_gc_probe`. Created before Kueue's webhooks exist (no ``queueName``: Kueue leaves it alone)."""
        from kubernetes import client

        core = client.CoreV1Api(self.admin)
        cm = core.create_namespaced_config_map("default", {"metadata": {"name": "tfk8s-test-kueue-gc-probe"}})
        self.custom.create_namespaced_custom_object(GROUP, VERSION, "default", "workloads", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload", "metadata": {
                "name": "tfk8s-test-kueue-gc-probe", "ownerReferences": [{
                    "apiVersion": "v1", "kind": "ConfigMap", "name": cm.metadata.name, "uid": cm.metadata.uid}]},
            "spec": {"podSets": [{"name": "main", "count": 1, "template": {"spec": {
                "containers": [{"name": "c", "image": "probe", "resources": {"requests": {"cpu": "1m"}}}],
                "restartPolicy": "Never"}}}]}})
        core.delete_namespaced_config_map(cm.metadata.name, "default")

    def wait_gc_probe(self, timeout: float = 60.0) -> None:
        """Wait until the garbage collector has deleted the probe Workload, i.e. it watches Workloads. It learns of
        a CRD created after it started only at its next discovery sync (kube-controller-manager: every 30 s,
        fixed), and until then a deleted Job's Workload stays: a restart under Kueue would wait up to 30 s for it,
        where on a cluster whose Kueue was installed before it takes about a second."""
        from kubernetes.client.exceptions import ApiException

        def gone() -> bool:
            try:
                self.custom.get_namespaced_custom_object(GROUP, VERSION, "default", "workloads",
                                                         "tfk8s-test-kueue-gc-probe")
            except ApiException as e:
                if e.status == 404:
                    return True
                raise
            return False

        _wait(gone, "the garbage collector deleting the probe Workload (it watches Workloads)", timeout)

    def _client_config(self, path: str) -> dict[str, Any]:
        return {"url": f"https://127.0.0.1:{self.webhook_port}{path}",
                "caBundle": base64.b64encode(self.ca_bundle).decode()}

    def config(self) -> Path:
        """Write the manager's configuration file (``config.kueue.x-k8s.io/v1beta2``) and return its path."""
        cfg = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": f"127.0.0.1:{self.metrics_port}"},
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port, "certDir": str(self.work / "webhook-certs")},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": ["batch/job"]},
        }
        path = self.work / "kueue-config.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    def start(self, kubeconfig: Path) -> None:
        """Start the manager (its own mount namespace, see the module's docstring) and wait until ``/readyz``
        answers 200 and its webhook server accepts connections."""
        self.ca_bundle = _self_signed(self.work / "webhook-certs")
        # The overlay's upper layer: etc/kueue/metrics/certs/tls.{crt,key}, the folder Kueue reads (fixed path).
        upper, scratch = self.work / "etc-upper", self.work / "etc-work"
        metrics_certs = upper / "kueue" / "metrics" / "certs"
        metrics_certs.mkdir(parents=True, exist_ok=True)
        scratch.mkdir(exist_ok=True)
        for f in ("tls.crt", "tls.key"):
            (metrics_certs / f).write_bytes((self.work / "webhook-certs" / f).read_bytes())
        config = self.config()
        # unshare execs sh, which mounts the overlay and execs the manager: one process, whose pid Popen has.
        # As root a mount namespace is enough (and keeps PR_SET_PDEATHSIG); otherwise a user namespace maps us root.
        unshare = ["unshare", "--mount", "--propagation", "private"]
        if os.geteuid() != 0:
            unshare.append("--map-root-user")
        script = (f'mount -t overlay tfk8s-kueue-etc -o "lowerdir=/etc,upperdir={upper},workdir={scratch}" /etc '
                  f'&& exec "$0" "$@"')
        argv = [*unshare, "sh", "-c", script, str(self.dir / "kueue"), f"--config={config}",
                f"--kubeconfig={kubeconfig}", "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=2"]
        log = (self.work / "kueue.log").open("wb")
        t0 = time.monotonic()
        self.popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True, env={**os.environ, "KUBECONFIG": str(kubeconfig)},
                                      preexec_fn=_die_with_parent)  # noqa: PLW1509 - only prctl(2) runs before exec
        log.close()

        def ready() -> bool:
            if self.popen is not None and self.popen.poll() is not None:
                raise RuntimeError(f"kueue exited with {self.popen.returncode}:\n{self.log()}")
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as r:
                return r.status == 200

        _wait(ready, "Kueue's /readyz", 90, lambda: self.log())
        self.timings["ready"] = time.monotonic() - t0

    def install_webhooks(self) -> None:
        """Create the module's webhook configurations (Kueue's and batch's webhooks only), pointed at 127.0.0.1."""
        from kubernetes import client

        adm = client.AdmissionregistrationV1Api(self.admin)
        for doc in _documents(self.dir / "webhook.yaml"):
            kind = doc["kind"]
            doc = copy.deepcopy(doc)
            name = f"{WEBHOOK_PREFIX}-{'mutating' if kind.startswith('Mutating') else 'validating'}"
            doc["metadata"] = {"name": name, "labels": {"app.kubernetes.io/managed-by": "tfk8s-tests"}}
            kept = []
            for hook in doc.get("webhooks") or []:
                groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
                if groups and groups <= KEPT_WEBHOOK_GROUPS:
                    hook["clientConfig"] = self._client_config(hook["clientConfig"]["service"]["path"])
                    if groups == {"batch"} and self.job_namespace_selector is not None:
                        hook["namespaceSelector"] = copy.deepcopy(self.job_namespace_selector)
                    kept.append(hook)
            doc["webhooks"] = kept
            create = (adm.create_mutating_webhook_configuration if kind.startswith("Mutating")
                      else adm.create_validating_webhook_configuration)
            create(doc, _preload_content=False)
            self.webhooks.append((kind, name))

        # The webhooks answer (a dry-run ResourceFlavor goes through Kueue's defaulting and validation).
        def answers() -> bool:
            self.custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": "probe"}},
                dry_run="All", _preload_content=False)
            return True

        _wait(answers, "Kueue's webhooks answering", 60, lambda: self.log())

    # -- what a test uses -----------------------------------------------------------------------------------------
    def queue(self, namespace: str, name: str = "q", cpu: str = "4", memory: str = "8Gi",
              cluster_queue: str = "") -> str:
        """Create what admits a job in ``namespace``: the ResourceFlavor :data:`FLAVOR` (once), a ClusterQueue
        (``cluster_queue``, default ``cq-<namespace>``) with a nominal quota of ``cpu`` and ``memory`` for every
        namespace, and the LocalQueue ``name`` in ``namespace`` pointing at it. Returns the ClusterQueue's name.
        The teardown deletes them (also the test's namespace going deletes the LocalQueue)."""
        from kubernetes.client.exceptions import ApiException

        cq = cluster_queue or f"cq-{namespace}"
        try:
            self.custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}})
        except ApiException as e:
            if e.status != 409:
                raise
        self.custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": cq},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{
                "coveredResources": ["cpu", "memory"],
                "flavors": [{"name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": cpu},
                                                           {"name": "memory", "nominalQuota": memory}]}]}]}})
        self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "localqueues", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue", "metadata": {"name": name},
            "spec": {"clusterQueue": cq}})
        _wait(lambda: _condition(self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "localqueues",
                                                                           name), "Active") == "True",
              f"LocalQueue {namespace}/{name} Active", 30, lambda: self.log())
        return cq

    def workloads(self, namespace: str) -> list[dict[str, Any]]:
        """The Workloads of ``namespace`` (``v1beta2``), as the API server's JSON."""
        return self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "workloads")["items"]

    # -- teardown -----------------------------------------------------------------------------------------------------
    def _objects(self, plural: str) -> list[dict[str, Any]]:
        """Every object of ``plural`` in the cluster (a namespaced kind across every namespace)."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self.custom.list_cluster_custom_object(GROUP, VERSION, plural)["items"]
        except ApiException as e:
            if e.status == 404:
                return []
            raise

    def _delete_object(self, plural: str, obj: dict[str, Any], strip: bool = False) -> None:
        from kubernetes.client.exceptions import ApiException

        meta = obj["metadata"]
        ns = meta.get("namespace")
        with contextlib.suppress(ApiException):
            if strip and meta.get("finalizers"):
                patch = {"metadata": {"finalizers": None}}
                if ns:
                    self.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, plural, meta["name"], patch)
                else:
                    self.custom.patch_cluster_custom_object(GROUP, VERSION, plural, meta["name"], patch)
            if ns:
                self.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, plural, meta["name"])
            else:
                self.custom.delete_cluster_custom_object(GROUP, VERSION, plural, meta["name"])

    def delete_objects(self, timeout: float = 60.0) -> list[str]:
        """Delete every Kueue object of the cluster (this fixture's: the CRDs are its own) while Kueue runs, so it
        removes its finalizers; what is left after ``timeout`` s loses its finalizers. Returns those names."""
        for plural in KINDS:
            for obj in self._objects(plural):
                self._delete_object(plural, obj)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(self._objects(p) for p in KINDS):
            time.sleep(0.5)
        stuck = []
        for plural in KINDS:
            for obj in self._objects(plural):
                stuck.append(f"{plural}/{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}")
                self._delete_object(plural, obj, strip=True)
        return stuck

    def delete_webhooks(self) -> None:
        """Delete the webhook configurations this fixture created."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        adm = client.AdmissionregistrationV1Api(self.admin)
        for kind, name in reversed(self.webhooks):
            with contextlib.suppress(ApiException):
                if kind.startswith("Mutating"):
                    adm.delete_mutating_webhook_configuration(name)
                else:
                    adm.delete_validating_webhook_configuration(name)
        self.webhooks.clear()

    def delete_crds(self, timeout: float = 60.0) -> None:
        """Delete the CRDs this fixture created and wait until the API server has removed them."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        ext = client.ApiextensionsV1Api(self.admin)
        for name in self.crds:
            with contextlib.suppress(ApiException):
                ext.delete_custom_resource_definition(name, _preload_content=False)
        left = set(self.crds)

        def gone() -> bool:
            left.intersection_update(c.metadata.name for c in ext.list_custom_resource_definition().items)
            return not left

        _wait(gone, "Kueue's CRDs deleted", timeout)
        self.crds.clear()

    def stop(self) -> int | None:
        """Stop the manager by its pid (SIGTERM, SIGKILL after 10 s); its exit code (None if never started)."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)
        return self.popen.returncode


def _condition(obj: dict[str, Any], ctype: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c.get("status")
    return None


def _wait(predicate: Any, what: str, timeout: float, detail: Any = None) -> Any:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except RuntimeError:
            raise
        except Exception as e:  # noqa: BLE001 - not ready yet: try again
            last = e
        time.sleep(0.2)
    extra = f"\n{detail()}" if detail else ""
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}"
                       + (f" (last error: {last!r})" if last else "") + extra)


@contextlib.contextmanager
def running_kueue(kubeconfig: Path, work: Path, bin_dir: Path | None = None,
                  job_namespace_selector: dict[str, Any] | None = None) -> Iterator[KueueServer]:
    """Kueue on the cluster of ``kubeconfig`` (the module's docstring says what is done and undone); its log and
    files in ``work``; ``job_namespace_selector``: see :attr:`KueueServer.job_namespace_selector`. Raises
    RuntimeError when the binary is not built (:data:`SKIP_REASON`)."""
    from kubernetes import config

    bin_dir = bin_dir or kueue_dir()
    if bin_dir is None:
        raise RuntimeError(SKIP_REASON)
    work.mkdir(parents=True, exist_ok=True)
    server = KueueServer(bin_dir, work, config.new_client_from_config(config_file=str(kubeconfig)),
                         job_namespace_selector=job_namespace_selector)
    try:
        t0 = time.monotonic()
        server.install_crds()
        server.start_gc_probe()
        server.start(kubeconfig)
        server.install_webhooks()
        server.wait_gc_probe()
        server.timings["up"] = time.monotonic() - t0
        yield server
    finally:
        try:
            server.delete_webhooks()
            if server.crds:
                stuck = server.delete_objects(60 if server.popen and server.popen.poll() is None else 5)
                if stuck:
                    print(f"kueue teardown: removed the finalizers of {', '.join(stuck)}")
            server.delete_crds()
        finally:
            server.stop()
            server.admin.close()

"""A real Kubernetes control plane on 127.0.0.1 for the ``cluster`` tests (``make test-cluster``).

Started once per test session from the binaries ``hack/controlplane/build.sh`` builds (cached under
``~/.cache/tfk8s/controlplane/<versions>/``), every process on a free loopback port, nothing as root:

- **etcd** (``--unsafe-no-fsync``: a test cluster's data need not survive a power cut);
- **kube-apiserver** with RBAC authorization, client-certificate authentication (the tests' admin is in
  ``system:masters``), service-account token signing (keys made here), the ResourceQuota admission, and
  the ``GenericWorkload`` feature gate + ``scheduling.k8s.io/v1beta1`` (native gang scheduling: PodGroup);
- **kube-controller-manager** with the Job, TTL-after-finished, garbage-collector, ResourceQuota, namespace,
  service-account (+ token), PersistentVolume binder and PodGroup protection controllers;
- **kube-scheduler** (the default profile, so the gang scheduling plugin is on with the gate);
- **KWOK** managing the fake nodes the fixture creates (their Ready status and heartbeats; only nodes annotated
  ``kwok.x-k8s.io/node=fake``, never the e2e tests' real node of :mod:`tests.realnode.realnode`), at address
  127.0.0.1 with the fake kubelet's port as their kubelet port;
- the **fake kubelet** (:mod:`tests.realcluster.fake_kubelet`) for the pods: KWOK's Stages can set an exit code from an
  annotation, but a test needs to decide each replica's fate per attempt, while it runs, and to serve its log
  through the API server (``pods/log``), which KWOK's Stages cannot.

The API server reaches the fake kubelet (logs) on 127.0.0.1 only: the nodes' InternalIP is 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "hack" / "controlplane" / "build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
SKIP_REASON = "real-cluster tests need `make test-cluster` (Go and the control plane binaries)"
CONTROLLERS = ("job-controller", "ttl-after-finished-controller", "garbage-collector-controller",
               "resourcequota-controller", "namespace-controller", "serviceaccount-controller",
               "serviceaccount-token-controller", "persistentvolume-binder-controller",
               "podgroup-protection-controller", "root-ca-certificate-publisher-controller")
FEATURE_GATES = "GenericWorkload=true"
RUNTIME_CONFIG = "scheduling.k8s.io/v1beta1=true"
SERVICE_CIDR = "10.96.0.0/24"  # make test-cluster: never routed (no kube-proxy); make test-e2e: kube-proxy's
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node=fake"  # the nodes KWOK manages (tests.realcluster.cluster_fixtures.add_node)


def binaries_dir() -> Path | None:
    """The directory with every control-plane binary, or None when they are not built (or no bash)."""
    env_dir = os.environ.get("TFK8S_CONTROLPLANE_DIR")
    if env_dir:
        d = Path(env_dir)
    else:
        try:
            out = subprocess.run(["bash", str(BUILD_SCRIPT), "--dir"], check=True, capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError):
            return None
        d = Path(out.stdout.strip())
    return d if all(os.access(d / b, os.X_OK) for b in BINARIES) else None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- certificates ---------------------------------------------------------------------------------------------------
@dataclass
class Pki:
    """A CA, the API server's and the fake kubelet's serving certificates, the admin's client certificate and
    the service-account signing key pair, as PEM files in ``root``. The CA's key stays here (``issue``), so
    that the e2e node (:mod:`tests.realnode.realnode`) can have its own certificates signed; ``extra_sans`` are more
    names of the API server's certificate (the e2e node's bridge address)."""

    root: Path
    extra_sans: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.x509.oid import NameOID

        self.root.mkdir(parents=True, exist_ok=True)
        self._now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
        self._later = self._now + datetime.timedelta(days=2)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        self._ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tfk8s-test-ca")])
        ca = (x509.CertificateBuilder().subject_name(self._ca_name).issuer_name(self._ca_name)
              .public_key(self._ca_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(self._now).not_valid_after(self._later)
              .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
              .sign(self._ca_key, hashes.SHA256()))
        self.ca = self.root / "ca.crt"
        self.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))

        self.issue("apiserver", "kube-apiserver", sans=("127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                                                        "kubernetes.default.svc", "10.96.0.1", *self.extra_sans),
                   server=True)
        self.issue("kubelet", "fake-kubelet", sans=("127.0.0.1", "localhost"), server=True)
        self.issue("admin", "tfk8s-test-admin", org="system:masters")
        self.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", org="system:masters")
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (self.root / "sa.key").write_bytes(sa.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        (self.root / "sa.pub").write_bytes(sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))

    def issue(self, name: str, cn: str, org: str = "", sans: tuple[str, ...] = (), server: bool = False) -> None:
        """Sign ``<name>.crt`` (+ a new ``<name>.key``) with the CA: CN ``cn``, O ``org``, the IP addresses and
        DNS names ``sans``; a serving certificate if ``server``, else a client one."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        k = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        if org:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
        b = (x509.CertificateBuilder().subject_name(x509.Name(attrs)).issuer_name(self._ca_name)
             .public_key(k.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(self._now).not_valid_after(self._later)
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage(
                 [x509.oid.ExtendedKeyUsageOID.SERVER_AUTH if server
                  else x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if sans:
            names: list[Any] = []
            for s in sans:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(s)))
                except ValueError:
                    names.append(x509.DNSName(s))
            b = b.add_extension(x509.SubjectAlternativeName(names), critical=False)
        (self.root / f"{name}.crt").write_bytes(b.sign(self._ca_key, hashes.SHA256()).public_bytes(
            serialization.Encoding.PEM))
        (self.root / f"{name}.key").write_bytes(k.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))

    def path(self, name: str) -> str:
        """The absolute path of file ``name`` (``ca.crt``, ``admin.key``...)."""
        return str(self.root / name)


# -- processes ------------------------------------------------------------------------------------------------------
def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL when the test process dies (Linux ``PR_SET_PDEATHSIG``), so that
    a killed test run leaves no control plane behind."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen
    log: Path


@dataclass
class ControlPlane:
    """The running control plane: its URL, its PKI, an admin kubeconfig, and its processes.

    Use :func:`running_control_plane`; ``admin_client()`` gives a ``kubernetes.client.ApiClient`` with the
    admin's certificate, ``token_client(token)`` one with a bearer token (a ServiceAccount's).
    """

    bin_dir: Path
    work: Path
    # The e2e node's variant (tests.realnode.realnode): the API server on a bridge address that pods reach through the
    # kubernetes Service (so the lease endpoint reconciler, which refuses a loopback address), more
    # controllers, the Node authorizer and NodeRestriction for a real kubelet.
    address: str = "127.0.0.1"
    extra_controllers: tuple[str, ...] = ()
    node_authorizer: bool = False
    pki: Pki = field(init=False)
    url: str = ""
    kubelet_port: int = 0
    processes: list[_Process] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    # -- clients --------------------------------------------------------------------------------------------------
    def configuration(self, token: str = "") -> Any:
        """A ``kubernetes.client.Configuration`` for the API server: the admin's certificate, or ``token``."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        cfg.ssl_ca_cert = self.pki.path("ca.crt")
        if token:
            cfg.api_key = {"authorization": f"Bearer {token}"}
        else:
            cfg.cert_file, cfg.key_file = self.pki.path("admin.crt"), self.pki.path("admin.key")
        return cfg

    def admin_client(self) -> Any:
        """An ApiClient authenticated as the cluster admin (``system:masters``)."""
        from kubernetes import client

        return client.ApiClient(self.configuration())

    def token_client(self, token: str) -> Any:
        """An ApiClient authenticated with a bearer ``token`` (e.g. a ServiceAccount's, from TokenRequest)."""
        from kubernetes import client

        return client.ApiClient(self.configuration(token))

    def kubeconfig(self) -> Path:
        """A kubeconfig file for the admin (for the controller manager, the scheduler, KWOK and kubectl)."""
        path = self.work / "admin.kubeconfig"
        if not path.exists() or self.url not in path.read_text():
            path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {{server: "{self.url}", certificate-authority: "{self.pki.path('ca.crt')}"}}
users:
- name: admin
  user: {{client-certificate: "{self.pki.path('admin.crt')}", client-key: "{self.pki.path('admin.key')}"}}
contexts:
- name: test
  context: {{cluster: test, user: admin}}
current-context: test
""")
        return path

    # -- processes ------------------------------------------------------------------------------------------------
    def _start(self, name: str, *args: str) -> _Process:
        log = self.work / f"{name}.log"
        popen = subprocess.Popen([str(self.bin_dir / name), *args], stdout=log.open("wb"),
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                 preexec_fn=_die_with_parent)  # noqa: PLW1509 - only prctl(2) runs before exec
        proc = _Process(name, popen, log)
        self.processes.append(proc)
        return proc

    def logs(self, name: str, lines: int = 30) -> str:
        """The last ``lines`` lines of a component's log (for failure messages)."""
        p = self.work / f"{name}.log"
        return "\n".join(p.read_text(errors="replace").splitlines()[-lines:]) if p.exists() else ""

    def _wait(self, what: str, proc: _Process, check: Any, timeout: float = 90.0) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if proc.popen.poll() is not None:
                raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{self.logs(proc.name)}")
            with contextlib.suppress(Exception):
                if check():
                    self.timings[what] = time.monotonic() - t0
                    return
            time.sleep(0.2)
        raise RuntimeError(f"{what} not ready after {timeout:.0f}s:\n{self.logs(proc.name)}")

    def start(self, kubelet_port: int) -> None:
        """Start every component, each once the one it needs is ready."""
        shutil.rmtree(self.work / "etcd", ignore_errors=True)  # a work dir reused: a fresh cluster all the same
        self.pki = Pki(self.work / "pki", extra_sans=(self.address,) if self.address != "127.0.0.1" else ())
        self.kubelet_port = kubelet_port
        client_port, peer_port = free_port(), free_port()
        etcd = self._start(
            "etcd", "--name", "test", "--data-dir", str(self.work / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{client_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"test=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync", "--log-level", "warn")
        self._wait("etcd", etcd, lambda: urllib.request.urlopen(
            f"http://127.0.0.1:{client_port}/health", timeout=2).status == 200)
        port = free_port()
        self.url = f"https://{self.address}:{port}"
        pki = self.pki
        loopback = ipaddress.ip_address(self.address).is_loopback
        apiserver = self._start(
            "kube-apiserver", f"--etcd-servers=http://127.0.0.1:{client_port}",
            f"--bind-address={self.address}", f"--advertise-address={self.address}", f"--secure-port={port}",
            # it refuses a loopback address for the kubernetes Service: no endpoints then
            *(["--endpoint-reconciler-type=none"] if loopback else []),
            *(["--enable-admission-plugins=NodeRestriction"] if self.node_authorizer else []),
            f"--cert-dir={self.work / 'apiserver-certs'}",
            f"--tls-cert-file={pki.path('apiserver.crt')}", f"--tls-private-key-file={pki.path('apiserver.key')}",
            f"--client-ca-file={pki.path('ca.crt')}",
            f"--authorization-mode={'Node,RBAC' if self.node_authorizer else 'RBAC'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki.path('sa.pub')}",
            f"--service-account-signing-key-file={pki.path('sa.key')}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=false",
            f"--kubelet-certificate-authority={pki.path('ca.crt')}",
            f"--kubelet-client-certificate={pki.path('apiserver-kubelet-client.crt')}",
            f"--kubelet-client-key={pki.path('apiserver-kubelet-client.key')}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--feature-gates={FEATURE_GATES}", f"--runtime-config={RUNTIME_CONFIG}",
            "--enable-priority-and-fairness=false", "--profiling=false", "--v=1")
        ctx = ssl.create_default_context(cafile=pki.path("ca.crt"))
        ctx.load_cert_chain(pki.path("admin.crt"), pki.path("admin.key"))
        self._wait("kube-apiserver", apiserver, lambda: urllib.request.urlopen(
            f"{self.url}/readyz", context=ctx, timeout=2).status == 200, timeout=120)
        kubeconfig = str(self.kubeconfig())
        cm = self._start(
            "kube-controller-manager", f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--leader-elect=false",
            f"--controllers={','.join(CONTROLLERS + self.extra_controllers)}",
            f"--service-account-private-key-file={pki.path('sa.key')}",
            f"--root-ca-file={pki.path('ca.crt')}", f"--feature-gates={FEATURE_GATES}",
            f"--cert-dir={self.work / 'cm-certs'}", "--concurrent-job-syncs=10", "--v=1")
        scheduler = self._start(
            "kube-scheduler", f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}", "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}", "--leader-elect=false", f"--feature-gates={FEATURE_GATES}",
            f"--cert-dir={self.work / 'scheduler-certs'}", "--v=1")
        stages = REPO / "tests" / "realcluster" / "kwok" / "node-stages.yaml"
        kwok = self._start(
            # only the fake nodes (tests.realcluster.cluster_fixtures.add_node annotates them), never a real kubelet's node
            "kwok", f"--kubeconfig={kubeconfig}", f"--config={stages}",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}",
            "--node-ip=127.0.0.1", f"--node-port={kubelet_port}", f"--server-address=127.0.0.1:{free_port()}",
            "--cidr=10.244.0.0/16")
        self._wait("default ServiceAccount", cm, lambda: self._has_default_service_account())
        for proc in (scheduler, kwok):
            if proc.popen.poll() is not None:
                raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{self.logs(proc.name)}")

    def _has_default_service_account(self) -> bool:
        from kubernetes import client

        with self.admin_client() as api:
            client.CoreV1Api(api).read_namespaced_service_account("default", "default")
        return True

    def stop(self) -> None:
        """Stop every component (SIGTERM, then SIGKILL after 3 s: nothing of a test cluster needs keeping), the
        last started first."""
        for proc in reversed(self.processes):
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGTERM)
        for proc in reversed(self.processes):
            try:
                proc.popen.wait(3)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait(5)
        self.processes.clear()


@contextlib.contextmanager
def running_control_plane(work: Path, kubelet_port: int, bin_dir: Path | None = None,
                          **options: Any) -> Iterator[ControlPlane]:
    """Start the control plane in ``work`` (logs: ``work/<component>.log``); stop it afterwards. ``options``:
    the e2e variant's :class:`ControlPlane` fields (``address``, ``extra_controllers``, ``node_authorizer``)."""
    bin_dir = bin_dir or binaries_dir()
    if bin_dir is None:
        raise RuntimeError(SKIP_REASON)
    cp = ControlPlane(bin_dir, work, **options)
    try:
        cp.start(kubelet_port)
        yield cp
    finally:
        cp.stop()
        if os.environ.get("TFK8S_KEEP_CONTROLPLANE_LOGS") is None:
            shutil.rmtree(work / "etcd", ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.realcluster.controlplane [--nodes N] [--work DIR]``: start the test control plane with ``N`` fake
    nodes (and the fake kubelet), print the admin kubeconfig's path, and run until Ctrl-C / SIGTERM (for
    kubectl, a benchmark, or a look at a scenario by hand). Build the binaries first: ``make test-cluster``
    or ``hack/controlplane/build.sh``."""
    import argparse
    import tempfile
    import threading

    from kubernetes import client

    from tests.realcluster.cluster_fixtures import NODE_CPU, NODE_MEMORY, _ready, add_node, node_name, wait
    from tests.realcluster.fake_kubelet import FakeKubelet

    parser = argparse.ArgumentParser(prog="python -m tests.realcluster.controlplane", description=main.__doc__)
    parser.add_argument("--nodes", type=int, default=4, help="fake nodes (4 CPU, 16Gi each)")
    parser.add_argument("--work", default="", help="folder for the logs, certificates and etcd's data")
    args = parser.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="tfk8s-controlplane-"))
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with running_control_plane(work, port) as cp:
        kubelet = FakeKubelet(cp.admin_client, cp.pki.path("kubelet.crt"), cp.pki.path("kubelet.key"), port)
        kubelet.start()
        try:
            with cp.admin_client() as api:
                core = client.CoreV1Api(api)
                for i in range(args.nodes):
                    add_node(core, node_name(i), NODE_CPU, NODE_MEMORY)
                wait(lambda: sum(_ready(n) for n in core.list_node().items) == args.nodes, "Ready nodes", 60)
            print(f"control plane at {cp.url} with {args.nodes} nodes; logs in {work}\n"
                  f"export KUBECONFIG={cp.kubeconfig()}\n(Ctrl-C stops it)", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while not stop.wait(1):
                    pass
        finally:
            kubelet.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

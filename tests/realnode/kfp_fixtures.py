"""A real Kubeflow Pipelines 2.17.0 backend on the e2e node (``make test-kfp``), built from a KFP source tree by
``hack/kfp/build.sh`` and deployed with ``hack/kfp/manifests.yaml`` on the cluster of ``make test-e2e`` with its
Argo controller (tests/realnode/argo_fixtures.py).

``kfp_backend`` (session): in namespace ``kubeflow``
  - host processes bound to the node's address (:data:`tests.realnode.realnode.NODE_IP`), as the node's CoreDNS is, each
    behind a Service without a selector: MariaDB 10.11 (Debian's, the API server's database; KFP 2.17.0's API
    server dies on PostgreSQL 15, see hack/kfp/mariadb.sh),
    ``hack/kfp/mlmd_server.py`` (ML Metadata over the PyPI ml-metadata wheel's store: MLMD's C++ server cannot
    be built here) and MinIO (built from the Go module proxy by ``hack/kfp/build.sh``; the S3 server KFP itself
    used until 2.14, a real server with real S3 signatures, and the name KFP's launcher expects, ``seaweedfs``,
    is only the Service's);
  - pods of one-file images (the static binaries, never pulled): the API server, the persistence agent, the
    ScheduledWorkflow controller (its CRD read from the source tree); the driver and launcher in one image with
    a numeric USER, named by the API server's ``V2_DRIVER_IMAGE``/``V2_LAUNCHER_IMAGE``;
  - Argo's executor as tests/realnode/argo_fixtures.py's ``EXECUTOR`` sets it (non-root, ``restricted``, requests
    and limits);
  - the namespace production-shaped (:func:`tests.realnode.e2e_fixtures.production_namespace`, at
    :data:`POD_SECURITY_LEVEL`); KFP's own pods here declare ``restricted`` securityContexts and resources;
  - the project's part, as docs/kfp.md tells a user: ``manifests/rbac.yaml`` with its Role bound to
    ``pipeline-runner``, the PVC ``tfk8s-data`` with MNIST on it.
Everything is removed at the end (the host processes stopped by pid, their folders deleted).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import hmac
import json
import os
import re
import shutil
import socket
import string
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.realcluster.controlplane import REPO
from tests.realnode.argo_fixtures import (
    Argo,
    _apply,
    _wait_for,
    ensure_image,
    prepare_namespace,
    remove_namespace,
)
from tests.realnode.realnode import NODE_IP, write_image

KFP_VERSION = "2.17.0"
BUILD = REPO / "hack" / "kfp" / "build.sh"
MANIFESTS = REPO / "hack" / "kfp" / "manifests.yaml"
NAMESPACE = "kubeflow"
RUN_AS_USER = 1000  # the driver/launcher image's USER (Argo's executor's too, EXECUTOR): KFP's pods set runAsNonRoot
POD_SECURITY_LEVEL = "restricted"
"""The Pod Security level of the namespace of KFP and its runs (production-shaped: a quota and a LimitRange
too): every pod there passes ``restricted``, KFP's drivers and launchers and Argo's executor included
(docs/kubernetes.md, Pod Security)."""
IMAGES = {  # image -> the binaries of hack/kfp/build.sh it holds (the first is the entrypoint)
    f"tfk8s.local/kfp-apiserver:{KFP_VERSION}": ("apiserver",),
    f"tfk8s.local/kfp-persistence-agent:{KFP_VERSION}": ("persistence_agent",),
    f"tfk8s.local/kfp-scheduledworkflow:{KFP_VERSION}": ("scheduledworkflow",),
    f"tfk8s.local/kfp-driver-launcher:{KFP_VERSION}": ("driver", "launcher-v2"),
}
S3_ACCESS_KEY, S3_SECRET_KEY = "tfk8s-kfp", "tfk8s-kfp-secret"


def kfp_dir() -> Path | None:
    """``hack/kfp/build.sh --dir`` when its binaries (and MinIO) are there, else None."""
    d = Path(subprocess.run(["bash", str(BUILD), "--dir"], check=True, capture_output=True, text=True).stdout.strip())
    needed = [b for bins in IMAGES.values() for b in bins] + ["minio"]
    return d if all(os.access(d / b, os.X_OK) for b in needed) else None


def kfp_src() -> Path | None:
    """The KFP source tree hack/kfp/build.sh uses, or None."""
    r = subprocess.run(["bash", str(BUILD), "--src"], check=False, capture_output=True, text=True)
    return Path(r.stdout.strip()) if r.returncode == 0 else None


def free_port() -> int:
    """A TCP port free on the node's address now."""
    with socket.socket() as s:
        s.bind((NODE_IP, 0))
        return s.getsockname()[1]


@dataclass
class HostProcess:
    """A program this fixture started on the host; its log file."""

    name: str
    proc: subprocess.Popen
    log: Path
    port: int = 0
    dir: Path | None = None  # a folder of its own, removed at the end

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@dataclass
class KFPBackend:
    """The backend: its API's URL (the API server pod's HTTP port), the host processes, the object store's
    folder (MinIO's), the project image and the namespace's PVC folder."""

    argo: Argo
    url: str
    work: Path
    s3_dir: Path
    volume: Path
    image: str
    procs: dict[str, HostProcess] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def api(self, path: str, method: str = "GET", body: Any = None, timeout: float = 30) -> Any:
        """``METHOD URL/apis/v2beta1/PATH`` with a JSON body; the JSON answer."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.url}/apis/v2beta1/{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"{}")

    def pod_log(self, name: str, lines: int = 40, previous: bool = False) -> str:
        """The last ``lines`` of pod ``name``'s log (its container's previous run's with ``previous``)."""
        from kubernetes import client

        with contextlib.suppress(Exception), self.argo.cluster.cp.admin_client() as api:
            return client.CoreV1Api(api).read_namespaced_pod_log(name, NAMESPACE, tail_lines=lines,
                                                                 previous=previous)
        return f"(no {'previous ' if previous else ''}log of {name})"

    def s3_get(self, uri: str) -> bytes:
        """The object of ``minio://BUCKET/KEY`` (or ``s3://``) read from MinIO with a signed S3 GET (AWS
        signature v4, the object store's own keys), as the KFP UI's server reads an artifact's file."""
        bucket_key = re.sub(r"^(minio|s3)://", "", uri)
        host = f"{NODE_IP}:{self.procs['minio'].port}"
        path = "/" + urllib.parse.quote(bucket_key, safe="/~")
        now = datetime.datetime.now(datetime.UTC)
        amz, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        empty = hashlib.sha256(b"").hexdigest()
        signed = "host;x-amz-content-sha256;x-amz-date"
        canonical = "\n".join(["GET", path, "", f"host:{host}", f"x-amz-content-sha256:{empty}",
                               f"x-amz-date:{amz}", "", signed, empty])
        scope = f"{day}/us-east-1/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        key = f"AWS4{S3_SECRET_KEY}".encode()
        for part in (day, "us-east-1", "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        req = urllib.request.Request(f"http://{host}{path}", headers={
            "x-amz-date": amz, "x-amz-content-sha256": empty,
            "Authorization": f"AWS4-HMAC-SHA256 Credential={S3_ACCESS_KEY}/{scope}, SignedHeaders={signed}, "
                             f"Signature={signature}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()

    def diagnostics(self) -> str:
        """The end of every component's log, the namespace's pods and the Workflows' messages, for a failure's
        message."""
        from kubernetes import client

        out = [f"--- {p.name}:\n{p.tail(15)}" for p in self.procs.values()]
        out += [f"--- pod {n}:\n{self.pod_log(n, 25)}" for n in
                ("ml-pipeline", "ml-pipeline-persistenceagent", "ml-pipeline-scheduledworkflow")]
        # a restarted agent's or controller's reason for exiting is in its previous container's log only
        out += [f"--- pod {n}, previous container:\n{self.pod_log(n, 10, previous=True)}" for n in
                ("ml-pipeline-persistenceagent", "ml-pipeline-scheduledworkflow")]
        with contextlib.suppress(Exception), self.argo.cluster.cp.admin_client() as api:
            for pod in client.CoreV1Api(api).list_namespaced_pod(NAMESPACE).items:
                states = [(c.name, {k: v for k, v in (c.state.to_dict() or {}).items() if v})
                          for c in (pod.status.container_statuses or []) + (pod.status.init_container_statuses or [])]
                out.append(f"--- pod {pod.metadata.name} {pod.status.phase} {pod.status.message or ''} "
                           f"{json.dumps(states, default=str)[:1500]}")
                if pod.status.phase == "Failed" or "driver" in pod.metadata.name:
                    out.append(self.pod_log(pod.metadata.name, 15) if not pod.status.container_statuses else
                               "\n".join(client.CoreV1Api(api).read_namespaced_pod_log(
                                   pod.metadata.name, NAMESPACE, container=c.name, tail_lines=15)
                                   for c in pod.status.container_statuses if c.name != "wait"))
            for wf in client.CustomObjectsApi(api).list_namespaced_custom_object(
                    "argoproj.io", "v1alpha1", NAMESPACE, "workflows")["items"]:
                st = wf.get("status", {})
                out.append(f"--- workflow {wf['metadata']['name']} {st.get('phase')} {st.get('message', '')}")
                for node in st.get("nodes", {}).values():
                    if node.get("message"):
                        out.append(f"    {node.get('displayName')} {node.get('phase')}: {node['message'][:500]}")
        out.append(f"--- argo controller:\n{self.argo.controller_log(20)}")
        return "\n".join(out)


def _start(work: Path, name: str, argv: list[str], env: dict[str, str] | None = None,
           user: str = "") -> HostProcess:
    log = work / f"{name}.log"
    if user:
        argv = ["runuser", "-u", user, "--", *argv]
    proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})}, start_new_session=True)
    return HostProcess(name, proc, log)


def _wait_tcp(proc: HostProcess, port: int, timeout: float) -> None:
    def up() -> bool:
        if proc.proc.poll() is not None:
            raise AssertionError(f"{proc.name} exited {proc.proc.returncode}:\n{proc.tail()}")
        with socket.create_connection((NODE_IP, port), timeout=1):
            return True

    _wait_for(f"{proc.name} listening on {NODE_IP}:{port}", up, timeout, proc.tail)


def start_mariadb(work: Path, procs: dict[str, HostProcess]) -> int:
    """MariaDB 10.11 (Debian's, unpacked by hack/kfp/mariadb.sh) on NODE_IP with a user kfp/kfp; its port.
    (PostgreSQL 15 was tried first: KFP 2.17.0's API server dies on it, see hack/kfp/mariadb.sh.)"""
    done = subprocess.run(["bash", str(REPO / "hack/kfp/mariadb.sh")], check=False, capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:
        raise Unavailable(f"the KFP tests need MariaDB: {done.stderr.strip()}")
    root = Path(done.stdout.strip().splitlines()[-1])
    env = {"LD_LIBRARY_PATH": str(root / "usr/lib/x86_64-linux-gnu")}
    data = work / "mariadb"
    subprocess.run([str(root / "usr/bin/mariadb-install-db"), "--no-defaults", f"--basedir={root / 'usr'}",
                    f"--datadir={data}", "--user=root", "--auth-root-authentication-method=normal",
                    "--skip-test-db"], check=True, capture_output=True, timeout=300, env={**os.environ, **env})
    init = work / "mariadb-init.sql"
    init.write_text("CREATE USER IF NOT EXISTS 'kfp'@'%' IDENTIFIED BY 'kfp';\n"
                    "GRANT ALL PRIVILEGES ON *.* TO 'kfp'@'%';\nFLUSH PRIVILEGES;\n")
    port = free_port()
    procs["mariadb"] = p = _start(work, "mariadb", [
        str(root / "usr/sbin/mariadbd"), "--no-defaults", f"--basedir={root / 'usr'}", f"--datadir={data}",
        "--user=root", f"--bind-address={NODE_IP}", f"--port={port}", f"--socket={work / 'mariadb.sock'}",
        f"--init-file={init}", "--skip-log-bin", f"--lc-messages-dir={root / 'usr/share/mysql'}",
        "--innodb-flush-log-at-trx-commit=0"], env=env)
    p.port = port
    _wait_tcp(p, port, 90)
    return port


def start_mlmd(work: Path, procs: dict[str, HostProcess]) -> int:
    """hack/kfp/mlmd_server.py on NODE_IP over a SQLite store in ``work``; returns its port."""
    py = subprocess.run(["bash", str(REPO / "hack/kfp/mlmd_venv.sh")], check=True, capture_output=True,
                        text=True, timeout=600).stdout.strip().splitlines()[-1]
    port = free_port()
    procs["mlmd"] = p = _start(work, "mlmd", [py, str(REPO / "hack/kfp/mlmd_server.py"), "--listen",
                                              f"{NODE_IP}:{port}", "--sqlite", str(work / "mlmd.sqlite")])
    p.port = port
    _wait_tcp(p, port, 60)
    return port


def start_minio(work: Path, bin_dir: Path, procs: dict[str, HostProcess]) -> tuple[int, Path]:
    """MinIO on NODE_IP (its console on loopback), data in ``work/s3``; returns its port and data folder."""
    data = work / "s3"
    data.mkdir()
    port = free_port()
    env = {"MINIO_ROOT_USER": S3_ACCESS_KEY, "MINIO_ROOT_PASSWORD": S3_SECRET_KEY, "MINIO_BROWSER": "off",
           "MINIO_UPDATE": "off", "MINIO_CI_CD": "1", "HOME": str(work)}
    procs["minio"] = p = _start(work, "minio", [str(bin_dir / "minio"), "server", "--quiet", "--address",
                                                f"{NODE_IP}:{port}", "--console-address", "127.0.0.1:0",
                                                str(data)], env=env)
    p.port = port

    def ready() -> bool:
        if p.proc.poll() is not None:
            raise AssertionError(f"minio exited {p.proc.returncode}:\n{p.tail()}")
        with urllib.request.urlopen(f"http://{NODE_IP}:{port}/minio/health/ready", timeout=2) as r:
            return r.status == 200

    _wait_for("MinIO ready", ready, 90, p.tail)
    return port, data


class Unavailable(RuntimeError):
    """What the KFP backend needs is not on this machine (the message says what): a test skips, a benchmark
    says so."""


def kfp_unavailable() -> str:
    """Why the KFP backend cannot be brought up here ("" when it can): no KFP source tree or no binaries of
    hack/kfp/build.sh (MariaDB is unpacked when it starts: :class:`Unavailable` then)."""
    if kfp_src() is None:
        return "no KFP source tree: set KFP_SRC=<a checkout of kubeflow/pipelines at 2.17.0>"
    if kfp_dir() is None:
        return "the KFP tests need hack/kfp/build.sh's binaries (make test-kfp builds them)"
    return ""


@contextlib.contextmanager
def running_kfp_backend(argo: Argo, work: Path) -> Iterator[KFPBackend]:
    """The KFP backend on ``argo``'s node (see the module docstring), its host processes' files under ``work``;
    everything removed at the end, also on an error. The one implementation behind the ``kfp_backend`` fixture
    and bench/kfp_overhead.py.

    Raises:
        Unavailable: where :func:`kfp_unavailable` says why, or MariaDB cannot be unpacked.
        AssertionError: a component not up in time (with every component's log).
    """
    from kubernetes import client

    if why := kfp_unavailable():
        raise Unavailable(why)
    src, bin_dir = kfp_src(), kfp_dir()
    assert src is not None and bin_dir is not None
    cluster = argo.cluster
    procs: dict[str, HostProcess] = {}
    timings: dict[str, float] = {}
    ns = None
    t0 = time.monotonic()
    try:
        db_port = start_mariadb(work, procs)
        mlmd_port = start_mlmd(work, procs)
        s3_port, s3_dir = start_minio(work, bin_dir, procs)
        timings["host processes"] = round(time.monotonic() - t0, 1)
        t0 = time.monotonic()
        for ref, bins in IMAGES.items():
            oci = work / (ref.rsplit("/", 1)[1].replace(":", "_") + ".oci.tar")
            user = str(RUN_AS_USER) if "driver" in bins else ""
            # /tmp: the driver writes its outputs under /tmp/outputs ("mkdir /tmp: permission denied" without it)
            write_image(oci, ref, {f"/{b}": bin_dir / b for b in bins}, [f"/{bins[0]}"], user=user, dirs=("/tmp",))
            ensure_image(cluster, ref, oci)
        timings["kfp images"] = round(time.monotonic() - t0, 1)
        t0 = time.monotonic()
        ns = prepare_namespace(cluster, NAMESPACE, argo_rbac=False, level=POD_SECURITY_LEVEL)
        subst = {"NODE_IP": NODE_IP, "DB_PORT": db_port, "MLMD_PORT": mlmd_port, "S3_PORT": s3_port,
                 "S3_ACCESS_KEY": S3_ACCESS_KEY, "S3_SECRET_KEY": S3_SECRET_KEY, "RUN_AS_USER": RUN_AS_USER,
                 "APISERVER_IMAGE": f"tfk8s.local/kfp-apiserver:{KFP_VERSION}",
                 "AGENT_IMAGE": f"tfk8s.local/kfp-persistence-agent:{KFP_VERSION}",
                 "SWF_IMAGE": f"tfk8s.local/kfp-scheduledworkflow:{KFP_VERSION}",
                 "DRIVER_IMAGE": f"tfk8s.local/kfp-driver-launcher:{KFP_VERSION}"}
        docs = [d for d in yaml.safe_load_all(string.Template(MANIFESTS.read_text()).substitute(subst)) if d]
        # the v1 CRD of KFP's manifests (backend/src/crd/install/ has an apiextensions v1beta1 one, gone since 1.22)
        crd = yaml.safe_load((src / "manifests/kustomize/base/pipeline/cluster-scoped"
                                    "/scheduled-workflow-crd.yaml").read_text())
        with cluster.cp.admin_client() as api:
            _apply(api, [crd])
            _apply(api, [d for d in docs if d["kind"] != "Pod"])
            # the launch step's rights (manifests/rbac.yaml, applied by prepare_namespace) for the runs' account
            client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(NAMESPACE, {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "tfk8s-launcher-kfp"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tfk8s-launcher"},
                "subjects": [{"kind": "ServiceAccount", "name": "pipeline-runner", "namespace": NAMESPACE}]})
            _apply(api, [d for d in docs if d["kind"] == "Pod"])
            core = client.CoreV1Api(api)
            backend = KFPBackend(argo, "", work, s3_dir, ns.volume, argo.image, procs, timings)

            def api_up() -> bool:
                pod = core.read_namespaced_pod("ml-pipeline", NAMESPACE)
                if not pod.status.pod_ip:
                    return False
                backend.url = f"http://{pod.status.pod_ip}:8888"
                backend.api("healthz", timeout=3)
                return True

            _wait_for("the KFP API server answering", api_up, 300, backend.diagnostics)
            # both reach the API server before they log "Started workers" (the agent's health check of
            # http://ml-pipeline:8888 times out after 2 minutes, the controller's gRPC dial after 1, both
            # silently): a pod that is merely Running may never record a run's state
            for name in ("ml-pipeline-persistenceagent", "ml-pipeline-scheduledworkflow"):
                _wait_for(f"pod {name} started its workers", lambda n=name: "Started workers" in backend.pod_log(
                    n, 200), 300, backend.diagnostics)
        timings["kfp up"] = round(time.monotonic() - t0, 1)
        print(f"\nKFP {KFP_VERSION} up at {backend.url}: {timings}")
        yield backend
    finally:
        with contextlib.suppress(Exception), cluster.cp.admin_client() as api:
            with contextlib.suppress(Exception):
                client.ApiextensionsV1Api(api).delete_custom_resource_definition("scheduledworkflows.kubeflow.org")
            rbac = client.RbacAuthorizationV1Api(api)
            with contextlib.suppress(Exception):
                rbac.delete_cluster_role_binding("tfk8s-kfp-apiserver")
            with contextlib.suppress(Exception):
                rbac.delete_cluster_role("tfk8s-kfp-apiserver")
        if ns is not None:
            remove_namespace(cluster, ns)
        for p in reversed(list(procs.values())):
            p.stop()
        for p in procs.values():
            if p.dir is not None:
                shutil.rmtree(p.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def kfp_backend(argo: Argo, tmp_path_factory) -> Iterator[KFPBackend]:
    """The KFP backend on the node (see the module docstring and :func:`running_kfp_backend`); removed at the
    end."""
    if why := kfp_unavailable():
        pytest.skip(why)
    with contextlib.ExitStack() as stack:
        try:
            backend = stack.enter_context(running_kfp_backend(argo, tmp_path_factory.mktemp("kfp")))
        except Unavailable as e:
            pytest.skip(str(e))
        yield backend

"""The Kubeflow Pipelines UI against the backend of ``kfp_fixtures.kfp_backend`` (``make test-kfp``).

KFP's own UI (``frontend/`` of the same KFP source tree, built by ``hack/kfp/ui.sh``: Node.js 24.14.0 as
``frontend/.nvmrc`` pins it, the Vite client and the UI's Node server) runs on the host, configured as KFP's
manifests configure its ``ml-pipeline-ui`` Deployment: the API server at ``ML_PIPELINE_SERVICE_HOST:PORT`` (the
API server pod's address), the object store at ``MINIO_HOST:PORT`` (our MinIO, which the server reads artifacts
from), and ML Metadata through ``METADATA_ENVOY_SERVICE_SERVICE_HOST:PORT``: KFP puts Envoy there to turn the
page's grpc-web calls into gRPC for MLMD's server; here ``grpcwebproxy`` (improbable-eng/grpc-web) does that in
front of our MLMD adapter (hack/kfp/mlmd_server.py). Headless Chromium (Debian's package), driven by Playwright,
looks at the pages.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.realcluster.controlplane import REPO
from tests.realnode.argo_fixtures import _wait_for
from tests.realnode.kfp_fixtures import (
    S3_ACCESS_KEY,
    S3_SECRET_KEY,
    HostProcess,
    KFPBackend,
    _start,
    _wait_tcp,
    free_port,
)
from tests.realnode.realnode import NODE_IP

UI_BUILD = REPO / "hack" / "kfp" / "ui.sh"
HOSTS_HOOK = Path(__file__).with_name("kfp_ui_hosts.cjs")


@dataclass
class KFPUI:
    """The UI's URL (``http://NODE_IP:PORT``) and its host processes (the UI server, grpcwebproxy)."""

    url: str
    procs: dict[str, HostProcess]


def ui_dir() -> Path | None:
    """``hack/kfp/ui.sh --dir`` when the UI and grpcwebproxy are built there, else None."""
    d = Path(subprocess.run(["bash", str(UI_BUILD), "--dir"], check=True, capture_output=True,
                            text=True).stdout.strip())
    ok = (d / "node/bin/node").is_file() and (d / "frontend/build/index.html").is_file() \
        and (d / "frontend/server/dist/server.js").is_file() and (d / "bin/grpcwebproxy").is_file()
    return d if ok else None


def chromium() -> str | None:
    """Debian's Chromium (or another Chrome on PATH), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.fixture(scope="session")
def kfp_ui(kfp_backend: KFPBackend, tmp_path_factory) -> Iterator[KFPUI]:
    """KFP's UI server and grpcwebproxy on the node's address; stopped at the end."""
    d = ui_dir()
    if d is None:
        pytest.skip("the KFP UI is not built: bash hack/kfp/ui.sh (make test-kfp runs it)")
    work = tmp_path_factory.mktemp("kfp-ui")
    procs: dict[str, HostProcess] = {}
    kfp = kfp_backend
    try:
        gw_port = free_port()
        gw = _start(work, "grpcwebproxy", [
            str(d / "bin/grpcwebproxy"), f"--backend_addr={NODE_IP}:{kfp.procs['mlmd'].port}",
            "--run_tls_server=false", f"--server_bind_address={NODE_IP}", f"--server_http_debug_port={gw_port}",
            "--allow_all_origins", "--backend_max_call_recv_msg_size=104857600",  # KFP's Envoy: 100 MB (#11949)
            "--server_http_max_write_timeout=60s", "--server_http_max_read_timeout=60s"])
        procs["grpcwebproxy"] = gw
        gw.port = gw_port
        _wait_tcp(gw, gw_port, 30)
        api_host, api_port = kfp.url.removeprefix("http://").rsplit(":", 1)
        ui_port = free_port()
        env = {
            "PATH": f"{d / 'node/bin'}:{os.environ.get('PATH', '')}",
            "ML_PIPELINE_SERVICE_HOST": api_host, "ML_PIPELINE_SERVICE_PORT": api_port,
            "METADATA_ENVOY_SERVICE_SERVICE_HOST": NODE_IP, "METADATA_ENVOY_SERVICE_SERVICE_PORT": str(gw_port),
            "MINIO_HOST": NODE_IP, "MINIO_PORT": str(kfp.procs["minio"].port), "MINIO_NAMESPACE": "",
            "MINIO_ACCESS_KEY": S3_ACCESS_KEY, "MINIO_SECRET_KEY": S3_SECRET_KEY, "MINIO_SSL": "false",
            "DISABLE_GKE_METADATA": "true", "ARGO_ARCHIVE_LOGS": "false",
        }
        # artifacts: the UI reads them at the endpoint and with the Secret their provider info names (the
        # kfp-launcher config's seaweedfs.kubeflow:9000, mlpipeline-minio-artifact), as its pod would: the
        # Service's name resolved to its ClusterIP (kube-proxy's rules take the host's traffic to MinIO) and
        # the Secret read with the admin kubeconfig
        from kubernetes import client

        with kfp.argo.cluster.cp.admin_client() as api:
            s3_ip = client.CoreV1Api(api).read_namespaced_service("seaweedfs", "kubeflow").spec.cluster_ip
        env.update({"TFK8S_UI_HOSTS": json.dumps({"seaweedfs.kubeflow": s3_ip, "seaweedfs": s3_ip}),
                    "KUBECONFIG": str(kfp.argo.cluster.cp.kubeconfig()), "FRONTEND_SERVER_NAMESPACE": "kubeflow"})
        ui = _start(work, "kfp-ui", [str(d / "node/bin/node"), "--require", str(HOSTS_HOOK),
                                     str(d / "frontend/server/dist/server.js"),
                                     str(d / "frontend/build"), str(ui_port)], env=env)
        procs["kfp-ui"] = ui
        ui.port = ui_port
        url = f"http://{NODE_IP}:{ui_port}"

        def up() -> bool:  # the UI server's healthz says whether it reaches the API server
            with urllib.request.urlopen(f"{url}/apis/v2beta1/healthz", timeout=3) as r:
                return json.loads(r.read()).get("apiServerReady") is True

        _wait_for("the KFP UI server proxying the API", up, 60, ui.tail)
        yield KFPUI(url, procs)
    finally:
        for p in reversed(list(procs.values())):
            p.stop()

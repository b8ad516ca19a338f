"""KServe's own InferenceService CRD on a real API server, for the tests of the push step's ``kserve=apply``: the
file ``hack/kserve/crd.sh`` takes from KServe's Go module (cached under ``~/.cache/tfk8s/kserve/``, never in this
repository), installed by :func:`installed_kserve_crd` and removed after it, so the API server validates every
InferenceService against KServe's schema. No KServe controller runs: the objects are accepted, never served."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.realcluster.controlplane import REPO

CRD_SCRIPT = REPO / "hack" / "kserve" / "crd.sh"
CRD_NAME = "inferenceservices.serving.kserve.io"


def kserve_crd_file() -> Path:
    """The CRD file (``hack/kserve/crd.sh``: fetched from the Go module proxy the first time, seconds)."""
    done = subprocess.run(["bash", str(CRD_SCRIPT)], capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise AssertionError(f"hack/kserve/crd.sh failed ({done.returncode}): {done.stderr.strip()}")
    return Path(done.stdout.strip().splitlines()[-1])


def served_kserve_versions(api_client: Any) -> list[str]:
    """The versions of ``serving.kserve.io`` the API server's discovery lists ([] when none)."""
    from tfk8s.launcher.kubernetes.api import KubeApi

    return KubeApi(api_client, "default").kserve_versions() or []


def _wait(predicate: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


@contextlib.contextmanager
def installed_kserve_crd(admin_client: Any) -> Iterator[dict[str, Any]]:
    """KServe's InferenceService CRD created with ``admin_client`` (an admin ``ApiClient``), Established and
    served by discovery; deleted afterwards (its objects go with it) and waited for until discovery no longer
    lists the group, so the API server is left as found. Yields the CRD as installed."""
    from kubernetes import client

    crd = yaml.safe_load(kserve_crd_file().read_text())
    assert crd["metadata"]["name"] == CRD_NAME
    ext = client.ApiextensionsV1Api(admin_client)
    ext.create_custom_resource_definition(crd, _preload_content=False)  # 1 MB of schema: no model parsing
    try:
        def established() -> bool:
            import json

            got = json.loads(ext.read_custom_resource_definition(CRD_NAME, _preload_content=False).data)
            return any(c["type"] == "Established" and c["status"] == "True"
                       for c in (got.get("status") or {}).get("conditions") or [])

        _wait(established, f"CRD {CRD_NAME} Established", 60)
        _wait(lambda: "v1beta1" in served_kserve_versions(admin_client), "discovery serving serving.kserve.io", 60)
        yield crd
    finally:
        from kubernetes.client.exceptions import ApiException

        with contextlib.suppress(ApiException):
            ext.delete_custom_resource_definition(CRD_NAME, _preload_content=False)

        def gone() -> bool:
            try:
                ext.read_custom_resource_definition(CRD_NAME, _preload_content=False)
            except ApiException as e:
                return e.status == 404
            return False

        _wait(gone, f"CRD {CRD_NAME} deleted", 120)
        _wait(lambda: served_kserve_versions(admin_client) == [], "discovery without serving.kserve.io", 60)

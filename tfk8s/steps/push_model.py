"""The push step (TFX Pusher): a blessed export -> ``<root>/serving/<model name>/<version>/``, atomically and never
overwriting (:func:`tfk8s.steps.model_versions.push_saved_model`); point TF Serving's model base path there.
Optionally the same version is uploaded to a bucket (``model_uri``: ``<model_uri>/<model name>/<version>/``, never
overwritten, :func:`tfk8s.steps.s3.upload_version`), and a KServe InferenceService (TensorFlow predictor) is
rendered for it (:func:`inference_service`), printed for review or applied (``kserve``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

KSERVE_GROUP = "serving.kserve.io"
KSERVE_VERSION = "v1beta1"


@dataclass(frozen=True)
class PushResult:
    """What the push step did: the volume's serving path and version, the served signature, the bucket's
    ``uploaded_uri`` ("" when ``model_uri`` is empty), the InferenceService (``{}`` when ``kserve`` is empty) and
    what became of it (``kserve_applied``: "" not applied, else ``created`` / ``updated``)."""

    path: str
    version: int
    signature: dict
    uploaded_uri: str = ""
    inference_service: dict = field(default_factory=dict)
    kserve_applied: str = ""


def service_name(model_name: str) -> str:
    """The InferenceService's name for ``model_name``: a DNS-1035 label (lowercase letters, digits and ``-``,
    starting with a letter, at most 45 characters, KServe's limit so that its derived names fit)."""
    name = re.sub(r"[^a-z0-9-]+", "-", model_name.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"m-{name}".rstrip("-")
    return name[:45].rstrip("-")


def inference_service(*, model_name: str, namespace: str, storage_uri: str, version: int) -> dict[str, Any]:
    """A KServe ``InferenceService`` serving the TensorFlow SavedModel versions under ``storage_uri`` (the model's
    base, which holds ``<version>/`` folders: TF Serving serves the highest), in ``namespace`` (omitted when
    empty: the one it is applied in).

    Raises:
        ValueError: a ``storage_uri`` KServe cannot read (not ``pvc://`` or ``s3://``).
    """
    if not storage_uri.startswith(("pvc://", "s3://")):
        raise ValueError(f"storageUri {storage_uri!r} must be pvc://<claim>/<path> or s3://<bucket>/<prefix>")
    metadata: dict[str, Any] = {
        "name": service_name(model_name),
        "labels": {"app.kubernetes.io/managed-by": "tfk8s", "tfk8s.dev/model-name": service_name(model_name)},
        "annotations": {"tfk8s.dev/model-version": str(version)},
    }
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": f"{KSERVE_GROUP}/{KSERVE_VERSION}",
        "kind": "InferenceService",
        "metadata": metadata,
        "spec": {"predictor": {"model": {"modelFormat": {"name": "tensorflow"}, "storageUri": storage_uri}}},
    }


def storage_uri(*, model_name: str, pvc_name: str, uploaded_base: str = "") -> str:
    """Where KServe reads the model's versions: the bucket's base ``<model_uri>/<model name>/`` when it was
    uploaded there, else ``pvc://<pvc_name>/serving/<model name>`` (the claim's ``serving/`` folder)."""
    if uploaded_base:
        return uploaded_base.rstrip("/")
    if not pvc_name:
        raise ValueError("kserve needs pvc_name (the claim KServe reads pvc://<pvc_name>/serving/<model name> "
                         "from) or model_uri (a bucket it reads)")
    return f"pvc://{pvc_name}/serving/{model_name}"


def push_model_step(*, model_dir: str, volume_root: str, model_name: str, signature: dict | None = None,
                    model_uri: str = "", s3_endpoint: str = "", kserve: str = "", pvc_name: str = "",
                    namespace: str = "") -> PushResult:
    """Promote a blessed export to ``<volume_root>/serving/<model_name>/<version>`` (TFX Pusher); then upload that
    version to ``<model_uri>/<model_name>/<version>/`` when ``model_uri`` is set, and render its InferenceService
    when ``kserve`` is ``print`` (printed) or ``apply`` (also created, or updated to this version, in
    ``namespace`` when the cluster serves KServe's CRD). Only the push step runs this, and the pipeline runs it
    only for a blessed model; the version is the servable one :func:`push_saved_model` checked.

    ``signature``: the export step's serving signature; given, the model is not loaded again.

    Returns:
        :class:`PushResult`.

    Raises:
        tfk8s.steps.model_versions.ExportError: not a servable version folder, or that version was pushed already.
        tfk8s.steps.s3.S3VersionExistsError: the bucket holds that version already (never overwritten).
        tfk8s.steps.s3.S3Error: the bucket cannot be written (the message names the URI and the fix).
        ValueError: a ``kserve`` other than '', print or apply.
        RuntimeError: ``apply`` and the cluster does not serve KServe's InferenceService (the message says so).
    """
    from tfk8s.core.layout import VolumeLayout
    from tfk8s.core.volume import volume_writes
    from tfk8s.steps.model_versions import push_saved_model

    if kserve not in ("", "print", "apply"):
        raise ValueError(f"kserve must be '' (none), 'print' or 'apply', got {kserve!r}")
    if model_uri:  # a bad URI or endpoint fails before anything is pushed
        from tfk8s.steps import s3

        base = s3.parse_s3_uri(model_uri, "model_uri").join(model_name)
        s3.check_endpoint(s3_endpoint)
        from pathlib import Path

        if Path(model_dir).name.isdigit():  # the bucket refuses the version (exists, credentials) before the volume
            s3.check_absent(s3.client(s3_endpoint), base.join(Path(model_dir).name), endpoint=s3_endpoint)
    serving_base = VolumeLayout(volume_root).serving_base(model_name)
    with volume_writes(serving_base, "the pushed model"):
        r = push_saved_model(model_dir, serving_base, signature)
    result = PushResult(r.path, r.version, r.signature)
    uploaded_base = ""
    if model_uri:
        target = base.join(str(r.version))
        keys = s3.upload_version(s3.client(s3_endpoint), r.path, target, endpoint=s3_endpoint)
        uploaded_base = str(base)
        print(f"tfk8s: uploaded version {r.version} to {target} ({len(keys)} objects)", flush=True)
        result = PushResult(r.path, r.version, r.signature, uploaded_base)
    if not kserve:
        return result
    body = inference_service(model_name=model_name, namespace=namespace, version=r.version,
                             storage_uri=storage_uri(model_name=model_name, pvc_name=pvc_name,
                                                     uploaded_base=uploaded_base))
    print(f"tfk8s: the InferenceService for version {r.version} (kserve={kserve}):\n{json.dumps(body, indent=2)}", flush=True)
    applied = ""
    if kserve == "print":  # one line a short output (make run shows only the tfk8s: lines) still carries
        print(f"tfk8s: InferenceService {body['metadata']['name']}: storageUri "
              f"{body['spec']['predictor']['model']['storageUri']} (the object above, in this step's log; apply it "
              "where KServe runs)", flush=True)
    if kserve == "apply":
        applied = apply_inference_service(body, namespace)
        print(f"tfk8s: InferenceService {body['metadata']['name']} {applied}", flush=True)
    return PushResult(r.path, r.version, r.signature, uploaded_base, body, applied)


def apply_inference_service(body: dict[str, Any], namespace: str, api: Any = None) -> str:
    """Create ``body`` in ``namespace`` (empty: this pod's), or update the one of its name to it: ``created`` or
    ``updated``; only when the API server serves ``serving.kserve.io/v1beta1``. Through the Kubernetes backend's
    API adapter (``api``: a :class:`tfk8s.launcher.kubernetes.api.KubeApi`, default the backend's for
    ``namespace``), the only caller of the API.

    Raises:
        RuntimeError: the cluster does not serve KServe's InferenceService (KServe is not installed); the message
            names the fix.
        tfk8s.launcher.kubernetes.errors.KubernetesApiError: a call failed (the message says what to do).
    """
    if api is None:
        from tfk8s.launcher.backends import get_backend

        api = get_backend("kubernetes").connect(namespace)
    name = body["metadata"]["name"]
    served = api.kserve_versions()
    if KSERVE_VERSION not in (served or []):
        raise RuntimeError(
            f"kserve=apply: InferenceService {name} not applied in namespace {api.namespace}: the API server does "
            f"not serve {KSERVE_GROUP}/{KSERVE_VERSION} (served: {', '.join(served or []) or 'none'}): install KServe "
            "(its CRDs), or use kserve=print and apply the printed object where KServe runs")
    body = {**body, "metadata": {**body["metadata"], "namespace": api.namespace}}
    from tfk8s.launcher.backends import user_errors

    try:
        api.create_inference_service(body)
        return "created"
    except user_errors() as e:
        if getattr(e, "status", 0) != 409:
            raise
    api.patch_inference_service(name, {k: body[k] for k in ("metadata", "spec")})
    return "updated"

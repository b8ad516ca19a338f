"""tfk8s/steps/push_model.py: the KServe InferenceService rendered and checked as data, applied only through the
API adapter and only where KServe's CRD is served; the upload to model_uri against a real MinIO
(tests/steps/s3_server.py), never overwriting."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tfk8s.launcher.kubernetes.errors import AlreadyExistsError
from tfk8s.steps.push_model import (
    apply_inference_service,
    inference_service,
    push_model_step,
    service_name,
    storage_uri,
)
from tfk8s.steps.s3 import S3VersionExistsError

SIGNATURE = {"inputs": {"image": [None, 28, 28, 1]}}


@pytest.mark.parametrize(("model", "name"), [
    ("mnist-cnn", "mnist-cnn"), ("fashion_mnist.v2", "fashion-mnist-v2"), ("3d", "m-3d"), ("MNIST", "mnist"),
    ("x" * 80, "x" * 45),
])
def test_service_names_are_dns_1035_labels(model, name):
    assert service_name(model) == name


def test_the_inference_service_serves_the_models_base():
    body = inference_service(model_name="mnist_cnn", namespace="team-a", version=7,
                             storage_uri="pvc://tfk8s-data/serving/mnist_cnn")
    assert body == {
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "mnist-cnn", "namespace": "team-a",
                     "labels": {"app.kubernetes.io/managed-by": "tfk8s", "tfk8s.dev/model-name": "mnist-cnn"},
                     "annotations": {"tfk8s.dev/model-version": "7"}},
        "spec": {"predictor": {"model": {"modelFormat": {"name": "tensorflow"},
                                         "storageUri": "pvc://tfk8s-data/serving/mnist_cnn"}}},
    }
    assert "namespace" not in inference_service(model_name="m", namespace="", version=1,
                                                storage_uri="s3://b/m")["metadata"]
    with pytest.raises(ValueError, match="must be pvc://<claim>/<path> or s3://<bucket>/<prefix>"):
        inference_service(model_name="m", namespace="", version=1, storage_uri="/mnt/tfk8s/serving/m")


def test_storage_uri_is_the_bucket_when_uploaded_else_the_claim():
    assert storage_uri(model_name="m", pvc_name="data") == "pvc://data/serving/m"
    assert storage_uri(model_name="m", pvc_name="data", uploaded_base="s3://b/models/m/") == "s3://b/models/m"
    with pytest.raises(ValueError, match="kserve needs pvc_name"):
        storage_uri(model_name="m", pvc_name="")


def _export(tmp_path: Path, version: int = 3) -> Path:
    d = tmp_path / "models/mnist-cnn" / str(version)
    (d / "variables").mkdir(parents=True)
    (d / "saved_model.pb").write_bytes(b"graph")
    (d / "variables/variables.index").write_bytes(b"index")
    return d


def test_kserve_print_renders_it_in_the_log(tmp_path, capsys):
    r = push_model_step(model_dir=str(_export(tmp_path)), volume_root=str(tmp_path), model_name="mnist-cnn",
                        signature=SIGNATURE, kserve="print", pvc_name="tfk8s-data", namespace="ns1")
    assert r.path == str(tmp_path / "serving/mnist-cnn/3") and r.kserve_applied == "" and r.uploaded_uri == ""
    out = capsys.readouterr().out
    body, last = out.split("(kserve=print):\n", 1)[1].rstrip("\n").rsplit("\n", 1)
    printed = json.loads(body)
    assert printed == r.inference_service
    assert printed["spec"]["predictor"]["model"]["storageUri"] == "pvc://tfk8s-data/serving/mnist-cnn"
    # make run shows only the tfk8s: lines: this one says what the object is and where the rest is
    assert last == ("tfk8s: InferenceService mnist-cnn: storageUri pvc://tfk8s-data/serving/mnist-cnn (the object "
                    "above, in this step's log; apply it where KServe runs)")


def test_no_kserve_renders_nothing(tmp_path, capsys):
    r = push_model_step(model_dir=str(_export(tmp_path)), volume_root=str(tmp_path), model_name="mnist-cnn",
                        signature=SIGNATURE)
    assert r.inference_service == {} and "InferenceService" not in capsys.readouterr().out


def test_a_bad_kserve_value_pushes_nothing(tmp_path):
    with pytest.raises(ValueError, match="kserve must be '' \\(none\\), 'print' or 'apply', got 'yes'"):
        push_model_step(model_dir=str(_export(tmp_path)), volume_root=str(tmp_path), model_name="mnist-cnn",
                        signature=SIGNATURE, kserve="yes")
    assert not (tmp_path / "serving").exists()


class _Api:
    """The three calls of :class:`tfk8s.launcher.kubernetes.api.KubeApi` the apply makes, answered here."""

    def __init__(self, served, exists=False):
        self.namespace, self.served, self.exists, self.calls = "ns1", served, exists, []

    def kserve_versions(self):
        return self.served

    def create_inference_service(self, body):
        self.calls.append(("create", body))
        if self.exists:
            raise AlreadyExistsError("exists", 409)
        return body

    def patch_inference_service(self, name, body):
        self.calls.append(("patch", name, body))
        return body


BODY = inference_service(model_name="m", namespace="", version=2, storage_uri="s3://b/m")


def test_apply_creates_in_the_apis_namespace():
    api = _Api(["v1beta1"])
    assert apply_inference_service(BODY, "", api) == "created"
    assert api.calls == [("create", {**BODY, "metadata": {**BODY["metadata"], "namespace": "ns1"}})]


def test_apply_updates_one_that_exists_to_the_new_version():
    api = _Api(["v1beta1"], exists=True)
    assert apply_inference_service(BODY, "", api) == "updated"
    assert api.calls[1] == ("patch", "m", {"metadata": {**BODY["metadata"], "namespace": "ns1"},
                                           "spec": BODY["spec"]})


@pytest.mark.parametrize("served", [None, ["v1alpha1"]])
def test_apply_is_refused_without_kserves_crd(served):
    api = _Api(served)
    with pytest.raises(RuntimeError) as e:
        apply_inference_service(BODY, "", api)
    assert str(e.value).startswith("kserve=apply: InferenceService m not applied in namespace ns1: the API server "
                                   "does not serve serving.kserve.io/v1beta1 (served: ")
    assert str(e.value).endswith("install KServe (its CRDs), or use kserve=print and apply the printed object "
                                 "where KServe runs")
    assert api.calls == []


def test_the_role_grants_what_apply_uses():
    from tfk8s.launcher.kubernetes.api import NON_RESOURCE_CALLS, required_rules

    assert required_rules()[("serving.kserve.io", "inferenceservices")] == {"create", "patch"}
    assert NON_RESOURCE_CALLS["kserve_versions"] == "/apis/serving.kserve.io"


# -- model_uri against a real MinIO --------------------------------------------------------------------------------
def test_the_blessed_version_is_uploaded_and_never_overwritten(s3_env, tmp_path, capsys):
    bucket = f"m{time.monotonic_ns()}"
    c = s3_env.client()
    c.create_bucket(Bucket=bucket)
    r = push_model_step(model_dir=str(_export(tmp_path)), volume_root=str(tmp_path), model_name="mnist-cnn",
                        signature=SIGNATURE, model_uri=f"s3://{bucket}/models", s3_endpoint=s3_env.endpoint,
                        kserve="print")
    assert r.uploaded_uri == f"s3://{bucket}/models/mnist-cnn/"
    keys = sorted(o["Key"] for o in c.list_objects_v2(Bucket=bucket)["Contents"])
    assert keys == ["models/mnist-cnn/3/saved_model.pb", "models/mnist-cnn/3/variables/variables.index"]
    assert r.inference_service["spec"]["predictor"]["model"]["storageUri"] == f"s3://{bucket}/models/mnist-cnn"
    assert f"uploaded version 3 to s3://{bucket}/models/mnist-cnn/3/ (2 objects)" in capsys.readouterr().out
    # the same version again (another volume): refused before anything is pushed there
    other = tmp_path / "other"
    with pytest.raises(S3VersionExistsError, match="versions are never overwritten"):
        push_model_step(model_dir=str(_export(other)), volume_root=str(other), model_name="mnist-cnn",
                        signature=SIGNATURE, model_uri=f"s3://{bucket}/models", s3_endpoint=s3_env.endpoint)
    assert not (other / "serving").exists()
    assert c.get_object(Bucket=bucket, Key=keys[0])["Body"].read() == b"graph"

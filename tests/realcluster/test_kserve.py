"""The push step's ``kserve=apply`` against the real API server (``make test-cluster``), with KServe's own
InferenceService CRD (``hack/kserve/crd.sh``: KServe's Go module, tests/realcluster/kserve_crd.py) installed for the
test and removed after it: the step, as the tfk8s-launcher ServiceAccount (the real RBAC authorizer judging
manifests/rbac.yaml's Role), creates an InferenceService the API server validates against KServe's schema, then
updates it to the next version; without the CRD it is refused naming the fix. No KServe controller runs."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.register_assert_rewrite("tests.realcluster.cluster_fixtures", "tests.realcluster.kserve_crd")

from tests.realcluster.cluster_fixtures import RealCluster
from tests.realcluster.kserve_crd import installed_kserve_crd, served_kserve_versions
from tfk8s.launcher.kubernetes.api import KubeApi
from tfk8s.launcher.kubernetes.errors import KubernetesApiError
from tfk8s.steps.push_model import inference_service, push_model_step

pytest_plugins = ["tests.realcluster.cluster_fixtures"]
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

SIGNATURE = {"inputs": {"image": [None, 28, 28, 1]}}


def _export(root: Path, version: int) -> Path:
    """A version folder the push step takes (its files only: the step is given the signature)."""
    d = root / "models" / "mnist-cnn" / str(version)
    (d / "variables").mkdir(parents=True)
    (d / "saved_model.pb").write_bytes(b"graph")
    (d / "variables" / "variables.index").write_bytes(b"index")
    return d


def _push(kube: RealCluster, volume: Path, version: int):
    return push_model_step(model_dir=str(_export(volume, version)), volume_root=str(volume), model_name="mnist-cnn",
                           signature=SIGNATURE, kserve="apply", pvc_name="tfk8s-data", namespace=kube.namespace)


@pytest.fixture
def as_launcher(kube: RealCluster, monkeypatch) -> RealCluster:
    """The push step's API client is the tfk8s-launcher ServiceAccount's (what it has in its pod)."""
    monkeypatch.setattr("tfk8s.launcher.kubernetes.load_api_client", kube.launcher_client)
    return kube


def test_kserve_apply_is_refused_where_kserves_crd_is_not_served(as_launcher: RealCluster, tmp_path):
    kube = as_launcher
    assert served_kserve_versions(kube.admin) == []
    with pytest.raises(RuntimeError) as e:
        _push(kube, tmp_path, 1)
    assert str(e.value) == (
        f"kserve=apply: InferenceService mnist-cnn not applied in namespace {kube.namespace}: the API server does "
        "not serve serving.kserve.io/v1beta1 (served: none): install KServe (its CRDs), or use kserve=print and "
        "apply the printed object where KServe runs")
    assert (tmp_path / "serving" / "mnist-cnn" / "1" / "saved_model.pb").is_file()  # pushed on the volume


def test_kserve_apply_creates_then_updates_what_the_api_server_validates(as_launcher: RealCluster, tmp_path):
    kube = as_launcher

    def read() -> dict:
        return kube.custom.get_namespaced_custom_object("serving.kserve.io", "v1beta1", kube.namespace,
                                                        "inferenceservices", "mnist-cnn")

    with installed_kserve_crd(kube.admin) as crd:
        assert [v["name"] for v in crd["spec"]["versions"]] == ["v1beta1"]
        first = _push(kube, tmp_path, 3)
        assert first.kserve_applied == "created"
        got = read()
        assert got["spec"]["predictor"]["model"] == {"modelFormat": {"name": "tensorflow"},
                                                     "storageUri": "pvc://tfk8s-data/serving/mnist-cnn"}
        assert got["metadata"]["annotations"]["tfk8s.dev/model-version"] == "3"
        assert got["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "tfk8s",
                                             "tfk8s.dev/model-name": "mnist-cnn"}
        # the next blessed version: the same object, updated
        second = _push(kube, tmp_path, 4)
        assert second.kserve_applied == "updated"
        again = read()
        assert again["metadata"]["uid"] == got["metadata"]["uid"]
        assert again["metadata"]["annotations"]["tfk8s.dev/model-version"] == "4"
        assert again["metadata"]["resourceVersion"] != got["metadata"]["resourceVersion"]
        assert again["spec"]["predictor"]["model"]["storageUri"] == "pvc://tfk8s-data/serving/mnist-cnn"
        # KServe's schema is what judged them: one it does not accept is refused, naming the field
        api = KubeApi(kube.launcher_client(), kube.namespace)
        bad = inference_service(model_name="bad", namespace=kube.namespace, version=1, storage_uri="s3://b/m")
        bad["spec"]["predictor"]["model"]["modelFormat"] = {"version": "2"}  # no name: KServe requires one
        with pytest.raises(KubernetesApiError) as e:
            api.create_inference_service(bad)
        assert e.value.status == 422, e.value
        assert "spec.predictor.model.modelFormat.name: Required value" in str(e.value)
        unknown = inference_service(model_name="bad", namespace=kube.namespace, version=1, storage_uri="s3://b/m")
        unknown["spec"]["predictor"]["model"]["storageUrl"] = "s3://b/m"  # a typo: strict field validation
        with pytest.raises(KubernetesApiError) as e:
            api.create_inference_service(unknown)
        assert 'unknown field "spec.predictor.model.storageUrl"' in str(e.value)
        listed = kube.custom.list_namespaced_custom_object("serving.kserve.io", "v1beta1", kube.namespace,
                                                           "inferenceservices")
        assert [i["metadata"]["name"] for i in listed["items"]] == ["mnist-cnn"]
    assert served_kserve_versions(kube.admin) == []  # removed: the control plane as it was

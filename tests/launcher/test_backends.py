"""The backend seam (tfk8s.launcher.backends): each backend provides launch, volume and inspection; --dry-run
works for both (local: each process, its TF_CONFIG and environment); the stop verb and ensure-volume for both
(local: a real process and folder; Kubernetes: the fake API server of tests/fakes/kube_fixtures.py); the Kubernetes
options are checked once per launch and handed down typed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import yaml

pytest.register_assert_rewrite("tests.fakes.kube_fixtures")

from tests.fakes.kube_fixtures import NAMESPACE, FakeCluster
from tfk8s.core.cluster import ReplicaCounts
from tfk8s.core.job import TrainingJob
from tfk8s.launcher import backends
from tfk8s.launcher.kubernetes.settings import KubernetesParams, KubernetesSettings

pytest_plugins = ["tests.fakes.kube_fixtures"]
pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _outside_a_pod(monkeypatch, tmp_path):
    monkeypatch.delenv("TFK8S_LAUNCHER_POD_NAME", raising=False)
    monkeypatch.delenv("TFK8S_LAUNCHER_POD_UID", raising=False)
    monkeypatch.setattr("tfk8s.launcher.kubernetes.settings.SERVICEACCOUNT_NAMESPACE_FILE", tmp_path / "no-namespace")


@pytest.mark.parametrize("name", backends.BACKENDS)
def test_every_backend_says_what_it_provides(name):
    backend = backends.get_backend(name)
    assert backend.name == name
    for capability in (backends.Launch, backends.Volume, backends.Inspection):
        assert isinstance(backend, capability) and backends.provides(name, capability)
    assert backends.backend_for({"backend": name}) is backend
    assert backends.mounts_claim(name) is (name == "kubernetes")
    assert [b.name for b in backends.cluster_backends()] == ["kubernetes"]
    with pytest.raises(ValueError, match=r"backend must be one of \('local', 'kubernetes'\), got 'slurm'"):
        backends.get_backend("slurm")


def test_the_program_is_the_launchers_python_locally_and_the_images_in_a_cluster():
    argv = ("python", "-m", "trainer.task", "--epochs", "1")
    assert backends.get_backend("local").program(argv) == (sys.executable, "-m", "trainer.task", "--epochs", "1")
    assert backends.get_backend("kubernetes").program(argv) == argv


def test_local_dry_run_prints_each_process_with_its_tf_config_environment_and_command(capsys, tmp_path):
    """``python -m components.launch_training --dry-run --backend local``: one YAML document per process, with the
    real TF_CONFIG (one cluster spec on 127.0.0.1, each replica's own task), the contract's variables and the
    command with the launcher's interpreter; nothing started, nothing written."""
    from components import launch_training

    volume = tmp_path / "vol"
    launch_training.main(["--dry-run", "--backend", "local", "--data-dir", str(tmp_path / "data"),
                          "--volume-root", str(volume), "--run-id", "r7", "--chief", "1", "--workers", "2",
                          "--epochs", "3", "--batch-size", "48"])
    out, err = capsys.readouterr()
    docs = list(yaml.safe_load_all(out))
    assert [d["replica"] for d in docs] == ["chief-0", "worker-0", "worker-1"]
    configs = [json.loads(d["env"]["TF_CONFIG"]) for d in docs]
    assert [c["task"] for c in configs] == [{"type": "chief", "index": 0}, {"type": "worker", "index": 0},
                                            {"type": "worker", "index": 1}]
    cluster = configs[0]["cluster"]
    assert all(c["cluster"] == cluster for c in configs)
    assert sorted(cluster) == ["chief", "worker"] and len(cluster["chief"]) == 1 and len(cluster["worker"]) == 2
    addresses = cluster["chief"] + cluster["worker"]
    assert all(a.startswith("127.0.0.1:") and int(a.split(":")[1]) > 0 for a in addresses)
    assert len(set(addresses)) == 3
    train = volume / "runs" / "r7" / "train"
    chief, worker1 = docs[0], docs[2]
    assert chief["command"][:3] == [sys.executable, "-m", "trainer.task"]
    assert "--epochs" in chief["command"] and chief["command"][chief["command"].index("--epochs") + 1] == "3"
    assert (chief["env"]["TFK8S_JOB_NAME"], chief["env"]["TFK8S_REPLICA_TYPE"], worker1["env"]["TFK8S_REPLICA_INDEX"]) \
        == ("tfk8s-r7", "chief", "1")
    assert chief["env"]["TFK8S_DATA_DIR"] == str(tmp_path / "data")
    assert chief["env"]["TFK8S_CHECKPOINT_DIR"] == str(train / "checkpoints")
    assert chief["env"]["TFK8S_MODEL_DIR"] == str(train / "saved_model")
    assert worker1["env"]["TFK8S_MODEL_DIR"] != chief["env"]["TFK8S_MODEL_DIR"]  # a scratch dir of its own
    assert chief["env"]["PYTHONUNBUFFERED"] == "1" and "127.0.0.1" in chief["env"]["NO_PROXY"]
    assert "tfk8s-r7: 3 local processes on 127.0.0.1" in err
    assert not volume.exists()  # nothing written


def test_kubernetes_dry_run_is_unchanged_by_the_seam(capsys, tmp_path):
    from components import launch_training

    launch_training.main(["--dry-run", "--data-dir", "/mnt/tfk8s/d", "--run-id", "r8", "--chief", "1",
                          "--workers", "1", "--namespace", "ml", "--image", "img:2", "--pvc-name", "data"])
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("NetworkPolicy", "tfk8s-r8"), ("Service", "tfk8s-r8-chief-0"), ("Service", "tfk8s-r8-worker-0"),
        ("Job", "tfk8s-r8-chief-0"), ("Job", "tfk8s-r8-worker-0")]
    assert all(d["metadata"]["namespace"] == "ml" for d in docs)


def test_the_kubernetes_options_are_parsed_once_per_launch_and_handed_down_typed(monkeypatch, tmp_path):
    """The launch step reads its parameters once (tfk8s.steps.parameters.LaunchSpec.from_params), and the backend
    turns the typed Kubernetes parameters into KubernetesSettings once, in that reading; the record's namespace,
    the dry run and the run take that object (before, the check and the launch each built one)."""
    from tests.fakes.launching import launch

    calls: list[tuple] = []
    real = KubernetesSettings.resolve.__func__

    def counting(cls, params, **kw):
        calls.append((params, kw))
        return real(cls, params, **kw)

    monkeypatch.setattr(KubernetesSettings, "resolve", classmethod(counting))
    seen: list[object] = []
    kube = backends.get_backend("kubernetes")
    monkeypatch.setattr(type(kube), "dry_run", lambda self, job, options: seen.append(options) or
                        backends.DryRun([{"kind": "x"}]))
    out = launch({"chief": 1, "workers": 1, "pvc_name": "data", "namespace": "ml"},
                 data_dir="/mnt/tfk8s/d", volume_root="/mnt/tfk8s", run_id="r1",
                 backend="kubernetes", dry_run=True)
    assert out == [{"kind": "x"}]
    (options,) = seen
    assert isinstance(options, KubernetesSettings) and options.namespace == "ml"
    (params, kw), = calls  # once, from the typed parameters, the claim mounted where the steps mount it
    assert isinstance(params, KubernetesParams) and params.pvc_name == "data"
    assert kw == {"volume_mount_path": "/mnt/tfk8s"}


def _sleeper() -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    return proc


def test_local_stop_sends_sigterm_to_the_launcher_process_and_reads_a_gone_one_as_lost():
    local = backends.get_backend("local")
    proc = _sleeper()
    record = {"name": "tfk8s-r5", "backend": "local", "state": "Running",
              "launcher": {"pid": proc.pid, "host": socket.gethostname()}}
    try:
        assert local.launcher_lost(record) is False
        local.stop(record, None)
        assert proc.wait(timeout=10) == -signal.SIGTERM
        assert local.launcher_lost(record) is True
        assert local.launcher_lost({**record, "state": "Succeeded"}) is False
        local.stop(record, None)  # already gone: fine
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with pytest.raises(ValueError, match="runs on host elsewhere-7: run tfk8s delete there"):
        local.stop({**record, "launcher": {"pid": os.getpid(), "host": "elsewhere-7"}}, None)
    assert local.logs(record, ["worker-0"], None, follow=False, say=print, warn=print) is False
    assert local.events(record, None, print) == [] and local.live_jobs(None) == {}


def test_tfk8s_delete_stops_a_local_job_through_its_backend(tmp_path):
    from tfk8s.cmd import main
    from tfk8s.tracking import records

    proc = _sleeper()
    train = tmp_path / "runs" / "r6" / "train"
    records.write_record(train / "job.json", {
        "name": "tfk8s-r6", "backend": "local", "state": "Running", "created": time.time(),
        "replicas": {"worker": 1}, "replica_states": {"worker-0": "Running"},
        "launcher": {"pid": proc.pid, "host": socket.gethostname()}, "paths": {"train_dir": str(train)}})
    try:
        assert main(["delete", "r6", "--volume", str(tmp_path)]) == 0
        assert proc.wait(timeout=10) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert records.read_record(train / "job.json")["state"] == "Deleted"


def test_kubernetes_stop_deletes_every_object_of_the_job(cluster: FakeCluster):
    from tfk8s.launcher.kubernetes import render_manifests
    from tfk8s.launcher.kubernetes.api import KubeApi

    kube = backends.get_backend("kubernetes")
    settings = KubernetesSettings.from_params(namespace=NAMESPACE, image="img:1")
    job = TrainingJob("tfk8s-stopme", ReplicaCounts(chief=1, worker=1), ("python", "x"), stop_grace_s=0)
    other = TrainingJob("tfk8s-other", ReplicaCounts(worker=1), ("python", "x"), stop_grace_s=0)
    for manifest in [*render_manifests(job, settings), *render_manifests(other, settings)]:
        cluster.create(manifest)
    cluster.wait_pods("chief-0", "worker-0")
    api = KubeApi(cluster.api_client(), NAMESPACE)
    live = kube.live_jobs(api)
    assert sorted(live) == ["tfk8s-other", "tfk8s-stopme"]
    assert live["tfk8s-stopme"]["replicas"] == {"chief": 1, "worker": 1}
    kube.stop({"name": "tfk8s-stopme", "backend": "kubernetes"}, api)
    cluster.wait_for(lambda: all(not n.startswith("tfk8s-stopme") for names in cluster.remaining().values()
                                 for n in names), "every object of tfk8s-stopme deleted")
    assert "tfk8s-other-worker-0" in cluster.remaining()["jobs"]  # another job's objects stay
    assert kube.launcher_lost({"name": "tfk8s-stopme", "state": "Running"}) is False  # the cluster says it
    with pytest.raises(ValueError, match="cannot reach the cluster to delete tfk8s-stopme"):
        kube.stop({"name": "tfk8s-stopme"}, None)


def test_ensure_volume_on_both_backends(cluster: FakeCluster, tmp_path):
    root = tmp_path / "a" / "volume"
    assert backends.get_backend("local").ensure_volume(volume_root=str(root), pvc_name="") == {}
    assert root.is_dir()
    kube = backends.get_backend("kubernetes")
    cluster.add_event("PersistentVolumeClaim", "data", "WaitForFirstConsumer",
                      "waiting for first consumer to be created before binding", "Normal")
    status = kube.ensure_volume(volume_root="/mnt/tfk8s", pvc_name="data", namespace=NAMESPACE, create=True,
                                size="3Gi", api_client=cluster.api_client())
    assert (status["name"], status["namespace"], status["created"]) == ("data", NAMESPACE, True)
    (pvc,) = cluster.objects("persistentvolumeclaims")
    assert pvc["spec"]["resources"]["requests"]["storage"] == "3Gi"
    again = kube.ensure_volume(volume_root="/mnt/tfk8s", pvc_name="data", namespace=NAMESPACE,
                               api_client=cluster.api_client())
    assert again["created"] is False

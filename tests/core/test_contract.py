"""The training-program contract (tfk8s.core.contract): the per-replica environment and placeholders, pure and as
both backends hand them to the replicas (local: a fake replica printing what it got; Kubernetes: the Job)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from tfk8s.core import contract
from tfk8s.core.cluster import Replica, ReplicaCounts, ReplicaType
from tfk8s.core.job import TrainingJob
from tfk8s.launcher.kubernetes import render_manifests
from tfk8s.launcher.kubernetes.settings import KubernetesSettings
from tfk8s.launcher.local import run_local

FAKE = str(Path(__file__).resolve().parents[1] / "fakes" / "fake_replica.py")
CHIEF, W0, W1 = Replica(ReplicaType.CHIEF, 0), Replica(ReplicaType.WORKER, 0), Replica(ReplicaType.WORKER, 1)


def test_replica_env_gives_the_coordinator_the_real_model_dir_and_others_a_scratch_dir_of_their_own():
    chief = contract.replica_env("tfk8s-r1", CHIEF, CHIEF, "/v/runs/r1/train", "/v/runs/r1/data")
    assert {k: chief[k] for k in contract.CONTRACT_ENV} == {
        "TFK8S_JOB_NAME": "tfk8s-r1",
        "TFK8S_REPLICA_TYPE": "chief",
        "TFK8S_REPLICA_INDEX": "0",
        "TFK8S_DATA_DIR": "/v/runs/r1/data",
        "TFK8S_MODEL_DIR": "/v/runs/r1/train/saved_model",
        "TFK8S_CHECKPOINT_DIR": "/v/runs/r1/train/checkpoints",
        "TFK8S_TENSORBOARD_DIR": "/v/runs/r1/train/logs",
        "TFK8S_PROGRESS_FILE": "/v/runs/r1/train/progress/chief-0.json",
        "TFK8S_METRICS_FILE": "/v/runs/r1/train/metrics/chief-0.json",
    }
    assert set(chief) == {*contract.CONTRACT_ENV, *contract.PLATFORM_ENV}
    w1 = contract.replica_env("tfk8s-r1", W1, CHIEF, "/v/runs/r1/train", "/v/runs/r1/data")
    assert w1["TFK8S_MODEL_DIR"] == "/v/runs/r1/train/scratch/worker-1/saved_model"
    assert (w1["TFK8S_REPLICA_TYPE"], w1["TFK8S_REPLICA_INDEX"]) == ("worker", "1")
    assert w1["TFK8S_CHECKPOINT_DIR"] == chief["TFK8S_CHECKPOINT_DIR"]  # shared
    # without a chief, worker 0 is the coordinator
    assert contract.replica_env("j", W0, W0, "/t", "/d")["TFK8S_MODEL_DIR"] == "/t/saved_model"


def test_vertex_ai_and_sagemaker_variables_alias_the_contracts_folders():
    counts = ReplicaCounts(chief=1, worker=2, ps=1, evaluator=1)
    w1 = contract.replica_env("tfk8s-r1", W1, CHIEF, "/v/runs/r1/train", "/v/runs/r1/data", counts)
    assert {k: w1[k] for k in contract.PLATFORM_ENV} == {
        # Vertex AI: folder URIs end in "/" (<base output dir>/model/), data URIs are wildcards of a split's files
        "AIP_MODEL_DIR": "/v/runs/r1/train/scratch/worker-1/saved_model/",  # this replica's, like TFK8S_MODEL_DIR
        "AIP_CHECKPOINT_DIR": "/v/runs/r1/train/checkpoints/",
        "AIP_TENSORBOARD_LOG_DIR": "/v/runs/r1/train/logs/",
        "AIP_TRAINING_DATA_URI": "/v/runs/r1/data/train-*",
        "AIP_TEST_DATA_URI": "/v/runs/r1/data/test-*",
        "AIP_DATA_FORMAT": "tfrecord",
        "CLOUD_ML_JOB_ID": "tfk8s-r1",
        # SageMaker: plain folders; every channel is the data folder; hosts in TF_CONFIG's order, without ports
        "SM_MODEL_DIR": "/v/runs/r1/train/scratch/worker-1/saved_model",
        "SM_CHANNEL_TRAIN": "/v/runs/r1/data",
        "SM_CHANNEL_TRAINING": "/v/runs/r1/data",
        "SM_CHANNEL_TEST": "/v/runs/r1/data",
        "SM_CHANNEL_TESTING": "/v/runs/r1/data",
        "SM_CHANNELS": '["test","testing","train","training"]',
        "SM_OUTPUT_DATA_DIR": "/v/runs/r1/train/logs",
        "SM_HOSTS": '["chief-0","worker-0","worker-1","ps-0"]',
        "SM_CURRENT_HOST": "worker-1",
        "SM_RESOURCE_CONFIG": '{"current_host":"worker-1","hosts":["chief-0","worker-0","worker-1","ps-0"]}',
    }
    # hosts[0] is the coordinator (SageMaker programs save there): worker-0 without a chief
    w0 = contract.replica_env("j", W0, W0, "/t", "/d", ReplicaCounts(worker=2))
    assert (json.loads(w0["SM_HOSTS"]), w0["SM_CURRENT_HOST"]) == (["worker-0", "worker-1"], "worker-0")
    assert w0["SM_MODEL_DIR"] == w0["TFK8S_MODEL_DIR"] == "/t/saved_model" and w0["AIP_MODEL_DIR"] == "/t/saved_model/"
    # the evaluator is not in the training cluster, in SM_HOSTS as in TF_CONFIG; one process: itself alone
    ev = contract.replica_env("j", Replica(ReplicaType.EVALUATOR, 0), CHIEF, "/t", "/d", counts)
    assert (ev["SM_CURRENT_HOST"], "evaluator-0" in json.loads(ev["SM_HOSTS"])) == ("evaluator-0", False)
    assert contract.replica_env("j", W0, W0, "/t", "/d")["SM_HOSTS"] == '["worker-0"]'
    # an alias follows a changed TFK8S_* value (the evaluate step's eval_command points the model dir elsewhere)
    moved = {**w0, "TFK8S_MODEL_DIR": "/vol/models/m/3"}
    assert contract.platform_aliases(moved)["AIP_MODEL_DIR"] == "/vol/models/m/3/"
    assert contract.platform_aliases(moved)["SM_MODEL_DIR"] == "/vol/models/m/3"
    assert not set(contract.PLATFORM_ENV) & set(contract.CONTRACT_ENV)


def test_placeholders_are_substituted_and_double_braces_stay_literal():
    env = contract.replica_env("tfk8s-r1", W1, CHIEF, "/t", "/d")
    cmd = ("python", "train.py", "--model_dir", "{model_dir}", "--tag={job_name}/{replica_type}-{replica_index}",
           '{{"literal": 1}}', "--data={data_dir}", "--ckpt", "{checkpoint_dir}", "--tb", "{tensorboard_dir}")
    assert contract.substitute(cmd, env) == (
        "python", "train.py", "--model_dir", "/t/scratch/worker-1/saved_model", "--tag=tfk8s-r1/worker-1",
        '{"literal": 1}', "--data=/d", "--ckpt", "/t/checkpoints", "--tb", "/t/logs")


@pytest.mark.parametrize("arg, message", [
    ("--out={modeldir}", r"unknown placeholder \{modeldir\}: the known ones are \{data_dir\}, \{model_dir\}"),
    ('{"a": 1}', r'is not a placeholder.*literal brace'),
    ("{model_dir", r"'\{model_dir'.*literal brace as '\{\{'"),
    ("}", r"literal brace"),
    ("{model_dir!r}", r"is not a placeholder"),
    ("{}", r"is not a placeholder"),
])
def test_a_bad_placeholder_names_itself_and_the_known_ones(arg, message):
    with pytest.raises(contract.PlaceholderError, match=message):
        contract.check_command(["python", arg])
    with pytest.raises(ValueError, match=message):  # before any replica exists
        TrainingJob("j", ReplicaCounts(worker=1), ("python", arg))


def test_command_parameter_is_a_json_list_or_a_shell_line():
    assert contract.parse_command("") == ()
    assert contract.parse_command('["python", "my train.py", "--x", "{model_dir}"]') == (
        "python", "my train.py", "--x", "{model_dir}")
    assert contract.parse_command("python 'my train.py' --x {model_dir}") == (
        "python", "my train.py", "--x", "{model_dir}")
    with pytest.raises(ValueError, match="JSON list of strings"):
        contract.parse_command("[1, 2]")
    with pytest.raises(ValueError, match="not valid JSON"):
        contract.parse_command('["python",')
    with pytest.raises(ValueError, match="cannot be split like a shell line"):
        contract.parse_command("python 'train.py")
    assert contract.local_python(("python3", "t.py")) == (sys.executable, "t.py")
    assert contract.local_python(("/usr/bin/python3", "t.py")) == ("/usr/bin/python3", "t.py")


def test_metrics_file_stays_valid_json_and_non_finite_values_are_said_in_words(tmp_path):
    path = contract.write_metrics(tmp_path / "m" / "chief-0.json",
                                  {"accuracy": 0.5, "loss": math.nan, "big": math.inf, "diverged": True,
                                   "epochs": 2, "note": "x"})
    raw = path.read_text()
    assert "NaN" in raw and json.loads(raw)["loss"] == "NaN"  # a string: valid JSON for every reader
    reported, numbers, notes = contract.read_metrics(path)
    assert numbers == {"accuracy": 0.5, "epochs": 2.0}
    assert reported == {"accuracy": 0.5, "loss": "NaN", "big": "Infinity", "diverged": True, "epochs": 2,
                        "note": "x"}
    assert notes == ["loss is NaN (not a finite number): left out of the metrics",
                     "big is infinite (not a finite number): left out of the metrics"]
    # a bare NaN written by json.dumps is read too
    (tmp_path / "bare.json").write_text('{"loss": NaN, "accuracy": 0.9}')
    assert contract.read_metrics(tmp_path / "bare.json")[1] == {"accuracy": 0.9}
    assert contract.read_metrics(tmp_path / "missing.json") == ({}, {}, [])
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(ValueError, match="must hold one JSON object"):
        contract.read_metrics(tmp_path / "list.json")


def _printed(lines: list[str], label: str, key: str):
    return json.loads(next(line.split(f"{key}=", 1)[1] for line in lines if line.startswith(f"[{label}] {key}=")))


def test_local_backend_hands_every_replica_its_contract_env_and_command(tmp_path, monkeypatch):
    train, data = tmp_path / "train", tmp_path / "data"
    # the chief ends the job only once the others have started (else ps-0 may be stopped before it printed)
    monkeypatch.setenv("FAKE_PIDFILE_DIR", str(tmp_path))
    monkeypatch.setenv("FAKE_BEHAVIOUR", json.dumps({"chief-0": "await:worker-0,ps-0"}))
    # sys.executable, not "python": the replicas must import tfk8s from this environment (a bare "python" is
    # whatever PATH finds; the pipeline maps it with contract.local_python, which this test does not go through)
    job = TrainingJob("tfk8s-r1", ReplicaCounts(chief=1, worker=1, ps=1), (
        sys.executable, FAKE, "--model_dir", "{model_dir}", "--who", "{replica_type}:{replica_index}", "{{x}}"),
        train_dir=str(train), data_dir=str(data), grace_period_s=0)
    lines: list[str] = []
    run_local(job, log_sink=lines.append, stop_grace_s=2)
    for label, replica in (("chief-0", CHIEF), ("worker-0", W0), ("ps-0", Replica(ReplicaType.PS, 0))):
        assert _printed(lines, label, "TFK8S_ENV") == contract.replica_env("tfk8s-r1", replica, CHIEF, train, data,
                                                                           job.counts)
    assert _printed(lines, "chief-0", "ARGV") == ["--model_dir", str(train / "saved_model"), "--who", "chief:0",
                                                 "{x}"]
    assert _printed(lines, "worker-0", "ARGV")[1] == str(train / "scratch" / "worker-0" / "saved_model")


def test_kubernetes_job_carries_the_contract_env_next_to_tf_config_and_a_per_replica_command():
    job = TrainingJob("tfk8s-r1", ReplicaCounts(chief=1, worker=2, ps=1),
                      ("python", "train.py", "--model_dir", "{model_dir}"), env={"TF_USE_LEGACY_KERAS": "1"},
                      train_dir="/mnt/tfk8s/runs/r1/train", data_dir="/mnt/tfk8s/runs/r1/data")
    settings = KubernetesSettings.from_params(
        namespace="ml", image="img:1", pvc_name="tfk8s-data",
        replica_overrides='{"ps": {"command": ["python", "ps.py", "--index", "{replica_index}"]}}')
    jobs = {m["metadata"]["name"]: m for m in render_manifests(job, settings) if m["kind"] == "Job"}
    for name, replica in (("tfk8s-r1-chief-0", CHIEF), ("tfk8s-r1-worker-1", W1)):
        c = jobs[name]["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in c["env"]}
        want = contract.replica_env("tfk8s-r1", replica, CHIEF, "/mnt/tfk8s/runs/r1/train", "/mnt/tfk8s/runs/r1/data",
                                    job.counts)
        assert {k: env[k] for k in want} == want and json.loads(env["SM_HOSTS"]) == [
            "chief-0", "worker-0", "worker-1", "ps-0"]
        assert env["TF_USE_LEGACY_KERAS"] == "1" and json.loads(env["TF_CONFIG"])["task"]["type"] == replica.replica_type.value
        assert c["command"] == ["python", "train.py", "--model_dir", want["TFK8S_MODEL_DIR"]]
    ps = jobs["tfk8s-r1-ps-0"]["spec"]["template"]["spec"]["containers"][0]
    assert ps["command"] == ["python", "ps.py", "--index", "0"]
    # SM_NUM_GPUS: the replica type's gpus, which only this backend knows
    gpus = KubernetesSettings.from_params(image="img:1", gpus=1, replica_overrides='{"ps": {"gpus": 0}}')
    jobs = {m["metadata"]["name"]: m for m in render_manifests(job, gpus) if m["kind"] == "Job"}
    assert {n: next(e["value"] for e in j["spec"]["template"]["spec"]["containers"][0]["env"]
                    if e["name"] == "SM_NUM_GPUS") for n, j in jobs.items()} == {
        "tfk8s-r1-chief-0": "1", "tfk8s-r1-worker-0": "1", "tfk8s-r1-worker-1": "1", "tfk8s-r1-ps-0": "0"}


def test_kubernetes_settings_refuse_env_that_would_hide_the_contract_and_bad_override_placeholders():
    with pytest.raises(ValueError, match=r"env must not set \['TFK8S_MODEL_DIR'\]"):
        KubernetesSettings.from_params(image="i", replica_overrides='{"worker": {"env": {"TFK8S_MODEL_DIR": "/x"}}}')
    with pytest.raises(ValueError, match=r"env must not set \['SM_HOSTS'\]"):
        KubernetesSettings.from_params(image="i", replica_overrides='{"ps": {"env": {"SM_HOSTS": "[]"}}}')
    with pytest.raises(ValueError, match=r"unknown placeholder \{nope\}"):
        KubernetesSettings.from_params(image="i", replica_overrides='{"ps": {"command": ["x", "{nope}"]}}')


def test_remove_scratch_leaves_the_coordinators_model(tmp_path):
    (tmp_path / "saved_model").mkdir()
    (tmp_path / "scratch" / "worker-1" / "saved_model").mkdir(parents=True)
    contract.remove_scratch(tmp_path)
    contract.remove_scratch(tmp_path)  # idempotent
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved_model"]

"""The launch side without TensorFlow: typed launch specs, the user's data folder, the coordinator's metrics
becoming the training summary, the gate on any reported metric, and the user's eval_command."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest

from tfk8s.core import contract
from tfk8s.core.cluster import ReplicaCounts
from tfk8s.core.data_format import inspect_data_dir
from tfk8s.core.job import LaunchResult, TrainingJob
from tfk8s.steps.eval_command import run_eval_command
from tfk8s.steps.evaluation import Thresholds, builtin_misfit, gate
from tfk8s.steps.export_model import default_model_name
from tfk8s.steps.launch_training import NoSavedModelError, collect, steps_warning
from tfk8s.steps.parameters import LaunchSpec
from tfk8s.steps.prepare_dataset import prepare_dataset  # noqa: F401 (the layout's writer)


def test_launch_spec_groups_the_flat_parameters_into_typed_specs():
    spec = LaunchSpec.from_params({"workers": 3, "chief": 1, "epochs": 4, "command": "python t.py --x {model_dir}",
                                   "kubernetes": {"cpu": "2", "node_selector": {"pool": "gpu"}},
                                   "image": "me/train:1", "max_restarts": 5, "unrelated": 1}, backend="local", volume_root="/tmp/v")
    assert spec.replicas == ReplicaCounts(chief=1, worker=3)
    assert spec.trainer.epochs == 4 and spec.command == ("python", "t.py", "--x", "{model_dir}")
    assert not spec.is_builtin_trainer
    k = spec.kubernetes
    assert (k.cpu, k.node_selector, k.image, k.memory) == ("2", {"pool": "gpu"}, "me/train:1", "2Gi")
    assert spec.run_policy.max_restarts == 5  # both backends' budget: not a Kubernetes setting
    with pytest.raises(ValueError, match=r"kubernetes must not set \['max_restarts'\]"):
        LaunchSpec.from_params({"kubernetes": {"max_restarts": 1}}, backend="local", volume_root="/tmp/v")
    assert LaunchSpec.from_params({}, backend="local", volume_root="/tmp/v").is_builtin_trainer
    with pytest.raises(ValueError, match=r"kubernetes must not set \['image'\]"):
        LaunchSpec.from_params({"kubernetes": {"image": "x"}}, backend="local", volume_root="/tmp/v")
    with pytest.raises(ValueError, match="ps=1 needs chief=1"):
        LaunchSpec.from_params({"ps": 1}, backend="local", volume_root="/tmp/v")


def test_a_users_data_folder_is_checked_before_any_replica(tmp_path):
    with pytest.raises(ValueError, match=r"data_dir .*/nope does not exist: prepare it on the volume"):
        inspect_data_dir(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="is empty"):
        inspect_data_dir(tmp_path / "empty")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match=r"holds neither metadata.json, a tf.data snapshot nor TFRecord files "
                                         r"\(it has \['notes.txt'\]\)"):
        inspect_data_dir(tmp_path / "other")
    (tmp_path / "snap").mkdir()
    (tmp_path / "snap" / "dataset_spec.pb").write_bytes(b"x")
    assert inspect_data_dir(tmp_path / "snap")["format"] == "tf.data snapshot"
    (tmp_path / "rec" / "train").mkdir(parents=True)
    (tmp_path / "rec" / "train" / "part-0.tfrecord.gz").write_bytes(b"x")
    assert inspect_data_dir(tmp_path / "rec") == {"path": str(tmp_path / "rec"), "format": "tfrecord",
                                                  "dataset": "rec", "splits": {}}
    # metadata.json naming a shard that is not there
    md = {"format_version": 1, "dataset": "mine", "version": "1", "image_shape": [2, 2, 1], "image_dtype": "uint8",
          "num_classes": 2, "label_names": ["a", "b"],
          "splits": {"train": {"num_examples": 4, "files": ["train-00000-of-00001.tfrecord"]}}}
    (tmp_path / "md").mkdir()
    (tmp_path / "md" / "metadata.json").write_text(json.dumps(md))
    with pytest.raises(ValueError, match=r"lists 1 missing or empty shard files of split 'train'"):
        inspect_data_dir(tmp_path / "md")
    (tmp_path / "md" / "train-00000-of-00001.tfrecord").write_bytes(b"x")
    info = inspect_data_dir(tmp_path / "md")
    assert (info["format"], info["dataset"], info["splits"]["train"]["num_examples"]) == ("tfk8s", "mine", 4)


def test_model_name_from_the_data_set_and_a_warning_for_a_handful_of_steps():
    assert default_model_name("mnist") == "mnist-cnn"
    assert default_model_name("fashion_mnist", builtin_trainer=False) == "fashion_mnist-model"
    assert default_model_name("my data/v2", builtin_trainer=False) == "my-data-v2-model"
    # on the console (a tfk8s: line), counting the trainer's steps (ceil: 3, not 2), suggesting a batch size the
    # parameter check accepts for the replicas it is split over
    warning = steps_warning(1500, 512, 2, replicas=2)
    assert warning.startswith("tfk8s: WARNING: 1500 training examples at global batch_size 512 give 3 steps per "
                              "epoch (6 in all)") and "--param batch_size=74, 21 steps per epoch" in warning
    from tfk8s.steps.parameters import problems

    assert problems({"chief": 0, "workers": 2, "ps": 0, "evaluator": 0, "batch_size": 74}) == []
    assert "--param batch_size=75, 20 steps per epoch)" in steps_warning(1500, 512, 2)
    assert steps_warning(60000, 512, 2) is None


def _job(tmp_path, **kw):
    return TrainingJob("tfk8s-r1", ReplicaCounts(worker=2), ("python", "train.py"), train_dir=str(tmp_path),
                       **kw)


def _result():
    return LaunchResult("tfk8s-r1", {"worker-0": 0, "worker-1": 0}, [], 12.5, 1, {"worker": ["a:1", "b:2"]})


def test_the_launch_step_writes_the_summary_from_the_coordinators_metrics_file(tmp_path):
    (tmp_path / "saved_model").mkdir()
    (tmp_path / "saved_model" / "saved_model.pb").write_bytes(b"x")
    contract.write_metrics(tmp_path / "metrics" / "worker-0.json",
                           {"accuracy": 0.91, "loss": math.nan, "diverged": True, "epochs": 3})
    contract.write_metrics(tmp_path / "metrics" / "worker-1.json", {"accuracy": 0.1})  # not the coordinator's
    lines: list[str] = []
    outcome = collect(_job(tmp_path), _result(), tmp_path, log_sink=lines.append)
    summary = json.loads((tmp_path / "training_summary.json").read_text())  # valid JSON: no bare NaN
    assert summary == outcome.summary
    assert summary["job"]["name"] == "tfk8s-r1" and summary["job"]["restarts"] == 1
    assert summary["job"]["replicas"] == {"chief": 0, "worker": 2, "ps": 0, "evaluator": 0}
    assert summary["metrics"] == {"accuracy": 0.91, "loss": "NaN", "diverged": True, "epochs": 3}
    assert outcome.metrics == {"accuracy": 0.91, "epochs": 3.0}
    assert "note: loss is NaN (not a finite number): left out of the metrics" in lines
    assert any("training diverged" in line for line in lines)


def test_no_saved_model_names_the_coordinator_and_what_it_left(tmp_path):
    (tmp_path / "saved_model").mkdir()
    (tmp_path / "saved_model" / "model.keras").write_bytes(b"x")
    with pytest.raises(NoSavedModelError, match=r"replica worker-0 \(the coordinator\) exited 0 but saved no "
                                                r"SavedModel .*it holds \['model.keras'\]") as e:
        collect(_job(tmp_path), _result(), tmp_path)
    # Keras 3 refuses model.save(dir): its SavedModel is model.export(dir), which the fix names
    assert "with Keras 3 export the model with model.export(os.environ['TFK8S_MODEL_DIR'])" in str(e.value)
    (tmp_path / "saved_model" / "model.keras").unlink()
    with pytest.raises(NoSavedModelError, match="nothing is there") as e:
        collect(_job(tmp_path), _result(), tmp_path)
    assert "model.save(os.environ['TFK8S_MODEL_DIR']) (tf-keras)" in str(e.value)


def test_the_gate_decides_on_any_reported_metric_and_never_crashes():
    t = Thresholds(min_accuracy=0.9)
    assert gate({"accuracy": 0.95}, t).blessed
    assert gate({"f1": 0.95}, t, "f1", source="eval_command").reasons == [
        "f1 0.9500 >= min_accuracy 0.9000 (eval_command)"]
    missing = gate({"loss": 0.1}, t, source="the training program's metrics")
    assert not missing.blessed and missing.reasons[0].startswith(
        "not blessed: gate_metric 'accuracy' was not reported by the training program's metrics (numeric metrics: "
        "['loss'])")
    assert "is not a finite number" in gate({"accuracy": math.nan}, t).reasons[0]
    assert gate({"accuracy": 0.99}, t, diverged=True).reasons == ["not blessed: training diverged (loss NaN)"]
    regressed = gate({"accuracy": 0.95}, Thresholds(0.9, 0.01), baseline_value=0.98)
    assert not regressed.blessed and "accuracy drop vs last blessed 0.9800 is +0.0300 >" in regressed.reasons[1]


class _Md:
    image_shape, image_dtype, num_classes = (28, 28, 1), "uint8", 10


def test_the_builtin_evaluation_runs_a_model_only_when_its_signature_fits_the_images():
    fits = {"inputs": {"image": {"dtype": "uint8", "shape": [None, 28, 28, 1]}},
            "outputs": {"probabilities": {"dtype": "float32", "shape": [None, 10]}}}
    assert builtin_misfit(fits, _Md) is None
    flat = {"inputs": {"x": {"dtype": "float32", "shape": [None, 784]}}, "outputs": fits["outputs"]}
    assert builtin_misfit(flat, _Md) == ("the model's serving signature takes float32 [None, 784]; the data set's "
                                         "images are uint8 [28, 28, 1]")
    assert builtin_misfit({}, _Md) == "the model has no 'serving_default' signature"
    assert "no metadata.json" in builtin_misfit(fits, None)
    five = {**fits, "outputs": {"p": {"dtype": "float32", "shape": [None, 5]}}}
    assert "not one probability per class ([None, 10])" in builtin_misfit(five, _Md)


def test_eval_command_gets_the_contract_and_its_failures_are_reasons_not_crashes(tmp_path):
    train, model, data = tmp_path / "train", tmp_path / "models" / "m" / "3", tmp_path / "data"
    for d in (train, model, data):
        d.mkdir(parents=True)
    # literal braces in a command are doubled ({{ }}), as in str.format
    report = ("import json, os; json.dump({{'accuracy': 0.97, 'model': os.environ['TFK8S_MODEL_DIR'], "
              "'data': '{data_dir}'}}, open(os.environ['TFK8S_METRICS_FILE'], 'w'))")
    lines: list[str] = []
    values, failure = run_eval_command(json.dumps(["python", "-c", report]), model_dir=str(model),
                                       data_dir=str(data), train_dir=str(train), log_sink=lines.append)
    assert (values, failure) == ({"accuracy": 0.97}, None)
    written = json.loads((train / "metrics" / "evaluation.json").read_text())
    assert (written["model"], written["data"]) == (str(model), str(data))
    assert lines[0].startswith(f"running eval_command: {sys.executable} -c")  # python -> this interpreter

    values, failure = run_eval_command("python -c 'import sys; print(\"bad input\"); sys.exit(3)'",
                                       model_dir=str(model), data_dir=str(data), train_dir=str(train),
                                       log_sink=lambda _: None)
    assert values == {} and failure.startswith("eval_command exited with code 3") and "bad input" in failure
    values, failure = run_eval_command("no-such-eval", model_dir=str(model), data_dir=str(data),
                                       train_dir=str(train), log_sink=lambda _: None)
    assert "could not start 'no-such-eval'" in failure
    values, failure = run_eval_command("python -c pass", model_dir=str(model), data_dir=str(data),
                                       train_dir=str(train), log_sink=lambda _: None)
    assert "reported no finite metric in TFK8S_METRICS_FILE" in failure
    values, failure = run_eval_command("python eval.py --out {nope}", model_dir=str(model), data_dir=str(data),
                                       train_dir=str(train), log_sink=lambda _: None)
    assert "unknown placeholder {nope}" in failure


def test_dry_run_renders_the_users_command_per_replica_with_the_kubernetes_settings(capsys):
    import yaml

    from components import launch_training

    launch_training.main(["--dry-run", "--data-dir", "/mnt/tfk8s/mine", "--run-id", "r9", "--chief", "1",
                          "--workers", "1", "--pvc-name", "tfk8s-data", "--image", "me/train:2",
                          "--command", "python /app/train.py --out {model_dir} --tag {replica_type}-{replica_index}",
                          "--kubernetes", '{"memory": "4Gi", "replica_overrides": {"chief": {"cpu": "3"}}}',
                          "--cpu", "2"])
    jobs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(capsys.readouterr().out) if d["kind"] == "Job"}
    chief = jobs["tfk8s-r9-chief-0"]["spec"]["template"]["spec"]["containers"][0]
    worker = jobs["tfk8s-r9-worker-0"]["spec"]["template"]["spec"]["containers"][0]
    assert chief["command"] == ["python", "/app/train.py", "--out", "/mnt/tfk8s/runs/r9/train/saved_model",
                                "--tag", "chief-0"]
    assert worker["command"][3] == "/mnt/tfk8s/runs/r9/train/scratch/worker-0/saved_model"
    assert chief["image"] == "me/train:2"
    assert chief["resources"]["requests"] == {"cpu": "3", "memory": "4Gi"}
    assert worker["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}
    env = {e["name"]: e["value"] for e in worker["env"]}
    assert env["TFK8S_DATA_DIR"] == "/mnt/tfk8s/mine" and env["TFK8S_REPLICA_TYPE"] == "worker"


def test_the_builtin_trainer_refuses_a_data_folder_without_metadata_before_any_replica(tmp_path):
    from tests.fakes.launching import launch

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "part-0.tfrecord").write_bytes(b"x")
    with pytest.raises(ValueError, match=r"is a tfrecord folder without metadata.json, which the built-in trainer "
                                         r"needs .*pass your own program as command"):
        launch({}, data_dir=str(tmp_path / "mine"), volume_root=str(tmp_path), run_id="r1",
               backend="local")
    assert not (tmp_path / "runs").exists()


def test_prepare_step_checks_a_users_data_dir_relative_to_the_volume_instead_of_preparing(tmp_path):
    from tfk8s.steps.prepare_dataset import prepare_dataset_step

    (tmp_path / "datasets" / "mine").mkdir(parents=True)
    (tmp_path / "datasets" / "mine" / "snapshot.metadata").write_bytes(b"x")
    args = {"dataset_name": "mnist", "tfds_data_dir": "", "volume_root": str(tmp_path), "run_id": "r1",
            "num_shards": 0, "num_workers": 2, "max_examples": 0}
    md = prepare_dataset_step(**args, data_dir="datasets/mine")
    assert (md["path"], md["format"], md["dataset"]) == (str(tmp_path / "datasets" / "mine"), "tf.data snapshot",
                                                         "mine")
    assert not (tmp_path / "runs").exists()  # nothing prepared
    with pytest.raises(ValueError, match=r"data_dir .*datasets/missing does not exist"):
        prepare_dataset_step(**args, data_dir="datasets/missing")


def test_the_local_cli_checks_a_users_data_dir_on_the_volume_before_anything_runs(tmp_path):
    from pipelines.train import _check_params

    (tmp_path / "t.py").write_text("")  # the program is checked too with --local: it must be there
    program = f"command=python {tmp_path / 't.py'}"
    with pytest.raises(SystemExit, match=r"data_dir .*/vol/mine does not exist"):
        _check_params(["data_dir=mine", program], local=True, volume=tmp_path / "vol")
    (tmp_path / "vol" / "mine").mkdir(parents=True)
    (tmp_path / "vol" / "mine" / "x.tfrecord").write_bytes(b"x")
    _check_params(["data_dir=mine", program, "dataset_name=not-a-tfds-name"], local=True,
                  volume=tmp_path / "vol")  # dataset_name is not used with data_dir


def test_the_launch_step_creates_every_contract_folder_before_any_backend_starts(tmp_path, monkeypatch):
    """Issue 25 item 8 on the Kubernetes backend too: the launch step (which mounts the volume where the replicas
    do) creates each replica's TFK8S_MODEL_DIR and its AIP_/SM_ aliases before it hands the job to the backend."""
    from tfk8s.core.cluster import Replica, ReplicaType
    from tfk8s.core.errors import LaunchError
    from tfk8s.steps.launch_training import run_job

    train = tmp_path / "runs" / "r1" / "train"
    seen: dict[str, bool] = {}

    class Backend:  # stands for the Kubernetes backend: records what exists when it is handed the job
        name = "kubernetes"
        keeps_replica_logs = True
        local_paths = False

        def options(self, kubernetes, volume_root):
            return None

        def namespace(self, _options):
            return "ml"

        def run(self, job, _sink, _options):
            for replica in job.counts.replicas():
                env = contract.replica_env(job.name, replica, Replica(ReplicaType.CHIEF, 0), train, job.data_dir,
                                           job.counts)
                for name in ("TFK8S_MODEL_DIR", "AIP_MODEL_DIR", "SM_MODEL_DIR", "TFK8S_CHECKPOINT_DIR",
                             "SM_OUTPUT_DATA_DIR", "AIP_TENSORBOARD_LOG_DIR"):
                    seen[f"{replica.label} {name}"] = Path(env[name]).is_dir()
            raise LaunchError("stop here")

    job = TrainingJob("tfk8s-r1", ReplicaCounts(chief=1, worker=2, ps=1), ("python", "t.py"), train_dir=str(train),
                      data_dir=str(tmp_path / "data"))
    with pytest.raises(LaunchError, match="stop here"):
        run_job(job, Backend(), train)
    assert len(seen) == 4 * 6 and all(seen.values()), [k for k, v in seen.items() if not v]
    assert contract.job_folders(job.name, job.counts, train, job.data_dir)[:4] == [
        train / "saved_model", train / "checkpoints", train / "logs", train / "scratch" / "worker-0" / "saved_model"]


def test_the_launch_steps_cli_imports_no_kfp_and_its_kubernetes_dry_run_is_the_same_as_under_kfp(capsys):
    # issue 26: KFP's import (0.6 s of CPU) came before the launcher pod created the first replica
    import subprocess

    argv = ["--dry-run", "--data-dir", "/mnt/tfk8s/mine", "--run-id", "r9", "--workers", "2", "--pvc-name", "tfk8s-data"]
    code = ("import runpy, sys; sys.argv = ['launch_training', *sys.argv[1:]]; "
            "runpy.run_module('components.launch_training', run_name='__main__', alter_sys=True); "
            "print('KFP IMPORTED' if 'kfp' in sys.modules else '', file=sys.stderr)")
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=repo, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(repo)}, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "KFP IMPORTED" not in proc.stderr
    from components import launch_training  # imported by name, as KFP's executor does: the real component

    assert type(launch_training.launch_training).__module__.startswith("kfp")
    launch_training.main(argv)
    assert proc.stdout == capsys.readouterr().out

"""The example programs (examples/): each trains on a real MNIST subset through the local launcher with 2
workers and leaves what the contract asks (a SavedModel with a serving signature in the coordinator's
TFK8S_MODEL_DIR); each renders the right Kubernetes Jobs; each documents the exact `make run` line. The Vertex AI
and SageMaker programs read only their platform's variables, run through the launch step's `command` and are
exported from where the alias pointed."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.trainer.test_task import REPO
from tfk8s.core.cluster import ReplicaCounts
from tfk8s.core.job import TrainingJob

EXAMPLES = {
    "keras_mwms": ReplicaCounts(worker=2),
    "runtime_resnet": ReplicaCounts(worker=2),
    "pss_custom_loop": ReplicaCounts(chief=1, worker=2, ps=1),
    "vertex_ai": ReplicaCounts(worker=2),
    "sagemaker": ReplicaCounts(worker=2),
}
ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


def _job(example: str, train: Path, data: Path, *args: str, python: str = sys.executable) -> TrainingJob:
    counts = EXAMPLES[example]
    return TrainingJob(name=f"example-{example.replace('_', '-')}", counts=counts,
                       command=(python, f"examples/{example}/train.py", *args), env=ENV, timeout_s=240,
                       train_dir=str(train), data_dir=str(data), grace_period_s=0.0 if counts.ps else 30.0)


def _run(job: TrainingJob) -> list[str]:
    from tfk8s.launcher.local import run_local

    lines: list[str] = []
    result = run_local(job, log_sink=lines.append, cwd=REPO)
    coordinator = "chief-0" if job.counts.chief else "worker-0"
    assert result.exit_codes.get(coordinator) == 0, "\n".join(lines[-40:])
    return lines


def _serving_input(saved_model: Path) -> tuple[str, list]:
    from tfk8s.steps.model_versions import serving_signature

    (spec,) = serving_signature(saved_model)["inputs"].values()
    return spec["dtype"], spec["shape"]


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_each_example_documents_its_make_run_line_and_an_image_from_the_project_image(example):
    text = (REPO / "examples" / example / "train.py").read_text()
    line = re.search(r'make run ARGS="(.*)"', text)
    assert line and f"--param command='python examples/{example}/train.py" in line[1]
    counts = EXAMPLES[example]
    for param, value in (("chief", counts.chief), ("workers", counts.worker), ("ps", counts.ps)):
        if value:
            assert f"--param {param}={value}" in line[1]
    assert "FROM ghcr.io/tfk8s/tfk8s:0.1.0" in text


def test_the_tutorial_style_example_imports_nothing_of_tfk8s():
    text = (REPO / "examples" / "keras_mwms" / "train.py").read_text()
    assert not re.search(r"^\s*(import|from)\s+tfk8s", text, re.MULTILINE)
    assert set(re.findall(r'"(TFK8S_[A-Z_]+|TF_CONFIG)"', text)) == {"TF_CONFIG", "TFK8S_DATA_DIR", "TFK8S_MODEL_DIR"}


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_each_example_renders_jobs_that_run_it_with_the_contract(example, tmp_path):
    from tfk8s.launcher.kubernetes import render_manifests
    from tfk8s.launcher.kubernetes.settings import KubernetesSettings

    job = _job(example, Path("/mnt/tfk8s/runs/r1/train"), Path("/mnt/tfk8s/runs/r1/data"), "--epochs", "1",
               python="python")
    objects = render_manifests(job, KubernetesSettings.from_params(image="my/image:1", pvc_name="data"))
    jobs = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Job"}
    assert len(jobs) == EXAMPLES[example].total
    for name, obj in jobs.items():
        (container,) = obj["spec"]["template"]["spec"]["containers"]
        argv = [*container.get("command", []), *container.get("args", [])]
        assert argv == ["python", f"examples/{example}/train.py", "--epochs", "1"], name
        env = {e["name"]: e.get("value") for e in container["env"]}
        label = name.rsplit("-", 2)[-2:]  # <job>-<type>-<index>
        assert env["TFK8S_REPLICA_TYPE"] == label[0] and env["TFK8S_REPLICA_INDEX"] == label[1]
        assert env["TFK8S_DATA_DIR"] == "/mnt/tfk8s/runs/r1/data"
        coordinator = label == (["chief", "0"] if EXAMPLES[example].chief else ["worker", "0"])
        assert env["TFK8S_MODEL_DIR"] == ("/mnt/tfk8s/runs/r1/train/saved_model" if coordinator else
                                          f"/mnt/tfk8s/runs/r1/train/scratch/{'-'.join(label)}/saved_model")


@pytest.mark.slow
def test_tutorial_style_keras_example_trains_on_two_workers_and_saves_from_each(tmp_path, mnist_subset_dir):
    train = tmp_path / "train"
    lines = _run(_job("keras_mwms", train, mnist_subset_dir, "--epochs", "1", "--steps_per_epoch", "12",
                      "--per_worker_batch", "64"))
    finals = {ln.split("]")[0] for ln in lines if "final accuracy" in ln}
    assert finals == {"[worker-0", "[worker-1"}
    accuracy = float(next(ln for ln in lines if ln.startswith("[worker-0] final accuracy")).split()[-1])
    assert accuracy > 0.5, accuracy  # 12 steps of 128; chance is 0.1
    assert _serving_input(train / "saved_model") == ("float32", [None, 28, 28, 1])  # its own preprocessing
    assert (train / "scratch" / "worker-1" / "saved_model" / "saved_model.pb").is_file()  # its own scratch dir
    assert not (train / "metrics").exists()  # reports nothing: it knows only the contract's variables


@pytest.mark.slow
def test_runtime_example_trains_a_resnet_on_two_workers_and_reports_its_metrics(tmp_path, mnist_subset_dir):
    from tfk8s.core.contract import read_metrics
    from tfk8s.core.progress import read_progress

    train = tmp_path / "train"
    lines = _run(_job("runtime_resnet", train, mnist_subset_dir, "--epochs", "1", "--steps_per_epoch", "25",
                      "--batch_size", "64"))
    assert {ln.split("]")[0] for ln in lines if "] epoch 1/1:" in ln} == {"[worker-0", "[worker-1"}
    _, numbers, notes = read_metrics(train / "metrics" / "worker-0.json")
    assert numbers["accuracy"] > 0.3 and numbers["epochs"] == 1 and notes == []  # chance 0.1; measured ~0.55
    assert _serving_input(train / "saved_model") == ("uint8", [None, 28, 28, 1])  # fits the built-in evaluation
    from tfk8s.steps.evaluation import evaluate_saved_model

    assert evaluate_saved_model(train / "saved_model", mnist_subset_dir).accuracy > 0.3  # test split, inference mode
    assert not (train / "scratch" / "worker-1" / "saved_model").exists()  # runtime.save threw it away
    assert read_progress(train / "progress" / "worker-1.json").state == "done"
    assert sorted(p.name for p in (train / "checkpoints").glob("ckpt-*.index")) == ["ckpt-1.index"]


@pytest.mark.slow
def test_custom_loop_example_trains_under_parameter_servers_and_the_chief_saves(tmp_path, mnist_subset_dir):
    from tfk8s.core.contract import read_metrics

    train = tmp_path / "train"
    lines = _run(_job("pss_custom_loop", train, mnist_subset_dir, "--epochs", "1", "--steps_per_epoch", "40",
                      "--batch_size", "64"))
    assert [ln.split()[0] for ln in lines if "] epoch 1/1:" in ln] == ["[chief-0]"]
    assert {ln.split("]")[0] for ln in lines if "serving grpc://" in ln} == {"[worker-0", "[worker-1", "[ps-0"}
    _, numbers, _ = read_metrics(train / "metrics" / "chief-0.json")
    assert numbers["accuracy"] > 0.3, numbers  # 40 asynchronous steps of 64; chance 0.1
    from tfk8s.core.progress import read_progress

    done = read_progress(train / "progress" / "chief-0.json")  # runtime.progress from the custom loop
    assert (done.state, done.epoch, done.step, done.steps) == ("done", 1, 40, 40)
    assert _serving_input(train / "saved_model") == ("uint8", [None, 28, 28, 1])


@pytest.mark.parametrize("example, names", [
    ("vertex_ai", {"TF_CONFIG", "AIP_TRAINING_DATA_URI", "AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR",
                   "AIP_TENSORBOARD_LOG_DIR"}),
    ("sagemaker", {"SM_MODEL_DIR", "SM_CHANNEL_TRAIN", "SM_HOSTS", "SM_CURRENT_HOST"}),
])
def test_the_platform_examples_read_their_platforms_variables_only_and_tfk8s_sets_each(example, names):
    from tfk8s.core import contract

    text = (REPO / "examples" / example / "train.py").read_text()
    assert not re.search(r"^\s*(import|from)\s+tfk8s", text, re.MULTILINE)
    assert set(re.findall(r'"((?:TFK8S|AIP|SM|CLOUD_ML)_[A-Z_]+|TF_CONFIG)"', text)) == names - {"TF_CONFIG"}
    assert names - {"TF_CONFIG"} <= set(contract.PLATFORM_ENV)


def _launch_and_export(tmp_path, data_dir, command):
    """The launch step with ``command`` on 2 local workers, then the export step on what it found."""
    from tests.fakes.launching import launch
    from tfk8s.steps.export_model import export_model_step

    volume = tmp_path / "vol"
    lines: list[str] = []
    try:
        outcome = launch({"command": command, "workers": 2},
                         data_dir=str(data_dir), volume_root=str(volume), run_id="r1", backend="local",
                         log_sink=lines.append)
    except Exception:
        print("\n".join(lines[-40:]))
        raise
    exported = export_model_step(saved_model_dir=outcome.saved_model_dir, volume_root=str(volume), model_name="m")
    return volume / "runs" / "r1" / "train", outcome, exported, lines


@pytest.mark.slow
def test_a_vertex_ai_program_runs_unchanged_on_two_workers_and_is_exported(tmp_path, mnist_subset_dir):
    from tfk8s.steps.evaluation import evaluate_saved_model

    train, outcome, exported, lines = _launch_and_export(
        tmp_path, mnist_subset_dir,
        f"python {REPO}/examples/vertex_ai/train.py --epochs 1 --steps_per_epoch 15 --per_worker_batch 64")
    assert {ln.split("]")[0] for ln in lines if "final accuracy" in ln} == {"[worker-0", "[worker-1"}
    assert outcome.saved_model_dir == str(train / "saved_model")  # AIP_MODEL_DIR of worker-0, the coordinator
    assert (exported.version, Path(exported.path)) == (1, tmp_path / "vol" / "models" / "m" / "1")
    assert _serving_input(Path(exported.path)) == ("uint8", [None, 28, 28, 1])
    assert evaluate_saved_model(exported.path, mnist_subset_dir).accuracy > 0.5  # 15 steps of 128; chance 0.1
    assert list((train / "logs" / "train").glob("events.out.tfevents.*"))  # AIP_TENSORBOARD_LOG_DIR
    assert (train / "checkpoints").is_dir()  # AIP_CHECKPOINT_DIR: BackupAndRestore, removed after success


@pytest.mark.slow
def test_a_sagemaker_program_runs_unchanged_on_two_workers_and_is_exported(tmp_path, mnist_subset_dir):
    train, outcome, exported, lines = _launch_and_export(
        tmp_path, mnist_subset_dir,
        f"python {REPO}/examples/sagemaker/train.py --epochs 1 --steps-per-epoch 15 --batch-size 64")
    hosts = "['worker-0', 'worker-1']"
    assert sorted(ln.split("] ", 1)[1].split(":")[0] for ln in lines if "final accuracy" in ln) == [
        f"worker-0 of {hosts}", f"worker-1 of {hosts}"]
    accuracy = float(next(ln for ln in lines if "final accuracy" in ln).split()[-1])
    assert accuracy > 0.3, accuracy  # the mean over 15 steps of 128 (measured 0.48); chance 0.1
    assert outcome.saved_model_dir == str(train / "saved_model")  # SM_MODEL_DIR of hosts[0], the coordinator
    assert (exported.version, _serving_input(Path(exported.path))) == (1, ("float32", [None, 28, 28, 1]))

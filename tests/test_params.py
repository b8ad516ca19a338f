"""The pipeline's parameters are checked together, naming the parameter and the fix, before anything runs."""

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.train import train_pipeline
from tfk8s.steps.params import check, problems

DEFAULTS = {k: v.default for k, v in inspect.signature(train_pipeline.pipeline_func).parameters.items()}
REPO = Path(__file__).resolve().parents[1]


def test_the_pipeline_defaults_pass():
    assert problems(DEFAULTS) == []


@pytest.mark.parametrize(("override", "expected"), [
    ({"workers": 3}, ("batch_size 512 is the global batch, split evenly over the 3 chief/worker replicas: make "
                      "it a multiple of 3, e.g. 510")),
    ({"chief": 1, "workers": 2, "batch_size": 100}, "over the 3 chief/worker replicas"),
    ({"chief": 2}, "chief must be 0 or 1, got 2: raise workers instead"),
    ({"ps": 1}, "ps=1 needs chief=1"),
    ({"chief": 1, "workers": 0, "ps": 1}, "ps=1 needs workers >= 1"),
    ({"workers": 0}, "at least one chief or worker: set workers >= 1"),
    ({"num_shards": 1}, "num_shards 1 < 2 chief/worker replicas"),
    ({"epochs": 0}, "epochs must be >= 1, got 0"),
    ({"learning_rate": 0.0}, "learning_rate must be > 0"),
    ({"min_accuracy": 1.5}, "min_accuracy must be in [0, 1]"),
    ({"success_policy": "Chief"}, "success_policy must be '' (chief, or worker 0) or 'AllWorkers'"),
    ({"model_name": "../evil"}, "model name '../evil' must be a single path segment"),
    ({"volume_root": "/data"}, "volume_root must be /mnt/tfk8s on Kubernetes"),
    ({"pvc_name": ""}, "pvc_name is empty"),
    ({"kubernetes": {"node_selector": "{pool: gpu}"}}, "node_selector"),
    ({"kubernetes": {"replica_overrides": {"boss": {"cpu": "1"}}}},
     "replica_overrides has unknown replica types ['boss']"),
    ({"kubernetes": {"memory": "lots"}}, "'lots' is not a Kubernetes quantity"),
    ({"kubernetes": {"cpus": "2"}}, "kubernetes has unknown keys ['cpus'] (did you mean cpu?)"),
    ({"kubernetes": {"image": "x"}}, "kubernetes must not set ['image']: they are pipeline parameters"),
    ({"command": "python train.py --out {model}"}, "command: command uses unknown placeholder {model}"),
    ({"eval_command": "python 'eval.py"}, "cannot be split like a shell line (No closing quotation)"),
    ({"gate_metric": ""}, "gate_metric is empty"),
    ({"pvc_name": "Bad_Name"}, ("pvc_name 'Bad_Name' is not a valid PersistentVolumeClaim name: a DNS-1123 "
                                "subdomain: at most 253 lower-case letters, digits, '-' and '.', starting and ending "
                                "with a letter or digit")),
    ({"pvc_name": "data.v1"}, ("pvc_name 'data.v1' is a valid claim name, but KFP names each step's pod volume "
                               "after the claim, which must be a DNS-1123 label: at most 63 lower-case letters, "
                               "digits and '-', starting and ending with a letter or digit, no dots, e.g. "
                               "'tfk8s-data': rename the claim, e.g. 'data-v1'")),
    ({"pvc_name": "d" * 64}, "which must be a DNS-1123 label: at most 63"),
    ({"progress_timeout_s": -1}, "progress_timeout_s must be >= 0, got -1"),
    ({"timeout_s": -5}, "timeout_s must be >= 0, got -5"),
    ({"stop_grace_s": -1}, "stop_grace_s must be >= 0, got -1"),
    ({"startup_timeout_s": -1}, "startup_timeout_s must be >= 0, got -1"),
    ({"evaluator_grace_s": -1}, "evaluator_grace_s must be >= 0, got -1"),
    ({"restart_exit_code": 256}, "restart_exit_code must be an exit code 0-255 (0: none), got 256"),
])
def test_each_bad_parameter_is_named_with_its_fix(override, expected):
    found = problems({**DEFAULTS, **override})
    assert len(found) == 1 and expected in found[0], found


def test_ps_jobs_need_no_batch_divisibility_and_local_runs_any_volume_root():
    assert problems({**DEFAULTS, "chief": 1, "workers": 3, "ps": 1, "batch_size": 100}) == []
    assert problems({**DEFAULTS, "backend": "local", "volume_root": "/tmp/x", "pvc_name": ""}) == []


def test_check_lists_every_problem():
    with pytest.raises(ValueError) as err:
        check({**DEFAULTS, "epochs": 0, "model_name": "a/b"})
    assert str(err.value).count("\n  - ") == 2


def test_cli_refuses_bad_parameters_before_anything_runs(tmp_path):
    volume = tmp_path / "vol"
    r = subprocess.run([sys.executable, "pipelines/train.py", "--local", "--volume", str(volume), "--param",
                        "workers=3"], check=False, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "batch_size 512 is the global batch" in r.stderr
    assert not volume.exists()  # nothing was prepared or written


def test_a_local_run_refuses_a_bad_kubernetes_setting_before_anything_runs(tmp_path):
    """The local backend does not use them, but a typo or a bad quantity is said at once (it failed in the
    launch step, after the data set was prepared, or not at all)."""
    from tfk8s.steps.params import problems

    assert problems({"backend": "local", "kubernetes": {"cpu": "2", "memory": "4Gi"}}) == []
    (bad_value,) = problems({"backend": "local", "kubernetes": {"cpu": "abc"}})
    assert "'abc' is not a Kubernetes quantity" in bad_value
    volume = tmp_path / "vol"
    r = subprocess.run([sys.executable, "pipelines/train.py", "--local", "--volume", str(volume), "--param",
                        "kubernetes.cpux=2"], check=False, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "kubernetes has unknown keys ['cpux'] (did you mean cpu?)" in r.stderr
    assert not volume.exists()


def test_a_local_run_refuses_a_program_that_is_not_there_and_a_bad_claim_name_before_the_prepare_step(tmp_path):
    """With --local the replicas run here: `python missing.py` fails at once (it failed in the launch step, after
    the data set was prepared); pvc_name is not used there but checked as on a cluster."""
    from tfk8s.submit.checks import missing_program

    (tmp_path / "train.py").write_text("")
    assert missing_program("command", "python train.py --epochs 2", tmp_path) is None
    assert missing_program("command", "python -m trainer.task", tmp_path) is None
    assert missing_program("command", "python {data_dir}/train.py", tmp_path) is None  # a placeholder: unknown here
    assert missing_program("command", "python -u missing.py", tmp_path) == (
        f"command: missing.py does not exist (in {tmp_path}, where the local replicas run): give the path of your "
        f"program, e.g. --param command='python path/to/train.py'")
    assert "nope-tool is neither on the PATH nor a file" in missing_program("eval_command", "nope-tool x", tmp_path)
    assert problems({"backend": "local", "pvc_name": "Bad_Name"})[0].startswith("pvc_name 'Bad_Name' is not a valid")
    volume = tmp_path / "vol"
    for param, said in (("command=python no_such_train.py", "command: no_such_train.py does not exist"),
                        ("pvc_name=Bad_Name", "pvc_name 'Bad_Name' is not a valid PersistentVolumeClaim name")):
        r = subprocess.run([sys.executable, "pipelines/train.py", "--local", "--volume", str(volume), "--param",
                            param], check=False, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and said in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not volume.exists()


def test_an_empty_dataset_name_is_one_line_not_tfdss_help(tmp_path):
    r = subprocess.run([sys.executable, "pipelines/train.py", "--local", "--volume", str(tmp_path / "vol"),
                        "--param", "dataset_name="], check=False, cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        ("tfk8s: dataset_name is empty: name a TFDS image-classification data set (e.g. --param dataset_name=mnist), "
        "or pass data_dir, a folder you prepared")], r.stderr


def test_the_launch_step_checks_again_before_creating_any_replica(tmp_path):
    from tfk8s.steps.launch_training import launch_training_step

    with pytest.raises(ValueError, match="make it a multiple of 3"):
        launch_training_step(data_dir=str(tmp_path / "data"), volume_root=str(tmp_path), run_id="r1",
                             backend="local", params={"workers": 3, "epochs": 1})
    assert not (tmp_path / "runs").exists()
    with pytest.raises(ValueError, match="pvc_name is empty"):
        launch_training_step(data_dir="/mnt/tfk8s/runs/r1/data", volume_root="/mnt/tfk8s", run_id="r1",
                             backend="kubernetes", params={"chief": 1, "pvc_name": ""}, dry_run=True)
    with pytest.raises(ValueError, match=r"data_dir .*data does not exist: prepare it on the volume"):
        launch_training_step(data_dir=str(tmp_path / "data"), volume_root=str(tmp_path), run_id="r1",
                             backend="local", params={"command": "python train.py"})
    (tmp_path / "data").mkdir()
    with pytest.raises(ValueError, match=r"data_dir .*data is empty"):
        launch_training_step(data_dir=str(tmp_path / "data"), volume_root=str(tmp_path), run_id="r1",
                             backend="local", params={"command": "python train.py"})
    assert not (tmp_path / "runs").exists()


def test_the_cli_takes_kubernetes_settings_as_dotted_params_and_says_where_flat_ones_went(tmp_path):
    from pipelines.train import _check_params

    _check_params(["kubernetes.cpu=2", 'kubernetes.node_selector={"pool": "gpu"}', "workers=4"], local=False)
    with pytest.raises(SystemExit, match=r"cpu is a key of the kubernetes parameter now: --param kubernetes.cpu=2"):
        _check_params(["cpu=2"], local=False)
    with pytest.raises(SystemExit, match=r"kubernetes has unknown keys \['gpu'\] \(did you mean gpus\?\)"):
        _check_params(["kubernetes.gpu=1"], local=False)


def test_one_definition_of_the_launch_parameters_for_pipeline_component_and_cli():
    import argparse

    from components.launch_training import launch_training
    from tfk8s.launcher.kubernetes.settings import KubernetesParams
    from tfk8s.steps.params import LAUNCH_PARAMETERS, add_launch_arguments

    component = {k: v.default for k, v in inspect.signature(launch_training.python_func).parameters.items()
                 if v.default is not inspect.Parameter.empty}
    for name, p in LAUNCH_PARAMETERS.items():
        assert component[name] == p.default, name  # literals in the component's source
    # the pipeline's: the same, except that it names the PVC and leaves the trainer's example cap to max_examples
    pipeline = {k: DEFAULTS[k] for k in LAUNCH_PARAMETERS if k in DEFAULTS}
    assert pipeline == {**{k: p.default for k, p in LAUNCH_PARAMETERS.items() if k != "max_train_examples"},
                        "pvc_name": "tfk8s-data"}
    assert set(LAUNCH_PARAMETERS) | {"volume_root", "run_id", "backend"} == set(component)
    parser = argparse.ArgumentParser()
    add_launch_arguments(parser)
    # the launch parameters, and the kubernetes dict's keys as flags of their own (--cpu 2 ...)
    kube_flags = set(KubernetesParams.names()) - set(KubernetesParams.SHARED)
    assert {a.dest for a in parser._actions} - {"help"} == set(LAUNCH_PARAMETERS) | kube_flags
    # what the kubernetes dict may hold is KubernetesParams, less the parameters of their own
    assert "cpu" in LAUNCH_PARAMETERS["kubernetes"].help and set(KubernetesParams.SHARED) <= set(LAUNCH_PARAMETERS)


def test_component_clis_print_expected_errors_as_one_line(tmp_path):
    """On stderr as the error says it; in the container's termination message (what Argo shows as the step's
    message, Kubernetes as the pod's) on one line."""
    import os

    log = tmp_path / "termination-log"
    log.write_text("")  # in a pod the kubelet mounts it; a CLI never creates it
    r = subprocess.run([sys.executable, "-m", "components.launch_training", "--dry-run", "--data-dir", "D",
                        "--chief", "1", "--workers", "2", "--ps", "1", "--batch-size", "100"], check=False, cwd=REPO,
                       capture_output=True, text=True, timeout=120, env={**os.environ, "TFK8S_TERMINATION_LOG": str(log)})
    assert r.returncode == 1
    assert r.stderr.startswith("launch_training: error: invalid pipeline parameters:\n  - pvc_name is empty")
    assert "Traceback" not in r.stderr
    assert log.read_text() == "launch_training: error: invalid pipeline parameters: pvc_name is empty: name the " \
        "PersistentVolumeClaim for data, checkpoints and models (without it the model would be written to a pod's " \
        "ephemeral storage)"


def test_without_a_termination_log_nothing_is_written(tmp_path, monkeypatch):
    from tfk8s.steps.cli import write_termination_message

    monkeypatch.setenv("TFK8S_TERMINATION_LOG", str(tmp_path / "absent"))
    assert write_termination_message("x: error: y") is False
    assert not (tmp_path / "absent").exists()


def test_a_run_id_placeholder_left_unreplaced_by_an_old_kfp_backend_names_the_version_needed():
    from kfp import dsl

    from tfk8s.core.layout import RunLayout

    with pytest.raises(ValueError) as err:
        RunLayout("/mnt/tfk8s", dsl.PIPELINE_JOB_ID_PLACEHOLDER)
    msg = str(err.value)
    assert "run id '{{$.pipeline_job_uuid}}' is a KFP placeholder the backend did not replace" in msg
    assert "older than 2.5" in msg and "to 2.5 or newer" in msg


def test_ensure_volume_refuses_a_claim_name_kfp_cannot_mount_before_asking_the_cluster(monkeypatch):
    """data.v1 is a legal claim name; KFP would accept the run and fail at the first step that mounts it."""
    import tfk8s.steps.ensure_volume as ev

    monkeypatch.setattr(ev, "ensure_pvc", lambda *a, **k: pytest.fail("the cluster was asked"), raising=False)
    with pytest.raises(ValueError, match=r"pvc_name 'data\.v1' is a valid claim name, but KFP names each step's "
                                         r"pod volume after the claim.*rename the claim, e\.g\. 'data-v1'"):
        ev.ensure_volume_step(backend="kubernetes", volume_root="/mnt/tfk8s", pvc_name="data.v1")
    assert problems({**DEFAULTS, "pvc_name": "d" * 63}) == []

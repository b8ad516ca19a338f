"""The pipeline's parameters are checked together, naming the parameter and the fix, before anything runs."""

import inspect
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from pipelines.train import train_pipeline
from tfk8s.steps.parameters import check, problems

DEFAULTS = {k: v.default for k, v in inspect.signature(train_pipeline.pipeline_func).parameters.items()}
REPO = Path(__file__).resolve().parents[2]


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
    ({"data_uri": "gs://b/p"}, "data_uri 'gs://b/p' is not an S3 URI (gs://): write data_uri=s3://BUCKET/PREFIX"),
    ({"data_uri": "s3://My_Bucket/x"}, "bucket name 'My_Bucket' is not a valid S3 bucket name"),
    ({"data_uri": "s3://b1b/x", "data_dir": "mine"}, "data_uri s3://b1b/x and data_dir mine are both set: give one"),
    ({"model_uri": "/models"}, "model_uri '/models' is not an S3 URI (no scheme): write model_uri=s3://BUCKET/PREFIX"),
    ({"s3_endpoint": "minio:9000"}, "s3_endpoint 'minio:9000' is not an endpoint URL: write http(s)://HOST[:PORT]"),
    ({"kserve": "yes"}, "kserve must be '' (none), 'print' or 'apply', got 'yes'"),
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
    from tfk8s.steps.parameters import problems

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
    from tests.fakes.launching import launch

    with pytest.raises(ValueError, match="make it a multiple of 3"):
        launch({"workers": 3, "epochs": 1},
               data_dir=str(tmp_path / "data"), volume_root=str(tmp_path), run_id="r1",
               backend="local")
    assert not (tmp_path / "runs").exists()
    with pytest.raises(ValueError, match="pvc_name is empty"):
        launch({"chief": 1, "pvc_name": ""},
               data_dir="/mnt/tfk8s/runs/r1/data", volume_root="/mnt/tfk8s", run_id="r1",
               backend="kubernetes", dry_run=True)
    with pytest.raises(ValueError, match=r"data_dir .*data does not exist: prepare it on the volume"):
        launch({"command": "python train.py"},
               data_dir=str(tmp_path / "data"), volume_root=str(tmp_path), run_id="r1",
               backend="local")
    (tmp_path / "data").mkdir()
    with pytest.raises(ValueError, match=r"data_dir .*data is empty"):
        launch({"command": "python train.py"},
               data_dir=str(tmp_path / "data"), volume_root=str(tmp_path), run_id="r1",
               backend="local")
    assert not (tmp_path / "runs").exists()


def test_the_cli_takes_kubernetes_settings_as_dotted_params_and_says_where_flat_ones_went(tmp_path):
    from pipelines.train import _check_params

    _check_params(["kubernetes.cpu=2", 'kubernetes.node_selector={"pool": "gpu"}', "workers=4"], local=False)
    with pytest.raises(SystemExit, match=r"cpu is a key of the kubernetes parameter now: --param kubernetes.cpu=2"):
        _check_params(["cpu=2"], local=False)
    with pytest.raises(SystemExit, match=r"kubernetes has unknown keys \['gpu'\] \(did you mean gpus\?\)"):
        _check_params(["kubernetes.gpu=1"], local=False)


STEP_MODULES = {"ensure_volume": "components.ensure_volume", "prepare_dataset": "components.prepare_dataset",
                "launch_training": "components.launch_training", "export_model": "components.export_model",
                "evaluate_model": "components.evaluate_model", "push_model": "components.push_model"}


class _Parsed(Exception):
    pass


def _cli_parser(step, monkeypatch):
    """The argparse parser a component's CLI builds (its main stops at parse_args; no step logic runs)."""
    import argparse
    import importlib

    def stop(self, args=None, namespace=None):
        raise _Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop)
    with pytest.raises(_Parsed) as got:
        importlib.import_module(STEP_MODULES[step]).main.__wrapped__([])
    return got.value.args[0]


def test_the_table_holds_every_pipeline_parameter_and_the_literals_equal_it():
    """KFP needs literals in the signatures: the pipeline's and each component's defaults and annotations are the
    table's, and a component argument the table does not know is a KFP-only one (artifacts, run_id)."""
    import importlib

    from tfk8s.steps.parameters import PARAMETERS, pipeline_parameters, signature_mismatches, step_parameters

    assert len(pipeline_parameters()) == 45 and list(pipeline_parameters()) == list(DEFAULTS)
    assert [n for n, p in PARAMETERS.items() if not p.pipeline] == ["max_train_examples"]
    assert signature_mismatches(train_pipeline.pipeline_func) == []
    for step, module in STEP_MODULES.items():
        func = getattr(importlib.import_module(module), step).python_func
        assert signature_mismatches(func, step) == [], step
        plain = {n for n, v in inspect.signature(func).parameters.items() if v.default is not inspect.Parameter.empty}
        assert plain - set(step_parameters(step)) <= {"run_id"}, step
    # the renamed and the step-only defaults are said in the table
    assert step_parameters("prepare_dataset")["num_workers"].name == "workers"
    assert step_parameters("prepare_dataset")["download"].name == "tfds_download"
    from tests.fakes.launching import launch

    # issue 34: the launch step used alone (python -m components.launch_training) mounts the pipeline's claim by
    # default, as every step of the pipeline does (it defaulted to none, and a kubernetes run then failed
    # "pvc_name is empty")
    assert PARAMETERS["pvc_name"].default_for("launch_training") == "tfk8s-data" == DEFAULTS["pvc_name"]
    docs = launch({}, data_dir="/mnt/tfk8s/runs/r1/data", volume_root="/mnt/tfk8s", run_id="r1",
                  backend="kubernetes", dry_run=True)
    claims = {v["persistentVolumeClaim"]["claimName"] for d in docs if d["kind"] == "Job"
              for v in d["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v}
    assert claims == {"tfk8s-data"}
    with pytest.raises(ValueError, match="pvc_name is empty"):  # told to mount none on Kubernetes: refused
        launch({"pvc_name": ""}, data_dir="/mnt/tfk8s/runs/r1/data", volume_root="/mnt/tfk8s",
               run_id="r1", backend="kubernetes", dry_run=True)
    # and the defaults pass the checks
    assert problems({n: p.default for n, p in PARAMETERS.items()}) == []


def test_a_drifted_literal_is_found():
    from tfk8s.steps.parameters import signature_mismatches

    def launch_training(workers: int = 3, epochs: float = 2.0, chief: int = 0):
        pass

    found = signature_mismatches(launch_training, "launch_training")
    assert "launch_training: workers defaults to 3, the table to 2" in found
    assert "launch_training: epochs defaults to 2.0, the table to 2" in found
    assert "launch_training: epochs is annotated <class 'float'>, the table says int" in found
    assert "launch_training lacks ps" in found and not any("chief" in f for f in found)


def test_the_pipeline_docstring_and_the_compiled_descriptions_are_the_tables():
    import re
    import textwrap

    import yaml

    from tfk8s.steps.parameters import PARAMETERS, docstring_args

    doc = train_pipeline.pipeline_func.__doc__
    assert doc.rstrip().endswith(textwrap.dedent(docstring_args()).rstrip())
    assert doc.count("\n    ") >= 39 and "Args:" in doc
    declared = next(yaml.safe_load_all((REPO / "compiled" / "train.yaml").read_text()))["root"]["inputDefinitions"]
    for name, d in declared["parameters"].items():
        assert re.sub(r"\s+", " ", d["description"]).strip() == PARAMETERS[name].help, name


def test_each_component_cli_takes_the_tables_flags_with_its_defaults_and_help(monkeypatch):
    from tfk8s.launcher.kubernetes.settings import KubernetesParams
    from tfk8s.steps.parameters import step_parameters

    for step in STEP_MODULES:
        actions = {a.dest: a for a in _cli_parser(step, monkeypatch)._actions}
        for argument, p in step_parameters(step).items():
            a = actions[argument]
            assert a.option_strings == ["--" + argument.replace("_", "-")], (step, argument)
            assert a.default == p.default_for(step), (step, argument)
            assert a.help.startswith(p.help), (step, argument)
    launch = {a.dest for a in _cli_parser("launch_training", monkeypatch)._actions}
    # the launch step's parameters, the kubernetes dict's keys as flags of their own (--cpu 2 ...), and its own
    kube_flags = set(KubernetesParams.names()) - set(KubernetesParams.SHARED)
    assert launch == set(step_parameters("launch_training")) | kube_flags | {"help", "data_dir", "run_id", "dry_run",
                                                                             "results_dir"}


def test_docs_pipeline_md_lists_the_table():
    from tfk8s.steps.parameters import markdown_table

    assert markdown_table() in (REPO / "docs" / "pipeline.md").read_text()
    assert "| `min_accuracy` | float | `0.98` | in [0, 1] | evaluate_model |" in markdown_table()
    assert "prepare_dataset (as num_workers)" in markdown_table()


def test_the_quality_gates_default_floor_is_the_pipelines():
    from tfk8s.steps.evaluation import Thresholds
    from tfk8s.steps.parameters import PARAMETERS

    assert Thresholds().min_accuracy == PARAMETERS["min_accuracy"].default == DEFAULTS["min_accuracy"] == 0.98
    assert Thresholds().max_accuracy_drop == DEFAULTS["max_accuracy_drop"] == -1.0


def test_the_run_policy_travels_whole_from_the_parameters_to_the_job():
    import dataclasses

    from tfk8s.core.cluster import ReplicaCounts
    from tfk8s.core.job import RunPolicy, TrainingJob
    from tfk8s.launcher.backends import get_backend
    from tfk8s.steps.launch_training import build_job
    from tfk8s.steps.parameters import LaunchSpec

    spec = LaunchSpec.from_params({"max_restarts": 5, "timeout_s": 0, "stop_grace_s": 7, "success_policy": "AllWorkers",
                                   "progress_timeout_s": 11, "startup_timeout_s": 13, "evaluator_grace_s": 17,
                                   "restart_exit_code": 43}, backend="local", volume_root="/tmp/v")
    assert spec.run_policy == RunPolicy(max_restarts=5, timeout_s=0, stop_grace_s=7, success_policy="AllWorkers",
                                        progress_timeout_s=11, startup_timeout_s=13, evaluator_grace_s=17,
                                        restart_exit_code=43)
    assert LaunchSpec(get_backend("local")).run_policy == LaunchSpec.from_params({}, backend="local", volume_root="/tmp/v").run_policy
    assert LaunchSpec(get_backend("local")).run_policy.timeout_s == 86400 and LaunchSpec(get_backend("local")).run_policy.progress_timeout_s == 600
    job = build_job(name="j", counts=ReplicaCounts(worker=2), backend=get_backend("local"),
                    run_policy=spec.run_policy)
    assert job.run_policy == dataclasses.replace(spec.run_policy, timeout_s=None)  # 0: no deadline
    # the launcher reads the fields on the job, read-only
    assert (job.max_restarts, job.stop_grace_s, job.success_policy, job.timeout_s) == (5, 7, "AllWorkers", None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.max_restarts = 1
    # with ps, lagging workers get no grace after the chief's success
    ps_job = build_job(name="j", counts=ReplicaCounts(chief=1, worker=1, ps=1), backend=get_backend("local"),
                       run_policy=spec.run_policy)
    assert ps_job.grace_period_s == 0.0 and ps_job.max_restarts == 5
    # a field given as a keyword of its own is laid over the run policy
    kw = TrainingJob("j", ReplicaCounts(worker=1), ["python", "t.py"], run_policy=spec.run_policy, max_restarts=1)
    assert (kw.max_restarts, kw.stop_grace_s) == (1, 7)
    assert dataclasses.replace(kw, grace_period_s=2.0).run_policy.grace_period_s == 2.0
    with pytest.raises(ValueError, match=r"unknown keywords \['max_restart'\]"):
        TrainingJob("j", ReplicaCounts(worker=1), ["python", "t.py"], max_restart=1)
    with pytest.raises(ValueError, match="restart_exit_code must be an exit code 0-255"):
        RunPolicy(restart_exit_code=300)


def test_the_evaluate_component_and_its_cli_call_one_step(monkeypatch, tmp_path):
    """What the Argo export runs (the CLI) and what KFP runs (the component's body) evaluate the same way."""
    import json

    import components.evaluate_model as component
    import tfk8s.steps.evaluate_model as step
    from tfk8s.steps.evaluation import Blessing, EvaluationOutcome

    calls = []

    def fake(**kwargs):
        calls.append(kwargs)
        outcome = EvaluationOutcome(True, "built-in", {"accuracy": 0.99}, Blessing(True, ["accuracy 0.99 >= 0.98"]))
        return step.EvaluateOutputs(outcome, {"accuracy": 0.99}, {}, None, "# summary", "")

    monkeypatch.setattr(step, "evaluate_model_step", fake)
    train = tmp_path / "runs" / "r1" / "train"
    train.mkdir(parents=True)
    (train / "training_summary.json").write_text(json.dumps({"job": {"name": "tfk8s-r1", "restarts": 1},
                                                             "metrics": {"accuracy": 0.97}}))
    component.main.__wrapped__(["--model-dir", str(tmp_path / "models" / "mnist-cnn" / "3"), "--data-dir", "D",
                                "--saved-model-dir", str(train / "saved_model"), "--min-accuracy", "0.9",
                                "--results-dir", str(tmp_path / "out")])
    (cli,) = calls
    assert cli["exported"] == {"path": str(tmp_path / "models" / "mnist-cnn" / "3"), "version": 3,
                               "model_name": "mnist-cnn", "serving_signature": None}
    assert cli["training"]["job_name"] == "tfk8s-r1" and cli["training"]["train_accuracy"] == 0.97
    assert (cli["min_accuracy"], cli["max_accuracy_drop"], cli["gate_metric"], cli["volume_root"]) == (
        0.9, -1.0, "accuracy", "/mnt/tfk8s")
    assert (tmp_path / "out" / "blessed").read_text() == "true"
    assert json.loads((tmp_path / "out" / "reasons").read_text()) == ["accuracy 0.99 >= 0.98"]


def test_component_clis_print_expected_errors_as_one_line(tmp_path):
    """On stderr as the error says it; in the container's termination message (what Argo shows as the step's
    message, Kubernetes as the pod's) on one line."""
    import os

    log = tmp_path / "termination-log"
    log.write_text("")  # in a pod the kubelet mounts it; a CLI never creates it
    r = subprocess.run([sys.executable, "-m", "components.launch_training", "--dry-run", "--data-dir", "D",
                        "--chief", "1", "--workers", "2", "--ps", "1", "--batch-size", "100", "--pvc-name", ""],
                       check=False, cwd=REPO,
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


def test_a_kfp_components_failure_is_its_pods_termination_message_and_still_raised(tmp_path, monkeypatch):
    """Under KFP a component's function runs in KFP's executor, not behind main_guard: its body is inside
    failure_reported, so the reason reaches Argo's node message (what `train.py --run --wait` and KFP's UI read)."""
    import components
    from components.push_model import reject_model

    log = tmp_path / "termination-log"
    log.write_text("")
    monkeypatch.setenv("TFK8S_TERMINATION_LOG", str(log))
    with pytest.raises(RuntimeError, match=r"^model not blessed, so not pushed: \['accuracy 0.4 < 0.9'\]$"):
        reject_model.python_func(reasons="['accuracy 0.4 < 0.9']")
    assert log.read_text() == "reject_model: error: model not blessed, so not pushed: ['accuracy 0.4 < 0.9']"
    # every component's function: its whole body after the docstring, so an import error is reported too
    found = []
    for module in sorted(p.stem for p in Path(components.__file__).parent.glob("[a-z]*.py")):
        mod = __import__(f"components.{module}", fromlist=["_"])
        for name, obj in vars(mod).items():
            if hasattr(obj, "python_func") and obj.python_func.__module__ == mod.__name__:
                body = [ln.strip() for ln in inspect.getsource(obj.python_func).split('"""')[-1].strip().splitlines()]
                assert body[:3] == ["from tfk8s.steps.cli import failure_reported", "",
                                    (f'with failure_reported("{name}"):  # the reason as the pod\'s termination '
                                    f"message (KFP's UI, --wait)")], (name, body[:3])
                found.append(name)
    assert sorted(found) == ["ensure_volume", "evaluate_model", "export_model", "launch_training", "prepare_dataset",
                             "push_model", "reject_model"]


def _distinct_launch_values() -> dict:
    """A value for every launch parameter that differs from its default (and passes its checks)."""
    from tfk8s.steps.parameters import LAUNCH_PARAMETERS

    by_kind = {int: 7, float: 0.125, str: "x", bool: True}
    values = {name: by_kind.get(p.kind, {}) for name, p in LAUNCH_PARAMETERS.items()}
    values.update(chief=1, workers=3, ps=1, evaluator=1, command="python my_train.py", success_policy="AllWorkers",
                  job_name_prefix="team-a", namespace="ml", image="me/train:2", pvc_name="team-data",
                  kubernetes={"cpu": "3"}, restart_exit_code=43, batch_size=96)
    assert all(values[n] != p.default_for("launch_training") for n, p in LAUNCH_PARAMETERS.items())
    return values


def test_the_launch_component_hands_every_launch_parameter_on_by_name(monkeypatch, tmp_path):
    """The component's arguments are the table's launch parameters (signature_mismatches), and its body hands
    each one on, unchanged and under its own name, to the one reading (LaunchSpec.from_params): none is left out
    or crossed with another (a hand-written dict could)."""
    import components.launch_training as component
    from tfk8s.steps import parameters

    values = _distinct_launch_values()
    seen = []

    class Stop(Exception):
        pass

    def reading(cls, params, *, backend, volume_root):
        seen.append((dict(params), backend, volume_root))
        raise Stop

    monkeypatch.setattr(parameters.LaunchSpec, "from_params", classmethod(reading))
    monkeypatch.setenv("TFK8S_TERMINATION_LOG", str(tmp_path / "termination-log"))

    from types import SimpleNamespace

    dataset = SimpleNamespace(metadata={"path": "/mnt/tfk8s/datasets/d"})
    with pytest.raises(Stop):
        component.launch_training.python_func(dataset=dataset, model=None, metrics=None, volume_root="/mnt/tfk8s",
                                              run_id="r9", backend="local", **values)
    assert seen == [(values, "local", "/mnt/tfk8s")]


def _chain_to_tf_config(monkeypatch) -> list[list[tuple[str, dict]]]:
    """Records, at every TF_CONFIG built (tfk8s.core.cluster.tf_config_json, as the local backend and the
    Kubernetes manifests call it), the project's frames from the launch component's CLI down to it: each as
    ``(function name, its arguments)``."""
    import inspect

    from tfk8s.core import cluster
    from tfk8s.launcher import local
    from tfk8s.launcher.kubernetes import objects

    real = cluster.tf_config_json
    chains: list[list[tuple[str, dict]]] = []

    def recording(spec, replica):
        frames = []
        for info in reversed(inspect.stack()[1:]):
            path = Path(info.filename).resolve()
            if path.is_relative_to(REPO) and not path.is_relative_to(REPO / "tests"):
                args = inspect.getargvalues(info.frame)
                frames.append((info.function, {a: args.locals[a] for a in args.args if a in args.locals}))
        start = max(i for i, (name, _) in enumerate(frames) if name == "main")  # components.launch_training.main
        chains.append([*frames[start:], ("tf_config_json", {"spec": spec, "replica": replica})])
        return real(spec, replica)

    for module in (local, objects):
        monkeypatch.setattr(module, "tf_config_json", recording)
    return chains


def _untyped(chain: list[tuple[str, dict]]) -> list[str]:
    """The calls of ``chain`` handed the parameters as a mapping by name (``{"workers": ...}``)."""
    return [name for name, args in chain
            if any(isinstance(v, Mapping) and {"workers", "chief"} & set(v) for v in args.values())]


def test_workers_reach_tf_config_in_at_most_8_calls_each_taking_typed_values(tmp_path, monkeypatch):
    """Issue 31: from the launch component's entry (its CLI: what the Argo export and a launcher pod run) to the
    TF_CONFIG of a replica, in a real local launch: at most 8 calls, none of them handed the parameters by name
    (``workers`` is read once, into ReplicaCounts, before the first). The same for the Kubernetes manifests
    (``--dry-run`` renders what a run creates, by the same functions)."""
    import json

    import components.launch_training as component

    chains = _chain_to_tf_config(monkeypatch)
    data = tmp_path / "data"
    data.mkdir()
    (data / "train-00000-of-00001.tfrecord").write_bytes(b"\0" * 16)
    save = ("import os, pathlib; d = pathlib.Path(os.environ['TFK8S_MODEL_DIR']); d.mkdir(parents=True, "
            "exist_ok=True); (d / 'saved_model.pb').write_bytes(b'')")
    component.main.__wrapped__(["--data-dir", str(data), "--run-id", "r1", "--backend", "local", "--volume-root",
                                str(tmp_path / "vol"), "--workers", "3", "--batch-size", "96", "--command",
                                json.dumps(["python", "-c", save]),
                                "--progress-timeout-s", "0"])
    assert len(chains) == 3  # worker-0, -1, -2
    local_chain = chains[0]
    assert json.loads(component_tf_config(local_chain))["cluster"]["worker"][2].startswith("127.0.0.1:")
    assert len(local_chain) - 1 <= 8, [name for name, _ in local_chain]
    assert _untyped(local_chain) == []
    chains.clear()
    component.main.__wrapped__(["--data-dir", "/mnt/tfk8s/d", "--run-id", "r1", "--backend", "kubernetes",
                                "--pvc-name", "data", "--workers", "3", "--batch-size", "96", "--dry-run"])
    assert len(chains) == 3
    assert len(chains[0]) - 1 <= 8, [name for name, _ in chains[0]]
    assert _untyped(chains[0]) == []


def component_tf_config(chain: list[tuple[str, dict]]) -> str:
    """The TF_CONFIG value at the end of ``chain``."""
    from tfk8s.core.cluster import tf_config_json

    args = chain[-1][1]
    return tf_config_json(args["spec"], args["replica"])


def test_a_negative_replica_count_says_the_rule_and_the_fix_once():
    """Issue 34: `--param workers=-1` said "replica count for worker must be an integer >= 0, got -1" (the
    parameter is `workers`, and no fix); it names the parameter, the rule and an example once."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(repo / "pipelines" / "train.py"), "--local", "--param", "workers=-1"],
                          capture_output=True, text=True, timeout=120, check=False, cwd=repo)
    assert done.returncode != 0
    assert (done.stdout + done.stderr).strip().splitlines()[-2:] == [
        "tfk8s: invalid pipeline parameters:",
        ("  - workers=-1: workers (the number of worker replicas) must be an integer >= 0, e.g. workers=2 "
         "(workers=0 needs chief=1)")]

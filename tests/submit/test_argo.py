"""The Argo export: compiled/train.argo.yaml is what the code builds now, is a valid Argo Workflow by Hera's
models, and runs the same steps, images, CLIs and dependencies as the KFP IR (compiled/train.yaml)."""

import argparse
import importlib
import json
import re
import sys
from pathlib import Path

import pytest
import yaml
from hera.workflows import models as m

import components
from components import DEFAULT_IMAGE
from tfk8s.submit.argo import (
    DEFAULT_OUTPUT,
    HEADER,
    RESULTS_DIR,
    ArgoExportError,
    build_workflow,
    function_name,
    load_ir,
)

REPO = Path(__file__).resolve().parents[2]
IR_PATH = REPO / "compiled" / "train.yaml"


@pytest.fixture(scope="module")
def committed() -> dict:
    return yaml.safe_load(DEFAULT_OUTPUT.read_text())


@pytest.fixture(scope="module")
def ir():
    return load_ir(IR_PATH, components)


def _templates(wf: dict) -> dict:
    return {t["name"]: t for t in wf["spec"]["templates"]}


def _dag_tasks(wf: dict) -> dict:
    entry = _templates(wf)[wf["spec"]["entrypoint"]]
    return {t["name"]: t for t in entry["dag"]["tasks"]}


def _ir_container_tasks(ir) -> dict[str, dict]:
    """IR container tasks -> {"component", "dependencies"}, sub-DAGs (dsl.If/Else) flattened: a task inside
    inherits its sub-DAG's dependencies; depending on a sub-DAG means depending on every task inside."""
    out: dict[str, dict] = {}

    def walk(tasks: dict, inherited: set[str]) -> set[str]:
        leaves: dict[str, set[str]] = {}
        pending = dict(tasks)
        while pending:
            for name, task in list(pending.items()):
                if not set(task.get("dependentTasks", [])) <= set(leaves):
                    continue
                deps = inherited.union(*(leaves[d] for d in task.get("dependentTasks", [])))
                comp = ir.spec["components"][task["componentRef"]["name"]]
                if "dag" in comp:
                    leaves[name] = walk(comp["dag"]["tasks"], deps)
                else:
                    out[name] = {"component": task["componentRef"]["name"], "dependencies": deps}
                    leaves[name] = {name}
                del pending[name]
        return set().union(*leaves.values())

    walk(ir.spec["root"]["dag"]["tasks"], set())
    return out


def test_committed_argo_workflow_is_what_the_code_builds_now(committed):
    from pipelines.train import train_pipeline

    fresh = build_workflow(train_pipeline, components).to_dict()  # the pipeline function, compiled in memory
    assert fresh == committed, "regenerate: python pipelines/train.py --compile --format argo"
    assert DEFAULT_OUTPUT.read_text().startswith(HEADER)


def test_argo_yaml_round_trips_through_heras_workflow_model(committed):
    model = m.Workflow.model_validate(committed)
    assert model.model_dump(by_alias=True, exclude_none=True, mode="json") == committed
    # the check has teeth: a misspelled field does not survive the round trip
    typo = json.loads(json.dumps(committed))
    typo["spec"]["templates"][1]["container"]["volumeMount"] = []
    assert m.Workflow.model_validate(typo).model_dump(by_alias=True, exclude_none=True, mode="json") != typo


def test_it_is_a_plain_argo_workflow_whose_arguments_are_the_pipeline_parameters(committed, ir):
    assert committed["apiVersion"] == "argoproj.io/v1alpha1"
    assert committed["kind"] == "Workflow"
    assert committed["metadata"]["generateName"] == "tfk8s-train-"
    args = {p["name"]: p.get("value") for p in committed["spec"]["arguments"]["parameters"]}
    assert set(args) == set(ir.parameters)
    assert args["workers"] == "2"
    assert args["learning_rate"] == "0.006"
    assert args["min_accuracy"] == "0.98"
    assert args["fail_on_unblessed"] == "false"
    assert args["pvc_name"] == "tfk8s-data"
    assert args["volume_root"] == "/mnt/tfk8s"
    assert args["image"] == DEFAULT_IMAGE
    assert "kfp.dsl.executor_main" not in DEFAULT_OUTPUT.read_text()  # no KFP executor, driver or launcher


def test_argo_and_ir_have_the_same_steps_images_commands_and_dependencies(committed, ir):
    ir_tasks = _ir_container_tasks(ir)
    argo_tasks = _dag_tasks(committed)
    templates = _templates(committed)
    defaults = {p["name"]: p.get("value", "") for p in committed["spec"]["arguments"]["parameters"]}

    assert (
        set(argo_tasks)
        == set(ir_tasks)
        == {
            "ensure-volume",
            "prepare-dataset",
            "launch-training",
            "export-model",
            "evaluate-model",
            "push-model",
            "reject-model",
        }
    )
    for name, ir_task in ir_tasks.items():
        argo = argo_tasks[name]
        assert set(argo.get("dependencies", [])) == ir_task["dependencies"], name
        container = templates[argo["template"]]["container"]
        ir_container = ir.executor(ir_task["component"])["container"]
        image = re.sub(
            r"\{\{workflow\.parameters\.(\w+)\}\}", lambda mt: defaults[mt.group(1)], container["image"]
        )
        # the IR's image is the task's input `pipelinechannel--image`, the pipeline's `image` (test_compile.py)
        assert ir_container["image"] == "{{$.inputs.parameters['pipelinechannel--image']}}", name
        assert container["image"] == "{{workflow.parameters.image}}" and image == DEFAULT_IMAGE, name
        fn = function_name(ir, ir_task["component"])
        if container["command"][:2] == ["python", "-m"]:
            module = importlib.import_module(container["command"][2])
            assert container["command"] == ["python", "-m", f"components.{module.__name__.split('.')[1]}"]
            assert hasattr(module, fn), (name, fn)  # the module that defines the component runs it
        else:  # a component without a CLI of its own: a python -c program of the module that defines it
            assert container["command"][:2] == ["python", "-c"], name
            module = importlib.import_module(re.search(r"from (components\.\w+) import", container["command"][2])[1])
            assert hasattr(module, fn), (name, fn)
    assert argo_tasks["launch-training"]["dependencies"] == ["prepare-dataset"]
    assert templates["prepare-dataset"]["container"]["command"] == [
        "python",
        "-m",
        "components.prepare_dataset",
    ]


def test_every_step_mounts_the_pvc_named_by_the_pvc_name_argument(committed):
    assert committed["spec"]["volumes"] == [
        {"name": "tfk8s-volume", "persistentVolumeClaim": {"claimName": "{{workflow.parameters.pvc_name}}"}}
    ]
    containers = [t for t in committed["spec"]["templates"] if "container" in t]
    assert len(containers) == 7
    # ensure-volume checks (or creates) the claim before anything mounts it: it cannot mount it itself
    assert "volumeMounts" not in _templates(committed)["ensure-volume"]["container"]
    for t in (t for t in containers if t["name"] != "ensure-volume"):
        assert t["container"]["volumeMounts"] == [{"name": "tfk8s-volume", "mountPath": "/mnt/tfk8s"}], t[
            "name"
        ]


def test_launch_step_runs_as_tfk8s_launcher_and_knows_its_pod(committed):
    launch = _templates(committed)["launch-training"]
    assert launch["serviceAccountName"] == "tfk8s-launcher"
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in launch["container"]["env"]}
    assert env == {"TFK8S_LAUNCHER_POD_NAME": "metadata.name", "TFK8S_LAUNCHER_POD_UID": "metadata.uid"}
    assert _templates(committed)["ensure-volume"]["serviceAccountName"] == "tfk8s-launcher"  # reads the PVC
    # kserve=apply creates or patches the InferenceService: the Role's rights (default has none)
    assert _templates(committed)["push-model"]["serviceAccountName"] == "tfk8s-launcher"
    others = [
        t
        for t in committed["spec"]["templates"]
        if "container" in t and t["name"] not in ("launch-training", "ensure-volume", "push-model")
    ]
    assert all("serviceAccountName" not in t for t in others)


def test_run_id_is_the_workflow_uid_and_artifacts_travel_as_result_paths(committed):
    tasks = _dag_tasks(committed)
    args = {n: {p["name"]: p["value"] for p in t["arguments"]["parameters"]} for n, t in tasks.items()}
    assert args["prepare-dataset"]["run_id"] == "{{workflow.uid}}"
    assert args["prepare-dataset"]["num_workers"] == "{{workflow.parameters.workers}}"
    assert args["launch-training"]["dataset"] == "{{tasks.prepare-dataset.outputs.parameters.dataset}}"
    assert args["export-model"]["model"] == "{{tasks.launch-training.outputs.parameters.model}}"
    assert (
        args["evaluate-model"]["exported_model"] == "{{tasks.export-model.outputs.parameters.exported_model}}"
    )
    outputs = _templates(committed)["export-model"]["outputs"]["parameters"]
    assert outputs == [{"name": "exported_model", "valueFrom": {"path": f"{RESULTS_DIR}/path"}}]


def test_the_quality_gate_conditions_become_when_expressions(committed):
    tasks = _dag_tasks(committed)
    assert tasks["push-model"]["when"] == "{{tasks.evaluate-model.outputs.parameters.blessed}} == true"
    assert tasks["reject-model"]["when"] == (
        "(!({{tasks.evaluate-model.outputs.parameters.blessed}} == true)) && "
        "({{workflow.parameters.fail_on_unblessed}} == true)"
    )
    assert "when" not in tasks["evaluate-model"]


class _Parsed(Exception):
    pass


def _resolve(value: str, task_args: dict, template_inputs: dict) -> str:
    samples = {
        "{{workflow.uid}}": "0b4a2c1e-uid",
        "{{tasks.prepare-dataset.outputs.parameters.dataset}}": "/mnt/tfk8s/runs/0b4a2c1e-uid/data",
        "{{tasks.launch-training.outputs.parameters.model}}": "/mnt/tfk8s/runs/0b4a2c1e-uid/train/saved_model",
        "{{tasks.export-model.outputs.parameters.exported_model}}": "/mnt/tfk8s/models/mnist-cnn/3",
        "{{tasks.evaluate-model.outputs.parameters.reasons}}": '["accuracy 0.5 < 0.98"]',
    }

    def inp(match):
        name = match.group(1)
        v = task_args.get(name, template_inputs.get(name))
        return samples.get(v, v) if not v.startswith("{{workflow.parameters.") else v

    return re.sub(r"\{\{inputs\.parameters\.(\w+)\}\}", inp, value)


def test_each_steps_cli_accepts_the_arguments_argo_passes(committed, monkeypatch, tmp_path):
    """Every flag Argo passes exists in the step's argparse parser and parses (no step logic runs)."""
    defaults = {p["name"]: p.get("value", "") for p in committed["spec"]["arguments"]["parameters"]}
    real_parse = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        raise _Parsed(real_parse(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    parsed = {}
    for name, task in _dag_tasks(committed).items():
        template = _templates(committed)[task["template"]]
        task_args = {p["name"]: p["value"] for p in task.get("arguments", {}).get("parameters", [])}
        inputs = {p["name"]: p.get("default", "") for p in template["inputs"]["parameters"]}
        argv = [_resolve(a, task_args, inputs) for a in template["container"]["args"]]
        argv = [
            re.sub(r"\{\{workflow\.parameters\.(\w+)\}\}", lambda mt: defaults[mt.group(1)], a) for a in argv
        ]
        command = template["container"]["command"]
        if command[:2] != ["python", "-m"]:
            monkeypatch.setattr(sys, "argv", ["-c", *argv])
            log = tmp_path / "termination-log"
            log.write_text("")
            monkeypatch.setenv("TFK8S_TERMINATION_LOG", str(log))
            with pytest.raises(SystemExit) as done:
                exec(command[2], {})  # noqa: S102 (the template's own python -c program)
            assert done.value.code == 1
            assert re.fullmatch(r"reject_model: error: model not blessed, so not pushed: .*accuracy 0\.5 < 0\.98.*",
                                log.read_text()), log.read_text()
            continue
        with pytest.raises(_Parsed) as done:
            importlib.import_module(command[2]).main(argv)
        parsed[name] = vars(done.value.args[0])

    assert parsed["prepare-dataset"]["run_id"] == "0b4a2c1e-uid"
    assert parsed["prepare-dataset"]["num_workers"] == 2
    assert parsed["prepare-dataset"]["results_dir"] == RESULTS_DIR
    assert parsed["launch-training"]["data_dir"] == "/mnt/tfk8s/runs/0b4a2c1e-uid/data"
    assert parsed["launch-training"]["pvc_name"] == "tfk8s-data"
    assert parsed["launch-training"]["image"] == DEFAULT_IMAGE
    assert parsed["launch-training"]["learning_rate"] == 0.006
    assert parsed["export-model"]["saved_model_dir"] == "/mnt/tfk8s/runs/0b4a2c1e-uid/train/saved_model"
    assert parsed["evaluate-model"]["model_dir"] == "/mnt/tfk8s/models/mnist-cnn/3"
    assert parsed["evaluate-model"]["min_accuracy"] == 0.98
    assert parsed["push-model"]["model_dir"] == "/mnt/tfk8s/models/mnist-cnn/3"


def test_results_dir_writes_the_files_argo_reads_as_outputs(committed, tmp_path, monkeypatch):
    """export_model's CLI writes path and version where the template's output parameter reads them."""
    import tfk8s.steps.export_model
    from components import export_model
    from tfk8s.steps.model_versions import ExportResult

    fake = ExportResult(path="/mnt/tfk8s/models/m/7", version=7, signature={"inputs": "image"})
    monkeypatch.setattr(tfk8s.steps.export_model, "export_model_step", lambda **kw: fake)
    export_model.main(["--saved-model-dir", "/sm", "--model-name", "m", "--results-dir", str(tmp_path)])

    (out,) = _templates(committed)["export-model"]["outputs"]["parameters"]
    read_by_argo = tmp_path / Path(out["valueFrom"]["path"]).relative_to(RESULTS_DIR)
    assert read_by_argo.read_text() == "/mnt/tfk8s/models/m/7"
    assert (tmp_path / "version").read_text() == "7"


def test_untranslatable_pipelines_fail_naming_the_task():
    from kfp import dsl

    from components.prepare_dataset import prepare_dataset

    @dsl.pipeline(name="loop")
    def loop():
        with dsl.ParallelFor([1, 2]) as n:
            prepare_dataset(num_shards=n)

    with pytest.raises(ArgoExportError, match=r"task 'for-loop-\d+' is a loop"):
        build_workflow(loop, components)

    @dsl.component(base_image=DEFAULT_IMAGE)
    def not_a_tfk8s_component(x: int) -> int:
        return x

    @dsl.pipeline(name="stranger")
    def stranger():
        not_a_tfk8s_component(x=1)

    with pytest.raises(ArgoExportError, match=r"no module of components/ defines not_a_tfk8s_component\(\)"):
        build_workflow(stranger, components)

    @dsl.pipeline(name="exit")
    def exit_handler():
        with dsl.ExitHandler(prepare_dataset(num_shards=1)):
            prepare_dataset(num_shards=2)

    with pytest.raises(ArgoExportError, match=r"trigger strategy ALL_UPSTREAM_TASKS_COMPLETED"):
        build_workflow(exit_handler, components)


def _train_like_parser():
    """train.py's parser (as of its main()) with the flags of tfk8s/submit/cli added."""
    from pipelines.train import DEFAULT_OUTPUT as KFP_OUTPUT
    from tfk8s.submit.cli import add_arguments

    p = argparse.ArgumentParser(prog="python pipelines/train.py")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--compile", action="store_true")
    mode.add_argument("--local", action="store_true")
    p.add_argument("--output", default=str(KFP_OUTPUT))
    p.add_argument("--param", action="append", default=[])
    add_arguments(p, mode)
    return p


def test_compile_format_argo_writes_the_workflow_and_never_over_the_kfp_package(
    tmp_path, monkeypatch, capsys
):
    import components
    from pipelines.train import compile_pipeline
    from tfk8s.submit import cli as cli_extras

    p = _train_like_parser()
    out = tmp_path / "wf.yaml"
    assert cli_extras.handle(
        p.parse_args(["--compile", "--format", "argo", "--output", str(out)]), compile_pipeline, components
    )
    assert yaml.safe_load(out.read_text()) == yaml.safe_load(DEFAULT_OUTPUT.read_text())
    assert f"compiled the pipeline to {out}" in capsys.readouterr().out

    written = []
    monkeypatch.setattr(
        "tfk8s.submit.argo.compile_argo", lambda output, **kw: written.append(Path(output)) or output
    )
    cli_extras.handle(p.parse_args(["--compile", "--format", "argo"]), compile_pipeline, components)
    assert written == [DEFAULT_OUTPUT]  # the KFP package's default --output is not overwritten
    assert cli_extras.handle(p.parse_args(["--compile"]), compile_pipeline) is False  # kfp: train.py's own
    with pytest.raises(SystemExit, match="--format applies to --compile"):
        cli_extras.handle(p.parse_args(["--local", "--format", "argo"]), compile_pipeline)


def test_every_steps_service_account_may_report_its_outputs_as_workflowtaskresults(committed):
    """Argo 3.4+: each step's executor creates/patches a WorkflowTaskResult; manifests/argo-rbac.yaml grants
    exactly that to every ServiceAccount a step runs as, and the launcher's Role stays what the launcher calls."""
    import kubernetes_validate

    from tfk8s.launcher.kubernetes.api import required_rules

    docs = list(yaml.safe_load_all((REPO / "manifests" / "argo-rbac.yaml").read_text()))
    role = next(d for d in docs if d["kind"] == "Role")
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    assert role["rules"] == [{"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"],
                              "verbs": ["create", "patch"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    step_accounts = {t.get("serviceAccountName") or committed["spec"].get("serviceAccountName") or "default"
                     for t in committed["spec"]["templates"] if "container" in t}
    assert step_accounts == {"tfk8s-launcher", "default"}
    assert {s["name"] for s in binding["subjects"] if s["kind"] == "ServiceAccount"} == step_accounts
    for doc in docs:
        kubernetes_validate.validate(doc, "1.29", strict=True)
    # the launcher's own Role grants nothing of Argo's
    launcher_role = next(d for d in yaml.safe_load_all((REPO / "manifests" / "rbac.yaml").read_text())
                         if d["kind"] == "Role")
    assert all("argoproj.io" not in r["apiGroups"] for r in launcher_role["rules"])
    assert ("argoproj.io", "workflowtaskresults") not in required_rules()


def test_the_launch_step_is_retried_after_a_drain_not_after_a_failure(committed):
    """A launcher stopped by SIGTERM (its pod deleted or evicted) exits 143 after stopping its replicas, and its
    pod's node may instead be an Error (pod gone): only those are retried; a training that failed (exit 1) is
    not. The other steps are never retried (each does its work once; a retry would not change a verdict)."""
    templates = _templates(committed)
    assert templates["launch-training"]["retryStrategy"] == {
        "limit": 2, "retryPolicy": "Always",
        "expression": "asInt(lastRetry.exitCode) == 143 || lastRetry.status == 'Error'"}
    assert [t["name"] for t in committed["spec"]["templates"] if "retryStrategy" in t] == ["launch-training"]


def test_a_launcher_stopped_by_sigterm_exits_143_and_says_so(tmp_path, monkeypatch, capsys):
    from tfk8s.core.errors import LauncherTerminatedError
    from tfk8s.steps.cli import TERMINATED_EXIT_CODE, main_guard

    log = tmp_path / "termination-log"
    log.write_text("")
    monkeypatch.setenv("TFK8S_TERMINATION_LOG", str(log))

    @main_guard
    def stopped():
        raise LauncherTerminatedError("the launcher got SIGTERM (its pod evicted): every replica stopped")

    with pytest.raises(SystemExit) as done:
        stopped()
    assert done.value.code == TERMINATED_EXIT_CODE == 143
    assert "error: the launcher got SIGTERM" in log.read_text()


def test_a_launcher_stopped_by_ctrl_c_exits_130_which_the_retry_does_not_take(monkeypatch, capsys):
    """Ctrl-C of ``python -m components.launch_training`` exits 130 (128 + SIGINT) like the local pipeline run,
    not 143: the Argo export's retry (exit 143, a drain) must not start again what a person interrupted."""
    import signal

    from tfk8s.core.errors import LauncherTerminatedError
    from tfk8s.steps.cli import main_guard

    monkeypatch.setenv("TFK8S_TERMINATION_LOG", "/nonexistent/termination-log")

    @main_guard
    def interrupted():
        raise LauncherTerminatedError.by_signal(signal.SIGINT, "tfk8s-1")

    with pytest.raises(SystemExit) as done:
        interrupted()
    assert done.value.code == 130
    assert "error: the launcher was interrupted by the user (SIGINT" in capsys.readouterr().err


def test_the_bucket_steps_get_s3_secrets_keys_as_env_in_both_compiled_forms(committed):
    """data_uri / model_uri credentials: s3_secret's keys as the prepare and push steps' env vars, optional (a
    missing Secret or key sets nothing), in the KFP IR (kfp-kubernetes use_secret_as_env) and the Argo export."""
    keys = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"]
    templates = _templates(committed)
    for name in ("prepare-dataset", "push-model"):
        env = [e for e in templates[name]["container"].get("env", []) if "secretKeyRef" in e.get("valueFrom", {})]
        assert env == [{"name": k, "valueFrom": {"secretKeyRef": {
            "name": "{{workflow.parameters.s3_secret}}", "key": k, "optional": True}}} for k in keys], name
    others = [t["name"] for t in committed["spec"]["templates"] if "container" in t
              and any("secretKeyRef" in e.get("valueFrom", {}) for e in t["container"].get("env", []))]
    assert sorted(others) == ["prepare-dataset", "push-model"]
    params = {p["name"]: p.get("value") for p in committed["spec"]["arguments"]["parameters"]}
    assert params["s3_secret"] == "tfk8s-s3"
    ir_spec = yaml.safe_load(IR_PATH.read_text().split("\n---\n", 1)[1])  # the platform spec
    executors = ir_spec["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    for name in ("exec-prepare-dataset", "exec-push-model"):
        (secret,) = executors[name]["secretAsEnv"]
        assert [k["envVar"] for k in secret["keyToEnv"]] == keys and secret["optional"] is True
        assert secret["secretNameParameter"]["componentInputParameter"].endswith("s3_secret")

"""The compiled pipeline IR is committed, parses back into the PipelineSpec proto, and matches the source."""

from pathlib import Path

import yaml
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from pipelines.train import DEFAULT_OUTPUT, compile_pipeline

VOLATILE = ("sdkVersion",)


def _load(path: Path) -> dict:
    docs = list(yaml.safe_load_all(path.read_text()))
    spec = docs[0]
    for key in VOLATILE:
        spec.pop(key, None)
    return {"spec": spec, "platform": docs[1] if len(docs) > 1 else None}


def test_committed_ir_parses_into_the_pipeline_spec_proto():
    spec = yaml.safe_load_all(DEFAULT_OUTPUT.read_text())
    proto = json_format.ParseDict(next(spec), pipeline_spec_pb2.PipelineSpec())
    assert proto.pipeline_info.name == "tfk8s-train"
    tasks = proto.root.dag.tasks
    assert set(tasks) == {"ensure-volume", "prepare-dataset", "launch-training", "export-model",
                          "evaluate-model", "condition-branches-1"}
    assert list(tasks["prepare-dataset"].dependent_tasks) == ["ensure-volume"]
    assert list(tasks["launch-training"].dependent_tasks) == ["prepare-dataset"]
    assert list(tasks["export-model"].dependent_tasks) == ["launch-training"]
    assert sorted(tasks["evaluate-model"].dependent_tasks) == ["export-model", "launch-training", "prepare-dataset"]
    # only a blessed model is pushed; an unblessed one fails the run only when fail_on_unblessed is set
    branches = proto.components["comp-condition-branches-1"].dag.tasks
    blessed = proto.components[branches["condition-2"].component_ref.name].dag.tasks
    assert list(blessed) == ["push-model"]
    assert "evaluate-model" in branches["condition-2"].trigger_policy.condition
    not_blessed = proto.components[branches["condition-3"].component_ref.name].dag.tasks
    (inner,) = not_blessed.values()
    assert "fail_on_unblessed" in inner.trigger_policy.condition
    assert list(proto.components[inner.component_ref.name].dag.tasks) == ["reject-model"]
    params = proto.root.input_definitions.parameters
    assert params["workers"].default_value.number_value == 2
    assert params["dataset_name"].default_value.string_value == "mnist"


def _container_tasks(spec: dict) -> dict[str, tuple[dict, list[dict]]]:
    """Every container task (sub-DAGs walked) -> (task, [the tasks of the sub-DAGs enclosing it, outermost first])."""
    out: dict[str, tuple[dict, list[dict]]] = {}

    def walk(dag: dict, outer: list[dict]) -> None:
        for name, task in dag["tasks"].items():
            comp = spec["components"][task["componentRef"]["name"]]
            if "dag" in comp:
                walk(comp["dag"], [*outer, task])
            else:
                out[name] = (task, outer)

    walk(spec["root"]["dag"], [])
    return out


def test_components_install_nothing_at_start():
    spec = next(yaml.safe_load_all(DEFAULT_OUTPUT.read_text()))
    for name, executor in spec["deploymentSpec"]["executors"].items():
        command = " ".join(executor["container"]["command"])
        assert "pip install" not in command, name


def test_every_step_runs_the_image_parameter_resolved_when_the_run_starts():
    """set_container_image(image) on every task: each executor's image is a placeholder of the task's input
    `pipelinechannel--image`, which leads (through the enclosing sub-DAGs' inputs) to the pipeline's `image`."""
    spec = next(yaml.safe_load_all(DEFAULT_OUTPUT.read_text()))
    placeholder = "{{$.inputs.parameters['pipelinechannel--image']}}"
    tasks = _container_tasks(spec)
    assert len(tasks) == 7
    for name, (task, outer) in tasks.items():
        executor = spec["components"][task["componentRef"]["name"]]["executorLabel"]
        assert spec["deploymentSpec"]["executors"][executor]["container"]["image"] == placeholder, name
        source = task["inputs"]["parameters"]["pipelinechannel--image"]["componentInputParameter"]
        for dag_task in reversed(outer):  # up through dsl.If / dsl.Else to the root
            source = dag_task["inputs"]["parameters"][source]["componentInputParameter"]
        assert source == "image", name


def test_every_step_mounts_the_volume_and_the_launcher_knows_its_pod():
    platform = list(yaml.safe_load_all(DEFAULT_OUTPUT.read_text()))[1]
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    # every step but ensure-volume, which checks (or creates) the claim before anything mounts it
    mounting = {f"exec-{n}" for n in ("prepare-dataset", "launch-training", "export-model", "evaluate-model",
                                      "push-model", "reject-model")}
    assert set(executors) == mounting | {"exec-ensure-volume"}  # its runAsNonRoot (tests/steps/test_step_pods.py)
    assert "pvcMount" not in executors["exec-ensure-volume"]
    for name in mounting:
        assert executors[name]["pvcMount"][0]["mountPath"] == "/mnt/tfk8s", name
    field_env = {e["name"]: e["fieldPath"] for e in executors["exec-launch-training"]["fieldPathAsEnv"]}
    assert field_env == {"TFK8S_LAUNCHER_POD_NAME": "metadata.name", "TFK8S_LAUNCHER_POD_UID": "metadata.uid"}


def test_no_step_is_served_from_the_cache():
    spec = next(yaml.safe_load_all(DEFAULT_OUTPUT.read_text()))

    def tasks(dag):
        for name, task in dag["tasks"].items():
            yield name, task
            comp = spec["components"][task["componentRef"]["name"]]
            if "dag" in comp:
                yield from tasks(comp["dag"])

    steps = {n: t for n, t in tasks(spec["root"]["dag"]) if not n.startswith("condition")}
    assert len(steps) == 7
    assert all(t["cachingOptions"] == {} for t in steps.values())  # {} = enableCache false


def test_committed_ir_matches_the_source(tmp_path):
    fresh = compile_pipeline(tmp_path / "train.yaml")
    assert _load(fresh) == _load(DEFAULT_OUTPUT), "recompile: python pipelines/train.py --compile"


def test_training_defaults_are_the_measured_ones_everywhere():
    from tfk8s.core.builtin_trainer import DEFAULT_BATCH_SIZE, DEFAULT_EPOCHS, DEFAULT_LEARNING_RATE
    from tfk8s.core.policy import DEFAULT_MAX_RESTARTS, DEFAULT_PROGRESS_TIMEOUT_S
    from tfk8s.steps.parameters import DEFAULT_TIMEOUT_S

    spec = next(yaml.safe_load_all(DEFAULT_OUTPUT.read_text()))
    measured = {"epochs": DEFAULT_EPOCHS, "batch_size": DEFAULT_BATCH_SIZE, "learning_rate": DEFAULT_LEARNING_RATE,
                "timeout_s": DEFAULT_TIMEOUT_S, "progress_timeout_s": DEFAULT_PROGRESS_TIMEOUT_S,
                "max_restarts": DEFAULT_MAX_RESTARTS}
    root = spec["root"]["inputDefinitions"]["parameters"]
    launch = spec["components"]["comp-launch-training"]["inputDefinitions"]["parameters"]  # literals in source
    for key, value in measured.items():
        assert root[key]["defaultValue"] == launch[key]["defaultValue"] == value, key


def test_replica_image_defaults_to_the_project_image_everywhere():
    from tfk8s import DEFAULT_IMAGE

    spec = next(yaml.safe_load_all(DEFAULT_OUTPUT.read_text()))
    launch_inputs = spec["components"]["comp-launch-training"]["inputDefinitions"]["parameters"]
    assert launch_inputs["image"]["defaultValue"] == DEFAULT_IMAGE
    assert spec["root"]["inputDefinitions"]["parameters"]["image"]["defaultValue"] == DEFAULT_IMAGE


def test_tfds_downloads_by_default_and_evaluate_outputs_an_html_report():
    spec = next(yaml.safe_load_all(DEFAULT_OUTPUT.read_text()))
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["tfds_download"]["defaultValue"] is True
    outputs = spec["components"]["comp-evaluate-model"]["outputDefinitions"]["artifacts"]
    assert outputs["report"]["artifactType"]["schemaTitle"] == "system.HTML"


def _cel(condition: str, values: dict) -> bool:
    """A KFP trigger condition (CEL over inputs.parameter_values, as the IR writes them: ==, !, &&, ||, true,
    false) evaluated with ``values`` (task input name -> value)."""
    import re

    text = re.sub(r"inputs\.parameter_values\['([^']+)'\]", lambda m: repr(values[m.group(1)]), condition)
    text = text.replace("&&", " and ").replace("||", " or ").replace("!(", " not (")
    text = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", text))
    assert re.fullmatch(r"[\s()A-Za-z'=\-_.0-9]*", text), text  # nothing but comparisons of literals
    return bool(eval(text, {"__builtins__": {}}))  # the IR's own literal comparisons, checked above


def _runs(spec: dict, params: dict, blessed: bool) -> dict[str, dict]:
    """Walk the IR as KFP's driver does for one run: each DAG task's inputs from its scope (the enclosing DAG's
    inputs; evaluate-model's `blessed` output), its trigger condition decides; -> the container tasks that run,
    each with its resolved ``inputs`` and its DAG's ``scope`` (where kfp-kubernetes names the claim)."""
    ran: dict[str, dict] = {}

    def walk(dag: dict, scope: dict) -> None:
        for name, task in dag["tasks"].items():
            values = {}
            for key, src in task.get("inputs", {}).get("parameters", {}).items():
                if "componentInputParameter" in src:
                    values[key] = scope[src["componentInputParameter"]]
                elif "taskOutputParameter" in src:
                    out = src["taskOutputParameter"]
                    values[key] = blessed if (out["producerTask"], out["outputParameterKey"]) == (
                        "evaluate-model", "blessed") else f"<{out['producerTask']}.{out['outputParameterKey']}>"
                else:
                    values[key] = src.get("runtimeValue", {}).get("constant")
            condition = task.get("triggerPolicy", {}).get("condition")
            if condition and not _cel(condition, values):
                continue
            comp = spec["components"][task["componentRef"]["name"]]
            if "dag" in comp:
                walk(comp["dag"], values)
            else:
                ran[name] = {"inputs": values, "scope": scope}

    walk(spec["root"]["dag"], params)
    return ran


def test_the_gates_conditions_run_push_or_reject_for_every_blessed_and_fail_on_unblessed():
    """What KFP's driver decides for each of the four runs, from the committed IR: blessed -> push; not blessed ->
    reject only with fail_on_unblessed; the five steps before the gate always; every step's image and claim
    name are the pipeline's parameters, also inside the conditions."""
    docs = list(yaml.safe_load_all(DEFAULT_OUTPUT.read_text()))
    spec, platform = docs[0], docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    root = {k: v.get("defaultValue") for k, v in spec["root"]["inputDefinitions"]["parameters"].items()}
    root.update(image="registry.example/mine:1", pvc_name="my-claim")
    before = {"ensure-volume", "prepare-dataset", "launch-training", "export-model", "evaluate-model"}
    for blessed in (True, False):
        for fail_on_unblessed in (True, False):
            ran = _runs(spec, {**root, "fail_on_unblessed": fail_on_unblessed}, blessed)
            gate = {"push-model"} if blessed else ({"reject-model"} if fail_on_unblessed else set())
            assert set(ran) == before | gate, (blessed, fail_on_unblessed)
            for name, task in ran.items():
                assert task["inputs"]["pipelinechannel--image"] == "registry.example/mine:1", name
                executor = spec["components"][f"comp-{name}"]["executorLabel"]
                for mount in platform.get(executor, {}).get("pvcMount", []):
                    claim = mount["pvcNameParameter"]["componentInputParameter"]
                    assert task["scope"][claim] == "my-claim", name
            mounted = {n for n in ran
                       if platform.get(spec["components"][f"comp-{n}"]["executorLabel"], {}).get("pvcMount")}
            assert mounted == set(ran) - {"ensure-volume"}

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


def test_components_install_nothing_at_start():
    spec = next(yaml.safe_load_all(DEFAULT_OUTPUT.read_text()))
    for name, executor in spec["deploymentSpec"]["executors"].items():
        command = " ".join(executor["container"]["command"])
        assert "pip install" not in command, name
        assert executor["container"]["image"] == "ghcr.io/tfk8s/tfk8s:0.1.0"


def test_every_step_mounts_the_volume_and_the_launcher_knows_its_pod():
    platform = list(yaml.safe_load_all(DEFAULT_OUTPUT.read_text()))[1]
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    # every step but ensure-volume, which checks (or creates) the claim before anything mounts it
    assert set(executors) == {f"exec-{n}" for n in ("prepare-dataset", "launch-training", "export-model",
                                                     "evaluate-model", "push-model", "reject-model")}
    for name, cfg in executors.items():
        assert cfg["pvcMount"][0]["mountPath"] == "/mnt/tfk8s", name
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
    from tfk8s.steps.params import DEFAULT_TIMEOUT_S

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

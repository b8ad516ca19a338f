"""The steps' own pods (tfk8s/steps/step_pods.py): requests and limits on every step, in both compiled forms, their
annotations and labels, the securityContext of Pod Security ``restricted``; the --steps overrides and their
refusals."""

from pathlib import Path

import pytest
import yaml

from tfk8s.launcher.kubernetes.values import parse_quantity
from tfk8s.steps.step_pods import STEP_PODS, StepPod, markdown_table, step_pods

REPO = Path(__file__).resolve().parents[2]


def _ir_resources() -> dict[str, dict]:
    ir = next(yaml.safe_load_all((REPO / "compiled" / "train.yaml").read_text()))
    executors = ir["deploymentSpec"]["executors"]
    # KFP writes each twice: resourceCpuRequest... as given (what its backend reads), and the older cpuRequest...
    # as numbers (CPUs, GB)
    return {step: {k: v for k, v in executors[f"exec-{step.replace('_', '-')}"]["container"]["resources"].items()
                   if k.startswith("resource")} for step in STEP_PODS}


def _argo_templates(name: str) -> dict[str, dict]:
    """The step templates of a committed Argo export, by the step whose component they run."""
    wf = yaml.safe_load((REPO / "compiled" / name).read_text())
    spec = wf["spec"].get("workflowSpec", wf["spec"])
    names = {step.replace("_", "-"): step for step in STEP_PODS}
    out = {}
    for t in spec["templates"]:
        if t["name"] in names:
            out[names[t["name"]]] = t
    return out


def test_every_step_declares_requests_and_limits_in_the_kfp_ir():
    assert _ir_resources() == {step: {"resourceCpuRequest": p.cpu, "resourceMemoryRequest": p.memory,
                                      "resourceCpuLimit": p.cpu_limit, "resourceMemoryLimit": p.memory_limit}
                               for step, p in STEP_PODS.items()}
    assert STEP_PODS["prepare_dataset"] == StepPod(cpu="250m", memory="1Gi", cpu_limit="2", memory_limit="4Gi")


RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                        "seccompProfile": {"type": "RuntimeDefault"}}


def test_every_step_runs_as_non_root_in_the_kfp_ir():
    # KFP's compiler adds allowPrivilegeEscalation, capabilities and seccomp to every container on its own
    # (backend/src/v2/compiler/argocompiler/security_context.go); runAsNonRoot of the user's container only from here
    platform = list(yaml.safe_load_all((REPO / "compiled" / "train.yaml").read_text()))[1]
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert {s: executors[f"exec-{s.replace('_', '-')}"].get("securityContext") for s in STEP_PODS} == {
        s: {"runAsNonRoot": True} for s in STEP_PODS}


@pytest.mark.parametrize("name", ["train.argo.yaml", "train.cron.yaml"])
def test_both_argo_exports_carry_the_restricted_security_context(name):
    templates = _argo_templates(name)
    assert {s: t["container"]["securityContext"] for s, t in templates.items()} == {
        s: RESTRICTED_CONTAINER for s in STEP_PODS}
    wf = yaml.safe_load((REPO / "compiled" / name).read_text())
    spec = wf["spec"].get("workflowSpec", wf["spec"])
    assert spec["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


@pytest.mark.parametrize("name", ["train.argo.yaml", "train.cron.yaml"])
def test_both_argo_exports_carry_the_same_resources_and_the_launch_steps_annotations(name):
    templates = _argo_templates(name)
    assert set(templates) == set(STEP_PODS)
    for step, pod in STEP_PODS.items():
        assert templates[step]["container"]["resources"] == {
            "requests": {"cpu": pod.cpu, "memory": pod.memory},
            "limits": {"cpu": pod.cpu_limit, "memory": pod.memory_limit}}, step
    assert templates["launch_training"]["metadata"]["annotations"] == {
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false", "karpenter.sh/do-not-disrupt": "true"}
    assert "metadata" not in templates["prepare_dataset"] or not templates["prepare_dataset"]["metadata"].get(
        "annotations")


def test_the_steps_fit_a_two_cpu_node_beside_the_launch_step_and_two_replicas():
    launch_and_replicas = parse_quantity(STEP_PODS["launch_training"].cpu) + 2 * parse_quantity("500m")
    assert launch_and_replicas <= parse_quantity("1200m")
    for pod in STEP_PODS.values():
        assert parse_quantity(pod.cpu) <= parse_quantity("250m")
        assert parse_quantity(pod.memory_limit) >= parse_quantity("1Gi")
        assert parse_quantity(pod.cpu_limit) >= parse_quantity("1")  # a quota on limits.cpu needs one; it throttles


def test_overrides_apply_all_steps_first_then_the_steps_own_and_merge_metadata():
    pods = step_pods('{"*": {"labels": {"team.example.com/cost-center": "ml"}, "cpu_limit": "2"},'
                     ' "prepare_dataset": {"memory_limit": "8Gi", "cpu_limit": "4"},'
                     ' "launch_training": {"annotations": {"karpenter.sh/do-not-disrupt": null}}}')
    assert pods["prepare_dataset"] == StepPod(cpu="250m", memory="1Gi", memory_limit="8Gi", cpu_limit="4",
                                              labels={"team.example.com/cost-center": "ml"})
    assert pods["ensure_volume"].cpu_limit == "2"
    assert pods["launch_training"].annotations == {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
    assert step_pods() == dict(STEP_PODS) and step_pods("") == dict(STEP_PODS)


@pytest.mark.parametrize(("steps", "message"), [
    ("{nope", "--steps is not valid JSON"),
    ('{"prepare": {}}', "--steps has unknown steps ['prepare']"),
    ('{"*": {"mem": "1Gi"}}', "--steps['*'] has unknown keys ['mem']"),
    ('{"export_model": {"memory_limit": "512Mi"}}',
     "--steps['export_model']: memory_limit '512Mi' is below the request memory='1Gi'"),
    ('{"export_model": {"cpu": "lots"}}', "--steps['export_model']: cpu: 'lots' is not a Kubernetes quantity"),
    ('{"*": {"labels": {"tfk8s.dev/job-name": "x"}}}', "--steps['*']: labels must not set 'tfk8s.dev/job-name'"),
    ('{"*": {"cpu": 1}}', "cpu must be a Kubernetes quantity as a string"),
])
def test_bad_overrides_name_the_step_and_the_key(steps, message):
    with pytest.raises(ValueError) as e:
        step_pods(steps)
    assert message in str(e.value)


def test_docs_kubernetes_md_shows_the_defaults():
    assert markdown_table() in (REPO / "docs" / "kubernetes.md").read_text()


def test_train_py_steps_flag_compiles_the_overrides_in_and_refuses_a_local_run(tmp_path, monkeypatch):
    from pipelines import train

    monkeypatch.setattr(train, "STEP_PODS", train.STEP_PODS)  # main() sets it for the process: restored after
    out = tmp_path / "train.yaml"
    train.main(["--compile", "--output", str(out), "--steps",
                '{"prepare_dataset": {"memory_limit": "8Gi", "cpu_limit": "2"}, "*": {"labels": {"team.io/c": "ml"}}}'])
    ir, platform = yaml.safe_load_all(out.read_text())
    prepare = ir["deploymentSpec"]["executors"]["exec-prepare-dataset"]["container"]["resources"]
    assert (prepare["resourceMemoryLimit"], prepare["resourceCpuLimit"]) == ("8Gi", "2")
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert all(executors[f"exec-{s.replace('_', '-')}"]["podMetadata"]["labels"] == {"team.io/c": "ml"}
               for s in STEP_PODS)
    with pytest.raises(SystemExit, match="--steps sets the steps' pods in a cluster"):
        train.main(["--local", "--steps", "{}"])
    with pytest.raises(SystemExit, match="--steps is compiled in: it cannot change a --package compiled before"):
        train.main(["--run", "--host", "http://127.0.0.1:9", "--package", str(out), "--steps", "{}"])
    with pytest.raises(SystemExit, match=r"^tfk8s: --steps has unknown steps \['prep'\]"):
        train.main(["--compile", "--output", str(out), "--steps", '{"prep": {}}'])

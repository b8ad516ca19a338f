"""hack/argo/install.yaml (what the e2e node installs, in our words) is Argo Workflows v3.7.3's own cluster install:
the same CRDs (names, kinds, scopes, short names, subresources) and the same RBAC rule for rule, held against
the release's manifests in the Go module cache (``hack/argo/build.sh`` downloads them; skipped until then)."""

import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "hack" / "argo" / "install.yaml"
VERSION = "v3.7.3"


def _ours() -> list[dict]:
    return [d for d in yaml.safe_load_all(INSTALL.read_text()) if d]


@pytest.fixture(scope="module")
def upstream() -> Path:
    try:
        cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("needs Go (its module cache holds Argo's release manifests)")
    root = Path(cache) / f"github.com/argoproj/argo-workflows/v3@{VERSION}" / "manifests"
    if not root.is_dir():
        pytest.skip(f"Argo {VERSION}'s module is not downloaded yet: bash hack/argo/build.sh")
    return root


def _docs(files) -> list[dict]:
    return [d for f in sorted(files) for d in yaml.safe_load_all(f.read_text()) if d and "kind" in d]


def test_the_pinned_version_is_the_build_scripts_and_the_go_mods():
    assert f"ARGO_VERSION={VERSION} " in (REPO / "hack" / "argo" / "build.sh").read_text()
    assert f"github.com/argoproj/argo-workflows/v3 {VERSION}\n" in (REPO / "hack" / "argo" / "go.mod").read_text()
    images = {c["image"] for d in _ours() if d["kind"] == "Deployment" for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {f"tfk8s.local/workflow-controller:{VERSION}"}
    assert f"tfk8s.local/argoexec:{VERSION}" in INSTALL.read_text()


def test_crds_are_the_releases(upstream):
    def shape(d: dict) -> tuple:
        s = d["spec"]
        return (d["metadata"]["name"], s["group"], s["scope"], s["names"]["kind"], s["names"]["plural"],
                tuple(s["names"].get("shortNames", [])), tuple((v["name"], v["served"], v["storage"],
                                                                 repr(v.get("subresources"))) for v in s["versions"]))

    theirs = sorted(shape(d) for d in _docs((upstream / "base" / "crds" / "minimal").glob("argoproj.io_*.yaml")))
    ours = sorted(shape(d) for d in _ours() if d["kind"] == "CustomResourceDefinition")
    assert len(ours) == 8 and ours == theirs


def test_controller_rbac_is_the_releases_rule_for_rule(upstream):
    def rules(docs: list[dict]) -> dict:
        out = {}
        for d in docs:
            if d["kind"] in ("ClusterRole", "Role") and not d["metadata"]["name"].startswith("argo-aggregate"):
                out[(d["kind"], d["metadata"]["name"])] = sorted(
                    (tuple(r["apiGroups"]), tuple(sorted(r["resources"])), tuple(sorted(r["verbs"])),
                     tuple(r.get("resourceNames", []))) for r in d["rules"])
            if d["kind"] in ("ClusterRoleBinding", "RoleBinding"):
                out[(d["kind"], d["metadata"]["name"])] = (d["roleRef"]["name"],
                                                           [(s["kind"], s["name"]) for s in d["subjects"]])
        return out

    theirs = rules(_docs((upstream / "cluster-install-no-crds" / "workflow-controller-rbac").glob("*.yaml")))
    assert rules(_ours()) == theirs and len(theirs) == 4


def test_controller_deployment_is_the_releases_with_our_images(upstream):
    theirs = {d["kind"]: d for d in _docs((upstream / "base" / "workflow-controller").glob("*.yaml"))}
    ours = {d["kind"]: d for d in _ours()}
    assert ours["PriorityClass"]["value"] == theirs["PriorityClass"]["value"]
    assert ours["ServiceAccount"]["metadata"]["name"] == theirs["ServiceAccount"]["metadata"]["name"] == "argo"
    t_pod, o_pod = (x["Deployment"]["spec"]["template"]["spec"] for x in (theirs, ours))
    for key in ("serviceAccountName", "priorityClassName", "nodeSelector"):
        assert o_pod[key] == t_pod[key], key
    (t,), (o,) = t_pod["containers"], o_pod["containers"]
    for key in ("name", "command", "env", "ports", "livenessProbe", "securityContext"):
        assert o[key] == t[key], key
    assert o["args"] == ["--executor-image", f"tfk8s.local/argoexec:{VERSION}", "--executor-image-pull-policy", "Never"]


def test_argos_own_linter_accepts_the_exported_workflow_and_cron_workflow(tmp_path):
    """``argo lint --offline`` (the CLI of hack/argo/build.sh: Argo's validation, no cluster) on the committed
    files; and it has teeth: a task naming a template that does not exist is refused."""
    from tests.realnode.argo_fixtures import argo_dir

    d = argo_dir()
    if d is None:
        pytest.skip("needs hack/argo/build.sh's binaries (make test-e2e builds them)")
    committed = [REPO / "compiled" / "train.argo.yaml", REPO / "compiled" / "train.cron.yaml"]
    r = subprocess.run([str(d / "argo"), "lint", "--offline", "--output", "simple", *map(str, committed)],
                       check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "no linting errors found" in r.stdout, r.stdout + r.stderr
    broken = yaml.safe_load(committed[0].read_text())
    broken["spec"]["templates"][0]["dag"]["tasks"][0]["template"] = "no-such-template"
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(broken))
    r = subprocess.run([str(d / "argo"), "lint", "--offline", "--output", "simple", str(tmp_path / "broken.yaml")],
                       check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "no-such-template" in r.stdout + r.stderr

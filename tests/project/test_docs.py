"""The "What happens when ..." table of docs/failures.md (README links it): every row names tests that exist (so
each behaviour it claims is pinned by a test), and its rules table is the policy's own (tfk8s.core.policy.RULES)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _rows() -> list[tuple[str, list[str]]]:
    text = (REPO / "docs" / "failures.md").read_text()
    section = text.split("## What happens when ...", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("what happens when ...", "---"):
            rows.append((cells[0], re.findall(r"`([\w/]*test_\w+\.py::test_\w+)`", cells[2])))
    return rows


def test_every_row_of_the_faults_table_names_tests_that_exist():
    rows = _rows()
    assert len(rows) >= 40
    for what, tests in rows:
        assert tests, f"row {what!r} names no test"
        for ref in tests:
            file, name = ref.split("::")
            source = (REPO / "tests" / file).read_text()
            assert re.search(rf"^def {name}\(", source, re.MULTILINE), f"row {what!r}: {ref} does not exist"


def test_the_table_covers_the_faults_of_issue_9_and_the_cases_handled_before():
    whats = " ".join(what for what, _ in _rows())
    for case in ("kill -9", "hangs", "node is gone", "OOMKilled", "evicted", "unschedulable", "image is missing",
                 "launcher is killed", "ps (or evaluator) is left over", "ProvisioningFailed", "older than 2.5",
                 "Argo 3.4+", "--schedule ''", "dataset_name=nope", "full or read-only", "cannot exist",
                 "Bad_Name", "NaN", "peer that never comes up"):
        assert case in whats, case


def test_the_rules_table_is_the_policys():
    from tfk8s.core.policy import RULES

    text = (REPO / "docs" / "failures.md").read_text()
    section = text.split("## The rules", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| failure |")]
    assert rows == [[r.failure, r.kind.value, r.action] for r in RULES]


def test_the_readme_links_the_failures_doc_once():
    assert (REPO / "README.md").read_text().count("(docs/failures.md)") == 1


def test_the_kubernetes_settings_table_is_generated_from_kubernetes_params():
    """docs/kubernetes.md's table of the Kubernetes settings is KubernetesParams' own (names, flags, defaults, help):
    a field added to the code and not to the doc fails here."""
    from tfk8s.launcher.kubernetes.settings import KubernetesParams, markdown_table

    text = (REPO / "docs" / "kubernetes.md").read_text()
    section = text.split("\n## Parameters\n", 1)[1].split("\n## ", 1)[0]
    table = "".join(line + "\n" for line in section.splitlines() if line.startswith("|"))
    assert table == markdown_table()
    for name in KubernetesParams.names():
        assert f"| `{name}`" in table, name
    assert "| `gpu_image` | `--gpu-image` |" in table

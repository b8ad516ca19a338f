"""The "What happens when ..." table of docs/failures.md (README links it): every row names tests that exist (so
each behaviour it claims is pinned by a test), and its rules table is the policy's own (tfk8s.core.policy.RULES)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")


def _rows() -> list[tuple[str, list[tuple[str, str]]]]:
    """The rows of docs/failures.md's "What happens when ..." table: (what happens, [(test file, test name)])."""
    text = (REPO / "docs" / "failures.md").read_text()
    section = text.split("## What happens when ...", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("|") or line.startswith(("| what happens when ... |", "|---")):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 3, f"a row of {len(cells)} cells (a | in a cell?): {line[:100]}"
        refs = re.findall(r"`[^`]*::[^`]*`", cells[2])
        assert len(refs) == len(TEST_REF.findall(cells[2])), f"row {cells[0]!r}: name tests as `tests/...py::test_name`"
        rows.append((cells[0], TEST_REF.findall(cells[2])))
    return rows


def _test_functions(path: str) -> set[str]:
    """The names of the test functions defined at the top of the test file ``path`` (parsed, not imported)."""
    tree = ast.parse((REPO / path).read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_every_row_of_the_faults_table_names_tests_that_exist():
    rows = _rows()
    assert len(rows) >= 40
    for what, tests in rows:
        assert tests, f"row {what!r} names no test as `tests/...py::test_name`"
        for file, name in tests:
            assert (REPO / file).is_file(), f"row {what!r}: {file} does not exist"
            assert name in _test_functions(file), f"row {what!r}: {file}::{name} does not exist"


def test_each_behaviour_has_one_row():
    whats = [what for what, _ in _rows()]
    assert sorted(w for w in set(whats) if whats.count(w) > 1) == []


def test_the_checker_finds_a_missing_test():
    assert "test_every_row_of_the_faults_table_names_tests_that_exist" in _test_functions("tests/project/test_docs.py")
    assert "test_no_such_test" not in _test_functions("tests/project/test_docs.py")
    assert TEST_REF.findall("`tests/core/test_cluster.py::test_success_policies`, `core/test_x.py::test_y`") == [
        ("tests/core/test_cluster.py", "test_success_policies")]


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


def _lines_outside_code(path: Path) -> list[tuple[int, str]]:
    """(line number, line) of the Markdown file ``path``, fenced code blocks left out."""
    found, fenced = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            found.append((number, line))
    return found


def test_the_docs_prose_is_wrapped_at_120_characters():
    """Every line of docs/*.md but tables and code is at most 120 characters; docs/development.md's tables at most
    200 (a long cell's detail goes to the prose under its table)."""
    long = [f"{p.name}:{n} ({len(line)})" for p in sorted((REPO / "docs").glob("*.md"))
            for n, line in _lines_outside_code(p) if len(line) > 120 and not line.startswith("|")]
    assert long == []
    dev = REPO / "docs" / "development.md"
    assert [n for n, line in _lines_outside_code(dev) if line.startswith("|") and len(line) > 200] == []

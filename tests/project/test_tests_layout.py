"""tests/ mirrors the code: a module ``tfk8s/<path>/<mod>.py`` has its own tests at ``tests/<path>/test_<mod>.py``
(or ``test_<mod>_<aspect>.py``: ``tests/launcher/test_local_stops.py`` for ``tfk8s/launcher/local.py``), a package's
``__init__.py`` at ``tests/<path>/test_<package>.py``; every other module has one row in docs/development.md's
"The tests' layout" table saying where it is covered (the test files, which must exist) or why it has no tests of
its own. A package ``__init__.py`` with nothing but its docstring and imports needs neither."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NO_TESTS = "no tests of its own:"


def own_tests(module: Path) -> list[Path]:
    """The test files at ``module``'s own path under tests/ (``module`` relative to the repository)."""
    parts = module.relative_to("tfk8s").parts
    folder = ROOT / "tests" / Path(*parts[:-1])
    stem = (parts[-2] if len(parts) > 1 else "tfk8s") if parts[-1] == "__init__.py" else Path(parts[-1]).stem
    return sorted(p for p in folder.glob(f"test_{stem}*.py") if p.stem == f"test_{stem}"
                  or p.stem.startswith(f"test_{stem}_"))


def has_code(module: Path) -> bool:
    """Anything but a docstring and imports."""
    return any(not isinstance(n, ast.Import | ast.ImportFrom)
               and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
               for n in ast.parse((ROOT / module).read_text()).body)


def coverage_table() -> dict[str, str]:
    """docs/development.md's table: module path -> where it is covered (the cell as written)."""
    text = (ROOT / "docs" / "development.md").read_text()
    section = text.split("## The tests' layout", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and re.fullmatch(r"`tfk8s/[\w/]+\.py`", cells[0]):
            assert cells[0] not in rows, f"{cells[0]} has two rows"
            rows[cells[0].strip("`")] = cells[1]
    return rows


def modules() -> list[Path]:
    return sorted(p.relative_to(ROOT) for p in (ROOT / "tfk8s").rglob("*.py"))


def test_every_module_has_its_own_tests_or_a_row_saying_where_it_is_covered():
    table = coverage_table()
    missing = [str(m) for m in modules() if not own_tests(m) and has_code(m) and str(m) not in table]
    assert missing == [], f"give these tests/<path>/test_<mod>.py or a row in docs/development.md: {missing}"


def test_each_row_names_test_files_that_exist_or_says_why_there_are_none():
    table = coverage_table()
    assert len(table) >= 40
    for module, cell in table.items():
        named = re.findall(r"`(tests/[\w/]+\.py)`", cell)
        assert named or cell.startswith(NO_TESTS), f"{module}: names no test file and does not say {NO_TESTS!r}"
        for path in named:
            assert (ROOT / path).is_file(), f"{module}: {path} does not exist"


def test_no_row_is_stale():
    """A row for a module that is gone, or that now has tests at its own path, is removed."""
    for module in coverage_table():
        assert (ROOT / module).is_file(), f"{module} is not a module any more: remove its row"
        assert not own_tests(Path(module)), f"{module} has {own_tests(Path(module))}: remove its row"


def test_the_rule_itself():
    assert [p.name for p in own_tests(Path("tfk8s/launcher/local.py"))] == [
        "test_local.py", "test_local_ports.py", "test_local_recovery.py", "test_local_stops.py",
        "test_local_stops_tf.py"]
    assert [str(p.relative_to(ROOT)) for p in own_tests(Path("tfk8s/runtime/__init__.py"))] == [
        "tests/runtime/test_runtime.py"]
    assert own_tests(Path("tfk8s/cmd/run.py")) == []  # test_run_*.py would count, test_running.py not
    assert not has_code(Path("tfk8s/core/__init__.py")) and has_code(Path("tfk8s/cmd/__init__.py"))

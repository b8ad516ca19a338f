"""Lower layers never import upper ones: tfk8s/ imports neither pipelines/ nor components/ (not even inside a
function), and tfk8s.params does not import tfk8s.steps (which calls it)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_tfk8s_never_imports_pipelines_or_components():
    offenders = {str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if n.split(".")[0] in ("pipelines",
                                                                                                  "components"))
                 for p in (ROOT / "tfk8s").rglob("*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_params_does_not_import_steps():
    """steps (upper) checks with params (lower); params takes the Kubernetes names from tfk8s.kube.settings."""
    params = _imports(ROOT / "tfk8s" / "params.py")
    assert not any(n.startswith("tfk8s.steps") for n in params), params
    assert "tfk8s.kube.settings" in params

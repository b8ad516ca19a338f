"""The house's layers: every folder may import only what its row of :data:`LAYERS` says, besides itself, the
standard library and third-party packages; imports inside functions count. The two backends never import each
other, ``tfk8s.core`` imports the standard library only, outside ``tfk8s.launcher`` only its seam
(:data:`LAUNCHER_DOORS`) is imported, and no code outside it branches on a backend's name. README.md's architecture picture names the same
folders."""

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LAYERS: dict[str, set[str]] = {
    # package             the tfk8s packages it may import
    "tfk8s.core": set(),  # the shared vocabulary: standard library only
    "tfk8s.runtime": {"tfk8s.core"},  # inside a replica, as any user program
    "tfk8s.launcher": {"tfk8s.core"},  # runs a TrainingJob's replicas (local, kubernetes)
    "tfk8s.tracking": {"tfk8s.core"},  # job records, kept logs, the progress view
    "tfk8s.steps": {"tfk8s.core", "tfk8s.runtime", "tfk8s.launcher", "tfk8s.tracking"},  # one module per step
    "tfk8s.submit": {"tfk8s.core", "tfk8s.steps"},  # KFP client, cron, --param, checks, the Argo export
    "tfk8s.localrun": {"tfk8s.core", "tfk8s.tracking", "tfk8s.steps"},  # pipelines/train.py --local
    "tfk8s.cmd": {"tfk8s.core", "tfk8s.tracking", "tfk8s.launcher", "tfk8s.steps"},  # the tfk8s command
    "trainer": {"tfk8s.core", "tfk8s.runtime"},  # the built-in program: runtime and core only
    "components": {"tfk8s.steps"},  # thin KFP components: the steps only
    "pipelines": {"components", "tfk8s.core", "tfk8s.steps", "tfk8s.submit", "tfk8s.localrun"},
}
ANYONE = {"tfk8s"}  # the package root: __version__ and DEFAULT_IMAGE only, it imports nothing
NEVER_EACH_OTHER = [("tfk8s.launcher.local", "tfk8s.launcher.kubernetes")]
LAUNCHER_DOORS = {"tfk8s.launcher.backends", "tfk8s.launcher.kubernetes.settings"}
"""What of tfk8s.launcher other layers may import: the backends' seam, and the Kubernetes settings' public face
(the parameter table and the CLI flags are generated from KubernetesParams)."""
PARTS = ("tfk8s.", "trainer", "components", "pipelines")


MODULE_NAME = re.compile(r"^tfk8s(\.\w+)+$")  # a tfk8s module named by a string: imported by name


def _imports(source: str, module: str = "") -> set[str]:
    """What ``source`` (the module ``module``) imports: ``import`` and ``from ... import`` statements anywhere
    (inside functions too; relative ones resolved against ``module``), and module names given as strings
    (``importlib.import_module("tfk8s.x")``, a preload list)."""
    names = set()
    tree = ast.parse(source)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from ..launcher import local, inside package `module`'s parent
                parts = module.split(".")[: -node.level]
                base = ".".join(parts + ([node.module] if node.module else []))
            if base in ANYONE or (node.level and not node.module):  # `from tfk8s import runtime`: the subpackage
                names |= {f"{base}.{a.name}" for a in node.names}
            else:
                names.add(base)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
              and MODULE_NAME.match(node.value)):
            names.add(node.value)
    return names


def _layer(module: str) -> str | None:
    """The row of ``module`` (the longest package prefix), None for a name of no row."""
    rows = [r for r in LAYERS if module == r or module.startswith(r + ".")]
    return max(rows, key=len) if rows else None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def violations(sources: dict[str, str]) -> list[str]:
    """Every import of ``sources`` (module name -> source) that breaks a rule, as ``module imports name``."""
    found = []
    for module, source in sources.items():
        row = _layer(module) or ("tfk8s.cmd" if module == "tfk8s.__main__" else None)
        if row is None:
            if module.startswith(PARTS) and module not in ANYONE:
                found.append(f"{module} is in no row of the layer table: put it in a layer's folder")
            continue
        for name in sorted(_imports(source, module)):
            top = name.split(".")[0]
            if row == "tfk8s.core" and top not in sys.stdlib_module_names and top != "tfk8s":
                found.append(f"{module} imports {name}: tfk8s.core is standard library only")
                continue
            if name in ANYONE or not (name.startswith(PARTS) or name in ("tfk8s",)):
                continue
            target = _layer(name)
            if target is None or target == row:
                continue
            if target not in LAYERS[row]:
                found.append(f"{module} imports {name}: {row} may import {sorted(LAYERS[row]) or 'nothing'}")
        if "tfk8s.launcher" in LAYERS[row]:  # a layer that may not import it at all is told so above
            for name in sorted(_imports(source, module)):
                if _layer(name) == "tfk8s.launcher" and name not in LAUNCHER_DOORS:
                    found.append(f"{module} imports {name}: outside tfk8s.launcher only {sorted(LAUNCHER_DOORS)}")
        for a, b in NEVER_EACH_OTHER:
            for own, other in ((a, b), (b, a)):
                if (module == own or module.startswith(own + ".")) and any(
                        n == other or n.startswith(other + ".") for n in _imports(source, module)):
                    found.append(f"{module} imports {other}: the two backends never import each other")
    return found


def _product() -> dict[str, str]:
    paths = [p for top in ("tfk8s", "trainer", "components", "pipelines") for p in (ROOT / top).rglob("*.py")]
    return {_module_name(p): p.read_text() for p in paths}


def test_every_import_keeps_to_the_layer_table():
    assert violations(_product()) == []


def test_the_table_covers_every_package_of_the_product():
    packages = {_module_name(p.parent / "__init__.py") for p in (ROOT / "tfk8s").glob("*/__init__.py")}
    assert packages - set(LAYERS) == set()
    assert {_layer(m) for m in _product()} - {None} == set(LAYERS)


def test_a_broken_rule_is_reported():
    """The checker itself: each kind of break is found (an upward import inside a function too)."""
    broken = {
        "tfk8s.core.layout": "import numpy\nfrom tfk8s.steps.parameters import check\n",
        "tfk8s.runtime.data": "def f():\n    from tfk8s.launcher.local import run_local\n",
        "trainer.task": "from tfk8s.steps.launch_training import build_job\n",
        "components.export_model": "from tfk8s.core.layout import RunLayout\n",
        "tfk8s.launcher.local": "from tfk8s.launcher.kubernetes import objects\n",
        "tfk8s.runtime.outputs": "from tfk8s import tracking\n",
        "tfk8s.steps.parameters": "from tfk8s.core.job import TrainingJob\nfrom tfk8s.runtime import shards\n",
        "tfk8s.flat": "import os\n",
        "tfk8s.core.errors": "def f():\n    from ..cmd import context\n",
        "tfk8s.runtime.strategies": "from ..launcher import local\n",
        "tfk8s.localrun.step_server": "PRELOAD = ('tfk8s.launcher.local',)\n",
    }
    assert violations(broken) == [
        "tfk8s.core.layout imports numpy: tfk8s.core is standard library only",
        "tfk8s.core.layout imports tfk8s.steps.parameters: tfk8s.core may import nothing",
        "tfk8s.runtime.data imports tfk8s.launcher.local: tfk8s.runtime may import ['tfk8s.core']",
        "trainer.task imports tfk8s.steps.launch_training: trainer may import ['tfk8s.core', 'tfk8s.runtime']",
        "components.export_model imports tfk8s.core.layout: components may import ['tfk8s.steps']",
        "tfk8s.launcher.local imports tfk8s.launcher.kubernetes: the two backends never import each other",
        "tfk8s.runtime.outputs imports tfk8s.tracking: tfk8s.runtime may import ['tfk8s.core']",
        "tfk8s.flat is in no row of the layer table: put it in a layer's folder",
        "tfk8s.core.errors imports tfk8s.cmd: tfk8s.core may import nothing",
        "tfk8s.runtime.strategies imports tfk8s.launcher: tfk8s.runtime may import ['tfk8s.core']",
        ("tfk8s.localrun.step_server imports tfk8s.launcher.local: tfk8s.localrun may import ['tfk8s.core', "
         "'tfk8s.steps', 'tfk8s.tracking']"),
    ]
    assert violations({"tfk8s.steps.parameters": broken["tfk8s.steps.parameters"]}) == []


def test_outside_the_launcher_only_its_seam_is_imported():
    """tfk8s.cmd and tfk8s.steps may import the launcher layer, but only through its doors."""
    assert violations({
        "tfk8s.cmd.delete": "from tfk8s.launcher.kubernetes.cleanup import delete_job_objects\n",
        "tfk8s.steps.cli": "def f():\n    from tfk8s.launcher.kubernetes import render_manifests\n",
        "tfk8s.steps.parameters": "from tfk8s.launcher.backends import BACKENDS\n"
                              "from tfk8s.launcher.kubernetes.settings import KubernetesParams\n",
        "tfk8s.launcher.local": "from tfk8s.launcher.stopping import stop_signals\n",
    }) == [
        ("tfk8s.cmd.delete imports tfk8s.launcher.kubernetes.cleanup: outside tfk8s.launcher only "
         "['tfk8s.launcher.backends', 'tfk8s.launcher.kubernetes.settings']"),
        ("tfk8s.steps.cli imports tfk8s.launcher.kubernetes: outside tfk8s.launcher only "
         "['tfk8s.launcher.backends', 'tfk8s.launcher.kubernetes.settings']"),
    ]




def backend_branches(sources: dict[str, str]) -> list[str]:
    """Every comparison of a backend's name outside tfk8s.launcher (``backend == "local"``,
    ``r.get("backend") != ...``, ``backend in ("local", ...)``): a branch on the name instead of a question to
    the backend (:mod:`tfk8s.launcher.backends`), as ``module:line``."""
    found = []
    for module, source in sources.items():
        if module == "tfk8s.launcher" or module.startswith("tfk8s.launcher."):
            continue
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
                parts = [node.left, *node.comparators]
                if any(_names_backend(p) for p in parts) and any(
                        isinstance(p, ast.Constant) and isinstance(p.value, str) for p in parts):
                    found.append(f"{module}:{node.lineno}")
    return found


def _names_backend(node: ast.AST) -> bool:
    """``backend``, ``x.backend``, ``r["backend"]``, ``r.get("backend")``."""
    if isinstance(node, ast.Name):
        return node.id == "backend"
    if isinstance(node, ast.Attribute):
        return node.attr == "backend"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "backend"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "backend"
    return False


def test_no_branch_on_a_backends_name_outside_the_launcher():
    assert backend_branches(_product()) == []
    assert backend_branches({
        "tfk8s.cmd.get": 'if r.get("backend") == "kubernetes":\n    pass\n',
        "tfk8s.steps.x": 'ok = backend != "local"\nfine = backend == other\n',
        "tfk8s.tracking.records": 'if record["backend"] == "local":\n    pass\n',
        "tfk8s.launcher.backends": 'same = backend == "local"\n',
    }) == ["tfk8s.cmd.get:1", "tfk8s.steps.x:1", "tfk8s.tracking.records:1"]


def test_the_readme_architecture_names_every_layer():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Architecture"):]
    for package in LAYERS:  # the picture nests tfk8s/'s folders under it
        assert package.split(".")[-1] + "/" in section, package


def test_the_development_guide_states_each_layers_imports():
    """docs/development.md's layer table says what each package may import, exactly as :data:`LAYERS` does."""
    text = (ROOT / "docs" / "development.md").read_text()
    section = text[text.index("## Architecture: the layer table"):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            table[cells[0].strip("`")] = set() if cells[2] == "nothing" else {c.strip().strip("`")
                                                                                for c in cells[2].split(",")}
    assert table == LAYERS


def test_the_development_guide_names_the_launchers_doors():
    """docs/development.md says which modules of tfk8s.launcher other layers may import: :data:`LAUNCHER_DOORS`."""
    text = (ROOT / "docs" / "development.md").read_text()
    intro = text[text.index("## Architecture: the layer table"):].split("\n| package |", 1)[0]
    assert set(re.findall(r"`(tfk8s\.launcher\.[\w.]+)`", intro)) == LAUNCHER_DOORS


def test_the_readme_is_a_front_door():
    """What a user needs, about 150 lines; the contributor material lives in docs/development.md."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 160


def test_no_module_is_over_500_lines_without_saying_why():
    """A big file is fine when it says at its top why it is one (a module that only orchestrates)."""
    long = {name: len(src.splitlines()) for name, src in _product().items()
            if len(src.splitlines()) > 500 and "over 500 lines" not in src[:2000]}
    assert long == {}

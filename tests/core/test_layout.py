"""Every folder and file name on the shared volume is spelled once, in tfk8s/core/layout.py (and the data format's
own metadata.json in tfk8s/core/data_format.py); everything else builds its paths from there."""

import ast
import inspect
from pathlib import Path

import pytest

from tfk8s.core import data_format, layout

ROOT = Path(__file__).resolve().parents[2]
NAMES = {v for k, v in vars(layout).items() if k.isupper() and isinstance(v, str) and k != "MIN_KFP_BACKEND"}
# names distinctive enough that any string constant equal to one is the volume's (words such as "train",
# "logs" or "checkpoints" are also split names, dict keys and flags: for them only path joins count)
DISTINCT = {layout.REPLICA_LOG_DIR, layout.RECORD_FILE, layout.SUMMARY_FILE, layout.EVALUATION_FILE,
            layout.REPORT_FILE, layout.PIPELINE_ROOT_DIR, layout.DEFAULT_ROOT, data_format.METADATA_FILE,
            layout.DATA_RECORD_FILE, layout.MANIFEST_FILE}
DEFINED_IN = {"tfk8s/core/layout.py": NAMES | DISTINCT, "tfk8s/core/data_format.py": {data_format.METADATA_FILE}}


def spelled_outside(path: str, source: str) -> list[str]:
    """Where ``source`` spells a volume name itself: a path join ``x / "<name>"`` or a distinctive name as a
    string (docstrings and, in components/, the literal defaults of a component's signature aside)."""
    tree = ast.parse(source)
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
        if path.startswith("components/") and isinstance(node, ast.FunctionDef):
            skip |= {id(d) for d in node.args.defaults}  # KFP reads literal defaults (tested below)
    allowed = DEFINED_IN.get(path, set())
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant)
                and node.right.value in NAMES - allowed):
            found.append(f"{path}:{node.lineno}: / {node.right.value!r}")
        elif (isinstance(node, ast.Constant) and node.value in DISTINCT - allowed and id(node) not in skip):
            found.append(f"{path}:{node.lineno}: {node.value!r}")
    return sorted(found)


def test_every_volume_name_is_spelled_once():
    files = [p for top in ("tfk8s", "trainer", "components", "pipelines") for p in (ROOT / top).rglob("*.py")]
    found = [hit for p in files for hit in spelled_outside(str(p.relative_to(ROOT)), p.read_text())]
    assert found == []


def test_the_check_finds_a_name_spelled_again():
    source = 'from pathlib import Path\nlog = Path(train) / "replica-logs"\nrecord = "job.json"\n'
    assert spelled_outside("tfk8s/steps/x.py", source) == [
        "tfk8s/steps/x.py:2: 'replica-logs'", "tfk8s/steps/x.py:2: / 'replica-logs'", "tfk8s/steps/x.py:3: 'job.json'"]


def test_the_components_literal_volume_roots_are_the_layouts():
    import components.ensure_volume
    import components.evaluate_model
    import components.export_model
    import components.launch_training
    import components.prepare_dataset
    import components.push_model

    for module in (components.ensure_volume, components.evaluate_model, components.export_model,
                   components.launch_training, components.prepare_dataset, components.push_model):
        for fn in vars(module).values():
            params = inspect.signature(fn.python_func).parameters if hasattr(fn, "python_func") else {}
            if "volume_root" in params:  # reject_model has none
                default = params["volume_root"].default
                assert default == layout.DEFAULT_ROOT, fn.python_func.__name__


def test_the_prepared_data_store_lives_under_datasets_by_name_version_and_key():
    from tfk8s.core.layout import VolumeLayout

    v = VolumeLayout("/mnt/tfk8s")
    assert v.datasets == Path("/mnt/tfk8s/datasets")
    assert v.prepared("mnist", "3.0.1", "80fb68cab23bf6dd") == Path("/mnt/tfk8s/datasets/mnist/3.0.1/80fb68cab23bf6dd")
    assert v.prepared_lock("mnist", "3.0.1", "k1") == Path("/mnt/tfk8s/datasets/mnist/3.0.1/k1.lock")
    assert v.prepared_staging("mnist", "3.0.1", "k1", "host-12") == Path(
        "/mnt/tfk8s/datasets/mnist/3.0.1/.staging-k1-host-12")
    assert v.run("r1").data_record == Path("/mnt/tfk8s/runs/r1/data.json")
    for bad in (("../x", "3.0.1", "k"), ("mnist", "3/0", "k"), ("mnist", "3.0.1", "..")):
        with pytest.raises(ValueError, match="must be a single path segment"):
            v.prepared(*bad)

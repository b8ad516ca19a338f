"""Your own program, tried as a new user would: a script written from TensorFlow's multi-worker Keras tutorial
(knowing only TF_CONFIG and TFK8S_MODEL_DIR) through the whole local pipeline; and the three ways a user's
program goes wrong (saves nothing, crashes, does not exist), each failing with the replica and the fix."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.fakes.launching import launch
from tfk8s.core.errors import LaunchError, ReplicaFailedError

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "tests" / "fakes" / "programs" / "tutorial_mwms.py"
EVAL = REPO / "tests" / "fakes" / "programs" / "eval_program.py"


@pytest.fixture
def data_dir(tmp_path) -> str:
    d = tmp_path / "data"
    d.mkdir()
    (d / "train-00000-of-00001.tfrecord").write_bytes(b"\0" * 16)  # a user's own TFRecords: any program reads them
    return str(d)


def _launch(tmp_path, data_dir, command, **params):
    return launch({"command": command, "workers": 2, "progress_timeout_s": 0, **params},
                  data_dir=data_dir, volume_root=str(tmp_path / "vol"), run_id="r1", backend="local",
                  log_sink=lambda _line: None)


def test_a_coordinator_that_saves_nothing_fails_saying_what_the_contract_asks(tmp_path, data_dir):
    with pytest.raises(LaunchError) as err:
        _launch(tmp_path, data_dir, ["python", "-c", "print('trained, but saved nothing')"])
    msg = str(err.value)
    assert "replica worker-0 (the coordinator) exited 0 but saved no SavedModel in its TFK8S_MODEL_DIR" in msg
    assert str(tmp_path / "vol" / "runs" / "r1" / "train" / "saved_model") in msg
    assert "model.save(os.environ['TFK8S_MODEL_DIR'])" in msg and "docs/training-program.md" in msg
    assert not (tmp_path / "vol" / "runs" / "r1" / "train" / "scratch").exists()


def test_a_crashing_program_fails_naming_the_replica_its_last_lines_and_its_log(tmp_path, data_dir):
    crash = ("import os, sys; print('loading', os.environ['TFK8S_DATA_DIR']); "
             "sys.exit('boom on ' + os.environ['TFK8S_REPLICA_TYPE'] + '-' + os.environ['TFK8S_REPLICA_INDEX'])")
    with pytest.raises(ReplicaFailedError) as err:
        _launch(tmp_path, data_dir, ["python", "-c", crash], max_restarts=0)
    msg = str(err.value)
    label = err.value.replica.label
    assert f"replica {label} failed with exit code 1" in msg and f"boom on {label}" in msg
    assert f"the training program failed on replica {label}: fix the program or the command parameter" in msg
    assert f"replica-logs/{label}.log" in msg


def test_a_command_that_does_not_exist_fails_before_training_naming_the_replica_and_the_fix(tmp_path, data_dir):
    with pytest.raises(ReplicaFailedError) as err:
        _launch(tmp_path, data_dir, "no-such-trainer --epochs 1")
    msg = str(err.value)
    assert "replica worker-0 failed: StartError (cannot run 'no-such-trainer'" in msg
    assert "the command must name an existing program" in msg
    log = tmp_path / "vol" / "runs" / "r1" / "train" / "replica-logs" / "worker-0.log"  # the log the error names
    assert f"{log}" in msg and "StartError: cannot run 'no-such-trainer'" in log.read_text()


@pytest.mark.slow
def test_a_tutorial_program_runs_with_two_workers_is_exported_and_said_not_evaluated(tmp_path):
    """The issue's "done when": `--local --param workers=2 --param command=...` with a program from the tutorial."""
    from pipelines.train import run_local

    volume = tmp_path / "volume"
    command = f"python {TUTORIAL} --data_dir {{data_dir}} --epochs 1 --steps_per_epoch 15"
    r = run_local(volume, {"workers": 2, "command": command, "max_examples": 2000})
    (run_dir,) = (volume / "runs").iterdir()
    summary = json.loads((run_dir / "train" / "training_summary.json").read_text())
    assert summary["job"]["replicas"]["worker"] == 2 and summary["job"]["command"][0] == sys.executable
    assert summary["metrics"] == {}  # it reports nothing: it knows only TF_CONFIG and TFK8S_MODEL_DIR
    # exported as a new version under a name derived from the data set (not the built-in trainer's)
    assert (r["model_name"], r["version"]) == ("mnist-model", 1)
    assert Path(r["export_path"]) == volume / "models" / "mnist-model" / "1"
    # not evaluated, with the reason, and not blessed because it reported no accuracy - no crash
    assert r["metrics"]["evaluated"] is False
    reason = r["metrics"]["not_evaluated"]
    assert "not evaluated: the model's serving signature takes float32 [None, 784]" in reason
    assert "images are uint8 [28, 28, 1]" in reason and "eval_command" in reason
    assert r["blessed"] is False
    md = Path(r["summary"]).read_text()
    assert "gate_metric 'accuracy' was not reported by the training program's metrics" in md

    # again on the data just prepared, as a user's own data_dir (nothing prepared), evaluated by the user's
    # eval_command under the same contract: a new version, evaluated, blessed, reported in its own run folder
    # the first run's data record names the store folder it prepared (datasets/mnist/<version>/<key>)
    prepared = Path(json.loads((run_dir / "data.json").read_text())["path"])
    assert prepared.parent.parent.parent == volume / "datasets"
    r2 = run_local(volume, {"workers": 2, "command": command, "data_dir": str(prepared.relative_to(volume)),
                            "eval_command": f"python {EVAL}", "min_accuracy": 0.5})
    assert (r2["model_name"], r2["version"]) == ("mnist-model", 2)
    assert r2["metrics"]["evaluated"] is True and r2["metrics"]["how"] == "eval_command"
    assert 0.5 < r2["accuracy"] <= 1 and r2["metrics"]["examples"] == 2000  # chance is 0.1
    assert r2["blessed"] is True
    run2 = Path(r2["run_dir"])
    assert run2 != run_dir and not (run2 / "data").exists()  # the first run's data was used, not copied
    assert json.loads((run2 / "train" / "metrics" / "evaluation.json").read_text())["examples"] == 2000
    assert (run2 / "report.html").is_file()
    assert sorted(p.name for p in (volume / "serving" / "mnist-model").iterdir()) == ["2"]


# every folder a program may be told to write into, checked by the program itself as it starts
_FOLDERS_AT_START = (
    "import os, sys; names = ('TFK8S_MODEL_DIR', 'AIP_MODEL_DIR', 'SM_MODEL_DIR', 'TFK8S_CHECKPOINT_DIR', "
    "'AIP_CHECKPOINT_DIR', 'TFK8S_TENSORBOARD_DIR', 'AIP_TENSORBOARD_LOG_DIR', 'SM_OUTPUT_DATA_DIR'); "
    "missing = [n for n in names if not os.path.isdir(os.environ[n])]; "
    "sys.exit('missing at start: ' + str(missing)) if missing else None; "
    "open(os.path.join(os.environ['SM_MODEL_DIR'], 'model.keras'), 'w').write('a Keras 3 file')")


def test_the_model_dir_and_its_aliases_exist_when_the_program_starts(tmp_path, data_dir):
    """Issue 25 item 8: TFK8S_MODEL_DIR (and SM_MODEL_DIR, AIP_MODEL_DIR) did not exist when the program started:
    a Keras 3 `model.save(".../model.keras")` crashed with a bare FileNotFoundError. Now every replica finds every
    folder; the .keras file it leaves is then said to be no SavedModel, with model.export(...) as the fix."""
    with pytest.raises(LaunchError) as err:
        _launch(tmp_path, data_dir, ["python", "-c", _FOLDERS_AT_START], max_restarts=0)
    msg = str(err.value)
    assert "missing at start" not in msg and "FileNotFoundError" not in msg
    assert "exited 0 but saved no SavedModel in its TFK8S_MODEL_DIR" in msg and "it holds ['model.keras']" in msg
    assert "model.export(os.environ['TFK8S_MODEL_DIR'])" in msg
    train = tmp_path / "vol" / "runs" / "r1" / "train"
    assert (train / "saved_model" / "model.keras").read_text() == "a Keras 3 file"
    assert not (train / "scratch").exists()  # worker-1's own model dir (made for it too) removed after the job

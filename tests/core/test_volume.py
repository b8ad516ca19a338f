"""A read-only or full volume, or a volume root that cannot exist: one message naming the path and the fix, no
raw traceback, and the earlier exports stay intact (tfk8s.core.volume.volume_writes around every step's writes)."""

from __future__ import annotations

import errno
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tfk8s.core.volume import VolumeWriteError
from tfk8s.steps.ensure_volume import ensure_volume_step
from tfk8s.steps.export_model import export_model_step
from tfk8s.steps.prepare_dataset import prepare_dataset_step

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    import tensorflow as tf

    class Doubler(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x):
            return {"y": 2 * x}

    path = tmp_path_factory.mktemp("m") / "saved_model"
    m = Doubler()
    tf.saved_model.save(m, str(path), signatures={"serving_default": m.serve})
    return path


def test_a_full_volume_fails_the_export_naming_the_path_and_the_fix_and_keeps_earlier_exports(
        saved_model, tmp_path, monkeypatch):
    first = export_model_step(saved_model_dir=str(saved_model), volume_root=str(tmp_path), model_name="m")
    real_copytree = shutil.copytree

    def full(src, dst, *a, **k):  # what copytree raises when the disk fills up halfway
        real_copytree(src, dst, *a, **k)
        raise shutil.Error([(str(Path(src) / "variables"), str(Path(dst) / "variables"),
                             "[Errno 28] No space left on device")])

    monkeypatch.setattr("tfk8s.steps.model_versions.shutil.copytree", full)
    with pytest.raises(VolumeWriteError) as err:
        export_model_step(saved_model_dir=str(saved_model), volume_root=str(tmp_path), model_name="m")
    msg = str(err.value)
    assert msg.startswith(f"cannot write the exported model to {tmp_path}/models/m/.staging-")
    assert "the volume is full: free space" in msg
    base = tmp_path / "models" / "m"
    assert sorted(p.name for p in base.iterdir()) == ["1"]  # version 1 intact, no staging left behind
    assert (Path(first.path) / "saved_model.pb").is_file()


def test_a_read_only_volume_fails_the_prepare_step_with_the_fix(tmp_path, monkeypatch):
    def read_only(name, out, **kw):
        raise OSError(errno.EROFS, "Read-only file system", str(out))

    monkeypatch.setattr("tfk8s.steps.prepare_dataset.prepare_dataset", read_only)
    fix = ("the volume is read-only: mount it read-write (a ReadWriteMany PVC, not mounted readOnly; locally "
           "a writable --volume folder)")
    with pytest.raises(VolumeWriteError) as err:
        prepare_dataset_step(dataset_name="mnist", tfds_data_dir="", volume_root=str(tmp_path), run_id="r1",
                             num_shards=2, num_workers=2, max_examples=10, reuse_data=False)
    assert str(err.value) == f"cannot write the prepared data set to {tmp_path}/runs/r1/data: {fix}"
    with pytest.raises(VolumeWriteError) as err:  # the store's staging folder, beside where the key would go
        prepare_dataset_step(dataset_name="mnist", tfds_data_dir="", volume_root=str(tmp_path), run_id="r1",
                             num_shards=2, num_workers=2, max_examples=10)
    base = tmp_path / "datasets" / "mnist" / "3.0.1"
    assert str(err.value).startswith(f"cannot write the prepared data set to {base}/.staging-")
    assert str(err.value).endswith(f": {fix}")
    assert [p.suffix for p in base.iterdir()] == [".lock"]  # no key folder, no staging folder left


def test_a_volume_root_that_cannot_exist_says_which_folder_is_missing(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(VolumeWriteError) as err:
        ensure_volume_step(backend="local", volume_root=str(tmp_path / "a-file" / "volume"), pvc_name="x")
    assert str(err.value) == (
        f"cannot write the volume root to {tmp_path}/a-file/volume: {tmp_path}/a-file is a file, not a folder, so "
        f"nothing can be created below it: pass an existing writable folder as --volume / volume_root")


def test_the_step_cli_prints_one_error_line_not_a_traceback(tmp_path):
    (tmp_path / "a-file").write_text("")
    r = subprocess.run([sys.executable, "-m", "components.ensure_volume", "--backend", "local", "--volume-root",
                        str(tmp_path / "a-file" / "v"), "--pvc-name", "x"], capture_output=True, text=True,
                       cwd=REPO, timeout=120, check=False)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("ensure_volume: error: cannot write the volume root")


def test_other_errors_pass_unchanged(tmp_path):
    from tfk8s.core.volume import volume_writes

    with pytest.raises(FileNotFoundError), volume_writes(tmp_path / "vol", "x"):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/elsewhere/input.json")
    with pytest.raises(KeyError), volume_writes(tmp_path / "vol", "x"):
        raise KeyError("bug")


def test_a_local_run_on_a_volume_that_cannot_exist_stops_before_any_step_with_one_line(tmp_path, monkeypatch):
    from pipelines import train

    (tmp_path / "a-file").write_text("")
    monkeypatch.setattr(train, "run_local", lambda *a, **k: pytest.fail("the pipeline started"))
    with pytest.raises(SystemExit) as err:
        train.main(["--local", "--volume", str(tmp_path / "a-file" / "vol")])
    assert str(err.value) == (
        f"tfk8s: cannot write the local volume (--volume) to {tmp_path}/a-file/vol/pipeline-root: {tmp_path}/a-file "
        f"is a file, not a folder, so nothing can be created below it: pass an existing writable folder as "
        f"--volume / volume_root")

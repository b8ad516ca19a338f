"""tfk8s.steps.prepare_dataset: TFDS -> round-robin TFRecord shards + metadata.json, on real MNIST, and its failure modes."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SUBSET_EXAMPLES, SUBSET_SHARDS
from tfk8s.core.data_format import DatasetMetadata, SplitMetadata, load_metadata
from tfk8s.steps import prepare_dataset as dataset_mod
from tfk8s.steps.prepare_dataset import DatasetUnavailableError, default_tfds_data_dir, prepare_dataset


def _read_shard(path: str) -> list[tuple[bytes, int]]:
    import tensorflow as tf

    out = []
    for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
        ex = tf.train.Example.FromString(record)
        out.append((ex.features.feature["image"].bytes_list.value[0],
                    ex.features.feature["label"].int64_list.value[0]))
    return out


def _tfds_examples(data_dir: str, split: str, n: int) -> list[tuple[np.ndarray, int]]:
    import tensorflow_datasets as tfds

    ds = tfds.load("mnist", split=f"{split}[:{n}]", data_dir=data_dir, download=False, shuffle_files=False)
    return [(ex["image"], int(ex["label"])) for ex in tfds.as_numpy(ds)]


# --- metadata contents and round trip -------------------------------------------------------------------------

def test_metadata_describes_the_prepared_mnist_subset(mnist_subset_dir):
    meta = load_metadata(mnist_subset_dir)
    assert (meta.dataset, meta.version) == ("mnist", "3.0.1")
    assert meta.image_shape == (28, 28, 1)
    assert meta.image_dtype == "uint8"
    assert meta.num_classes == 10
    assert meta.label_names == tuple(str(d) for d in range(10))
    assert sorted(meta.splits) == ["test", "train"]
    for split in ("train", "test"):
        assert meta.splits[split].num_examples == SUBSET_EXAMPLES
        assert meta.splits[split].files == tuple(
            f"{split}-{i:05d}-of-{SUBSET_SHARDS:05d}.tfrecord" for i in range(SUBSET_SHARDS))
        paths = meta.files_for(split)
        assert all(os.path.isabs(p) and os.path.isfile(p) for p in paths)
        assert [os.path.dirname(p) for p in paths] == [str(mnist_subset_dir)] * SUBSET_SHARDS


def test_metadata_json_has_the_documented_layout_and_round_trips(mnist_subset_dir):
    doc = json.loads((mnist_subset_dir / "metadata.json").read_text())
    assert doc["format_version"] == 1
    assert set(doc) == {"format_version", "dataset", "version", "image_shape", "image_dtype", "num_classes",
                        "label_names", "splits"}
    assert doc["image_shape"] == [28, 28, 1]
    assert doc["splits"]["train"]["num_examples"] == SUBSET_EXAMPLES
    assert doc["splits"]["train"]["files"][0] == f"train-00000-of-{SUBSET_SHARDS:05d}.tfrecord"

    meta = load_metadata(mnist_subset_dir)
    again = DatasetMetadata.from_json(meta.to_json(), base_dir=str(mnist_subset_dir))
    assert again == meta
    assert again.files_for("test") == meta.files_for("test")


def test_every_shard_holds_a_near_equal_share_of_examples(mnist_subset_dir):
    meta = load_metadata(mnist_subset_dir)
    counts = [len(_read_shard(p)) for p in meta.files_for("train")]
    assert sum(counts) == SUBSET_EXAMPLES
    assert max(counts) - min(counts) == 1  # 3000 / 7: four shards of 429, three of 428
    assert counts == [429] * 4 + [428] * 3


def test_shards_decode_back_to_the_exact_tfds_pixels_and_labels(mnist_subset_dir, mnist_tfds_data_dir):
    meta = load_metadata(mnist_subset_dir)
    shards = [_read_shard(p) for p in meta.files_for("train")]
    expected = _tfds_examples(mnist_tfds_data_dir, "train", SUBSET_EXAMPLES)
    label_counts = Counter()
    for j, (image, label) in enumerate(expected):  # round-robin: example j is record j // n of shard j % n
        raw, got_label = shards[j % SUBSET_SHARDS][j // SUBSET_SHARDS]
        decoded = np.frombuffer(raw, dtype=np.uint8).reshape(meta.image_shape)
        np.testing.assert_array_equal(decoded, image)
        assert got_label == label
        label_counts[got_label] += 1
    assert sum(label_counts.values()) == SUBSET_EXAMPLES
    assert set(label_counts) == set(range(10))
    assert expected[0][1] == 5  # the first MNIST training digit is a 5


# --- fast, clear failures ---------------------------------------------------------------------------------------

def test_absent_dataset_fails_within_seconds_naming_the_dataset_dir_and_fix(tmp_path):
    start = time.monotonic()
    with pytest.raises(DatasetUnavailableError) as err:
        prepare_dataset("mnist", tmp_path / "out", tfds_data_dir=str(tmp_path / "empty"), num_shards=2)
    assert time.monotonic() - start < 10
    msg = str(err.value)
    assert "'mnist'" in msg and str(tmp_path / "empty") in msg
    assert "--tfds-data-dir" in msg and "TFDS_DATA_DIR" in msg and "download" in msg
    assert isinstance(err.value, ValueError)
    assert not (tmp_path / "out" / "metadata.json").exists()


def test_download_without_network_fails_within_seconds_instead_of_hanging(tmp_path, monkeypatch):
    monkeypatch.setattr(dataset_mod, "_network_reachable", lambda timeout_s=5.0: False)
    start = time.monotonic()
    with pytest.raises(DatasetUnavailableError, match="network is unreachable") as err:
        prepare_dataset("mnist", tmp_path / "out", tfds_data_dir=str(tmp_path / "empty"), num_shards=2,
                        download=True)
    assert time.monotonic() - start < 10
    assert "TFDS_DATA_DIR" in str(err.value)


def test_network_probe_returns_within_its_timeout():
    start = time.monotonic()
    result = dataset_mod._network_reachable(timeout_s=1.0)
    assert isinstance(result, bool)
    assert time.monotonic() - start < 3


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"num_shards": 0}, "num_shards"),
        ({"num_shards": 2, "max_examples": 0}, "max_examples"),
        ({"num_shards": 2, "splits": ("train", "validation")}, "validation"),
        ({"num_shards": 2, "splits": ("train[:10%]",)}, "train[:10%]"),
        ({"num_shards": 2, "splits": ()}, "splits"),
    ],
)
def test_bad_inputs_raise_value_errors_naming_the_input(tmp_path, mnist_tfds_data_dir, kwargs, needle):
    with pytest.raises(ValueError) as err:
        prepare_dataset("mnist", tmp_path, tfds_data_dir=mnist_tfds_data_dir, **kwargs)
    assert needle in str(err.value)
    assert not isinstance(err.value, DatasetUnavailableError)
    assert not (tmp_path / "metadata.json").exists()


def test_unknown_split_error_lists_the_available_splits(tmp_path, mnist_tfds_data_dir):
    with pytest.raises(ValueError, match=r"'validation'.*\['test', 'train'\]"):
        prepare_dataset("mnist", tmp_path, tfds_data_dir=mnist_tfds_data_dir, num_shards=1,
                        splits=("validation",))


def test_dataset_without_image_and_label_features_is_rejected_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"'imdb_reviews'.*\['label', 'text'\].*'image'"):
        prepare_dataset("imdb_reviews", tmp_path, tfds_data_dir=str(tmp_path), num_shards=1)


def test_unknown_dataset_name_is_a_short_value_error(tmp_path):
    with pytest.raises(ValueError, match="no_such_dataset_xyz") as err:
        prepare_dataset("no_such_dataset_xyz", tmp_path, tfds_data_dir=str(tmp_path), num_shards=1)
    assert len(str(err.value)) < 400  # not TFDS's list of every data set


# --- atomic writes and re-runs ------------------------------------------------------------------------------------

def test_a_crash_while_writing_leaves_no_metadata_pointing_at_missing_shards(tmp_path, mnist_tfds_data_dir,
                                                                               monkeypatch):
    out = tmp_path / "data"
    prepare_dataset("mnist", out, tfds_data_dir=mnist_tfds_data_dir, num_shards=2, max_examples=50)
    assert (out / "metadata.json").is_file()

    real_write = dataset_mod._write_split

    def crash_on_test(builder, split, *args):
        if split == "test":
            raise RuntimeError("disk full")
        return real_write(builder, split, *args)

    monkeypatch.setattr(dataset_mod, "_write_split", crash_on_test)
    with pytest.raises(RuntimeError, match="disk full"):
        prepare_dataset("mnist", out, tfds_data_dir=mnist_tfds_data_dir, num_shards=3, max_examples=50)
    assert not (out / "metadata.json").exists()
    with pytest.raises(FileNotFoundError, match="prepare-dataset"):
        load_metadata(out)


def test_rerun_with_fewer_shards_replaces_the_old_ones(tmp_path, mnist_tfds_data_dir):
    out = tmp_path / "data"
    prepare_dataset("mnist", out, tfds_data_dir=mnist_tfds_data_dir, num_shards=3, max_examples=30,
                    splits=("test",))
    (out / "unrelated.txt").write_text("keep me")
    meta = prepare_dataset("mnist", out, tfds_data_dir=mnist_tfds_data_dir, num_shards=2, max_examples=30,
                           splits=("test",))
    assert sorted(p.name for p in out.iterdir()) == [
        "metadata.json", "test-00000-of-00002.tfrecord", "test-00001-of-00002.tfrecord", "unrelated.txt"]
    assert meta.splits == {"test": SplitMetadata(30, ("test-00000-of-00002.tfrecord",
                                                       "test-00001-of-00002.tfrecord"))}
    assert load_metadata(out) == meta


# --- load_metadata errors -------------------------------------------------------------------------------------------

def test_load_metadata_of_a_directory_without_it_says_to_run_the_prepare_step(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"metadata\.json not found.*prepare-dataset"):
        load_metadata(tmp_path)


def test_load_metadata_rejects_an_unknown_format_version(tmp_path):
    (tmp_path / "metadata.json").write_text(json.dumps({"format_version": 2, "dataset": "mnist"}))
    with pytest.raises(ValueError, match="format_version 2"):
        load_metadata(tmp_path)


def test_files_for_an_unprepared_split_names_the_prepared_ones(mnist_subset_dir):
    with pytest.raises(KeyError, match=r"'validation'.*\['test', 'train'\]"):
        load_metadata(mnist_subset_dir).files_for("validation")


# --- default data_dir -------------------------------------------------------------------------------------------------

def test_default_tfds_data_dir_prefers_the_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path))
    assert default_tfds_data_dir() == str(tmp_path)


def test_default_tfds_data_dir_falls_back_to_the_shared_folder_beside_the_repo(monkeypatch):
    monkeypatch.delenv("TFDS_DATA_DIR", raising=False)
    repo_root = Path(__file__).resolve().parents[2]
    shared = repo_root.parent / "shared" / "data" / "tensorflow_datasets"
    if shared.is_dir():
        assert default_tfds_data_dir() == str(shared)
        assert (Path(default_tfds_data_dir()) / "mnist").is_dir()
    else:
        assert default_tfds_data_dir() is None


def test_the_pipeline_downloads_by_default_and_offline_fails_within_seconds_with_the_fix(tmp_path, monkeypatch):
    """Local data if present, else download: the step's default; offline that fails fast saying what to do."""
    import inspect

    from tfk8s.steps.prepare_dataset import prepare_dataset_step

    assert inspect.signature(prepare_dataset_step).parameters["download"].default is True
    probes = []
    monkeypatch.setattr(dataset_mod, "_network_reachable", lambda timeout_s=5.0: probes.append(1) or False)
    start = time.monotonic()
    with pytest.raises(DatasetUnavailableError, match="network is unreachable") as err:
        prepare_dataset_step(dataset_name="mnist", tfds_data_dir=str(tmp_path / "empty"), volume_root=str(tmp_path),
                             run_id="r1", num_shards=2, num_workers=2, max_examples=10)
    assert probes == [1] and time.monotonic() - start < 10
    assert "tfds_data_dir" in str(err.value) and str(tmp_path / "empty") in str(err.value)


def test_a_bad_dataset_name_is_refused_before_a_local_run_or_a_submission_naming_the_fix(tmp_path, monkeypatch):
    from pipelines import train

    monkeypatch.setattr(train, "run_local", lambda *a, **k: pytest.fail("the pipeline started"))
    with pytest.raises(SystemExit) as err:
        train.main(["--local", "--volume", str(tmp_path), "--param", "dataset_name=nope"])
    msg = str(err.value)
    assert msg.startswith("tfk8s: unknown TFDS data set 'nope'")
    assert "tfds_data_dir" in msg and "tfds_download=true" in msg
    with pytest.raises(SystemExit, match="unknown TFDS data set 'nope'.*tfds_data_dir is empty"):
        train.main(["--run", "--host", "http://127.0.0.1:9", "--param", "dataset_name=nope"])
    # in a cluster the data directory cannot be looked into from here: a name outside the catalog may be in it
    from tfk8s.steps.prepare_dataset import check_dataset

    assert check_dataset("my_images", "/mnt/tfk8s/tfds", local=False) is None
    assert check_dataset("fashion_mnist", None, local=False) is None


# --- the prepare step and the volume's store (tfk8s.core.data_store) --------------------------------------------

def _step(volume: Path, run_id: str, source: str, **kw) -> dict:
    from tfk8s.steps.prepare_dataset import prepare_dataset_step

    return prepare_dataset_step(**{"dataset_name": "mnist", "tfds_data_dir": source, "volume_root": str(volume),
                                   "run_id": run_id, "num_shards": 2, "num_workers": 2, "max_examples": 40, **kw})


def test_a_second_run_reuses_the_prepared_data_and_says_so_and_reuse_data_false_prepares_fresh(
        tmp_path, mnist_tfds_data_dir, capfd):
    first = _step(tmp_path, "run-1", mnist_tfds_data_dir)
    key_dir = Path(first["path"])
    assert key_dir.parent == tmp_path / "datasets" / "mnist" / "3.0.1" and first["key"] == key_dir.name
    assert (first["reused"], first["prepared_by"]) == (False, "run-1")
    assert first["splits"]["train"]["num_examples"] == 40 and len(first["splits"]["test"]["files"]) == 2
    assert f"tfk8s: prepared data into {key_dir} (key {first['key']}" in capfd.readouterr().out
    shards = {p.name: p.stat().st_mtime_ns for p in key_dir.iterdir()}

    second = _step(tmp_path, "run-2", mnist_tfds_data_dir)
    assert (second["path"], second["reused"], second["prepared_by"]) == (str(key_dir), True, "run-1")
    assert {p.name: p.stat().st_mtime_ns for p in key_dir.iterdir()} == shards  # nothing rewritten
    out = capfd.readouterr().out
    assert "tfk8s: reused data prepared by run run-1 at " in out and str(key_dir) in out
    # each run's data record names the folder it read: reproducible after later runs
    record = json.loads((tmp_path / "runs" / "run-2" / "data.json").read_text())
    assert (record["path"], record["key"], record["reused"], record["prepared_by"]) == (
        str(key_dir), first["key"], True, "run-1")
    assert second["data_record"] == str(tmp_path / "runs" / "run-2" / "data.json")
    assert load_metadata(key_dir).splits == load_metadata(first["path"]).splits

    fresh = _step(tmp_path, "run-3", mnist_tfds_data_dir, reuse_data=False)
    assert (fresh["path"], fresh["key"], fresh["reused"]) == (str(tmp_path / "runs" / "run-3" / "data"), "", False)
    assert "prepared a fresh copy of the data (reuse_data=false)" in capfd.readouterr().out
    assert _read_shard(load_metadata(fresh["path"]).files_for("train")[1]) == _read_shard(
        load_metadata(key_dir).files_for("train")[1])  # the same examples
    assert {p.name: p.stat().st_mtime_ns for p in key_dir.iterdir()} == shards  # the store left alone
    assert sorted(p.name for p in key_dir.parent.iterdir()) == [first["key"], f"{first['key']}.lock"]


def test_other_shards_caps_or_source_files_of_the_same_version_get_their_own_key(tmp_path, mnist_tfds_data_dir):
    import shutil

    base = _step(tmp_path, "run-1", mnist_tfds_data_dir)
    other_cap = _step(tmp_path, "run-2", mnist_tfds_data_dir, max_examples=30)
    other_shards = _step(tmp_path, "run-3", mnist_tfds_data_dir, num_shards=3)
    # the same name and version, other files (as a TFDS download of MNIST is, in hashed order): another key
    copy = tmp_path / "tfds"
    shutil.copytree(Path(mnist_tfds_data_dir) / "mnist", copy / "mnist")
    info = copy / "mnist" / "3.0.1" / "dataset_info.json"
    info.chmod(0o644)
    info.write_text(info.read_text().replace("Original order kept.", "Reordered."))
    other_source = _step(tmp_path, "run-4", str(copy))
    keys = [r["key"] for r in (base, other_cap, other_shards, other_source)]
    assert len(set(keys)) == 4 and not any(r["reused"] for r in (other_cap, other_shards, other_source))
    # a copy of the same files elsewhere is the same data: reused
    same = tmp_path / "tfds-same"
    shutil.copytree(Path(mnist_tfds_data_dir) / "mnist", same / "mnist")
    again = _step(tmp_path, "run-5", str(same))
    assert (again["key"], again["reused"], again["prepared_by"]) == (base["key"], True, "run-1")


def test_a_half_deleted_store_folder_is_prepared_again_by_the_next_run(tmp_path, mnist_tfds_data_dir, capfd):
    first = _step(tmp_path, "run-1", mnist_tfds_data_dir)
    gone = Path(first["path"]) / first["splits"]["train"]["files"][1]
    gone.unlink()
    capfd.readouterr()
    second = _step(tmp_path, "run-2", mnist_tfds_data_dir)
    assert (second["path"], second["reused"], second["prepared_by"]) == (first["path"], False, "run-2")
    assert f"prepared data again ({gone} is missing)" in capfd.readouterr().out
    assert gone.is_file() and len(_read_shard(str(gone))) == 20


@pytest.mark.parametrize(("signame", "code"), [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_stop_signal_stops_the_prepare_step_between_batches_leaving_nothing_half_written(
        tmp_path, mnist_tfds_data_dir, signame, code):
    """Issue 25 item 7: a stop during the prepare step ended it where it was (SIGTERM: its staging folder left
    behind; as a container's first process: not at all until the SIGKILL). Now it stops after the batch it is
    writing, discards the unfinished preparation, releases the key's lock and exits 128 + the signal with one
    line, without TensorFlow's teardown. Measured on 2 shared cores, full MNIST: the signal to the exit 0.65 s
    (SIGTERM), 0.14 s (SIGINT); 5-6 s with the teardown on a busy machine."""
    import signal
    import subprocess
    import sys

    from tfk8s.core.data_store import _is_locked

    volume = tmp_path / "vol"
    proc = subprocess.Popen(
        [sys.executable, "-m", "components.prepare_dataset", "--dataset-name", "mnist", "--tfds-data-dir",
         mnist_tfds_data_dir, "--volume-root", str(volume), "--run-id", "r1", "--download", "false",
         "--max-examples", "0", "--num-shards", "4"],
        cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, start_new_session=True)
    base = volume / "datasets" / "mnist" / "3.0.1"
    deadline = time.monotonic() + 120
    while not any(p.stat().st_size > 0 for p in base.glob(".staging-*/.train-*.tmp")):  # writing the train split
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    sent = time.monotonic()
    proc.send_signal(getattr(signal, signame))
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    print(f"{signame}: the prepare step exited {took:.2f} s after the signal")
    assert proc.returncode == code, (out, err)
    cause = "got SIGTERM" if signame == "SIGTERM" else "was interrupted by the user (SIGINT"
    (line,) = [x for x in err.splitlines() if f": error: the prepare step {cause}" in x]
    assert "stopped writing the train split (" in line and "nothing was published" in line
    assert took < 5, took
    assert [p.name for p in base.iterdir() if not p.name.endswith(".lock")] == []  # no staging, no key folder
    assert not any(_is_locked(p) for p in base.glob("*.lock"))


REUSE_CHILD = """
import json, sys
from tfk8s.steps.prepare_dataset import prepare_dataset_step
md = prepare_dataset_step(dataset_name="mnist", tfds_data_dir=sys.argv[1], volume_root=sys.argv[2], run_id=sys.argv[3],
                          num_shards=int(sys.argv[4]), num_workers=2, max_examples=40)
heavy = sorted(m for m in ("tensorflow", "tensorflow_datasets", "numpy") if m in sys.modules)
print("RESULT " + json.dumps({"key": md["key"], "reused": md["reused"], "prepared_by": md["prepared_by"],
                              "path": md["path"], "train": md["splits"]["train"]["num_examples"], "heavy": heavy}))
"""


def _reuse_child(volume: Path, run_id: str, source: str, shards: int = 2, reuse_only: bool = False):
    import subprocess
    import sys

    env = {**os.environ, "TFK8S_PREPARE_REUSE_ONLY": "1" if reuse_only else "0"}
    proc = subprocess.run([sys.executable, "-c", REUSE_CHILD, source, str(volume), run_id, str(shards)],
                          check=False, capture_output=True, text=True, env=env, timeout=300)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    return proc.returncode, (json.loads(line.removeprefix("RESULT ")) if line else None), proc


def test_a_reused_data_set_needs_no_tensorflow_nor_tfds_import(tmp_path, mnist_tfds_data_dir):
    """The second run of a request finds its key from the resolution the first one remembered: TensorFlow,
    TFDS and NumPy are never imported (the --local run's pre-warmed interpreter need not be waited for, a
    prepare pod starts no TensorFlow); a request never resolved, or whose TFDS files changed, takes the full
    path, and in reuse-only mode ends with exit status 75 before importing anything."""
    import shutil

    from tfk8s.steps.prepare_dataset import REUSE_MISS_EXIT

    source = tmp_path / "tfds"
    shutil.copytree(Path(mnist_tfds_data_dir) / "mnist", source / "mnist")
    code, first, proc = _reuse_child(tmp_path / "vol", "run-1", str(source))
    assert code == 0 and first is not None, proc.stderr[-2000:]
    assert (first["reused"], first["prepared_by"], first["train"]) == (False, "run-1", 40)
    assert first["heavy"] == ["numpy", "tensorflow", "tensorflow_datasets"]  # it prepared: TFDS and TF

    code, second, proc = _reuse_child(tmp_path / "vol", "run-2", str(source), reuse_only=True)
    assert code == 0 and second is not None, proc.stderr[-2000:]
    assert (second["key"], second["path"], second["reused"], second["prepared_by"]) == (
        first["key"], first["path"], True, "run-1")
    assert second["heavy"] == [] and second["train"] == 40
    assert "tfk8s: reused data prepared by run run-1 at " in proc.stdout
    record = json.loads((tmp_path / "vol" / "runs" / "run-2" / "data.json").read_text())
    assert (record["key"], record["reused"], record["prepared_by"]) == (first["key"], True, "run-1")

    # another shard count: never resolved with these values -> another key, not in the store
    code, _, proc = _reuse_child(tmp_path / "vol", "run-3", str(source), shards=3, reuse_only=True)
    assert code == REUSE_MISS_EXIT and "tensorflow" not in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "vol" / "runs" / "run-3").exists()  # nothing written before the retry
    # the TFDS files changed since: their identity gives another key, so no reuse of the old folder
    info = source / "mnist" / "3.0.1" / "dataset_info.json"
    info.chmod(0o644)
    info.write_text(info.read_text().replace("Original order kept.", "Reordered."))
    code, _, proc = _reuse_child(tmp_path / "vol", "run-4", str(source), reuse_only=True)
    assert code == REUSE_MISS_EXIT, proc.stderr[-2000:]
    code, third, proc = _reuse_child(tmp_path / "vol", "run-5", str(source))  # the full path prepares it
    assert code == 0 and third["key"] != first["key"] and (third["reused"], third["prepared_by"]) == (False, "run-5")

"""tfk8s/steps/bucket_data.py: data_uri read into the volume's store against a real MinIO (tests/steps/s3_server.py):
reuse of an unchanged prefix without reading it, a changed prefix prepared anew, and nothing half-written when
the prefix is empty, of no data layout, or its bucket or credentials are wrong."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tfk8s.steps import s3
from tfk8s.steps.bucket_data import bucket_folder, bucket_identity, prepare_from_bucket
from tfk8s.steps.s3 import S3Error, S3Object, S3Uri


def test_the_key_is_the_objects_content_not_where_they_are():
    a = [S3Object("train.tfrecord", "e1", 10)]
    assert bucket_identity(a) == {"source": {"kind": "s3", "objects": [["train.tfrecord", "e1", 10]]},
                                  "writer": 1, "kind": "bucket"}
    from tfk8s.core.data_store import data_key

    assert data_key(bucket_identity(a)) != data_key(bucket_identity([S3Object("train.tfrecord", "e2", 10)]))
    assert data_key(bucket_identity(a)) != data_key(bucket_identity([S3Object("train.tfrecord", "e1", 11)]))


def test_store_folders_of_a_prefix():
    assert bucket_folder(S3Uri("my-data", "mnist/v1/")) == ("s3.my-data", "mnist.v1")
    assert bucket_folder(S3Uri("my-data", "")) == ("s3.my-data", "_")


def test_a_bad_uri_fails_before_any_request(tmp_path):
    with pytest.raises(S3Error, match="data_uri 'http://x/y' is not an S3 URI"):
        prepare_from_bucket(data_uri="http://x/y", s3_endpoint="", volume_root=str(tmp_path), run_id="r1")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def bucket(s3_env):
    name = f"d{time.monotonic_ns()}"
    c = s3_env.client()
    c.create_bucket(Bucket=name)
    c.put_object(Bucket=name, Key="mnist/train-00000-of-00002.tfrecord", Body=b"t0" * 1000)
    c.put_object(Bucket=name, Key="mnist/train-00001-of-00002.tfrecord", Body=b"t1" * 1000)
    return name


def _store_entries(volume: Path) -> list[str]:
    return sorted(str(p.relative_to(volume)) for p in (volume / "datasets").rglob("*")) \
        if (volume / "datasets").exists() else []


def test_first_run_reads_second_reuses_without_reading(s3_env, bucket, tmp_path, monkeypatch, capsys):
    uri = f"s3://{bucket}/mnist"
    first = prepare_from_bucket(data_uri=uri, s3_endpoint=s3_env.endpoint, volume_root=str(tmp_path), run_id="r1")
    assert first["reused"] is False and first["prepared_by"] == "r1" and first["format"] == "tfrecord"
    path = Path(first["path"])
    assert path.parent == tmp_path / "datasets" / f"s3.{bucket}" / "mnist" and path.name == first["key"]
    assert (path / "train-00001-of-00002.tfrecord").read_bytes() == b"t1" * 1000
    assert first["data_uri"] == f"s3://{bucket}/mnist/"

    def no_reading(*a, **kw):
        raise AssertionError("an unchanged prefix must not be read again")

    monkeypatch.setattr(s3, "download", no_reading)
    second = prepare_from_bucket(data_uri=uri, s3_endpoint=s3_env.endpoint, volume_root=str(tmp_path), run_id="r2")
    assert (second["reused"], second["prepared_by"], second["key"], second["path"]) == (True, "r1", first["key"],
                                                                                           str(path))
    out = capsys.readouterr().out
    assert f"tfk8s: {uri}: reused data prepared by run r1" in out and "2 objects listed, none read" in out


def test_a_changed_prefix_is_prepared_anew(s3_env, bucket, tmp_path):
    uri = f"s3://{bucket}/mnist"
    first = prepare_from_bucket(data_uri=uri, s3_endpoint=s3_env.endpoint, volume_root=str(tmp_path), run_id="r1")
    s3_env.client().put_object(Bucket=bucket, Key="mnist/train-00001-of-00002.tfrecord", Body=b"changed")
    second = prepare_from_bucket(data_uri=uri, s3_endpoint=s3_env.endpoint, volume_root=str(tmp_path), run_id="r2")
    assert second["reused"] is False and second["prepared_by"] == "r2" and second["key"] != first["key"]
    assert (Path(second["path"]) / "train-00001-of-00002.tfrecord").read_bytes() == b"changed"
    assert (Path(first["path"]) / "train-00001-of-00002.tfrecord").read_bytes() == b"t1" * 1000  # r1's kept


def test_reuse_data_false_reads_a_fresh_copy_into_the_run(s3_env, bucket, tmp_path):
    r = prepare_from_bucket(data_uri=f"s3://{bucket}/mnist", s3_endpoint=s3_env.endpoint, volume_root=str(tmp_path),
                            run_id="r1", reuse_data=False)
    assert (r["key"], r["reused"]) == ("", False) and r["path"] == str(tmp_path / "runs/r1/data")
    assert sorted(p.name for p in Path(r["path"]).iterdir()) == ["train-00000-of-00002.tfrecord",
                                                                 "train-00001-of-00002.tfrecord"]
    assert _store_entries(tmp_path) == []


def test_objects_of_no_data_layout_publish_nothing(s3_env, bucket, tmp_path):
    s3_env.client().put_object(Bucket=bucket, Key="notes/readme.txt", Body=b"hello")
    with pytest.raises(ValueError) as e:
        prepare_from_bucket(data_uri=f"s3://{bucket}/notes", s3_endpoint=s3_env.endpoint,
                            volume_root=str(tmp_path), run_id="r1")
    assert str(e.value).startswith(f"data_uri s3://{bucket}/notes/: ")
    assert "holds neither metadata.json, a tf.data snapshot nor TFRecord files (it has ['readme.txt'])" in str(e.value)
    assert [p for p in _store_entries(tmp_path) if not p.endswith(".lock")] == [f"datasets/s3.{bucket}",
                                                                                 f"datasets/s3.{bucket}/notes"]


@pytest.mark.parametrize(("uri", "says"), [
    ("s3://{bucket}/empty", "data_uri s3://{bucket}/empty/ ({endpoint}) holds no objects"),
    ("s3://no-such-bucket-x/mnist", "bucket 'no-such-bucket-x' does not exist"),
])
def test_failures_leave_nothing_in_the_store(s3_env, bucket, tmp_path, uri, says):
    with pytest.raises(S3Error, match=None) as e:
        prepare_from_bucket(data_uri=uri.format(bucket=bucket), s3_endpoint=s3_env.endpoint,
                            volume_root=str(tmp_path), run_id="r1")
    assert says.format(bucket=bucket, endpoint=s3_env.endpoint) in str(e.value)
    assert _store_entries(tmp_path) == []


def test_wrong_credentials_leave_nothing_in_the_store(s3_env, bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "nobody")
    with pytest.raises(S3Error, match="the credentials were refused while listing the prefix"):
        prepare_from_bucket(data_uri=f"s3://{bucket}/mnist", s3_endpoint=s3_env.endpoint,
                            volume_root=str(tmp_path), run_id="r1")
    assert _store_entries(tmp_path) == []


def test_the_prepare_step_takes_data_uri(s3_env, bucket, tmp_path):
    from tfk8s.steps.prepare_dataset import prepare_dataset_step

    r = prepare_dataset_step(dataset_name="mnist", tfds_data_dir="", volume_root=str(tmp_path), run_id="r1",
                             num_shards=0, num_workers=2, max_examples=0, data_uri=f"s3://{bucket}/mnist",
                             s3_endpoint=s3_env.endpoint)
    assert r["format"] == "tfrecord" and r["reused"] is False
    import json

    assert json.loads((tmp_path / "runs/r1/data.json").read_text())["data_uri"] == f"s3://{bucket}/mnist/"


def test_data_uri_and_data_dir_together_are_refused(tmp_path):
    from tfk8s.steps.prepare_dataset import prepare_dataset_step

    with pytest.raises(ValueError, match="data_uri s3://b1b/x and data_dir mine are both set: give one"):
        prepare_dataset_step(dataset_name="mnist", tfds_data_dir="", volume_root=str(tmp_path), run_id="r1",
                             num_shards=0, num_workers=2, max_examples=0, data_uri="s3://b1b/x", data_dir="mine")



def test_a_local_run_with_data_uri_checks_the_uri_not_the_dataset_name(tmp_path, monkeypatch):
    from pipelines import train

    started = []

    class Started(Exception):
        pass

    def run_local(*a, **k):
        started.append(k)
        raise Started

    monkeypatch.setattr(train, "run_local", run_local)
    with pytest.raises(SystemExit, match="data_uri 'gs://b/x' is not an S3 URI"):
        train.main(["--local", "--volume", str(tmp_path), "--param", "data_uri=gs://b/x"])
    assert started == []
    # a name TFDS does not know is not looked up: the data come from the bucket
    with pytest.raises(Started):
        train.main(["--local", "--volume", str(tmp_path), "--param", "data_uri=s3://b1b/x",
                    "--param", "dataset_name=nope"])
    assert len(started) == 1

"""tfk8s/steps/s3.py: the URI and endpoint parsing, the content identity and the errors' words without a server;
listing, streaming and the never-overwriting upload against a real MinIO (tests/steps/s3_server.py)."""

from __future__ import annotations

import time

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from tfk8s.steps import s3
from tfk8s.steps.s3 import S3Error, S3Object, S3Uri, S3VersionExistsError


@pytest.mark.parametrize(("uri", "bucket", "prefix"), [
    ("s3://data/mnist", "data", "mnist/"),
    ("s3://data/mnist/", "data", "mnist/"),
    ("s3://my.data-1/a/b/c", "my.data-1", "a/b/c/"),
    ("s3://data", "data", ""),
    ("s3://data/", "data", ""),
    ("  s3://data/x  ", "data", "x/"),
])
def test_parse_s3_uri(uri, bucket, prefix):
    assert s3.parse_s3_uri(uri) == S3Uri(bucket, prefix)
    assert str(s3.parse_s3_uri(uri)) == f"s3://{bucket}/{prefix}"


@pytest.mark.parametrize(("uri", "says"), [
    ("", "data_uri '' is not an S3 URI (no scheme): write data_uri=s3://BUCKET/PREFIX (e.g. s3://my-data/mnist/)"),
    ("/data/mnist", "data_uri '/data/mnist' is not an S3 URI (no scheme)"),
    ("gs://data/mnist", "data_uri 'gs://data/mnist' is not an S3 URI (gs://): write data_uri=s3://BUCKET/PREFIX"),
    ("s3:///mnist", "data_uri 's3:///mnist' names no bucket"),
    ("s3://Data/x", "bucket name 'Data' is not a valid S3 bucket name (3-63 lowercase letters"),
    ("s3://ab/x", "bucket name 'ab' is not a valid S3 bucket name"),
    ("s3://a..b/x", "bucket name 'a..b' is not a valid S3 bucket name"),
    ("s3://data/a//b", "the prefix has an empty, '.' or '..' segment"),
    ("s3://data/a/../b", "the prefix has an empty, '.' or '..' segment"),
])
def test_a_bad_uri_names_itself_and_the_fix(uri, says):
    with pytest.raises(S3Error) as e:
        s3.parse_s3_uri(uri)
    assert says in str(e.value)


def test_the_parameter_named_is_the_callers():
    with pytest.raises(S3Error, match=r"^model_uri 'x' is not an S3 URI .*write model_uri=s3://BUCKET/PREFIX"):
        s3.parse_s3_uri("x", "model_uri")


def test_join_adds_folders():
    assert str(S3Uri("m", "models/").join("mnist-cnn", "3")) == "s3://m/models/mnist-cnn/3/"
    assert str(S3Uri("m", "").join("/a/")) == "s3://m/a/"


@pytest.mark.parametrize(("endpoint", "ok"), [
    ("", ""), ("http://127.0.0.1:9000", "http://127.0.0.1:9000"), ("https://s3.example.com/", "https://s3.example.com"),
    ("https://storage.googleapis.com", "https://storage.googleapis.com"),
])
def test_endpoints(endpoint, ok):
    assert s3.check_endpoint(endpoint) == ok


@pytest.mark.parametrize("endpoint", ["minio:9000", "ftp://x", "http://x/path", "http://"])
def test_a_bad_endpoint_says_the_form(endpoint):
    with pytest.raises(S3Error, match=r"is not an endpoint URL: write http\(s\)://HOST\[:PORT\]"):
        s3.check_endpoint(endpoint)


def test_clients_share_the_parsed_s3_model_not_the_credentials(monkeypatch):
    """Every client's session reads the credentials anew; only botocore's parsed S3 model is shared."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "first-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "first-secret")
    first = s3.client("http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "second-key")
    second = s3.client("http://127.0.0.1:9")
    assert first._request_signer._credentials.access_key == "first-key"
    assert second._request_signer._credentials.access_key == "second-key"
    assert first.meta.service_model._service_description is second.meta.service_model._service_description
    assert second.meta.endpoint_url == "http://127.0.0.1:9" and second.meta.region_name == "us-east-1"


def test_content_identity_is_keys_etags_and_sizes_only():
    a = [S3Object("train.tfrecord", "abc", 10), S3Object("test.tfrecord", "def", 5)]
    assert s3.content_identity(a) == {"kind": "s3", "objects": [["train.tfrecord", "abc", 10],
                                                                 ["test.tfrecord", "def", 5]]}


def _client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, "ListObjectsV2")


@pytest.mark.parametrize(("error", "says"), [
    (_client_error("NoSuchBucket"), ("data_uri s3://nope/x/ (http://h:1): bucket 'nope' does not exist: create it "
                                    "or fix the bucket in data_uri")),
    (_client_error("InvalidAccessKeyId"), ("the credentials were refused while listing (InvalidAccessKeyId): set "
                                          "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")),
    (_client_error("SignatureDoesNotMatch"), "the credentials were refused while listing (SignatureDoesNotMatch)"),
    (_client_error("AccessDenied"), "access denied while listing: give the key's user read (data) or write"),
    (NoCredentialsError(), "no S3 credentials while listing: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
    (EndpointConnectionError(endpoint_url="http://h:1"), "the endpoint does not answer while listing"),
])
def test_errors_name_the_uri_and_the_fix(error, says):
    assert says in str(s3.explain(error, S3Uri("nope", "x/"), "data_uri", "http://h:1", "listing"))


# -- against a real MinIO ----------------------------------------------------------------------------------------
@pytest.fixture
def bucket(s3_env):
    name = f"b{time.monotonic_ns()}"
    s3_env.client().create_bucket(Bucket=name)
    return name


def test_listing_gives_relative_keys_etags_and_sizes(s3_env, bucket):
    c = s3_env.client()
    c.put_object(Bucket=bucket, Key="data/b.tfrecord", Body=b"bb")
    c.put_object(Bucket=bucket, Key="data/sub/a.tfrecord", Body=b"a" * 5)
    c.put_object(Bucket=bucket, Key="data/sub/", Body=b"")  # a folder marker: left out
    c.put_object(Bucket=bucket, Key="other/c", Body=b"c")
    found = s3.list_prefix(s3.client(s3_env.endpoint), s3.parse_s3_uri(f"s3://{bucket}/data"),
                           endpoint=s3_env.endpoint)
    assert [(o.key, o.size) for o in found] == [("b.tfrecord", 2), ("sub/a.tfrecord", 5)]
    assert found[0].etag == c.head_object(Bucket=bucket, Key="data/b.tfrecord")["ETag"].strip('"')


def test_download_streams_every_object(s3_env, bucket, tmp_path):
    c = s3_env.client()
    big = bytes(range(256)) * (3 * s3.CHUNK // 256 + 7)  # several chunks
    c.put_object(Bucket=bucket, Key="d/big.tfrecord", Body=big)
    c.put_object(Bucket=bucket, Key="d/x/small", Body=b"s")
    uri = s3.parse_s3_uri(f"s3://{bucket}/d")
    client = s3.client(s3_env.endpoint)
    lines: list[str] = []
    n = s3.download(client, uri, s3.list_prefix(client, uri), tmp_path, say=lines.append)
    assert n == len(big) + 1
    assert (tmp_path / "big.tfrecord").read_bytes() == big and (tmp_path / "x/small").read_bytes() == b"s"
    assert lines[-1].startswith(f"read 2 objects (3.0 MiB) from s3://{bucket}/d/ in ")


def test_an_object_rewritten_after_the_listing_fails_the_download(s3_env, bucket, tmp_path):
    c = s3_env.client()
    c.put_object(Bucket=bucket, Key="d/a.tfrecord", Body=b"old")
    uri = s3.parse_s3_uri(f"s3://{bucket}/d")
    client = s3.client(s3_env.endpoint)
    listed = s3.list_prefix(client, uri)
    c.put_object(Bucket=bucket, Key="d/a.tfrecord", Body=b"new!")
    with pytest.raises(S3Error, match=rf"data_uri s3://{bucket}/d/: object a.tfrecord changed while it was read"):
        s3.download(client, uri, listed, tmp_path)


def test_an_empty_prefix_fails_naming_it(s3_env, bucket):
    t0 = time.monotonic()
    with pytest.raises(S3Error) as e:
        s3.list_prefix(s3.client(s3_env.endpoint), s3.parse_s3_uri(f"s3://{bucket}/none"), endpoint=s3_env.endpoint)
    assert str(e.value).startswith(f"data_uri s3://{bucket}/none/ ({s3_env.endpoint}) holds no objects: check the "
                                   f"prefix (aws s3 ls s3://{bucket}/none/), or upload the data there")
    assert time.monotonic() - t0 < 5


def test_a_missing_bucket_fails_naming_it(s3_env):
    with pytest.raises(S3Error, match=r"bucket 'no-such-bucket' does not exist: create it or fix the bucket in "
                                      "data_uri"):
        s3.list_prefix(s3.client(s3_env.endpoint), s3.parse_s3_uri("s3://no-such-bucket/x"),
                       endpoint=s3_env.endpoint)


def test_wrong_credentials_fail_in_seconds_naming_the_fix(s3_env, bucket, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    t0 = time.monotonic()
    with pytest.raises(S3Error) as e:
        s3.list_prefix(s3.client(s3_env.endpoint), s3.parse_s3_uri(f"s3://{bucket}/x"), endpoint=s3_env.endpoint)
    assert f"data_uri s3://{bucket}/x/ ({s3_env.endpoint}): the credentials were refused while listing the " \
           "prefix (SignatureDoesNotMatch): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in str(e.value)
    assert time.monotonic() - t0 < 5


def test_an_endpoint_that_does_not_answer_fails_in_seconds(s3_env, bucket):
    from tests.steps.s3_server import _free_port

    dead = f"http://127.0.0.1:{_free_port()}"
    t0 = time.monotonic()
    with pytest.raises(S3Error, match="the endpoint does not answer while listing the prefix .*check s3_endpoint"):
        s3.list_prefix(s3.client(dead), s3.parse_s3_uri(f"s3://{bucket}/x"), endpoint=dead)
    assert time.monotonic() - t0 < 10


def test_upload_never_overwrites_a_version(s3_env, bucket, tmp_path):
    version = tmp_path / "3"
    (version / "variables").mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"graph")
    (version / "variables/variables.index").write_bytes(b"index")
    target = s3.parse_s3_uri(f"s3://{bucket}/models", "model_uri").join("mnist-cnn", "3")
    client = s3.client(s3_env.endpoint)
    keys = s3.upload_version(client, version, target)
    assert keys == ["models/mnist-cnn/3/variables/variables.index", "models/mnist-cnn/3/saved_model.pb"]  # pb last
    c = s3_env.client()
    assert c.get_object(Bucket=bucket, Key=keys[1])["Body"].read() == b"graph"
    (version / "saved_model.pb").write_bytes(b"another graph")
    with pytest.raises(S3VersionExistsError, match=rf"model_uri: s3://{bucket}/models/mnist-cnn/3/ holds objects "
                                                   "already: that version was uploaded before; versions are never "
                                                   "overwritten"):
        s3.upload_version(client, version, target)
    assert c.get_object(Bucket=bucket, Key=keys[1])["Body"].read() == b"graph"


def test_the_put_itself_refuses_an_object_written_meanwhile(s3_env, bucket, tmp_path, monkeypatch):
    """The check before the upload and the write are not atomic: If-None-Match closes the gap on a server that
    honours it (MinIO does)."""
    version = tmp_path / "4"
    version.mkdir()
    (version / "saved_model.pb").write_bytes(b"mine")
    target = S3Uri(bucket, "m/4/")
    s3_env.client().put_object(Bucket=bucket, Key="m/4/saved_model.pb", Body=b"theirs")
    client = s3.client(s3_env.endpoint)
    real = client.list_objects_v2
    monkeypatch.setattr(client, "list_objects_v2", lambda **kw: {**real(**kw), "KeyCount": 0})  # the race
    with pytest.raises(S3VersionExistsError, match="was written by someone else meanwhile"):
        s3.upload_version(client, version, target)
    assert s3_env.client().get_object(Bucket=bucket, Key="m/4/saved_model.pb")["Body"].read() == b"theirs"

"""Buckets: training data read from an S3 prefix (``data_uri``) and blessed models uploaded to one (``model_uri``),
on AWS S3 or any S3-compatible store (MinIO, SeaweedFS, Ceph RGW, GCS in its S3 mode) named by ``s3_endpoint``.

The client is boto3 (botocore does the signing, retries and pagination; nothing here signs a request): the
reference S3 client, whose credential chain is the one users already configure (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL``, a profile, a pod's IAM role), and which
speaks to every S3-compatible server with path-style addressing. Why not the others: s3fs/fsspec adds an
asynchronous layer (aiobotocore, pinned botocore) on top of the same signing for a file-like API we do not need;
the MinIO SDK has no credential chain (no profiles, no IAM roles); TensorFlow's own S3 file system left
TensorFlow (tensorflow-io, unmaintained for current TensorFlow versions). See docs/pipeline.md, *Buckets*.

What identifies a prefix's content is its listing: every object's key (relative to the prefix), ETag and size
(:func:`content_identity`). A listing costs one request per 1,000 objects and reads no data, so an unchanged
prefix is found in the store (:mod:`tfk8s.core.data_store`) without reading it again, and a changed object (a
new ETag or size) gives another key. Objects are streamed to files in 1 MiB chunks (bounded memory whatever
their size), with a progress line every few seconds.

Errors come within seconds (5 s connect timeout, two attempts) and name the URI, the parameter and the fix:
:class:`S3Error`. No KFP or TensorFlow import; boto3 is imported when a client is made.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHUNK = 1 << 20  # bytes read and written at a time while streaming an object
PROGRESS_S = 5.0  # seconds between progress lines
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 60
ATTEMPTS = 2
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_ENDPOINT = re.compile(r"https?://[^/\s?#]+/?")
CREDENTIALS_FIX = ("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (locally in the environment; on Kubernetes from "
                   "a Secret's keys as the step's env vars) to a key that may read the bucket")


class S3Error(ValueError):
    """A bucket cannot be read or written as asked; the message names the URI, the parameter and the fix."""


class S3VersionExistsError(S3Error):
    """The model version is in the bucket already: versions are never overwritten."""


@dataclass(frozen=True)
class S3Uri:
    """``s3://bucket/prefix``: ``prefix`` is "" (the whole bucket) or ends with ``/``."""

    bucket: str
    prefix: str

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def join(self, *parts: str) -> S3Uri:
        """The prefix ``<prefix><part>/<part>/...``."""
        return S3Uri(self.bucket, self.prefix + "".join(f"{p.strip('/')}/" for p in parts))


def parse_s3_uri(uri: str, parameter: str = "data_uri") -> S3Uri:
    """``s3://BUCKET[/PREFIX]`` -> :class:`S3Uri` (the prefix taken as a folder: ``/`` appended).

    Raises:
        S3Error: another scheme, no bucket, a bucket name S3 does not allow, or ``..`` / ``//`` in the prefix.
    """
    fix = f"write {parameter}=s3://BUCKET/PREFIX (e.g. s3://my-data/mnist/)"
    text = (uri or "").strip()
    if not text.startswith("s3://"):
        scheme = text.split("://", 1)[0] + "://" if "://" in text else "no scheme"
        raise S3Error(f"{parameter} {uri!r} is not an S3 URI ({scheme}): {fix}; S3-compatible stores (MinIO, "
                      "SeaweedFS, GCS's S3 mode) are s3:// URIs too, with s3_endpoint naming the server")
    bucket, _, prefix = text[len("s3://"):].partition("/")
    if not bucket:
        raise S3Error(f"{parameter} {uri!r} names no bucket: {fix}")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise S3Error(f"{parameter} {uri!r}: bucket name {bucket!r} is not a valid S3 bucket name (3-63 lowercase "
                      f"letters, digits, '.' and '-'): {fix}")
    parts = prefix.strip("/").split("/") if prefix.strip("/") else []
    if "//" in prefix.strip("/") or any(p in (".", "..") for p in parts):
        raise S3Error(f"{parameter} {uri!r}: the prefix has an empty, '.' or '..' segment: {fix}")
    return S3Uri(bucket, "".join(f"{p}/" for p in parts))


def check_endpoint(endpoint: str) -> str:
    """``s3_endpoint``: "" (AWS, or ``$AWS_ENDPOINT_URL``) or ``http(s)://host[:port]``; returns it stripped.

    Raises:
        S3Error: anything else.
    """
    text = (endpoint or "").strip()
    if text and not _ENDPOINT.fullmatch(text):
        raise S3Error(f"s3_endpoint {endpoint!r} is not an endpoint URL: write http(s)://HOST[:PORT] (e.g. "
                      "http://minio.minio:9000), or leave it empty for AWS S3")
    return text.rstrip("/")


def endpoint_of(endpoint: str) -> str:
    """The endpoint a client of ``endpoint`` talks to, for messages ("AWS S3" when none is set)."""
    return check_endpoint(endpoint) or os.environ.get("AWS_ENDPOINT_URL", "") or "AWS S3"


_LOADER: list[Any] = []  # botocore's data loader, shared by every client's session (see client)


def client(endpoint: str = "") -> Any:
    """A boto3 S3 client for ``endpoint`` ("" : ``$AWS_ENDPOINT_URL``, else AWS), failing fast (5 s connect
    timeout, two attempts), path-style addressing for S3-compatible servers, credentials from boto3's chain.

    Each client has a session of its own (credentials and configuration read anew), but the sessions share
    botocore's data loader, which caches the S3 model it parses: without it every client parsed that JSON again,
    0.07-0.34 s each on 2 busy cores, more than an unchanged prefix's whole reuse (listing and checks, 0.02 s)."""
    import boto3
    import botocore.session
    from botocore.config import Config

    core = botocore.session.Session()
    if _LOADER:
        core.register_component("data_loader", _LOADER[0])
    else:
        _LOADER.append(core.get_component("data_loader"))
    url = check_endpoint(endpoint) or None
    config = Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                    retries={"max_attempts": ATTEMPTS, "mode": "standard"},
                    s3={"addressing_style": "path" if (url or os.environ.get("AWS_ENDPOINT_URL")) else "auto"},
                    region_name=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1")
    return boto3.session.Session(botocore_session=core).client("s3", endpoint_url=url, config=config)


def s3_errors() -> tuple[type[BaseException], ...]:
    """What botocore raises (a server's answer, a connection or credential problem)."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (BotoCoreError, ClientError)


def explain(e: BaseException, uri: S3Uri | str, parameter: str, endpoint: str, doing: str) -> S3Error:
    """``e`` (botocore's) as an :class:`S3Error` naming the URI, what was being done and the fix."""
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    where = f"{parameter} {uri} ({endpoint_of(endpoint)})"
    if isinstance(e, NoCredentialsError | PartialCredentialsError):
        return S3Error(f"{where}: no S3 credentials while {doing}: {CREDENTIALS_FIX}")
    if isinstance(e, EndpointConnectionError):
        return S3Error(f"{where}: the endpoint does not answer while {doing} ({e}): check s3_endpoint (the S3 "
                       "server's URL, reachable from the step) or AWS_ENDPOINT_URL")
    if isinstance(e, ClientError):
        code = str(e.response.get("Error", {}).get("Code", ""))
        bucket = uri.bucket if isinstance(uri, S3Uri) else str(uri)
        if code in ("NoSuchBucket",):
            return S3Error(f"{where}: bucket {bucket!r} does not exist: create it or fix the bucket in {parameter}")
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken",
                    "InvalidClientTokenId", "AuthorizationHeaderMalformed"):
            return S3Error(f"{where}: the credentials were refused while {doing} ({code}): {CREDENTIALS_FIX}")
        if code in ("AccessDenied", "403", "Forbidden"):
            return S3Error(f"{where}: access denied while {doing}: give the key's user read (data) or write "
                           f"(models) access to bucket {bucket!r}, or {CREDENTIALS_FIX}")
        return S3Error(f"{where}: {doing} failed ({code}: {e}): check the URI, s3_endpoint and the credentials")
    return S3Error(f"{where}: {doing} failed ({type(e).__name__}: {e}): check s3_endpoint and the credentials")


@dataclass(frozen=True)
class S3Object:
    """One object under a prefix: ``key`` relative to the prefix, its ``etag`` (quotes removed) and ``size``."""

    key: str
    etag: str
    size: int


def list_prefix(s3: Any, uri: S3Uri, *, parameter: str = "data_uri", endpoint: str = "") -> list[S3Object]:
    """Every object under ``uri`` (folder markers, keys ending in ``/``, left out), sorted by key.

    Raises:
        S3Error: a missing bucket, refused credentials, an endpoint that does not answer, or an empty prefix.
    """
    found: list[S3Object] = []
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=uri.bucket, Prefix=uri.prefix):
            for o in page.get("Contents", []):
                rel = o["Key"][len(uri.prefix):]
                if rel and not rel.endswith("/"):
                    found.append(S3Object(rel, str(o.get("ETag", "")).strip('"'), int(o["Size"])))
    except s3_errors() as e:
        raise explain(e, uri, parameter, endpoint, "listing the prefix") from None
    if not found:
        raise S3Error(f"{parameter} {uri} ({endpoint_of(endpoint)}) holds no objects: check the prefix (aws s3 ls "
                      f"{uri}), or upload the data there (TFRecords + metadata.json, *.tfrecord files, or a "
                      "tf.data snapshot)")
    bad = [o.key for o in found if any(p in ("", ".", "..") for p in o.key.split("/"))]
    if bad:
        raise S3Error(f"{parameter} {uri}: object key {uri.prefix}{bad[0]} cannot be a file name (an empty, '.' or "
                      "'..' segment): rename it in the bucket")
    return sorted(found, key=lambda o: o.key)


def content_identity(objects: Sequence[S3Object]) -> dict:
    """What identifies the prefix's content (the store key's ``source``): each object's relative key, ETag and
    size. Not the bucket, prefix or endpoint: the same objects elsewhere are the same data."""
    return {"kind": "s3", "objects": [[o.key, o.etag, o.size] for o in objects]}


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def download(s3: Any, uri: S3Uri, objects: Sequence[S3Object], dest: str | os.PathLike, *,
             parameter: str = "data_uri", endpoint: str = "", say: Callable[[str], None] | None = None,
             between: Callable[[str], None] | None = None) -> int:
    """Stream ``objects`` of ``uri`` into ``dest`` (each ``<dest>/<relative key>``), :data:`CHUNK` bytes at a
    time, each file fsynced; a progress line through ``say`` every :data:`PROGRESS_S` seconds. Each object is
    read at the ETag it was listed with (``IfMatch``), so an object replaced meanwhile fails the preparation
    instead of mixing contents under the listing's key. ``between(what)`` is called between chunks (a stop
    signal: :func:`tfk8s.steps.stop_signals.stop_if_asked`). Returns the bytes written.

    Raises:
        S3Error: an object cannot be read, changed since the listing, or is not of its listed size.
    """
    root = Path(dest)
    total = sum(o.size for o in objects)
    done, last, t0 = 0, time.monotonic(), time.monotonic()
    for i, o in enumerate(objects):
        target = root / o.key
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            kwargs = {"IfMatch": f'"{o.etag}"'} if o.etag else {}
            body = s3.get_object(Bucket=uri.bucket, Key=uri.prefix + o.key, **kwargs)["Body"]
            written = 0
            with open(target, "wb") as f:
                for chunk in body.iter_chunks(CHUNK):
                    f.write(chunk)
                    written += len(chunk)
                    done += len(chunk)
                    now = time.monotonic()
                    if say is not None and now - last >= PROGRESS_S:
                        last = now
                        say(f"reading {uri}: {i + 1}/{len(objects)} objects, {_human(done)} of {_human(total)} "
                            f"({done / max(now - t0, 1e-9) / 2**20:.1f} MiB/s)")
                    if between is not None:
                        between(f"reading {uri} ({_human(done)} of {_human(total)})")
                f.flush()
                os.fsync(f.fileno())
        except s3_errors() as e:
            code = getattr(e, "response", {}).get("Error", {}).get("Code")
            if code in ("PreconditionFailed", "412"):
                raise S3Error(f"{parameter} {uri}: object {o.key} changed while it was read (its ETag is no "
                              f"longer {o.etag}): run again when the prefix is no longer being written") from None
            raise explain(e, uri, parameter, endpoint, f"reading {o.key}") from None
        if written != o.size:
            raise S3Error(f"{parameter} {uri}: object {o.key} gave {written} bytes, listed as {o.size}: it changed "
                          "while it was read; run again")
    if say is not None:
        say(f"read {len(objects)} objects ({_human(total)}) from {uri} in {time.monotonic() - t0:.1f}s")
    return total


def check_absent(s3: Any, uri: S3Uri, *, parameter: str = "model_uri", endpoint: str = "") -> None:
    """Nothing is under ``uri`` yet (a version to upload); the bucket is readable with these credentials.

    Raises:
        S3VersionExistsError: an object is there.
        S3Error: the bucket cannot be listed (missing, refused credentials, no answer).
    """
    try:
        existing = s3.list_objects_v2(Bucket=uri.bucket, Prefix=uri.prefix, MaxKeys=1).get("KeyCount", 0)
    except s3_errors() as e:
        raise explain(e, uri, parameter, endpoint, "listing the model's version") from None
    if existing:
        raise S3VersionExistsError(f"{parameter}: {uri} holds objects already: that version was uploaded before; "
                                   "versions are never overwritten (export a new version)")


def upload_version(s3: Any, src: str | os.PathLike, uri: S3Uri, *, parameter: str = "model_uri",
                   endpoint: str = "") -> list[str]:
    """Upload the folder ``src`` (a pushed model version) to the prefix ``uri`` (``<model_uri>/<name>/<version>/``),
    never overwriting: a prefix that holds any object already is refused, and each object is written only if it
    does not exist (``If-None-Match: *``, where the server honours it). ``saved_model.pb`` goes last, so a
    server polling the base path only finds a loadable version once every variable file is there. Returns the
    keys written.

    Raises:
        S3VersionExistsError: the version is there already.
        S3Error: the bucket cannot be listed or written (the message says why and the fix).
    """
    files = sorted((p for p in Path(src).rglob("*") if p.is_file()),
                   key=lambda p: (p.name == "saved_model.pb", str(p.relative_to(src))))
    if not files:
        raise S3Error(f"{parameter}: {src} holds no files to upload")
    check_absent(s3, uri, parameter=parameter, endpoint=endpoint)
    written: list[str] = []
    for path in files:
        key = uri.prefix + path.relative_to(src).as_posix()
        try:
            with open(path, "rb") as f:
                s3.put_object(Bucket=uri.bucket, Key=key, Body=f, IfNoneMatch="*")
        except s3_errors() as e:
            code = getattr(e, "response", {}).get("Error", {}).get("Code")
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                raise S3VersionExistsError(f"{parameter}: s3://{uri.bucket}/{key} was written by someone else "
                                           "meanwhile; versions are never overwritten (export a new version)") from None
            raise explain(e, uri, parameter, endpoint, f"uploading {path.name}") from None
        written.append(key)
    return written

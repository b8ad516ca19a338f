"""A real S3 server for the tests: MinIO's own binary (built from the Go module proxy by ``hack/kfp/build.sh``,
``~/.cache/tfk8s/kfp/2.17.0/minio``; ``TFK8S_MINIO`` names another), started on a free 127.0.0.1 port in a
temporary folder and stopped by its pid (:func:`running_minio`, also on another address: the real node's tests
start it on the node's bridge address, where pods reach it). Without the binary the tests that need it skip in
one line."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

MINIO = Path(os.environ.get("TFK8S_MINIO") or Path.home() / ".cache/tfk8s/kfp/2.17.0/minio")
USER, PASSWORD = "tfk8s-test", "tfk8s-test-secret"
START_S = 30.0


@dataclass
class S3Server:
    endpoint: str
    user: str
    password: str

    def client(self, password: str | None = None):
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=self.user,
            aws_secret_access_key=password or self.password, region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def minio_binary() -> Path | None:
    """The MinIO binary (:data:`MINIO`), or None when it is not built."""
    return MINIO if MINIO.is_file() and os.access(MINIO, os.X_OK) else None


NO_MINIO = f"no MinIO binary at {MINIO} (hack/kfp/build.sh --minio builds it; TFK8S_MINIO names another)"


@contextlib.contextmanager
def running_minio(folder: Path, host: str = "127.0.0.1") -> Iterator[S3Server]:
    """MinIO serving ``folder/data`` on a free port of ``host`` (its console on a free loopback port), its
    log in ``folder/minio.log``; stopped by its pid afterwards (SIGTERM, then SIGKILL after 10 s). ``folder``
    is the caller's to remove. Raises RuntimeError when it is not ready within :data:`START_S`."""
    binary = minio_binary()
    if binary is None:
        raise RuntimeError(NO_MINIO)
    port, console = _free_port(host), _free_port()
    env = {**os.environ, "MINIO_ROOT_USER": USER, "MINIO_ROOT_PASSWORD": PASSWORD,
           "MINIO_BROWSER": "off", "MINIO_UPDATE": "off", "HOME": str(folder)}
    log = open(folder / "minio.log", "wb")  # noqa: SIM115 - closed after the server stops
    proc = subprocess.Popen([str(binary), "server", str(folder / "data"), "--address", f"{host}:{port}",
                             "--console-address", f"127.0.0.1:{console}", "--quiet"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    endpoint = f"http://{host}:{port}"
    deadline = time.monotonic() + START_S
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/minio/health/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"MinIO did not start in {START_S:.0f}s (exit {proc.poll()}): "
                                   f"{(folder / 'minio.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield S3Server(endpoint, USER, PASSWORD)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A running MinIO (``S3Server``: endpoint, root user and password); skips when the binary is absent."""
    if minio_binary() is None:
        pytest.skip(NO_MINIO)
    folder = tmp_path_factory.mktemp("minio")
    try:
        with running_minio(folder) as server:
            yield server
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """The server's credentials as the steps read them (``AWS_*``), no other AWS configuration."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.user)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.password)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    return s3_server

"""The steps' fixtures: a real S3 server (MinIO, tests/steps/s3_server.py) for the bucket tests."""

from tests.steps.s3_server import s3_env, s3_server  # noqa: F401 - fixtures

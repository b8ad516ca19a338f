"""The `tfk8s` command itself (tfk8s/cmd/__init__.py, tfk8s/__main__.py): the console script and `python -m tfk8s`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.fakes.local_jobs import REPO

pytestmark = pytest.mark.timeout(120)


def test_console_script_and_module_entry_point():
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["tfk8s"] == "tfk8s.cmd:entry_point"
    done = subprocess.run([sys.executable, "-m", "tfk8s", "--help"], capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert done.returncode == 0
    for verb in ("get", "describe", "logs", "wait", "delete", "report", "run"):
        assert verb in done.stdout


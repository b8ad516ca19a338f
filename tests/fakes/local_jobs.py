"""Helpers of the local-job tracking tests (tests/cmd/test_get.py, test_wait.py, test_delete.py, test_logs.py,
tests/tracking/test_tracked.py): ``tfk8s`` run in this process, a launch step (tests/fakes/fake_launch.py) started
on a volume, waiting for a condition."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tfk8s.cmd import main

REPO = Path(__file__).resolve().parents[2]


def ctl(volume: Path, *args: str) -> tuple[int, str, str]:
    """Run ``tfk8s ARGS --volume VOLUME`` in this process; returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = main([*args, "--volume", str(volume)])
    finally:
        sys.stdout, sys.stderr = old
    return code, out.getvalue(), err.getvalue()


def start_launch(volume: Path, run_id: str, behaviour: dict, workers: int = 2, max_restarts: int = 0
                 ) -> subprocess.Popen:
    train = volume / "runs" / run_id / "train"
    train.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TFK8S_PROGRESS_INTERVAL_S": "0.5"}
    return subprocess.Popen([sys.executable, str(REPO / "tests" / "fakes" / "fake_launch.py"), str(train),
                             json.dumps(behaviour), str(workers), str(max_restarts)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def wait_for(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _launch_with_pids(volume: Path, run_id: str, behaviour: dict) -> tuple[subprocess.Popen, Path]:
    pid_dir = volume / f"pids-{run_id}"
    pid_dir.mkdir()
    os.environ["FAKE_PIDFILE_DIR"] = str(pid_dir)
    try:
        return start_launch(volume, run_id, behaviour), pid_dir
    finally:
        del os.environ["FAKE_PIDFILE_DIR"]


def _dead(pid_dir: Path) -> bool:
    return all(not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
               for pid in (int(p.read_text()) for p in pid_dir.glob("*.pid")))


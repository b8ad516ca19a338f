"""`tfk8s get` (and describe, logs, wait on the same job) while a local job runs and after it ended, read from
the job record and files on the volume (a launch step of tests/fakes/fake_launch.py running stand-in replicas);
a job whose launcher died reads as Lost. Against the Kubernetes backend: tests/cmd/test_get_kube.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.fakes.local_jobs import ctl, start_launch, wait_for
from tfk8s.cmd import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_OK, EXIT_TIMEOUT
from tfk8s.tracking import records as jobs

pytestmark = pytest.mark.timeout(120)


def test_get_describe_logs_wait_while_a_local_job_runs_and_after_it_ended(tmp_path):
    launch = start_launch(tmp_path, "r1", {"worker-0": "train:6", "worker-1": "train:6"})
    try:
        # running: a progress file says how far; the record says which replicas are up
        wait_for(lambda: (jobs.job_status(jobs.find_record(tmp_path, "r1")).step or 0) >= 3
                 if (tmp_path / "runs/r1/train/job.json").exists() else False, "3 steps reported")
        code, out, _ = ctl(tmp_path, "get")
        assert code == EXIT_OK
        head, row = out.splitlines()
        assert head.split() == ["JOB", "BACKEND", "REPLICAS", "STATE", "PROGRESS", "EPOCH", "EX/S", "RESTARTS", "AGE"]
        cells = row.split()
        assert cells[:5] == ["tfk8s-r1", "local", "worker", "2/2", "Running"]
        assert 10 <= int(cells[5].rstrip("%")) < 100 and cells[6] in ("1/2", "2/2") and int(cells[7]) > 1000

        code, out, _ = ctl(tmp_path, "wait", "tfk8s-r1", "--timeout", "0.3")
        assert code == EXIT_TIMEOUT

        # one job by name or run id, as `kubectl get pods NAME`; an unknown one is an error (exit 4)
        for name in ("tfk8s-r1", "r1"):
            code, out, _ = ctl(tmp_path, "get", name)
            assert code == EXIT_OK and out.splitlines()[1].split()[:2] == ["tfk8s-r1", "local"]
        code, out, err = ctl(tmp_path, "get", "tfk8s-r1", "nope")
        assert code == EXIT_NOT_FOUND and len(out.splitlines()) == 2 and "error: no job 'nope'" in err
        assert ctl(tmp_path, "get", "nope")[:2] == (EXIT_NOT_FOUND, "")

        code, out, _ = ctl(tmp_path, "get", "-o", "json")
        (item,) = json.loads(out)
        assert item["state"] == "Running" and item["total"] == {"worker": 2} and item["ready"] == {"worker": 2}
        assert 0 < item["progress"] < 1 and item["record"]["launcher"]["pid"] == launch.pid

        code, out, _ = ctl(tmp_path, "describe", "r1")
        assert "State:         Running" in out and "TF_CONFIG of worker-0" in out
        assert '"task": {"type": "worker", "index": 0}' in out and "127.0.0.1:" in out
        assert f"replica logs:      {tmp_path.resolve()}/runs/r1/train/replica-logs" in out
        assert f"{tmp_path.resolve()}/runs/r1/report.html  (not there)" in out  # not written while it runs
        assert out.rstrip().splitlines()[-2].strip() == "Events:" or "Events:" in out.split("Files:")[1]

        # follow worker-1's log from the volume until the job ends
        code, out, _ = ctl(tmp_path, "logs", "tfk8s-r1", "worker-1", "-f")
        assert code == EXIT_OK
        lines = out.splitlines()
        assert lines[0].startswith("TF_CONFIG=") and '"index":1' in lines[0]
        assert [x for x in lines if " step " in x] == [f"worker-1 step {i}/20" for i in range(1, 21)]
        assert lines[-1] == "worker-1 done training"
    finally:
        out, _ = launch.communicate(timeout=30)
    assert launch.returncode == 0, out
    # off a terminal the launch step printed plain progress lines, no bar or control characters
    progress = [x for x in out.splitlines() if x.startswith("tfk8s: progress tfk8s-r1 Running")]
    assert progress and "\x1b" not in out and "\r" not in out and "[#" not in out
    assert out.splitlines()[-1].startswith("tfk8s: progress tfk8s-r1 Succeeded  100%  epoch 2/2  step 20/20")

    # ended: the same commands answer from the record
    assert ctl(tmp_path, "wait", "r1")[:2] == (EXIT_OK, "tfk8s-r1 Succeeded\n")
    code, out, _ = ctl(tmp_path, "get")
    assert out.splitlines()[1].split()[:7] == ["tfk8s-r1", "local", "worker", "2/2", "Succeeded", "100%", "2/2"]
    code, out, _ = ctl(tmp_path, "logs", "r1")
    assert "[worker-0] worker-0 step 20/20" in out and "[worker-1] worker-1 done training" in out
    record = jobs.find_record(tmp_path, "r1")
    assert record["replica_states"] == {"worker-0": "Succeeded", "worker-1": "Succeeded"}
    assert record["finished"] >= record["created"] and record["wall_time_s"] > 5
    assert record["cluster_spec"]["worker"][1].startswith("127.0.0.1:")
    assert any(e["message"].startswith("tfk8s-r1 succeeded in ") for e in record["events"])


def test_a_job_whose_launcher_died_reads_as_lost_and_unknown_jobs_exit_4(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    train = tmp_path / "runs" / "r4" / "train"
    record = {"name": "tfk8s-r4", "backend": "local", "state": "Running", "created": time.time() - 5 * 3600 - 60,
              "replicas": {"worker": 1}, "replica_states": {"worker-0": "Running"},
              "launcher": {"pid": dead.pid, "host": __import__("socket").gethostname()},
              "paths": {"train_dir": str(train)}}
    jobs.write_record(train / "job.json", record)
    _, out, _ = ctl(tmp_path, "get")
    assert out.splitlines()[1].split()[:5] == ["tfk8s-r4", "local", "worker", "0/1", "Lost"]
    assert out.splitlines()[1].split()[-1] == "5h"
    assert ctl(tmp_path, "wait", "r4")[0] == EXIT_FAILED
    code, _, err = ctl(tmp_path, "describe", "nope")
    assert code == EXIT_NOT_FOUND and "no job 'nope'" in err and "tfk8s-r4" in err and "--volume" in err


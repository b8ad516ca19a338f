"""``pipelines/train.py --local`` stopped as a person stops it: Ctrl-C in the terminal (SIGINT to the whole
foreground process group; the replicas have sessions of their own) and ``kill -INT`` of the pipeline process
alone. Either way: one line, exit 130, no traceback, the job recorded Stopped with the reason, every replica
stopped, and its kept logs on the volume. (It printed a 45-line traceback and exited -2 with the job left Running,
replicas Running; sent to the process alone, the replicas trained on.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROGRAM = """
import os, time
from tfk8s.core.progress import ProgressReporter
label = os.environ["TFK8S_REPLICA_TYPE"] + "-" + os.environ["TFK8S_REPLICA_INDEX"]
open(os.path.join(os.environ["PIDS"], label), "w").write(str(os.getpid()))
reporter = ProgressReporter.from_env(label, 0)
for step in range(1, 10000):
    reporter.update(epoch=1, epochs=1, step=step, steps=10000)
    print(f"{label} step {step}", flush=True)
    time.sleep(0.2)
"""
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("how", ["ctrl-c", "kill-int-of-the-parent-alone"])
def test_an_interrupted_local_run_prints_one_line_exits_130_and_leaves_nothing_running(mnist_subset_dir, tmp_path,
                                                                                       how):
    (tmp_path / "train.py").write_text(PROGRAM)
    pids, volume = tmp_path / "pids", tmp_path / "volume"
    pids.mkdir()
    run = subprocess.Popen(
        [sys.executable, str(REPO / "pipelines" / "train.py"), "--local", "--volume", str(volume), "--param",
         f"data_dir={mnist_subset_dir}", "--param", f"command=python {tmp_path / 'train.py'}"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "PIDS": str(pids)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)  # its own process group, as a terminal's job
    try:
        deadline = time.monotonic() + 180

        def running() -> bool:  # both replicas up, and worker-0's log kept line by line on the volume meanwhile
            logs = list(volume.glob("runs/*/train/replica-logs/worker-0.log"))
            return len(list(pids.iterdir())) == 2 and bool(logs) and "worker-0 step 3" in logs[0].read_text()

        while not running():
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.2)
        if how == "ctrl-c":
            os.killpg(run.pid, signal.SIGINT)
        else:
            os.kill(run.pid, signal.SIGINT)
        out, err = run.communicate(timeout=90)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate()
    assert run.returncode == 130, out + err
    assert "Traceback" not in out + err, out + err
    said = [line for line in (out + err).splitlines() if "interrupted (" in line or "SIGINT" in line]
    assert len(said) == 1 and said[0].startswith("tfk8s: interrupted (SIGINT): stopping "), out + err
    replicas = [int(p.read_text()) for p in pids.iterdir()]
    assert len(replicas) == 2 and not any(_alive(pid) for pid in replicas)
    (record_file,) = volume.glob("runs/*/train/job.json")
    record = json.loads(record_file.read_text())
    assert record["state"] == "Stopped"
    assert record["message"].startswith("the launcher was interrupted by the user (SIGINT: Ctrl-C or kill -INT); "
                                        "every replica of tfk8s-")
    assert set(record["replica_states"].values()) == {"Stopped"}
    assert "worker-1 step " in (record_file.parent / "replica-logs" / "worker-1.log").read_text()


def test_a_stop_during_another_step_names_that_step_not_the_launch_step():
    """Issue 34: the interrupt line printed during the prepare step spoke of a launch step that was not running
    ("the launch step stops its replicas and records the job"); it names the step running, from the quiet run's
    own knowledge or from kfp.local's command line of the step's process."""
    from tfk8s.localrun.signals import stop_line, stops_reach_children

    step = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--executor_input", "{}",
                             "--function_to_execute", "prepare_dataset"])
    lines: list[str] = []
    try:
        with pytest.raises(SystemExit) as e, stops_reach_children(5.0, lines.append):
            os.kill(os.getpid(), signal.SIGTERM)
            step.wait(timeout=10)  # told SIGTERM by the handler
    finally:
        step.kill()
        step.wait()
    assert e.value.code == 143
    assert lines == [("tfk8s: got SIGTERM: stopping 1 child processes (the prepare-dataset step); exiting with 143 "
                      "once they have ended")]
    lines.clear()
    with pytest.raises(SystemExit), stops_reach_children(5.0, lines.append, current_step=lambda: "export-model"):
        os.kill(os.getpid(), signal.SIGINT)
    assert lines == [("tfk8s: interrupted (SIGINT): stopping 0 child processes (the export-model step); exiting "
                      "with 130 once they have ended")]
    assert stop_line("interrupted (SIGINT)", 3, 130, "launch-training") == (
        "tfk8s: interrupted (SIGINT): stopping 3 child processes (the launch step stops its replicas and records the "
        "job); exiting with 130 once they have ended")

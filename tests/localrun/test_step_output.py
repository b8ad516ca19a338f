"""The short local run's step runner (tfk8s.localrun.step_output): whole output to the step's output.log, only the
user-facing lines on the terminal, a failing step's last lines shown."""

from __future__ import annotations

import io
import json
import sys

from tfk8s.localrun.step_output import FAILURE_TAIL, QuietSteps, step_log_path

PROGRAM = """
import sys
print('[KFP Executor] Got executor_input: {...}')
print('I0000 cpu_feature_guard.cc:227] This TensorFlow binary is optimized', file=sys.stderr)
print('tfk8s: progress tfk8s-1 Running  50%  replicas 2/2 up')
print('[worker-0] epoch 1/2: loss=0.5')
print('tfk8s: report /v/runs/1/report.html')
for i in range(60):
    print(f'[worker-1] line {i}')
if sys.argv[1] == "9":
    print('Traceback (most recent call last):')
    print('  File "x.py", line 1, in <module>')
    print('    launch()')
    print('tfk8s.launcher.kubernetes.errors.PermanentFailureError: replica worker-1 failed with exit code 3: Error')
    print('last 2 log lines of worker-1:')
    print('  loading data')
    print('  ValueError: bad shard')
    print('[KFP Executor] task failed')
sys.exit(int(sys.argv[1]))
"""


def command(tmp_path, code: int) -> list[str]:
    executor_input = {"outputs": {"outputFile": str(tmp_path / "run" / "launch-training" / "executor_output.json")}}
    return [sys.executable, "-c", PROGRAM, str(code), "--executor_input", json.dumps(executor_input)]


def test_a_step_shows_only_its_tfk8s_lines_and_keeps_everything_in_its_log(tmp_path):
    out = io.StringIO()
    steps = QuietSteps(tmp_path, out, tty=False)
    assert steps.run_step(command(tmp_path, 0)) == 0
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["tfk8s: progress tfk8s-1 Running  50%  replicas 2/2 up", "tfk8s: report /v/runs/1/report.html"]
    assert len(lines) == 3 and lines[2].startswith("tfk8s: launch-training ok (")
    log = (tmp_path / "run" / "launch-training" / "output.log").read_text()
    assert "Got executor_input" in log and "cpu_feature_guard" in log and "[worker-1] line 59" in log
    assert steps.logs == [tmp_path / "run" / "launch-training" / "output.log"]


def test_on_a_terminal_progress_lines_give_way_to_the_live_bar(tmp_path):
    out = io.StringIO()
    assert QuietSteps(tmp_path, out, tty=True).run_step(command(tmp_path, 0)) == 0
    assert "tfk8s: progress" not in out.getvalue() and "tfk8s: report /v/runs/1/report.html\n" in out.getvalue()


def test_a_failing_step_prints_its_last_lines_and_where_its_whole_log_is(tmp_path):
    out = io.StringIO()
    assert QuietSteps(tmp_path, out, tty=False).run_step(command(tmp_path, 3)) == 3
    lines = out.getvalue().splitlines()
    log = tmp_path / "run" / "launch-training" / "output.log"
    head = next(x for x in lines if "FAILED" in x)
    assert head.startswith("tfk8s: launch-training FAILED after ") and "exit code 3" in head
    assert f"last {FAILURE_TAIL} lines (whole log: {log})" in head
    assert lines[-1] == "    [worker-1] line 59" and lines[-FAILURE_TAIL] == f"    [worker-1] line {60 - FAILURE_TAIL}"


def test_a_failing_step_with_a_traceback_shows_the_error_message_with_the_replica_lines(tmp_path):
    out = io.StringIO()
    assert QuietSteps(tmp_path, out, tty=False).run_step(command(tmp_path, 9)) == 9
    lines = out.getvalue().splitlines()
    assert "FAILED" in lines[-6] and "; its error (whole log: " in lines[-6]
    assert lines[-5:] == ["    tfk8s.launcher.kubernetes.errors.PermanentFailureError: replica worker-1 failed with exit code 3: Error",
                          "    last 2 log lines of worker-1:", "      loading data", "      ValueError: bad shard",
                          "    [KFP Executor] task failed"]


def test_step_name_and_log_come_from_the_executor_input(tmp_path):
    assert step_log_path(command(tmp_path, 0)) == ("launch-training",
                                                   tmp_path / "run" / "launch-training" / "output.log")
    assert step_log_path(["python", "-c", "pass"]) == ("step", None)

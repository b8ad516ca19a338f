"""The ``--local`` steps' pre-warmed interpreter (tfk8s.localrun.step_server): a step in kfp.local's command form runs in
a child forked from the server with the step's output, log, error lines and exit code as a subprocess gives
them; anything else runs as a subprocess; SIGTERM still leaves no process behind."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tfk8s.localrun.step_output import QuietSteps
from tfk8s.localrun.step_server import StepServer, kfp_python_step

REPO = Path(__file__).resolve().parents[2]

# Stands for kfp.dsl.executor_main: what the child sees, and the ways a step ends.
EXECUTOR = """
import os, sys, time
if __name__ != "__main__":
    raise SystemExit("not run as __main__")
args = sys.argv[1:]
component = args[args.index("--component_module_path") + 1]
print(f"tfk8s: step pid={os.getpid()} ppid={os.getppid()} cwd={os.getcwd()} marker={os.environ.get('MARKER')} "
      f"later={'email.mime.text' in sys.modules} slow={'slow_import' in sys.modules} "
      f"reuse_only={os.environ.get('TFK8S_PREPARE_REUSE_ONLY')}")
if os.environ.get("TFK8S_PREPARE_REUSE_ONLY") == "1" and args[-1] == "miss":
    print("not in the store")
    sys.exit(75)
if args[-1] == "miss":
    sys.exit(0)
print(f"component source: {open(component).read()}")
print("a C-level write to fd 2", file=sys.stderr)
how = args[-1]
if how == "raise":
    import json
    json.loads("{not json")
if how == "kill":
    os.kill(os.getpid(), 9)
if how == "sleep":
    print("tfk8s: sleeping", flush=True)
    time.sleep(60)
sys.exit(int(how))
"""

SCRIPT = ('program_path=$(mktemp -d)\n\nprintf "%s" "$0" > "$program_path/ephemeral_component.py"\n'
          '_KFP_RUNTIME=true {python} -m fake_executor                         --component_module_path'
          '                         "$program_path/ephemeral_component.py"                         "$@"\n')


def command(tmp_path: Path, how: str) -> list[str]:
    executor_input = {"outputs": {"outputFile": str(tmp_path / "run" / "export-model" / "executor_output.json")}}
    return ["sh", "-ec", SCRIPT.format(python=sys.executable), "def export_model(): pass",
            "--executor_input", json.dumps(executor_input), "--function_to_execute", "export_model", how]


@pytest.fixture
def executor_env(tmp_path, monkeypatch):
    """fake_executor importable (PYTHONPATH), MARKER set: in this process's environment, the steps' one."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "fake_executor.py").write_text(EXECUTOR)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "mods"), str(REPO)]))
    monkeypatch.setenv("MARKER", "from-the-environment")


@contextlib.contextmanager
def started_server():
    """A server for the test's own environment (made in the test's body: pytest's PYTEST_CURRENT_TEST differs
    between a fixture's set-up and the test, and a step is forked only in the server's environment)."""
    with StepServer(preload=("json",), later=("email.mime.text",)) as s:
        assert s.ready(60) and s.failed_imports == []
        yield s
    assert s.proc.poll() is not None  # closed: the server has exited


def step_line(out: str) -> dict[str, str]:
    line = next(x for x in out.splitlines() if x.startswith("tfk8s: step "))
    return dict(item.split("=", 1) for item in line.removeprefix("tfk8s: step ").split())


def test_kfp_locals_real_step_command_is_recognised_as_python_dash_m():
    from kfp.local.subprocess_task_handler import replace_python_executable

    from components.export_model import export_model

    container = export_model.component_spec.implementation.container
    full = replace_python_executable([*container.command, *container.args], sys.executable)
    step = kfp_python_step(full)
    assert step is not None and step.python == sys.executable and step.module == "kfp.dsl.executor_main"
    assert step.env == {"_KFP_RUNTIME": "true"} and "def export_model(" in step.source
    assert step.args[:1] == ("--executor_input",) and step.args[-2:] == ("--function_to_execute", "export_model")
    assert kfp_python_step([sys.executable, "-c", "pass"]) is None
    assert kfp_python_step(["sh", "-ec", "echo hi", "x"]) is None


def test_a_step_runs_forked_from_the_server_with_its_output_in_its_log(executor_env, tmp_path):
    with started_server() as server:
        out = io.StringIO()
        steps = QuietSteps(tmp_path, out, tty=False, server=server)
        assert steps.run_step(command(tmp_path, "0")) == 0
        seen = step_line(out.getvalue())
        assert int(seen["ppid"]) == server.proc.pid  # forked by the server, not started by this process
        assert seen["cwd"] == os.getcwd() and seen["marker"] == "from-the-environment"
        assert seen["later"] == "False"  # imported by the server once this first step had been forked
        assert out.getvalue().splitlines()[-1].startswith("tfk8s: export-model ok (")
        log = (tmp_path / "run" / "export-model" / "output.log").read_text()
        assert "component source: def export_model(): pass" in log and "a C-level write to fd 2" in log
        assert steps.run_step(command(tmp_path, "0")) == 0  # the server serves one step after another
        second = step_line(out.getvalue().split("export-model ok")[1])
        assert second["pid"] != seen["pid"] and second["ppid"] == seen["ppid"] and second["later"] == "True"


def test_a_forked_step_returns_its_exit_code(executor_env, tmp_path):
    with started_server() as server:
        for how, code in (("3", 3), ("kill", -9)):  # as Popen.returncode: negative for a signal
            out = io.StringIO()
            assert QuietSteps(tmp_path, out, tty=False, server=server).run_step(command(tmp_path, how)) == code
            assert "FAILED after " in out.getvalue() and f"with exit code {code};" in out.getvalue()
            log = (tmp_path / "run" / "export-model" / "output.log").read_text()
            assert int(step_line(log)["ppid"]) == server.proc.pid


def test_a_forked_steps_exception_is_shown_as_its_error(executor_env, tmp_path):
    with started_server() as server:
        out = io.StringIO()
        assert QuietSteps(tmp_path, out, tty=False, server=server).run_step(command(tmp_path, "raise")) == 1
        lines = out.getvalue().splitlines()
        head = next(x for x in lines if "FAILED" in x)
        assert head.startswith("tfk8s: export-model FAILED after ") and "exit code 1; its error (whole log: " in head
        assert lines[-1].startswith("    json.decoder.JSONDecodeError: Expecting property name enclosed in double")
        assert int(step_line(out.getvalue())["ppid"]) == server.proc.pid


def test_a_step_with_another_environment_runs_as_a_subprocess(executor_env, tmp_path):
    with started_server() as server:
        out = io.StringIO()
        assert QuietSteps(tmp_path, out, tty=False, server=server).run_step(command(tmp_path, "0"),
                                                                            {"MARKER": "given"}) == 0
        seen = step_line(out.getvalue())
        assert seen["marker"] == "given" and int(seen["ppid"]) != server.proc.pid  # sh's child, not the server's


SIGTERM_DRIVER = """
import sys
from tfk8s.localrun.signals import stops_reach_children
from tfk8s.localrun.step_output import QuietSteps
from tfk8s.localrun.step_server import StepServer
sys.path.insert(0, {tests!r})
from test_step_server import command
from pathlib import Path
with StepServer(preload=("json",), later=()) as server, stops_reach_children(grace_s=5):
    print("server", server.proc.pid, flush=True)
    QuietSteps({tmp!r}, sys.stdout, tty=False, server=server).run_step(command(Path({tmp!r}), "sleep"))
"""


def test_sigterm_stops_a_forked_step_and_the_server(executor_env, tmp_path):
    driver = subprocess.Popen([sys.executable, "-c", textwrap.dedent(SIGTERM_DRIVER).format(
        tests=str(Path(__file__).resolve().parent), tmp=str(tmp_path))], stdout=subprocess.PIPE, text=True)
    try:
        lines = [driver.stdout.readline(), driver.stdout.readline(), driver.stdout.readline()]
        server_pid = int(lines[0].split()[1])
        assert int(step_line(lines[1])["ppid"]) == server_pid and lines[2].startswith("tfk8s: sleeping")
        step = psutil.Process(server_pid).children()[0]
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(timeout=30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (psutil.pid_exists(server_pid) or step.is_running()):
            time.sleep(0.1)
        assert not step.is_running() and not psutil.pid_exists(server_pid)
    finally:  # a failed assertion leaves nothing running either
        with contextlib.suppress(psutil.Error):
            for p in [*psutil.Process(driver.pid).children(recursive=True), psutil.Process(driver.pid)]:
                p.kill()
        driver.wait()
        driver.stdout.close()


def test_a_step_without_tensorflow_does_not_wait_for_the_servers_imports(executor_env, tmp_path):
    """It runs in the light interpreter, forked by the server before its slow imports (TensorFlow's), at once;
    a step that needs them waits for them and is forked by the server itself."""
    (tmp_path / "mods" / "slow_import.py").write_text("import time\ntime.sleep(4)\n")  # stands for TensorFlow
    with StepServer(preload=("slow_import",), later=(), light=("json",)) as server:
        out = io.StringIO()
        steps = QuietSteps(tmp_path, out, tty=False, server=server, without_tensorflow={"export-model"})
        t0 = time.monotonic()
        assert steps.run_step(command(tmp_path, "0")) == 0
        assert time.monotonic() - t0 < 3.5  # not after the 4 s import
        seen = step_line(out.getvalue())
        light = psutil.Process(int(seen["ppid"]))
        assert light.ppid() == server.proc.pid and seen["slow"] == "False"  # the server's light child
        steps.without_tensorflow = frozenset()  # a step that needs the imports waits for them, then is forked
        assert steps.run_step(command(tmp_path, "0")) == 0
        second = step_line(out.getvalue().split("export-model ok")[1])
        assert int(second["ppid"]) == server.proc.pid and second["slow"] == "True"
        assert steps.run_step(command(tmp_path, "0")) == 0  # the light one serves one step after another
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and light.is_running() and light.status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.1)
    assert not light.is_running() or light.status() == psutil.STATUS_ZOMBIE  # gone with the server's socket


def test_a_reuse_first_step_is_tried_without_the_slow_imports_and_again_with_them_on_a_miss(executor_env, tmp_path):
    """The prepare step's way (tfk8s.steps.data_reuse): tried in the light interpreter with
    TFK8S_PREPARE_REUSE_ONLY=1; exit 75 means "not in the store": run again in the full interpreter, the try's
    output dropped from the log; any other exit is the step's."""
    (tmp_path / "mods" / "slow_import.py").write_text("import time\ntime.sleep(2)\n")
    with StepServer(preload=("slow_import",), later=(), light=("json",)) as server:
        out = io.StringIO()
        steps = QuietSteps(tmp_path, out, tty=False, server=server, reuse_first={"export-model"})
        assert steps.run_step(command(tmp_path, "miss")) == 0
        lines = [step_line(x) for x in out.getvalue().splitlines() if x.startswith("tfk8s: step ")]
        assert [(x["reuse_only"], x["slow"]) for x in lines] == [("1", "False"), ("None", "True")]
        assert int(lines[1]["ppid"]) == server.proc.pid and int(lines[0]["ppid"]) != server.proc.pid
        log = (tmp_path / "run" / "export-model" / "output.log").read_text()
        assert "not in the store" not in log and log.count("tfk8s: step ") == 1  # the second run's only
        assert out.getvalue().splitlines()[-1].startswith("tfk8s: export-model ok (")
        out.truncate(0)
        out.seek(0)
        assert steps.run_step(command(tmp_path, "0")) == 0  # a hit: the try is the step
        lines = [step_line(x) for x in out.getvalue().splitlines() if x.startswith("tfk8s: step ")]
        assert [(x["reuse_only"], x["slow"]) for x in lines] == [("1", "False")]
        out.truncate(0)
        out.seek(0)
        assert steps.run_step(command(tmp_path, "3")) == 3  # a failure of the try is the step's failure
        tried = [x for x in out.getvalue().splitlines() if x.startswith("tfk8s: step ")]
        assert "FAILED after " in out.getvalue() and len(tried) == 1 and "reuse_only=1" in tried[0]

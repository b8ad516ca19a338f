"""Ports are the launcher's problem (local backend): a port another process takes between the launcher's pick
and the replica's bind restarts every replica on new ports, not charged to the program; a full restart re-picks
the ports too. The replicas are real processes binding their TF_CONFIG port; the thief is a real process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tfk8s.core.cluster import ReplicaCounts
from tfk8s.core.errors import ReplicaFailedError
from tfk8s.core.job import TrainingJob
from tfk8s.launcher import local
from tfk8s.launcher.local import MAX_PORT_RETRIES, run_local

pytestmark = pytest.mark.timeout(120)

# A replica: binds its own TF_CONFIG address (as TensorFlow's server does), prints what TensorFlow prints when
# it cannot, exits 1 then; else writes its port to <dir>/<type>-<index>-<attempt>, serves a while and exits 0 (or
# worker-1's first attempt exits 137 when asked: a retryable crash after binding).
REPLICA = r"""
import json, os, socket, sys, time
cfg = json.loads(os.environ["TF_CONFIG"]); task = cfg["task"]
host, port = cfg["cluster"][task["type"]][task["index"]].rsplit(":", 1)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
try:
    s.bind((host, int(port))); s.listen()
except OSError as e:
    print(f"E0000 server_lib.cc: UNKNOWN: Could not start gRPC server: {e}", flush=True); sys.exit(1)
out = sys.argv[1]; label = f"{task['type']}-{task['index']}"
n = len([f for f in os.listdir(out) if f.startswith(label + "-")])
open(os.path.join(out, f"{label}-{n}"), "w").write(port)
if sys.argv[2] == "crash" and n == 0 and label == "worker-1":
    sys.exit(137)
time.sleep(float(sys.argv[3]))  # serving, as a TensorFlow server would, before the coordinator's success
"""

THIEF = ("import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
         "print(s.getsockname()[1], flush=True); time.sleep(120)")


@pytest.fixture
def thief():
    """Another process listening on a port of 127.0.0.1; yields its port."""
    proc = subprocess.Popen([sys.executable, "-c", THIEF], stdout=subprocess.PIPE, text=True)
    try:
        yield int(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait()


def _job(out, mode: str = "", hold_s: float = 1.0, **kw) -> TrainingJob:
    program = out.parent / f"{out.name}-replica.py"  # a file: the command's braces are the contract's placeholders
    program.write_text(REPLICA)
    return TrainingJob("ports", ReplicaCounts(worker=2),
                       (sys.executable, str(program), str(out), mode or "-", str(hold_s)), grace_period_s=5, **kw)


def _taken_first(monkeypatch, port: int, times: int = 1) -> None:
    """The launcher's first ``times`` picks hand worker-1 the thief's port: taken between pick and bind."""
    real, calls = local.free_ports, []

    def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
        calls.append(n)
        ports = real(n, host)
        return ports[:1] + [port] + ports[2:] if len(calls) <= times else ports

    monkeypatch.setattr(local, "free_ports", free_ports)


def test_a_port_taken_between_pick_and_bind_restarts_every_replica_on_new_ports_uncharged(
        tmp_path, monkeypatch, thief):
    _taken_first(monkeypatch, thief)
    lines: list[str] = []
    result = run_local(_job(tmp_path, max_restarts=0), log_sink=lines.append)
    assert result.exit_codes == {"worker-0": 0, "worker-1": 0} and result.restarts == 0
    (note,) = [line for line in lines if "could not bind its port" in line]
    assert note.startswith(f"replica worker-1 on 127.0.0.1:{thief} could not bind its port (taken by another "
                           f"process between pick and bind): new ports for every replica, restarting all, not "
                           f"counted against max_restarts (port retry 1 of {MAX_PORT_RETRIES})"), note
    spec = result.cluster_spec["worker"]
    assert f"127.0.0.1:{thief}" not in spec
    # both members run on the new, agreed spec (worker-0's first attempt bound the old one, then was restarted)
    assert (tmp_path / "worker-1-0").read_text() == spec[1].rsplit(":", 1)[1]
    assert (tmp_path / "worker-0-1").read_text() == spec[0].rsplit(":", 1)[1]


def test_a_port_taken_on_every_pick_fails_after_the_port_retries_as_the_programs_error(
        tmp_path, monkeypatch, thief):
    """Bounded: a program that can never bind (here: its port always taken) fails once the retries are spent."""
    _taken_first(monkeypatch, thief, times=MAX_PORT_RETRIES + 1)
    lines: list[str] = []
    with pytest.raises(ReplicaFailedError) as e:
        run_local(_job(tmp_path, hold_s=30, max_restarts=0), log_sink=lines.append, stop_grace_s=1)
    assert (e.value.replica.label, e.value.reason, e.value.exit_code) == ("worker-1", "Error", 1)
    assert "Could not start gRPC server" in str(e.value)
    assert len([line for line in lines if "could not bind its port" in line]) == MAX_PORT_RETRIES


def test_a_restart_of_every_replica_picks_new_ports(tmp_path):
    """A retryable crash of worker-1 (MWMS: the whole set restarts) moves every replica to new ports, so a port
    taken meanwhile cannot fail the next attempt."""
    lines: list[str] = []
    result = run_local(_job(tmp_path, "crash"), log_sink=lines.append)
    assert result.restarts == 1
    first = json.dumps([(tmp_path / "worker-0-0").read_text(), (tmp_path / "worker-1-0").read_text()])
    second = [a.rsplit(":", 1)[1] for a in result.cluster_spec["worker"]]
    assert second == [(tmp_path / "worker-0-1").read_text(), (tmp_path / "worker-1-1").read_text()]
    assert set(second).isdisjoint(json.loads(first))


def test_a_port_retry_is_told_on_the_console(tmp_path, monkeypatch, thief):
    """Issue 34: a port retry (new ports for every replica) was never shown on the console, which sat at
    `replicas 2/2 up` meanwhile; the console's story (the `tfk8s: ` lines a short `make run` shows) says it."""
    from tfk8s.tracking.progress_view import ConsoleStory

    _taken_first(monkeypatch, thief)
    lines: list[str] = []
    run_local(_job(tmp_path, max_restarts=0), log_sink=ConsoleStory("worker-0").wrap(lines.append))
    told = [line for line in lines if line.startswith("tfk8s: ")]
    assert told == [(f"tfk8s: port retry 1 of {MAX_PORT_RETRIES}: worker-1 on 127.0.0.1:{thief} could not bind its "
                     f"port (taken by another process between pick and bind); restarting every replica on new ports "
                     f"(not counted against max_restarts)")]

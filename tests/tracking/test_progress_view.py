"""The progress view (tfk8s.tracking.progress_view): plain lines off a terminal, one redrawn line on one, the live ETA."""

from __future__ import annotations

import io
import time

import pytest

from tfk8s.tracking.progress_view import ProgressMonitor, plain_line, tty_line
from tfk8s.tracking.records import JobStatus

pytestmark = pytest.mark.timeout(120)


def _status(**kw) -> JobStatus:
    base = {"name": "tfk8s-7", "backend": "local", "state": "Running", "ready": {"worker": 2}, "total": {"worker": 2},
                "fraction": 0.25, "epoch": 1, "epochs": 2, "step": 10, "steps": 40, "examples_per_sec": 5120.0, "eta_s": 95.0}
    return JobStatus(**{**base, **kw})


def test_progress_lines_plain_and_on_a_terminal():
    assert plain_line(_status()) == ("tfk8s: progress tfk8s-7 Running   25%  epoch 1/2  step 10/40  5,120 ex/s  "
                                     "ETA 1m35s  replicas 2/2 up")
    assert tty_line(_status()) == ("tfk8s-7 [######------------------]  25%  epoch 1/2  step 10/40  5,120 ex/s  "
                                   "ETA 1m35s  2/2 up")
    # a program that reports nothing still shows its replicas
    assert plain_line(_status(fraction=None, epoch=None, step=None, examples_per_sec=None, eta_s=None,
                              ready={"worker": 1})) == "tfk8s: progress tfk8s-7 Running  replicas 1/2 up"
    # once it has ended: how many succeeded (the chief; a ps stopped after it is not "up")
    ended = _status(state="Succeeded", fraction=1.0, eta_s=None, ready={"chief": 1}, total={"chief": 1, "ps": 1})
    assert plain_line(ended).endswith("100%  epoch 1/2  step 10/40  5,120 ex/s  replicas 1/2 succeeded")


def test_monitor_redraws_one_line_on_a_terminal_and_prints_other_output_above_it():
    out = io.StringIO()
    with ProgressMonitor(lambda: _status(), out, tty=True, interval_s=0.05) as m:
        time.sleep(0.2)
        m.print_line("[worker-0] hello")
    text = out.getvalue()
    assert text.count("\n") == 2  # the printed line and the bar's final state
    assert "\r\x1b[K[worker-0] hello\ntfk8s-7 [######" in text
    assert text.endswith("2/2 up\n")
    plain = io.StringIO()
    with ProgressMonitor(lambda: _status(), plain, tty=False, interval_s=0.05):
        time.sleep(0.18)
    assert "\r" not in plain.getvalue() and plain.getvalue().count("\n") == 1  # unchanged: said once


def test_the_live_eta_comes_from_the_step_rate_since_the_job_was_first_seen_running():
    steps = iter([0, 10, 11, 20])
    m = ProgressMonitor(lambda: _status(step=next(steps), steps=100, eta_s=999.0), io.StringIO(), tty=False,
                        interval_s=100)
    assert m._current().eta_s is None  # step 0: tracing and handshakes, no rate yet
    before_first = time.monotonic()
    assert m._current().eta_s is None  # the first sample
    assert m._current().eta_s is None  # one step since: too few
    time.sleep(0.2)
    eta = m._current().eta_s  # 10 steps since the first sample, 80 to go: 8 times the time those 10 took
    took = time.monotonic() - before_first
    assert 8 * 0.2 <= eta <= 8 * took, (eta, took)



def test_no_eta_while_the_job_stops_restarts_or_does_not_step(monkeypatch):
    """Issue 34: the ETA grew while a job stopped or restarted (the step count stood still, the time ran on); it is
    left out while a replica is down, while a new attempt reports no step yet, and once no step came for a few step
    times; a new attempt's rate is measured from its own steps."""
    from tfk8s.tracking import progress_view

    clock = [1000.0]
    monkeypatch.setattr(progress_view.time, "monotonic", lambda: clock[0])
    feed: list[JobStatus] = []
    m = ProgressMonitor(lambda: feed[-1], io.StringIO(), tty=False, interval_s=100)

    def at(t: float, **kw) -> str:
        clock[0] = 1000.0 + t
        feed.append(_status(steps=100, **kw))
        return plain_line(m._current())

    at(0, step=10, fraction=0.10)
    at(1, step=11, fraction=0.11)
    assert "ETA 1m28s" in at(2, step=12, fraction=0.12)  # 1 step/s, 88 to go
    assert "ETA" not in at(3, step=12, fraction=0.12, ready={"worker": 1})  # stopping: worker-1 is down
    assert "ETA" not in at(4, step=12, fraction=0.12, ready={"worker": 0})
    # recreated (attempt 2): it reports no step while it starts up; the line keeps its place, without an ETA
    line = at(30, step=None, fraction=None, epoch=None, restarts=1, ready={"worker": 2})
    assert "12%" in line and "step 12/100" in line and "ETA" not in line and "attempt 2 (restarts 1)" in line
    at(40, step=12, fraction=0.12, restarts=1)  # resumed: the rate is measured again, from this attempt's steps
    at(42, step=13, fraction=0.13, restarts=1)
    assert "ETA 2m52s" in at(44, step=14, fraction=0.14, restarts=1)  # 0.5 step/s, 86 to go
    assert "ETA 2m52s" in at(46, step=14, fraction=0.14, restarts=1)  # a step takes 2 s: not stalled yet
    assert "ETA" not in at(60, step=14, fraction=0.14, restarts=1)  # nothing for 16 s (> 10 s, > 3 step times)

"""How far a training job is, shown while it runs: one live bar on a terminal, a plain line every few
seconds elsewhere (a pod log, a pipe, CI).

On a terminal: ``tfk8s-123 [########----------------]  33%  epoch 1/2  step 26/78  5,120 ex/s  ETA 40s
2/2 up``, redrawn in place (other output is printed above it). Off a terminal: no bar and no control
characters, ``tfk8s: progress tfk8s-123 Running  33%  epoch 1/2  step 26/78  5,120 ex/s  ETA 40s  replicas 2/2 up``
every :data:`PLAIN_INTERVAL_S` seconds while it changes, every :data:`SAME_LINE_EVERY_S` seconds when it does
not (``$TFK8S_PROGRESS_INTERVAL_S`` overrides both update intervals). The
numbers come from :func:`tfk8s.tracking.records.job_status` (the job record plus the replicas' progress files); a
program that reports no progress still shows its replicas' states. After a recreation the line says which
attempt it is (``attempt 2 (restarts 1)``) and keeps its place while the new attempt starts up (it reports no
step until its first; the coordinator's resumed epoch then takes over).

:class:`ConsoleStory` adds the lines a person needs besides the bar, with the same ``tfk8s: `` prefix that a
short ``make run`` shows (:mod:`tfk8s.localrun.step_output`): each recreation with its cause (``tfk8s: restart 1
of max_restarts=3: replica worker-1 exited -9 (killed by signal SIGKILL); recreating worker-0, worker-1``), each
port retry of the local backend (``tfk8s: port retry 1 of 5: worker-1 on 127.0.0.1:4001 could not bind its
port (...); restarting every replica on new ports (not counted against max_restarts)``) and where the
coordinator resumed (``tfk8s: worker-0 resumed from epoch 1 of 3``).

The ETA is shown only while the job steps: not while a replica is down (stopping, restarting), a new attempt
reports no step yet, or no step came for a few step times.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Self

from tfk8s.tracking.records import TERMINAL_STATES, JobStatus

PLAIN_INTERVAL_S = 5.0
TTY_INTERVAL_S = 0.5
SAME_LINE_EVERY_S = 60.0  # an unchanged plain line is repeated only this often
INTERVAL_ENV = "TFK8S_PROGRESS_INTERVAL_S"
PLAIN_PREFIX = "tfk8s: "  # the lines a short `make run` shows from a step
PROGRESS_PREFIX = PLAIN_PREFIX + "progress "  # a plain progress line
BAR_WIDTH = 24
STALL_STEPS = 3.0  # no new step for this many step times: the job is not stepping now, so no ETA is shown
STALL_MIN_S = 10.0
_CLEAR = "\r\x1b[K"


def format_duration(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``1h02m`` (``?`` for None)."""
    if seconds is None:
        return "?"
    s = round(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def progress_fields(status: JobStatus, *, replicas_word: bool = True) -> list[str]:
    """The parts of a progress line that are known: percent, epoch, step, examples/sec, ETA, replicas up."""
    parts: list[str] = []
    if status.fraction is not None:
        parts.append(f"{status.fraction * 100:3.0f}%")
    if status.epoch is not None:
        parts.append(f"epoch {status.epoch}/{status.epochs}" if status.epochs else f"epoch {status.epoch}")
    if status.step is not None:
        parts.append(f"step {status.step}/{status.steps}" if status.steps else f"step {status.step}")
    if status.examples_per_sec:
        parts.append(f"{status.examples_per_sec:,.0f} ex/s")
    if status.eta_s is not None and status.state == "Running" and (status.fraction or 0) < 1:
        parts.append(f"ETA {format_duration(status.eta_s)}")
    up, total = status.replicas_up
    # once the job has ended only succeeded replicas count (a ps stopped after the chief's success is not "up")
    word = "succeeded" if status.state in TERMINAL_STATES else "up"
    parts.append(f"replicas {up}/{total} {word}" if replicas_word else f"{up}/{total} {word}")
    if status.attempt > 1:
        counts = [f"restarts {status.restarts}"] if status.restarts else []
        counts += [f"preemptions {status.preemptions}"] if status.preemptions else []
        parts.append(f"attempt {status.attempt} ({', '.join(counts)})")
    return parts


def bar(fraction: float | None, width: int = BAR_WIDTH) -> str:
    """``[#####-----]``; all ``-`` when the fraction is unknown."""
    done = round((fraction or 0.0) * width)
    return "[" + "#" * done + "-" * (width - done) + "]"


def tty_line(status: JobStatus, columns: int = 120) -> str:
    """The live bar's text, cut to ``columns`` characters."""
    state = "" if status.state == "Running" else f"{status.state}  "
    text = f"{status.name} {bar(status.fraction)} {state}" + "  ".join(progress_fields(status, replicas_word=False))
    return text[: max(10, columns - 1)]


def plain_line(status: JobStatus) -> str:
    """One progress line without bar or control characters (for logs and pipes)."""
    return f"{PROGRESS_PREFIX}{status.name} {status.state}  " + "  ".join(progress_fields(status))


def _interval(tty: bool) -> float:
    try:
        return float(os.environ[INTERVAL_ENV])
    except (KeyError, ValueError):
        return TTY_INTERVAL_S if tty else PLAIN_INTERVAL_S


class ProgressMonitor:
    """Show a job's progress from a thread while it runs (see the module docstring); a context manager.

    Args:
        status: returns the job's current :class:`~tfk8s.tracking.records.JobStatus` (None: nothing to show yet).
        stream: where to write (default ``sys.stdout``).
        tty: draw a live bar (default: whether ``stream`` is a terminal).
        interval_s: seconds between updates (default: 0.5 on a terminal, 5 elsewhere, or
            ``$TFK8S_PROGRESS_INTERVAL_S``).
    """

    def __init__(self, status: Callable[[], JobStatus | None], stream: IO[str] | None = None,
                 tty: bool | None = None, interval_s: float | None = None):
        self._status = status
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval_s = _interval(self.tty) if interval_s is None else interval_s
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tfk8s-progress", daemon=True)
        self._shown = ""  # the bar currently on screen (tty)
        self._last_plain: tuple[str, float] = ("", 0.0)
        self._first: tuple[float, int] | None = None  # (monotonic s, step) when first seen running
        self._place: JobStatus | None = None  # the last status with a known place (fraction, epoch, step)
        self._attempt = 1  # the attempt the rate is measured on (a recreation starts it again)
        self._moved: tuple[float, int] | None = None  # (monotonic s, step) when the step last changed

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _current(self) -> JobStatus | None:
        try:
            status = self._status()
        except Exception:  # noqa: BLE001 - a display must never fail the job
            return None
        if status is None:
            return None
        kept = self._keep_place(status)
        return kept if kept is not status else self._with_rate_eta(status)

    def _keep_place(self, status: JobStatus) -> JobStatus:
        """A running job whose new attempt reports no place yet (starting up) keeps the last one shown, rather
        than dropping back to no percentage or to epoch 1 of an attempt that is about to resume (without an ETA:
        nothing runs at a rate then)."""
        if status.fraction is not None or status.state != "Running":
            if status.fraction is not None:
                self._place = status
            return status
        if self._place is None:
            return status
        p = self._place
        return dataclasses.replace(status, fraction=p.fraction, epoch=p.epoch, epochs=p.epochs, step=p.step,
                                   steps=p.steps, eta_s=None, examples_per_sec=None)

    def _with_rate_eta(self, status: JobStatus) -> JobStatus:
        """The ETA from the steps done since this monitor first saw the current attempt running (start-up
        excluded), rather than :func:`~tfk8s.tracking.records.job_status`'s estimate from the job's whole age.

        No ETA while the job is not stepping: a replica down (stopping, restarting, a port retry), a new attempt
        that reports no step yet, or no new step for :data:`STALL_STEPS` times the measured step time (at least
        :data:`STALL_MIN_S`): the rate of the steps before says nothing then, and an ETA from it would only grow."""
        if status.state != "Running" or status.step is None or not status.steps:
            return status
        now = time.monotonic()
        if status.attempt != self._attempt:  # recreated: its rate is measured again from its own steps
            self._attempt, self._first, self._moved = status.attempt, None, None
        up, total = status.replicas_up
        if status.step < 1 or up < total:
            return dataclasses.replace(status, eta_s=None)  # the first step includes tracing and handshakes
        if self._moved is None or status.step != self._moved[1]:
            self._moved = (now, status.step)
        if self._first is None or status.step < self._first[1]:
            self._first = (now, status.step)
            return dataclasses.replace(status, eta_s=None)
        t0, s0 = self._first
        if status.step >= s0 + 2 and now > t0:
            rate = (status.step - s0) / (self._moved[0] - t0 or now - t0)  # up to the last step seen
            if now - self._moved[0] > max(STALL_MIN_S, STALL_STEPS / rate):
                return dataclasses.replace(status, eta_s=None)  # stalled (stopping, hung, a slow checkpoint)
            return dataclasses.replace(status, eta_s=max(0.0, status.steps - status.step) / rate)
        return dataclasses.replace(status, eta_s=None)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.refresh()

    def refresh(self) -> None:
        """Draw (tty) or print (plain) the current status once."""
        status = self._current()
        if status is None:
            return
        with self._lock:
            if self.tty:
                columns = shutil.get_terminal_size((120, 24)).columns
                self._shown = tty_line(status, columns)
                self.stream.write(_CLEAR + self._shown)
            else:
                line, now = plain_line(status), time.monotonic()
                if line == self._last_plain[0] and now - self._last_plain[1] < SAME_LINE_EVERY_S:
                    return  # nothing changed: say so only now and then
                self._last_plain = (line, now)
                self.stream.write(line + "\n")
            self.stream.flush()

    def print_line(self, line: str) -> None:
        """Print ``line`` above the live bar (plainly when not on a terminal)."""
        with self._lock:
            if self.tty and self._shown:
                self.stream.write(_CLEAR + line + "\n" + self._shown)
            else:
                self.stream.write(line + "\n")
            self.stream.flush()

    def stop(self) -> None:
        """Stop updating; on a terminal the bar's last state stays on its own line."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2 * self.interval_s + 1)
        with self._lock:
            if self.tty and self._shown:
                status = self._current()
                if status is not None:
                    self._shown = tty_line(status, shutil.get_terminal_size((120, 24)).columns)
                self.stream.write(_CLEAR + self._shown + "\n")
                self.stream.flush()
                self._shown = ""


_RECREATED = re.compile(r"^(?:\[launcher\] )?(?P<cause>.+?); (?:retryable|preempted): recreating (?P<group>.+?) "
                        r"\((?P<note>(?:restart \d+ of (?:max_restarts=)?\d+)|(?:preemption \d+, not counted against "
                        r"max_restarts=\d+))\)$")
_PORT_RETRY = re.compile(r"^(?:\[launcher\] )?replica (?P<was>.+?) could not bind its port \((?P<why>[^)]*)\): new "
                         r"ports for every replica, restarting all, not counted against max_restarts "
                         r"\(port retry (?P<n>\d+) of (?P<max>\d+)\)$")
_RESUMED = re.compile(r"^\[(?P<label>[a-z]+-\d+)\] resumed from epoch (?P<done>\d+) of (?P<epochs>\d+)\b")
CAUSE_CHARS = 240  # a recreation's cause as the console shows it (the record keeps it whole)


class ConsoleStory:
    """The ``tfk8s: `` lines that tell a job's story on the console, derived from the lines a backend sends:
    each recreation with its cause and the replicas recreated, and where the coordinator resumed (the built-in
    trainer's and ``tfk8s.runtime``'s ``resumed from epoch k of N``), once per attempt.

    Args:
        coordinator: the label whose resume line counts (``chief-0``, else ``worker-0``).
    """

    def __init__(self, coordinator: str):
        self.coordinator = coordinator
        self._recreations = 0
        self._resumed_at = -1  # the recreation count when the last resume was said

    def story(self, line: str) -> str | None:
        """The console line ``line`` calls for, or None."""
        m = _RECREATED.match(line)
        if m:
            self._recreations += 1
            cause = m.group("cause")
            cause = cause if len(cause) <= CAUSE_CHARS else cause[:CAUSE_CHARS] + "..."
            note = m.group("note").replace(", not counted against", " (not counted against") + (
                ")" if "not counted" in m.group("note") else "")
            return f"{PLAIN_PREFIX}{note}: {cause}; recreating {m.group('group')}"
        m = _PORT_RETRY.match(line)
        if m:  # not a recreation the program caused: its replicas start again at once, from where they were
            return (f"{PLAIN_PREFIX}port retry {m.group('n')} of {m.group('max')}: {m.group('was')} could not bind "
                    f"its port ({m.group('why')}); restarting every replica on new ports (not counted against "
                    f"max_restarts)")
        m = _RESUMED.match(line)
        if m and m.group("label") == self.coordinator and self._resumed_at < self._recreations:
            self._resumed_at = self._recreations
            return (f"{PLAIN_PREFIX}{m.group('label')} resumed from epoch {m.group('done')} of {m.group('epochs')} "
                    f"(attempt {self._recreations + 1})")
        return None

    def wrap(self, sink: Callable[[str], None]) -> Callable[[str], None]:
        """``sink`` that also receives each story line, right after the line it comes from."""
        def told(line: str) -> None:
            sink(line)
            try:
                said = self.story(line)
            except Exception:  # noqa: BLE001 - a display must never fail the job
                said = None
            if said:
                sink(said)

        return told

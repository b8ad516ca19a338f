"""A short, readable local run: each step's whole output goes to a file, the terminal gets one line per step,
the training's progress and the final block.

``pipelines/train.py --local`` (``make run``) runs every step as a subprocess through ``kfp.local``, which
prints each step's executor input as JSON, TensorFlow's C++ start-up messages and every replica's log (about
840 lines for one run). Unless ``--verbose`` is given it runs the steps with :meth:`QuietSteps.run_step`
instead, which

- writes the step's merged stdout/stderr to ``<pipeline root>/<run>/<step>/output.log`` (the step's own
  artifact folder, next to its ``executor_output.json``);
- shows only the step's lines that start with :data:`tfk8s.tracking.progress_view.PLAIN_PREFIX` (``tfk8s: ``): the
  launch step's progress lines and the evaluate step's report path. On a terminal the progress lines are
  replaced by one live bar drawn from the job record and progress files on the volume;
- prints ``tfk8s: <step> ok (12.3s)``, or on failure ``tfk8s: <step> FAILED`` and the log's path, followed by
  the step's error: the exception's message after its traceback (a failed replica's names the replica, its
  exit code and reason and its last log lines; at most :data:`FAILURE_MAX` lines), else the log's last
  :data:`FAILURE_TAIL` lines.

After a stop signal (Ctrl-C, SIGTERM: :mod:`tfk8s.localrun.signals`) the step's output still goes to its
``output.log`` but no longer to the terminal (its error is the stop, said in one line), and no new step starts.

With a :class:`tfk8s.localrun.step_server.StepServer` a step runs in a child forked from an interpreter that has
already imported KFP and TensorFlow (same output, log and exit code; a command or environment it cannot take
runs as a subprocess as before).

This module does not import KFP: ``pipelines/train.py`` installs :meth:`QuietSteps.run_step` in place of
``kfp.local``'s ``run_local_subprocess`` (same signature and return value: the exit code).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tfk8s.localrun import signals
from tfk8s.steps.data_reuse import REUSE_MISS_EXIT, REUSE_ONLY_ENV
from tfk8s.tracking.progress_view import PLAIN_PREFIX, PROGRESS_PREFIX, ProgressMonitor
from tfk8s.tracking.records import job_status, list_records

if TYPE_CHECKING:
    from tfk8s.localrun.step_server import StepServer

FAILURE_TAIL = 40
FAILURE_MAX = 80  # most lines shown of a failing step's error message


def step_log_path(full_command: list[str]) -> tuple[str, Path | None]:
    """``(step name, <its output folder>/output.log)`` from a ``kfp.local`` step command's
    ``--executor_input`` (its ``outputs.outputFile`` lies in the step's folder); ``("step", None)`` if absent."""
    try:
        raw = full_command[full_command.index("--executor_input") + 1]
        output_file = json.loads(raw)["outputs"]["outputFile"]
    except (ValueError, IndexError, KeyError, TypeError):
        return "step", None
    folder = Path(output_file).parent
    return folder.name, folder / "output.log"


def error_lines(lines: list[str]) -> tuple[list[str], str]:
    """What to show of a failed step's output: ``(lines, what they are)``.

    The message of the last Python exception (the line after its traceback's frames, and what follows it, at
    most :data:`FAILURE_MAX` lines), else the last :data:`FAILURE_TAIL` lines.
    """
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last):")]
    if starts:
        for j in range(starts[-1] + 1, len(lines)):
            if lines[j] and not lines[j].startswith((" ", "\t")):
                return lines[j:j + FAILURE_MAX], "its error"
    shown = lines[-FAILURE_TAIL:]
    return shown, f"its last {len(shown)} lines"


class QuietSteps:
    """Runs ``kfp.local`` step commands quietly (see the module docstring).

    Args:
        volume: the folder standing for the shared volume (for the live bar's job records).
        stream: the terminal or pipe (default ``sys.stdout``).
        tty: draw a live progress bar (default: whether ``stream`` is a terminal).
        server: run the steps it can take in its pre-warmed interpreter (None: every step as a subprocess).
        without_tensorflow: names of steps that import no TensorFlow: they run in the server's light interpreter
            (forked before TensorFlow is imported), else, while the server is still importing, as a subprocess
            at once instead of waiting for it (the first step, ensure-volume, waited 1.8 s for an import it
            does not need).
        reuse_first: names of steps tried first in the light interpreter with ``TFK8S_PREPARE_REUSE_ONLY=1``
            (the prepare step: a data set already in the store needs no TensorFlow); a try that exits
            :data:`tfk8s.steps.data_reuse.REUSE_MISS_EXIT` (75, before writing anything) runs again the
            usual way, its output dropped.
    """

    def __init__(self, volume: str | os.PathLike, stream: IO[str] | None = None, tty: bool | None = None,
                 server: StepServer | None = None, without_tensorflow: Collection[str] = (),
                 reuse_first: Collection[str] = ()):
        self.volume = Path(volume)
        self.server = server
        self.without_tensorflow = frozenset(without_tensorflow)
        self.reuse_first = frozenset(reuse_first)
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty() if tty is None else tty
        self.logs: list[Path] = []
        self._monitor: ProgressMonitor | None = None  # the live bar of the step running
        self.current: str | None = None  # the step running now (what a stop's line names)

    def _job_since(self, t0: float) -> Any:
        """The status of the newest job recorded since ``t0`` (None: none yet)."""
        records = [r for r in list_records(self.volume) if (r.get("created") or 0) >= t0 - 1]
        return job_status(records[-1]) if records else None

    def run_step(self, full_command: list[str], env_vars: dict[str, str] | None = None) -> int:
        """Run one step like ``kfp.local.subprocess_task_handler.run_local_subprocess``; returns its exit code."""
        name, log_path = step_log_path(full_command)
        if signals.interrupted():  # the run is being stopped: no new step
            return 1
        env = {**os.environ, **(env_vars or {})}
        t0 = time.time()
        tail: collections.deque[str] = collections.deque(maxlen=1000)
        log = None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log = open(log_path, "w", encoding="utf-8")  # noqa: SIM115
            self.logs.append(log_path)
        monitor = ProgressMonitor(lambda: self._job_since(t0), self.stream, tty=self.tty) if self.tty else None
        self._monitor = monitor
        self.current = name
        try:
            if monitor:
                monitor.__enter__()
            code = None
            if self.server is not None and name in self.reuse_first:  # a reuse needs no TensorFlow: try that
                tried = self.server.start(full_command, env, light=True, extra_env={REUSE_ONLY_ENV: "1"})
                if tried is not None:
                    code = self._follow(tried, tail, log, monitor)
                    if code == REUSE_MISS_EXIT and not signals.interrupted():  # not in the store: the usual way
                        code = None
                        tail.clear()
                        if log:
                            log.seek(0)
                            log.truncate()
            if code is None:
                forked = None
                if self.server is not None and name in self.without_tensorflow:
                    forked = (self.server.start(full_command, env, light=True)
                              or self.server.start(full_command, env, wait_ready=False))
                elif self.server is not None:
                    forked = self.server.start(full_command, env)
                code = self._follow(forked or subprocess.Popen(
                    full_command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env),
                    tail, log, monitor)
        finally:
            self._monitor = None
            self.current = None
            if monitor:
                monitor.stop()
            if log:
                log.close()
        took = time.time() - t0
        if signals.interrupted():  # its failure is the stop, already said
            return code
        if code == 0:
            self._say(f"{PLAIN_PREFIX}{name} ok ({took:.1f}s)", None)
        else:
            where = f" (whole log: {log_path})" if log_path else ""
            shown, what = error_lines(list(tail))
            self._say(f"{PLAIN_PREFIX}{name} FAILED after {took:.1f}s with exit code {code}; {what}{where}:", None)
            for line in shown:
                self._say(f"    {line}", None)
        return code

    def _follow(self, proc, tail: collections.deque[str], log: IO[str] | None,
                monitor: ProgressMonitor | None) -> int:
        """Read a started step's output to its end (into ``tail`` and ``log``; its ``tfk8s:`` lines to the
        terminal) and return its exit code."""
        with proc:
            assert proc.stdout is not None
            for raw in iter(proc.stdout.readline, ""):
                line = raw.rstrip("\n")
                tail.append(line)
                if log:
                    log.write(raw)
                if (line.startswith(PLAIN_PREFIX) and not (monitor and line.startswith(PROGRESS_PREFIX))
                        and not signals.interrupted()):
                    self._say(line, monitor)
            return proc.wait()

    def say(self, line: str) -> None:
        """Print ``line`` on the terminal now, above the live bar of the step running, if any (the main thread
        may call it from a signal handler: the bar's lock is re-entrant)."""
        self._say(line, self._monitor)

    def _say(self, line: str, monitor: ProgressMonitor | None) -> None:
        if monitor:
            monitor.print_line(line)
        else:
            self.stream.write(line + "\n")
            self.stream.flush()

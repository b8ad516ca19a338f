"""How a launcher is stopped from outside: SIGTERM and SIGINT take one path, on both backends.

SIGTERM comes when the pipeline run is cancelled or the launcher's pod is evicted; SIGINT when a person presses
Ctrl-C in the terminal of a local run (the whole foreground process group gets it) or sends ``kill -INT``.
While a backend runs a job (:func:`stop_signals`), either one raises
:class:`~tfk8s.core.errors.LauncherTerminatedError` in the main thread, naming the signal and the job, so the
backend's cleanup runs: every replica stopped (local: SIGTERM, SIGKILL after ``stop_grace_s``; Kubernetes: every
object deleted), then the error reaches the launch step, which records the job ``Failed`` with that reason
(``tfk8s describe``). A second signal while the backend stops the replicas (a second Ctrl-C, the SIGTERM a
parent process forwards, :mod:`tfk8s.localrun.signals`) is noted and ignored: the cleanup is never cut short.

The same signal often comes twice within milliseconds: Ctrl-C reaches the launch step from the terminal and
again from ``pipelines/train.py``, which passes it on for the case it was sent to it alone. So after a stop
the handlers stay for :data:`REPEAT_WINDOW_S` seconds more, noting and ignoring a repeat (which would
otherwise interrupt the launch step while it records the outcome); after that a signal acts as before.

A SIGINT the process was started ignoring (a job started in the background with ``&``, ``nohup``) stays
ignored. Outside the main thread nothing can be caught: the backend says so and runs without it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tfk8s.core.errors import LauncherTerminatedError

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
REPEAT_WINDOW_S = 10.0
"""Seconds after a stop during which the same signals are taken for that stop (noted, ignored)."""


@dataclass
class StopState:
    """What :func:`stop_signals` hands the backend.

    Attributes:
        signum: the stop signal that came (None: none yet).
        cleaning: set it when the cleanup starts: from then on a stop signal is noted and ignored.
        caught: whether the signals are caught at all (False outside the main thread).
    """

    signum: int | None = None
    cleaning: bool = False
    caught: bool = True
    _deferring: int = 0
    _pending: LauncherTerminatedError | None = None

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """A stop signal arriving inside raises on the way out instead (around starting a replica's process,
        so that a started process is always known to the cleanup)."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
        if not self._deferring and self._pending is not None:
            pending, self._pending = self._pending, None
            raise pending


@contextmanager
def stop_signals(job_name: str, log: Callable[[str], None],
                 outcome: str = "was stopped") -> Iterator[StopState]:
    """While inside, SIGTERM and SIGINT raise :class:`LauncherTerminatedError` (``the launcher <cause>; every
    replica of <job> <outcome>``, :meth:`~tfk8s.core.errors.LauncherTerminatedError.by_signal`) in the main
    thread; once the state's ``cleaning`` is set, or after the first one, they are logged and ignored. The
    previous handlers are restored on the way out.

    Args:
        job_name: named in the error.
        log: receives one line per ignored signal.
        outcome: what the error says happened to the replicas (local: ``was stopped``; Kubernetes: ``is being
            deleted; rerun the step to train again``).
    """
    state = StopState()
    if threading.current_thread() is not threading.main_thread():
        state.caught = False
        yield state
        return

    def handler(signum: int, frame: object) -> None:
        if state.signum is not None or state.cleaning:
            _say(log, f"got {signal.Signals(signum).name} again: every replica of {job_name} is already being "
                      f"stopped")
            return
        state.signum = signum
        error = LauncherTerminatedError.by_signal(signum, job_name, outcome)
        if state._deferring:
            state._pending = error
            return
        raise error

    previous = {}
    for signum in STOP_SIGNALS:
        if signum == signal.SIGINT and signal.getsignal(signum) is signal.SIG_IGN:
            continue  # started ignoring Ctrl-C (in the background): leave it so
        previous[signum] = signal.signal(signum, handler)
    try:
        yield state
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old if state.signum is None else _after_stop(old, job_name, log))


def _say(log: Callable[[str], None], line: str) -> None:
    """``log(line)`` from a signal handler: a failure to say it (a closed pipe) must not become the exception."""
    try:
        log(line)
    except Exception:  # noqa: BLE001, S110
        pass


def _after_stop(previous: object, job_name: str, log: Callable[[str], None]) -> Callable[[int, object], None]:
    """A handler that ignores a repeated stop signal for :data:`REPEAT_WINDOW_S` seconds from now, then acts as
    ``previous`` did (calls it, or restores the default action and re-sends the signal to this process)."""
    until = time.monotonic() + REPEAT_WINDOW_S

    def handler(signum: int, frame: object) -> None:
        if time.monotonic() < until:
            _say(log, f"got {signal.Signals(signum).name} again: {job_name} was already stopped")
            return
        signal.signal(signum, previous)  # type: ignore[arg-type]
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            os.kill(os.getpid(), signum)

    return handler

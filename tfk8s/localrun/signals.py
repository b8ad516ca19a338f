"""SIGTERM and SIGINT (Ctrl-C) to a local pipeline run reach every step it started, so nothing is left running.

Ctrl-C in a terminal sends SIGINT to the whole foreground process group: ``pipelines/train.py``, its step
server and the step running (the replicas have sessions of their own). ``kill -INT`` or ``kill -TERM`` of
``pipelines/train.py`` reaches it alone. Either way :func:`stops_reach_children` passes the signal on to the
step processes of this run (the launch step then stops its replicas, SIGTERM then SIGKILL after
``stop_grace_s``, and records the job ``Failed`` with the reason, :mod:`tfk8s.launcher.stopping`), prints one
line, keeps reading the steps' output until they have ended (closing their pipe early would fail the launch
step's own cleanup with ``BrokenPipeError``), then ends the run with exit status 128 + the signal (130 for
SIGINT, 143 for SIGTERM) and no traceback. What is still running after the grace, the replicas included, is
killed.

Plain Python (psutil for the process tree).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
LEFTOVER_GRACE_S = 5.0  # what outlives the steps (replicas a killed launch step left) gets SIGTERM, then SIGKILL


def _print(line: str) -> None:
    print(line, flush=True)


@dataclass
class Stopping:
    """A run's stop, once a signal came (:func:`stops_reach_children`).

    Attributes:
        signum: the signal (None: none came).
        done: set once every step process this run had when the signal came has ended (or was killed).
    """

    signum: int | None = None
    done: threading.Event = field(default_factory=threading.Event)


_CURRENT: Stopping | None = None


def interrupted() -> bool:
    """Whether the local run in progress got a stop signal (the steps' output is then no longer shown, and no
    new step starts: :class:`tfk8s.localrun.step_output.QuietSteps`)."""
    return _CURRENT is not None and _CURRENT.signum is not None


def _ignores(pid: int, signum: int) -> bool:
    """Whether process ``pid`` ignores ``signum`` (Linux ``/proc/<pid>/status`` ``SigIgn``; False if unknown)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return False
    return bool(mask >> (signum - 1) & 1)


def _stop_all(signum: int, steps: list, everything: list, grace_s: float, state: Stopping) -> None:
    """Wait for ``steps`` (told ``signum``) up to ``grace_s``; then SIGTERM, and SIGKILL after
    :data:`LEFTOVER_GRACE_S`, whatever of ``everything`` is still alive but ignores ``signum`` (the step server
    ignores SIGINT: it exits when the run closes its socket) ; then set ``state.done``."""
    import psutil

    try:
        _, alive = psutil.wait_procs(steps, timeout=grace_s)
        left = [p for p in everything if p not in steps or p in alive]
        left = [p for p in left if p.is_running() and not (p not in alive and _ignores(p.pid, signum))]
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        _, alive = psutil.wait_procs(left, timeout=LEFTOVER_GRACE_S)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
    finally:
        state.done.set()


LAUNCH_STEP = "launch-training"


def _step_of(processes: list) -> str | None:
    """The step a process of ``processes`` runs, from kfp.local's command line (``--function_to_execute <name>``,
    the component's function: ``launch_training`` -> ``launch-training``), when one says it; else None."""
    import psutil

    for p in processes:
        with contextlib.suppress(psutil.Error, OSError):
            argv = p.cmdline()
            if "--function_to_execute" in argv[:-1]:
                return argv[argv.index("--function_to_execute") + 1].replace("_", "-")
    return None


def stop_line(what: str, children: int, code: int, step: str | None) -> str:
    """The one line a stop prints: what came, how many child processes are stopped, and what the step running
    does about it (only the launch step has replicas to stop and a job to record)."""
    if step == LAUNCH_STEP:
        doing = " (the launch step stops its replicas and records the job)"
    elif step:
        doing = f" (the {step} step)"
    else:
        doing = ""
    return f"tfk8s: {what}: stopping {children} child processes{doing}; exiting with {code} once they have ended"


@contextmanager
def stops_reach_children(grace_s: float = 40.0, log_sink: Callable[[str], None] = _print,
                         current_step: Callable[[], str | None] | None = None) -> Iterator[Stopping]:
    """While inside, SIGTERM or SIGINT to this process is passed on to this run's step processes (its
    descendants in its own session, those that do not ignore the signal; the replicas, in sessions of their
    own, are stopped by the launch step), which get ``grace_s`` seconds to end; then whatever is left of this
    process's descendants at the signal (replicas included) is terminated, then killed. The body goes on reading
    the steps' output meanwhile; on the way out (a step failed because of the signal, or anything else) the
    context ends the process with exit status 128 + the signal once every step has ended.

    For ``pipelines/train.py --local``: ``kfp.local`` runs each step as a child process (or a child of the step
    server), and the launch step stops its replicas on either signal (:func:`tfk8s.launcher.local.run_local`),
    but only if the signal reaches it. ``grace_s`` must exceed the job's ``stop_grace_s``. A second signal is
    noted and ignored. Main thread only; elsewhere this does nothing. A SIGINT the process was started ignoring
    (in the background) stays ignored. ``current_step``: the step running now (``prepare-dataset``...), which the
    line names (else the one a child's kfp.local command line names, else none).

    Raises:
        SystemExit: ``128 + signum`` after a stop signal, once the steps have ended.
    """
    global _CURRENT
    state = Stopping()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    import psutil

    def handler(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if state.signum is not None:
            log_sink(f"tfk8s: got {name} again: already stopping, please wait")
            return
        state.signum = signum
        everything = psutil.Process().children(recursive=True)
        session = os.getsid(0)
        steps = []
        for p in everything:
            with contextlib.suppress(psutil.Error, OSError):
                if os.getsid(p.pid) == session and not _ignores(p.pid, signum):
                    steps.append(p)
        what = "interrupted (SIGINT)" if signum == signal.SIGINT else f"got {name}"
        step = None
        with contextlib.suppress(Exception):
            step = (current_step() if current_step is not None else None) or _step_of(steps)
        log_sink(stop_line(what, len(everything), 128 + signum, step))
        for p in steps:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signum)
        threading.Thread(target=_stop_all, args=(signum, steps, everything, grace_s, state), daemon=True,
                         name="tfk8s-stop").start()

    previous = {}
    for signum in STOP_SIGNALS:
        if signum == signal.SIGINT and signal.getsignal(signum) is signal.SIG_IGN:
            continue
        previous[signum] = signal.signal(signum, handler)
    _CURRENT = state
    try:
        yield state
    except BaseException:
        if state.signum is None:
            raise  # not ours: the run failed by itself
    finally:
        if state.signum is not None:
            state.done.wait()  # still our handlers: a further signal is noted, not obeyed
        for signum, old in previous.items():
            signal.signal(signum, old)
        _CURRENT = None
    if state.signum is not None:
        raise SystemExit(128 + state.signum)

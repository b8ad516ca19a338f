"""Stop signals sent to the test process itself (the launcher under test runs in pytest's main thread), at a
moment that does not depend on the machine's load.

A fixed timer ("SIGINT in 2 s") is a race on a loaded 2-core machine: fired before the launcher has installed
its handlers, SIGINT is a KeyboardInterrupt that ends the whole pytest session (exit 2) and SIGTERM kills it.
:func:`signal_when_started` waits instead until the stand-in replicas (tests/fakes/fake_replica.py) say they are
sleeping with their own handlers in place (``<pid dir>/<label>.ready``), which the local launcher's replicas
can only be once it is inside :func:`tfk8s.launcher.stopping.stop_signals`.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path


class SignalSender(threading.Thread):
    """The thread :func:`signal_when_started` starts. ``sent`` holds the ``time.monotonic()`` of each signal
    sent, in order; :meth:`cancel` stops it before any signal not yet sent (always call it in ``finally``)."""

    def __init__(self, pid_dir: Path, labels: list[str], plan: list[tuple[float, int]], timeout_s: float):
        super().__init__(name="signal-sender", daemon=True)
        self.pid_dir, self.labels, self.plan, self.timeout_s = Path(pid_dir), labels, plan, timeout_s
        self.sent: list[float] = []
        self._cancelled = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not all((self.pid_dir / f"{label}.ready").exists() for label in self.labels):
            if time.monotonic() > deadline or self._cancelled.wait(0.02):
                return  # never sent: the test's own assertions say what did not start
        start = time.monotonic()
        for delay_s, signum in self.plan:
            if self._cancelled.wait(max(0.0, start + delay_s - time.monotonic())):
                return
            self.sent.append(time.monotonic())
            os.kill(os.getpid(), signum)

    def cancel(self) -> None:
        self._cancelled.set()
        self.join(5)


def signal_when_started(pid_dir: Path, labels: list[str], plan: list[tuple[float, int]],
                        timeout_s: float = 60.0) -> SignalSender:
    """Send this process each ``(delay_s, signum)`` of ``plan``, ``delay_s`` seconds after every replica in
    ``labels`` is ready (``<pid_dir>/<label>.ready`` exists; the fake replica's ``FAKE_PIDFILE_DIR``). Sends
    nothing if they are not all ready within ``timeout_s`` seconds. Returns the started thread."""
    sender = SignalSender(pid_dir, labels, plan, timeout_s)
    sender.start()
    return sender

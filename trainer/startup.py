"""Where a replica's seconds go between its process's start and its first training step (issue 26): the
trainer's ``startup: ...`` line (:class:`StartupTimer`). Standard library only; tf-keras is imported by
:meth:`StartupTimer.callback` alone."""

from __future__ import annotations

import os
import time

_START = time.perf_counter()


def process_age_s() -> float:
    """Seconds since this process started (Linux: ``/proc/self/stat``'s start time against ``/proc/uptime``,
    10 ms resolution), so that the interpreter's own start and the imports before this module count; elsewhere
    since this module was imported (with trainer.task)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": field 22 is fields[19]
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - _START


_AGE_AT_START = process_age_s()  # the interpreter and the imports before this line


class StartupTimer:
    """Where a replica's seconds go between its process's start and its first training step, printed once as
    ``startup: first step S s after the process started: python and imports A s, tensorflow import B s, ...``
    (issue 26; ``bench/README.md`` tabulates it): each phase's seconds since the previous mark, the first
    phase since the process started (:func:`process_age_s`). The last one, ``fit set-up and first step``,
    ends when tf-keras reports the first batch (with ``--steps-per-execution`` N: the first N steps; under
    ParameterServerStrategy: the first step scheduled)."""

    def __init__(self) -> None:
        now = process_age_s()
        self.phases: list[tuple[str, float]] = [("python and imports", _AGE_AT_START),
                                                ("arguments and plan", now - _AGE_AT_START)]
        self._last = now

    def mark(self, phase: str) -> None:
        """End ``phase`` now."""
        now = process_age_s()
        self.phases.append((phase, now - self._last))
        self._last = now

    def line(self) -> str:
        """The ``startup: ...`` line of the phases so far."""
        total = sum(s for _, s in self.phases)
        return (f"startup: first step {total:.1f}s after the process started: "
                + ", ".join(f"{name} {s:.1f}s" for name, s in self.phases))

    def callback(self):
        """A tf-keras callback that ends the last phase at the first batch and prints :meth:`line` (its logs
        stay tensors: no per-step conversion)."""
        import tf_keras

        timer = self

        class _FirstStep(tf_keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self._supports_tf_logs = True
                self.done = False

            def on_train_batch_end(self, batch, logs=None):
                if not self.done:
                    self.done = True
                    timer.mark("fit set-up and first step")
                    print(timer.line(), flush=True)

        return _FirstStep()

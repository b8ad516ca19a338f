"""Stop signals for a step that can stop between two safe points (the prepare step, between two batches of
examples): :func:`stops_between_batches` turns SIGTERM and SIGINT into a request, :func:`stop_if_asked` acts on
it. Plain Python."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

_STOP: dict[str, int | None] = {"signum": None}  # the stop signal that came (stops_between_batches)


@contextlib.contextmanager
def stops_between_batches() -> Iterator[None]:
    """While inside (or in the function it decorates), SIGTERM and SIGINT (Ctrl-C) ask the step to stop instead
    of ending the process where it is: :func:`tfk8s.steps.prepare_dataset.prepare_dataset` stops after the batch
    it is writing (1,024 examples, a fraction of a second) and raises :class:`tfk8s.core.errors.StepStoppedError`;
    the data store's staging folder (its unfinished shards) is removed and its lock released
    (:func:`tfk8s.core.data_store.prepare`), so nothing half-written is left for the next run. Before, SIGTERM
    ended the step at once and left the staging folder behind, and a step running as a container's first
    process (which the kernel spares the default action of SIGTERM) went on until the SIGKILL.

    Main thread only (elsewhere nothing changes); a SIGINT the process was started ignoring stays ignored; the
    previous handlers come back on the way out. A stop that comes while the step waits for another run's
    preparation of the same data is acted on when that wait ends.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        _STOP["signum"] = signum

    previous = {}
    for signum in (signal.SIGTERM, signal.SIGINT):
        if signum == signal.SIGINT and signal.getsignal(signum) is signal.SIG_IGN:
            continue
        previous[signum] = signal.signal(signum, handler)
    _STOP["signum"] = None
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
        _STOP["signum"] = None


def stop_if_asked(where: str) -> None:
    """Raise :class:`tfk8s.core.errors.StepStoppedError` if a stop signal came (:func:`stops_between_batches`),
    saying that the prepare step stopped ``where`` (e.g. ``"writing the train split (12,288 examples written)"``).

    Raises:
        tfk8s.core.errors.StepStoppedError: with the signal as its ``signum``.
    """
    signum = _STOP["signum"]
    if signum is not None:
        from tfk8s.core.errors import StepStoppedError, stop_cause

        raise StepStoppedError(f"the prepare step {stop_cause(signum)} and stopped {where}; nothing was published "
                               "(the unfinished preparation was discarded): the next run prepares the data again",
                               signum)

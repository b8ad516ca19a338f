"""SIGTERM to a local pipeline run reaches every step it started, so nothing is left running.

Plain Python (psutil for the process tree).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def _print(line: str) -> None:
    print(line, flush=True)


@contextmanager
def sigterm_reaches_children(grace_s: float = 30.0, log_sink: Callable[[str], None] = _print) -> Iterator[None]:
    """While inside, SIGTERM to this process is forwarded to all its descendant processes, which get
    ``grace_s`` seconds to exit (then SIGKILL); then this process exits with status 143 (128 + SIGTERM).

    For ``pipelines/train.py --local``: ``kfp.local`` runs each step as a child process, and the launch step
    stops its replicas on SIGTERM (:func:`tfk8s.launcher.local.run_local`), but only if the signal reaches it. Main thread only;
    elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    import psutil

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        children = psutil.Process().children(recursive=True)
        log_sink(f"got SIGTERM: stopping {len(children)} child processes (the launch step stops its replicas)")
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.terminate()
        _, alive = psutil.wait_procs(children, timeout=grace_s)
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()
        raise SystemExit(128 + signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

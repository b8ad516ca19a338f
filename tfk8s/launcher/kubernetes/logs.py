"""Stream a replica pod's container log into the launcher's output, ``[worker-1] <line>``, keeping its tail.

One daemon thread per pod follows the log (``kubectl logs -f``) from when its container starts until it
ends; the last lines and the exception are kept for the error message should the replica fail
(:class:`tfk8s.core.diagnosis.LogTail`). :meth:`LogStream.drain` waits
for a finished container's stream to end, so that every line is captured before the pod is deleted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tfk8s.core.diagnosis import LogTail
from tfk8s.launcher.kubernetes.api import close_stream, iter_lines

LogSink = Callable[[str], None]


class LogStream:
    """Follow one pod's log in a daemon thread.

    Args:
        label: the replica's display name (``worker-1``), the prefix of every line.
        pod: the pod's name.
        open_fn: ``open_fn() -> streamed response`` of the followed log.
        sink: receives ``[<label>] <line>`` (must be thread-safe).
        tail_lines: how many of the last lines to keep.
    """

    def __init__(self, label: str, pod: str, open_fn: Callable[[], Any], sink: LogSink, tail_lines: int = 30):
        self.label, self.pod = label, pod
        self.tail = LogTail(tail_lines)
        self.error: str = ""
        self._open, self._sink = open_fn, sink
        self._resp: Any = None
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"log-{label}", daemon=True)

    def start(self) -> None:
        """Start following the pod's container log in a daemon thread."""
        self._thread.start()

    def _run(self) -> None:
        try:
            resp = self._open()
            with self._lock:
                if self._stopped.is_set():
                    close_stream(resp)
                    return
                self._resp = resp
            for line in iter_lines(resp):
                self.tail.append(line)
                self._sink(f"[{self.label}] {line}")
        except Exception as e:  # noqa: BLE001 - a lost log stream must not fail the training job
            if not self._stopped.is_set():
                self.error = f"{type(e).__name__}: {e}"
                self._sink(f"[launcher] log stream of {self.label} (pod {self.pod}) ended early: {self.error}")
        finally:
            with self._lock:
                if self._resp is not None:
                    close_stream(self._resp)
                    self._resp = None

    def drain(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for the stream to end by itself (the container finished).

        Returns:
            True if it ended (every line is in :attr:`tail` and was sent to the sink).
        """
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Close the stream and wait briefly for the thread to end."""
        self._stopped.set()
        with self._lock:
            if self._resp is not None:
                close_stream(self._resp)
        if self._thread.is_alive():
            self._thread.join(timeout_s)

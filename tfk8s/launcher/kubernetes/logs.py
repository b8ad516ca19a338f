"""Stream a replica pod's container log into the launcher's output, ``[worker-1] <line>``, keeping its tail.

A :class:`LogStream` reads one pod's log, either followed live (``kubectl logs -f``) in a daemon thread of its
own from when its container starts until it ends, or read once, whole, by one of a bounded pool of reader
threads (:class:`LogReaders`) when the replica has ended (or is about to be deleted). Which replicas are
followed live is the backend's choice (:func:`tfk8s.launcher.kubernetes.failures.follow_log`: the coordinator
and at most :data:`LIVE_LOGS` replicas; the others are read at their end): a thread and a TLS connection per
replica for as long as it runs, a thousand at 1,024 replicas, is what that bounds. The last lines and the
exception are kept for the error message should the replica fail (:class:`tfk8s.core.diagnosis.LogTail`).
:meth:`LogStream.drain` waits for a stream to end, so that every line is captured before the pod is deleted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tfk8s.core.diagnosis import LogTail
from tfk8s.launcher.kubernetes.api import close_stream, iter_lines

LogSink = Callable[[str], None]
LIVE_LOGS = 16  # replicas whose logs are followed live at once, besides the coordinator (chief, else worker 0)
LOG_READERS = 8  # concurrent reads of ended replicas' logs (each one request, its log whole)
LOG_READ_S = 60.0  # at most this long (besides log_wait_s) for the reads before pods are deleted (restart, cleanup)


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
        self._done = threading.Event()
        self._running = False  # _run began (a read queued in the pool has not)
        self._lock = threading.Lock()
        self.live = False  # followed in a thread of its own (False: read by a pool's thread)

    def start(self, readers: LogReaders | None = None) -> None:
        """Start reading the log: in a daemon thread of its own (followed live), or by one of ``readers``'
        threads (queued behind the reads already there)."""
        if readers is None:
            self.live = True
            threading.Thread(target=self._run, name=f"log-{self.label}", daemon=True).start()
        else:
            readers.submit(self._run)

    @property
    def done(self) -> bool:
        """The stream ended (every line was sent to the sink), or was stopped."""
        return self._done.is_set()

    def _run(self) -> None:
        try:
            with self._lock:
                if self._stopped.is_set():
                    return
                self._running = True
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
            self._done.set()

    def drain(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for the stream to end by itself (the container finished).

        Returns:
            True if it ended (every line is in :attr:`tail` and was sent to the sink).
        """
        return self._done.wait(max(0.0, timeout_s))

    def stop(self, timeout_s: float = 2.0) -> None:
        """Close the stream and wait briefly for the thread to end."""
        self._stopped.set()
        with self._lock:
            if self._resp is not None:
                close_stream(self._resp)
            if not self._running:  # still queued: it will not read
                self._done.set()
        self._done.wait(timeout_s)


class LogReaders:
    """A bounded pool of threads reading ended replicas' logs (:data:`LOG_READERS` at once), started on the
    first read and shut down by :meth:`close`."""

    def __init__(self, workers: int = LOG_READERS):
        if workers < 1:
            raise ValueError(f"LogReaders: workers={workers} must be at least 1")
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on one of the pool's threads (after the reads queued before it)."""
        with self._lock:
            if self._closed:  # after the cleanup (should not happen): a thread of its own
                threading.Thread(target=fn, name="log-read", daemon=True).start()
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="log-read")
            self._pool.submit(fn)

    def close(self) -> None:
        """Let the queued reads end by themselves (their streams are stopped by the caller) and free the
        threads; does not wait."""
        with self._lock:
            self._closed = True
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=False)

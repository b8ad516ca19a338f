"""Watch one kind of object of a training job (pods or Jobs, by label selector) from a background thread.

List once, then watch from the list's ``resourceVersion``, resuming every watch from the last
``resourceVersion`` seen (events and bookmarks); on ``410 Gone`` (the version was compacted away: an HTTP 410
or an ``ERROR`` event with code 410) list again and resume from there. This is the client-go reflector's
list-then-watch contract; there is no per-object polling.

Events go to a queue the launcher's main loop reads: :class:`Synced` after each list (the full current set),
:class:`Changed` for each watch event, :class:`WatchFailed` when the API keeps failing.

A failed request (an API server restarting, a broken stream) is retried with capped exponential back-off
(``retry_s`` doubling up to ``max_retry_s``), like client-go's reflector. Any successful list and any event
received is progress and resets the back-off; the watcher gives up (:class:`WatchFailed`) only after
``give_up_s`` seconds without progress, or at once on ``401``/``403`` (credentials or RBAC: retrying cannot help).
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tfk8s.launcher.kubernetes.api import close_stream, iter_lines, slim
from tfk8s.launcher.kubernetes.errors import KubernetesApiError

GONE = 410
FATAL = frozenset({401, 403})  # unauthorized / forbidden: give up at once


@dataclass(frozen=True)
class Synced:
    """A fresh listing: ``items`` is every object of ``kind`` that exists now."""

    kind: str
    items: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Changed:
    """One watch event: ``type`` is ``ADDED``, ``MODIFIED`` or ``DELETED``."""

    kind: str
    type: str
    obj: dict[str, Any]


@dataclass(frozen=True)
class WatchFailed:
    """The watch gave up after repeated API errors; ``error`` says why."""

    kind: str
    error: KubernetesApiError


WatchItem = Synced | Changed | WatchFailed


class _Gone(Exception):
    pass


class Watcher:
    """List-then-watch one kind of object in a daemon thread, feeding ``out``.

    Args:
        kind: ``"pods"`` or ``"jobs"`` (tags every item).
        list_fn: ``list_fn() -> list response dict`` (``items`` and ``metadata.resourceVersion``).
        watch_fn: ``watch_fn(resource_version, timeout_s) -> streamed response``.
        out: where items go.
        timeout_s: server-side timeout of each watch request (seconds); the watch then resumes.
        retry_s: first wait before retrying after an error; it doubles with each further error.
        max_retry_s: the longest wait between retries.
        give_up_s: seconds without progress (a successful list or an event received) after which a failing
            API is reported as :class:`WatchFailed`; 401 and 403 are reported at once.
        clock: monotonic seconds.
    """

    def __init__(self, kind: str, list_fn: Callable[[], dict[str, Any]],
                 watch_fn: Callable[[str, int], Any], out: queue.Queue[WatchItem], *, timeout_s: int = 300,
                 retry_s: float = 1.0, max_retry_s: float = 30.0, give_up_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic):
        self.kind, self._list, self._watch, self._out = kind, list_fn, watch_fn, out
        self._timeout_s, self._retry_s, self._max_retry_s, self._give_up_s = timeout_s, retry_s, max_retry_s, give_up_s
        self._clock = clock
        self._progress_at = clock()  # the last successful list or event received
        self._failing_since = self._progress_at  # the last failed request
        self._stop = threading.Event()
        self._resp: Any = None
        self._lock = threading.Lock()
        self.relists = 0
        self._thread = threading.Thread(target=self._run, name=f"watch-{kind}", daemon=True)

    def start(self) -> None:
        """Start the list-then-watch loop in a daemon thread; events go to the queue."""
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop watching: close the open stream (unblocking the thread) and wait for the thread to end."""
        self._stop.set()
        with self._lock:
            if self._resp is not None:
                close_stream(self._resp)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        rv: str | None = None
        errors = 0
        while not self._stop.is_set():
            try:
                if rv is None:
                    listing = self._list()
                    self.relists += 1
                    self._progress_at = self._clock()
                    rv = str((listing.get("metadata") or {}).get("resourceVersion") or "")
                    self._out.put(Synced(self.kind, tuple(listing.get("items") or ())))
                rv = self._watch_once(rv)
                self._progress_at = self._clock()  # the server ended the watch cleanly
                errors = 0
            except _Gone:
                rv = None  # compacted: list again, then watch from the new version
            except Exception as e:  # noqa: BLE001 - an API error or a broken stream: retry, report if it persists
                if self._stop.is_set():
                    return
                if isinstance(e, KubernetesApiError) and e.status == GONE:
                    rv = None
                    continue
                if isinstance(e, KubernetesApiError) and e.status in FATAL:
                    self._out.put(WatchFailed(self.kind, e))
                    return
                if self._progress_at > self._failing_since:
                    errors = 0  # the failed request had made progress (events, a list) before it broke
                errors += 1
                self._failing_since = self._clock()
                down_s = self._failing_since - self._progress_at
                if down_s >= self._give_up_s:
                    error = e if isinstance(e, KubernetesApiError) else KubernetesApiError(
                        f"watching {self.kind} failed: {type(e).__name__}: {e}")
                    self._out.put(WatchFailed(self.kind, KubernetesApiError(
                        f"{error} (no progress for {down_s:.0f}s, {errors} failed requests in a row); check the "
                        f"API server's health, then rerun the step", error.status)))
                    return
                self._stop.wait(min(self._retry_s * 2 ** (errors - 1), self._max_retry_s))

    def _watch_once(self, rv: str) -> str:
        """One watch request from ``rv`` until the server ends it; returns the last resourceVersion seen."""
        resp = self._watch(rv, self._timeout_s)
        with self._lock:
            self._resp = resp
            if self._stop.is_set():
                close_stream(resp)
                return rv
        try:
            for line in iter_lines(resp):
                if not line.strip():
                    continue
                event = json.loads(line)
                etype, obj = event.get("type"), event.get("object") or {}
                if etype == "ERROR":
                    if obj.get("code") == GONE:
                        raise _Gone()
                    raise KubernetesApiError(f"watching {self.kind} failed: {obj.get('code')} "
                                             f"{obj.get('reason')}: {obj.get('message')}", int(obj.get("code") or 0))
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                self._progress_at = self._clock()
                if etype in ("ADDED", "MODIFIED", "DELETED"):
                    self._out.put(Changed(self.kind, etype, slim(obj)))  # queued and kept without what is unread
                # BOOKMARK: only the resourceVersion moves on
        finally:
            with self._lock:
                self._resp = None
            close_stream(resp)
        return rv


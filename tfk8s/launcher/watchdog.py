"""The progress watchdog both backends run: a replica whose progress file stops advancing counts as hung.

Every replica may write ``<train dir>/progress/<type>-<index>.json`` (:mod:`tfk8s.core.progress`; the built-in
trainer and ``tfk8s.runtime`` do). The launcher reads it on the shared volume (the local folder, or the PVC it
mounts at the same path) and remembers, by its *own* monotonic clock, when the file's ``time`` last changed,
so clock skew between nodes does not matter. A replica is hung when it has reported at least once in its
current attempt and then nothing new came for ``progress_timeout_s`` seconds; a file left by an earlier
attempt (or an earlier run) does not count, a replica in state ``done`` is not watched (it is saving and
about to exit), and a program that never reports is never treated as hung. What the launcher then does is
the policy's (:mod:`tfk8s.core.policy`): stop it, recreate its restart group while the budget lasts, else
fail naming the replica, ``no progress for N s`` and its last log lines.

The start-up deadline (``startup_timeout_s``, chief and workers only): a replica that has said it is
``starting`` (the built-in trainer and ``tfk8s.runtime.strategy()`` write that heartbeat before they wait for
their peers and build the strategy) and has not reported a step (any other state) ``startup_timeout_s`` seconds
after its first report of this attempt is hung too, heartbeats or not: a cluster that never forms (a proxy in
the way of the replicas' gRPC, tfk8s.core.proxy) fails in minutes, not at the job deadline. Counted from the
first report, not from the attempt's start, so pulling an image or waiting to be scheduled never counts; a
program that writes no progress file at all is not watched.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from tfk8s.core.progress import Progress, progress_file, read_progress


class ProgressWatch:
    """One replica's progress file, watched across its attempts.

    Args:
        path: the replica's progress file (None: nothing to watch).
        timeout_s: seconds without a new report that make it hung (0: never).
        clock: monotonic seconds (tests may pass their own).
        startup_timeout_s: seconds from its first report to its first step (a state other than ``starting``)
            that make it hung (0: never).
    """

    def __init__(self, path: str | Path | None, timeout_s: float, clock=time.monotonic,
                 startup_timeout_s: float = 0):
        self.path = Path(path) if path else None
        self.timeout_s = float(timeout_s or 0)
        self.startup_timeout_s = float(startup_timeout_s or 0)
        self._clock = clock
        self.last: Progress | None = None
        self._seen_time: float | None = None
        self._advanced_at: float | None = None
        self._first_at: float | None = None  # when this attempt's first report was seen
        self._stepped = False  # this attempt has reported a state other than "starting"
        self.stall = ""  # "progress" or "startup": what made the last poll() say hung
        self.new_attempt()

    @classmethod
    def for_replica(cls, train_dir: str, label: str, timeout_s: float, clock=time.monotonic,
                    startup_timeout_s: float = 0) -> ProgressWatch:
        """The watch of replica ``label``'s file under ``train_dir`` (none when ``train_dir`` is empty)."""
        return cls(progress_file(train_dir, label) if train_dir else None, timeout_s, clock, startup_timeout_s)

    @property
    def enabled(self) -> bool:
        return self.path is not None and (self.timeout_s > 0 or self.startup_timeout_s > 0)

    def new_attempt(self) -> None:
        """A new attempt starts: what the file holds now belongs to the previous one (or an earlier run)."""
        old = read_progress(self.path) if self.enabled else None
        self._seen_time = old.time if old else None
        self._advanced_at = self._first_at = None
        self._stepped = False
        self.last = None

    def poll(self) -> float | None:
        """Read the file; returns the seconds without progress (or since the first report, for the start-up
        deadline; :attr:`stall` says which) when the replica counts as hung, else None."""
        if not self.enabled:
            return None
        now = self._clock()
        p = read_progress(self.path)
        if p is not None and p.time != self._seen_time:
            self._seen_time, self._advanced_at, self.last = p.time, now, p
            self._first_at = now if self._first_at is None else self._first_at
            self._stepped = self._stepped or p.state != "starting"
        if self._advanced_at is None or (self.last is not None and self.last.state == "done"):
            return None
        if self.startup_timeout_s and not self._stepped and self._first_at is not None:
            starting = now - self._first_at
            if starting >= self.startup_timeout_s:
                self.stall = "startup"
                return starting
        stalled = now - self._advanced_at
        if self.timeout_s and stalled >= self.timeout_s:
            self.stall = "progress"
            return stalled
        return None

    @property
    def stepped(self) -> bool:
        """This attempt has reported a state other than ``starting`` (its first step, or later)."""
        return self._stepped

    def deadline(self) -> float | None:
        """Monotonic time at which the replica would count as hung if nothing new comes (None: not watched)."""
        if not self.enabled or self._advanced_at is None:
            return None
        times = [self._advanced_at + self.timeout_s] if self.timeout_s else []
        if self.startup_timeout_s and not self._stepped and self._first_at is not None:
            times.append(self._first_at + self.startup_timeout_s)
        return min(times) if times else None

    def describe(self, stalled_s: float) -> str:
        """``no progress for 612 s (last report: epoch 2/4, step 130/468 at 10:02:11 UTC)``, or for the start-up
        deadline ``no first step 301 s after it said it was starting (...)``."""
        parts = []
        p = self.last
        if p is not None:
            if p.epoch is not None:
                parts.append(f"epoch {p.epoch}" + (f"/{p.epochs}" if p.epochs else ""))
            if p.step is not None:
                parts.append(f"step {p.step}" + (f"/{p.steps}" if p.steps else ""))
            if p.state != "running":
                parts.append(f"state {p.state}")
            at = datetime.fromtimestamp(p.time, UTC).strftime("%H:%M:%S UTC")
            last = f" (last report: {', '.join(parts) + ' ' if parts else ''}at {at})"
        else:
            last = ""
        if self.stall == "startup":
            return (f"no first step {stalled_s:.0f} s after it said it was starting{last}, startup_timeout_s="
                    f"{self.startup_timeout_s:g}: the cluster never formed (a peer unreachable over gRPC: a proxy in "
                    f"the environment? tfk8s sets NO_PROXY for the job's hosts; a firewall or NetworkPolicy), or "
                    f"the first step takes longer: raise startup_timeout_s (0 disables)")
        return (f"no progress for {stalled_s:.0f} s{last}, progress_timeout_s={self.timeout_s:g}: a hung collective, "
                f"input read or peer; raise progress_timeout_s if a step can legitimately take longer (0 disables)")

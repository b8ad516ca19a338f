"""``tfk8s logs JOB [REPLICA] [-f]``: a replica's whole log, every attempt (every replica's, ``[label]``-prefixed,
without one): from the volume's ``replica-logs/`` (there after the pods are gone), else from the live pod."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfk8s.cmd.context import EXIT_OK, POLL_S, Context, CtlError
from tfk8s.core.layout import TrainLayout
from tfk8s.launcher.backends import backend_for
from tfk8s.tracking import records


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``logs`` and its flags to the command's subparsers."""
    p = sub.add_parser("logs", parents=[common], help="a replica's whole log")
    p.add_argument("job")
    p.add_argument("replica", nargs="?", default="", help="e.g. worker-1 (default: every replica, prefixed)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")

@dataclass
class Options:
    """``tfk8s logs``'s options: the job, a replica label (``""``: every replica) and ``follow``."""

    job: str
    replica: str = ""
    follow: bool = False

    @classmethod
    def complete(cls, args: argparse.Namespace) -> Options:
        """The options from the parsed flags."""
        return cls(args.job, args.replica, args.follow)

    def validate(self) -> None:
        """Nothing to check beyond the flags' choices."""

    def run(self, ctx: Context) -> int:
        """Print a replica's log (every replica's, ``[label]``-prefixed, without one): from the volume's
        ``replica-logs/`` (complete, every attempt, there after the pods are gone), else from the live pod;
        ``follow``: keep printing until the job ends."""
        r = ctx.find(self.job)
        labels = list((r.get("replica_states") or {}).keys())
        if self.replica and self.replica not in labels:
            raise CtlError(f"job {self.job} has no replica {self.replica!r}; its replicas: {', '.join(labels)}")
        chosen = [self.replica] if self.replica else labels
        log_dir = Path((r.get("paths") or {}).get("replica_logs") or "/nonexistent")
        files = {label: TrainLayout(log_dir.parent).replica_log(label) for label in chosen}
        on_volume = [label for label, f in files.items() if f.is_file()]
        # the live pods when the volume has no log yet; but following every replica, the volume is followed: the
        # launcher keeps their logs there line by line, while a pod's log read now ends with what it has (a
        # follower started as the job starts printed nothing and exited)
        if not on_volume and (not self.follow or len(chosen) == 1) and _from_replicas(ctx, r, chosen, self.follow):
            return EXIT_OK
        if not on_volume and not self.follow:
            ctx.warn(f"no log of {', '.join(chosen)} under {log_dir} yet")
            return EXIT_OK
        prefix = len(chosen) > 1
        offsets = dict.fromkeys(chosen, 0)
        quiet_since: float | None = None
        while True:
            wrote = False
            for label in chosen:
                f = files[label]
                if not f.is_file():
                    continue
                with open(f, encoding="utf-8", errors="replace") as fh:
                    fh.seek(offsets[label])
                    data = fh.read()
                    if self.follow:  # only whole lines while following
                        data = data[: data.rfind("\n") + 1]
                    offsets[label] += len(data.encode("utf-8"))
                for line in data.splitlines():
                    ctx.say(f"[{label}] {line}" if prefix else line)
                    wrote = True
            if not self.follow:
                return EXIT_OK
            record = ctx.find(self.job)
            if records.effective_state(record) in records.TERMINAL_STATES and not wrote:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 1.0:
                    return EXIT_OK
            time.sleep(POLL_S)



def _from_replicas(ctx: Context, r: dict[str, Any], labels: list[str], follow: bool) -> bool:
    """Every chosen replica's log from where it runs (the volume has none yet), as its backend reads it
    (:meth:`tfk8s.launcher.backends.Inspection.logs`; Kubernetes: the live pods). False when the backend has no
    such place (local) or the job no replicas there."""
    backend = backend_for(r)
    if not r.get("pods"):
        return False
    try:
        return backend.logs(r, labels, ctx.api_for(r), follow=follow, say=ctx.say, warn=ctx.warn)
    except ValueError as e:  # the cluster cannot be asked
        raise CtlError(str(e)) from None

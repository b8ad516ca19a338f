"""``tfk8s delete JOB``: stop a running job, as the backend that runs it stops one
(:meth:`tfk8s.launcher.backends.Inspection.stop`; local: SIGTERM to its launcher, which stops every replica;
Kubernetes: delete its objects, the launcher's own cleanup). Its files stay on the volume."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

from tfk8s.cmd.context import EXIT_OK, POLL_S, Context, CtlError
from tfk8s.core.layout import TrainLayout
from tfk8s.launcher.backends import backend_for
from tfk8s.tracking import records


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``delete`` and its flags to the command's subparsers."""
    p = sub.add_parser("delete", parents=[common], help="stop a running job")
    p.add_argument("job")

@dataclass
class Options:
    """``tfk8s delete``'s options: the job, and how long to wait for its launcher to record the end."""

    job: str
    wait_s: float = 60.0

    @classmethod
    def complete(cls, args: argparse.Namespace) -> Options:
        """The options from the parsed flags."""
        return cls(args.job)

    def validate(self) -> None:
        """Nothing to check beyond the flags' choices."""

    def run(self, ctx: Context) -> int:
        """Stop a running job: local, SIGTERM to its launcher (which stops every replica); Kubernetes, delete its
        Jobs, Services, pods, NetworkPolicy and PodGroup. Its files stay on the volume. A finished job is left as it is."""
        r = ctx.find(self.job)
        state = records.effective_state(r)
        if state in records.TERMINAL_STATES:
            ctx.say(f"{r['name']} already ended ({state}); nothing to stop (its files stay under "
                     f"{(r.get('paths') or {}).get('train_dir', ctx.volume)})")
            return EXIT_OK
        try:  # local: SIGTERM to its launcher; Kubernetes: its Jobs, Services, pods, NetworkPolicy, PodGroup
            backend_for(r).stop(r, ctx.api_for(r))
        except ValueError as e:  # on another host, or the cluster cannot be reached
            raise CtlError(str(e)) from None
        deadline = time.monotonic() + self.wait_s
        while time.monotonic() < deadline:
            try:
                if records.effective_state(ctx.find(self.job)) in records.TERMINAL_STATES:
                    break
            except CtlError:  # known only to the cluster, and gone from it now
                break
            time.sleep(POLL_S)
        record_file = TrainLayout((r.get("paths") or {}).get("train_dir", "")).record
        latest = records.read_record(record_file) if record_file.is_file() else None
        if latest is not None and records.effective_state(latest) in ("Running", "Lost", "Stopped"):
            # the launcher recorded the SIGTERM this sent as Stopped: it was this delete
            latest.update(state="Deleted", message="deleted with tfk8s delete", finished=latest.get("finished")
                          or time.time())
            records.write_record(record_file, latest)
        ctx.say(f"{r['name']} deleted")
        return EXIT_OK


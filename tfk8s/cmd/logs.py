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
        if not on_volume and r.get("backend") == "kubernetes" and r.get("pods"):
            return _pod_logs(ctx, r, chosen, self.follow)
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



def _pod_logs(ctx: Context, r: dict[str, Any], labels: list[str], follow: bool) -> int:
    """Every chosen replica's log from its live pod (the volume has none yet). A pod whose container has not
    started (pulling its image, or failing to) has no log: a real kubelet answers 400 ``container ... is waiting
    to start: ...``; that replica is said so on stderr and the others are still printed."""
    from tfk8s.launcher.kubernetes.api import close_stream, iter_lines
    from tfk8s.launcher.kubernetes.errors import KubernetesApiError
    from tfk8s.launcher.kubernetes.objects import CONTAINER_NAME

    api = ctx.api(r.get("namespace") or ctx.namespace)
    if api is None:
        raise CtlError(f"the volume holds no log of {r['name']} and the cluster cannot be asked")
    prefix = len(labels) > 1
    for label in labels:
        pod = (r.get("pods") or {}).get(label)
        if not pod:
            ctx.warn(f"{label} has no pod")
            continue
        try:
            if follow and len(labels) == 1:
                resp = api.open_log(pod, CONTAINER_NAME)
                try:
                    for line in iter_lines(resp):
                        ctx.say(line)
                finally:
                    close_stream(resp)
            else:
                for line in api.read_log_tail(pod, CONTAINER_NAME, 10**6):
                    ctx.say(f"[{label}] {line}" if prefix else line)
        except KubernetesApiError as e:
            if e.status != 400:
                raise
            ctx.warn(f"{label} has no log yet (pod {pod}): {str(e).split(': 400 ', 1)[-1]}")
    return EXIT_OK


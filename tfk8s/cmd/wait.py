"""``tfk8s wait JOB [--timeout S]``: wait until a job ends; the exit code is its outcome (kubectl wait's habit)."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

from tfk8s.cmd.context import EXIT_FAILED, EXIT_OK, EXIT_STOPPED, EXIT_TIMEOUT, POLL_S, Context, CtlError
from tfk8s.tracking import records


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``wait`` and its flags to the command's subparsers."""
    p = sub.add_parser("wait", parents=[common], help="wait until a job ends (exit code: its outcome)")
    p.add_argument("job")
    p.add_argument("--timeout", type=float, default=0.0, help="give up after this many seconds (0: never)")

@dataclass
class Options:
    """``tfk8s wait``'s options: the job and ``timeout_s`` (None: wait for ever)."""

    job: str
    timeout_s: float | None = None

    @classmethod
    def complete(cls, args: argparse.Namespace) -> Options:
        """The options from the parsed flags."""
        return cls(args.job, args.timeout or None)

    def validate(self) -> None:
        """The timeout must not be negative.

        Raises:
            CtlError: a negative ``--timeout``.
        """
        if self.timeout_s is not None and self.timeout_s < 0:
            raise CtlError(f"--timeout must be >= 0 seconds (0: never), got {self.timeout_s:g}")

    def run(self, ctx: Context) -> int:
        """Wait until the job ends; exit 0 when it succeeded, 1 when it failed (or was lost), 5 when someone
        stopped it (``Stopped``: Ctrl-C, a cancelled run, an evicted launcher; ``Deleted``: ``tfk8s delete``), 3
        when ``self.timeout_s`` passed first."""
        deadline = time.monotonic() + self.timeout_s if self.timeout_s else None
        while True:
            r = ctx.find(self.job)
            state = records.effective_state(r)
            if state in records.TERMINAL_STATES:
                detail = f": {r['message']}" if r.get("message") else ""
                ctx.say(f"{r['name']} {state}{detail}")
                if state == "Succeeded":
                    return EXIT_OK
                return EXIT_STOPPED if state in records.STOPPED_STATES else EXIT_FAILED
            if deadline is not None and time.monotonic() >= deadline:
                ctx.warn(f"timed out after {self.timeout_s:g}s waiting for {r['name']} (still {state})")
                return EXIT_TIMEOUT
            time.sleep(POLL_S)


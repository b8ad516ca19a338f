"""``tfk8s report RUN``: write a run's HTML report again (curves, confusion matrix, throughput, restarts)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfk8s.cmd.context import EXIT_OK, Context
from tfk8s.core.layout import TRAIN_DIR, VolumeLayout


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``report`` and its flags to the command's subparsers."""
    p = sub.add_parser("report", parents=[common], help="write a run's HTML report")
    p.add_argument("run", help="run id, job name, or run folder (<volume>/runs/<run id>)")
    p.add_argument("--output", default="", help="where to write it (default: <run dir>/report.html)")

@dataclass
class Options:
    """``tfk8s report``'s options: the run (id, job name or folder) and where to write (``""``: the run's)."""

    run_id: str
    output: str = ""

    @classmethod
    def complete(cls, args: argparse.Namespace) -> Options:
        """The options from the parsed flags."""
        return cls(args.run, args.output)

    def validate(self) -> None:
        """Nothing to check beyond the flags' choices."""

    def run(self, ctx: Context) -> int:
        """Write the run's HTML report (``<run dir>/report.html``, or ``output``) and print its path."""
        from tfk8s.steps.report import write_run_report

        run_dir = Path(self.run_id)
        if not (run_dir / TRAIN_DIR).is_dir():
            candidate = VolumeLayout(ctx.volume).run(self.run_id).run_dir
            if (candidate / TRAIN_DIR).is_dir():
                run_dir = candidate
            else:
                record = ctx.find(self.run_id)
                run_dir = Path(record["paths"]["train_dir"]).parent
        path = write_run_report(run_dir, self.output or None)
        ctx.say(str(path))
        return EXIT_OK


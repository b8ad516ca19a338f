"""``tfk8s run ARGS...``: ``python pipelines/train.py --local ARGS`` of the source checkout this package lives in."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfk8s.cmd.context import Context, CtlError

SCRIPT = Path(__file__).resolve().parents[2] / "pipelines" / "train.py"


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``run`` (every argument after it goes to ``pipelines/train.py --local``)."""
    p = sub.add_parser("run", help="python pipelines/train.py --local ARGS...", add_help=False)
    p.add_argument("args", nargs=argparse.REMAINDER)


@dataclass
class Options:
    """``tfk8s run``'s options: the arguments for ``pipelines/train.py --local``."""

    args: list[str] = field(default_factory=list)

    @classmethod
    def complete(cls, args: argparse.Namespace) -> Options:
        """The options from the parsed flags."""
        return cls(list(args.args))

    def validate(self) -> None:
        """The source checkout must be there.

        Raises:
            CtlError: no ``pipelines/train.py`` beside this package (an installed wheel, not a checkout).
        """
        if not SCRIPT.is_file():
            raise CtlError(f"tfk8s run needs the source checkout (no {SCRIPT}); use python pipelines/train.py "
                           f"--local")

    def run(self, ctx: Context | None = None) -> int:
        """Run the pipeline locally; returns its exit code (130 after Ctrl-C, 143 after SIGTERM).

        SIGTERM and SIGINT are passed on to it, which stops its steps and replicas (:mod:`tfk8s.localrun.signals`)
        rather than this process ending first: a Ctrl-C the terminal already sent to it is not sent twice."""
        proc = subprocess.Popen([sys.executable, str(SCRIPT), "--local", *self.args])

        def forward(signum: int, frame: object) -> None:
            if signum == signal.SIGINT and _in_foreground(proc.pid):
                return  # the terminal sent it to the pipeline's process group too
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)

        previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            code = proc.wait()
            return 128 - code if code < 0 else code  # killed by a signal: the shell's 128 + signal
        finally:
            for s, old in previous.items():
                signal.signal(s, old)


def _in_foreground(pid: int) -> bool:
    """Whether ``pid`` is in the foreground process group of this process's terminal (False without one)."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgid(pid)
    except (OSError, ValueError):
        return False

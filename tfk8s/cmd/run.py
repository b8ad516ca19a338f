"""``tfk8s run ARGS...``: ``python pipelines/train.py --local ARGS`` of the source checkout this package lives in."""

from __future__ import annotations

import argparse
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
        """Run the pipeline locally; returns its exit code."""
        return subprocess.call([sys.executable, str(SCRIPT), "--local", *self.args])

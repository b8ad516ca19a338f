"""A step's CLI result as one file per field, so an orchestrator without KFP artifacts can read it.

Each component's CLI (``python -m components.<name>``) prints its result as JSON; with ``--results-dir DIR`` it
also writes every top-level field to ``DIR/<field>``. The Argo export (:mod:`tfk8s.argo`) reads those files as
output parameters (``valueFrom.path``), e.g. ``export_model``'s ``path`` and ``version``, which exist only
once the step has run, and passes them to the next step's flags.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

_FIELD = re.compile(r"^[A-Za-z0-9_.-]+$")


def format_value(value: object) -> str:
    """A field's value as Argo and KFP read a parameter: strings as they are, everything else as JSON
    (``true``/``false``, numbers, objects)."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def write_results(directory: str | os.PathLike | None, result: Mapping[str, object]) -> list[Path]:
    """Write each field of ``result`` to ``<directory>/<field>`` (UTF-8, no trailing newline).

    Args:
        directory: where to write; empty or None writes nothing (the flag was not given).
        result: the step's JSON result (the same dict the CLI prints).

    Returns:
        The files written, in the order of ``result``.

    Raises:
        ValueError: a field name that is not a plain file name (letters, digits, ``_ . -``).
    """
    if not directory:
        return []
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for key, value in result.items():
        if not _FIELD.match(key) or key in (".", ".."):
            raise ValueError(f"result field {key!r} cannot name a file: use letters, digits, '_', '.', '-'")
        path = out / key
        path.write_text(format_value(value), encoding="utf-8")
        written.append(path)
    return written


RESULTS_DIR_HELP = "also write each field of the JSON result to DIR/<field> (Argo reads them as output parameters)"


def add_results_dir_argument(parser) -> None:
    """Add ``--results-dir DIR`` (default: none) to a step CLI's ``argparse`` parser."""
    parser.add_argument("--results-dir", default="", metavar="DIR", help=RESULTS_DIR_HELP)


def emit(result: Mapping[str, object], directory: str | os.PathLike | None) -> None:
    """A step CLI's output: ``result`` as indented JSON on stdout, and each field under ``directory``
    (see :func:`write_results`; nothing when ``directory`` is empty)."""
    print(json.dumps(result, indent=2))
    write_results(directory, result)

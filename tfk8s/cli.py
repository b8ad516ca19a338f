"""Helpers shared by the components' command lines (``python -m components.<step>``)."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

_F = TypeVar("_F", bound=Callable[..., None])


def boolean(text: str) -> bool:
    """An argparse ``type`` for ``true``/``false`` values (how KFP and Argo pass booleans).

    Raises:
        argparse.ArgumentTypeError: anything else.
    """
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def expected_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a step raises for bad input or a failed job: their messages say what to do, so a CLI
    prints them as one ``error:`` line instead of a traceback."""
    from tfk8s.export import ExportError
    from tfk8s.launcher import LaunchError
    from tfk8s.layout import VolumeWriteError

    errors: list[type[BaseException]] = [ValueError, LaunchError, ExportError, FileNotFoundError, VolumeWriteError]
    try:
        from tfk8s.kube.errors import KubernetesApiError, VolumeError

        errors += [KubernetesApiError, VolumeError]
    except ImportError:  # pragma: no cover - the kubernetes client is a dependency
        pass
    return tuple(errors)


def main_guard(main: _F) -> _F:
    """Wrap a CLI ``main``: an expected error (:func:`expected_errors`) prints ``<prog>: error: <message>`` on
    stderr and exits 1; anything else keeps its traceback (a bug to report)."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except expected_errors() as e:
            prog = main.__module__ if main.__module__ != "__main__" else Path(sys.argv[0]).stem
            print(f"{prog}: error: {e}", file=sys.stderr)
            raise SystemExit(1) from None

    return wrapper  # type: ignore[return-value]

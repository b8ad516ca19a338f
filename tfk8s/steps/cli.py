"""What every component's command line (``python -m components.<step>``) shares: true/false flags, one-line
errors instead of tracebacks, the result as JSON and as one file per field, and the flags generated from the
Kubernetes settings.

- **Errors.** :func:`main_guard` prints an expected error (:func:`expected_errors`: bad input, a failed job) as
  ``<prog>: error: <message>`` and exits 1; anything else keeps its traceback (a bug to report).
- **Results.** :func:`emit` prints the step's result as JSON; with ``--results-dir DIR`` it also writes every
  top-level field to ``DIR/<field>``. The Argo export (:mod:`tfk8s.submit.argo`) reads those files as output
  parameters (``valueFrom.path``), e.g. ``export_model``'s ``path`` and ``version``, which exist only once the
  step has run, and passes them to the next step's flags.
- **Kubernetes flags.** One flag per :class:`~tfk8s.launcher.kubernetes.settings.KubernetesParams` field
  (the one definition of their names, defaults and help): field ``replica_overrides`` is the flag
  ``--replica-overrides '{"ps": {"cpu": "500m"}}'``; structured values (objects, lists) are JSON strings. The
  PVC's mount path has no flag: it is the launch step's ``--volume-root`` (``/mnt/tfk8s`` in a cluster), so the
  replicas see the volume where the pipeline's steps do.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from tfk8s.launcher.kubernetes.settings import KubernetesParams, KubernetesSettings

_F = TypeVar("_F", bound=Callable[..., None])


def kfp_stand_ins() -> tuple[Any, ...]:
    """``(dsl, Dataset, Input, Metrics, Model, Output)`` for a component module run as its CLI (``python -m
    components.<step>``), where KFP is not needed: ``dsl.component(...)`` returns the function unchanged and
    ``Input[...]``/``Output[...]`` are plain annotations. Why: ``kfp``'s import costs about 0.6 s of CPU (2
    cores, TF 2.21 era, issue 26), and the launch step's CLI (the Argo export's step, a launcher pod) pays it
    before it creates the first replica. A module using these must only define its component, never compile
    or run it; under KFP (its executor imports the module by name) the real ``kfp.dsl`` is used."""

    class _Annotation:
        def __class_getitem__(cls, item):
            return cls

    class _Dsl:
        @staticmethod
        def component(*args, **kwargs):
            if args and callable(args[0]) and not kwargs:  # @dsl.component without arguments
                return args[0]
            return lambda fn: fn

    class Dataset: ...  # stand-ins: only annotations

    class Metrics: ...

    class Model: ...

    return _Dsl, Dataset, type("Input", (_Annotation,), {}), Metrics, Model, type("Output", (_Annotation,), {})


def upstream_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """An input artifact's metadata as its producer wrote it. A real KFP 2.x backend stores an output artifact's
    metadata in ML Metadata field by field and hands it to the next step unchanged from there
    (``backend/src/v2/metadata/converter.go``: ``StructValueToMLMDValue`` stores a mapping as ``{"struct":
    <the mapping>}``, a list as ``{"list": <the list>}``, a boolean as the integer 1 or 0; ``toRuntimeArtifact``
    reads them back as they are stored): seen through KFP 2.17.0, the evaluate step's summary named the replica
    type ``struct`` (docs/kfp.md, "What a real KFP showed"). Such a single-key wrapper is replaced by what it
    wraps, at every depth; lists are walked; anything else is kept (a boolean stays 1 or 0: read it as truthy).

    Args:
        metadata: ``artifact.metadata`` of a KFP input artifact (or None).

    Returns:
        A new dict (empty for None).
    """
    def unwrap(value: Any) -> Any:
        while isinstance(value, Mapping) and len(value) == 1 and (
                isinstance(value.get("struct"), Mapping) or isinstance(value.get("list"), list | tuple)):
            value = value.get("struct", value.get("list"))
        if isinstance(value, Mapping):
            return {k: unwrap(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [unwrap(v) for v in value]
        return value

    return unwrap(dict(metadata or {}))


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
    from tfk8s.core.errors import LaunchError, StepStoppedError
    from tfk8s.core.volume import VolumeWriteError
    from tfk8s.launcher.backends import user_errors
    from tfk8s.steps.model_versions import ExportError

    return (ValueError, LaunchError, ExportError, FileNotFoundError, VolumeWriteError, StepStoppedError,
            *user_errors())


TERMINATION_LOG = "/dev/termination-log"
"""Kubernetes' default ``terminationMessagePath``: what a container writes there becomes its terminated state's
``message``, which Argo puts in the step's node message (``argo get``) and ``kubectl describe pod`` shows."""
TERMINATION_LOG_ENV = "TFK8S_TERMINATION_LOG"
TERMINATED_EXIT_CODE = 143
"""What a step's CLI exits with when SIGTERM stopped it (after its cleanup): 128 + 15, as if the signal had;
SIGINT (Ctrl-C) gives 130, 128 + 2, likewise."""
_TERMINATION_MAX = 1024  # the kubelet keeps 4096 bytes per container; the reason's head is what matters


def one_line(message: str) -> str:
    """``message`` on one line: its lines stripped (and their list dashes) and joined with ``; ``, or a space
    after a line ending in ``:`` ("invalid pipeline parameters: a; b")."""
    out = ""
    for line in (ln.strip(" -") for ln in str(message).splitlines()):
        if line:
            out += (" " if out.endswith(":") else "; " if out else "") + line
    return out


def write_termination_message(message: str) -> bool:
    """Write ``message`` (on one line, at most 1024 characters) to the container's termination message file,
    ``$TFK8S_TERMINATION_LOG`` or :data:`TERMINATION_LOG`, when that file exists (in a pod the kubelet mounts
    it; elsewhere nothing is written). Returns whether it was written; never raises."""
    path = Path(os.environ.get(TERMINATION_LOG_ENV) or TERMINATION_LOG)
    try:
        if not path.is_file():
            return False
        path.write_text(one_line(message)[:_TERMINATION_MAX], encoding="utf-8")
    except OSError:
        return False
    return True


@contextlib.contextmanager
def failure_reported(step: str) -> Iterator[None]:
    """Inside a KFP component's function: an exception leaving the block is written, on one line as
    ``<step>: error: <message>``, as the container's termination message (:func:`write_termination_message`),
    then re-raised unchanged (KFP's executor prints its traceback and exits 1). Argo puts that message in the
    step's node (``main: Error (exit code 1): <step>: error: ...``), where KFP's UI and ``train.py --run --wait``
    (:func:`tfk8s.submit.kfp_runs.run_failures`) read it: KFP 2.17's API gives no other reason for a failed
    run. The CLIs have :func:`main_guard` for this; a component's function is run by KFP's executor instead.
    A ``SystemExit`` or ``KeyboardInterrupt`` passes unwritten."""
    try:
        yield
    except Exception as e:
        write_termination_message(f"{step}: error: {e}")
        raise


def main_guard(main: _F) -> _F:
    """Wrap a CLI ``main``: an expected error (:func:`expected_errors`) prints ``<prog>: error: <message>`` on
    stderr, writes it on one line as the container's termination message (:func:`write_termination_message`:
    Argo's step message, ``kubectl describe pod``) and exits 1, or 128 + the signal when a stop signal stopped
    the launcher or the step (:data:`TERMINATED_EXIT_CODE` for SIGTERM, 130 for SIGINT); anything else keeps its traceback
    (a bug to report)."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except expected_errors() as e:
            prog = main.__module__ if main.__module__ != "__main__" else Path(sys.argv[0]).stem
            print(f"{prog}: error: {e}", file=sys.stderr)
            write_termination_message(f"{prog}: error: {e}")
            # stopped by SIGTERM (cancelled, or its pod deleted or evicted): 143 = 128 + SIGTERM, as a process the
            # signal killed, so that an orchestrator can tell it from a failure (the Argo export retries on it);
            # by Ctrl-C: 130, which nothing retries
            # (LauncherTerminatedError, StepStoppedError: the signal is their signum)
            signum = getattr(e, "signum", None)
            from tfk8s.core.errors import StepStoppedError

            if isinstance(e, StepStoppedError):  # stopped: its cleanup is done; TensorFlow's teardown (1-5 s) is not
                for stream in (sys.stdout, sys.stderr):  # wanted by whoever asked it to stop
                    stream.flush()
                os._exit(128 + e.signum)
            raise SystemExit(128 + signum if isinstance(signum, int) else 1) from None

    return wrapper  # type: ignore[return-value]


# -- results ------------------------------------------------------------------------------------------------------
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


# -- flags ----------------------------------------------------------------------------------------------------------
def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_kubernetes_arguments(parser: argparse.ArgumentParser, *, skip: tuple[str, ...] = (),
                             unset_default: bool = False) -> None:
    """Add one flag per :class:`KubernetesParams` field (``--namespace ... --scheduler-name``) to ``parser``,
    in their own group.

    Args:
        skip: fields to leave out (a parser that has them as flags of its own).
        unset_default: defaults are None (not given) instead of the fields' defaults, so
            :func:`kubernetes_params_from_args` returns only the flags given.
    """
    group = parser.add_argument_group("kubernetes backend")
    for name, default in KubernetesParams.defaults().items():
        if name in skip:
            continue
        structured = isinstance(default, dict | list)
        kind = str if structured else boolean if isinstance(default, bool) else type(default)
        shown = "" if structured else default
        help_text = KubernetesParams.help(name) + (" (JSON)" if structured else "")
        group.add_argument(_flag(name), dest=name, type=kind, default=None if unset_default else shown,
                           help=f"{help_text} (default: {shown!r})")


def kubernetes_params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The values of the flags :func:`add_kubernetes_arguments` added, keyed by field name (flags left at a
    None default are left out)."""
    return {name: getattr(args, name) for name in KubernetesParams.names()
            if getattr(args, name, None) is not None}


def settings_from_args(args: argparse.Namespace) -> KubernetesSettings:
    """:meth:`KubernetesSettings.from_params` from parsed flags.

    Raises:
        ValueError: a bad value (the message names the parameter).
    """
    return KubernetesSettings.from_params(**kubernetes_params_from_args(args))

"""Every pipeline parameter, defined once (after TFX's ``standard_component_specs.py``): its name, type, default,
help, check, and the steps (components) that take it.

:data:`PARAMETERS` is the one table. What is generated from it:

- the pipeline's docstring parameter list (:func:`document`, a decorator under ``@dsl.pipeline``, so KFP's
  compiler reads the same text into each input's description);
- each component CLI's flags (:func:`add_step_arguments`: ``python -m components.<step> --help``);
- docs/pipeline.md's parameter table (:func:`markdown_table`; ``python -m tfk8s.steps.parameters`` prints it);
- the single-value checks of :func:`tfk8s.steps.params.problems` (:attr:`Parameter.check`).

KFP needs literals in a component's and the pipeline's signature, so those are not generated: tests/steps/test_params.py
compares each signature's defaults and annotations with the table (:func:`signature_mismatches`).

A parameter a step takes under another name (``workers`` is ``prepare_dataset``'s ``num_workers``) says so in
:attr:`Parameter.steps`; a step whose own default differs says so in :attr:`Parameter.step_defaults` (the launch
step used alone mounts no claim unless told). Nothing here imports KFP, TensorFlow or a Kubernetes client.
"""

from __future__ import annotations

import argparse
import inspect
import json
import textwrap
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tfk8s import DEFAULT_IMAGE
from tfk8s.core.builtin_trainer import DEFAULT_BATCH_SIZE, DEFAULT_EPOCHS, DEFAULT_LEARNING_RATE
from tfk8s.core.contract import check_command, parse_command
from tfk8s.core.job import SUCCESS_POLICIES
from tfk8s.core.layout import DEFAULT_ROOT, check_model_name
from tfk8s.core.policy import (
    DEFAULT_EVALUATOR_GRACE_S,
    DEFAULT_MAX_PREEMPTIONS,
    DEFAULT_MAX_RESTARTS,
    DEFAULT_PROGRESS_TIMEOUT_S,
    DEFAULT_RESTART_EXIT_CODE,
    DEFAULT_STARTUP_TIMEOUT_S,
    STOP_GRACE_S,
)
from tfk8s.launcher.backends import BACKENDS
from tfk8s.launcher.kubernetes.settings import KubernetesParams
from tfk8s.steps.cli import boolean

ENSURE = "ensure_volume"
PREPARE = "prepare_dataset"
LAUNCH = "launch_training"
EXPORT = "export_model"
EVALUATE = "evaluate_model"
PUSH = "push_model"
PIPELINE = "pipeline"
"""Used by the pipeline itself (a condition, a mount, every step's image), not only passed to a component."""
STEPS = (ENSURE, PREPARE, LAUNCH, EXPORT, EVALUATE, PUSH)
"""The components, in the pipeline's order."""

# A job-level deadline by default, so that a program that hangs without ever reporting progress (which the
# progress watchdog cannot judge) fails within a day instead of at the Kubernetes backstop (7 days); MNIST trains
# in about a minute, and a longer training sets timeout_s (0: no deadline).
DEFAULT_TIMEOUT_S = 24 * 3600
DEFAULT_MIN_ACCURACY = 0.98
"""The quality gate's floor (:class:`tfk8s.steps.evaluation.Thresholds` follows it)."""
DEFAULT_MAX_ACCURACY_DROP = -1.0
DEFAULT_PVC_NAME = "tfk8s-data"


@dataclass(frozen=True)
class Check:
    """A check of one parameter's value alone (those between parameters are :func:`tfk8s.steps.params.problems`).

    Attributes:
        rule: the rule in words, for the docs (``>= 1``).
        says: ``(name, value) -> sentence`` naming what is wrong and the fix, or None when the value passes.
    """

    rule: str
    says: Callable[[str, Any], str | None]

    def problem(self, name: str, value: Any) -> str | None:
        """The sentence saying what is wrong with ``value``, or None when it passes."""
        return self.says(name, value)


def _rule(rule: str, test: Callable[[Any], bool], message: str) -> Check:
    """A :class:`Check` from a test and its message (formatted with ``name`` and ``value``)."""
    return Check(rule, lambda name, value: None if test(value) else message.format(name=name, value=value))


def at_least(minimum: int) -> Check:
    """``>= minimum`` (counts, seconds)."""
    return _rule(f">= {minimum}", lambda v: v >= minimum, f"{{name}} must be >= {minimum}, got {{value}}")


def _model_name_problem(name: str, value: Any) -> str | None:
    if not value:  # empty: derived from the data set
        return None
    try:
        check_model_name(value)
    except ValueError as e:
        return str(e)
    return None


POSITIVE = _rule("> 0", lambda v: v > 0, "{name} must be > 0, got {value}")
FRACTION = _rule("in [0, 1]", lambda v: 0 <= v <= 1, "{name} must be in [0, 1], got {value}")
EXIT_CODE = _rule("0-255", lambda v: 0 <= v <= 255, "{name} must be an exit code 0-255 (0: none), got {value}")
NOT_EMPTY_METRIC = _rule("not empty", lambda v: bool(str(v).strip()),
                         "{name} is empty: name the metric the quality gate checks, e.g. accuracy")
SUCCESS_POLICY = _rule("'' or 'AllWorkers'", lambda v: v in SUCCESS_POLICIES,
                       "{name} must be '' (chief, or worker 0) or 'AllWorkers', got {value!r}")
BACKEND = _rule(" or ".join(BACKENDS), lambda v: v in BACKENDS, f"{{name}} must be one of {BACKENDS}, got {{value!r}}")
MODEL_NAME = Check("one path segment (empty: derived)", _model_name_problem)


def _command_problem(name: str, value: Any) -> str | None:
    if not value:
        return None
    try:
        check_command(parse_command(value))
    except ValueError as e:
        return f"{name}: {e}"
    return None


COMMAND = Check("argv or a shell line; known placeholders", _command_problem)


@dataclass(frozen=True)
class Parameter:
    """One pipeline parameter.

    Attributes:
        name: the pipeline's parameter name (``--param name=value``).
        kind: ``int``, ``float``, ``str``, ``bool`` or ``dict`` (the pipeline's annotation).
        default: the pipeline's default.
        help: what it does, one sentence or a few (the docstring, the CLIs' help and docs/pipeline.md say it).
        steps: the components that take it, each with the name of its argument there (usually ``name``).
        check: the check of its value alone, or None.
        pipeline: False for a component parameter the pipeline does not offer (``max_train_examples``).
        step_defaults: a step whose own default differs from ``default`` (used alone, not by the pipeline).
        used_by_pipeline: the pipeline itself uses it too (a condition, each step's image, the mounted claim).
        also: the checks with other parameters, in words (:func:`tfk8s.steps.params.problems` makes them).
    """

    name: str
    kind: type
    default: Any
    help: str
    steps: Mapping[str, str] = field(default_factory=dict)
    check: Check | None = None
    pipeline: bool = True
    step_defaults: Mapping[str, Any] = field(default_factory=dict)
    used_by_pipeline: bool = False
    also: str = ""

    def default_for(self, step: str) -> Any:
        """The default of this parameter's argument in ``step``."""
        return self.step_defaults.get(step, self.default)

    def problem(self, value: Any) -> str | None:
        """What :attr:`check` says about ``value`` (None: fine, or no check)."""
        return self.check.problem(self.name, value) if self.check else None


def _p(name: str, kind: type, default: Any, help_text: str, *steps: str, check: Check | None = None,
       pipeline: bool = True, renamed: Mapping[str, str] | None = None,
       step_defaults: Mapping[str, Any] | None = None, also: str = "") -> tuple[str, Parameter]:
    arguments = {s: name for s in steps if s != PIPELINE}
    arguments.update(renamed or {})
    ordered = {s: arguments[s] for s in STEPS if s in arguments}
    return name, Parameter(name, kind, default, help_text, MappingProxyType(ordered), check, pipeline,
                           MappingProxyType(dict(step_defaults or {})), PIPELINE in steps, also)


_K = KubernetesParams.defaults()
_KUBE_KEYS = ", ".join('gang ("native": all-or-nothing with a Kubernetes PodGroup)' if k == "gang" else k
                       for k in KubernetesParams.names() if k not in KubernetesParams.SHARED)
_PLACEHOLDERS = "{data_dir} {model_dir} {checkpoint_dir} {tensorboard_dir} {job_name} {replica_type} {replica_index}"

PARAMETERS: Mapping[str, Parameter] = MappingProxyType(dict([
    # -- the data set ------------------------------------------------------------------------------------------
    _p("dataset_name", str, "mnist", "TFDS data set with image + label features, e.g. mnist, fashion_mnist.",
       PREPARE),
    _p("data_dir", str, "", (
        "a data folder you prepared on the volume (TFRecords + metadata.json, or a tf.data snapshot; absolute, or "
        "relative to the volume); when given, nothing is prepared."), PREPARE),
    _p("tfds_data_dir", str, "", "TFDS data directory to read dataset_name from (empty: TFDS_DATA_DIR / TFDS's "
       "default).", PREPARE),
    _p("tfds_download", bool, True, (
        "use the local copy if present, else download it (true, the default; offline that fails within seconds "
        "saying how to point tfds_data_dir at a copy); false: never download."), renamed={PREPARE: "download"}),
    _p("num_shards", int, 0, "TFRecord files per split (0: 4 per chief/worker replica; at least one per replica).",
       PREPARE, check=at_least(0), also="0 or >= chief + workers"),
    _p("max_examples", int, 0, "examples per split to use (0: all), for smoke runs.", PREPARE, check=at_least(0)),
    _p("reuse_data", bool, True, (
        "reuse the data an earlier run prepared on the volume for the same data set, TFDS version, source files, "
        "max_examples and num_shards (<volume>/datasets/<name>/<version>/<key>/, checked against its manifest); "
        "false: prepare a fresh copy in the run's own folder."), PREPARE),
    # -- the program -------------------------------------------------------------------------------------------
    _p("command", str, "", (
        "the program every replica runs, a JSON list (argv) or a shell-style string, with placeholders "
        f"{_PLACEHOLDERS} (empty: the built-in trainer, python -m trainer.task). Contract: "
        "docs/training-program.md."), LAUNCH, check=COMMAND),
    _p("eval_command", str, "", (
        "evaluates the exported model when the built-in evaluation does not fit it (same contract; "
        "TFK8S_MODEL_DIR is the export); empty: such a model is \"not evaluated\" and gated on its training "
        "metrics."), EVALUATE, check=COMMAND),
    _p("image", str, DEFAULT_IMAGE, (
        "container image of every step and of the replicas (your program's image, FROM the project image)."),
       LAUNCH, PIPELINE),
    # -- the replicas ------------------------------------------------------------------------------------------
    _p("chief", int, 0, "chief replicas, 0 or 1 (1 is required with ps).", LAUNCH, PREPARE,
       also="0 or 1; 1 with ps"),
    _p("workers", int, 2, "worker replicas.", LAUNCH, renamed={PREPARE: "num_workers"},
       also="chief + workers >= 1; >= 1 with ps"),
    _p("ps", int, 0, "parameter servers (ParameterServerStrategy; needs chief=1 and workers >= 1).", LAUNCH,
       also="needs chief=1, workers >= 1"),
    _p("evaluator", int, 0, "0 or 1 sidecar evaluator (the built-in trainer evaluates each checkpoint).", LAUNCH,
       also="0 or 1"),
    # -- the built-in trainer ----------------------------------------------------------------------------------
    _p("epochs", int, DEFAULT_EPOCHS, "built-in trainer: training epochs.", LAUNCH, check=at_least(1)),
    _p("batch_size", int, DEFAULT_BATCH_SIZE, "built-in trainer: global batch size (without ps: a multiple of "
       "chief + workers).", LAUNCH, check=at_least(1), also="without ps: a multiple of chief + workers"),
    _p("learning_rate", float, DEFAULT_LEARNING_RATE, "built-in trainer: initial learning rate (cosine decay to 0 "
       "over the training).", LAUNCH, check=POSITIVE),
    _p("max_train_examples", int, 0, "built-in trainer: cap on training examples (0: all); the pipeline caps the "
       "data set with max_examples instead.", LAUNCH, pipeline=False, check=at_least(0)),
    # -- the run policy (tfk8s.core.job.RunPolicy) -------------------------------------------------------------
    _p("success_policy", str, "", "'' (the chief, or worker 0, succeeds) or 'AllWorkers'.", LAUNCH,
       check=SUCCESS_POLICY),
    _p("timeout_s", int, DEFAULT_TIMEOUT_S, "job-level deadline of the training in seconds (default a day; 0: "
       "none).", LAUNCH, check=at_least(0)),
    _p("progress_timeout_s", int, DEFAULT_PROGRESS_TIMEOUT_S, (
        "seconds a replica that has reported progress may go without a new report before it counts as hung and "
        "is restarted (as a retryable failure); 0: no watchdog."), LAUNCH, check=at_least(0)),
    _p("max_restarts", int, DEFAULT_MAX_RESTARTS, (
        "recreations allowed for retryable failures (exit >= 128 or restart_exit_code, killed by a signal, "
        "OOMKilled, no progress...), on either backend; preemptions (eviction, the scheduler's preemption, node "
        "loss, a Kueue suspension) do not use it."), LAUNCH, check=at_least(0)),
    _p("max_preemptions", int, DEFAULT_MAX_PREEMPTIONS, (
        "recreations allowed after preemptions (an eviction by someone else, the scheduler's preemption, a "
        "drained or lost node, a Kueue suspension), which do not use max_restarts; then the job fails."),
       LAUNCH, check=at_least(0)),
    _p("stop_grace_s", int, STOP_GRACE_S, (
        "seconds a replica gets between SIGTERM and SIGKILL when it is stopped (its pod's "
        "terminationGracePeriodSeconds): time to checkpoint on a preemption notice, e.g. with TensorFlow's "
        "PreemptionCheckpointHandler."), LAUNCH, check=at_least(0)),
    _p("restart_exit_code", int, DEFAULT_RESTART_EXIT_CODE, (
        "the exit code of a program asking to be restarted after saving on SIGTERM (TensorFlow's "
        "TerminationConfig: 42): retryable, not a program error; 0: none."), LAUNCH, check=EXIT_CODE),
    _p("startup_timeout_s", int, DEFAULT_STARTUP_TIMEOUT_S, (
        "seconds a chief/worker that reported it is starting may take to its first step before it counts as "
        "hung (a cluster that never forms); programs that never report progress are not watched; 0: off."),
       LAUNCH, check=at_least(0)),
    _p("evaluator_grace_s", int, DEFAULT_EVALUATOR_GRACE_S, (
        "seconds the evaluator may still run after the job succeeded, to evaluate the final checkpoint, before "
        "it is stopped."), LAUNCH, check=at_least(0)),
    _p("job_name_prefix", str, "tfk8s", "prefix of the training job's name (<prefix>-<run id>, cut to a DNS-1035 "
       "label).", LAUNCH),
    # -- export, evaluation, quality gate, push ----------------------------------------------------------------
    _p("model_name", str, "", (
        "names the export base <volume>/models/<model_name> and serving/<model_name> (empty: <data set>-cnn for "
        "the built-in trainer, <data set>-model for your program)."), EXPORT, EVALUATE, PUSH, check=MODEL_NAME),
    _p("gate_metric", str, "accuracy", (
        "the metric the quality gate checks against min_accuracy, higher is better (default accuracy; from the "
        "evaluation, else from what the training program reported)."), EVALUATE, check=NOT_EMPTY_METRIC),
    _p("min_accuracy", float, DEFAULT_MIN_ACCURACY, "quality gate: lowest value of gate_metric that is blessed.",
       EVALUATE, check=FRACTION),
    _p("max_accuracy_drop", float, DEFAULT_MAX_ACCURACY_DROP, "quality gate: largest drop vs the last blessed "
       "model (< 0: no check).", EVALUATE),
    _p("fail_on_unblessed", bool, False, "fail the run when the model is not blessed (else it is just not pushed).",
       PIPELINE),
    # -- where it runs: backend, volume ------------------------------------------------------------------------
    _p("backend", str, "kubernetes", "where the replicas run: kubernetes (Jobs + Services) or local (processes; "
       "--local sets it).", ENSURE, LAUNCH, check=BACKEND),
    _p("volume_root", str, DEFAULT_ROOT, "the PVC's mount path; must stay /mnt/tfk8s on Kubernetes (--local sets a "
       "folder).", ENSURE, PREPARE, LAUNCH, EXPORT, EVALUATE, PUSH, also="/mnt/tfk8s with backend kubernetes"),
    _p("pvc_name", str, DEFAULT_PVC_NAME, "PersistentVolumeClaim for data, checkpoints, logs and models "
       "(ReadWriteMany).", ENSURE, LAUNCH, PIPELINE, step_defaults={LAUNCH: _K["pvc_name"]},
       also="a DNS-1123 label (KFP names a volume after it); not empty with backend kubernetes"),
    _p("create_pvc", bool, False, "create the PVC if it does not exist.", ENSURE),
    _p("pvc_size", str, "20Gi", "its size when created, e.g. 20Gi.", ENSURE),
    _p("pvc_storage_class", str, "", "its StorageClass when created (empty: the cluster's default).", ENSURE),
    _p("namespace", str, _K["namespace"], "namespace of the training replicas (empty: the launcher pod's own).",
       ENSURE, LAUNCH),
    _p("kubernetes", dict, {}, (
        f"the replicas' Kubernetes settings, any of {_KUBE_KEYS} (KubernetesParams of the Kubernetes backend's "
        'settings); e.g. {"cpu": "2", "memory": "4Gi", "replica_overrides": {"ps": {"cpu": "500m"}}}.'), LAUNCH,
       also="known keys, valid values; none of namespace, image, pvc_name, max_restarts"),
]))
"""Every pipeline parameter (and the launch step's ``max_train_examples``), in the pipeline's order."""


def pipeline_parameters() -> dict[str, Parameter]:
    """The parameters the pipeline offers (:attr:`Parameter.pipeline`), in the table's order."""
    return {n: p for n, p in PARAMETERS.items() if p.pipeline}


def step_parameters(step: str) -> dict[str, Parameter]:
    """The parameters ``step`` (a component's name, :data:`STEPS`) takes, keyed by its argument name.

    Raises:
        ValueError: an unknown step (the message lists the known ones).
    """
    if step not in STEPS:
        raise ValueError(f"step must be one of {STEPS}, got {step!r}")
    return {p.steps[step]: p for p in PARAMETERS.values() if step in p.steps}


def _shown(value: Any) -> str:
    return json.dumps(value)


def add_step_arguments(parser: argparse.ArgumentParser, step: str, *, skip: tuple[str, ...] = ()) -> None:
    """One flag per parameter ``step`` takes (its argument name: ``--num-workers`` for ``workers`` in
    ``prepare_dataset``), with the table's type, default and help; ``true``/``false`` for booleans, JSON for a
    dict. ``skip``: argument names the CLI declares itself. The Argo export passes each component input as the
    flag of that name (:mod:`tfk8s.submit.argo`), so these are the flags it uses."""
    group = parser.add_argument_group("pipeline parameters (tfk8s.steps.parameters)")
    for argument, p in step_parameters(step).items():
        if argument in skip:
            continue
        kind: Callable[[str], Any] = boolean if p.kind is bool else json.loads if p.kind is dict else p.kind
        extra: dict[str, Any] = {"metavar": "{true,false}"} if p.kind is bool else {}
        if p.check is BACKEND:
            extra["choices"] = BACKENDS
        default = p.default_for(step)
        group.add_argument("--" + argument.replace("_", "-"), dest=argument, type=kind, default=default,
                           help=f"{p.help} (default: {_shown(default)})", **extra)


def step_arguments(args: argparse.Namespace, step: str) -> dict[str, Any]:
    """The values of :func:`add_step_arguments`' flags, keyed by ``step``'s argument names (ready to pass on as
    keywords)."""
    return {argument: getattr(args, argument) for argument in step_parameters(step) if hasattr(args, argument)}


def docstring_args(names: list[str] | None = None, indent: str = "    ") -> str:
    """The Google-style ``Args:`` section of the parameters ``names`` (default: the pipeline's), wrapped at 116
    characters; what :func:`document` puts in the pipeline's docstring."""
    lines = [f"{indent}Args:"]
    for name in names if names is not None else list(pipeline_parameters()):
        p = PARAMETERS[name]
        lines += textwrap.wrap(f"{name}: {p.help}", width=116, initial_indent=indent * 2,
                               subsequent_indent=indent * 3, break_on_hyphens=False, break_long_words=False)
    return "\n".join(lines)


def document(func: Callable) -> Callable:
    """A decorator (under ``@dsl.pipeline``) that appends the ``Args:`` section of ``func``'s parameters to its
    docstring, from the table, so that KFP's compiler reads the table's help into each input's description.

    Raises:
        ValueError: ``func`` has a parameter the table does not define, or its docstring already lists them.
    """
    names = list(inspect.signature(func).parameters)
    unknown = [n for n in names if n not in PARAMETERS]
    if unknown:
        raise ValueError(f"{func.__name__} takes {unknown}, which tfk8s.steps.parameters.PARAMETERS does not "
                         f"define: add them to the table")
    doc = inspect.cleandoc(func.__doc__ or "")
    if "Args:" in doc:
        raise ValueError(f"{func.__name__}'s docstring lists its arguments itself: leave them to the table")
    func.__doc__ = f"{doc}\n\n{textwrap.dedent(docstring_args(names))}\n"
    return func


def signature_mismatches(func: Callable, step: str | None = None) -> list[str]:
    """How ``func``'s signature differs from the table: for the pipeline (``step`` None) every pipeline
    parameter, in the table's order, with its type and default; for a component (``step``), every argument the
    table gives it (its name there, the step's default, the type). The KFP-only arguments (artifacts,
    ``run_id``) are not compared.

    Returns:
        One sentence per difference, empty when they agree.
    """
    params = inspect.signature(func).parameters
    out = []
    expected = ({n: p for n, p in pipeline_parameters().items()} if step is None else step_parameters(step))
    if step is None and list(params) != list(expected):
        out.append(f"the pipeline's parameters {list(params)} are not the table's {list(expected)} (in order)")
    for argument, p in expected.items():
        got = params.get(argument)
        if got is None:
            if step is None or argument == p.name:
                out.append(f"{step or 'pipeline'} lacks {argument}")
            continue
        default = p.default if step is None else p.default_for(step)
        if got.default != default or type(got.default) is not type(default):
            out.append(f"{step or 'pipeline'}: {argument} defaults to {got.default!r}, the table to {default!r}")
        if got.annotation not in (p.kind, p.kind.__name__):
            out.append(f"{step or 'pipeline'}: {argument} is annotated {got.annotation!r}, the table says "
                       f"{p.kind.__name__}")
    return out


def _rows() -> Iterator[str]:
    for p in PARAMETERS.values():
        steps = ", ".join(s if a == p.name else f"{s} (as {a})" for s, a in p.steps.items())
        if p.used_by_pipeline:
            steps = ", ".join(x for x in (steps, "the pipeline") if x)
        name = f"`{p.name}`" + ("" if p.pipeline else " (component only)")
        check = "; ".join(x for x in (p.check.rule if p.check else "", p.also) if x)
        helptext = p.help.replace("|", "\\|")
        yield (f"| {name} | {p.kind.__name__} | `{_shown(p.default)}` | {check} | {steps} | {helptext} |")


def markdown_table() -> str:
    """docs/pipeline.md's parameter table (a test keeps the doc equal to it)."""
    head = ["| parameter | type | default | check | steps | what it does |", "|---|---|---|---|---|---|"]
    return "\n".join([*head, *_rows()]) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")

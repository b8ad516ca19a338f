"""Every pipeline parameter, defined once (after TFX's ``standard_component_specs.py``): its name, type, default,
help, check, and the steps (components) that take it. This module is over 500 lines on purpose: the table (a row
per parameter), the one reading of it and what is generated from it stay together, so that a parameter is added,
checked and documented in one file.

:data:`PARAMETERS` is the one table. What is generated from it:

- the pipeline's docstring parameter list (:func:`document`, a decorator under ``@dsl.pipeline``, so KFP's
  compiler reads the same text into each input's description);
- each component CLI's flags (:func:`add_step_arguments`: ``python -m components.<step> --help``);
- docs/pipeline.md's parameter table (:func:`markdown_table`; ``python -m tfk8s.steps.parameters`` prints it);
- the single-value checks of :func:`problems` (:attr:`Parameter.check`).

The parameters are read here too, once: :func:`problems` (what ``python pipelines/train.py --local/--run/--schedule``
and the ensure-volume step check before anything runs: each value alone, then together) and
:meth:`LaunchSpec.from_params` (the launch step: the same reading, which builds the typed objects the launcher
takes, :class:`~tfk8s.core.cluster.ReplicaCounts`, :class:`~tfk8s.core.job.RunPolicy`, the backend's options).
Every message names the pipeline parameter (as in ``--param key=value``) and the fix.

KFP needs literals in a component's and the pipeline's signature, so those are not generated:
tests/steps/test_parameters.py compares each signature's defaults and annotations with the table
(:func:`signature_mismatches`) and checks that the launch component hands on every launch parameter.

A parameter a step takes under another name (``workers`` is ``prepare_dataset``'s ``num_workers``) says so in
:attr:`Parameter.steps`; a step whose own default differs says so in :attr:`Parameter.step_defaults`. Nothing here imports KFP, TensorFlow or a Kubernetes client.
"""

from __future__ import annotations

import argparse
import inspect
import json
import textwrap
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from tfk8s import DEFAULT_IMAGE
from tfk8s.core.builtin_trainer import DEFAULT_BATCH_SIZE, DEFAULT_EPOCHS, DEFAULT_LEARNING_RATE
from tfk8s.core.cluster import ClusterConfigError, ReplicaCounts
from tfk8s.core.contract import check_command, parse_command
from tfk8s.core.job import RUN_POLICY_FIELDS, SUCCESS_POLICIES, RunPolicy
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
from tfk8s.launcher.backends import BACKENDS, Backend, get_backend
from tfk8s.launcher.kubernetes.settings import (
    DNS1123_LABEL,
    DNS1123_LABEL_RULE,
    DNS1123_SUBDOMAIN,
    KubernetesParams,
    KubernetesSettings,
    parse_json,
)
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
    """A check of one parameter's value alone (those between parameters are :func:`problems`).

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


def _s3_uri_problem(name: str, value: Any) -> str | None:
    if not value:
        return None
    from tfk8s.steps.s3 import S3Error, parse_s3_uri

    try:
        parse_s3_uri(value, name)
    except S3Error as e:
        return str(e)
    return None


def _s3_endpoint_problem(name: str, value: Any) -> str | None:
    from tfk8s.steps.s3 import S3Error, check_endpoint

    try:
        check_endpoint(value)
    except S3Error as e:
        return str(e)
    return None


S3_URI = Check("'' or s3://bucket[/prefix]", _s3_uri_problem)
S3_ENDPOINT = Check("'' or http(s)://host[:port]", _s3_endpoint_problem)
KSERVE_MODES = ("", "print", "apply")
S3_SECRET_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
"""The keys of ``s3_secret`` handed to the steps that read or write a bucket, each as the env var of its name."""
KSERVE = _rule("'', 'print' or 'apply'", lambda v: v in KSERVE_MODES,
               "{name} must be '' (none), 'print' or 'apply', got {value!r}")


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
        also: the checks with other parameters, in words (:func:`problems` makes them).
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
    _p("data_uri", str, "", (
        "an S3 prefix holding the data, s3://bucket/prefix (TFRecords + metadata.json, *.tfrecord files or a "
        "tf.data snapshot): read into the volume's store keyed by the objects' ETags and sizes, so an unchanged "
        "prefix is reused without reading it; credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. "
        "docs/pipeline.md, Buckets."), PREPARE, check=S3_URI,
       also="not with data_dir"),
    _p("s3_endpoint", str, "", (
        "the S3-compatible server of data_uri and model_uri, http(s)://host:port (MinIO, SeaweedFS, "
        "https://storage.googleapis.com for GCS's S3 mode); empty: AWS_ENDPOINT_URL, else AWS S3."), PREPARE, PUSH,
       check=S3_ENDPOINT),
    _p("s3_secret", str, "tfk8s-s3", (
        "the Kubernetes Secret whose keys AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) become "
        "the prepare and push steps' env vars, for data_uri and model_uri (optional: a missing Secret or key "
        "sets nothing); --local runs read the AWS_* environment instead."), PIPELINE,
       check=_rule("a DNS-1123 subdomain", lambda v: bool(DNS1123_SUBDOMAIN.fullmatch(str(v))),
                   "{name} must name a Secret (a DNS-1123 subdomain, e.g. tfk8s-s3), got {value!r}")),
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
    _p("model_uri", str, "", (
        "an S3 prefix the blessed version is also uploaded to, as <model_uri>/<model name>/<version>/ (TF "
        "Serving's layout, never overwritten; saved_model.pb last); empty: the volume only."), PUSH, check=S3_URI),
    _p("kserve", str, "", (
        "a KServe InferenceService (TensorFlow predictor) for the pushed model: print (rendered in the step's "
        "log, for review) or apply (created or updated, when the cluster serves KServe's CRD); empty: none. "
        "storageUri is model_uri's base when set, else pvc://<pvc_name>/serving/<model name>."), PUSH,
       check=KSERVE),
    _p("fail_on_unblessed", bool, False, "fail the run when the model is not blessed (else it is just not pushed).",
       PIPELINE),
    # -- where it runs: backend, volume ------------------------------------------------------------------------
    _p("backend", str, "kubernetes", "where the replicas run: kubernetes (Jobs + Services) or local (processes; "
       "--local sets it).", ENSURE, LAUNCH, check=BACKEND),
    _p("volume_root", str, DEFAULT_ROOT, "the PVC's mount path; must stay /mnt/tfk8s on Kubernetes (--local sets a "
       "folder).", ENSURE, PREPARE, LAUNCH, EXPORT, EVALUATE, PUSH, also="/mnt/tfk8s with backend kubernetes"),
    _p("pvc_name", str, DEFAULT_PVC_NAME, "PersistentVolumeClaim for data, checkpoints, logs and models "
       "(ReadWriteMany).", ENSURE, LAUNCH, PUSH, PIPELINE,
       also="a DNS-1123 label (KFP names a volume after it); not empty with backend kubernetes"),
    _p("create_pvc", bool, False, "create the PVC if it does not exist.", ENSURE),
    _p("pvc_size", str, "20Gi", "its size when created, e.g. 20Gi.", ENSURE),
    _p("pvc_storage_class", str, "", "its StorageClass when created (empty: the cluster's default).", ENSURE),
    _p("namespace", str, _K["namespace"], "namespace of the training replicas and of kserve's InferenceService "
       "(empty: the launcher pod's own).", ENSURE, LAUNCH, PUSH),
    _p("kubernetes", dict, {}, (
        f"the replicas' Kubernetes settings, any of {_KUBE_KEYS} (KubernetesParams of the Kubernetes backend's "
        'settings); e.g. {"cpu": "2", "memory": "4Gi", "replica_overrides": {"ps": {"cpu": "500m"}}}.'), LAUNCH,
       also="known keys, valid values; none of namespace, image, pvc_name, max_restarts"),
]))
"""Every pipeline parameter (and the launch step's ``max_train_examples``), in the pipeline's order."""


OWN_PARAMETERS = (*KubernetesParams.SHARED, "max_restarts")
"""Settings of the replicas that are pipeline parameters of their own, not keys of the ``kubernetes`` dict."""

LAUNCH_PARAMETERS: Mapping[str, Parameter] = MappingProxyType({
    name: p for name, p in PARAMETERS.items() if LAUNCH in p.steps and name not in ("volume_root", "backend")})
"""The launch step's parameters (:data:`PARAMETERS` taken by ``launch_training``, less ``volume_root`` and
``backend``, which say where rather than what): what :class:`LaunchSpec` is built from."""

_REPLICA_COUNTS = ("chief", "workers", "ps", "evaluator")


# -- the launch, typed once -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainerSpec:
    """The built-in trainer's hyperparameters (``python -m trainer.task``); ignored by a user's ``command``.

    Attributes:
        epochs: training epochs.
        batch_size: the global batch (split evenly over the chief/worker replicas without ps).
        learning_rate: initial learning rate (cosine decay to 0).
        max_train_examples: cap on training examples (0: all), for smoke runs.
    """

    epochs: int = DEFAULT_EPOCHS
    batch_size: int = DEFAULT_BATCH_SIZE
    learning_rate: float = DEFAULT_LEARNING_RATE
    max_train_examples: int = 0


@dataclass(frozen=True)
class LaunchSpec:
    """The launch step's parameters, each read once from what the pipeline (or the CLI) passed, into the typed
    objects the launcher takes (:meth:`from_params`).

    Attributes:
        backend: the backend that runs the replicas (:func:`tfk8s.launcher.backends.get_backend` of the
            ``backend`` parameter).
        volume_root: the shared volume's root, where the run's folders are (and, on Kubernetes, where every
            replica mounts the claim).
        replicas: chief / worker / ps / evaluator counts.
        trainer: the built-in trainer's hyperparameters.
        command: the user's program (argv, may hold the placeholders of :mod:`tfk8s.core.contract`); empty: the
            built-in trainer.
        run_policy: how the job is judged and bounded (:class:`tfk8s.core.job.RunPolicy`: ``max_restarts``, the
            restart budget on either backend; ``timeout_s``, 0: no deadline; ``success_policy``; the graces and
            watchdogs), carried whole to the :class:`~tfk8s.core.job.TrainingJob`.
        job_name_prefix: prefix of the job name ``<prefix>-<run id>``.
        kubernetes: the Kubernetes settings as given (the ``kubernetes`` dict with ``namespace``, ``image``,
            ``pvc_name`` laid over it).
        options: what the backend made of them, checked (:meth:`tfk8s.launcher.backends.Launch.options`:
            Kubernetes, a :class:`~tfk8s.launcher.kubernetes.settings.KubernetesSettings`; local, None).
    """

    backend: Backend
    volume_root: str = DEFAULT_ROOT
    replicas: ReplicaCounts = field(default_factory=ReplicaCounts)
    trainer: TrainerSpec = field(default_factory=TrainerSpec)
    command: tuple[str, ...] = ()
    run_policy: RunPolicy = field(default_factory=lambda: RunPolicy(**_run_policy_defaults()))
    job_name_prefix: str = "tfk8s"
    kubernetes: KubernetesParams = field(default_factory=KubernetesParams)
    options: Any = None

    @property
    def is_builtin_trainer(self) -> bool:
        """True when no ``command`` was given: the replicas run ``python -m trainer.task``."""
        return not self.command

    @classmethod
    def from_params(cls, params: Mapping[str, Any], *, backend: str, volume_root: str) -> LaunchSpec:
        """The launch from its parameters (:data:`LAUNCH_PARAMETERS` names with the types of the table; other
        keys are ignored, a missing one keeps the launch step's default), checked alone and together (what
        :func:`problems` says) while each part is built, once: ``backend`` (a name of
        :data:`~tfk8s.launcher.backends.BACKENDS`) becomes the backend object, which turns the Kubernetes settings
        into its options (:meth:`~tfk8s.launcher.backends.Launch.options`, the claim mounted at ``volume_root``).

        Raises:
            ValueError: every problem found, one per line, each naming the parameter and the fix.
        """
        values = {k: p.default_for(LAUNCH) for k, p in LAUNCH_PARAMETERS.items()}
        values.update({k: v for k, v in params.items() if k in LAUNCH_PARAMETERS})
        values.update(backend=backend, volume_root=volume_root)
        parts, found = _read(values)
        if found:
            raise ValueError(_listing(found))
        return cls(**parts)


def _run_policy_defaults() -> dict[str, Any]:
    """The run policy's fields that are pipeline parameters, at the table's defaults."""
    return {k: PARAMETERS[k].default for k in RUN_POLICY_FIELDS if k in PARAMETERS}


def kube_dict(value: Any) -> dict:
    """The ``kubernetes`` parameter as a dict (a JSON string is parsed; empty: ``{}``).

    Raises:
        ValueError: not a JSON object.
    """
    if isinstance(value, str) and not value.strip():
        return {}
    return dict(parse_json(value, "kubernetes", dict, '{"cpu": "2", "memory": "4Gi"}'))


def kubernetes_params(value: Any, shared: Mapping[str, Any] | None = None) -> KubernetesParams:
    """The ``kubernetes`` parameter (a dict or its JSON) with the pipeline's own ``namespace``/``image``/
    ``pvc_name`` (``shared``) laid over it.

    Raises:
        ValueError: not an object, a key of :data:`OWN_PARAMETERS` (a parameter of its own), or an unknown key
            (the message names it, a close match and the known ones).
    """
    given = kube_dict(value)
    taken = sorted(set(given) & set(OWN_PARAMETERS))
    if taken:
        raise ValueError(f"kubernetes must not set {taken}: they are pipeline parameters of their own "
                         f"(--param {taken[0]}=...)")
    return replace(KubernetesParams.from_dict(given), **dict(shared or {}))


def _read(params: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Every given value of ``params`` (pipeline parameter names) checked, alone (the table's checks) and
    together, and the launch's typed parts built from them on the way (a part only when its values were given;
    the backend's options when ``backend`` names one).

    Returns:
        ``(parts, problems)``: the :class:`LaunchSpec` fields built, and one sentence per problem.
    """
    out: list[str] = []
    parts: dict[str, Any] = {}
    get = params.get
    for name, p in PARAMETERS.items():  # each value alone, by the table's check
        if name in params and p.check is not None:
            found = p.problem(get(name))
            if found:
                out.append(found)
    for key, minimum in (("schedule_timeout_s", 1), ("gpus", 0)):  # flat Kubernetes keys of older callers
        if key in params and get(key) < minimum:
            out.append(f"{key} must be >= {minimum}, got {get(key)}")
    if all(k in params for k in _REPLICA_COUNTS):
        try:
            parts["replicas"] = counts = ReplicaCounts(chief=get("chief"), worker=get("workers"), ps=get("ps"),
                                                       evaluator=get("evaluator"))
        except ClusterConfigError as e:
            out.append(str(e).replace("worker >= 1", "workers >= 1").replace("use more workers", "raise workers"))
        else:
            readers = counts.num_trainers
            if not counts.ps and get("batch_size", 1) >= 1 and get("batch_size", readers) % readers:
                b = get("batch_size")
                out.append(f"batch_size {b} is the global batch, split evenly over the {readers} chief/worker "
                           f"replicas: make it a multiple of {readers}, e.g. {b - b % readers or readers}")
            if get("num_shards", 0) and get("num_shards") < readers:
                out.append(f"num_shards {get('num_shards')} < {readers} chief/worker replicas: each reads its own "
                           f"shard files; use 0 (4 per replica) or at least {readers}")
    if get("data_uri", "") and get("data_dir", ""):
        out.append(f"data_uri {get('data_uri')} and data_dir {get('data_dir')} are both set: give one (data_uri "
                   "reads a bucket, data_dir a folder on the volume)")
    if all(k in params for k in ("epochs", "batch_size", "learning_rate", "max_train_examples")):
        parts["trainer"] = TrainerSpec(epochs=get("epochs"), batch_size=get("batch_size"),
                                       learning_rate=float(get("learning_rate")),
                                       max_train_examples=get("max_train_examples"))
    if "command" in params and not PARAMETERS["command"].problem(get("command")):
        parts["command"] = parse_command(get("command"))
    policy = [k for k in RUN_POLICY_FIELDS if k in PARAMETERS]
    if all(k in params for k in policy) and not any(PARAMETERS[k].problem(get(k)) for k in policy):
        try:
            parts["run_policy"] = RunPolicy(**{k: get(k) for k in policy})
        except ValueError as e:
            out.append(str(e))
    if "job_name_prefix" in params:
        parts["job_name_prefix"] = get("job_name_prefix")
    backend = get_backend(get("backend")) if get("backend") in BACKENDS else None  # else: the table's check said
    if backend is not None:
        parts["backend"] = backend
    if "volume_root" in params:
        parts["volume_root"] = str(get("volume_root"))
    claimed = backend is not None and not backend.local_paths  # Kubernetes: every step and replica mounts the PVC
    if claimed:
        if "volume_root" in params and get("volume_root") != DEFAULT_ROOT:
            out.append(f"volume_root must be {DEFAULT_ROOT} on Kubernetes (where every step and replica mounts the "
                       f"PVC), got {get('volume_root')!r}; it is for --local runs")
        if "pvc_name" in params and not get("pvc_name"):
            out.append("pvc_name is empty: name the PersistentVolumeClaim for data, checkpoints and models "
                       "(without it the model would be written to a pod's ephemeral storage)")
    out += _kubernetes(params, parts, backend, claimed)
    out += _claim_name_as_volume_name(get("pvc_name"))  # the KFP pipeline mounts it on every backend
    return parts, out


def _kubernetes(params: Mapping[str, Any], parts: dict[str, Any], backend: Backend | None,
                claimed: bool) -> list[str]:
    """The ``kubernetes`` dict and the parameters of their own (namespace, image, pvc_name) read into
    :class:`KubernetesParams` (``parts["kubernetes"]``) and made the backend's options (``parts["options"]``,
    once); a backend that mounts no claim (local) does not use them, but a typo, a bad quantity or claim name is
    said now, not on a cluster (only the given values are checked then).

    Returns:
        What :meth:`KubernetesSettings.resolve` and :func:`kubernetes_params` refused, one sentence each.
    """
    shared = {k: params[k] for k in KubernetesParams.SHARED if k in params}
    try:
        given = {**kube_dict(params.get("kubernetes")), **shared}
        kube = kubernetes_params(params.get("kubernetes"), shared)  # unknown keys, own parameters
        parts["kubernetes"] = kube
        if claimed:
            parts["options"] = backend.options(kube, str(params.get("volume_root", DEFAULT_ROOT)))
        else:
            if given:
                KubernetesSettings.from_params(**{"image": DEFAULT_IMAGE, **given})
            if backend is not None:
                parts["options"] = backend.options(kube, str(params.get("volume_root", DEFAULT_ROOT)))
    except ValueError as e:
        return [str(e)]
    return []


def _claim_name_as_volume_name(pvc_name: Any) -> list[str]:
    """A claim name Kubernetes accepts (a DNS-1123 subdomain, which the launcher checks) that KFP cannot mount:
    kfp-kubernetes' ``mount_pvc`` names the pod's volume after the claim, and a pod's volume name must be a
    DNS-1123 label (no dots, at most 63 characters). Without this, ``data.v1`` passes ensure-volume and the first
    step that mounts it fails at pod creation ("spec.volumes[0].name: Invalid value")."""
    name = str(pvc_name or "")
    if not DNS1123_SUBDOMAIN.match(name) or len(name) > 253:
        return []  # not a claim name at all: the launcher's own check says so
    if DNS1123_LABEL.match(name) and len(name) <= 63:
        return []
    fixed = name.replace(".", "-")[:63].strip("-")
    return [(f"pvc_name {name!r} is a valid claim name, but KFP names each step's pod volume after the claim, "
             f"which must be {DNS1123_LABEL_RULE}: rename the claim, e.g. {fixed!r}")]


def problems(params: Mapping[str, Any]) -> list[str]:
    """Everything wrong with ``params`` (pipeline parameter names; a missing key is not checked): each value
    by its row's check, the replica counts, the batch and shards against them, the backend's volume rules, the
    Kubernetes settings. What ``python pipelines/train.py --local/--run/--schedule`` says before starting
    (seconds, nothing written), from the same reading :meth:`LaunchSpec.from_params` does at launch.

    Returns:
        One sentence per problem, empty when all is well.
    """
    return _read(params)[1]


def _listing(found: list[str]) -> str:
    return "invalid pipeline parameters:\n  - " + "\n  - ".join(found)


def check(params: Mapping[str, Any]) -> None:
    """Raise if :func:`problems` finds any.

    Raises:
        ValueError: listing every problem, one per line.
    """
    found = problems(params)
    if found:
        raise ValueError(_listing(found))


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per parameter of the launch step (:func:`add_step_arguments`: ``--volume-root``, ``--backend``,
    ``--workers``, ``--command``, ``--kubernetes JSON``...), and the ``kubernetes`` dict's keys as flags of their
    own (``--cpu 2``...; :func:`tfk8s.steps.cli.add_kubernetes_arguments`), which win over the same keys in
    ``--kubernetes``."""
    from tfk8s.steps.cli import add_kubernetes_arguments

    add_step_arguments(parser, LAUNCH)
    add_kubernetes_arguments(parser, skip=KubernetesParams.SHARED, unset_default=True)


def launch_params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed values of :func:`add_launch_arguments`' flags, keyed by parameter name; the ``kubernetes``
    flags given are merged into ``kubernetes``."""
    from tfk8s.steps.cli import kubernetes_params_from_args

    params = {name: getattr(args, name) for name in LAUNCH_PARAMETERS}
    flags = {k: v for k, v in kubernetes_params_from_args(args).items() if k not in KubernetesParams.SHARED}
    params["kubernetes"] = {**(params["kubernetes"] or {}), **flags}
    return params


# -- the table's uses: lists, CLI flags, docstrings, docs -----------------------------------------------------------
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

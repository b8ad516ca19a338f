"""A training job, backend-neutral: what it is (:class:`TrainingJob`), what a finished one reports
(:class:`LaunchResult`), its name (:func:`job_name`) and when it has succeeded (:func:`is_success`).

A backend of :mod:`tfk8s.launcher` ("start a replica, watch it, stop it") takes a :class:`TrainingJob` and
returns a :class:`LaunchResult` or raises one of :mod:`tfk8s.core.errors`; how it reacts to a failed replica
is :mod:`tfk8s.core.policy`.

Semantics follow the Kubeflow Training Operator's TFJob: the success policy (``""``: the chief, or worker 0
without a chief; ``"AllWorkers"``: every chief/worker), ps and evaluator never count towards success and are
stopped once the job has succeeded.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

from tfk8s.core import contract, policy
from tfk8s.core.cluster import Replica, ReplicaCounts, ReplicaType, coordinator

SUCCESS_POLICY_DEFAULT = ""
SUCCESS_POLICY_ALL_WORKERS = "AllWorkers"
SUCCESS_POLICIES = (SUCCESS_POLICY_DEFAULT, SUCCESS_POLICY_ALL_WORKERS)

DEFAULT_PORT = 2222
LABEL_JOB_NAME = "tfk8s.dev/job-name"
"""The label every Kubernetes object of a job carries (``kubectl get pods -l tfk8s.dev/job-name=<job>``); the job
record names it too, whatever the backend."""
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# Longest job name such that "<job>-evaluator-<index>" still fits a 63-character DNS-1035 label
# with up to 3 index digits.
MAX_JOB_NAME_LEN = 63 - len("-evaluator-") - 3


@dataclass(frozen=True)
class RunPolicy:
    """How a job's run is judged and bounded: the Kubeflow Training Operator's ``RunPolicy`` (``backoffLimit``,
    ``activeDeadlineSeconds``) with TFJob's success policy and what this project adds (the stop grace, the restart
    exit code, the progress and startup watchdogs, the evaluator's grace). It travels whole from the pipeline's
    parameters (:class:`tfk8s.steps.parameters.LaunchSpec`) to the :class:`TrainingJob` every backend runs.

    Attributes:
        max_restarts: the restart budget, on every backend: how many recreations (of a replica's restart
            group, :func:`tfk8s.core.policy.restart_group`) retryable failures may use before the job fails;
            preemptions do not use it (:mod:`tfk8s.core.policy`).
        max_preemptions: how many recreations after preemptions (eviction by someone else, the scheduler's
            preemption, a drained or lost node, a Kueue suspension) the job may have before it fails: free of
            ``max_restarts``, but bounded, so that a job preempted again and again ends (issue 25.2).
        timeout_s: job-level deadline in seconds (None: no deadline; the pipeline's 0 becomes None in
            :func:`tfk8s.steps.launch_training.build_job`).
        grace_period_s: after success, how long lagging workers may take to finish before being stopped.
        stop_grace_s: seconds a replica gets between SIGTERM and SIGKILL whenever it is stopped (a pod's
            ``terminationGracePeriodSeconds``; locally the process group's signals): time to checkpoint on a
            preemption notice.
        restart_exit_code: the exit code with which a program asks to be restarted after saving on SIGTERM
            (TensorFlow's ``TerminationConfig``: 42); retryable. 0: none.
        progress_timeout_s: seconds a replica that has reported progress at least once (in its current
            attempt) may go without a new report before it counts as hung: it is stopped and its restart
            group recreated while the restart budget lasts, then the job fails (reason ``NoProgress``).
            0 disables the watchdog; replicas that never report are never treated as hung.
        startup_timeout_s: seconds a chief/worker that reported ``starting`` may take to report its first
            step before it counts as hung (:mod:`tfk8s.launcher.watchdog`); 0: not watched.
        evaluator_grace_s: seconds the evaluator may run after the job succeeded, to evaluate the final
            checkpoint and exit by itself, before it is stopped.
        success_policy: ``""`` (chief, or worker 0) or ``"AllWorkers"`` (TFJob's ``successPolicy``).

    Raises:
        ValueError: an unknown success policy, a negative timeout, grace or restart budget, or a restart exit
            code outside 0-255; the message names the field.
    """

    max_restarts: int = policy.DEFAULT_MAX_RESTARTS
    max_preemptions: int = policy.DEFAULT_MAX_PREEMPTIONS
    timeout_s: float | None = None
    grace_period_s: float = 30.0
    stop_grace_s: float = policy.STOP_GRACE_S
    restart_exit_code: int = policy.DEFAULT_RESTART_EXIT_CODE
    progress_timeout_s: float = 0.0
    startup_timeout_s: float = 0.0
    evaluator_grace_s: float = policy.DEFAULT_EVALUATOR_GRACE_S
    success_policy: str = SUCCESS_POLICY_DEFAULT

    def __post_init__(self) -> None:
        if self.success_policy not in SUCCESS_POLICIES:
            raise ValueError(f"success_policy must be one of {SUCCESS_POLICIES}, got {self.success_policy!r}")
        for name in ("progress_timeout_s", "startup_timeout_s", "stop_grace_s", "evaluator_grace_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0 seconds, got {getattr(self, name)!r}")
        if (isinstance(self.restart_exit_code, bool) or not isinstance(self.restart_exit_code, int)
                or not 0 <= self.restart_exit_code <= 255):
            raise ValueError(f"restart_exit_code must be an exit code 0-255 (0: none), got {self.restart_exit_code!r}")
        for name in ("max_restarts", "max_preemptions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


RUN_POLICY_FIELDS = tuple(f.name for f in fields(RunPolicy))
"""The names of :class:`RunPolicy`'s fields, which :class:`TrainingJob` also takes as keywords and reads back."""


@dataclass(frozen=True, init=False)
class TrainingJob:
    """A distributed training job, independent of where its replicas run.

    ``TrainingJob(name, counts, command, run_policy=RunPolicy(max_restarts=1))``; each :class:`RunPolicy` field
    may also be given as a keyword of its own (``TrainingJob(name, counts, command, max_restarts=1)``), laid over
    ``run_policy``, and is read back as a read-only attribute (``job.max_restarts``, ``job.timeout_s``...).

    Attributes:
        name: the job name, a DNS-1035 label of at most :data:`MAX_JOB_NAME_LEN` characters
            (use :func:`job_name` to derive one).
        counts: replica counts per type.
        command: the program every replica runs (argv); each replica finds its role in TF_CONFIG. It may
            hold the placeholders of :mod:`tfk8s.core.contract` (``{model_dir}``...), substituted per replica
            (:meth:`replica_command`); literal braces are written ``{{``/``}}``.
        env: extra environment variables for every replica.
        port: the TensorFlow server port of each replica (Kubernetes: the Service port; local: ignored,
            each replica gets a free port).
        train_dir: the run's train folder on the shared volume; with it every replica gets the contract's
            environment (:func:`tfk8s.core.contract.replica_env`); empty: TF_CONFIG only (launcher tests). The
            progress watchdog reads each replica's ``<train dir>/progress/<type>-<index>.json``
            (:mod:`tfk8s.core.progress`).
        data_dir: the prepared data folder (``TFK8S_DATA_DIR``).
        run_policy: how the run is judged and bounded (:class:`RunPolicy`: restart budget, deadline, graces,
            watchdogs, success policy).

    Raises:
        ValueError: on an invalid name, an empty command, an invalid run policy (:class:`RunPolicy`), an unknown
            keyword, or an unknown placeholder / unbalanced brace in the command
            (:class:`tfk8s.core.contract.PlaceholderError`).
    """

    name: str
    counts: ReplicaCounts
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    port: int = DEFAULT_PORT
    train_dir: str = ""
    data_dir: str = ""
    run_policy: RunPolicy = field(default_factory=RunPolicy)

    def __init__(self, name: str, counts: ReplicaCounts, command: tuple[str, ...] | list[str],
                 env: Mapping[str, str] | None = None, *, port: int = DEFAULT_PORT, train_dir: str = "",
                 data_dir: str = "", run_policy: RunPolicy | None = None, **policy_fields) -> None:
        unknown = sorted(set(policy_fields) - set(RUN_POLICY_FIELDS))
        if unknown:
            raise ValueError(f"TrainingJob got unknown keywords {unknown}: the run policy's are {RUN_POLICY_FIELDS}")
        run_policy = replace(run_policy or RunPolicy(), **policy_fields) if policy_fields else (run_policy
                                                                                               or RunPolicy())
        if not _DNS1035.match(name) or len(name) > MAX_JOB_NAME_LEN:
            raise ValueError(
                f"job name {name!r} must be a DNS-1035 label (lower-case letters, digits, '-', starting "
                f"with a letter) of at most {MAX_JOB_NAME_LEN} characters: derive it with tfk8s.core.job.job_name()"
            )
        if not command:
            raise ValueError("command must name the program every replica runs, e.g. python -m trainer.task")
        set_ = object.__setattr__
        set_(self, "name", name)
        set_(self, "counts", counts)
        set_(self, "command", tuple(command))
        set_(self, "env", dict(env or {}))
        set_(self, "port", port)
        set_(self, "train_dir", str(train_dir or ""))
        set_(self, "data_dir", str(data_dir or ""))
        set_(self, "run_policy", run_policy)
        contract.check_command(self.command)  # an unknown placeholder fails before any replica starts

    # The run policy's fields, read-only, as the launcher reads them (job.max_restarts...).
    max_restarts = property(lambda self: self.run_policy.max_restarts, doc="RunPolicy.max_restarts")
    max_preemptions = property(lambda self: self.run_policy.max_preemptions, doc="RunPolicy.max_preemptions")
    timeout_s = property(lambda self: self.run_policy.timeout_s, doc="RunPolicy.timeout_s")
    grace_period_s = property(lambda self: self.run_policy.grace_period_s, doc="RunPolicy.grace_period_s")
    stop_grace_s = property(lambda self: self.run_policy.stop_grace_s, doc="RunPolicy.stop_grace_s")
    restart_exit_code = property(lambda self: self.run_policy.restart_exit_code, doc="RunPolicy.restart_exit_code")
    progress_timeout_s = property(lambda self: self.run_policy.progress_timeout_s,
                                  doc="RunPolicy.progress_timeout_s")
    startup_timeout_s = property(lambda self: self.run_policy.startup_timeout_s, doc="RunPolicy.startup_timeout_s")
    evaluator_grace_s = property(lambda self: self.run_policy.evaluator_grace_s, doc="RunPolicy.evaluator_grace_s")
    success_policy = property(lambda self: self.run_policy.success_policy, doc="RunPolicy.success_policy")

    def contract_env(self, replica: Replica) -> dict[str, str]:
        """The contract's variables of ``replica`` (:func:`tfk8s.core.contract.replica_env`); ``{}`` without
        ``train_dir``. Every backend sets them next to TF_CONFIG."""
        if not self.train_dir:
            return {}
        return contract.replica_env(self.name, replica, coordinator(self.counts), self.train_dir,
                                    self.data_dir, self.counts)

    def replica_command(self, replica: Replica, command: tuple[str, ...] | None = None) -> tuple[str, ...]:
        """``command`` (default: the job's; a per-type override otherwise) with this replica's placeholder
        values substituted (:func:`tfk8s.core.contract.substitute`); ``{job_name}``, ``{replica_type}`` and
        ``{replica_index}`` work even without ``train_dir``.

        Raises:
            tfk8s.core.contract.PlaceholderError: an unknown placeholder, or a directory one without ``train_dir``.
        """
        values = self.contract_env(replica) or {
            contract.ENV_JOB_NAME: self.name, contract.ENV_REPLICA_TYPE: replica.replica_type.value,
            contract.ENV_REPLICA_INDEX: str(replica.index)}
        return contract.substitute(self.command if command is None else command, values)


@dataclass
class LaunchResult:
    """What a finished training job reports.

    Attributes:
        job_name: the job's name.
        exit_codes: exit code of every replica that exited by itself, keyed by its label (``worker-1``);
            replicas stopped by the launcher (ps, evaluator) are absent.
        stopped: labels of the replicas the launcher stopped after success.
        wall_time_s: seconds from the launcher's start (or re-attach) to success.
        restarts: how many recreations (of one replica, or of its restart group: the whole worker set under
            MultiWorkerMirroredStrategy, the chief and every ps for a ps under ParameterServerStrategy) were
            used from the restart budget (``max_restarts``), on either backend.
        cluster_spec: the cluster spec the replicas ran with (``{"worker": ["host:port", ...], ...}``).
        preemptions: recreations after a preemption (eviction, the scheduler's preemption, node loss, a Kueue
            suspension), not counted against ``max_restarts``.
    """

    job_name: str
    exit_codes: dict[str, int]
    stopped: list[str]
    wall_time_s: float
    restarts: int = 0
    cluster_spec: dict[str, list[str]] = field(default_factory=dict)
    preemptions: int = 0


def job_name(run_id: str, prefix: str = "tfk8s") -> str:
    """A deterministic, valid job name for a pipeline run: ``<prefix>-<run id>``, sanitised.

    The same ``run_id`` always gives the same name, so a restarted launcher re-attaches to its replicas.
    Characters outside ``[a-z0-9-]`` become ``-``; a name longer than :data:`MAX_JOB_NAME_LEN` is cut and
    ends with 8 hex characters of the SHA-256 of the full name, so distinct long ids stay distinct.

    Raises:
        ValueError: if ``prefix`` does not start with a letter.
    """
    if not prefix or not prefix[0].isalpha():
        raise ValueError(f"job name prefix {prefix!r} must start with a letter, e.g. 'tfk8s'")
    raw = f"{prefix}-{run_id}".lower() if run_id else prefix.lower()
    name = re.sub(r"[^a-z0-9-]+", "-", raw)
    name = re.sub(r"-{2,}", "-", name).strip("-")
    if len(name) > MAX_JOB_NAME_LEN:
        digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
        name = name[: MAX_JOB_NAME_LEN - 9].rstrip("-") + "-" + digest
    return name


def job_selector(name: str) -> str:
    """The label selector of every object of job ``name``: ``tfk8s.dev/job-name=<name>``."""
    return f"{LABEL_JOB_NAME}={name}"


def is_success(policy: str, counts: ReplicaCounts, succeeded: set[Replica]) -> bool:
    """Whether the job has succeeded under ``policy`` given the replicas that exited 0.

    ``""``: the chief succeeded (worker 0 when there is no chief). ``"AllWorkers"``: every chief and worker
    succeeded. ps and evaluator never count (Training Operator semantics).
    """
    if policy == SUCCESS_POLICY_ALL_WORKERS:
        trainers = {r for r in counts.replicas() if r.replica_type in (ReplicaType.CHIEF, ReplicaType.WORKER)}
        return trainers <= succeeded
    return coordinator(counts) in succeeded

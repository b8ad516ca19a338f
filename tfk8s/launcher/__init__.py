"""The launch step, backend-neutral: what a training job is, when it has succeeded, and how it fails.

A backend ("start a replica, watch it, stop it") takes a :class:`TrainingJob` and returns a
:class:`LaunchResult` or raises a :class:`LaunchError`. Backends:

- :mod:`tfk8s.launcher.local`      each replica a process on 127.0.0.1 (tests, ``make run``)
- :mod:`tfk8s.launcher.kubernetes` one batch/v1 Job + one headless Service per replica

Semantics follow the Kubeflow Training Operator's TFJob: the success policy (``""``: the chief, or worker 0
without a chief; ``"AllWorkers"``: every chief/worker), ps and evaluator never count towards success and are
stopped once the job has succeeded.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tfk8s import contract
from tfk8s.cluster import Replica, ReplicaCounts, ReplicaType, coordinator

SUCCESS_POLICY_DEFAULT = ""
SUCCESS_POLICY_ALL_WORKERS = "AllWorkers"
SUCCESS_POLICIES = (SUCCESS_POLICY_DEFAULT, SUCCESS_POLICY_ALL_WORKERS)

DEFAULT_PORT = 2222
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# Longest job name such that "<job>-evaluator-<index>" still fits a 63-character DNS-1035 label
# with up to 3 index digits.
MAX_JOB_NAME_LEN = 63 - len("-evaluator-") - 3


class LaunchError(RuntimeError):
    """The training job failed; the message names the replica, the reason and what to do."""


class ReplicaFailedError(LaunchError):
    """A replica ended unsuccessfully.

    Attributes:
        replica: the failed replica.
        exit_code: its exit code (None when it never started or has none, e.g. an image pull error).
        reason: a short machine-readable reason (``Error``, ``OOMKilled``, ``ImagePullBackOff``,
            ``Unschedulable``, ``Signal``...).
        last_lines: the tail of its log.
    """

    def __init__(self, replica: Replica, reason: str, exit_code: int | None = None,
                 last_lines: Sequence[str] = (), detail: str = ""):
        self.replica, self.reason, self.exit_code = replica, reason, exit_code
        self.last_lines, self.detail = list(last_lines), detail
        code = f" with exit code {exit_code}" if exit_code is not None else ""
        msg = f"replica {replica.label} failed{code}: {reason}"
        if detail:
            msg += f" ({detail})"
        if self.last_lines:
            msg += f"\nlast {len(self.last_lines)} log lines of {replica.label}:\n" + "\n".join(
                f"  {line}" for line in self.last_lines)
        super().__init__(msg)


class RestartBudgetExhaustedError(ReplicaFailedError):
    """A retryable failure (exit code >= 128, killed by a signal, OOMKilled, eviction, preemption, node loss, no
    progress) after the restart budget (``max_restarts``) was used up. ``reason`` names the last failure.
    Both backends raise it (:mod:`tfk8s.launcher.policy`)."""


class LauncherTerminatedError(LaunchError):
    """The launcher got SIGTERM (the pipeline run was cancelled or its pod evicted); every replica was stopped."""


class JobTimeoutError(LaunchError):
    """The training job did not finish within its deadline."""


@dataclass(frozen=True)
class TrainingJob:
    """A distributed training job, independent of where its replicas run.

    Attributes:
        name: the job name, a DNS-1035 label of at most :data:`MAX_JOB_NAME_LEN` characters
            (use :func:`job_name` to derive one).
        counts: replica counts per type.
        command: the program every replica runs (argv); each replica finds its role in TF_CONFIG. It may
            hold the placeholders of :mod:`tfk8s.contract` (``{model_dir}``...), substituted per replica
            (:meth:`replica_command`); literal braces are written ``{{``/``}}``.
        env: extra environment variables for every replica.
        success_policy: ``""`` (chief, or worker 0) or ``"AllWorkers"``.
        port: the TensorFlow server port of each replica (Kubernetes: the Service port; local: ignored,
            each replica gets a free port).
        timeout_s: job-level deadline in seconds (None: no deadline).
        grace_period_s: after success, how long lagging workers may take to finish before being stopped.
        train_dir: the run's train folder on the shared volume; with it every replica gets the contract's
            environment (:func:`tfk8s.contract.replica_env`); empty: TF_CONFIG only (launcher tests). The
            progress watchdog reads each replica's ``<train dir>/progress/<type>-<index>.json``
            (:mod:`tfk8s.progress`).
        data_dir: the prepared data folder (``TFK8S_DATA_DIR``).
        progress_timeout_s: seconds a replica that has reported progress at least once (in its current
            attempt) may go without a new report before it counts as hung: it is stopped and its restart
            group recreated while the restart budget lasts, then the job fails (reason ``NoProgress``).
            0 disables the watchdog; replicas that never report are never treated as hung.

    Raises:
        ValueError: on an invalid name, an empty command, an unknown success policy, a negative progress
            timeout, or an unknown placeholder / unbalanced brace in the command
            (:class:`tfk8s.contract.PlaceholderError`).
    """

    name: str
    counts: ReplicaCounts
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    success_policy: str = SUCCESS_POLICY_DEFAULT
    port: int = DEFAULT_PORT
    timeout_s: float | None = None
    grace_period_s: float = 30.0
    train_dir: str = ""
    data_dir: str = ""
    progress_timeout_s: float = 0.0

    def __post_init__(self) -> None:
        if not _DNS1035.match(self.name) or len(self.name) > MAX_JOB_NAME_LEN:
            raise ValueError(
                f"job name {self.name!r} must be a DNS-1035 label (lower-case letters, digits, '-', starting "
                f"with a letter) of at most {MAX_JOB_NAME_LEN} characters: derive it with tfk8s.launcher.job_name()"
            )
        if not self.command:
            raise ValueError("command must name the program every replica runs, e.g. python -m trainer.task")
        if self.success_policy not in SUCCESS_POLICIES:
            raise ValueError(f"success_policy must be one of {SUCCESS_POLICIES}, got {self.success_policy!r}")
        if not self.progress_timeout_s >= 0:
            raise ValueError(f"progress_timeout_s must be >= 0 seconds (0: no watchdog), got "
                             f"{self.progress_timeout_s!r}")
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "env", dict(self.env))
        object.__setattr__(self, "train_dir", str(self.train_dir or ""))
        object.__setattr__(self, "data_dir", str(self.data_dir or ""))
        contract.check_command(self.command)  # an unknown placeholder fails before any replica starts

    def contract_env(self, replica: Replica) -> dict[str, str]:
        """The contract's variables of ``replica`` (:func:`tfk8s.contract.replica_env`); ``{}`` without
        ``train_dir``. Every backend sets them next to TF_CONFIG."""
        if not self.train_dir:
            return {}
        return contract.replica_env(self.name, replica, coordinator(self.counts), self.train_dir,
                                    self.data_dir)

    def replica_command(self, replica: Replica, command: tuple[str, ...] | None = None) -> tuple[str, ...]:
        """``command`` (default: the job's; a per-type override otherwise) with this replica's placeholder
        values substituted (:func:`tfk8s.contract.substitute`); ``{job_name}``, ``{replica_type}`` and
        ``{replica_index}`` work even without ``train_dir``.

        Raises:
            tfk8s.contract.PlaceholderError: an unknown placeholder, or a directory one without ``train_dir``.
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
    """

    job_name: str
    exit_codes: dict[str, int]
    stopped: list[str]
    wall_time_s: float
    restarts: int = 0
    cluster_spec: dict[str, list[str]] = field(default_factory=dict)


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


def is_success(policy: str, counts: ReplicaCounts, succeeded: set[Replica]) -> bool:
    """Whether the job has succeeded under ``policy`` given the replicas that exited 0.

    ``""``: the chief succeeded (worker 0 when there is no chief). ``"AllWorkers"``: every chief and worker
    succeeded. ps and evaluator never count (Training Operator semantics).
    """
    if policy == SUCCESS_POLICY_ALL_WORKERS:
        trainers = {r for r in counts.replicas() if r.replica_type in (ReplicaType.CHIEF, ReplicaType.WORKER)}
        return trainers <= succeeded
    return coordinator(counts) in succeeded

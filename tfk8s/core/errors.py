"""How a training job fails, backend-neutral: every launcher raises one of these (a backend may add subclasses,
e.g. :mod:`tfk8s.launcher.kubernetes.errors`). Every message names the replica, the reason and what to do."""

from __future__ import annotations

import signal
from collections.abc import Sequence

from tfk8s.core.cluster import Replica
from tfk8s.core.diagnosis import LogTail


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
        error: the first line of the exception that ended it (``""``: none seen), shown even when a long
            exception message pushed it out of ``last_lines`` (:class:`tfk8s.core.diagnosis.LogTail`).
        hints: the fixes of known errors found in its log (:data:`tfk8s.core.diagnosis.KNOWN_ERRORS`).

    ``last_lines`` may be a :class:`~tfk8s.core.diagnosis.LogTail`: its lines, exception and hints are taken.
    """

    def __init__(self, replica: Replica, reason: str, exit_code: int | None = None,
                 last_lines: Sequence[str] | LogTail = (), detail: str = "", *, error: str = "",
                 hints: Sequence[str] = ()):
        if isinstance(last_lines, LogTail):
            error, hints, last_lines = error or last_lines.error, hints or last_lines.hints(), last_lines.lines()
        self.replica, self.reason, self.exit_code = replica, reason, exit_code
        self.last_lines, self.detail = list(last_lines), detail
        self.error, self.hints = error, list(hints)
        code = f" with exit code {exit_code}" if exit_code is not None else ""
        msg = f"replica {replica.label} failed{code}: {reason}"
        if detail:
            msg += f" ({detail})"
        if error:
            msg += f"\n  error: {error}"
        for hint in self.hints:
            msg += f"\n  fix: {hint}"
        if self.last_lines:
            msg += f"\nlast {len(self.last_lines)} log lines of {replica.label}:\n" + "\n".join(
                f"  {line}" for line in self.last_lines)
        super().__init__(msg)


class RestartBudgetExhaustedError(ReplicaFailedError):
    """A retryable failure (exit code >= 128, killed by a signal, OOMKilled, eviction, preemption, node loss, no
    progress) after the restart budget (``max_restarts``) was used up. ``reason`` names the last failure.
    Both backends raise it (:mod:`tfk8s.core.policy`)."""


def stop_cause(signum: int) -> str:
    """Why a launcher stopped, in words, for a stop signal: SIGINT ``interrupted by the user (SIGINT: Ctrl-C or
    kill -INT)``, SIGTERM ``got SIGTERM (the run was cancelled, or its pod evicted)``, else ``got <name>``."""
    if signum == signal.SIGINT:
        return "was interrupted by the user (SIGINT: Ctrl-C or kill -INT)"
    if signum == signal.SIGTERM:
        return "got SIGTERM (the run was cancelled, or its pod evicted)"
    try:
        return f"got {signal.Signals(signum).name}"
    except ValueError:
        return f"got signal {signum}"


class LauncherTerminatedError(LaunchError):
    """The launcher got a stop signal: SIGTERM (the pipeline run was cancelled or its pod evicted) or SIGINT
    (Ctrl-C, ``kill -INT``); every replica was stopped (both take one path, :mod:`tfk8s.launcher.stopping`).

    Attributes:
        signum: the signal (``signal.SIGTERM`` unless told).
    """

    def __init__(self, message: str, signum: int = signal.SIGTERM):
        self.signum = signum
        super().__init__(message)

    @classmethod
    def by_signal(cls, signum: int, job_name: str, outcome: str = "was stopped") -> LauncherTerminatedError:
        """``the launcher <cause>; every replica of <job> <outcome>``, cause from :func:`stop_cause`."""
        return cls(f"the launcher {stop_cause(signum)}; every replica of {job_name} {outcome}", signum)


class JobTimeoutError(LaunchError):
    """The training job did not finish within its deadline."""


class StepStoppedError(RuntimeError):
    """A step other than the launch step got a stop signal (SIGTERM: the run was cancelled or its pod evicted;
    SIGINT: Ctrl-C) and stopped at the next safe point, leaving nothing half-written (the prepare step:
    :func:`tfk8s.steps.prepare_dataset.stops_between_batches`). A step's CLI exits 128 + ``signum``.

    Attributes:
        signum: the signal.
    """

    def __init__(self, message: str, signum: int = signal.SIGTERM):
        self.signum = signum
        super().__init__(message)

"""How a training job fails, backend-neutral: every launcher raises one of these (a backend may add subclasses,
e.g. :mod:`tfk8s.launcher.kubernetes.errors`). Every message names the replica, the reason and what to do."""

from __future__ import annotations

from collections.abc import Sequence

from tfk8s.core.cluster import Replica


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
    Both backends raise it (:mod:`tfk8s.core.policy`)."""


class LauncherTerminatedError(LaunchError):
    """The launcher got SIGTERM (the pipeline run was cancelled or its pod evicted); every replica was stopped."""


class JobTimeoutError(LaunchError):
    """The training job did not finish within its deadline."""

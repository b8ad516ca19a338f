"""The ways submitting to a pipeline backend fails before or while it is asked; every message says what to fix."""

from __future__ import annotations


class KfpClientError(Exception):
    """Base of the errors below; the message says what to fix."""


class CronError(KfpClientError, ValueError):
    """A cron expression KFP would reject or read differently than meant (e.g. a 5-field Unix cron)."""


class ParameterError(KfpClientError, ValueError):
    """An unknown pipeline parameter, or a value that does not parse as the declared type."""


class KfpUnreachableError(KfpClientError, ConnectionError):
    """Nothing answered at the host within the timeout (refused, unknown name, timed out)."""


class KfpApiError(KfpClientError):
    """The KFP API answered, but not as hoped: wrong endpoint (404), auth (401/403, login redirect), errors."""

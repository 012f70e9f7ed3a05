"""Every error Legato raises on purpose; each message names the problem and what to do."""

from __future__ import annotations


class LegatoError(Exception):
    """Base of Legato's errors."""


class ConfigurationError(LegatoError):
    """A bad database URL, schema name or option."""


class DatabaseUnavailable(LegatoError):
    """The database cannot be reached (refused, unknown host, wrong password, no such
    database); the message names the host and port and the cause. ``retryable`` is
    False when the server answered and refused (waiting will not help)."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class LoopFailed(LegatoError):
    """A loop of a ``Runtime`` crashed more often in a row than its restart policy allows
    (or failed while stopping); raised by ``Runtime.stop``."""


class IncompatibleDatabase(LegatoError):
    """The server is too old, or its Legato schema is not at this package's migration head."""


class InvalidRunId(LegatoError):
    """A run id that is not a UUIDv7 or falls outside every existing partition."""


class UnknownWorkflow(LegatoError):
    """No workflow of that name is registered or deployed."""


class InvalidInput(LegatoError):
    """A run input or signal payload that fails its model."""


class PayloadTooLarge(LegatoError):
    """A payload over the configured size limit."""


class RunNotFound(LegatoError):
    """No run with that id."""


class RunFinished(LegatoError):
    """The run has already finished, so it cannot be signalled or cancelled."""


class RunFailed(LegatoError):
    """Raised by ``Client.result`` when the run failed or was cancelled."""

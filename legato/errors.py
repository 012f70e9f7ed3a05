"""Every error Legato raises on purpose; each message names the problem and what to do."""

from __future__ import annotations


class LegatoError(Exception):
    """Base of Legato's errors."""


class ConfigurationError(LegatoError):
    """A bad database URL, schema name or option."""


class DatabaseUnavailable(LegatoError):
    """The database cannot be reached."""


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
